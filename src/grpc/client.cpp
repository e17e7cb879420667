// The gRPC client: one channel, the generated stub's blocking calls for the small ones and its
// callback API for unary inference (its streams: src/grpc/client_stream.cpp).

#include "core/detail/end_elsewhere.hpp"
#include "core/detail/future_of.hpp"
#include "grpc/client_state.hpp"
#include "grpc/messages.hpp"

#include <oip/grpc/client.hpp>
#include <oip/grpc/codec.hpp>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <utility>

#include <fmt/format.h>
#include <google/protobuf/util/json_util.h>

namespace oip::grpc {

using detail::call_back;
using detail::callback_mark;
using detail::calling_back_for;
using detail::decoded;
using detail::placed_outputs;
using detail::Service;
using detail::status_of;
using detail::version_text;

namespace {

contents_form form_of(const request_format& format) {
  return format.binary_inputs ? contents_form::raw : contents_form::typed;
}

}  // namespace

client::client(std::string host_port, client_options options)
    : state_{std::make_shared<detail::client_state>(std::move(host_port), std::move(options))} {}

client::~client() {
  // On a thread of grpc++'s that runs a callback (this client's, or another's that held this
  // client's last reference), the wait could be for this very call, and the channel's last
  // reference must not go there.
  if (calling_back_for != nullptr) {
    // Ended by one of its own callbacks: the end waits for every call, that callback's included,
    // and the channel's last reference must not go on grpc++'s thread (it would join itself). A
    // thread of its own ends the client once the callback has returned.
    if (oip::detail::end_elsewhere([state = state_] { state->cancel_calls(); })) return;
    std::fputs("oip::grpc::client: ended in one of its own callbacks, with no thread to end it\n",
               stderr);
    std::abort();
  }
  state_->cancel_calls();
}

void client::async_infer(std::string_view model, const inference_request& request,
                         infer_callback done, const request_format& format,
                         std::optional<std::uint64_t> version) {
  // A call ends when its last owner lets it go: grpc++'s copy of the completion, on one of
  // grpc++'s threads, once the completion has run. Its context holds the channel, and the client's
  // end waits for the call to end, so the channel's last reference always goes on the caller's
  // thread. Released on one of grpc++'s threads, it would be the last user of grpc++'s callback
  // threads, which then join themselves and free their queue twice.
  struct call {
    explicit call(detail::client_state& state) : owner{state} {}
    call(const call&) = delete;
    call& operator=(const call&) = delete;
    ~call() {
      if (!counted) return;
      owner.stop_cancelling(&*context);
      context.reset();
      owner.end_call();
    }

    detail::client_state& owner;
    bool counted = false;  // by `begin_call`: the client's end waits for this call
    std::optional<::grpc::ClientContext> context{std::in_place};
    message_arena arena;
    inference::ModelInferRequest& message = arena.make<inference::ModelInferRequest>();
    inference::ModelInferResponse& reply = arena.make<inference::ModelInferResponse>();
    std::shared_ptr<shared_memory_outputs> placed;
    infer_callback done;
  };
  auto pending = std::make_shared<call>(*state_);
  if (status s =
          encode_request(request, model, version_text(version), form_of(format), pending->message);
      !s.ok()) {
    return done(std::move(s));
  }
  result<std::shared_ptr<shared_memory_outputs>> placed = placed_outputs(*state_, request);
  if (!placed) return done(std::move(placed).error());
  if (status s = state_->prepare(*pending->context); !s.ok()) return done(std::move(s));
  if (!state_->begin_call(&*pending->context)) {
    // Not errc::unavailable, which a callback that retries would retry.
    return done(
        status{errc::failed_precondition, "the client is closing: it starts no more calls"});
  }
  pending->counted = true;
  pending->placed = std::move(*placed);
  pending->done = std::move(done);
  ::grpc::ClientContext* context = &*pending->context;
  inference::ModelInferRequest* message = &pending->message;
  inference::ModelInferResponse* reply = &pending->reply;
  state_->stub().async()->ModelInfer(
      context, message, reply, [pending = std::move(pending)](const ::grpc::Status& outcome) {
        // The caller's callback is gone before the call ends (the client's end waits for that).
        infer_callback finish = std::move(pending->done);
        const callback_mark mark{pending->owner};  // `finish` goes under it too
        if (!outcome.ok()) {
          call_back(pending->owner, finish, status_of(outcome));
        } else {
          call_back(pending->owner, finish,
                    decoded(pending->reply, pending->owner.options().reply_bounds,
                            pending->placed.get()));
        }
        finish = nullptr;
      });
}

std::future<result<inference_response>> client::async_infer(std::string_view model,
                                                            const inference_request& request,
                                                            const request_format& format,
                                                            std::optional<std::uint64_t> version) {
  return future_of<result<inference_response>>(
      [&](infer_callback done) { async_infer(model, request, std::move(done), format, version); });
}

result<inference_response> client::infer(std::string_view model, const inference_request& request,
                                         const request_format& format,
                                         std::optional<std::uint64_t> version) {
  message_arena arena;
  auto& message = arena.make<inference::ModelInferRequest>();
  if (status s = encode_request(request, model, version_text(version), form_of(format), message);
      !s.ok()) {
    return s;
  }
  result<std::shared_ptr<shared_memory_outputs>> placed = placed_outputs(*state_, request);
  if (!placed) return std::move(placed).error();
  auto& reply = arena.make<inference::ModelInferResponse>();
  if (status s = state_->call(&Service::Stub::ModelInfer, message, reply); !s.ok()) return s;
  return decode_response(reply, state_->options().reply_bounds, placed->get());
}

// --- the small calls ---------------------------------------------------------------------------

result<server_metadata> client::metadata() {
  inference::ServerMetadataResponse reply;
  if (status s =
          state_->call(&Service::Stub::ServerMetadata, inference::ServerMetadataRequest{}, reply);
      !s.ok()) {
    return s;
  }
  server_metadata out{reply.name(), reply.version(), {}};
  for (const std::string& e : reply.extensions()) out.extensions.push_back(e);
  return out;
}

result<model_metadata> client::metadata(std::string_view model,
                                        std::optional<std::uint64_t> version) {
  inference::ModelMetadataRequest request;
  request.set_name(std::string{model});
  request.set_version(version_text(version));
  inference::ModelMetadataResponse reply;
  if (status s = state_->call(&Service::Stub::ModelMetadata, request, reply); !s.ok()) return s;
  model_metadata out;
  out.name = reply.name();
  out.platform = reply.platform();
  for (const std::string& v : reply.versions()) out.versions.push_back(v);
  const auto read = [](const auto& tensors, std::vector<tensor_metadata>& into) -> status {
    for (const auto& t : tensors) {
      result<datatype> type = parse_datatype(t.datatype());
      if (!type) return std::move(type).error();
      into.push_back({t.name(), *type, shape_type(t.shape().begin(), t.shape().end()), {}});
    }
    return {};
  };
  if (status s = read(reply.inputs(), out.inputs); !s.ok()) return s;
  if (status s = read(reply.outputs(), out.outputs); !s.ok()) return s;
  return out;
}

bool client::live() {
  inference::ServerLiveResponse reply;
  return state_->call(&Service::Stub::ServerLive, inference::ServerLiveRequest{}, reply).ok() &&
         reply.live();
}

bool client::ready() {
  inference::ServerReadyResponse reply;
  return state_->call(&Service::Stub::ServerReady, inference::ServerReadyRequest{}, reply).ok() &&
         reply.ready();
}

bool client::ready(std::string_view model, std::optional<std::uint64_t> version) {
  inference::ModelReadyRequest request;
  request.set_name(std::string{model});
  request.set_version(version_text(version));
  inference::ModelReadyResponse reply;
  return state_->call(&Service::Stub::ModelReady, request, reply).ok() && reply.ready();
}

namespace {
result<std::string> json_of(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string out;
  if (const auto s = google::protobuf::util::MessageToJsonString(message, &out, options); !s.ok()) {
    return status{errc::internal, "the reply cannot be written as JSON"};
  }
  return out;
}
}  // namespace

result<std::string> client::model_config(std::string_view model,
                                         std::optional<std::uint64_t> version) {
  inference::ModelConfigRequest request;
  request.set_name(std::string{model});
  request.set_version(version_text(version));
  inference::ModelConfigResponse reply;
  if (status s = state_->call(&Service::Stub::ModelConfig, request, reply); !s.ok()) return s;
  return json_of(reply.config());
}

result<std::string> client::statistics(std::string_view model,
                                       std::optional<std::uint64_t> version) {
  inference::ModelStatisticsRequest request;
  request.set_name(std::string{model});
  request.set_version(version_text(version));
  inference::ModelStatisticsResponse reply;
  if (status s = state_->call(&Service::Stub::ModelStatistics, request, reply); !s.ok()) return s;
  return json_of(reply);
}

result<std::vector<model_index_entry>> client::repository_index(bool ready_only) {
  inference::RepositoryIndexRequest request;
  request.set_ready(ready_only);
  inference::RepositoryIndexResponse reply;
  if (status s = state_->call(&Service::Stub::RepositoryIndex, request, reply); !s.ok()) return s;
  std::vector<model_index_entry> out;
  for (const auto& m : reply.models()) {
    model_index_entry entry{m.name(), 0, m.state(), m.reason()};
    if (!m.version().empty()) {
      const auto [end, error] = std::from_chars(
          m.version().data(), m.version().data() + m.version().size(), entry.version);
      if (error != std::errc{} || end != m.version().data() + m.version().size()) {
        return status{errc::invalid_argument,
                      fmt::format("the repository index gives model '{}' the version '{}', which "
                                  "is not a number",
                                  m.name(), m.version())};
      }
    }
    out.push_back(std::move(entry));
  }
  return out;
}

status client::load(std::string_view model, const parameters& settings) {
  inference::RepositoryModelLoadRequest request;
  request.set_model_name(std::string{model});
  if (status s = encode_load_parameters(settings, *request.mutable_parameters()); !s.ok()) return s;
  inference::RepositoryModelLoadResponse reply;
  return state_->call(&Service::Stub::RepositoryModelLoad, request, reply);
}

status client::unload(std::string_view model) {
  inference::RepositoryModelUnloadRequest request;
  request.set_model_name(std::string{model});
  inference::RepositoryModelUnloadResponse reply;
  return state_->call(&Service::Stub::RepositoryModelUnload, request, reply);
}

namespace {
result<log_settings> read_log_settings(const inference::LogSettingsResponse& reply) {
  log_settings out;
  for (const auto& [name, value] : reply.settings()) {
    if (name == "log_error") out.error = value.bool_param();
    if (name == "log_warning") out.warning = value.bool_param();
    if (name == "log_info") out.info = value.bool_param();
    if (name == "log_verbose_level") out.verbose_level = value.uint32_param();
    if (name == "log_format") {
      result<log_format> format = parse_log_format(value.string_param());
      if (!format) return std::move(format).error();
      out.format = *format;
    }
  }
  return out;
}

result<trace_settings_change> read_trace_settings(const inference::TraceSettingResponse& reply) {
  trace_settings_change out;
  for (const auto& [name, value] : reply.settings()) {
    out.settings.emplace_back(name,
                              std::vector<std::string>(value.value().begin(), value.value().end()));
  }
  return out;
}
}  // namespace

result<log_settings> client::log_settings() {
  inference::LogSettingsResponse reply;
  if (status s = state_->call(&Service::Stub::LogSettings, inference::LogSettingsRequest{}, reply);
      !s.ok()) {
    return s;
  }
  return read_log_settings(reply);
}

result<log_settings> client::update_log_settings(const log_settings_update& change) {
  inference::LogSettingsRequest request;
  auto& settings = *request.mutable_settings();
  if (change.error) settings["log_error"].set_bool_param(*change.error);
  if (change.warning) settings["log_warning"].set_bool_param(*change.warning);
  if (change.info) settings["log_info"].set_bool_param(*change.info);
  if (change.verbose_level) settings["log_verbose_level"].set_uint32_param(*change.verbose_level);
  if (change.format)
    settings["log_format"].set_string_param(std::string{to_string(*change.format)});
  if (change.file) settings["log_file"].set_string_param(*change.file);
  inference::LogSettingsResponse reply;
  if (status s = state_->call(&Service::Stub::LogSettings, request, reply); !s.ok()) return s;
  return read_log_settings(reply);
}

result<trace_settings_change> client::trace_settings(std::string_view model) {
  return update_trace_settings({}, model);
}

result<trace_settings_change> client::update_trace_settings(const trace_settings_change& change,
                                                            std::string_view model) {
  inference::TraceSettingRequest request;
  request.set_model_name(std::string{model});
  for (const auto& [name, values] : change.settings) {
    auto& setting = (*request.mutable_settings())[name];
    if (values) {
      for (const std::string& v : *values) setting.add_value(v);
    }
  }
  inference::TraceSettingResponse reply;
  if (status s = state_->call(&Service::Stub::TraceSetting, request, reply); !s.ok()) return s;
  return read_trace_settings(reply);
}

status client::register_system_shared_memory(const std::string& name, const std::string& key,
                                             std::uint64_t offset, std::uint64_t byte_size) {
  if (status mapped = state_->regions().register_region(name, key, offset, byte_size);
      !mapped.ok()) {
    return mapped;
  }
  inference::SystemSharedMemoryRegisterRequest request;
  request.set_name(name);
  request.set_key(key);
  request.set_offset(offset);
  request.set_byte_size(byte_size);
  inference::SystemSharedMemoryRegisterResponse reply;
  status registered = state_->call(&Service::Stub::SystemSharedMemoryRegister, request, reply);
  if (!registered.ok()) {
    state_->regions().unregister(name);
    return registered;
  }
  state_->note_region();
  return registered;
}

status client::unregister_system_shared_memory(std::string_view name) {
  inference::SystemSharedMemoryUnregisterRequest request;
  request.set_name(std::string{name});
  inference::SystemSharedMemoryUnregisterResponse reply;
  status s = state_->call(&Service::Stub::SystemSharedMemoryUnregister, request, reply);
  if (s.ok()) {
    if (name.empty()) {
      state_->regions().unregister_all();
    } else {
      state_->regions().unregister(name);
    }
  }
  return s;
}

result<std::vector<shared_memory_region>> client::system_shared_memory_status(
    std::string_view name) {
  inference::SystemSharedMemoryStatusRequest request;
  request.set_name(std::string{name});
  inference::SystemSharedMemoryStatusResponse reply;
  if (status s = state_->call(&Service::Stub::SystemSharedMemoryStatus, request, reply); !s.ok()) {
    return s;
  }
  std::vector<shared_memory_region> out;
  for (const auto& [region_name, region] : reply.regions()) {
    out.push_back({region.name(), region.key(), region.offset(), region.byte_size()});
  }
  return out;
}

}  // namespace oip::grpc
