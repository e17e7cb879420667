// libFuzzer target: the whole HTTP request path. Each input is written, as raw bytes, to a real
// oip::http::server on loopback (Beast's parser and the session, the endpoint handler, the
// inference service and oip-serve's reference models), followed by a request that asks the
// server to close; the client reads until it does. (Half-closing instead would read as the client
// going away, which cancels the requests in flight.) A request left incomplete is ended by the
// server's header or body timeout, 100 ms here. A crash, a hang (no close within 10 s) or a 5xx
// reply is a finding: whatever a client sends, its mistakes are 4xx.

#include "stream_model.hpp"

#include <oip/http/server.hpp>
#include <oip/log.hpp>
#include <oip/openai.hpp>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <reference_models.hpp>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

namespace {

struct served {
  served() {
    oip::set_log_level(oip::log_level::error);  // a line per 4xx would drown the fuzzer's output
    for (std::shared_ptr<oip::model>& m : oip_serve::reference_models(true)) {
      if (m->config().name == "classifier") continue;  // a plain-loop sgemm: too slow to fuzz
      // A decoupled reference model streams for as long as its client asks (repeat_int32's
      // delays, square_int32's count, text_stream's pauses), which this client would read as a
      // hang: the bounded fuzz_stream stands in for them.
      if (m->config().decoupled) continue;
      static_cast<void>(models.add(std::move(m)));
    }
    static_cast<void>(models.add(std::make_shared<oip_fuzz::stream_model>()));
    oip::server_options options;
    options.bounds.max_body_bytes = 1U << 20U;
    options.bounds.max_elements = 1U << 16U;
    service = std::make_unique<oip::inference_service>(models, workers, options);
    // The OpenAI front end over the text reference models that answer once.
    oip::openai_options openai;
    oip::openai_model upper{.id = "text_upper", .model = "text_upper"};
    upper.prompt_input = "prompt";
    upper.text_output = "completion";
    upper.field_inputs = {{"max_tokens", "max_tokens", std::int64_t{16}}};
    oip::openai_model embed{.id = "text_embed", .model = "text_embed"};
    embed.serves = oip::openai_model::kind::embedding;
    embed.prompt_input = "text";
    openai.models = {upper, embed};
    handler = std::make_unique<oip::http_handler>(
        *service,
        oip::http_routes{
            .protocol = true, .metrics = false, .gauges = {}, .openai = std::move(openai)});
    oip::http::server_options http_options;
    http_options.address = "127.0.0.1";
    http_options.port = 0;
    http_options.io_threads = 1;
    http_options.header_timeout = std::chrono::milliseconds{100};
    http_options.body_timeout = std::chrono::milliseconds{100};
    http_options.idle_timeout = std::chrono::milliseconds{100};
    http = std::make_unique<oip::http::server>(*handler, http_options);
    const oip::result<std::uint16_t> started = http->start();
    port = started ? *started : 0;
  }
  oip::model_repository models;
  oip::executor workers{oip::executor_options{2, 256}};
  std::unique_ptr<oip::inference_service> service;
  std::unique_ptr<oip::http_handler> handler;
  std::unique_ptr<oip::http::server> http;
  std::uint16_t port = 0;
};

served& server() {
  static served* const instance = new served;  // lives for the whole run, like a server
  return *instance;
}

void send_all(int fd, const std::uint8_t* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = send(fd, data, size, MSG_NOSIGNAL);
    if (n <= 0) return;  // the server may close early (e.g. after a 4xx that ends the connection)
    data += n;
    size -= static_cast<std::size_t>(n);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  served& s = server();
  if (s.port == 0) __builtin_trap();
  // An input may change the log settings through /v2/logging: each starts from the quiet ones.
  oip::set_log_level(oip::log_level::error);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(s.port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    close(fd);
    return 0;
  }
  timeval wait{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
  send_all(fd, data, size);
  constexpr std::string_view last =
      "GET /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  send_all(fd, reinterpret_cast<const std::uint8_t*>(last.data()), last.size());
  std::string reply;
  char chunk[4096];
  for (;;) {
    const ssize_t n = recv(fd, chunk, sizeof chunk, 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        std::fprintf(stderr, "http_fuzzer: no reply and no close within 10 s\n");
        __builtin_trap();
      }
      break;  // reset by the server: allowed after an error reply
    }
    reply.append(chunk, static_cast<std::size_t>(n));
  }
  close(fd);
  if (std::getenv("HTTP_FUZZER_VERBOSE") != nullptr) {  // the replies, for looking at seeds
    std::fprintf(stderr, "%s\n", reply.substr(0, 2000).c_str());
  }
  // The replies one after the other, each status line where the reply before it ended (a body
  // may hold any text, "HTTP/1.1 500" included: an error message quotes the input).
  const std::string_view replies{reply};
  const auto starts_reply = [&](std::size_t at) {
    return replies.substr(at).starts_with("HTTP/1.1 ");
  };
  for (std::size_t at = 0; at < replies.size() && starts_reply(at);) {
    const std::string_view status = replies.substr(at + 9, 3);
    // A 503 is the service's own back-pressure (queue full, draining), not a client's mistake.
    if (status.starts_with('5') && status != "503") {
      std::fprintf(stderr, "http_fuzzer: a 5xx reply:\n%s\n", reply.substr(at, 600).c_str());
      __builtin_trap();
    }
    const std::size_t head_end = replies.find("\r\n\r\n", at);
    if (head_end == std::string_view::npos) break;
    std::size_t length = 0;
    if (const std::size_t field = replies.substr(at, head_end - at).find("\r\nContent-Length: ");
        field != std::string_view::npos) {
      length = std::strtoull(reply.c_str() + at + field + 18, nullptr, 10);
    }
    // A chunked body (generate_stream's events) is as long as its chunks, up to the last.
    if (replies.substr(at, head_end - at).find("\r\nTransfer-Encoding: chunked") !=
        std::string_view::npos) {
      const std::size_t last = replies.find("\r\n0\r\n\r\n", head_end);
      const std::size_t empty = replies.substr(head_end + 4).starts_with("0\r\n\r\n")
                                    ? head_end + 4
                                    : std::string_view::npos;
      if (empty != std::string_view::npos) {
        length = 5;
      } else if (last != std::string_view::npos) {
        length = last + 7 - (head_end + 4);
      }
    }
    // A reply to HEAD has no body: the next reply starts right after its headers.
    const std::size_t with_body = head_end + 4 + length;
    at = with_body >= replies.size() || starts_reply(with_body) ? with_body : head_end + 4;
  }
  return 0;
}
