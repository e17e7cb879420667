#pragma once
// Internal: the inference service's state. Its control calls (inference_service.cpp) read it; the
// path of a request from admission to its reply (request_lifecycle.cpp) is its member functions.

#include "serving/detail/batching.hpp"
#include "serving/detail/instance_extras.hpp"
#include "serving/detail/model_control.hpp"
#include "serving/detail/pending_inference.hpp"

#include <oip/inference_service.hpp>
#include <oip/memory_budget.hpp>
#include <oip/sequence.hpp>
#include <oip/shared_memory.hpp>
#include <oip/statistics.hpp>
#include <oip/trace.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string_view>
#include <vector>

namespace oip {

struct inference_service::state : std::enable_shared_from_this<inference_service::state> {
  model_repository& repository;
  server_options options;
  // The host's executor until the service is destroyed, null after (`submit` reads it): a model
  // that finishes on a thread of its own after that still hands its sequence's turn to the next
  // request, and the host destroys the executor once the service is gone.
  std::shared_mutex workers_mutex;
  executor* workers;

  detail::instance_extras extras;  // sequence managers and batch queues, per model instance
  std::unique_ptr<shared_memory_registry> regions;    // when the extension is offered
  std::shared_ptr<tracer> traces;                     // a traced request's completion holds it too
  std::shared_ptr<detail::response_cache> responses;  // when the host gives it room
  detail::model_control control;                      // loads and unloads
  memory_budget memory;                               // requests and replies in flight
  std::atomic<bool> shutting_down{false};

  state(model_repository& r, executor& w, server_options o);

  // Counts a request that failed in its model's statistics, and logs it.
  static void record_failure(const model_lease& lease, clock::time_point received,
                             const status& why, std::string_view request_id = {},
                             failure_reason reason = failure_reason::other) noexcept;

  [[nodiscard]] status submit(std::function<void()> job);
  void let_go_of_workers();

  // The model's batch queue; its thread is started with the model's first batched request, and
  // a server that cannot start one (a container's limit on threads) refuses the request.
  result<std::shared_ptr<detail::batcher>> batches_of(const model_lease& lease);

  // What a model's batch queue calls with each batch it forms.
  static detail::batch_queue::run_function batch_runner(std::weak_ptr<state> self);

  // A request that a batch queue will not run (cancelled while it waited, its model stopped
  // batching, or the server).
  static void refuse_queued(const detail::batch_item& item, const status& why);

  // Answers a request with a response from the cache: `looked` is when the lookup began.
  static void answer_from_cache(const model_lease& lease, inference_response cached,
                                std::optional<std::string> id, std::shared_ptr<reply_sink>& sink,
                                clock::time_point received, clock::time_point looked);

  // Out of memory anywhere before the model holds the request answers it 503, through whichever
  // of `sink` and the pending request holds the sink then.
  void infer(model_lease lease, inference_request request, cancellation cancel,
             std::shared_ptr<reply_sink> sink, clock::time_point received,
             transport_trace* transport);

  void admit(model_lease lease, inference_request request, cancellation cancel,
             std::shared_ptr<reply_sink>& sink, clock::time_point received,
             transport_trace* transport, std::shared_ptr<detail::pending_inference>& pending);

  void dispatch(const std::shared_ptr<detail::pending_inference>& pending,
                const std::shared_ptr<inference_request>& request, sequence_turn turn);

  // A request that will not run. Its sequence goes on without it where it can, before the client
  // hears of it, so that the client may send it again at once; where the sequence cannot, it ends
  // once the request is answered (a failed request is answered before its turn passes on).
  static void fail_unrun(const std::shared_ptr<detail::pending_inference>& pending,
                         const status& why, failure_reason reason, sequence_turn* turn);

  void run(const std::shared_ptr<detail::pending_inference>& pending, inference_request request,
           sequence_turn turn);

  // Whether a model's calls are short enough to run on the receiving thread (see
  // `server_options::inline_below`).
  [[nodiscard]] bool is_quick(const model_statistics& stats) const noexcept;

  // A decoupled model's response that is not its last: made and written as a last one is, then
  // handed to the transport once it holds fewer than the limit unwritten.
  static status send(const std::shared_ptr<detail::pending_inference>& pending,
                     model_output output);

  static status send_response(const std::shared_ptr<detail::pending_inference>& pending,
                              model_output output);

  // Writes the response's outputs that the request placed in shared memory to their regions.
  static status place_in_shared_memory(const detail::pending_inference& pending,
                                       inference_response& response);

  static void fail_cancelled(const std::shared_ptr<detail::pending_inference>& pending);

  // Hands a batch to a worker; the batcher learns when it completed.
  // On the batch queue's thread, which no exception may end.
  void run_batch(const std::shared_ptr<detail::batch_queue>& queue,
                 std::vector<detail::batch_item> batch);

  // One execution for the batch's requests still wanted: a lone request runs as it came, several
  // run merged, and the outputs are split back.
  static void execute_batch(const std::shared_ptr<detail::batch_queue>& queue,
                            std::vector<detail::batch_item>& batch);

  static void complete_batch(const std::vector<detail::batch_item>& items,
                             result<std::optional<model_output>> outcome);

  static status no_result() { return status{errc::internal, "the model returned no result"}; }

  static void fail(const std::shared_ptr<detail::pending_inference>& pending, const status& s,
                   failure_reason reason);

  // `execution_rows`: the rows of the execution this request was part of, for the one request
  // of it that counts the execution; 0 for the others of a merged batch.
  // Out of memory while the response is made fails the request with a 503; the model that
  // called its completion never sees the exception.
  static void complete(const std::shared_ptr<detail::pending_inference>& pending,
                       result<std::optional<model_output>> outcome,
                       std::optional<std::uint64_t> execution_rows = std::nullopt);

  static void respond(const std::shared_ptr<detail::pending_inference>& pending,
                      result<std::optional<model_output>> outcome,
                      std::optional<std::uint64_t> execution_rows);
};

}  // namespace oip
