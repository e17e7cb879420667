#include "serving/detail/compression.hpp"

#include <oip/http_client_protocol.hpp>

#include <array>
#include <cctype>
#include <utility>

#include <fmt/format.h>

namespace oip {

namespace {

// A path segment: bytes other than RFC 3986's unreserved ones percent-encoded (servers decode
// them), so that any model or region name reaches its route.
std::string path_segment(std::string_view text) {
  std::string out;
  out.reserve(text.size());
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

std::optional<detail::content_coding> coding_of(wire_compression compression) {
  switch (compression) {
    case wire_compression::gzip: return detail::content_coding::gzip;
    case wire_compression::deflate: return detail::content_coding::deflate;
    case wire_compression::none: break;
  }
  return std::nullopt;
}

std::string shared_memory_target(std::string_view name, std::string_view action) {
  if (name.empty()) return fmt::format("/v2/systemsharedmemory/{}", action);
  return fmt::format("/v2/systemsharedmemory/region/{}/{}", path_segment(name), action);
}

std::string trace_target(std::string_view model) {
  if (model.empty()) return "/v2/trace/setting";
  return fmt::format("/v2/models/{}/trace/setting", path_segment(model));
}

}  // namespace

http_client_protocol::http_client_protocol(const client_options& options)
    : headers_{options.headers},
      request_compression_{options.request_compression},
      response_compression_{options.response_compression},
      bounds_{options.reply_bounds} {
  if (const std::optional<detail::content_coding> coding = coding_of(response_compression_)) {
    headers_.push_back({"Accept-Encoding", std::string{detail::coding_name(*coding)}});
  }
}

std::string http_client_protocol::model_target(std::string_view model,
                                               std::optional<std::uint64_t> version) {
  std::string path = "/v2/models/" + path_segment(model);
  if (version) path += fmt::format("/versions/{}", *version);
  return path;
}

http_call http_client_protocol::get(std::string target) const {
  http_call call;
  call.method = "GET";
  call.target = std::move(target);
  call.headers = headers_;
  return call;
}

result<http_call> http_client_protocol::post(std::string target, std::string json) const {
  http_call call = get(std::move(target));
  call.method = "POST";
  call.headers.push_back({"Content-Type", std::string{json_content_type}});
  call.head = std::move(json);
  if (const std::optional<detail::content_coding> coding = coding_of(request_compression_)) {
    const std::array<std::string_view, 1> parts{call.head};
    result<std::string> packed = detail::compress(parts, *coding);
    if (!packed) return std::move(packed).error();
    call.head = std::move(*packed);
    call.headers.push_back({"Content-Encoding", std::string{detail::coding_name(*coding)}});
  }
  return call;
}

result<http_call> http_client_protocol::infer(std::string_view model,
                                              const inference_request& request,
                                              const request_format& format,
                                              std::optional<std::uint64_t> version) const {
  result<encoded_body> body = encode_request(request, format);
  if (!body) return std::move(body).error();
  http_call call = get(model_target(model, version) + "/infer");
  call.method = "POST";
  call.headers.push_back({"Content-Type", std::string{body->content_type()}});
  if (body->uses_binary) {
    call.headers.push_back({std::string{header_length_field}, std::to_string(body->json.size())});
  }
  if (const std::optional<detail::content_coding> coding = coding_of(request_compression_)) {
    // The coding covers the whole body, binary data included: its bytes are compressed into one
    // buffer instead of being sent from the tensors.
    std::vector<std::string_view> parts{body->json};
    for (const buffer& b : body->binary) parts.push_back(b.as_string_view());
    result<std::string> packed = detail::compress(parts, *coding);
    if (!packed) return std::move(packed).error();
    call.head = std::move(*packed);
    call.headers.push_back({"Content-Encoding", std::string{detail::coding_name(*coding)}});
    return call;
  }
  call.head = std::move(body->json);
  call.tail = std::move(body->binary);
  return call;
}

http_call http_client_protocol::server_metadata() const { return get("/v2"); }

http_call http_client_protocol::model_metadata(std::string_view model,
                                               std::optional<std::uint64_t> version) const {
  return get(model_target(model, version));
}

http_call http_client_protocol::live() const { return get("/v2/health/live"); }

http_call http_client_protocol::ready() const { return get("/v2/health/ready"); }

http_call http_client_protocol::model_ready(std::string_view model,
                                            std::optional<std::uint64_t> version) const {
  return get(model_target(model, version) + "/ready");
}

http_call http_client_protocol::model_config(std::string_view model,
                                             std::optional<std::uint64_t> version) const {
  return get(model_target(model, version) + "/config");
}

http_call http_client_protocol::statistics(std::string_view model,
                                           std::optional<std::uint64_t> version) const {
  if (model.empty()) return get("/v2/models/stats");
  return get(model_target(model, version) + "/stats");
}

result<http_call> http_client_protocol::repository_index(bool ready_only) const {
  return post("/v2/repository/index", encode(repository_index_request{.ready = ready_only}));
}

result<http_call> http_client_protocol::load(std::string_view model,
                                             const parameters& settings) const {
  result<std::string> body = encode_repository_load_request(settings);
  if (!body) return std::move(body).error();
  return post(fmt::format("/v2/repository/models/{}/load", path_segment(model)), std::move(*body));
}

result<http_call> http_client_protocol::unload(std::string_view model) const {
  return post(fmt::format("/v2/repository/models/{}/unload", path_segment(model)), "{}");
}

http_call http_client_protocol::log_settings() const { return get("/v2/logging"); }

result<http_call> http_client_protocol::update_log_settings(
    const log_settings_update& change) const {
  return post("/v2/logging", encode(change));
}

http_call http_client_protocol::trace_settings(std::string_view model) const {
  return get(trace_target(model));
}

result<http_call> http_client_protocol::update_trace_settings(const trace_settings_change& change,
                                                              std::string_view model) const {
  return post(trace_target(model), encode(change));
}

result<http_call> http_client_protocol::register_shared_memory(
    const shared_memory_region& region) const {
  return post(shared_memory_target(region.name, "register"), encode_shared_memory_register(region));
}

result<http_call> http_client_protocol::unregister_shared_memory(std::string_view name) const {
  return post(shared_memory_target(name, "unregister"), "{}");
}

http_call http_client_protocol::shared_memory_status(std::string_view name) const {
  return get(shared_memory_target(name, "status"));
}

result<buffer> http_client_protocol::body_of(http_reply& reply) const {
  buffer body = std::move(reply.body);
  if (const auto encoding = reply.header("Content-Encoding")) {
    result<detail::content_coding> coding = detail::parse_content_encoding(*encoding);
    if (!coding) {
      return status{
          errc::unsupported_media_type,
          fmt::format("the reply's Content-Encoding '{}' is not gzip, deflate or identity",
                      *encoding)};
    }
    if (*coding != detail::content_coding::identity) {
      result<buffer> plain = detail::decompress(body, *coding, bounds_.max_body_bytes);
      if (!plain) return std::move(plain).error();
      body = std::move(*plain);
    }
  }
  if (reply.status != 200) {
    return decode_error(body.as_string_view(), reply.status)
        .received_as(received_over::http, reply.status);
  }
  return body;
}

result<inference_response> http_client_protocol::read_infer(
    http_reply reply, const shared_memory_output_source* shared_memory) const {
  std::optional<std::string> length_text;
  if (const auto value = reply.header(header_length_field)) length_text = std::string{*value};
  result<buffer> body = body_of(reply);
  if (!body) return std::move(body).error();
  std::optional<std::size_t> header_length;
  if (length_text) {
    result<std::size_t> parsed = parse_header_length(*length_text, body->size());
    if (!parsed) return std::move(parsed).error();
    header_length = *parsed;
  }
  return decode_response(*body, header_length, bounds_, shared_memory);
}

result<server_metadata> http_client_protocol::read_server_metadata(http_reply reply) const {
  result<buffer> body = body_of(reply);
  if (!body) return std::move(body).error();
  return decode_server_metadata(body->as_string_view(), bounds_);
}

result<model_metadata> http_client_protocol::read_model_metadata(http_reply reply) const {
  result<buffer> body = body_of(reply);
  if (!body) return std::move(body).error();
  return decode_model_metadata(body->as_string_view(), bounds_);
}

bool http_client_protocol::read_health(const http_reply& reply) noexcept {
  return reply.status == 200;
}

result<std::string> http_client_protocol::read_text(http_reply reply) const {
  result<buffer> body = body_of(reply);
  if (!body) return std::move(body).error();
  return std::string{body->as_string_view()};
}

result<std::vector<model_index_entry>> http_client_protocol::read_repository_index(
    http_reply reply) const {
  result<buffer> body = body_of(reply);
  if (!body) return std::move(body).error();
  return decode_repository_index(body->as_string_view(), bounds_);
}

result<log_settings> http_client_protocol::read_log_settings(http_reply reply) const {
  result<buffer> body = body_of(reply);
  if (!body) return std::move(body).error();
  return decode_log_settings(body->as_string_view(), bounds_);
}

result<trace_settings_change> http_client_protocol::read_trace_settings(http_reply reply) const {
  result<buffer> body = body_of(reply);
  if (!body) return std::move(body).error();
  return decode_trace_settings_change(body->as_string_view(), bounds_);
}

result<std::vector<shared_memory_region>> http_client_protocol::read_shared_memory_status(
    http_reply reply) const {
  result<buffer> body = body_of(reply);
  if (!body) return std::move(body).error();
  return decode_shared_memory_status(body->as_string_view(), bounds_);
}

status http_client_protocol::read_outcome(http_reply reply) const {
  return body_of(reply).to_status();
}

}  // namespace oip
