// The gRPC service over an inference_service, with grpc++'s callback API: no thread waits on a
// model. Unary RPCs finish from the model's completion; ModelStreamInfer reads one request at a
// time, dispatches it, and writes replies in the order their models complete (a sequence's
// replies in its order, which the sequence manager keeps).
//
// Every method takes its request as bytes and parses it here: grpc++ answers a typed method's
// message that protobuf cannot parse (a truncated field, a string that is not valid UTF-8) with
// UNIMPLEMENTED and no message, and ends a stream as if the client had closed it. A client's
// malformed message is its mistake: INVALID_ARGUMENT, and on a stream an error reply.

#include "grpc/deadlock_detection.hpp"
#include "grpc/infer_message.hpp"
#include "grpc/infer_stream.hpp"
#include "grpc/messages.hpp"
#include "grpc/response_bytes.hpp"

#include <oip/grpc/codec.hpp>
#include <oip/grpc/grpc_service.grpc.pb.h>
#include <oip/grpc/server.hpp>
#include <oip/log.hpp>
#include <oip/memory_budget.hpp>
#include <oip/shared_memory.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <deque>
#include <limits>
#include <mutex>
#include <optional>
#include <utility>

#include <fmt/format.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

namespace oip::grpc {

namespace {

using ::grpc::CallbackServerContext;
using ::grpc::ServerUnaryReactor;

// A unary RPC answered at once: `handle(request, response)` runs on a parsed request, when the
// call is `allowed` (its API category's header, if restricted).
template <class Request, class Response, class Handler>
ServerUnaryReactor* answer(const status& allowed, CallbackServerContext* context,
                           const ::grpc::ByteBuffer* in, ::grpc::ByteBuffer* out,
                           Handler&& handle) {
  if (!allowed.ok()) return finish(context, allowed);
  status s;
  try {
    Request request;
    Response response;
    s = parse(*in, request);
    if (s.ok()) s = std::forward<Handler>(handle)(std::as_const(request), response);
    if (s.ok()) s = serialize(response, *out);
  } catch (const std::bad_alloc&) {
    s = out_of_memory("answering the call");
  }
  return finish(context, s);
}

// Finishes a call whose reply is an empty `Response`, or the error.
template <class Response>
void finish_empty(ServerUnaryReactor* reactor, status s, ::grpc::ByteBuffer& out) {
  if (s.ok()) s = serialize(Response{}, out);
  reactor->Finish(to_grpc(s));
}

// --- ModelInfer ----------------------------------------------------------------------------------

// One ModelInfer call: the service's reply sink, filled on whichever thread completes the
// request. A call that the service answers before `ModelInfer` returns (a quick model run inline,
// or an error) is finished on grpc++'s default reactor, which costs grpc++ less than a reactor of
// our own; one that completes later gets an `infer_reactor`, which also hears the client's
// cancellation, and is finished from there.
class infer_call final : public reply_sink {
 public:
  infer_call(::grpc::ByteBuffer* out, memory_budget::lease held)
      : out_{out}, held_{std::move(held)} {}

  [[nodiscard]] cancellation& cancel() noexcept { return cancel_; }
  [[nodiscard]] transport_trace& trace() noexcept { return trace_; }

  // Decoupled models are refused before they run: one response, the final one, comes here.
  void on_response(inference_response response, response_flag /*flag*/) override {
    encoded_ = serialize_response(response, *out_);
    if (encoded_.ok()) held_.add(out_->Length());  // until written
    answered_ = true;
  }
  void on_complete(const status& outcome) override {
    status s = outcome;
    if (s.ok()) {
      s = answered_ ? encoded_
                    : status{errc::internal, "the model completed the request without a response"};
    }
    if (trace_.sampled) trace_.sampled->stamp("INFER_RESPONSE_COMPLETE");
    ServerUnaryReactor* finisher = nullptr;
    {
      const std::lock_guard lock{mutex_};
      outcome_ = to_grpc(s);
      finisher = reactor_;
    }
    if (finisher != nullptr) send(*finisher);
  }

  // Called by `ModelInfer` once the service has the request: the reactor that finishes the call.
  ServerUnaryReactor* reactor(CallbackServerContext* context, std::shared_ptr<infer_call> self);

  void send(ServerUnaryReactor& reactor) {
    if (trace_.sampled) trace_.sampled->stamp("GRPC_SEND_START");
    reactor.Finish(*outcome_);
  }
  void sent() {
    if (trace_.sampled) trace_.sampled->stamp("GRPC_SEND_END");
  }

 private:
  ::grpc::ByteBuffer* out_;
  memory_budget::lease held_;  // the request's message and the reply's, until the call is done
  status encoded_;
  bool answered_ = false;
  cancellation cancel_;
  transport_trace trace_;
  std::mutex mutex_;  // guards the hand-over between the completion and `reactor`
  std::optional<::grpc::Status> outcome_;
  ServerUnaryReactor* reactor_ = nullptr;
};

// A call's own reactor, for requests that complete after `ModelInfer` returned or are traced.
class infer_reactor final : public ServerUnaryReactor {
 public:
  explicit infer_reactor(std::shared_ptr<infer_call> call) : call_{std::move(call)} {}
  void OnCancel() override { call_->cancel().cancel(); }
  void OnDone() override {
    call_->sent();
    delete this;  // and with it the call, whose trace is written once no one else holds it
  }

 private:
  std::shared_ptr<infer_call> call_;
};

ServerUnaryReactor* infer_call::reactor(CallbackServerContext* context,
                                        std::shared_ptr<infer_call> self) {
  std::unique_lock lock{mutex_};
  if (outcome_ && !trace_.sampled) {
    lock.unlock();
    ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(*outcome_);
    return reactor;
  }
  ServerUnaryReactor* own = nullptr;
  try {
    own = new infer_reactor{std::move(self)};
  } catch (const std::bad_alloc&) {
    // The service holds the call and will complete it into `out_`: it must be finished from that
    // completion, not now, even without a reactor of its own to hear a cancellation.
    own = context->DefaultReactor();
  }
  reactor_ = own;
  const bool done = outcome_.has_value();
  lock.unlock();
  if (done) send(*own);
  return own;
}

// --- the service ---------------------------------------------------------------------------------

using svc = inference::GRPCInferenceService;
using raw_service = svc::WithRawCallbackMethod_ServerLive<svc::WithRawCallbackMethod_ServerReady<
    svc::WithRawCallbackMethod_ModelReady<svc::WithRawCallbackMethod_ServerMetadata<
        svc::WithRawCallbackMethod_ModelMetadata<svc::WithRawCallbackMethod_ModelInfer<
            svc::WithRawCallbackMethod_ModelStreamInfer<svc::WithRawCallbackMethod_ModelConfig<
                svc::WithRawCallbackMethod_ModelStatistics<svc::WithRawCallbackMethod_RepositoryIndex<
                    svc::WithRawCallbackMethod_RepositoryModelLoad<
                        svc::WithRawCallbackMethod_RepositoryModelUnload<
                            svc::WithRawCallbackMethod_SystemSharedMemoryStatus<
                                svc::WithRawCallbackMethod_SystemSharedMemoryRegister<
                                    svc::WithRawCallbackMethod_SystemSharedMemoryUnregister<
                                        svc::WithRawCallbackMethod_CudaSharedMemoryStatus<
                                            svc::WithRawCallbackMethod_CudaSharedMemoryRegister<
                                                svc::
                                                    WithRawCallbackMethod_CudaSharedMemoryUnregister<
                                                        svc::WithRawCallbackMethod_LogSettings<
                                                            svc::WithRawCallbackMethod_TraceSetting<
                                                                svc::Service>>>>>>>>>>>>>>>>>>>>;

using ::grpc::ByteBuffer;

class service_impl final : public raw_service {
 public:
  service_impl(inference_service& service, const api_restrictions& restricted)
      : service_{service}, restricted_{restricted} {}

  // A call of `category` must carry the header that restricts it, if any (Triton's
  // `--grpc-restricted-protocol`). Metadata keys arrive in lower case.
  [[nodiscard]] status allowed(const CallbackServerContext* context, api_category category) const {
    const api_restriction* needed = restricted_.of(category);
    if (needed == nullptr) return status{};
    std::string key = needed->header;
    std::transform(key.begin(), key.end(), key.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    const auto found = context->client_metadata().find(key);
    if (found != context->client_metadata().end() &&
        std::string_view{found->second.data(), found->second.size()} == needed->value) {
      return status{};
    }
    return restricted(*needed, "protocol");
  }

  ServerUnaryReactor* ServerLive(CallbackServerContext* context, const ByteBuffer* in,
                                 ByteBuffer* out) override {
    return answer<inference::ServerLiveRequest, inference::ServerLiveResponse>(
        allowed(context, api_category::health), context, in, out,
        [](const auto& /*request*/, auto& response) {
          response.set_live(true);
          return status{};
        });
  }

  ServerUnaryReactor* ServerReady(CallbackServerContext* context, const ByteBuffer* in,
                                  ByteBuffer* out) override {
    return answer<inference::ServerReadyRequest, inference::ServerReadyResponse>(
        allowed(context, api_category::health), context, in, out,
        [this](const auto& /*request*/, auto& response) {
          response.set_ready(service_.ready());
          return status{};
        });
  }

  ServerUnaryReactor* ModelReady(CallbackServerContext* context, const ByteBuffer* in,
                                 ByteBuffer* out) override {
    return answer<inference::ModelReadyRequest, inference::ModelReadyResponse>(
        allowed(context, api_category::health), context, in, out,
        [this](const auto& request, auto& response) {
          result<std::optional<std::uint64_t>> version = parse_model_version(request.version());
          if (!version) return version.error();
          // An unknown model is not ready: tritonclient's is_model_ready expects a plain false.
          result<bool> ready = service_.ready(request.name(), *version);
          if (!ready && ready.error().code() != errc::not_found) return ready.error();
          response.set_ready(ready && *ready);
          return status{};
        });
  }

  ServerUnaryReactor* ServerMetadata(CallbackServerContext* context, const ByteBuffer* in,
                                     ByteBuffer* out) override {
    return answer<inference::ServerMetadataRequest, inference::ServerMetadataResponse>(
        allowed(context, api_category::metadata), context, in, out,
        [this](const auto& /*request*/, auto& response) {
          const server_metadata m = service_.metadata();
          response.set_name(m.name);
          response.set_version(m.version);
          for (const std::string& e : m.extensions) response.add_extensions(e);
          return status{};
        });
  }

  ServerUnaryReactor* ModelMetadata(CallbackServerContext* context, const ByteBuffer* in,
                                    ByteBuffer* out) override {
    return answer<inference::ModelMetadataRequest, inference::ModelMetadataResponse>(
        allowed(context, api_category::metadata), context, in, out,
        [this](const auto& request, auto& response) {
          result<std::optional<std::uint64_t>> version = parse_model_version(request.version());
          if (!version) return version.error();
          result<model_metadata> m = service_.metadata(request.name(), *version);
          if (!m) return m.error();
          encode_model_metadata(*m, response);
          return status{};
        });
  }

  ServerUnaryReactor* ModelInfer(CallbackServerContext* context, const ByteBuffer* in,
                                 ByteBuffer* out) override {
    if (status s = allowed(context, api_category::inference); !s.ok()) return finish(context, s);
    result<memory_budget::lease> held = service_.memory().reserve(in->Length());
    if (!held) return finish(context, held.error());
    std::shared_ptr<infer_call> call;
    try {
      call = std::make_shared<infer_call>(out, std::move(*held));
      if (status s = start_infer(call, *in); !s.ok()) return finish(context, s);
      return call->reactor(context, call);
    } catch (const std::bad_alloc&) {
      // The service answers out of memory once it holds the request; this is before then.
      return finish(context, out_of_memory("reading the request"));
    }
  }

  // The request to the service, or what is wrong with it before the service has it.
  status start_infer(const std::shared_ptr<infer_call>& call, const ByteBuffer& in) {
    const auto called = tracer::clock::now();
    infer_message message;
    if (status read = message.read(in, service_.options().bounds); !read.ok()) return read;
    result<std::optional<std::uint64_t>> version = parse_model_version(message.model_version());
    if (!version) return version.error();
    // grpc++ calls this with the message read: its wait and read are what parsing it takes.
    const auto received = inference_service::clock::now();
    call->trace().read = {trace_stamp{"GRPC_WAITREAD_START", called},
                          trace_stamp{"GRPC_WAITREAD_END", received}};
    service_.infer(
        {.model = message.model_name(),
         .version = *version,
         .cancel = call->cancel(),
         .received = received,
         .id = message.id(),
         .trace = &call->trace()},
        [&](const model_config& config) -> result<inference_request> {
          if (config.decoupled) {
            return status{errc::not_implemented,
                          "ModelInfer RPC doesn't support models with decoupled transaction "
                          "policy"};
          }
          return message.decode(service_.options().bounds);
        },
        call);
    return {};
  }

  ::grpc::ServerBidiReactor<ByteBuffer, ByteBuffer>* ModelStreamInfer(
      CallbackServerContext* context) override {
    // A restricted stream is refused as it opens, before any request is read (as in Triton).
    if (status s = allowed(context, api_category::inference); !s.ok()) {
      return new refused_stream(s);
    }
    // Triton's `triton_grpc_error` metadata: the first failed request ends the stream with its
    // status, for clients that watch gRPC codes.
    const auto& metadata = context->client_metadata();
    const auto asked = metadata.find("triton_grpc_error");
    const stream_errors errors =
        asked != metadata.end() &&
                std::string_view{asked->second.data(), asked->second.size()} == "true"
            ? stream_errors::end_stream
            : stream_errors::in_replies;
    try {
      return open_infer_stream(service_, errors);
    } catch (const std::bad_alloc&) {
      return new refused_stream(out_of_memory("opening the stream"));
    }
  }

  ServerUnaryReactor* ModelConfig(CallbackServerContext* context, const ByteBuffer* in,
                                  ByteBuffer* out) override {
    return answer<inference::ModelConfigRequest, inference::ModelConfigResponse>(
        allowed(context, api_category::model_config), context, in, out,
        [this](const auto& request, auto& response) {
          result<std::optional<std::uint64_t>> version = parse_model_version(request.version());
          if (!version) return version.error();
          result<model_config> config = service_.configuration(request.name(), *version);
          if (!config) return config.error();
          encode_model_config(*config, *response.mutable_config());
          return status{};
        });
  }

  ServerUnaryReactor* ModelStatistics(CallbackServerContext* context, const ByteBuffer* in,
                                      ByteBuffer* out) override {
    return answer<inference::ModelStatisticsRequest, inference::ModelStatisticsResponse>(
        allowed(context, api_category::statistics), context, in, out,
        [this](const auto& request, auto& response) {
          result<std::optional<std::uint64_t>> version = parse_model_version(request.version());
          if (!version) return version.error();
          std::optional<std::string_view> name;
          if (!request.name().empty()) name = request.name();
          result<std::vector<statistics_snapshot>> all = service_.statistics(name, *version);
          if (!all) return all.error();
          for (const statistics_snapshot& s : *all)
            encode_statistics(s, *response.add_model_stats());
          return status{};
        });
  }

  ServerUnaryReactor* RepositoryIndex(CallbackServerContext* context, const ByteBuffer* in,
                                      ByteBuffer* out) override {
    return answer<inference::RepositoryIndexRequest, inference::RepositoryIndexResponse>(
        allowed(context, api_category::model_repository), context, in, out,
        [this](const auto& request, auto& response) {
          if (!request.repository_name().empty()) return repository_name_refused();
          for (const model_index_entry& entry : service_.repository_index()) {
            if (request.ready() && entry.state != "READY") continue;
            inference::RepositoryIndexResponse::ModelIndex* index = response.add_models();
            index->set_name(entry.name);
            if (entry.version != 0) index->set_version(std::to_string(entry.version));
            index->set_state(entry.state);
            index->set_reason(entry.reason);
          }
          return status{};
        });
  }

  // What a load and an unload check before the service takes them: the restriction, the message,
  // Triton's refusal of a named repository, and whether clients may load at all.
  template <class Request>
  status read_control_request(CallbackServerContext* context, const ByteBuffer& in,
                              Request& request) {
    status s = allowed(context, api_category::model_repository);
    if (s.ok()) s = parse(in, request);
    if (s.ok() && !request.repository_name().empty()) s = repository_name_refused();
    if (s.ok()) s = service_.model_control_allowed();
    return s;
  }

  // A load or unload finishes on the service's model-control thread.
  ServerUnaryReactor* RepositoryModelLoad(CallbackServerContext* context, const ByteBuffer* in,
                                          ByteBuffer* out) override {
    inference::RepositoryModelLoadRequest request;
    if (status s = read_control_request(context, *in, request); !s.ok()) {
      return finish(context, s);
    }
    result<parameters> asked = decode_load_parameters(request.parameters());
    if (!asked) return finish(context, asked.error());
    ServerUnaryReactor* reactor = context->DefaultReactor();
    service_.load(std::move(*request.mutable_model_name()), std::move(*asked),
                  [reactor, out](const status& loaded) {
                    finish_empty<inference::RepositoryModelLoadResponse>(reactor, loaded, *out);
                  });
    return reactor;
  }

  ServerUnaryReactor* RepositoryModelUnload(CallbackServerContext* context, const ByteBuffer* in,
                                            ByteBuffer* out) override {
    inference::RepositoryModelUnloadRequest request;
    if (status s = read_control_request(context, *in, request); !s.ok()) {
      return finish(context, s);
    }
    ServerUnaryReactor* reactor = context->DefaultReactor();
    service_.unload(std::move(*request.mutable_model_name()), [reactor, out](const status& done) {
      finish_empty<inference::RepositoryModelUnloadResponse>(reactor, done, *out);
    });
    return reactor;
  }

  // --- the shared-memory extensions ------------------------------------------------------------

  template <class Response>
  static void list_regions(const std::vector<shared_memory_region>& regions, Response& response) {
    for (const shared_memory_region& region : regions) {
      auto& entry = (*response.mutable_regions())[region.name];
      entry.set_name(region.name);
      entry.set_key(region.key);
      entry.set_offset(region.offset);
      entry.set_byte_size(region.byte_size);
    }
  }

  static std::optional<std::string_view> region_named(const std::string& name) {
    if (name.empty()) return std::nullopt;
    return name;
  }

  ServerUnaryReactor* SystemSharedMemoryStatus(CallbackServerContext* context, const ByteBuffer* in,
                                               ByteBuffer* out) override {
    return answer<inference::SystemSharedMemoryStatusRequest,
                  inference::SystemSharedMemoryStatusResponse>(
        allowed(context, api_category::shared_memory), context, in, out,
        [this](const auto& request, auto& response) {
          result<std::vector<shared_memory_region>> found =
              service_.system_shared_memory_status(region_named(request.name()));
          if (!found) return found.error();
          list_regions(*found, response);
          return status{};
        });
  }

  ServerUnaryReactor* SystemSharedMemoryRegister(CallbackServerContext* context,
                                                 const ByteBuffer* in, ByteBuffer* out) override {
    return answer<inference::SystemSharedMemoryRegisterRequest,
                  inference::SystemSharedMemoryRegisterResponse>(
        allowed(context, api_category::shared_memory), context, in, out,
        [this](const auto& request, auto& /*response*/) {
          return service_.register_system_shared_memory(
              {request.name(), request.key(), request.offset(), request.byte_size()});
        });
  }

  ServerUnaryReactor* SystemSharedMemoryUnregister(CallbackServerContext* context,
                                                   const ByteBuffer* in, ByteBuffer* out) override {
    return answer<inference::SystemSharedMemoryUnregisterRequest,
                  inference::SystemSharedMemoryUnregisterResponse>(
        allowed(context, api_category::shared_memory), context, in, out,
        [this](const auto& request, auto& /*response*/) {
          return service_.unregister_system_shared_memory(region_named(request.name()));
        });
  }

  ServerUnaryReactor* CudaSharedMemoryStatus(CallbackServerContext* context, const ByteBuffer* in,
                                             ByteBuffer* out) override {
    return answer<inference::CudaSharedMemoryStatusRequest,
                  inference::CudaSharedMemoryStatusResponse>(
        allowed(context, api_category::shared_memory), context, in, out,
        [this](const auto& request, auto& response) {
          result<std::vector<cuda_shared_memory_region>> found =
              service_.cuda_shared_memory_status(region_named(request.name()));
          if (!found) return found.error();
          for (const cuda_shared_memory_region& region : *found) {
            auto& entry = (*response.mutable_regions())[region.name];
            entry.set_name(region.name);
            entry.set_device_id(static_cast<std::uint64_t>(region.device_id));
            entry.set_byte_size(region.byte_size);
          }
          return status{};
        });
  }

  ServerUnaryReactor* CudaSharedMemoryRegister(CallbackServerContext* context, const ByteBuffer* in,
                                               ByteBuffer* out) override {
    return answer<inference::CudaSharedMemoryRegisterRequest,
                  inference::CudaSharedMemoryRegisterResponse>(
        allowed(context, api_category::shared_memory), context, in, out,
        [this](const auto& request, auto& /*response*/) {
          return service_.register_cuda_shared_memory(
              {request.name(), request.raw_handle(), request.device_id(), request.byte_size()});
        });
  }

  ServerUnaryReactor* CudaSharedMemoryUnregister(CallbackServerContext* context,
                                                 const ByteBuffer* in, ByteBuffer* out) override {
    return answer<inference::CudaSharedMemoryUnregisterRequest,
                  inference::CudaSharedMemoryUnregisterResponse>(
        allowed(context, api_category::shared_memory), context, in, out,
        [this](const auto& request, auto& /*response*/) {
          return service_.unregister_cuda_shared_memory(region_named(request.name()));
        });
  }

  // --- the logging extension --------------------------------------------------------------------

  ServerUnaryReactor* LogSettings(CallbackServerContext* context, const ByteBuffer* in,
                                  ByteBuffer* out) override {
    return answer<inference::LogSettingsRequest, inference::LogSettingsResponse>(
        allowed(context, api_category::logging), context, in, out,
        [](const auto& request, auto& response) {
          result<log_settings_update> update = decode_log_settings_update(request);
          if (!update) return std::move(update).error();
          result<log_settings> now = update_log_settings(*update);
          if (!now) return std::move(now).error();
          encode_log_settings(*now, response);
          return status{};
        });
  }

  // --- the trace extension ----------------------------------------------------------------------

  ServerUnaryReactor* TraceSetting(CallbackServerContext* context, const ByteBuffer* in,
                                   ByteBuffer* out) override {
    return answer<inference::TraceSettingRequest, inference::TraceSettingResponse>(
        allowed(context, api_category::trace), context, in, out,
        [this](const auto& request, auto& response) {
          std::optional<std::string_view> model;
          if (!request.model_name().empty()) model = request.model_name();
          result<trace_settings> now =
              request.settings().empty()
                  ? service_.tracing(model)
                  : service_.update_tracing(model, decode_trace_settings_change(request));
          if (!now) return std::move(now).error();
          encode_trace_settings(*now, response);
          return status{};
        });
  }

 private:
  inference_service& service_;
  const api_restrictions& restricted_;
};

// The standard health service (grpc.health.v1), as Triton offers it: Check answers the server's
// readiness, whatever service it names (a probe configured with a name still works), in the
// `health` category of the restricted APIs; Watch is not offered (UNIMPLEMENTED), as in Triton.
// It is served as raw bytes through grpc++'s generic service (which gets every method that no
// registered service has): compiled from health.proto, its message types would clash with those
// of a host that compiles the same file for its own probes.
class health_service final : public ::grpc::CallbackGenericService {
 public:
  explicit health_service(inference_service& service, const service_impl& rpcs)
      : service_{service}, rpcs_{rpcs} {}

  ::grpc::ServerGenericBidiReactor* CreateReactor(
      ::grpc::GenericCallbackServerContext* context) override {
    if (context->method() != "/grpc.health.v1.Health/Check") {
      return new refused_stream(status{errc::not_implemented, ""});
    }
    if (status s = rpcs_.allowed(context, api_category::health); !s.ok()) {
      return new refused_stream(s);
    }
    return new check_reactor(service_.ready());
  }

 private:
  // Reads the request (its one field, the service name, is not looked at), then answers.
  class check_reactor final : public ::grpc::ServerGenericBidiReactor {
   public:
    explicit check_reactor(bool ready) {
      // HealthCheckResponse: field 1 (status), a varint: SERVING = 1, NOT_SERVING = 2.
      const std::array<char, 2> bytes{0x08, ready ? '\x01' : '\x02'};
      ::grpc::Slice slice{bytes.data(), bytes.size()};
      response_ = ::grpc::ByteBuffer{&slice, 1};
      StartRead(&request_);
    }
    void OnReadDone(bool ok) override {
      if (!ok) return Finish({::grpc::StatusCode::INVALID_ARGUMENT, "no HealthCheckRequest"});
      StartWriteAndFinish(&response_, ::grpc::WriteOptions{}, ::grpc::Status::OK);
    }
    void OnDone() override { delete this; }

   private:
    ::grpc::ByteBuffer request_;
    ::grpc::ByteBuffer response_;
  };

  inference_service& service_;
  const service_impl& rpcs_;
};

}  // namespace

struct server::state {
  inference_service& service;
  server_options options;
  service_impl rpcs;
  health_service health;
  std::unique_ptr<::grpc::Server> running;
  std::uint16_t port = 0;

  state(inference_service& s, server_options o)
      : service{s},
        options{std::move(o)},
        rpcs{service, options.restricted_protocol},
        health{service, rpcs} {}
};

server::server(inference_service& service, server_options options)
    : state_{std::make_unique<state>(service, std::move(options))} {}

server::~server() { stop(std::chrono::seconds{1}); }

result<std::uint16_t> server::start() {
  if (state_->running) return status{errc::internal, "the gRPC server is already running"};
  detail::settle_deadlock_detection(state_->options.keep_abseil_deadlock_detection);
  ::grpc::ServerBuilder builder;
  int port = 0;
  const std::string address = fmt::format("{}:{}", state_->options.address, state_->options.port);
  const server_options& options = state_->options;
  builder.AddListeningPort(
      address, options.credentials ? options.credentials : ::grpc::InsecureServerCredentials(),
      &port);
  builder.RegisterService(&state_->rpcs);
  builder.RegisterCallbackGenericService(&state_->health);
  constexpr auto largest_message = static_cast<std::size_t>(std::numeric_limits<int>::max());
  builder.SetMaxReceiveMessageSize(options.max_message_bytes.value_or(static_cast<int>(
      std::min(state_->service.options().bounds.max_body_bytes, largest_message))));
  builder.SetMaxSendMessageSize(std::numeric_limits<int>::max());
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, options.reuse_port ? 1 : 0);
  ::grpc::ResourceQuota quota{"oip"};
  quota.Resize(options.memory_quota_bytes != 0 ? options.memory_quota_bytes
                                               : state_->service.memory().capacity());
  builder.SetResourceQuota(quota);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             std::max(options.max_concurrent_streams, 1));
  const auto milliseconds = [](std::chrono::milliseconds d) {
    return static_cast<int>(
        std::min<std::chrono::milliseconds::rep>(d.count(), std::numeric_limits<int>::max()));
  };
  if (options.max_connection_idle.count() > 0) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                               milliseconds(options.max_connection_idle));
  }
  if (options.max_connection_age.count() > 0) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS,
                               milliseconds(options.max_connection_age));
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                               milliseconds(options.max_connection_age_grace));
  }
  if (options.configure) options.configure(builder);
  state_->running = builder.BuildAndStart();
  if (!state_->running || port == 0) {
    state_->running.reset();
    return status{errc::unavailable, fmt::format("cannot listen for gRPC on {}", address)};
  }
  state_->port = static_cast<std::uint16_t>(port);
  return state_->port;
}

std::uint16_t server::port() const noexcept { return state_->port; }

void server::stop(std::chrono::milliseconds grace) {
  if (!state_->running) return;
  state_->running->Shutdown(std::chrono::system_clock::now() + grace);
  state_->running->Wait();
  state_->running.reset();
}

}  // namespace oip::grpc
