#pragma once
// The end of a client that one of its own callbacks ended: the callback's thread cannot wait
// there for the calls it runs, its own included, so the end goes to a thread of its own. The
// process's exit waits for those threads (a few seconds at most), so that none runs on into the
// destruction of the libraries' static objects.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <thread>
#include <utility>

namespace oip::detail {

class ending_threads {
 public:
  // Runs `end` on a thread of its own; false when no thread could be started.
  template <class End>
  [[nodiscard]] bool start(End end) noexcept {
    {
      const std::lock_guard lock{mutex_};
      ++running_;
    }
    try {
      std::thread{[this, end = std::move(end)]() mutable {
        end();
        {
          [[maybe_unused]] End gone = std::move(end);  // what it holds goes before the count
        }
        const std::lock_guard lock{mutex_};
        --running_;
        done_.notify_all();
      }}.detach();
      return true;
    } catch (...) {
      const std::lock_guard lock{mutex_};
      --running_;
      return false;
    }
  }

  void wait(std::chrono::milliseconds bound) {
    std::unique_lock lock{mutex_};
    done_.wait_for(lock, bound, [&] { return running_ == 0; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_;
  std::size_t running_ = 0;
};

// Never destroyed: a thread that outlives the wait at exit still finds it.
inline ending_threads& ending() {
  static auto* const threads = new ending_threads;  // NOLINT(cppcoreguidelines-owning-memory)
  return *threads;
}

struct wait_for_ending_threads {
  wait_for_ending_threads() = default;
  wait_for_ending_threads(const wait_for_ending_threads&) = delete;
  wait_for_ending_threads& operator=(const wait_for_ending_threads&) = delete;
  ~wait_for_ending_threads() { ending().wait(std::chrono::seconds{5}); }
};

template <class End>
[[nodiscard]] bool end_elsewhere(End end) noexcept {
  static const wait_for_ending_threads at_exit;
  return ending().start(std::move(end));
}

}  // namespace oip::detail
