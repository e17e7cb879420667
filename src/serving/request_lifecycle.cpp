// The path of one inference request through the service: admission (shared-memory inputs,
// validation, scheduling parameters), the sequence manager or the batch queue, the executor or
// the receiving thread, the model, and the reply with its statistics and trace.

#include "serving/detail/service_state.hpp"
#include "serving/detail/validation.hpp"

#include <oip/inference_service.hpp>
#include <oip/log.hpp>
#include <oip/sequence.hpp>
#include <oip/version.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <system_error>
#include <thread>

#include <fmt/format.h>

namespace oip {

namespace {

using clock = inference_service::clock;
using detail::batch_item;
using detail::batch_queue;
using detail::batcher;
using detail::merge;
using detail::pending_inference;
using detail::split;

// The wall clock, for a model's last inference.
std::uint64_t milliseconds_since_epoch() noexcept {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}

std::uint64_t nanoseconds_between(clock::time_point from, clock::time_point to) noexcept {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(to - from).count());
}

// Triton's request-level scheduling parameters: `timeout` (microseconds, an int64) and `priority`
// (a non-negative integer; it orders the batch queue of a model with priority levels, and is
// ignored elsewhere, as in Triton). Names Triton reserves are refused.
status check_scheduling_parameters(const parameters& params) {
  const parameter_value* timeout = params.find("timeout");
  if (timeout != nullptr && !std::holds_alternative<std::int64_t>(*timeout)) {
    return status{errc::invalid_argument,
                  "invalid value type for 'timeout' parameter, expected an int64 integer"};
  }
  if (timeout != nullptr && std::get<std::int64_t>(*timeout) < 0) {
    return status{errc::invalid_argument,
                  fmt::format("invalid value {} for 'timeout' parameter, expected microseconds "
                              "(0 for none)",
                              std::get<std::int64_t>(*timeout))};
  }
  const parameter_value* priority = params.find("priority");
  if (priority != nullptr && !std::holds_alternative<std::int64_t>(*priority) &&
      !std::holds_alternative<std::uint64_t>(*priority)) {
    return status{errc::invalid_argument,
                  "invalid value type for 'priority' parameter, expected an integer"};
  }
  if (const auto* signed_priority = params.get<std::int64_t>("priority");
      signed_priority != nullptr && *signed_priority < 0) {
    return status{errc::invalid_argument,
                  fmt::format("invalid value {} for 'priority' parameter, expected a "
                              "non-negative integer (0 for the default)",
                              *signed_priority)};
  }
  // Triton keeps the prefix for its own parameters; a client may send only this one of them.
  for (const parameters::entry& e : params) {
    if (e.first.starts_with("triton_") && e.first != "triton_enable_empty_final_response") {
      return status{errc::invalid_argument,
                    "parameter keys starting with 'triton_' are reserved for Triton usage. Only "
                    "the following keys starting with 'triton_' are allowed: "
                    "triton_enable_empty_final_response"};
    }
  }
  return {};
}

// Why a request that was not run failed: a server without room for it, or the client's mistake.
failure_reason refusal_reason(const status& s) noexcept {
  return s.code() == errc::unavailable ? failure_reason::rejected : failure_reason::other;
}

// Adds the tensors' entries to a sampled request's trace, as they are now.
void trace_tensors(pending_inference& pending, std::string_view activity,
                   const std::vector<tensor>& tensors) {
  for (const tensor& t : tensors) {
    if (!pending.traced_tensors.empty()) pending.traced_tensors += ',';
    pending.traced_tensors += tracer::tensor_entry(pending.trace->id, activity, t);
  }
}

// A sampled request's trace: the transport's reading, then the timestamps the request reached
// (REQUEST_END is `ended`). Handed to the transport when it takes part (it adds the reply's
// sending), written at once otherwise.
void finish_trace(const pending_inference& pending, clock::time_point computed,
                  clock::time_point ended) noexcept {
  if (!pending.trace) return;
  try {
    tracer::record traced{pending.trace->id,
                          pending.lease.get().config().name,
                          pending.lease.version(),
                          pending.id.value_or(""),
                          {},
                          pending.trace->level,
                          pending.traced_tensors};
    traced.timestamps.reserve(10);
    if (pending.transport != nullptr) {
      for (const trace_stamp& read : pending.transport->read) {
        if (!read.name.empty()) traced.timestamps.emplace_back(read.name, read.at);
      }
    }
    traced.timestamps.emplace_back("REQUEST_START", pending.received);
    traced.timestamps.emplace_back("QUEUE_START", pending.queued);
    if (pending.started != clock::time_point{}) {
      traced.timestamps.emplace_back("COMPUTE_START", pending.started);
    }
    if (computed != clock::time_point{}) traced.timestamps.emplace_back("COMPUTE_END", computed);
    traced.timestamps.emplace_back("REQUEST_END", ended);
    if (pending.transport != nullptr) {
      pending.transport->sampled = std::make_shared<open_trace>(pending.traces, std::move(traced));
    } else {
      pending.traces->write(traced);
    }
  } catch (...) {  // NOLINT(bugprone-empty-catch): only the trace is lost
  }
}

// Hands the request's end to the sink: its last response (`last`, null for a decoupled model that
// ended without one) when `outcome` is ok, else the error; and finishes the trace: before, when
// the transport takes the trace over (it must have it when its sink runs); after otherwise, off
// the reply's path.
void answer(const pending_inference& pending, reply_sink& sink, const status& outcome,
            inference_response* last, clock::time_point computed, clock::time_point ended) {
  const bool joined = pending.transport != nullptr;
  if (joined) finish_trace(pending, computed, ended);
  status ended_with = outcome;
  if (ended_with.ok() && last != nullptr) {
    try {
      sink.on_response(std::move(*last), response_flag::final_response);
    } catch (const std::bad_alloc&) {
      ended_with = out_of_memory("writing the response");
    }
  }
  sink.on_complete(ended_with);
  if (!joined) finish_trace(pending, computed, ended);
}

std::size_t inflight_bound(const limits& bounds) noexcept {
  if (bounds.max_inflight_bytes != 0) return bounds.max_inflight_bytes;
  return std::max(physical_memory_bytes() / 2, bounds.max_body_bytes);
}

}  // namespace

void inference_service::state::record_failure(const model_lease& lease, clock::time_point received,
                                              const status& why, std::string_view request_id,
                                              failure_reason reason) noexcept {
  if (!lease) return;
  lease.statistics().add_failure(nanoseconds_between(received, clock::now()), reason);
  // A request its client cancelled is the client's doing, not a fault of the server's: a warning,
  // whatever its status.
  const log_level level = reason == failure_reason::canceled || why.http_status() < 500
                              ? log_level::warning
                              : log_level::error;
  if (!log_enabled(level)) return;
  try {
    log_request_failure(
        level, why,
        fmt::format("model '{}' version {}", lease.get().config().name, lease.version()),
        request_id);
  } catch (...) {  // NOLINT(bugprone-empty-catch): the failure is counted; only its line is lost
  }
}

inference_service::state::state(model_repository& r, executor& w, server_options o)
    : repository{r},
      options{std::move(o)},
      workers{&w},
      extras{r},
      traces{std::make_shared<tracer>(options.trace)},
      control{r, options.model_control,
              [this](const std::vector<std::shared_ptr<model>>& instances) {
                extras.retire_sequences(instances);
              }},
      memory{inflight_bound(options.bounds)} {
  if (options.version.empty()) options.version = std::string{oip::version_string};
  if (options.response_cache_bytes > 0) {
    responses = std::make_shared<detail::response_cache>(options.response_cache_bytes);
  }
  if (options.shared_memory) {
    const limits& bounds = options.bounds;
    regions = std::make_unique<shared_memory_registry>(
        shared_memory_registry::bounds{.max_regions = bounds.max_shared_memory_regions,
                                       .max_mapped_bytes = bounds.max_shared_memory_bytes != 0
                                                               ? bounds.max_shared_memory_bytes
                                                               : physical_memory_bytes()},
        options.device_memory);
  }
}

status inference_service::state::submit(std::function<void()> job) {
  const std::shared_lock lock{workers_mutex};
  if (workers == nullptr) return status{errc::unavailable, "the server is stopping"};
  return workers->submit(std::move(job));
}

void inference_service::state::let_go_of_workers() {
  const std::unique_lock lock{workers_mutex};
  workers = nullptr;
}

result<std::shared_ptr<batcher>> inference_service::state::batches_of(const model_lease& lease) {
  try {
    std::shared_ptr<batcher> batches = extras.batches_of(lease, [this](const model_config& config) {
      return std::make_shared<batcher>(
          std::make_shared<batch_queue>(config, batch_runner(weak_from_this()), refuse_queued));
    });
    if (batches == nullptr) return status{errc::unavailable, "the server is stopping"};
    return batches;
  } catch (const std::system_error& e) {
    return status{errc::unavailable,
                  fmt::format("model '{}' cannot batch requests: no thread for its queue ({})",
                              lease.get().config().name, e.what())};
  } catch (const std::bad_alloc&) {
    return out_of_memory("starting the model's batch queue");
  }
}

batch_queue::run_function inference_service::state::batch_runner(std::weak_ptr<state> self) {
  return [self = std::move(self)](const std::shared_ptr<batch_queue>& owner,
                                  std::vector<batch_item> batch) {
    if (const std::shared_ptr<state> service = self.lock()) {
      return service->run_batch(owner, std::move(batch));
    }
    for (const batch_item& item : batch) {
      refuse_queued(item, status{errc::unavailable, "the server is stopping"});
    }
    owner->finished();
  };
}

void inference_service::state::refuse_queued(const batch_item& item, const status& why) {
  if (item.pending->cancel.cancelled()) return fail_cancelled(item.pending);
  fail(item.pending, why, failure_reason::rejected);
}

void inference_service::state::answer_from_cache(
    const model_lease& lease, inference_response cached, std::optional<std::string> id,
    std::shared_ptr<reply_sink>& sink, clock::time_point received, clock::time_point looked) {
  cached.id = std::move(id);
  const clock::time_point found = clock::now();
  // As Triton's: no time in a queue, which a hit never enters.
  lease.statistics().add_cache_hit(nanoseconds_between(received, found), 0,
                                   nanoseconds_between(looked, found), milliseconds_since_epoch());
  if (log_enabled(log_level::verbose)) {
    log(log_level::verbose,
        fmt::format("model '{}' version {} request '{}': ok in {} us, from the response cache",
                    lease.get().config().name, lease.version(), cached.id.value_or(""),
                    nanoseconds_between(received, found) / 1000));
  }
  const std::shared_ptr<reply_sink> answering = std::move(sink);  // answered once, whatever
  status ended;
  try {
    answering->on_response(std::move(cached), response_flag::final_response);
  } catch (const std::bad_alloc&) {
    ended = out_of_memory("writing the response");
  }
  answering->on_complete(ended);
}

void inference_service::state::infer(model_lease lease, inference_request request,
                                     cancellation cancel, std::shared_ptr<reply_sink> sink,
                                     clock::time_point received, transport_trace* transport) {
  std::shared_ptr<pending_inference> pending;
  try {
    admit(std::move(lease), std::move(request), std::move(cancel), sink, received, transport,
          pending);
  } catch (const std::bad_alloc&) {
    const status s = out_of_memory("admitting the request");
    // The sink is still here until the pending request takes it.
    if (sink) return sink->on_complete(s);
    if (pending) fail(pending, s, failure_reason::other);
  }
}

void inference_service::state::admit(model_lease lease, inference_request request,
                                     cancellation cancel, std::shared_ptr<reply_sink>& sink,
                                     clock::time_point received, transport_trace* transport,
                                     std::shared_ptr<pending_inference>& pending) {
  const model_config& config = lease.get().config();
  const auto refuse = [&](const status& s) {
    record_failure(lease, received, s, request.id.value_or(""));
    const std::shared_ptr<reply_sink> answering = std::move(sink);  // answered once, whatever
    answering->on_complete(s);
  };
  const bool batched = config.dynamic_batching && config.max_batch_size > 0;
  // A model that reads device memory takes inputs there, unless the batcher joins them on the
  // host.
  const std::span<const int> readable_devices =
      config.device_inputs && !batched ? std::span<const int>{config.gpus} : std::span<const int>{};
  if (status s = detail::check_input_memory(config, request, readable_devices); !s.ok()) {
    return refuse(s);
  }
  // Sampled first: a trace that writes the inputs out reads them on the host.
  std::optional<tracer::sampled> trace = traces->sample(config.name);
  const bool inputs_in_shared_memory = !request.shared_memory_inputs.empty();
  if (inputs_in_shared_memory) {
    // Inputs in CUDA regions are read in place where they can be, unless the trace writes them.
    const bool traced_tensors = trace && includes(trace->level, trace_level::tensors);
    if (status s =
            read_shared_memory_inputs(request, regions.get(), options.bounds, config.name,
                                      traced_tensors ? std::span<const int>{} : readable_devices);
        !s.ok()) {
      return refuse(s);
    }
  }
  result<std::vector<shared_memory_destination>> destinations =
      shared_memory_destinations(request, regions.get());
  if (!destinations) return refuse(destinations.error());
  if (status s = detail::validate_request(config, request); !s.ok()) return refuse(s);
  if (status s = check_scheduling_parameters(request.parameters); !s.ok()) return refuse(s);
  // Checked for every model, as Triton's frontends do; a model without sequences ignores them.
  result<sequence_flags> flags =
      read_sequence_flags(request.parameters, options.bounds.max_string_id_length);
  if (!flags) return refuse(flags.error());
  const std::uint64_t priority_level = detail::priority_level(config, request.parameters);
  // Where the batch queue's policy delays a request past its timeout, the `timeout` parameter
  // is that policy's to apply, as in Triton: it does not end the request.
  const bool queue_delays = batched && !config.sequence_batching &&
                            detail::queue_policy_of(config.batching, priority_level).on_timeout ==
                                queue_policy::timeout_action::delay;
  if (const auto* timeout = request.parameters.get<std::int64_t>("timeout");
      timeout != nullptr && *timeout > 0 && !queue_delays) {
    // A timeout past what the clock can count (about 292 years) is no deadline at all.
    const auto left =
        std::chrono::duration_cast<std::chrono::microseconds>(clock::time_point::max() - received);
    if (std::chrono::microseconds{*timeout} < left) {
      cancel.set_deadline(received + std::chrono::microseconds{*timeout});
    }
  }
  // Not cached: a traced request (its trace shows the model's run), one whose inputs are views
  // of a client's shared memory (the client may change them before the model reads them, and
  // the response would be filed under bytes it was not made of), one whose outputs go to shared
  // memory, and one that could never fit. The key, a copy of the inputs, is held in the memory
  // budget while the request runs; without room there the request is not cached.
  detail::cache_key cache_key;
  std::optional<memory_budget::lease> cache_key_room;
  std::uint64_t cache_lookup_ns = 0;
  const std::optional<std::size_t> key_length =
      responses && config.response_cache && !trace && !inputs_in_shared_memory &&
              destinations->empty()
          ? detail::cache_key_length(config.name, lease.version(), request)
          : std::nullopt;
  if (key_length && *key_length < responses->capacity()) {
    if (result<memory_budget::lease> room = memory.reserve(*key_length)) {
      cache_key_room = std::move(*room);
      const clock::time_point looked = clock::now();
      cache_key = detail::make_cache_key(config.name, lease.version(), request, *key_length);
      if (std::optional<inference_response> cached = responses->find(cache_key, lease.shared())) {
        return answer_from_cache(lease, std::move(*cached), std::move(request.id), sink, received,
                                 looked);
      }
      cache_lookup_ns = nanoseconds_between(looked, clock::now());
    }
  }

  pending = std::make_shared<pending_inference>();
  pending->lease = std::move(lease);  // first: a failure from here on is the pending request's
  pending->id = request.id;
  pending->asked = request.outputs;
  pending->sink = std::move(sink);
  pending->destinations = std::move(*destinations);
  pending->cancel = std::move(cancel);
  pending->batch = detail::batch_size(config, request);
  pending->priority_level = priority_level;
  if (!cache_key.empty()) {
    pending->cache = responses;
    pending->key_in_cache = std::move(cache_key);
    pending->cache_key_room = std::move(cache_key_room);
    pending->cache_lookup_ns = cache_lookup_ns;
  }
  pending->received = received;
  pending->queued = clock::now();
  pending->trace = trace;
  if (pending->trace) {
    pending->traces = traces;
    pending->transport = transport;
    if (includes(pending->trace->level, trace_level::tensors)) {
      trace_tensors(*pending, "TENSOR_QUEUE_INPUT", request.inputs);
    }
  }
  pending->decoupled = config.decoupled;
  pending->max_unsent = options.bounds.max_unsent_responses;
  pending->max_unread_wait = options.bounds.max_unread_wait;
  pending->counted_pending = true;
  pending->lease.statistics().request_queued();
  if (!config.sequence_batching && !batched && !config.decoupled &&
      (config.inline_execution || is_quick(pending->lease.statistics()))) {
    return run(pending, std::move(request), {});  // on this thread: no worker's wake-up
  }
  auto request_ptr = std::make_shared<inference_request>(std::move(request));

  if (!config.sequence_batching) {
    if (batched) {
      const result<std::shared_ptr<batcher>> batches = batches_of(pending->lease);
      status queued = batches ? (*batches)->enqueue({pending, request_ptr}) : batches.error();
      if (!queued.ok()) fail(pending, queued, refusal_reason(queued));
      return;
    }
    return dispatch(pending, request_ptr, {});
  }
  const result<std::shared_ptr<sequence_manager>> manager = extras.sequences_of(pending->lease);
  if (!manager) return fail(pending, manager.error(), refusal_reason(manager.error()));
  status admitted = (*manager)->submit(
      *flags,
      [self = shared_from_this(), pending, request_ptr](sequence_turn turn) {
        self->dispatch(pending, request_ptr, std::move(turn));
      },
      pending->batch);
  if (!admitted.ok()) fail(pending, admitted, refusal_reason(admitted));
}

void inference_service::state::dispatch(const std::shared_ptr<pending_inference>& pending,
                                        const std::shared_ptr<inference_request>& request,
                                        sequence_turn turn) {
  // The executor takes copyable jobs: a sequence's turn travels in a shared box (none for the
  // usual request, which holds no turn).
  std::shared_ptr<sequence_turn> held_turn;
  sequence_turn* unrun = &turn;  // the turn, wherever it is, if the request does not run
  status submitted;
  try {
    if (turn) {
      held_turn = std::make_shared<sequence_turn>(std::move(turn));
      unrun = held_turn.get();
    }
    submitted = submit([self = shared_from_this(), pending, request, held_turn] {
      try {
        self->run(pending, std::move(*request),
                  held_turn ? std::move(*held_turn) : sequence_turn{});
      } catch (const std::bad_alloc&) {
        fail_unrun(pending, out_of_memory("starting the request"), failure_reason::other,
                   held_turn.get());
      }
    });
  } catch (const std::bad_alloc&) {
    submitted = out_of_memory("queueing the request");
  }
  if (submitted.ok()) return;
  fail_unrun(pending, submitted, refusal_reason(submitted), unrun);
}

void inference_service::state::fail_unrun(const std::shared_ptr<pending_inference>& pending,
                                          const status& why, failure_reason reason,
                                          sequence_turn* turn) {
  const bool ends_sequence = turn != nullptr && *turn && !turn->withdraw();
  fail(pending, why, reason);
  if (ends_sequence) turn->cancel_sequence();
}

void inference_service::state::run(const std::shared_ptr<pending_inference>& pending,
                                   inference_request request, sequence_turn turn) {
  pending->started = clock::now();
  pending->stop_counting_pending();
  // A request of a sequence is answered before its turn passes on, as `finish` does.
  if (turn && turn.step().cancelled) {
    return fail(pending,
                status{errc::unavailable,
                       fmt::format("sequence {} of model '{}' was cancelled before this request "
                                   "ran",
                                   turn.step().id.to_string(), pending->lease.get().config().name)},
                failure_reason::canceled);
  }
  if (pending->cancel.cancelled()) {
    fail_cancelled(pending);
    // The sequence ends with it, as in Triton: what follows would miss this request's step.
    if (turn) turn.cancel_sequence();
    return;
  }
  model& m = pending->lease.get();
  pending->last_response = pending->started;
  inference_call::response_sender sender;
  if (pending->decoupled) {
    sender = [pending](model_output response) { return send(pending, std::move(response)); };
  }
  detail::execute_guarded(
      m, inference_call{
             std::move(request), pending->lease.version(), pending->cancel,
             [self = shared_from_this(), pending](result<std::optional<model_output>> outcome) {
               pending->finished_at.store(clock::now().time_since_epoch().count(),
                                          std::memory_order_relaxed);
               self->complete(pending, std::move(outcome));
             },
             std::move(turn), std::move(sender)});
  // The model's own time: to its `finish` when it finished within the call (the reply's making
  // and writing that follow are the transport's, on whichever thread), else to its return.
  const clock::rep finished = pending->finished_at.load(std::memory_order_relaxed);
  const clock::time_point returned = clock::now();
  const clock::time_point held =
      finished != 0 ? std::min(returned, clock::time_point{clock::duration{finished}}) : returned;
  pending->lease.statistics().add_execute_call(nanoseconds_between(pending->started, held));
}

bool inference_service::state::is_quick(const model_statistics& stats) const noexcept {
  const std::optional<std::uint64_t> recent = stats.recent_execute_call_ns();
  return recent && options.inline_below.count() > 0 &&
         *recent <
             static_cast<std::uint64_t>(std::chrono::nanoseconds{options.inline_below}.count());
}

status inference_service::state::send(const std::shared_ptr<pending_inference>& pending,
                                      model_output output) {
  try {
    return send_response(pending, std::move(output));
  } catch (const std::bad_alloc&) {
    return out_of_memory("making the response: it was not sent");
  }
}

status inference_service::state::send_response(const std::shared_ptr<pending_inference>& pending,
                                               model_output output) {
  std::shared_ptr<reply_sink> sink;
  {
    const std::lock_guard lock{pending->replying};
    sink = pending->sink;
  }
  const auto finished = [] {
    return status{errc::failed_precondition, "the call has finished: the response was not sent"};
  };
  if (!sink) return finished();
  if (pending->cancel.cancelled()) {
    return status{errc::unavailable, "the request was cancelled: the response was not sent"};
  }
  if (response_backlog* backlog = sink->backlog()) {
    if (status room =
            backlog->wait_for_room(pending->max_unsent, pending->cancel, pending->max_unread_wait);
        !room.ok()) {
      return room;
    }
  }
  const clock::time_point computed = clock::now();
  const model_config& config = pending->lease.get().config();
  result<inference_response> response = detail::make_response(
      config, pending->lease.version(), pending->id, pending->asked, std::move(output));
  // The model's mistake, or the client's region too small: the stream goes on.
  if (!response) return response.error();
  if (status placed = place_in_shared_memory(*pending, *response); !placed.ok()) return placed;
  const clock::time_point made = clock::now();
  const std::lock_guard lock{pending->replying};
  if (!pending->sink) return finished();
  model_statistics& stats = pending->lease.statistics();
  if (pending->responses == 0)
    stats.add_first_response(nanoseconds_between(pending->received, made));
  stats.add_response(pending->responses, model_statistics::response_outcome::sent,
                     nanoseconds_between(pending->last_response, computed),
                     nanoseconds_between(computed, made));
  ++pending->responses;
  pending->last_response = made;
  pending->sink->on_response(std::move(*response), response_flag::none);
  return {};
}

status inference_service::state::place_in_shared_memory(const pending_inference& pending,
                                                        inference_response& response) {
  if (pending.destinations.empty()) return {};
  if (status written = write_outputs(pending.destinations, response); !written.ok()) {
    return written;
  }
  for (const shared_memory_destination& place : pending.destinations) {
    response.shared_memory_outputs.push_back(place.output);
  }
  return {};
}

void inference_service::state::fail_cancelled(const std::shared_ptr<pending_inference>& pending) {
  if (pending->cancel.client_gone() || pending->cancel.finished_early()) {
    return fail(pending, status{errc::unavailable, "the request was cancelled by the client"},
                failure_reason::canceled);
  }
  fail(pending, status{errc::unavailable, "Request timeout expired"},  // Triton's words
       failure_reason::rejected);
}

void inference_service::state::run_batch(const std::shared_ptr<batch_queue>& queue,
                                         std::vector<batch_item> batch) {
  std::shared_ptr<std::vector<batch_item>> items;
  try {
    items = std::make_shared<std::vector<batch_item>>();
  } catch (const std::bad_alloc&) {
    for (const batch_item& item : batch) {
      fail(item.pending, out_of_memory("forming the batch"), failure_reason::other);
    }
    return queue->finished();
  }
  *items = std::move(batch);
  status submitted;
  try {
    submitted = submit([self = shared_from_this(), queue, items] {
      try {
        self->execute_batch(queue, *items);
      } catch (const std::bad_alloc&) {
        // Before any model ran (that part cannot throw): every request of the batch fails.
        for (const batch_item& item : *items) {
          fail(item.pending, out_of_memory("forming the batch"), failure_reason::other);
        }
        queue->finished();
      }
    });
  } catch (const std::bad_alloc&) {
    submitted = out_of_memory("queueing the batch");
  }
  if (submitted.ok()) return;
  for (const batch_item& item : *items) fail(item.pending, submitted, failure_reason::rejected);
  queue->finished();
}

void inference_service::state::execute_batch(const std::shared_ptr<batch_queue>& queue,
                                             std::vector<batch_item>& batch) {
  const clock::time_point started = clock::now();
  auto items = std::make_shared<std::vector<batch_item>>();
  for (batch_item& item : batch) {
    item.pending->started = started;
    item.pending->stop_counting_pending();
    if (item.pending->cancel.cancelled()) {
      fail_cancelled(item.pending);
    } else {
      items->push_back(item);  // a copy: the batch stays whole for run_batch's failure path
    }
  }
  if (items->empty()) {
    queue->finished();
    return;
  }
  const model_lease& lease = items->front().pending->lease;
  model& m = lease.get();
  inference_call::completion done = [queue, items](result<std::optional<model_output>> outcome) {
    try {
      complete_batch(*items, std::move(outcome));
    } catch (const std::bad_alloc&) {
      // Out of memory while the outputs are split back: the requests not yet answered fail
      // (one answered has let go of its sink), and the queue goes on.
      for (const batch_item& item : *items) {
        fail(item.pending, out_of_memory("splitting the batch's outputs"), failure_reason::other);
      }
    }
    queue->finished();
  };
  if (items->size() == 1) {
    const batch_item& only = items->front();
    detail::execute_guarded(m, inference_call{std::move(*only.request), lease.version(),
                                              only.pending->cancel, std::move(done)});
    return;
  }
  result<inference_request> merged = merge(*items);
  if (!merged) {
    for (const batch_item& item : *items) fail(item.pending, merged.error(), failure_reason::other);
    queue->finished();
    return;
  }
  detail::execute_guarded(
      m, inference_call{std::move(*merged), lease.version(), cancellation{}, std::move(done)});
}

void inference_service::state::complete_batch(const std::vector<batch_item>& items,
                                              result<std::optional<model_output>> outcome) {
  if (items.size() == 1) return complete(items.front().pending, std::move(outcome));
  if (outcome && !*outcome) outcome = no_result();
  if (!outcome) {
    for (const batch_item& item : items)
      fail(item.pending, outcome.error(), failure_reason::backend);
    return;
  }
  const model_config& config = items.front().pending->lease.get().config();
  result<std::vector<model_output>> parts = split(std::move(**outcome), items, config.name);
  if (!parts) {
    for (const batch_item& item : items) fail(item.pending, parts.error(), failure_reason::backend);
    return;
  }
  // One execution for the whole batch; each request counts its own rows.
  std::uint64_t rows = 0;
  for (const batch_item& item : items) rows += item.pending->batch;
  for (std::size_t j = 0; j < items.size(); ++j) {
    complete(items[j].pending, std::optional<model_output>{std::move((*parts)[j])},
             j == 0 ? rows : 0);
  }
}

void inference_service::state::fail(const std::shared_ptr<pending_inference>& pending,
                                    const status& s, failure_reason reason) {
  pending->stop_counting_pending();
  const std::shared_ptr<reply_sink> sink = pending->take_sink();
  if (!sink) return;
  if (pending->decoupled && pending->started != clock::time_point{}) {
    pending->lease.statistics().add_response(
        pending->responses,
        reason == failure_reason::canceled ? model_statistics::response_outcome::cancelled
                                           : model_statistics::response_outcome::failed,
        nanoseconds_between(pending->last_response, clock::now()), 0);
  }
  record_failure(pending->lease, pending->received, s, pending->id.value_or(""), reason);
  answer(*pending, *sink, s, nullptr, {}, clock::now());
}

void inference_service::state::complete(const std::shared_ptr<pending_inference>& pending,
                                        result<std::optional<model_output>> outcome,
                                        std::optional<std::uint64_t> execution_rows) {
  try {
    respond(pending, std::move(outcome), execution_rows);
  } catch (const std::bad_alloc&) {
    fail(pending, out_of_memory("making the response"), failure_reason::other);
  }
}

void inference_service::state::respond(const std::shared_ptr<pending_inference>& pending,
                                       result<std::optional<model_output>> outcome,
                                       std::optional<std::uint64_t> execution_rows) {
  const clock::time_point computed = clock::now();
  // A model that stops early because the client went away fails a cancelled request.
  failure_reason why =
      pending->cancel.client_gone() ? failure_reason::canceled : failure_reason::backend;
  if (outcome && !*outcome && !pending->decoupled) outcome = no_result();
  // A decoupled model called off by a caller that had all it wanted ends a request that
  // succeeded, however the model ended; a cancelled request's end is not sent: its stream is
  // over.
  if (pending->decoupled && pending->cancel.finished_early()) {
    outcome = std::optional<model_output>{};
  } else if (outcome && pending->decoupled && pending->cancel.cancelled()) {
    outcome = status{errc::unavailable, "the request was cancelled"};
    why = failure_reason::canceled;
  }
  if (!outcome) return fail(pending, outcome.error(), why);
  if (*outcome && pending->trace && includes(pending->trace->level, trace_level::tensors)) {
    trace_tensors(*pending, "TENSOR_BACKEND_OUTPUT", (*outcome)->outputs);
  }
  std::optional<result<inference_response>> response;
  if (*outcome) {
    const model_config& config = pending->lease.get().config();
    response = detail::make_response(config, pending->lease.version(), pending->id, pending->asked,
                                     std::move(**outcome));
  }
  model_statistics& stats = pending->lease.statistics();
  const clock::time_point made = clock::now();
  // The model ran, whether or not this request's response could be made of what it gave.
  const std::uint64_t rows = execution_rows.value_or(pending->batch);
  if (rows != 0) {
    stats.add_execution(rows, {1, nanoseconds_between(pending->received, pending->queued),
                               nanoseconds_between(pending->started, computed),
                               nanoseconds_between(computed, made)});
  }
  if (response && !*response) {
    return fail(pending, response->error(), failure_reason::backend);
  }
  if (response) {
    if (status placed = place_in_shared_memory(*pending, **response); !placed.ok()) {
      return fail(pending, placed, failure_reason::other);
    }
  }
  const std::shared_ptr<reply_sink> sink = pending->take_sink();
  if (!sink) return;
  if (response && pending->cache) {
    const clock::time_point inserting = clock::now();
    try {
      pending->cache->insert(std::move(pending->key_in_cache), **response, pending->lease.shared());
      stats.add_cache_miss(pending->cache_lookup_ns + nanoseconds_between(inserting, clock::now()));
    } catch (const std::bad_alloc&) {  // NOLINT(bugprone-empty-catch): only the entry is lost
    }
    pending->cache_key_room.reset();
  }

  // A request's durations are recorded together, once it succeeded, as Triton does:
  // perf_analyzer checks that the compute counts agree between two snapshots.
  const bool first = pending->responses == 0 && response;
  stats.add_success({.queue_ns = nanoseconds_between(pending->queued, pending->started),
                     .compute_input_ns = nanoseconds_between(pending->received, pending->queued),
                     .compute_infer_ns = nanoseconds_between(pending->started, computed),
                     .compute_output_ns = nanoseconds_between(computed, made),
                     .total_ns = nanoseconds_between(pending->received, made),
                     .first_response_ns = first ? nanoseconds_between(pending->received, made) : 0},
                    pending->batch, milliseconds_since_epoch());
  if (pending->decoupled) {
    stats.add_response(pending->responses,
                       response ? model_statistics::response_outcome::sent
                                : model_statistics::response_outcome::empty_final,
                       nanoseconds_between(pending->last_response, computed),
                       nanoseconds_between(computed, made));
  }
  if (log_enabled(log_level::verbose)) {
    log(log_level::verbose,
        fmt::format("model '{}' version {} request '{}': ok in {} us",
                    pending->lease.get().config().name, pending->lease.version(),
                    pending->id.value_or(""), nanoseconds_between(pending->received, made) / 1000));
  }
  answer(*pending, *sink, status{}, response ? &**response : nullptr, computed, made);
}

}  // namespace oip
