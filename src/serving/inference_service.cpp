// The inference service's control calls: server and model metadata, configuration, statistics,
// the repository, shared-memory regions, trace settings, readiness and shutdown; and the entry of
// a request, which request_lifecycle.cpp takes from admission to its reply.

#include "serving/detail/service_state.hpp"

#include <oip/inference_service.hpp>
#include <oip/log.hpp>
#include <oip/version.hpp>

#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace oip {

namespace {

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

}  // namespace

inference_service::inference_service(model_repository& repository, executor& workers,
                                     server_options options)
    : state_{std::make_shared<state>(repository, workers, std::move(options))} {}

inference_service::~inference_service() {
  if (!state_) return;
  state_->control.close();  // the loads and unloads posted are done
  // A batch thread runs service code and submits to the executor while a batch starts, holding
  // the state: left running, the state could die on that thread after the service is gone, and
  // the thread outlive the executor that the host destroys next.
  state_->extras.stop_batching();
  state_->let_go_of_workers();
}

const server_options& inference_service::options() const noexcept { return state_->options; }
model_repository& inference_service::repository() const noexcept { return state_->repository; }
memory_budget& inference_service::memory() const noexcept { return state_->memory; }

server_metadata inference_service::metadata() const {
  server_metadata m;
  m.name = state_->options.name;
  m.version = state_->options.version;
  m.extensions = {"binary_tensor_data", "classification", "logging",  "model_configuration",
                  "model_repository",   "parameters",     "sequence", "sequence(string_id)",
                  "statistics",         "trace"};
  if (state_->regions) m.extensions.emplace_back("system_shared_memory");
  if (state_->regions && state_->regions->offers_cuda()) {
    m.extensions.emplace_back("cuda_shared_memory");
  }
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

namespace {

// The region named, or every region, of `kind`; nothing to do where nothing was registered.
status unregister_regions(shared_memory_registry* regions, std::optional<std::string_view> region,
                          shared_memory_kind kind) {
  if (regions == nullptr) return status{};
  if (region) {
    regions->unregister(*region, kind);
  } else {
    regions->unregister_all(kind);
  }
  return status{};
}

}  // namespace

status inference_service::unregister_system_shared_memory(std::optional<std::string_view> region) {
  return unregister_regions(state_->regions.get(), region, shared_memory_kind::system);
}

result<std::vector<cuda_shared_memory_region>> inference_service::cuda_shared_memory_status(
    std::optional<std::string_view> region) const {
  if (state_->regions && state_->regions->offers_cuda()) {
    return state_->regions->cuda_regions(region);
  }
  if (!region) return std::vector<cuda_shared_memory_region>{};
  return status{errc::not_found,
                fmt::format("Unable to find cuda shared memory region: '{}'", *region)};
}

status inference_service::unregister_cuda_shared_memory(std::optional<std::string_view> region) {
  return unregister_regions(state_->regions.get(), region, shared_memory_kind::cuda);
}

status inference_service::register_cuda_shared_memory(
    const cuda_shared_memory_registration& region) {
  if (!state_->regions || !state_->regions->offers_cuda()) {
    return status{errc::not_implemented,
                  "this server does not offer the CUDA shared-memory extension"};
  }
  return state_->regions->register_cuda_region(region.name, as_bytes(std::span{region.raw_handle}),
                                               region.device_id, region.byte_size);
}

bool inference_service::ready() const { return !shutting_down() && state_->repository.all_ready(); }

void inference_service::begin_shutdown() noexcept {
  state_->shutting_down.store(true, std::memory_order_relaxed);
}

bool inference_service::shutting_down() const noexcept {
  return state_->shutting_down.load(std::memory_order_relaxed);
}

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
      out.back().active_sequences = state_->extras.active_sequences(*lease).value_or(0);
    }
  }
  if (model && out.empty()) return unknown_model(*model, version);
  return out;
}

std::vector<model_index_entry> inference_service::repository_index() const {
  return state_->control.index();
}

status model_control_refused() {
  return status{errc::failed_precondition,
                "explicit model load / unload is not allowed if polling is enabled"};
}

status inference_service::model_control_allowed() const { return state_->control.allowed(); }

void inference_service::load(std::string model, parameters request, control_completion done) {
  state_->control.load(std::move(model), std::move(request), std::move(done));
}

void inference_service::unload(std::string model, control_completion done) {
  state_->control.unload(std::move(model), std::move(done));
}

status inference_service::load(std::string model, parameters request) {
  return state_->control.load_and_wait(std::move(model), std::move(request));
}

status inference_service::unload(std::string model) {
  return state_->control.unload_and_wait(std::move(model));
}

namespace {

// Ends a request refused before it went on. The sink is let go of first: out of memory in what
// follows finds none, and never answers the request twice.
void refuse_with(std::shared_ptr<reply_sink>& sink, const status& why) {
  const std::shared_ptr<reply_sink> answering = std::move(sink);
  answering->on_complete(why);
}

}  // namespace

void inference_service::infer_decoding(arrival request, decoder decode,
                                       std::shared_ptr<reply_sink> sink) {
  try {
    result<model_lease> lease = state_->repository.acquire(request.model, request.version);
    if (!lease) {
      log_request_failure(lease.error(), fmt::format("model '{}'", request.model), request.id);
      return refuse_with(sink, lease.error());
    }
    result<inference_request> decoded = [&]() -> result<inference_request> {
      try {
        return decode.call(decode.function, lease->get().config());
      } catch (const std::bad_alloc&) {
        return out_of_memory("decoding the request");
      }
    }();
    if (!decoded) {
      state::record_failure(*lease, request.received, decoded.error(), request.id);
      return refuse_with(sink, decoded.error());
    }
    infer_decoded(std::move(request), std::move(*lease), std::move(*decoded), std::move(sink));
  } catch (const std::bad_alloc&) {
    if (sink) sink->on_complete(out_of_memory("receiving the request"));
  }
}

void inference_service::infer(arrival request, inference_request decoded,
                              std::shared_ptr<reply_sink> sink) {
  infer(
      std::move(request),
      [&decoded](const model_config&) -> result<inference_request> { return std::move(decoded); },
      std::move(sink));
}

void inference_service::infer_decoded(arrival request, model_lease lease, inference_request decoded,
                                      std::shared_ptr<reply_sink> sink) {
  try {
    sink->on_admitted();
  } catch (const std::bad_alloc&) {
    return refuse_with(sink, out_of_memory("admitting the request"));
  }
  state_->infer(std::move(lease), std::move(decoded), std::move(request.cancel), std::move(sink),
                request.received, request.trace);
}

}  // namespace oip
