#include "detail/validation.hpp"

#include <oip/inference_service.hpp>
#include <oip/sequence.hpp>
#include <oip/version.hpp>

#include <algorithm>
#include <map>
#include <mutex>

#include <fmt/format.h>

namespace oip {

namespace {

using clock = inference_service::clock;

std::uint64_t nanoseconds_between(clock::time_point from, clock::time_point to) noexcept {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(to - from).count());
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
  const auto duration = [](const model_statistics::duration& d) {
    return statistics_snapshot::duration{d.count.load(), d.ns.load()};
  };
  statistics_snapshot out;
  out.name = name;
  out.version = version;
  out.last_inference_ms = s.last_inference_ms.load();
  out.inference_count = s.inference_count.load();
  out.execution_count = s.execution_count.load();
  out.success = duration(s.success);
  out.fail = duration(s.fail);
  out.queue = duration(s.queue);
  out.compute_input = duration(s.compute_input);
  out.compute_infer = duration(s.compute_infer);
  out.compute_output = duration(s.compute_output);
  return out;
}

// One inference between its validation and its reply.
struct pending_inference {
  model_lease lease;
  std::optional<std::string> id;
  std::vector<requested_output> asked;
  inference_service::completion done;
  cancellation cancel;
  std::uint64_t batch = 1;
  clock::time_point received;
  clock::time_point queued;
  clock::time_point started;
};

}  // namespace

struct inference_service::state : std::enable_shared_from_this<inference_service::state> {
  model_repository& repository;
  executor& workers;
  server_options options;

  // The sequence manager of each sequence model instance, made on its first request. A manager
  // holds its model weakly: an unloaded model is freed, and its manager goes with the next prune.
  struct sequence_slot {
    std::weak_ptr<model> instance;
    std::shared_ptr<sequence_manager> manager;
  };
  std::mutex sequences_mutex;
  std::map<const model*, sequence_slot> sequences;

  state(model_repository& r, executor& w, server_options o)
      : repository{r}, workers{w}, options{std::move(o)} {
    if (options.version.empty()) options.version = std::string{oip::version_string};
  }

  std::shared_ptr<sequence_manager> sequences_of(const model_lease& lease) {
    const std::shared_ptr<model>& instance = lease.shared();
    std::vector<std::shared_ptr<sequence_manager>> retired;  // destroyed outside the lock
    const std::lock_guard lock{sequences_mutex};
    if (const auto it = sequences.find(instance.get());
        it != sequences.end() && it->second.instance.lock() == instance) {
      return it->second.manager;
    }
    for (auto it = sequences.begin(); it != sequences.end();) {
      if (it->second.instance.expired() || it->first == instance.get()) {
        retired.push_back(std::move(it->second.manager));
        it = sequences.erase(it);
      } else {
        ++it;
      }
    }
    std::weak_ptr<model> weak = instance;
    auto manager = std::make_shared<sequence_manager>(
        instance->config().name, instance->config().sequence,
        [weak](const sequence_id& id, std::any& sequence_state, sequence_release reason) {
          if (const std::shared_ptr<model> m = weak.lock()) {
            m->release_sequence(id, sequence_state, reason);
          }
        });
    sequences.emplace(instance.get(), sequence_slot{weak, manager});
    return manager;
  }

  void infer(model_lease lease, inference_request request, cancellation cancel, completion done,
             clock::time_point received) {
    const model_config& config = lease.get().config();
    const auto refuse = [&](const status& s) {
      record_failure(lease, received);
      done(s);
    };
    if (status s = detail::validate_request(config, request); !s.ok()) return refuse(s);
    if (const auto* timeout = request.parameters.get<std::int64_t>("timeout");
        timeout != nullptr && *timeout > 0) {
      cancel.set_deadline(received + std::chrono::microseconds{*timeout});
    }

    auto pending = std::make_shared<pending_inference>();
    pending->id = request.id;
    pending->asked = request.outputs;
    pending->done = std::move(done);
    pending->cancel = std::move(cancel);
    pending->batch = detail::batch_size(config, request);
    pending->received = received;
    pending->queued = clock::now();
    pending->lease = std::move(lease);
    auto request_ptr = std::make_shared<inference_request>(std::move(request));

    if (!config.sequence_batching) return dispatch(pending, request_ptr, {});
    // Sequence parameters sent to a model without sequences are ignored, as in Triton.
    result<sequence_flags> flags =
        read_sequence_flags(request_ptr->parameters, options.bounds.max_string_id_length);
    if (!flags) return fail(pending, flags.error());
    const std::shared_ptr<sequence_manager> manager = sequences_of(pending->lease);
    status admitted = manager->submit(
        *flags,
        [self = shared_from_this(), pending, request_ptr](sequence_turn turn) {
          self->dispatch(pending, request_ptr, std::move(turn));
        },
        pending->batch);
    if (!admitted.ok()) fail(pending, admitted);
  }

  void dispatch(const std::shared_ptr<pending_inference>& pending,
                const std::shared_ptr<inference_request>& request, sequence_turn turn) {
    // The executor takes copyable jobs: the turn travels in a shared box.
    auto held_turn = std::make_shared<sequence_turn>(std::move(turn));
    status submitted = workers.submit([self = shared_from_this(), pending, request, held_turn] {
      self->run(pending, std::move(*request), std::move(*held_turn));
    });
    if (!submitted.ok()) fail(pending, submitted);  // the turn goes with the job, after this
  }

  void run(const std::shared_ptr<pending_inference>& pending, inference_request request,
           sequence_turn turn) {
    pending->started = clock::now();
    if (pending->cancel.cancelled()) {
      fail(pending,
           status{errc::unavailable, pending->cancel.client_gone()
                                         ? "the request was cancelled by the client"
                                         : "the request's timeout expired before the model ran"});
      return;
    }
    model& m = pending->lease.get();
    m.execute(inference_call{std::move(request), pending->lease.version(), pending->cancel,
                             [self = shared_from_this(), pending](result<model_output> outcome) {
                               self->complete(pending, std::move(outcome));
                             },
                             std::move(turn)});
  }

  static void fail(const std::shared_ptr<pending_inference>& pending, const status& s) {
    completion done = std::move(pending->done);
    if (!done) return;
    record_failure(pending->lease, pending->received);
    done(s);
  }

  static void complete(const std::shared_ptr<pending_inference>& pending,
                       result<model_output> outcome) {
    const clock::time_point computed = clock::now();
    if (!outcome) return fail(pending, outcome.error());
    const model_config& config = pending->lease.get().config();
    result<inference_response> response = detail::make_response(
        config, pending->lease.version(), pending->id, pending->asked, std::move(*outcome));
    if (!response) return fail(pending, response.error());
    completion done = std::move(pending->done);
    if (!done) return;

    model_statistics& stats = pending->lease.statistics();
    const clock::time_point made = clock::now();
    stats.execution_count.fetch_add(1, std::memory_order_relaxed);
    stats.inference_count.fetch_add(pending->batch, std::memory_order_relaxed);
    stats.last_inference_ms.store(
        static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                       std::chrono::system_clock::now().time_since_epoch())
                                       .count()),
        std::memory_order_relaxed);
    // A request's durations are recorded together, once it succeeded, as Triton does:
    // perf_analyzer checks that the compute counts agree between two snapshots.
    stats.compute_input.add(nanoseconds_between(pending->received, pending->queued));
    stats.queue.add(nanoseconds_between(pending->queued, pending->started));
    stats.compute_infer.add(nanoseconds_between(pending->started, computed));
    stats.compute_output.add(nanoseconds_between(computed, made));
    stats.success.add(nanoseconds_between(pending->received, made));
    done(std::move(*response));
  }
};

inference_service::inference_service(model_repository& repository, executor& workers,
                                     server_options options)
    : state_{std::make_shared<state>(repository, workers, std::move(options))} {}

inference_service::~inference_service() = default;

const server_options& inference_service::options() const noexcept { return state_->options; }
model_repository& inference_service::repository() const noexcept { return state_->repository; }

server_metadata inference_service::metadata() const {
  server_metadata m;
  m.name = state_->options.name;
  m.version = state_->options.version;
  m.extensions = {"binary_tensor_data", "classification", "model_configuration", "model_repository",
                  "parameters",         "sequence",       "sequence(string_id)", "statistics"};
  return m;
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
  std::vector<statistics_snapshot> out;
  for (const model_index_entry& entry : state_->repository.index()) {
    if (model && entry.name != *model) continue;
    if (version && entry.version != *version) continue;
    result<model_lease> lease = state_->repository.find(entry.name, entry.version);
    if (!lease) continue;  // removed meanwhile
    out.push_back(snapshot_of(entry.name, entry.version, lease->statistics()));
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

status inference_service::load(const std::string& model) {
  model_repository& repository = state_->repository;
  const std::shared_ptr<model_loader> loader = repository.loader();
  if (!loader) {
    return status{errc::invalid_argument,
                  "this server has no model loader: its models are registered by the host "
                  "application"};
  }
  if (repository.acquire(model, std::nullopt).ok()) return {};
  result<std::shared_ptr<oip::model>> loaded = loader->load(model);
  if (!loaded) return loaded.error();
  if (*loaded == nullptr || (*loaded)->config().name != model) {
    return status{errc::internal, fmt::format("the loader did not produce model '{}'", model)};
  }
  return repository.add(std::move(*loaded));
}

status inference_service::unload(const std::string& model) {
  return state_->repository.remove(model);
}

result<model_lease> inference_service::acquire(std::string_view model,
                                               std::optional<std::uint64_t> version) const {
  return state_->repository.acquire(model, version);
}

void inference_service::infer(model_lease lease, inference_request request, cancellation cancel,
                              completion done, clock::time_point received) {
  state_->infer(std::move(lease), std::move(request), std::move(cancel), std::move(done), received);
}

void inference_service::record_failure(const model_lease& lease,
                                       clock::time_point received) noexcept {
  if (lease) lease.statistics().fail.add(nanoseconds_between(received, clock::now()));
}

}  // namespace oip
