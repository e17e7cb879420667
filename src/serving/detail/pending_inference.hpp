#pragma once
// Internal: what the inference service keeps of one request between its admission and its reply,
// shared by the service and its batch queues.

#include "serving/detail/response_cache.hpp"

#include <oip/infer.hpp>
#include <oip/memory_budget.hpp>
#include <oip/model.hpp>
#include <oip/reply_sink.hpp>
#include <oip/repository.hpp>
#include <oip/shared_memory.hpp>
#include <oip/trace.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace oip::detail {

// One inference between its validation and its reply.
struct pending_inference {
  model_lease lease;
  std::optional<std::string> id;
  std::vector<requested_output> asked;
  std::shared_ptr<reply_sink> sink;  // null once answered
  // Orders a decoupled model's sends, from any thread, with each other and with its completion:
  // the sink is called by one at a time, never after it was taken.
  std::mutex replying;
  bool decoupled = false;
  std::size_t max_unsent = 0;                   // limits::max_unsent_responses
  std::chrono::milliseconds max_unread_wait{};  // limits::max_unread_wait
  std::uint64_t responses = 0;  // sent so far (a decoupled model's), under `replying`
  std::vector<shared_memory_destination> destinations;  // of its outputs in shared memory
  cancellation cancel;
  std::uint64_t batch = 1;
  std::uint64_t priority_level = 0;  // in its model's batch queue (batching.hpp)
  // Where its response goes to the response cache once made: the cache, the request's key (and
  // its bytes in the memory budget), and how long the lookup that missed took.
  std::shared_ptr<response_cache> cache;
  detail::cache_key key_in_cache;
  std::optional<memory_budget::lease> cache_key_room;
  std::uint64_t cache_lookup_ns = 0;
  // Counted in its model's pending requests from when it is queued until it runs or fails.
  std::atomic<bool> counted_pending{false};
  using clock = std::chrono::steady_clock;
  clock::time_point received;
  clock::time_point queued;
  clock::time_point started;
  // When the model called `finish`, in `clock` ticks (0: not yet): what a call of `execute` is
  // measured by when it finishes within the call (see `model_statistics::add_execute_call`).
  std::atomic<clock::rep> finished_at{0};
  clock::time_point last_response;       // a decoupled model's previous response, under `replying`
  std::optional<tracer::sampled> trace;  // when the tracer sampled it
  std::shared_ptr<tracer> traces;        // set with trace
  transport_trace* transport = nullptr;  // the transport's part in the trace, if it takes one
  // With a trace of the `tensors` level: the entries of the inputs as queued, then of the
  // model's outputs (tracer::tensor_entry, joined by commas).
  std::string traced_tensors;

  pending_inference() = default;
  pending_inference(const pending_inference&) = delete;
  pending_inference& operator=(const pending_inference&) = delete;
  pending_inference(pending_inference&&) = delete;
  pending_inference& operator=(pending_inference&&) = delete;
  // One dropped unanswered (its model stopping, say) leaves the pending count too.
  ~pending_inference() { stop_counting_pending(); }

  // The sink, taken to give the request's end: later sends find none.
  std::shared_ptr<reply_sink> take_sink() {
    const std::lock_guard lock{replying};
    return std::move(sink);
  }

  void stop_counting_pending() noexcept {
    if (counted_pending.exchange(false)) lease.statistics().request_dequeued();
  }
};

}  // namespace oip::detail
