#pragma once

// Server-sent events (the WHATWG HTML standard's text/event-stream), as both streaming front ends
// write them: Triton's generate_stream and the OpenAI-compatible routes.

#include <oip/http_handler.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <utility>

namespace oip::detail {

inline constexpr std::string_view event_stream_content_type = "text/event-stream; charset=utf-8";

/// One event whose data is `json` (one line: JSON written by oip holds no raw newline).
[[nodiscard]] inline std::string server_sent_event(std::string_view json) {
  std::string out;
  out.reserve(json.size() + 8);
  out += "data: ";
  out += json;
  out += "\n\n";
  return out;
}

/// A 200 reply's head whose body is the events that `body` will carry.
[[nodiscard]] inline http_response event_stream_head(std::shared_ptr<http_body_stream> body) {
  http_response reply;
  reply.status = 200;
  reply.headers.push_back({"Content-Type", std::string{event_stream_content_type}});
  reply.headers.push_back({"Cache-Control", "no-cache"});
  reply.stream = std::move(body);
  return reply;
}

}  // namespace oip::detail
