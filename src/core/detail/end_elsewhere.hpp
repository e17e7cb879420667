#pragma once
// The end of a client that one of its own callbacks ended: the callback's thread cannot wait
// there for the calls it runs, its own included, so the end goes to a thread of its own. The
// process's exit waits for those threads (a few seconds at most), so that none runs on into the
// destruction of the libraries' static objects.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

namespace oip::detail {

class ending_threads {
 public:
  ending_threads() = default;
  ending_threads(const ending_threads&) = delete;
  ending_threads& operator=(const ending_threads&) = delete;
  ~ending_threads() {
    std::unique_lock lock{mutex_};
    done_.wait_for(lock, std::chrono::seconds{5}, [&] { return running_ == 0; });
  }

  // Runs `end` on a thread of its own; false when no thread could be started.
  [[nodiscard]] bool start(std::function<void()> end) noexcept {
    {
      const std::lock_guard lock{mutex_};
      ++running_;
    }
    try {
      std::thread{[this, end = std::move(end)]() mutable {
        end();
        end = nullptr;  // what it holds goes before the exit may go on
        const std::lock_guard lock{mutex_};
        --running_;
        done_.notify_all();  // under the lock: the waiter may be gone once it is released
      }}.detach();
      return true;
    } catch (...) {
      const std::lock_guard lock{mutex_};
      --running_;
      return false;
    }
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_;
  std::size_t running_ = 0;
};

[[nodiscard]] inline bool end_elsewhere(std::function<void()> end) noexcept {
  static ending_threads threads;
  return threads.start(std::move(end));
}

}  // namespace oip::detail
