#include <oip/executor.hpp>
#include <oip/log.hpp>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

namespace oip {

struct executor::state {
  std::size_t capacity = 0;
  mutable std::mutex mutex;
  std::condition_variable wake;
  std::deque<std::function<void()>> jobs;
  bool stopping = false;
  std::vector<std::thread> workers;

  void work() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock lock{mutex};
        wake.wait(lock, [&] { return stopping || !jobs.empty(); });
        if (jobs.empty()) return;  // stopping, and nothing left to run
        job = std::move(jobs.front());
        jobs.pop_front();
      }
      // A job answers its own failures; one that throws anyway (out of memory where nothing
      // caught it) must not end the worker, and with it the process.
      try {
        job();
      } catch (...) {  // the line names no exception: making its text could throw in turn
        log(log_level::error, "a worker's job failed with an exception; the worker goes on");
      }
    }
  }
};

executor::executor(executor_options options) : state_{std::make_unique<state>()} {
  std::size_t threads = options.threads;
  if (threads == 0) threads = std::max(1U, std::thread::hardware_concurrency());
  state_->capacity = std::max<std::size_t>(options.queue_capacity, 1);
  state_->workers.reserve(threads);
  for (std::size_t i = 0; i < threads; ++i) {
    state_->workers.emplace_back([s = state_.get()] { s->work(); });
  }
}

executor::~executor() {
  {
    const std::lock_guard lock{state_->mutex};
    state_->stopping = true;
  }
  state_->wake.notify_all();
  for (std::thread& t : state_->workers) t.join();
}

status executor::submit(std::function<void()> job) {
  {
    const std::lock_guard lock{state_->mutex};
    if (state_->stopping) return status{errc::unavailable, "the server is shutting down"};
    if (state_->jobs.size() >= state_->capacity) {
      return status{errc::unavailable,
                    fmt::format("the server is overloaded: {} requests are already queued",
                                state_->jobs.size())};
    }
    state_->jobs.push_back(std::move(job));
  }
  state_->wake.notify_one();
  return {};
}

std::size_t executor::threads() const noexcept { return state_->workers.size(); }

std::size_t executor::queued() const {
  const std::lock_guard lock{state_->mutex};
  return state_->jobs.size();
}

}  // namespace oip
