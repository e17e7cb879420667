#pragma once
// One thread that runs tasks one at a time, in the order they were posted: the service's model
// loads and unloads, which build and tear down models (milliseconds to seconds) and so never run
// on a transport's thread, and never two at once.

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

namespace oip::detail {

class serial_worker {
 public:
  serial_worker() : thread_{[this] { run(); }} {}
  serial_worker(const serial_worker&) = delete;
  serial_worker& operator=(const serial_worker&) = delete;
  /// Runs what was posted, then stops.
  ~serial_worker() {
    {
      const std::lock_guard lock{mutex_};
      stopping_ = true;
    }
    posted_.notify_one();
    thread_.join();
  }

  /// Whether the caller is this worker's thread (a task that waited for another would wait for
  /// ever).
  [[nodiscard]] bool runs_here() const noexcept {
    return std::this_thread::get_id() == thread_.get_id();
  }

  /// `task` must not throw.
  void post(std::function<void()> task) {
    {
      const std::lock_guard lock{mutex_};
      tasks_.push_back(std::move(task));
    }
    posted_.notify_one();
  }

 private:
  void run() {
    std::unique_lock lock{mutex_};
    for (;;) {
      posted_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      task();
      task = nullptr;  // what it captured goes here too, off the lock
      lock.lock();
    }
  }

  std::mutex mutex_;
  std::condition_variable posted_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::thread thread_;  // last: it starts once the members above exist
};

}  // namespace oip::detail
