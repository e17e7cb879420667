#include "core/detail/run_callback.hpp"

#include <oip/in_process_client.hpp>
#include <oip/reply_sink.hpp>

#include <algorithm>
#include <condition_variable>
#include <mutex>

namespace oip {

namespace {

// A reply is decoded within the larger of each of the server's limits and the default: a model's
// outputs are not bounded by what its requests may take, and the reply comes from the process
// itself. A server whose limits are above the defaults may answer as much as it takes.
limits reply_bounds(const limits& server) {
  const limits defaults;
  limits out;
  out.max_body_bytes = std::max(server.max_body_bytes, defaults.max_body_bytes);
  out.max_json_bytes = std::max(server.max_json_bytes, defaults.max_json_bytes);
  out.max_elements = std::max(server.max_elements, defaults.max_elements);
  out.max_json_depth = std::max(server.max_json_depth, defaults.max_json_depth);
  out.max_string_id_length = std::max(server.max_string_id_length, defaults.max_string_id_length);
  return out;
}

client_options options_for(const http_handler& handler) {
  client_options options;
  options.reply_bounds = reply_bounds(handler.options().bounds);
  return options;
}

}  // namespace

in_process_client::in_process_client(http_handler& handler, const shared_memory_registry* regions)
    : handler_{handler}, regions_{regions}, protocol_{options_for(handler)} {}

http_reply in_process_client::send(const http_call& call) {
  std::string body;
  body.reserve(call.body_size());
  body += call.head;
  for (const buffer& b : call.tail) body += b.as_string_view();
  http_response reply = send(call.method, call.target, std::move(body), call.headers);
  return http_reply{.status = reply.status,
                    .headers = std::move(reply.headers),
                    .body = buffer::from_string(reply.body())};
}

status in_process_client::infer_stream(std::string_view model, inference_request request,
                                       std::function<void(inference_response)> on_response,
                                       std::optional<std::uint64_t> version) {
  struct stream_sink final : reply_sink {
    std::function<void(inference_response)> deliver;
    std::mutex mutex;
    std::condition_variable ended;
    std::optional<status> outcome;
    // On the model's thread, as the other clients' callbacks run on theirs: a callback that throws
    // loses its response, not the process.
    void on_response(inference_response response, response_flag /*flag*/) override {
      run_callback("oip::in_process_client", deliver, std::move(response));
    }
    void on_complete(const status& s) override {
      const std::lock_guard lock{mutex};
      outcome = s;
      ended.notify_one();
    }
  };
  auto sink = std::make_shared<stream_sink>();
  sink->deliver = std::move(on_response);
  handler_.service().infer({.model = model, .version = version, .cancel = {}}, std::move(request),
                           sink);
  std::unique_lock lock{sink->mutex};
  sink->ended.wait(lock, [&] { return sink->outcome.has_value(); });
  return *sink->outcome;
}

http_response in_process_client::send(std::string method, std::string target, std::string body,
                                      std::vector<http_header> headers) {
  http_request request;
  request.method = std::move(method);
  request.target = std::move(target);
  request.headers = std::move(headers);
  request.body = buffer::from_string(std::move(body));
  return handler_.handle(std::move(request));
}

result<inference_response> in_process_client::infer(std::string_view model,
                                                    const inference_request& request,
                                                    const request_format& format,
                                                    std::optional<std::uint64_t> version) {
  result<http_call> call = protocol_.infer(model, request, format, version);
  if (!call) return std::move(call).error();
  std::optional<shared_memory_outputs> placed;
  if (regions_ != nullptr) {
    result<shared_memory_outputs> asked = shared_memory_outputs::of(request, *regions_);
    if (!asked) return std::move(asked).error();
    placed = std::move(*asked);
  }
  return protocol_.read_infer(send(*call), placed ? &*placed : nullptr);
}

result<server_metadata> in_process_client::metadata() {
  return protocol_.read_server_metadata(send(protocol_.server_metadata()));
}

result<model_metadata> in_process_client::metadata(std::string_view model,
                                                   std::optional<std::uint64_t> version) {
  return protocol_.read_model_metadata(send(protocol_.model_metadata(model, version)));
}

bool in_process_client::live() { return http_client_protocol::read_health(send(protocol_.live())); }

bool in_process_client::ready() {
  return http_client_protocol::read_health(send(protocol_.ready()));
}

bool in_process_client::ready(std::string_view model, std::optional<std::uint64_t> version) {
  return http_client_protocol::read_health(send(protocol_.model_ready(model, version)));
}

}  // namespace oip
