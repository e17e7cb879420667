#include "detail/serial_worker.hpp"
#include "detail/validation.hpp"

#include <oip/inference_service.hpp>
#include <oip/log.hpp>
#include <oip/sequence.hpp>
#include <oip/version.hpp>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>

namespace oip {

namespace {

using clock = inference_service::clock;

std::uint64_t nanoseconds_between(clock::time_point from, clock::time_point to) noexcept {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(to - from).count());
}

// Triton's request-level scheduling parameters: `timeout` (microseconds, an int64) is applied;
// `priority` (an integer) is accepted and ignored, since requests are served in arrival order.
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
  return {};
}

model_metadata metadata_of(const model_config& config, const std::vector<std::uint64_t>& versions) {
  model_metadata m;
  m.name = config.name;
  for (std::uint64_t v : versions) m.versions.push_back(std::to_string(v));
  m.platform = config.platform;
  const auto with_batch = [&](const std::vector<tensor_metadata>& list) {
    std::vector<tensor_metadata> out = list;
    if (config.max_batch_size > 0) {
      for (tensor_metadata& t : out) t.shape.insert(t.shape.begin(), -1);
    }
    return out;
  };
  m.inputs = with_batch(config.inputs);
  m.outputs = with_batch(config.outputs);
  m.properties = config.properties;
  return m;
}

statistics_snapshot snapshot_of(const std::string& name, std::uint64_t version,
                                const model_statistics& s) {
  statistics_snapshot out;
  static_cast<model_statistics::figures&>(out) = s.read();
  out.name = name;
  out.version = version;
  out.pending_requests = s.pending_requests();
  return out;
}

// One inference between its validation and its reply.
struct pending_inference {
  model_lease lease;
  std::optional<std::string> id;
  std::vector<requested_output> asked;
  std::shared_ptr<reply_sink> sink;                     // null once answered
  std::vector<shared_memory_destination> destinations;  // of its outputs in shared memory
  cancellation cancel;
  std::uint64_t batch = 1;
  // Counted in its model's pending requests from when it is queued until it runs or fails.
  std::atomic<bool> counted_pending{false};
  clock::time_point received;
  clock::time_point queued;
  clock::time_point started;
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

  void stop_counting_pending() noexcept {
    if (counted_pending.exchange(false)) lease.statistics().request_dequeued();
  }
};

// Why a request that was not run failed: a server without room for it, or the client's mistake.
failure_reason refusal_reason(const status& s) noexcept {
  return s.code() == errc::unavailable ? failure_reason::rejected : failure_reason::other;
}

// Counts a request that failed in its model's statistics, and logs it.
void record_failure(const model_lease& lease, clock::time_point received, const status& why,
                    std::string_view request_id = {},
                    failure_reason reason = failure_reason::other) noexcept {
  if (!lease) return;
  lease.statistics().add_failure(nanoseconds_between(received, clock::now()), reason);
  if (!log_enabled(log_level::warning)) return;
  try {
    log_request_failure(
        why, fmt::format("model '{}' version {}", lease.get().config().name, lease.version()),
        request_id);
  } catch (...) {  // NOLINT(bugprone-empty-catch): the failure is counted; only its line is lost
  }
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

// Hands the outcome to the sink and finishes the trace: before, when the transport takes the trace
// over (it must have it when its sink runs); after otherwise, off the reply's path.
void answer(const pending_inference& pending, reply_sink& sink, result<inference_response> outcome,
            clock::time_point computed, clock::time_point ended) {
  const bool joined = pending.transport != nullptr;
  if (joined) finish_trace(pending, computed, ended);
  if (outcome) {
    sink.on_response(std::move(*outcome));
    sink.on_complete(status{});
  } else {
    sink.on_complete(outcome.error());
  }
  if (!joined) finish_trace(pending, computed, ended);
}

// --- dynamic batching ----------------------------------------------------------------------------

// A request waiting in a model's batch queue.
struct batch_item {
  std::shared_ptr<pending_inference> pending;
  std::shared_ptr<inference_request> request;
};

// Whether two requests can run as one batch: the same inputs in the same order (names, datatypes,
// dimensions past the batch dimension) and the same parameters.
bool batchable_together(const inference_request& a, const inference_request& b) {
  if (a.inputs.size() != b.inputs.size() || !(a.parameters == b.parameters)) return false;
  for (std::size_t i = 0; i < a.inputs.size(); ++i) {
    const tensor& x = a.inputs[i];
    const tensor& y = b.inputs[i];
    if (x.name() != y.name() || x.type() != y.type() || x.shape().size() != y.shape().size() ||
        !std::equal(x.shape().begin() + 1, x.shape().end(), y.shape().begin() + 1)) {
      return false;
    }
  }
  return true;
}

// The requests' inputs concatenated along the batch dimension (one copy of their bytes).
result<inference_request> merge(const std::vector<batch_item>& items) {
  inference_request merged;
  merged.parameters = items.front().request->parameters;
  const std::vector<tensor>& first = items.front().request->inputs;
  for (std::size_t i = 0; i < first.size(); ++i) {
    std::size_t bytes = 0;
    std::int64_t rows = 0;
    for (const batch_item& item : items) {
      bytes += item.request->inputs[i].data().size();
      rows += item.request->inputs[i].shape()[0];
    }
    result<mutable_buffer> joined = mutable_buffer::allocate(bytes);
    if (!joined) return std::move(joined).error();
    std::size_t at = 0;
    for (const batch_item& item : items) {
      const buffer& part = item.request->inputs[i].data();
      if (!part.empty()) std::memcpy(joined->data() + at, part.data(), part.size());
      at += part.size();
    }
    shape_type shape = first[i].shape();
    shape[0] = rows;
    result<tensor> input =
        tensor::make(first[i].name(), first[i].type(), std::move(shape), std::move(*joined));
    if (!input) return std::move(input).error();
    merged.inputs.push_back(std::move(*input));
  }
  return merged;
}

// Where each row of a tensor starts in its bytes, plus the end: fixed-size rows by arithmetic,
// BYTES rows by walking the elements' length prefixes.
std::vector<std::size_t> row_offsets(const tensor& t, std::uint64_t rows) {
  std::vector<std::size_t> offsets(rows + 1, 0);
  if (rows == 0) return offsets;
  const std::uint64_t per_row = t.element_count() / rows;
  if (t.type() != datatype::bytes) {
    const std::size_t row_bytes = per_row * element_size(t.type());
    for (std::uint64_t r = 0; r <= rows; ++r) offsets[r] = r * row_bytes;
    return offsets;
  }
  std::size_t at = 0;
  std::uint64_t element = 0;
  for (std::string_view value : t.strings()) {
    at += 4 + value.size();
    if (++element % per_row == 0) offsets[element / per_row] = at;
  }
  return offsets;
}

// A batch's outputs split back, row for row, into one model_output per request (views, not
// copies). Every output must have the batch's rows first.
result<std::vector<model_output>> split(model_output&& batch, const std::vector<batch_item>& items,
                                        std::string_view model_name) {
  std::uint64_t total = 0;
  for (const batch_item& item : items) total += item.pending->batch;
  std::vector<model_output> parts(items.size());
  for (model_output& part : parts) part.parameters = batch.parameters;
  for (const tensor& t : batch.outputs) {
    if (t.shape().empty() || t.shape()[0] != static_cast<std::int64_t>(total)) {
      return status{errc::internal,
                    fmt::format("model '{}' returned output '{}' of shape {} for a batch of {} "
                                "rows",
                                model_name, t.name(), to_string(t.shape()), total)};
    }
    const std::vector<std::size_t> offsets = row_offsets(t, total);
    std::uint64_t row = 0;
    for (std::size_t j = 0; j < items.size(); ++j) {
      const std::uint64_t rows = items[j].pending->batch;
      const std::size_t begin = offsets[row];
      result<buffer> slice = t.data().slice(begin, offsets[row + rows] - begin);
      if (!slice) return std::move(slice).error();
      shape_type shape = t.shape();
      shape[0] = static_cast<std::int64_t>(rows);
      result<tensor> part = tensor::make(t.name(), t.type(), std::move(shape), std::move(*slice));
      if (!part) return std::move(part).error();
      part->parameters() = t.parameters();
      parts[j].outputs.push_back(std::move(*part));
      row += rows;
    }
  }
  return parts;
}

// One model's batch queue. A thread forms batches: the longest run of compatible requests at the
// front of the queue, up to `max_batch_size` rows, once an instance is free and either the batch
// is full, the next request cannot join it, or the oldest has waited `max_queue_delay`. `run`
// takes each batch and must call `finished` once it completed. The thread holds the queue, so
// the queue outlives its `batcher` handle for as long as the thread still runs.
class batch_queue {
 public:
  using run_function =
      std::function<void(const std::shared_ptr<batch_queue>&, std::vector<batch_item>)>;
  using fail_function = std::function<void(const batch_item&, const status&)>;

  batch_queue(const model_config& config, run_function run, fail_function fail)
      : model_name_{config.name},
        max_rows_{static_cast<std::uint64_t>(config.max_batch_size)},
        settings_{config.batching},
        run_{std::move(run)},
        fail_{std::move(fail)} {
    settings_.instances = std::max<std::size_t>(settings_.instances, 1);
  }

  status enqueue(batch_item item) {
    {
      const std::lock_guard lock{mutex_};
      if (stopping_) {
        return status{errc::unavailable,
                      fmt::format("model '{}' is no longer taking requests", model_name_)};
      }
      if (queue_.size() >= settings_.max_queue_size) {
        return status{errc::unavailable,
                      fmt::format("the batch queue of model '{}' is full ({} requests waiting)",
                                  model_name_, queue_.size())};
      }
      queue_.push_back(std::move(item));
    }
    wake_.notify_one();
    return {};
  }

  void finished() {
    {
      const std::lock_guard lock{mutex_};
      --running_;
    }
    wake_.notify_one();
  }

  // Stops forming batches and answers what still waits.
  void stop() {
    std::deque<batch_item> left;
    {
      const std::lock_guard lock{mutex_};
      stopping_ = true;
      left.swap(queue_);
    }
    wake_.notify_all();
    for (const batch_item& item : left) {
      fail_(item,
            status{errc::unavailable,
                   fmt::format("model '{}' stopped batching before the request ran", model_name_)});
    }
  }

  // The batching thread's body; `self` is this queue.
  void loop(const std::shared_ptr<batch_queue>& self) {
    std::unique_lock lock{mutex_};
    while (!stopping_) {
      if (queue_.empty() || running_ >= settings_.instances) {
        wake_.wait(lock);
        continue;
      }
      const auto [count, can_grow] = next_batch();
      const clock::time_point deadline = queue_.front().pending->queued + settings_.max_queue_delay;
      if (can_grow && clock::now() < deadline) {
        wake_.wait_until(lock, deadline);
        continue;
      }
      const auto end = queue_.begin() + static_cast<std::ptrdiff_t>(count);
      std::vector<batch_item> batch(std::make_move_iterator(queue_.begin()),
                                    std::make_move_iterator(end));
      queue_.erase(queue_.begin(), end);
      ++running_;
      lock.unlock();
      run_(self, std::move(batch));
      lock.lock();
    }
  }

 private:
  // How many requests at the front can run together, and whether the batch can still grow. The
  // largest prefix whose rows make a preferred batch size runs at once.
  std::pair<std::size_t, bool> next_batch() const {
    std::uint64_t rows = 0;
    std::size_t count = 0;
    std::size_t preferred = 0;  // requests in the largest prefix of a preferred size
    const auto is_preferred = [&](std::uint64_t n) {
      return std::find(settings_.preferred_batch_sizes.begin(),
                       settings_.preferred_batch_sizes.end(),
                       n) != settings_.preferred_batch_sizes.end();
    };
    bool can_grow = true;
    for (const batch_item& item : queue_) {
      if ((count > 0 && !batchable_together(*queue_.front().request, *item.request)) ||
          rows + item.pending->batch > max_rows_) {
        can_grow = false;
        break;
      }
      rows += item.pending->batch;
      ++count;
      if (is_preferred(rows)) preferred = count;
    }
    if (preferred > 0) return {preferred, false};
    return {count, can_grow && rows < max_rows_};
  }

  const std::string model_name_;
  const std::uint64_t max_rows_;
  model_config::batching_settings settings_;
  const run_function run_;
  const fail_function fail_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<batch_item> queue_;
  std::size_t running_ = 0;
  bool stopping_ = false;
};

// A batch queue and its thread: destroying it stops the queue and waits for the thread (or lets
// it finish on its own when the last owner is that very thread).
class batcher {
 public:
  explicit batcher(std::shared_ptr<batch_queue> queue)
      : queue_{std::move(queue)}, thread_{[queue = queue_] { queue->loop(queue); }} {}
  batcher(const batcher&) = delete;
  batcher& operator=(const batcher&) = delete;
  ~batcher() {
    queue_->stop();
    if (thread_.get_id() == std::this_thread::get_id()) {
      thread_.detach();  // the thread holds the queue and ends once this returns
    } else {
      thread_.join();
    }
  }
  [[nodiscard]] status enqueue(batch_item item) { return queue_->enqueue(std::move(item)); }

 private:
  std::shared_ptr<batch_queue> queue_;
  std::thread thread_;
};

}  // namespace

struct inference_service::state : std::enable_shared_from_this<inference_service::state> {
  model_repository& repository;
  executor& workers;
  server_options options;

  // What the service keeps per model instance, made on its first request: its sequence manager or
  // its batch queue. Held with the instance weakly: an unloaded model is freed, and what it had
  // here goes with the next prune.
  struct model_extras {
    std::weak_ptr<model> instance;
    std::shared_ptr<sequence_manager> sequences;
    std::shared_ptr<batcher> batches;
  };
  std::mutex extras_mutex;
  std::map<const model*, model_extras> extras;
  std::unique_ptr<shared_memory_registry> regions;  // when the extension is offered
  std::shared_ptr<tracer> traces;                   // a traced request's completion holds it too
  // Model loads and unloads, made with the first one; none after the service starts closing.
  std::mutex control_mutex;
  std::unique_ptr<detail::serial_worker> control;
  bool control_closed = false;

  // Runs `work` on the model-control thread and hands its outcome to `done` there; once the
  // service is closing, `done` gets a refusal at once.
  void post_control(std::function<status()> work, control_completion done) {
    {
      const std::lock_guard lock{control_mutex};
      if (!control_closed) {
        if (!control) control = std::make_unique<detail::serial_worker>();
        control->post([work = std::move(work), done = std::move(done)] { done(work()); });
        return;
      }
    }
    done(status{errc::unavailable, "the server is stopping: no model loads or unloads"});
  }

  [[nodiscard]] bool on_control_thread() {
    const std::lock_guard lock{control_mutex};
    return control && control->runs_here();
  }

  state(model_repository& r, executor& w, server_options o)
      : repository{r},
        workers{w},
        options{std::move(o)},
        traces{std::make_shared<tracer>(options.trace)} {
    if (options.version.empty()) options.version = std::string{oip::version_string};
    if (options.shared_memory) regions = std::make_unique<shared_memory_registry>();
  }

  // The extras of the lease's model, made by `make` when it has none yet.
  template <class Make>
  model_extras extras_of(const model_lease& lease, Make&& make) {
    const std::shared_ptr<model>& instance = lease.shared();
    std::vector<model_extras> retired;  // destroyed outside the lock
    const std::lock_guard lock{extras_mutex};
    if (const auto it = extras.find(instance.get());
        it != extras.end() && it->second.instance.lock() == instance) {
      return it->second;
    }
    for (auto it = extras.begin(); it != extras.end();) {
      if (it->second.instance.expired() || it->first == instance.get()) {
        retired.push_back(std::move(it->second));
        it = extras.erase(it);
      } else {
        ++it;
      }
    }
    model_extras made = make(std::weak_ptr<model>{instance});
    extras.emplace(instance.get(), made);
    return made;
  }

  std::shared_ptr<sequence_manager> sequences_of(const model_lease& lease) {
    return extras_of(lease,
                     [](std::weak_ptr<model> weak) {
                       const std::shared_ptr<model> m = weak.lock();
                       auto manager = std::make_shared<sequence_manager>(
                           m->config().name, m->config().sequence,
                           [weak](const sequence_id& id, std::any& sequence_state,
                                  sequence_release reason) {
                             if (const std::shared_ptr<model> held = weak.lock()) {
                               held->release_sequence(id, sequence_state, reason);
                             }
                           });
                       return model_extras{std::move(weak), std::move(manager), nullptr};
                     })
        .sequences;
  }

  // Stops every batch queue and waits for its thread. A batch thread runs service code and
  // submits to the executor while a batch starts, holding the state: without this, the state
  // could die on that thread after the service is gone, and the thread outlive the executor that
  // the host destroys next.
  void stop_batching() {
    std::vector<std::shared_ptr<batcher>> stopping;
    {
      const std::lock_guard lock{extras_mutex};
      for (auto& entry : extras) {
        if (entry.second.batches) stopping.push_back(std::move(entry.second.batches));
      }
    }
    stopping.clear();  // outside the lock: a batch that is starting may need it
  }

  std::shared_ptr<batcher> batches_of(const model_lease& lease) {
    std::weak_ptr<state> self = weak_from_this();
    return extras_of(lease,
                     [self](std::weak_ptr<model> weak) {
                       auto queue = std::make_shared<batch_queue>(
                           weak.lock()->config(), batch_runner(self), refuse_queued);
                       return model_extras{std::move(weak), nullptr,
                                           std::make_shared<batcher>(std::move(queue))};
                     })
        .batches;
  }

  // What a model's batch queue calls with each batch it forms.
  static batch_queue::run_function batch_runner(std::weak_ptr<state> self) {
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

  // A request that a batch queue will not run (its model stopped batching, or the server).
  static void refuse_queued(const batch_item& item, const status& why) {
    fail(item.pending, why, failure_reason::rejected);
  }

  void infer(model_lease lease, inference_request request, cancellation cancel,
             std::shared_ptr<reply_sink> sink, clock::time_point received,
             transport_trace* transport) {
    const model_config& config = lease.get().config();
    const auto refuse = [&](const status& s) {
      record_failure(lease, received, s, request.id.value_or(""));
      sink->on_complete(s);
    };
    if (!request.shared_memory_inputs.empty()) {
      if (status s = read_shared_memory_inputs(request, regions.get(), options.bounds, config.name);
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
    if (const auto* timeout = request.parameters.get<std::int64_t>("timeout");
        timeout != nullptr && *timeout > 0) {
      // A timeout past what the clock can count (about 292 years) is no deadline at all.
      const auto left = std::chrono::duration_cast<std::chrono::microseconds>(
          clock::time_point::max() - received);
      if (std::chrono::microseconds{*timeout} < left) {
        cancel.set_deadline(received + std::chrono::microseconds{*timeout});
      }
    }

    auto pending = std::make_shared<pending_inference>();
    pending->id = request.id;
    pending->asked = request.outputs;
    pending->sink = std::move(sink);
    pending->destinations = std::move(*destinations);
    pending->cancel = std::move(cancel);
    pending->batch = detail::batch_size(config, request);
    pending->received = received;
    pending->queued = clock::now();
    pending->trace = traces->sample(config.name);
    if (pending->trace) {
      pending->traces = traces;
      pending->transport = transport;
      if (includes(pending->trace->level, trace_level::tensors)) {
        trace_tensors(*pending, "TENSOR_QUEUE_INPUT", request.inputs);
      }
    }
    pending->lease = std::move(lease);
    pending->counted_pending = true;
    pending->lease.statistics().request_queued();
    const bool batched = config.dynamic_batching && config.max_batch_size > 0;
    if (config.inline_execution && !config.sequence_batching && !batched) {
      return run(pending, std::move(request), {});  // on this thread: no worker's wake-up
    }
    auto request_ptr = std::make_shared<inference_request>(std::move(request));

    if (!config.sequence_batching) {
      if (batched) {
        const std::shared_ptr<batcher> batches = batches_of(pending->lease);
        status queued = batches != nullptr ? batches->enqueue({pending, request_ptr})
                                           : status{errc::unavailable, "the server is stopping"};
        if (!queued.ok()) fail(pending, queued, refusal_reason(queued));
        return;
      }
      return dispatch(pending, request_ptr, {});
    }
    const std::shared_ptr<sequence_manager> manager = sequences_of(pending->lease);
    status admitted = manager->submit(
        *flags,
        [self = shared_from_this(), pending, request_ptr](sequence_turn turn) {
          self->dispatch(pending, request_ptr, std::move(turn));
        },
        pending->batch);
    if (!admitted.ok()) fail(pending, admitted, refusal_reason(admitted));
  }

  void dispatch(const std::shared_ptr<pending_inference>& pending,
                const std::shared_ptr<inference_request>& request, sequence_turn turn) {
    // The executor takes copyable jobs: a sequence's turn travels in a shared box (none for the
    // usual request, which holds no turn).
    std::shared_ptr<sequence_turn> held_turn;
    if (turn) held_turn = std::make_shared<sequence_turn>(std::move(turn));
    status submitted = workers.submit([self = shared_from_this(), pending, request, held_turn] {
      self->run(pending, std::move(*request), held_turn ? std::move(*held_turn) : sequence_turn{});
    });
    if (submitted.ok()) return;
    fail(pending, submitted, refusal_reason(submitted));
    // A request of a sequence that cannot run ends its sequence, as a cancelled one does.
    if (held_turn) held_turn->cancel_sequence();
  }

  void run(const std::shared_ptr<pending_inference>& pending, inference_request request,
           sequence_turn turn) {
    pending->started = clock::now();
    pending->stop_counting_pending();
    // A request of a sequence is answered before its turn passes on, as `finish` does.
    if (turn && turn.step().cancelled) {
      return fail(
          pending,
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
    detail::execute_guarded(
        m, inference_call{std::move(request), pending->lease.version(), pending->cancel,
                          [self = shared_from_this(), pending](result<model_output> outcome) {
                            self->complete(pending, std::move(outcome));
                          },
                          std::move(turn)});
  }

  static void fail_cancelled(const std::shared_ptr<pending_inference>& pending) {
    if (pending->cancel.client_gone()) {
      return fail(pending, status{errc::unavailable, "the request was cancelled by the client"},
                  failure_reason::canceled);
    }
    fail(pending, status{errc::unavailable, "the request's timeout expired before the model ran"},
         failure_reason::rejected);
  }

  // Hands a batch to a worker; the batcher learns when it completed.
  void run_batch(const std::shared_ptr<batch_queue>& queue, std::vector<batch_item> batch) {
    auto items = std::make_shared<std::vector<batch_item>>(std::move(batch));
    status submitted = workers.submit(
        [self = shared_from_this(), queue, items] { self->execute_batch(queue, *items); });
    if (submitted.ok()) return;
    for (const batch_item& item : *items) fail(item.pending, submitted, failure_reason::rejected);
    queue->finished();
  }

  // One execution for the batch's requests still wanted: a lone request runs as it came, several
  // run merged, and the outputs are split back.
  static void execute_batch(const std::shared_ptr<batch_queue>& queue,
                            std::vector<batch_item>& batch) {
    const clock::time_point started = clock::now();
    auto items = std::make_shared<std::vector<batch_item>>();
    for (batch_item& item : batch) {
      item.pending->started = started;
      item.pending->stop_counting_pending();
      if (item.pending->cancel.cancelled()) {
        fail_cancelled(item.pending);
      } else {
        items->push_back(std::move(item));
      }
    }
    if (items->empty()) {
      queue->finished();
      return;
    }
    const model_lease& lease = items->front().pending->lease;
    model& m = lease.get();
    inference_call::completion done = [queue, items](result<model_output> outcome) {
      complete_batch(*items, std::move(outcome));
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
      for (const batch_item& item : *items)
        fail(item.pending, merged.error(), failure_reason::other);
      queue->finished();
      return;
    }
    detail::execute_guarded(
        m, inference_call{std::move(*merged), lease.version(), cancellation{}, std::move(done)});
  }

  static void complete_batch(const std::vector<batch_item>& items, result<model_output> outcome) {
    if (items.size() == 1) return complete(items.front().pending, std::move(outcome));
    if (!outcome) {
      for (const batch_item& item : items)
        fail(item.pending, outcome.error(), failure_reason::backend);
      return;
    }
    const model_config& config = items.front().pending->lease.get().config();
    result<std::vector<model_output>> parts = split(std::move(*outcome), items, config.name);
    if (!parts) {
      for (const batch_item& item : items)
        fail(item.pending, parts.error(), failure_reason::backend);
      return;
    }
    // One execution for the whole batch; each request counts its own rows.
    std::uint64_t rows = 0;
    for (const batch_item& item : items) rows += item.pending->batch;
    for (std::size_t j = 0; j < items.size(); ++j) {
      complete(items[j].pending, std::move((*parts)[j]), j == 0 ? rows : 0);
    }
  }

  static void fail(const std::shared_ptr<pending_inference>& pending, const status& s,
                   failure_reason reason) {
    pending->stop_counting_pending();
    const std::shared_ptr<reply_sink> sink = std::move(pending->sink);
    if (!sink) return;
    record_failure(pending->lease, pending->received, s, pending->id.value_or(""), reason);
    answer(*pending, *sink, s, {}, clock::now());
  }

  // `execution_rows`: the rows of the execution this request was part of, for the one request
  // of it that counts the execution; 0 for the others of a merged batch.
  static void complete(const std::shared_ptr<pending_inference>& pending,
                       result<model_output> outcome,
                       std::optional<std::uint64_t> execution_rows = std::nullopt) {
    const clock::time_point computed = clock::now();
    if (!outcome) {
      // A model that stops early because the client went away fails a cancelled request.
      return fail(
          pending, outcome.error(),
          pending->cancel.client_gone() ? failure_reason::canceled : failure_reason::backend);
    }
    if (pending->trace && includes(pending->trace->level, trace_level::tensors)) {
      trace_tensors(*pending, "TENSOR_BACKEND_OUTPUT", outcome->outputs);
    }
    const model_config& config = pending->lease.get().config();
    result<inference_response> response = detail::make_response(
        config, pending->lease.version(), pending->id, pending->asked, std::move(*outcome));
    model_statistics& stats = pending->lease.statistics();
    const clock::time_point made = clock::now();
    // The model ran, whether or not this request's response could be made of what it gave.
    const std::uint64_t rows = execution_rows.value_or(pending->batch);
    if (rows != 0) {
      stats.add_execution(rows, {1, nanoseconds_between(pending->received, pending->queued),
                                 nanoseconds_between(pending->started, computed),
                                 nanoseconds_between(computed, made)});
    }
    if (!response) return fail(pending, response.error(), failure_reason::backend);
    if (!pending->destinations.empty()) {
      if (status written = write_outputs(pending->destinations, *response); !written.ok()) {
        return fail(pending, written, failure_reason::other);
      }
      for (const shared_memory_destination& place : pending->destinations) {
        response->shared_memory_outputs.push_back(place.output);
      }
    }
    const std::shared_ptr<reply_sink> sink = std::move(pending->sink);
    if (!sink) return;

    // A request's durations are recorded together, once it succeeded, as Triton does:
    // perf_analyzer checks that the compute counts agree between two snapshots.
    stats.add_success(
        {.queue_ns = nanoseconds_between(pending->queued, pending->started),
         .compute_input_ns = nanoseconds_between(pending->received, pending->queued),
         .compute_infer_ns = nanoseconds_between(pending->started, computed),
         .compute_output_ns = nanoseconds_between(computed, made),
         .total_ns = nanoseconds_between(pending->received, made)},
        pending->batch,
        static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                       std::chrono::system_clock::now().time_since_epoch())
                                       .count()));
    if (log_enabled(log_level::verbose)) {
      log(log_level::verbose,
          fmt::format("model '{}' version {} request '{}': ok in {} us", config.name,
                      pending->lease.version(), pending->id.value_or(""),
                      nanoseconds_between(pending->received, made) / 1000));
    }
    answer(*pending, *sink, std::move(*response), computed, made);
  }
};

inference_service::inference_service(model_repository& repository, executor& workers,
                                     server_options options)
    : state_{std::make_shared<state>(repository, workers, std::move(options))} {}

inference_service::~inference_service() {
  if (!state_) return;
  {
    std::unique_ptr<detail::serial_worker> control;
    {
      const std::lock_guard lock{state_->control_mutex};
      state_->control_closed = true;
      control = std::move(state_->control);
    }
  }  // the loads and unloads posted are done
  state_->stop_batching();
}

const server_options& inference_service::options() const noexcept { return state_->options; }
model_repository& inference_service::repository() const noexcept { return state_->repository; }

server_metadata inference_service::metadata() const {
  server_metadata m;
  m.name = state_->options.name;
  m.version = state_->options.version;
  m.extensions = {"binary_tensor_data", "classification", "logging",  "model_configuration",
                  "model_repository",   "parameters",     "sequence", "sequence(string_id)",
                  "statistics",         "trace"};
  if (state_->regions) m.extensions.emplace_back("system_shared_memory");
  return m;
}

shared_memory_registry* inference_service::shared_memory() const noexcept {
  return state_->regions.get();
}

namespace {

// Triton's answer on the trace routes for a model that is unknown or not ready (none named is the
// global scope).
status known_or_global(const model_repository& repository, std::optional<std::string_view> model) {
  if (!model) return status{};
  if (status s = check_model_name(*model); !s.ok()) return s;
  if (repository.acquire(*model, std::nullopt)) return status{};
  return status{errc::invalid_argument, fmt::format("Request for unknown model : {}", *model)};
}

}  // namespace

result<trace_settings> inference_service::tracing(std::optional<std::string_view> model) const {
  if (status s = known_or_global(state_->repository, model); !s.ok()) return s;
  return state_->traces->settings(model);
}

bool inference_service::tracing_active() const noexcept { return state_->traces->active(); }

result<trace_settings> inference_service::update_tracing(std::optional<std::string_view> model,
                                                         const trace_settings_change& change) {
  if (status s = known_or_global(state_->repository, model); !s.ok()) return s;
  return state_->traces->update(model, change);
}

result<std::vector<shared_memory_region>> inference_service::system_shared_memory_status(
    std::optional<std::string_view> region) const {
  if (state_->regions) return state_->regions->regions(region);
  if (!region) return std::vector<shared_memory_region>{};
  return status{errc::not_found,
                fmt::format("Unable to find system shared memory region: '{}'", *region)};
}

status inference_service::register_system_shared_memory(shared_memory_region region) {
  if (!state_->regions) {
    return status{errc::not_implemented,
                  "this server does not offer the system shared-memory extension"};
  }
  return state_->regions->register_region(std::move(region.name), std::move(region.key),
                                          region.offset, region.byte_size);
}

status inference_service::unregister_system_shared_memory(std::optional<std::string_view> region) {
  if (!state_->regions) return status{};  // nothing was registered
  if (region) {
    state_->regions->unregister(*region);
  } else {
    state_->regions->unregister_all();
  }
  return status{};
}

result<std::vector<shared_memory_region>> inference_service::cuda_shared_memory_status(
    std::optional<std::string_view> region) {
  if (!region) return std::vector<shared_memory_region>{};
  return status{errc::not_found,
                fmt::format("Unable to find cuda shared memory region: '{}'", *region)};
}

status inference_service::unregister_cuda_shared_memory() { return status{}; }

status inference_service::register_cuda_shared_memory() {
  return status{errc::not_implemented,
                "CUDA shared memory is not supported by this server; use system shared memory"};
}

bool inference_service::ready() const { return state_->repository.all_ready(); }

result<model_metadata> inference_service::metadata(std::string_view model,
                                                   std::optional<std::uint64_t> version) const {
  result<model_lease> lease = state_->repository.find(model, version);
  if (!lease) return std::move(lease).error();
  return metadata_of(lease->get().config(), state_->repository.versions(model));
}

result<bool> inference_service::ready(std::string_view model,
                                      std::optional<std::uint64_t> version) const {
  result<model_lease> lease = state_->repository.find(model, version);
  if (!lease) return std::move(lease).error();
  return state_->repository.acquire(model, version).ok();
}

result<model_config> inference_service::configuration(std::string_view model,
                                                      std::optional<std::uint64_t> version) const {
  result<model_lease> lease = state_->repository.find(model, version);
  if (!lease) return std::move(lease).error();
  return lease->get().config();
}

result<std::vector<statistics_snapshot>> inference_service::statistics(
    std::optional<std::string_view> model, std::optional<std::uint64_t> version) const {
  if (model) {
    if (status s = check_model_name(*model); !s.ok()) return s;
  }
  std::vector<statistics_snapshot> out;
  for (const model_index_entry& entry : state_->repository.index()) {
    if (model && entry.name != *model) continue;
    if (version && entry.version != *version) continue;
    result<model_lease> lease = state_->repository.find(entry.name, entry.version);
    if (!lease) continue;  // removed meanwhile
    out.push_back(snapshot_of(entry.name, entry.version, lease->statistics()));
    if (lease->get().config().sequence_batching) {
      out.back().active_sequences = 0;
      const std::lock_guard lock{state_->extras_mutex};
      const auto it = state_->extras.find(&lease->get());
      if (it != state_->extras.end() && it->second.sequences) {
        out.back().active_sequences = it->second.sequences->active();
      }
    }
  }
  if (model && out.empty()) return unknown_model(*model, version);
  return out;
}

std::vector<model_index_entry> inference_service::repository_index() const {
  std::vector<model_index_entry> out = state_->repository.index();
  if (const std::shared_ptr<model_loader> loader = state_->repository.loader()) {
    for (const std::string& name : loader->available()) {
      const bool listed = std::any_of(out.begin(), out.end(),
                                      [&](const model_index_entry& e) { return e.name == name; });
      if (!listed) out.push_back({name, 0, "UNAVAILABLE", "unloaded"});
    }
  }
  return out;
}

status model_control_refused() {
  return status{errc::failed_precondition,
                "explicit model load / unload is not allowed if polling is enabled"};
}

namespace {

// Builds `model` with `loader` and registers it (in place of the version there, if any).
status build_and_register(model_repository& repository, model_loader& loader,
                          const std::string& model, const parameters& request) {
  // The loader's models are version 1: a version the host registered would go on serving
  // requests that name none, whatever was loaded.
  for (const std::uint64_t version : repository.versions(model)) {
    if (version != 1) {
      return status{errc::invalid_argument,
                    fmt::format("model '{}' has version {}, which this server's model loader "
                                "does not make (it loads version 1): unload the model first",
                                model, version)};
    }
  }
  result<std::shared_ptr<oip::model>> loaded = loader.load_with(model, request);
  if (!loaded) return loaded.error();
  if (*loaded == nullptr || (*loaded)->config().name != model) {
    return status{errc::internal, fmt::format("the loader did not produce model '{}'", model)};
  }
  // A model that is there is reloaded, as in Triton: with parameters, or when it is not ready or
  // is being unloaded.
  return repository.replace(std::move(*loaded));
}

// Builds `model` with `loader` and registers it; on the model-control thread. A loader that throws
// fails the load, not the thread.
status load_now(model_repository& repository, model_loader& loader, const std::string& model,
                const parameters& request) noexcept {
  try {
    return build_and_register(repository, loader, model, request);
  } catch (const std::exception& e) {
    return status{errc::internal, fmt::format("loading model '{}' failed: {}", model, e.what())};
  } catch (...) {
    return status{errc::internal, fmt::format("loading model '{}' failed", model)};
  }
}

}  // namespace

status inference_service::model_control_allowed() const {
  if (state_->options.model_control != model_control_mode::explicit_loading) {
    return model_control_refused();
  }
  return {};
}

void inference_service::load(std::string model, parameters request, control_completion done) {
  if (status s = model_control_allowed(); !s.ok()) return done(s);
  if (status s = check_model_name(model); !s.ok()) return done(s);
  // A model that serves is left as it is when no parameters come, whoever registered it.
  if (request.empty() && state_->repository.acquire(model, std::nullopt).ok()) return done({});
  std::shared_ptr<model_loader> loader = state_->repository.loader();
  if (!loader) {
    return done(status{errc::invalid_argument,
                       "this server has no model loader: its models are registered by the host "
                       "application"});
  }
  std::vector<std::string> offered;
  try {
    offered = loader->available();
  } catch (...) {
    return done(status{errc::internal, "this server's model loader failed to list its models"});
  }
  if (std::find(offered.begin(), offered.end(), model) == offered.end()) {
    return done(status{errc::not_found,
                       fmt::format("failed to load '{}': this server's model loader has no model "
                                   "of that name",
                                   model)});
  }
  state_->post_control(
      [state = state_, loader = std::move(loader), model = std::move(model),
       request = std::move(request)] {
        return load_now(state->repository, *loader, model, request);
      },
      std::move(done));
}

void inference_service::unload(std::string model, control_completion done) {
  if (status s = model_control_allowed(); !s.ok()) return done(s);
  if (status s = check_model_name(model); !s.ok()) return done(s);
  state_->post_control(
      [state = state_, model = std::move(model)] { return state->repository.remove(model); },
      std::move(done));
}

namespace {
// A load or unload that waits on the model-control thread would wait for itself.
status waited_on_control_thread() {
  return status{errc::internal,
                "a load or unload that waits for its outcome cannot be made from a model loader or "
                "a load's completion: use the form that takes a completion"};
}

// The completion holds the promise, so that it outlives a `set_value` on the control thread.
template <class Start>
status wait_for(Start&& start) {
  auto outcome = std::make_shared<std::promise<status>>();
  std::future<status> ready = outcome->get_future();
  start([outcome](status s) { outcome->set_value(std::move(s)); });
  return ready.get();
}
}  // namespace

status inference_service::load(std::string model, parameters request) {
  if (state_->on_control_thread()) return waited_on_control_thread();
  return wait_for([&](control_completion done) {
    load(std::move(model), std::move(request), std::move(done));
  });
}

status inference_service::unload(std::string model) {
  if (state_->on_control_thread()) return waited_on_control_thread();
  return wait_for([&](control_completion done) { unload(std::move(model), std::move(done)); });
}

void inference_service::infer_decoding(const arrival& request, decoder decode,
                                       std::shared_ptr<reply_sink> sink) {
  result<model_lease> lease = state_->repository.acquire(request.model, request.version);
  if (!lease) {
    log_request_failure(lease.error(), fmt::format("model '{}'", request.model), request.id);
    return sink->on_complete(lease.error());
  }
  result<inference_request> decoded = decode.call(decode.function, lease->get().config());
  if (!decoded) {
    record_failure(*lease, request.received, decoded.error(), request.id);
    return sink->on_complete(decoded.error());
  }
  sink->on_admitted();
  state_->infer(std::move(*lease), std::move(*decoded), request.cancel, std::move(sink),
                request.received, request.trace);
}

void inference_service::infer(const arrival& request, inference_request decoded,
                              std::shared_ptr<reply_sink> sink) {
  infer(
      request, [&](const model_config&) -> result<inference_request> { return std::move(decoded); },
      std::move(sink));
}

}  // namespace oip
