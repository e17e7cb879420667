// oip's network clients over their transports, in the test's own process so that the sanitizer
// builds run them: many calls in flight and streams against oip's servers, and a scripted server
// whose replies are broken, slow, or mutated at random.

#include "client_checks.hpp"
#include "loopback_socket.hpp"
#include "wait.hpp"

#include <oip/executor.hpp>
#include <oip/http/client.hpp>
#include <oip/http/server.hpp>
#include <oip/http_handler.hpp>
#include <oip/json.hpp>
#include <oip/repository.hpp>
#ifdef OIP_TEST_GRPC_CLIENT
#include <oip/grpc/client.hpp>
#include <oip/grpc/server.hpp>
#endif

#include "reference_models.hpp"

#include <array>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <future>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

using oip::testing::check_simple;
using oip::testing::simple_request;

namespace {

// `simple` and `repeat_int32` behind oip's HTTP and gRPC servers on free loopback ports.
struct local_servers {
  local_servers() {
    REQUIRE(models.add(oip_serve::reference_model("simple")).ok());
    REQUIRE(models.add(oip_serve::reference_model("repeat_int32")).ok());
    oip::http::server_options options;
    options.address = "127.0.0.1";
    options.port = 0;
    http.emplace(handler, options);
    const oip::result<std::uint16_t> port = http->start();
    REQUIRE(port.ok());
    http_address = "127.0.0.1:" + std::to_string(*port);
#ifdef OIP_TEST_GRPC_CLIENT
    grpc.emplace(handler.service(), oip::grpc::server_options{"127.0.0.1", 0});
    const oip::result<std::uint16_t> grpc_port = grpc->start();
    REQUIRE(grpc_port.ok());
    grpc_address = "127.0.0.1:" + std::to_string(*grpc_port);
#endif
  }
  local_servers(const local_servers&) = delete;
  local_servers& operator=(const local_servers&) = delete;
  ~local_servers() {
#ifdef OIP_TEST_GRPC_CLIENT
    grpc->stop();
#endif
    http->stop();
  }

  oip::model_repository models;
  oip::executor workers{oip::executor_options{2, 1024}};
  oip::http_handler handler{models, workers};
  std::optional<oip::http::server> http;
  std::string http_address;
#ifdef OIP_TEST_GRPC_CLIENT
  std::optional<oip::grpc::server> grpc;
  std::string grpc_address;
#endif
};

std::string fmt_reply(const oip::encoded_body& body) {
  std::string text = "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n";
  text += "Inference-Header-Content-Length: " + std::to_string(body.header_length()) + "\r\n";
  text += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
  text += body.flatten();
  return text;
}

}  // namespace

TEST_CASE("many calls in flight from many threads share an HTTP client") {
  local_servers servers;
  oip::client_options options;
  options.max_connections = 3;
  oip::http::client client{servers.http_address, options};
  oip::testing::check_many_in_flight(client);
  oip::testing::check_throwing_callback(client);
}

#ifdef OIP_TEST_GRPC_CLIENT
TEST_CASE("many calls in flight from many threads share a gRPC client, and streams") {
  local_servers servers;
  oip::grpc::client client{servers.grpc_address};
  oip::testing::check_many_in_flight(client);
  oip::testing::check_repeat_stream(client);
  oip::testing::check_throwing_callback(client);

  // A stream's callback that throws: every response still comes, and the stream ends well.
  std::atomic<int> responses{0};
  oip::grpc::client::stream s = client.open_stream([&](oip::result<oip::inference_response> r) {
    if (r.ok()) ++responses;
    throw std::runtime_error{"a caller's bug"};
  });
  for (int i = 0; i < 3; ++i) REQUIRE(s.send("simple", simple_request(i)).ok());
  const oip::status end = s.finish();
  CHECK_MESSAGE(end.ok(), end.message());
  CHECK(responses == 3);
}
#endif

// --- a server that misbehaves -------------------------------------------------------------------

namespace {

// Listens on a free loopback port; each connection is handed to `answer` on the listener's
// thread, which reads the request as it likes and writes what it likes.
class scripted_server {
 public:
  explicit scripted_server(std::function<void(int)> answer) : answer_{std::move(answer)} {
    const oip::testing::loopback_socket bound = oip::testing::bind_loopback();
    listener_ = bound.fd;
    port_ = bound.port;
    REQUIRE(listen(listener_, 16) == 0);
    thread_ = std::thread{[this] {
      for (;;) {
        const int fd = accept(listener_, nullptr, nullptr);
        if (fd < 0 || stopping_) {
          if (fd >= 0) close(fd);
          return;
        }
        answer_(fd);
        close(fd);
      }
    }};
  }
  scripted_server(const scripted_server&) = delete;
  scripted_server& operator=(const scripted_server&) = delete;
  ~scripted_server() {
    stopping_ = true;
    shutdown(listener_, SHUT_RDWR);  // wakes the accept; the descriptor closes once it is left
    thread_.join();
    close(listener_);
  }
  [[nodiscard]] std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  [[nodiscard]] std::uint16_t port() const { return port_; }

 private:
  std::function<void(int)> answer_;
  int listener_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

// Reads an HTTP request's header section and its Content-Length body; returns what it read.
std::string read_request(int fd) {
  std::string got;
  std::array<char, 4096> chunk{};
  std::size_t body_at = std::string::npos;
  while (body_at == std::string::npos) {
    const ssize_t n = recv(fd, chunk.data(), chunk.size(), 0);
    if (n <= 0) return got;
    got.append(chunk.data(), static_cast<std::size_t>(n));
    body_at = got.find("\r\n\r\n");
  }
  std::size_t length = 0;
  if (const std::size_t at = got.find("Content-Length: "); at != std::string::npos) {
    length = std::stoul(got.substr(at + 16));
  }
  while (got.size() < body_at + 4 + length) {
    const ssize_t n = recv(fd, chunk.data(), chunk.size(), 0);
    if (n <= 0) return got;
    got.append(chunk.data(), static_cast<std::size_t>(n));
  }
  return got;
}

void write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n <= 0) return;
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
}

// The reply to simple_request(base), binary outputs, as a server writes it.
std::string valid_reply(std::int32_t base = 0) {
  const oip::inference_request asked = simple_request(base);
  oip::inference_response response;
  response.model_name = "simple";
  response.model_version = "1";
  for (int which = 0; which < 2; ++which) {
    std::vector<std::int32_t> values(16);
    for (std::size_t i = 0; i < 16; ++i) {
      const std::int32_t a = asked.inputs[0].at<std::int32_t>(i);
      values[i] = which == 0 ? a + 1 : a - 1;
    }
    response.outputs.push_back(*oip::tensor::from_values<std::int32_t>(
        which == 0 ? "OUTPUT0" : "OUTPUT1", {1, 16}, values));
  }
  oip::response_format format;
  format.binary_by_default = true;
  const oip::result<oip::encoded_body> body = oip::encode_response(response, format);
  REQUIRE(body.ok());
  return fmt_reply(*body);
}

// A call on the caller's thread, or one on the client's I/O thread: each reads replies its own way.
enum class call_path { caller_thread, io_thread };

oip::result<oip::inference_response> infer_at(const scripted_server& server,
                                              std::chrono::milliseconds timeout,
                                              std::size_t max_reply_bytes = std::size_t{256} << 20U,
                                              call_path path = call_path::caller_thread) {
  oip::client_options options;
  options.timeout = timeout;
  options.reply_bounds.max_body_bytes = max_reply_bytes;
  oip::http::client client{server.address(), options};
  if (path == call_path::io_thread) return client.async_infer("simple", simple_request()).get();
  return client.infer("simple", simple_request());
}

oip::result<oip::http_reply> send_to(oip::http::client& client, const oip::http_call& call,
                                     call_path path) {
  if (path == call_path::caller_thread) return client.send(call);
  std::promise<oip::result<oip::http_reply>> promise;
  std::future<oip::result<oip::http_reply>> reply = promise.get_future();
  client.async_send(
      call, [&promise](oip::result<oip::http_reply> r) { promise.set_value(std::move(r)); });
  return reply.get();
}

oip::client_options within_3_seconds() {
  oip::client_options options;
  options.timeout = std::chrono::milliseconds{3000};
  return options;
}

oip::http_call get_call(std::string target) {
  oip::http_call call;
  call.method = "GET";
  call.target = std::move(target);
  return call;
}

}  // namespace

TEST_CASE("an HTTP server's broken replies are clear errors, within the deadline") {
  const std::chrono::milliseconds deadline{3000};
  SUBCASE("the real reply, to begin with") {
    scripted_server server{[](int fd) {
      (void)read_request(fd);
      write_all(fd, valid_reply());
    }};
    check_simple(infer_at(server, deadline));
  }
  SUBCASE("the real reply in chunks, or ending with its connection") {
    const std::string reply = valid_reply();
    const std::size_t length_at = reply.find("\r\nContent-Length: ") + 2;
    const std::size_t body_at = reply.find("\r\n\r\n") + 4;
    REQUIRE(length_at < body_at);
    const std::string head = reply.substr(0, length_at);
    const std::string body = reply.substr(body_at);
    const auto hex = [](std::size_t n) {
      std::array<char, 20> digits{};
      const auto end = std::to_chars(digits.data(), digits.data() + digits.size(), n, 16).ptr;
      return std::string{digits.data(), end};
    };
    for (const call_path path : {call_path::caller_thread, call_path::io_thread}) {
      for (const bool chunked : {true, false}) {
        CAPTURE(chunked);
        CAPTURE(path == call_path::io_thread);
        scripted_server server{[&](int fd) {
          (void)read_request(fd);
          if (!chunked) return write_all(fd, head + "Connection: close\r\n\r\n" + body);
          const std::size_t half = body.size() / 2;
          write_all(fd, head + "Transfer-Encoding: chunked\r\n\r\n" + hex(half) + "\r\n" +
                            body.substr(0, half) + "\r\n" + hex(body.size() - half) + "\r\n" +
                            body.substr(half) + "\r\n0\r\n\r\n");
        }};
        check_simple(infer_at(server, deadline, std::size_t{256} << 20U, path));
      }
    }
  }
  SUBCASE("a reply cut short") {
    scripted_server server{[](int fd) {
      (void)read_request(fd);
      const std::string reply = valid_reply();
      write_all(fd, reply.substr(0, reply.size() - 20));
    }};
    const oip::result<oip::inference_response> r = infer_at(server, deadline);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == oip::errc::unavailable);
    CHECK(r.error().message().find("no complete reply") != std::string::npos);
  }
  SUBCASE("a binary header length past the body") {
    scripted_server server{[](int fd) {
      (void)read_request(fd);
      std::string reply = valid_reply();
      const std::size_t at = reply.find("Inference-Header-Content-Length: ");
      REQUIRE(at != std::string::npos);
      const std::size_t end = reply.find("\r\n", at);
      reply.replace(at, end - at, "Inference-Header-Content-Length: 99999");
      write_all(fd, reply);
    }};
    const oip::result<oip::inference_response> r = infer_at(server, deadline);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == oip::errc::invalid_argument);
  }
  SUBCASE("bytes that are not HTTP") {
    scripted_server server{[](int fd) {
      (void)read_request(fd);
      write_all(fd, "SSH-2.0-OpenSSH_9.2\r\n\r\n");
    }};
    const oip::result<oip::inference_response> r = infer_at(server, deadline);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == oip::errc::internal);
    CHECK(r.error().message().find("not valid HTTP") != std::string::npos);
  }
  SUBCASE("a connection closed with no reply") {
    scripted_server server{[](int fd) { (void)read_request(fd); }};
    const oip::result<oip::inference_response> r = infer_at(server, deadline);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == oip::errc::unavailable);
  }
  SUBCASE("a reply larger than the client takes") {
    scripted_server server{[](int fd) {
      (void)read_request(fd);
      write_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 1000000000000\r\n\r\n{}");
    }};
    const oip::result<oip::inference_response> r = infer_at(server, deadline, 1U << 20U);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == oip::errc::payload_too_large);
  }
  SUBCASE("a reply there is no memory for") {
    for (const call_path path : {call_path::caller_thread, call_path::io_thread}) {
      CAPTURE(path == call_path::io_thread);
      scripted_server server{[](int fd) {
        (void)read_request(fd);
        write_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 4611686018427387904\r\n\r\n{}");
      }};
      const oip::result<oip::inference_response> r =
          infer_at(server, deadline, std::size_t{1} << 63U, path);
      REQUIRE_FALSE(r.ok());
      CHECK(r.error().code() == oip::errc::unavailable);
      CHECK(r.error().message().find("no memory for the reply") != std::string::npos);
    }
  }
  SUBCASE("chunk framing or trailers without end") {
    // Beast bounds neither a chunk's extensions nor the trailers: without a bound of the
    // client's own, what they hold would be kept until the deadline, however much came.
    for (const call_path path : {call_path::caller_thread, call_path::io_thread}) {
      for (const std::string_view start : {"1;", "0\r\nX-Trailer: "}) {
        CAPTURE(path == call_path::io_thread);
        CAPTURE(start);
        std::atomic<bool> release{false};
        scripted_server server{[&](int fd) {
          (void)read_request(fd);
          write_all(fd,
                    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + std::string{start});
          const std::string more(64U * 1024U, 'a');
          // Up to 64 MiB, then nothing more until the client has answered the test.
          for (int i = 0; i < 1024 && !release; ++i) write_all(fd, more);
          while (!release) std::this_thread::sleep_for(std::chrono::milliseconds{10});
        }};
        const oip::result<oip::inference_response> r =
            infer_at(server, deadline, std::size_t{256} << 20U, path);
        release = true;
        REQUIRE_FALSE(r.ok());
        CHECK(r.error().code() == oip::errc::header_fields_too_large);
        CHECK(r.error().message().find("chunk framing or trailers above the limit") !=
              std::string::npos);
      }
    }
  }
  SUBCASE("a server that never answers") {
    std::atomic<bool> release{false};
    scripted_server server{[&](int fd) {
      (void)read_request(fd);
      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds{10});
    }};
    const auto started = std::chrono::steady_clock::now();
    const oip::result<oip::inference_response> r = infer_at(server, std::chrono::milliseconds{300});
    const auto took = std::chrono::steady_clock::now() - started;
    release = true;
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == oip::errc::deadline_exceeded);
    CHECK(took >= std::chrono::milliseconds{290});
    CHECK(took < std::chrono::seconds{3});
  }
}

TEST_CASE("what an HTTP call carries, and replies without a body, on either path") {
  for (const call_path path : {call_path::caller_thread, call_path::io_thread}) {
    CAPTURE(path == call_path::io_thread);
    SUBCASE("a reply to HEAD announces a body it does not carry") {
      // Both calls on one kept-alive connection: the second is read right only if the first
      // read no body.
      scripted_server server{[](int fd) {
        for (int i = 0; i < 2; ++i) {
          if (read_request(fd).empty()) return;
          write_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n");
        }
      }};
      oip::http::client client{server.address(), within_3_seconds()};
      oip::http_call head = get_call("/v2/health/live");
      head.method = "HEAD";
      for (int i = 0; i < 2; ++i) {
        const oip::result<oip::http_reply> r = send_to(client, head, path);
        REQUIRE(r.ok());
        CHECK(r->status == 200);
        CHECK(r->body.empty());
      }
    }
    SUBCASE("an empty body of announced length") {
      scripted_server server{[](int fd) {
        (void)read_request(fd);
        write_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
      }};
      oip::http::client client{server.address(), within_3_seconds()};
      const oip::result<oip::http_reply> r = send_to(client, get_call("/v2/health/ready"), path);
      REQUIRE(r.ok());
      CHECK(r->status == 200);
      CHECK(r->body.empty());
    }
    SUBCASE("the call's own Host header, sent once") {
      std::mutex seen_mutex;
      std::string seen;
      scripted_server server{[&](int fd) {
        std::string request = read_request(fd);
        {
          const std::lock_guard lock{seen_mutex};
          seen = std::move(request);
        }
        write_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
      }};
      oip::http::client client{server.address(), within_3_seconds()};
      oip::http_call call = get_call("/v2/health/ready");
      call.headers.push_back({"host", "models.example.com"});
      REQUIRE(send_to(client, call, path).ok());
      const std::lock_guard lock{seen_mutex};
      CHECK(seen.find("\r\nhost: models.example.com\r\n") != std::string::npos);
      CHECK(seen.find("Host:") == std::string::npos);
    }
    SUBCASE("a call that would break the request's framing is refused, nothing sent") {
      std::atomic<int> connections{0};
      scripted_server server{[&](int fd) {
        ++connections;
        (void)read_request(fd);
        write_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
      }};
      oip::http::client client{server.address(), within_3_seconds()};
      std::vector<oip::http_call> refused;
      refused.push_back(get_call("/v2/health/ready"));
      refused.back().headers.push_back({"X-Note", "a\r\nGET /smuggled HTTP/1.1"});
      refused.push_back(get_call("/v2/health/ready HTTP/1.1\r\nX: y"));
      refused.push_back(get_call("/v2/health/ready"));
      refused.back().headers.push_back({"Bad Name", "x"});
      refused.push_back(get_call("/v2/health/ready"));
      refused.back().headers.push_back({"content-length", "5"});
      refused.push_back(get_call("/v2/health/ready"));
      refused.back().headers.push_back({"Transfer-Encoding", "chunked"});
      refused.push_back(get_call("/v2/health/ready"));
      refused.back().headers.push_back({"Transfer-Encoding\v", "chunked"});
      refused.push_back(get_call("/v2/health/ready\tx"));
      refused.push_back(get_call(""));
      for (const oip::http_call& call : refused) {
        CAPTURE(call.target);
        const oip::result<oip::http_reply> r = send_to(client, call, path);
        REQUIRE_FALSE(r.ok());
        CHECK(r.error().code() == oip::errc::invalid_argument);
      }
      CHECK(connections == 0);

      // Every call carries the client's own headers: one that would break the framing fails
      // every call.
      oip::client_options bad = within_3_seconds();
      bad.headers.push_back({"X-Token", "abc\r\nX-Admin: 1"});
      oip::http::client misconfigured{server.address(), bad};
      const oip::result<oip::inference_response> r =
          path == call_path::io_thread ? misconfigured.async_infer("simple", simple_request()).get()
                                       : misconfigured.infer("simple", simple_request());
      REQUIRE_FALSE(r.ok());
      CHECK(r.error().code() == oip::errc::invalid_argument);
      CHECK(connections == 0);

      // A tab and bytes past ASCII are a value's to carry.
      oip::http_call fine = get_call("/v2/health/ready?verbose=1");
      fine.headers.push_back({"X-Note", "caf\xC3\xA9\tok"});
      REQUIRE(send_to(client, fine, path).ok());
      CHECK(connections == 1);
    }
  }
}

TEST_CASE("a callback that throws ends its own call only") {
  scripted_server server{[](int fd) {
    while (!read_request(fd).empty()) {
      write_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    }
  }};
  oip::http::client client{server.address(), within_3_seconds()};
  std::promise<void> threw;
  client.async_send(get_call("/v2/health/ready"), [&threw](const oip::result<oip::http_reply>&) {
    threw.set_value();
    throw std::runtime_error{"a caller's bug"};
  });
  threw.get_future().get();
  // The I/O thread goes on: the next call, asynchronous too, is answered.
  const oip::result<oip::http_reply> r =
      send_to(client, get_call("/v2/health/ready"), call_path::io_thread);
  REQUIRE(r.ok());
  CHECK(r->status == 200);
}

namespace {

// A listener whose queue of connections to accept is full: the kernel drops further SYNs, so a
// connection to it neither succeeds nor fails.
class full_listener {
 public:
  full_listener() {
    oip::testing::loopback_socket bound = oip::testing::bind_loopback();
    listener_ = bound.fd;
    port_ = bound.port;
    REQUIRE(listen(listener_, 0) == 0);
    for (int i = 0; i < 4; ++i) {
      const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
      REQUIRE(fd >= 0);
      (void)connect(fd, reinterpret_cast<sockaddr*>(&bound.address), sizeof bound.address);
      fillers_.push_back(fd);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds{50});
  }
  full_listener(const full_listener&) = delete;
  full_listener& operator=(const full_listener&) = delete;
  ~full_listener() {
    for (const int fd : fillers_) close(fd);
    close(listener_);
  }
  [[nodiscard]] std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  int listener_ = -1;
  std::uint16_t port_ = 0;
  std::vector<int> fillers_;
};

}  // namespace

TEST_CASE("a connection that never opens ends at the connect timeout, or at the deadline") {
  full_listener server;
  for (const bool asynchronous : {false, true}) {
    CAPTURE(asynchronous);
    for (const bool deadline_first : {false, true}) {
      CAPTURE(deadline_first);
      oip::client_options options;
      options.connect_timeout = std::chrono::milliseconds{deadline_first ? 5000 : 300};
      options.timeout = std::chrono::milliseconds{deadline_first ? 300 : 0};
      oip::http::client client{server.address(), options};
      const auto started = std::chrono::steady_clock::now();
      const oip::result<oip::inference_response> r =
          asynchronous ? client.async_infer("simple", simple_request()).get()
                       : client.infer("simple", simple_request());
      const auto took = std::chrono::steady_clock::now() - started;
      REQUIRE_FALSE(r.ok());
      CHECK(r.error().code() ==
            (deadline_first ? oip::errc::deadline_exceeded : oip::errc::unavailable));
      CHECK(took >= std::chrono::milliseconds{250});
      CHECK(took < std::chrono::seconds{4});
    }
  }
}

namespace {

// The kernel's timer on each established connection to `server_port` from this machine, as
// /proc/net/tcp shows it: its kind (2 is keepalive's) and when it fires, in hundredths of a
// second.
struct tcp_timer {
  int kind = 0;
  long when = 0;
};
std::vector<tcp_timer> timers_of_connections_to(std::uint16_t server_port) {
  std::ifstream table{"/proc/net/tcp"};
  std::string line;
  std::getline(table, line);  // the heading
  std::vector<tcp_timer> out;
  char remote_port[5] = {};
  std::snprintf(remote_port, sizeof remote_port, "%04X", static_cast<unsigned>(server_port));
  while (std::getline(table, line)) {
    std::istringstream fields{line};
    std::string slot, local, remote, state, queues, timer;
    fields >> slot >> local >> remote >> state >> queues >> timer;
    if (state != "01" || !remote.ends_with(std::string{":"} + remote_port)) continue;
    const std::size_t colon = timer.find(':');
    if (colon == std::string::npos) continue;
    out.push_back(
        {std::stoi(timer.substr(0, colon)), std::stol(timer.substr(colon + 1), nullptr, 16)});
  }
  return out;
}

}  // namespace

TEST_CASE("a call waiting on a silent server is probed by TCP keepalive, unless turned off") {
  // A host that vanishes (powered off, cut off) sends nothing, not even a reset: a call with no
  // deadline would wait on a connection nobody probes for ever. The kernel's timer on the
  // client's connection shows the probes to come.
  if (!std::ifstream{"/proc/net/tcp"}) {
    MESSAGE("skipped: no /proc/net/tcp to read the connection's timer from");
    return;
  }
  for (const call_path path : {call_path::caller_thread, call_path::io_thread}) {
    CAPTURE(path == call_path::io_thread);
    for (const std::chrono::seconds keepalive :
         {std::chrono::seconds{7}, std::chrono::seconds{0}}) {
      CAPTURE(keepalive.count());
      std::promise<void> answer;
      std::shared_future<void> answered = answer.get_future().share();
      std::promise<void> request_read;
      std::future<void> read = request_read.get_future();
      scripted_server server{[answered, &request_read](int fd) {
        (void)read_request(fd);
        request_read.set_value();
        answered.wait();  // silent while the client waits; then closes
      }};
      oip::client_options options;
      options.tcp_keepalive = keepalive;
      oip::http::client client{server.address(), options};
      std::future<oip::result<oip::inference_response>> call = std::async(std::launch::async, [&] {
        return path == call_path::io_thread ? client.async_infer("simple", simple_request()).get()
                                            : client.infer("simple", simple_request());
      });
      const bool request_came =
          read.wait_for(std::chrono::seconds{10}) == std::future_status::ready;
      std::vector<tcp_timer> timers;
      // The request is acknowledged at once on loopback; from then on keepalive's timer runs.
      const bool probed = oip::testing::wait_until(
          [&] {
            timers = timers_of_connections_to(server.port());
            return timers.size() == 1 && timers[0].kind == 2;
          },
          keepalive.count() > 0 ? std::chrono::seconds{3} : std::chrono::seconds{1});
      answer.set_value();  // first: a failed check below must not leave the call waiting
      CHECK(request_came);
      if (keepalive.count() > 0) {
        CHECK(probed);
        CHECK((probed && timers[0].when > 0 && timers[0].when <= 700));
      } else {
        CHECK_FALSE(probed);
        CHECK(timers.size() == 1);
        CHECK((timers.size() == 1 && timers[0].kind == 0));
      }
      CHECK_FALSE(call.get().ok());  // closed without a reply
    }
  }
}

TEST_CASE("a kept-alive connection the server closed while idle: the call goes on a new one") {
  std::atomic<int> connections{0};
  scripted_server server{[&](int fd) {
    ++connections;
    (void)read_request(fd);
    write_all(fd, valid_reply());
    std::this_thread::sleep_for(std::chrono::milliseconds{20});  // then closes, as on idle
  }};
  oip::client_options options;
  options.timeout = std::chrono::milliseconds{5000};
  options.max_connections = 1;
  oip::http::client client{server.address(), options};
  check_simple(client.infer("simple", simple_request()));
  std::this_thread::sleep_for(std::chrono::milliseconds{150});
  check_simple(client.infer("simple", simple_request()));
  std::this_thread::sleep_for(std::chrono::milliseconds{150});
  check_simple(client.async_infer("simple", simple_request()).get());
  std::this_thread::sleep_for(std::chrono::milliseconds{150});
  check_simple(client.async_infer("simple", simple_request()).get());
  CHECK(connections.load() == 4);
}

TEST_CASE("interim replies (1xx) are skipped: the final reply follows on the same connection") {
  for (const call_path path : {call_path::caller_thread, call_path::io_thread}) {
    CAPTURE(path == call_path::io_thread);
    SUBCASE("a scripted server's 100 and 103 before each reply") {
      std::atomic<int> connections{0};
      scripted_server server{[&](int fd) {
        ++connections;
        for (std::int32_t call = 0; call < 3; ++call) {
          if (read_request(fd).empty()) return;
          write_all(fd, "HTTP/1.1 100 Continue\r\n\r\n");
          write_all(fd,
                    "HTTP/1.1 103 Early Hints\r\nLink: </hint>\r\n\r\n" + valid_reply(100 * call));
        }
      }};
      oip::client_options options = within_3_seconds();
      options.max_connections = 1;
      oip::http::client client{server.address(), options};
      for (std::int32_t call = 0; call < 3; ++call) {
        CAPTURE(call);
        check_simple(path == call_path::io_thread
                         ? client.async_infer("simple", simple_request(100 * call)).get()
                         : client.infer("simple", simple_request(100 * call)),
                     100 * call);
      }
      CHECK(connections.load() == 1);
    }
    SUBCASE("oip's server answers Expect: 100-continue with a 100 first") {
      local_servers servers;
      oip::client_options options = within_3_seconds();
      options.max_connections = 1;
      options.headers.push_back({"Expect", "100-continue"});
      oip::http::client client{servers.http_address, options};
      for (std::int32_t call = 0; call < 4; ++call) {
        CAPTURE(call);
        check_simple(path == call_path::io_thread
                         ? client.async_infer("simple", simple_request(100 * call)).get()
                         : client.infer("simple", simple_request(100 * call)),
                     100 * call);
      }
    }
    SUBCASE("interim replies without end are an error") {
      scripted_server server{[&](int fd) {
        (void)read_request(fd);
        for (int i = 0; i < 40; ++i) write_all(fd, "HTTP/1.1 100 Continue\r\n\r\n");
      }};
      oip::client_options options;  // no deadline: the count alone ends the call
      oip::http::client client{server.address(), options};
      const oip::result<oip::inference_response> r =
          path == call_path::io_thread ? client.async_infer("simple", simple_request()).get()
                                       : client.infer("simple", simple_request());
      REQUIRE_FALSE(r.ok());
      CHECK(r.error().code() == oip::errc::unavailable);
      CHECK(r.error().message().find("interim (1xx) replies") != std::string::npos);
    }
  }
}

TEST_CASE("bytes that come on an idle connection are never taken for the next call's reply") {
  for (const call_path path : {call_path::caller_thread, call_path::io_thread}) {
    CAPTURE(path == call_path::io_thread);
    for (const bool stray_reply : {true, false}) {
      CAPTURE(stray_reply);
      // The first connection answers its call, then sends a second reply (a server's bug) or a
      // 408 before it closes (as servers and proxies do on idle connections); the second answers
      // whatever it is asked.
      std::atomic<int> connections{0};
      std::atomic<int> requests{0};
      std::atomic<bool> stray_sent{false};
      scripted_server server{[&](int fd) {
        const int connection = ++connections;
        if (connection == 1) {
          if (read_request(fd).empty()) return;
          ++requests;
          write_all(fd, valid_reply(0));
          std::this_thread::sleep_for(std::chrono::milliseconds{30});
          write_all(fd, stray_reply ? valid_reply(1000)
                                    : "HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n"
                                      "Connection: close\r\n\r\n");
          if (!stray_reply) shutdown(fd, SHUT_WR);  // closes as it says, before the flag is set
          stray_sent = true;
          if (stray_reply) std::this_thread::sleep_for(std::chrono::milliseconds{400});
          return;
        }
        for (;;) {
          const std::string request = read_request(fd);
          if (request.empty()) return;
          ++requests;
          const std::size_t at = request.find("\r\n\r\n");
          // The request's INPUT0 starts at its base: reply for that base.
          const oip::result<oip::inference_request> asked = oip::decode_request(
              oip::buffer::from_string(request.substr(at + 4)),
              std::stoul(request.substr(request.find("Inference-Header-Content-Length: ") + 33)));
          if (!asked.ok()) return;
          write_all(fd, valid_reply(asked->inputs[0].at<std::int32_t>(0)));
        }
      }};
      oip::client_options options = within_3_seconds();
      options.max_connections = 1;
      oip::http::client client{server.address(), options};
      const auto infer = [&](std::int32_t base) {
        return path == call_path::io_thread
                   ? client.async_infer("simple", simple_request(base)).get()
                   : client.infer("simple", simple_request(base));
      };
      check_simple(infer(0), 0);
      // Once the bytes are on their way: loopback delivers them before the next call looks.
      REQUIRE(oip::testing::wait_until([&] { return stray_sent.load(); }));
      std::this_thread::sleep_for(std::chrono::milliseconds{20});
      check_simple(infer(7), 7);
      check_simple(infer(8), 8);
      CHECK(connections.load() == 2);
      CHECK(requests.load() == 3);
    }
  }
}

TEST_CASE("a reply that comes before the request was read whole is the call's outcome") {
  // A server that refuses a body too large answers once it has read the headers, and closes: the
  // client's write then fails, and the reply waiting on the socket is what it said.
  const std::string refusal = R"({"error":"request body of 67108864 bytes is too large"})";
  for (const auto& [path, deadline] :
       {std::pair{call_path::caller_thread, true}, std::pair{call_path::io_thread, true},
        std::pair{call_path::caller_thread, false}, std::pair{call_path::io_thread, false}}) {
    CAPTURE(path == call_path::io_thread);
    CAPTURE(deadline);  // without one, a synchronous call's socket blocks
    scripted_server server{[&](int fd) {
      std::string got;
      std::array<char, 4096> chunk{};
      while (got.find("\r\n\r\n") == std::string::npos) {
        const ssize_t n = recv(fd, chunk.data(), chunk.size(), 0);
        if (n <= 0) return;
        got.append(chunk.data(), static_cast<std::size_t>(n));
      }
      write_all(fd,
                "HTTP/1.1 413 Payload Too Large\r\nContent-Type: application/json\r\n"
                "Connection: close\r\nContent-Length: " +
                    std::to_string(refusal.size()) + "\r\n\r\n" + refusal);
    }};
    oip::http::client client{server.address(),
                             deadline ? within_3_seconds() : oip::client_options{}};
    oip::http_call call;
    call.method = "POST";
    call.target = "/v2/models/simple/infer";
    call.head = std::string(std::size_t{64} << 20U, ' ');
    const oip::result<oip::http_reply> reply = send_to(client, call, path);
    REQUIRE_MESSAGE(reply.ok(), reply.error().message());
    CHECK(reply->status == 413);
    CHECK(reply->body.as_string_view() == refusal);
  }
}

TEST_CASE("a call the server may have run is not sent again; a GET is") {
  for (const call_path path : {call_path::caller_thread, call_path::io_thread}) {
    CAPTURE(path == call_path::io_thread);
    // The first connection answers one call, then reads the next whole and closes without a
    // reply; later connections answer.
    std::atomic<int> connections{0};
    std::atomic<int> requests{0};
    scripted_server server{[&](int fd) {
      const int connection = ++connections;
      for (int call = 0;; ++call) {
        const std::string request = read_request(fd);
        if (request.empty()) return;
        ++requests;
        if (connection == 1 && call == 1) return;
        if (request.rfind("GET ", 0) == 0) {
          write_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
        } else {
          write_all(fd, valid_reply());
        }
      }
    }};
    oip::client_options options = within_3_seconds();
    options.max_connections = 1;  // each path has its own connections: one path per client
    oip::http::client client{server.address(), options};
    const auto infer = [&] {
      return path == call_path::io_thread ? client.async_infer("simple", simple_request()).get()
                                          : client.infer("simple", simple_request());
    };
    SUBCASE("an inference") {
      check_simple(infer());
      const oip::result<oip::inference_response> r = infer();
      REQUIRE_FALSE(r.ok());
      CHECK(r.error().code() == oip::errc::unavailable);
      CHECK(requests.load() == 2);
      check_simple(infer());  // on a new connection
      CHECK(connections.load() == 2);
    }
    SUBCASE("a health check") {
      check_simple(infer());
      const oip::result<oip::http_reply> live = send_to(client, get_call("/v2/health/live"), path);
      REQUIRE_MESSAGE(live.ok(), live.to_status().message());
      CHECK(live->status == 200);
      CHECK(requests.load() == 3);
      CHECK(connections.load() == 2);
    }
  }
}

TEST_CASE("a connect timeout of zero leaves opening a connection to the deadline; names resolve") {
  local_servers servers;
  const std::string port = servers.http_address.substr(servers.http_address.rfind(':') + 1);
  for (const call_path path : {call_path::caller_thread, call_path::io_thread}) {
    CAPTURE(path == call_path::io_thread);
    oip::client_options options = within_3_seconds();
    options.connect_timeout = std::chrono::milliseconds{0};
    oip::http::client client{"localhost:" + port, options};
    check_simple(path == call_path::io_thread
                     ? client.async_infer("simple", simple_request(3)).get()
                     : client.infer("simple", simple_request(3)),
                 3);
  }
  // A name no resolver knows: refused at once, or, where the machine's resolver cannot be
  // reached, not waited for past the connect timeout.
  for (const call_path path : {call_path::caller_thread, call_path::io_thread}) {
    CAPTURE(path == call_path::io_thread);
    oip::client_options options;
    options.connect_timeout = std::chrono::milliseconds{1000};
    oip::http::client client{"no-such-host.invalid:8000", options};
    const auto started = std::chrono::steady_clock::now();
    const oip::result<oip::inference_response> r =
        path == call_path::io_thread ? client.async_infer("simple", simple_request()).get()
                                     : client.infer("simple", simple_request());
    CHECK(std::chrono::steady_clock::now() - started < std::chrono::milliseconds{2500});
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == oip::errc::unavailable);
    const bool refused =
        r.error().message().find("cannot resolve 'no-such-host.invalid:8000'") != std::string::npos;
    const bool bounded = r.error().message().find("within 1000 ms") != std::string::npos;
    CHECK_MESSAGE((refused || bounded), r.error().message());
  }
}

TEST_CASE("mutated replies never crash or hang the HTTP client") {
  const std::string reply = valid_reply();
  std::uint64_t seed = 0x9e3779b97f4a7c15ULL;
  const auto next = [&seed] {
    seed ^= seed << 13U;
    seed ^= seed >> 7U;
    seed ^= seed << 17U;
    return seed;
  };
  std::mutex mutex;  // the socket orders the rounds, but not in ThreadSanitizer's eyes
  std::string mutated;
  scripted_server server{[&](int fd) {
    (void)read_request(fd);
    std::string answer;
    {
      const std::lock_guard lock{mutex};
      answer = mutated;
    }
    write_all(fd, answer);
  }};
  oip::client_options options;
  options.timeout = std::chrono::milliseconds{2000};
  options.max_connections = 1;
  int answered = 0;
  const auto mutate = [&] {
    const std::lock_guard lock{mutex};
    mutated = reply;
    const std::uint64_t edits = 1 + next() % 4;
    for (std::uint64_t e = 0; e < edits; ++e) {
      const std::size_t at = next() % mutated.size();
      switch (next() % 4) {
        case 0: mutated[at] = static_cast<char>(next()); break;
        case 1: mutated.resize(at); break;
        case 2: mutated.insert(at, 1, static_cast<char>(next())); break;
        default: mutated.erase(at, 1 + next() % 8); break;
      }
      if (mutated.empty()) mutated = "X";
    }
  };
  for (int round = 0; round < 300; ++round) {
    mutate();
    oip::http::client client{server.address(), options};
    const auto started = std::chrono::steady_clock::now();
    const oip::result<oip::inference_response> r = client.infer("simple", simple_request());
    CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds{4});
    if (r.ok()) ++answered;
  }
  MESSAGE(answered << " of 300 mutated replies still decoded");
}

#ifdef OIP_TEST_GRPC_CLIENT
TEST_CASE("a gRPC peer that is no gRPC server, or never answers, is an error within the deadline") {
  oip::client_options options;
  options.timeout = std::chrono::milliseconds{500};
  {
    scripted_server server{
        [](int fd) { write_all(fd, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"); }};
    oip::grpc::client client{server.address(), options};
    const auto started = std::chrono::steady_clock::now();
    const oip::result<oip::inference_response> r = client.infer("simple", simple_request());
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().received() == oip::received_over::grpc);
    CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds{3});
  }
  std::atomic<bool> release{false};
  scripted_server silent{[&](int /*fd*/) {
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds{10});
  }};
  oip::grpc::client client{silent.address(), options};
  const oip::result<oip::inference_response> r = client.infer("simple", simple_request());
  release = true;
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == oip::errc::deadline_exceeded);
}

TEST_CASE("a gRPC client closes while a callback starts calls again: they are refused") {
  // A model that runs until its call is cancelled, behind oip's gRPC server.
  oip::model_repository models;
  oip::model_config config;
  config.name = "waiter";
  config.inputs = {{"IN", oip::datatype::int32, {1}, {}}};
  config.outputs = {{"OUT", oip::datatype::int32, {1}, {}}};
  auto started = std::make_shared<std::atomic<int>>(0);
  REQUIRE(models
              .add(oip::make_model(
                  config,
                  [started](oip::inference_call& call) -> oip::result<oip::model_output> {
                    ++*started;
                    while (!call.cancelled()) {
                      std::this_thread::sleep_for(std::chrono::milliseconds{1});
                    }
                    return oip::status{oip::errc::unavailable, "cancelled"};
                  }))
              .ok());
  oip::executor workers{oip::executor_options{2, 64}};
  oip::inference_service service{models, workers};
  oip::grpc::server server{service, oip::grpc::server_options{"127.0.0.1", 0}};
  const oip::result<std::uint16_t> port = server.start();
  REQUIRE(port.ok());
  // No deadline: only the client's end stops the call. The callback retries what the cancel
  // ends (`unavailable`), as a retry policy would.
  auto owned = std::make_unique<oip::grpc::client>("127.0.0.1:" + std::to_string(*port));
  oip::grpc::client* client = owned.get();  // still there while its end waits for its calls
  std::atomic<int> retries{0};
  std::mutex mutex;
  std::optional<oip::errc> last;
  oip::inference_request one;
  one.inputs.push_back(*oip::tensor::from_values<std::int32_t>("IN", {1}, std::vector{1}));
  std::function<void(oip::result<oip::inference_response>)> retry;
  retry = [&](oip::result<oip::inference_response> r) {
    if (!r.ok() && r.error().code() == oip::errc::unavailable && retries.fetch_add(1) < 1000) {
      client->async_infer("waiter", one, retry);
      return;
    }
    const std::lock_guard lock{mutex};
    last = r.ok() ? oip::errc::ok : r.error().code();
  };
  client->async_infer("waiter", one, retry);
  REQUIRE(oip::testing::wait_until([&] { return started->load() == 1; }));
  owned.reset();  // cancels the call; the retry its callback starts is refused, and the end comes
  CHECK(retries.load() == 1);
  const std::lock_guard lock{mutex};
  REQUIRE(last.has_value());
  CHECK(*last == oip::errc::failed_precondition);
  server.stop();
}
#endif

#ifdef OIP_TEST_GRPC_CLIENT
TEST_CASE(
    "a gRPC client ended as its last call's callback returns, with no server in the process") {
  // Nothing else in the process holds grpc++'s callback machinery, so the client's channel is its
  // last user: it must go on the caller's thread, never on one of grpc++'s own.
  for (int i = 0; i < 40; ++i) {
    CAPTURE(i);
    std::string address;
    {
      const oip::testing::loopback_socket unused = oip::testing::bind_loopback();
      address = "127.0.0.1:" + std::to_string(unused.port);
      close(unused.fd);
    }
    oip::client_options options;
    options.timeout = std::chrono::milliseconds{2000};
    oip::grpc::client client{address, options};
    const oip::result<oip::inference_response> r =
        client.async_infer("simple", simple_request()).get();
    REQUIRE_FALSE(r.ok());
  }
}
#endif
