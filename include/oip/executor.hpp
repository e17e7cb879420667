#pragma once
/// \file
/// Runs models off the transport threads: a bounded queue and a pool of worker threads.

#include <oip/export.hpp>
#include <oip/status.hpp>

#include <cstddef>
#include <functional>
#include <memory>

namespace oip {

struct executor_options {
  /// Worker threads; 0 picks the number of hardware threads.
  std::size_t threads = 0;
  /// Jobs waiting for a worker beyond which `submit` refuses with 503.
  std::size_t queue_capacity = 1024;
};

/// A fixed pool of worker threads fed by a bounded FIFO queue.
///
/// Example:
/// \code
///   oip::executor pool{{.threads = 4, .queue_capacity = 256}};
///   if (oip::status s = pool.submit([] { run_model(); }); !s.ok()) reply(s);
/// \endcode
class OIP_EXPORT executor {
 public:
  explicit executor(executor_options options = {});
  executor(const executor&) = delete;
  executor& operator=(const executor&) = delete;
  /// Runs every job already queued, then joins the workers.
  ~executor();

  /// Queues `job`; a 503 status (nothing queued) when the queue is full or the executor is
  /// shutting down.
  [[nodiscard]] status submit(std::function<void()> job);

  [[nodiscard]] std::size_t threads() const noexcept;
  [[nodiscard]] std::size_t queued() const;

 private:
  struct state;
  std::unique_ptr<state> state_;
};

}  // namespace oip
