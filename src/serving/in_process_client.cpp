#include <oip/in_process_client.hpp>
#include <oip/reply_sink.hpp>

#include <algorithm>
#include <cctype>
#include <condition_variable>
#include <mutex>

#include <fmt/format.h>

namespace oip {

namespace {

// A path segment: bytes other than RFC 3986's unreserved ones percent-encoded (the handler
// decodes them), so that any model name reaches its route.
std::string path_segment(std::string_view text) {
  std::string out;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (std::isalnum(byte) != 0 || c == '-' || c == '.' || c == '_' || c == '~') {
      out += c;
    } else {
      out += fmt::format("%{:02X}", byte);
    }
  }
  return out;
}

std::string model_path(std::string_view model, std::optional<std::uint64_t> version) {
  std::string path = "/v2/models/" + path_segment(model);
  if (version) path += fmt::format("/versions/{}", *version);
  return path;
}

status error_of(const http_response& reply) { return decode_error(reply.body(), reply.status); }

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

}  // namespace

status in_process_client::infer_stream(std::string_view model, inference_request request,
                                       std::function<void(inference_response)> on_response,
                                       std::optional<std::uint64_t> version) {
  struct stream_sink final : reply_sink {
    std::function<void(inference_response)> deliver;
    std::mutex mutex;
    std::condition_variable ended;
    std::optional<status> outcome;
    void on_response(inference_response response, response_flag /*flag*/) override {
      deliver(std::move(response));
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
  result<encoded_body> body = encode_request(request, format);
  if (!body) return std::move(body).error();
  std::optional<shared_memory_outputs> placed;
  if (regions_ != nullptr) {
    result<shared_memory_outputs> asked = shared_memory_outputs::of(request, *regions_);
    if (!asked) return std::move(asked).error();
    placed = std::move(*asked);
  }
  std::vector<http_header> headers;
  if (body->uses_binary) {
    headers.push_back({std::string{header_length_field}, std::to_string(body->json.size())});
  }
  const http_response reply =
      send("POST", model_path(model, version) + "/infer", body->flatten(), std::move(headers));
  if (reply.status != 200) return error_of(reply);
  std::optional<std::size_t> header_length;
  if (const auto value = reply.header(header_length_field)) {
    result<std::size_t> parsed = parse_header_length(*value, reply.body_size());
    if (!parsed) return std::move(parsed).error();
    header_length = *parsed;
  }
  return decode_response(buffer::from_string(reply.body()), header_length,
                         reply_bounds(handler_.options().bounds), placed ? &*placed : nullptr);
}

result<server_metadata> in_process_client::metadata() {
  const http_response reply = send("GET", "/v2");
  if (reply.status != 200) return error_of(reply);
  return decode_server_metadata(reply.head);
}

result<model_metadata> in_process_client::metadata(std::string_view model,
                                                   std::optional<std::uint64_t> version) {
  const http_response reply = send("GET", model_path(model, version));
  if (reply.status != 200) return error_of(reply);
  return decode_model_metadata(reply.head);
}

bool in_process_client::live() { return send("GET", "/v2/health/live").status == 200; }

bool in_process_client::ready() { return send("GET", "/v2/health/ready").status == 200; }

bool in_process_client::ready(std::string_view model, std::optional<std::uint64_t> version) {
  return send("GET", model_path(model, version) + "/ready").status == 200;
}

}  // namespace oip
