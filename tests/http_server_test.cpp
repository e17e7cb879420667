// The oip::http server through real sockets: keep-alive, pipelining, chunked bodies,
// 100-continue, limits (413, 431), timeouts for slow clients, malformed requests, HEAD,
// scatter/gather binary replies, cancellation on disconnect, graceful stop.

#include "gzip.hpp"
#include "serving_support.hpp"
#include "trace_support.hpp"
#include "wait.hpp"

#include <oip/http/server.hpp>
#include <oip/inference_service.hpp>
#include <oip/memory_budget.hpp>
#include <oip/model.hpp>

#include <array>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <future>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

namespace {

using namespace std::chrono_literals;

struct reply {
  int status = 0;
  std::string headers;
  std::string body;
  [[nodiscard]] bool has_header(const std::string& line) const {
    return headers.find(line) != std::string::npos;
  }
};

// A blocking loopback client that reads replies one at a time (pipelined ones stay buffered).
class connection {
 public:
  // `receive_buffer`: the socket's receive buffer in bytes, set before connecting (which bounds
  // the window the server may fill); 0 leaves the system's.
  explicit connection(std::uint16_t port, int receive_buffer = 0)
      : fd_{::socket(AF_INET, SOCK_STREAM, 0)} {
    REQUIRE(fd_ >= 0);
    if (receive_buffer > 0) {
      ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer);
    }
    timeval timeout{10, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    ::inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  }
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;
  ~connection() { close(); }

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  // Whether every byte went; false when the server closed or reset the connection first (the
  // next read tells which).
  bool send(const std::string& bytes) {
    std::size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<std::size_t>(n);
    }
    return true;
  }

  // One reply, or nothing once the server has closed the connection (or after 10 s).
  std::optional<reply> read_reply() {
    std::size_t end = 0;
    while ((end = pending_.find("\r\n\r\n")) == std::string::npos) {
      if (!fill()) return std::nullopt;
    }
    reply r;
    r.headers = pending_.substr(0, end + 2);
    pending_.erase(0, end + 4);
    r.status = std::stoi(r.headers.substr(9, 3));
    std::size_t length = 0;
    if (const std::size_t at = r.headers.find("\r\nContent-Length: "); at != std::string::npos) {
      length = std::stoul(r.headers.substr(at + 18));
    }
    if (r.status == 100) return r;
    if (!head_request_) {
      while (pending_.size() < length) {
        if (!fill()) return std::nullopt;
      }
      r.body = pending_.substr(0, length);
      pending_.erase(0, length);
    }
    return r;
  }

  // Whether the server closed the connection (reads end) within about `wait`.
  bool closed_by_server() {
    char byte = 0;
    return ::recv(fd_, &byte, 1, 0) == 0;
  }

  void expect_head_reply(bool head) { head_request_ = head; }

  // What the socket has now (buffered bytes first), or nothing once the server has closed it.
  std::optional<std::string> read_some() {
    if (pending_.empty() && !fill()) return std::nullopt;
    std::string out = std::move(pending_);
    pending_.clear();
    return out;
  }

 private:
  bool fill() {
    char chunk[65536];
    const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
    if (n <= 0) return false;
    pending_.append(chunk, static_cast<std::size_t>(n));
    return true;
  }

  int fd_;
  std::string pending_;
  bool head_request_ = false;
};

const std::string simple_body =
    R"({"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]},)"
    R"({"name":"INPUT1","shape":[1,16],"datatype":"INT32","data":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}]})";

std::string post(const std::string& target, const std::string& body,
                 const std::string& extra_headers = "") {
  return "POST " + target +
         " HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" +
         extra_headers + "\r\n" + body;
}

std::string get(const std::string& target, const std::string& method = "GET") {
  return method + " " + target + " HTTP/1.1\r\nHost: x\r\n\r\n";
}

struct fixture {
  oip::model_repository repository;
  oip::executor workers{{2, 64}};
  std::shared_ptr<oip::testing::waiter> waiter = std::make_shared<oip::testing::waiter>();
  oip::http_handler handler;
  oip::http::server server;
  std::uint16_t port = 0;

  static oip::server_options options(std::size_t max_body_bytes = std::size_t{1} << 20U,
                                     std::size_t max_inflight_bytes = 0) {
    oip::server_options o;
    o.bounds.max_body_bytes = max_body_bytes;
    o.bounds.max_inflight_bytes = max_inflight_bytes;
    return o;
  }
  static oip::http::server_options http_options(std::chrono::milliseconds body_timeout = 300ms) {
    oip::http::server_options o;
    o.address = "127.0.0.1";
    o.port = 0;
    o.max_header_bytes = 4096;
    o.max_header_count = 20;
    o.header_timeout = 2s;
    o.body_timeout = body_timeout;
    o.idle_timeout = 2s;
    return o;
  }

  // `body_timeout` also bounds a reply's write (300 ms: the timeout tests wait for it).
  explicit fixture(std::size_t max_body_bytes = std::size_t{1} << 20U,
                   std::size_t max_inflight_bytes = 0,
                   std::chrono::milliseconds body_timeout = 300ms)
      : handler{repository, workers, options(max_body_bytes, max_inflight_bytes)},
        server{handler, http_options(body_timeout)} {
    REQUIRE(repository.add(oip::testing::make_simple()).ok());
    REQUIRE(repository.add(waiter).ok());
    oip::result<std::uint16_t> started = server.start();
    REQUIRE(started.ok());
    port = *started;
  }
};

}  // namespace

TEST_CASE("keep-alive: several requests on one connection") {
  fixture f;
  connection c{f.port};
  for (int i = 0; i < 3; ++i) {
    c.send(get("/v2/health/live"));
    const std::optional<reply> r = c.read_reply();
    REQUIRE(r.has_value());
    CHECK(r->status == 200);
    CHECK(r->body == R"({"live":true})");
  }
  c.send(post("/v2/models/simple/infer", simple_body));
  const std::optional<reply> inferred = c.read_reply();
  REQUIRE(inferred.has_value());
  CHECK(inferred->status == 200);
  CHECK(inferred->has_header("Content-Type: application/json"));
  CHECK(inferred->body.find(R"("name":"OUTPUT0")") != std::string::npos);
}

TEST_CASE("an HTTP/1.0 client that asks to keep the connection is told it is kept") {
  fixture f;
  connection c{f.port};
  for (int i = 0; i < 2; ++i) {
    c.send("GET /v2/health/live HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    const std::optional<reply> r = c.read_reply();
    REQUIRE(r.has_value());
    CHECK(r->status == 200);
    CHECK(r->has_header("Connection: keep-alive"));
  }
  c.send("GET /v2/health/live HTTP/1.0\r\n\r\n");
  const std::optional<reply> last = c.read_reply();
  REQUIRE(last.has_value());
  CHECK(last->has_header("Connection: close"));
  CHECK(c.closed_by_server());
}

TEST_CASE("pipelined requests are answered in order") {
  fixture f;
  connection c{f.port};
  c.send(get("/v2/health/live") + post("/v2/models/simple/infer", simple_body) +
         get("/v2/models/simple") + get("/v2/models/nope"));
  const std::optional<reply> first = c.read_reply();
  const std::optional<reply> second = c.read_reply();
  const std::optional<reply> third = c.read_reply();
  const std::optional<reply> fourth = c.read_reply();
  REQUIRE((first && second && third && fourth));
  CHECK(first->body == R"({"live":true})");
  CHECK(second->body.find(R"("model_name":"simple")") != std::string::npos);
  CHECK(third->body.find(R"("platform":"oip")") != std::string::npos);
  CHECK(fourth->status == 404);
}

TEST_CASE("a model run inline answers concurrent and pipelined requests, each in order") {
  fixture f;
  REQUIRE(f.repository.add(oip::testing::make_inline_simple("simple_inline")).ok());
  constexpr int clients = 4;
  constexpr int rounds = 25;
  std::atomic<int> in_order{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < clients; ++t) {
    threads.emplace_back([&] {
      connection c{f.port};
      for (int round = 0; round < rounds; ++round) {
        // Answered on the connection's own thread, the reply written before the next is read.
        c.send(post("/v2/models/simple_inline/infer", simple_body) + get("/v2/health/live") +
               post("/v2/models/simple_inline/infer", simple_body));
        const std::optional<reply> first = c.read_reply();
        const std::optional<reply> second = c.read_reply();
        const std::optional<reply> third = c.read_reply();
        if (first && second && third && first->status == 200 &&
            first->body.find(
                R"("name":"OUTPUT0","datatype":"INT32","shape":[1,16],"data":[1,2,3,)") !=
                std::string::npos &&
            second->body == R"({"live":true})" && third->body == first->body) {
          ++in_order;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  CHECK(in_order.load() == clients * rounds);
}

// A POST of `body` to simple's infer in chunks of `piece` bytes, then `trailer` (fields, each
// ending in CRLF).
std::string chunked_post(const std::string& body, std::size_t piece,
                         const std::string& trailer = "") {
  std::string out =
      "POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (std::size_t at = 0; at < body.size(); at += piece) {
    const std::string part = body.substr(at, piece);
    char size[16];
    std::snprintf(size, sizeof size, "%zx", part.size());
    out += std::string(size) + "\r\n" + part + "\r\n";
  }
  return out + "0\r\n" + trailer + "\r\n";
}

TEST_CASE("chunked bodies and Expect: 100-continue") {
  fixture f;
  connection c{f.port};
  c.send(chunked_post(simple_body, 50));
  const std::optional<reply> r = c.read_reply();
  REQUIRE(r.has_value());
  CHECK(r->status == 200);

  // Trailer fields are dropped, not merged into the header: one that names a content coding
  // does not make the server inflate a body that was never compressed, nor does one that repeats
  // a header's name (which Beast files beside it) take a header's place.
  c.send(
      chunked_post(simple_body, 50,
                   "Host: y\r\nContent-Encoding: gzip\r\nInference-Header-Content-Length: 3\r\n"));
  const std::optional<reply> trailed = c.read_reply();
  REQUIRE(trailed.has_value());
  CHECK(trailed->status == 200);

  c.send(
      "POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
      "Content-Length: " +
      std::to_string(simple_body.size()) + "\r\n\r\n");
  const std::optional<reply> go_on = c.read_reply();
  REQUIRE(go_on.has_value());
  CHECK(go_on->status == 100);
  c.send(simple_body);
  const std::optional<reply> done = c.read_reply();
  REQUIRE(done.has_value());
  CHECK(done->status == 200);
}

TEST_CASE(
    "the header's Connection fields decide keep-alive; trailers and Proxy-Connection do not") {
  fixture f;
  {
    // A trailer's Connection: close goes with the trailer: the connection stays open.
    connection c{f.port};
    REQUIRE(c.send(chunked_post(simple_body, 64, "Connection: close\r\n")));
    const std::optional<reply> r = c.read_reply();
    REQUIRE(r.has_value());
    CHECK(r->status == 200);
    CHECK(r->headers.find("Connection: close") == std::string::npos);
    REQUIRE(c.send(get("/v2/health/live")));
    const std::optional<reply> next = c.read_reply();
    REQUIRE(next.has_value());
    CHECK(next->status == 200);
  }
  {
    // The options of several Connection fields count together.
    connection c{f.port};
    REQUIRE(c.send(
        "GET /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: foo\r\nConnection: close\r\n\r\n"));
    const std::optional<reply> r = c.read_reply();
    REQUIRE(r.has_value());
    CHECK(r->status == 200);
    CHECK(r->headers.find("Connection: close") != std::string::npos);
    CHECK(c.closed_by_server());
  }
  {
    // HTTP/1.0: Proxy-Connection keeps nothing open; Connection: keep-alive does.
    connection proxied{f.port};
    REQUIRE(proxied.send("GET /v2/health/live HTTP/1.0\r\nProxy-Connection: keep-alive\r\n\r\n"));
    const std::optional<reply> r = proxied.read_reply();
    REQUIRE(r.has_value());
    CHECK(r->status == 200);
    CHECK(proxied.closed_by_server());

    connection kept{f.port};
    const std::string request = "GET /v2/health/live HTTP/1.0\r\nConnection: keep-alive\r\n\r\n";
    REQUIRE(kept.send(request));
    const std::optional<reply> first = kept.read_reply();
    REQUIRE(first.has_value());
    CHECK(first->headers.find("Connection: keep-alive") != std::string::npos);
    REQUIRE(kept.send(request));
    const std::optional<reply> second = kept.read_reply();
    REQUIRE(second.has_value());
    CHECK(second->status == 200);
  }
  {
    // An HTTP/1.0 request's Expect is ignored (RFC 9110, 10.1.1): no 100, just the reply.
    connection c{f.port};
    REQUIRE(
        c.send("POST /v2/models/simple/infer HTTP/1.0\r\nExpect: 100-continue\r\n"
               "Content-Length: " +
               std::to_string(simple_body.size()) + "\r\n\r\n" + simple_body));
    const std::optional<reply> r = c.read_reply();
    REQUIRE(r.has_value());
    CHECK(r->status == 200);
  }
}

TEST_CASE("chunked bodies: empty, over the limit, grown in steps and given back") {
  fixture f{std::size_t{1} << 20U, std::size_t{8} << 20U};
  const oip::memory_budget& memory = f.handler.service().memory();

  // No chunk at all: an empty body, which the handler refuses as JSON; the connection goes on.
  connection c{f.port};
  REQUIRE(c.send(chunked_post("", 1)));
  const std::optional<reply> empty = c.read_reply();
  REQUIRE(empty.has_value());
  CHECK(empty->status == 400);

  // 300 KiB in 8 KiB chunks: the buffer grows past its first 64 KiB step, twice.
  const std::string big = simple_body + std::string(std::size_t{300} << 10U, ' ');
  REQUIRE(c.send(chunked_post(big, std::size_t{8} << 10U)));
  const std::optional<reply> grown = c.read_reply();
  REQUIRE(grown.has_value());
  CHECK(grown->status == 200);
  CHECK(oip::testing::wait_until([&] { return memory.held() == 0; }));

  // A chunk that would take the body past the 1 MiB limit: a 413 from its size line, its bytes
  // never read.
  REQUIRE(c.send(
      "POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
      "200000\r\n"));
  const std::optional<reply> over = c.read_reply();
  REQUIRE(over.has_value());
  CHECK(over->status == 413);
  CHECK(over->body.find("limit of 1048576 bytes") != std::string::npos);
  CHECK(c.closed_by_server());
  CHECK(oip::testing::wait_until([&] { return memory.held() == 0; }));
}

TEST_CASE("transfer codings other than chunked are refused; chunk framing is bounded") {
  fixture f;
  // A body whose end cannot be found must not be read as the next request (RFC 9112, 6.3).
  for (const char* coding :
       {"chunked, identity", "gzip", "identity", "xchunked", "gzip, chunked", "chunked, chunked"}) {
    CAPTURE(coding);
    connection c{f.port};
    c.send(std::string{"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "} +
           coding + "\r\n\r\nGET /v2/models/SMUGGLED HTTP/1.1\r\nHost: x\r\n\r\n");
    const std::optional<reply> r = c.read_reply();
    REQUIRE(r.has_value());
    CHECK(r->status == 400);
    CHECK(r->body.find("only chunked is accepted") != std::string::npos);
    CHECK_FALSE(c.read_reply().has_value());  // closed: the smuggled request is never answered
  }
  {
    connection c{f.port};
    c.send(
        "POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        "Content-Length: 5\r\n\r\n0\r\n\r\n");
    const std::optional<reply> r = c.read_reply();
    REQUIRE(r.has_value());
    CHECK(r->status == 400);
  }
  // Chunk extensions and trailers beyond the read buffer end the request (a 431, or a reset when
  // the server closes with the rest unread), where they used to be held in memory whole.
  const auto chunk_of = [](const std::string& body) {
    char size[16];
    std::snprintf(size, sizeof size, "%zx", body.size());
    return std::string{size};
  };
  const std::string head =
      "POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (const bool in_trailer : {false, true}) {
    CAPTURE(in_trailer);
    connection c{f.port};
    const std::string filler(std::size_t{512} << 10U, 'a');
    if (in_trailer) {
      c.send(head + chunk_of(simple_body) + "\r\n" + simple_body + "\r\n0\r\nX-Trailer: " + filler +
             "\r\n\r\n");
    } else {
      c.send(head + chunk_of(simple_body) + ";x=" + filler + "\r\n" + simple_body +
             "\r\n0\r\n\r\n");
    }
    const std::optional<reply> r = c.read_reply();
    if (r.has_value()) CHECK(r->status == 431);
  }
  connection after{f.port};
  after.send("GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n");
  const std::optional<reply> live = after.read_reply();
  REQUIRE(live.has_value());
  CHECK(live->status == 200);
}

TEST_CASE("an HTTP/1.1 request without one Host field is a 400 that closes the connection") {
  fixture f;
  const std::pair<const char*, const char*> requests[] = {
      {"GET /v2/health/live HTTP/1.1\r\n\r\n", "must have a Host"},
      {"GET /v2/health/live HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", "more than one Host"},
      {"GET /v2/health/live HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n", "more than one Host"},
  };
  for (const auto& [request, message] : requests) {
    CAPTURE(request);
    connection c{f.port};
    c.send(std::string{request} + "GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n");
    const std::optional<reply> r = c.read_reply();
    REQUIRE(r.has_value());
    CHECK(r->status == 400);
    CHECK(r->body.find(message) != std::string::npos);
    CHECK_FALSE(c.read_reply().has_value());
  }
  connection c{f.port};
  c.send("GET /v2/health/live HTTP/1.0\r\n\r\n");  // HTTP/1.0 needs none
  const std::optional<reply> r = c.read_reply();
  REQUIRE(r.has_value());
  CHECK(r->status == 200);
}

TEST_CASE("a 413 reaches a client that sends its whole body before it reads (lingering close)") {
  // Python's requests and tritonclient send the body whatever the server said; a server that
  // closed with their bytes unread would reset the connection, and the 413 with it.
  fixture f;                                          // a body limit of 1 MiB
  const std::size_t length = std::size_t{64} << 20U;  // more than the sockets' buffers hold
  // Made before the connection is opened: under a sanitizer, making 64 MiB can take longer than
  // the server's header timeout (2 s), which would close the connection before a byte is sent.
  const std::string request =
      "POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nContent-Length: " +
      std::to_string(length) + "\r\n\r\n" + std::string(length, 'x');
  for (int attempt = 0; attempt < 3; ++attempt) {
    connection c{f.port};
    CHECK(c.send(request));
    const std::optional<reply> r = c.read_reply();
    REQUIRE(r.has_value());
    CHECK(r->status == 413);
    CHECK(c.closed_by_server());
  }
}

TEST_CASE("limits: bodies over the limit 413 before reading, huge headers 431") {
  fixture f;
  {
    connection c{f.port};
    c.send("POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000\r\n\r\n");
    const std::optional<reply> r = c.read_reply();
    REQUIRE(r.has_value());
    CHECK(r->status == 413);
    CHECK(r->body.find("above the limit of 1048576") != std::string::npos);
    CHECK(r->has_header("Connection: close"));
    CHECK(c.closed_by_server());
  }
  {
    connection c{f.port};
    c.send("GET /v2 HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(8000, 'a') + "\r\n\r\n");
    const std::optional<reply> r = c.read_reply();
    REQUIRE(r.has_value());
    CHECK(r->status == 431);
  }
  {
    connection c{f.port};
    std::string many = "GET /v2 HTTP/1.1\r\nHost: x\r\n";
    for (int i = 0; i < 30; ++i) many += "X-" + std::to_string(i) + ": 1\r\n";
    c.send(many + "\r\n");
    const std::optional<reply> r = c.read_reply();
    REQUIRE(r.has_value());
    CHECK(r->status == 431);
  }
  {
    connection c{f.port};
    c.send("BLAH\r\n\r\n");
    const std::optional<reply> r = c.read_reply();
    REQUIRE(r.has_value());
    CHECK(r->status == 400);
  }
}

TEST_CASE("a client that sends half a body is cut off by the body timeout") {
  fixture f;
  connection c{f.port};
  c.send("POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"in");
  const auto start = std::chrono::steady_clock::now();
  CHECK(c.closed_by_server());
  CHECK(std::chrono::steady_clock::now() - start < 5s);

  // A body's time limit grows with the bytes it moves, a second for each 64 KiB (the default
  // `body_min_bytes_per_second`), not with each read: a client that trickles its body below that
  // rate is cut off, chunked or not (300 ms, then 20 KiB a second earns 0.3 s a second).
  const auto chunk = [](std::size_t bytes) {
    char size[16];
    std::snprintf(size, sizeof size, "%zx", bytes);
    return std::string(size) + "\r\n" + std::string(bytes, ' ') + "\r\n";
  };
  for (const bool chunked : {true, false}) {
    CAPTURE(chunked);
    connection trickle{f.port};
    trickle.send(chunked ? "POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\n"
                           "Transfer-Encoding: chunked\r\n\r\n"
                         : "POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\n"
                           "Content-Length: 1000000\r\n\r\n");
    const auto started = std::chrono::steady_clock::now();
    bool sent_all = true;
    for (int i = 0; i < 40 && sent_all; ++i) {  // 4 s at most
      sent_all = trickle.send(chunked ? chunk(2048) : std::string(2048, ' '));
      std::this_thread::sleep_for(100ms);
    }
    CHECK_FALSE(sent_all);  // the server closed the connection meanwhile
    CHECK(std::chrono::steady_clock::now() - started < 3s);
    CHECK_FALSE(trickle.read_reply().has_value());
  }
  // One that keeps to the rate takes as long as its size needs, past the 300 ms: 640 KiB in 32
  // KiB steps, 100 ms apart, whose last brings the request's end.
  for (const bool chunked : {true, false}) {
    CAPTURE(chunked);
    const std::string padded = simple_body + std::string(std::size_t{640} << 10U, ' ');
    connection steady{f.port};
    REQUIRE(steady.send(chunked ? "POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\n"
                                  "Transfer-Encoding: chunked\r\n\r\n"
                                : "POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\n"
                                  "Content-Length: " +
                                      std::to_string(padded.size()) + "\r\n\r\n"));
    const std::size_t step = std::size_t{32} << 10U;
    for (std::size_t at = 0; at < padded.size(); at += step) {
      const std::string piece = padded.substr(at, step);
      char size[16];
      std::snprintf(size, sizeof size, "%zx", piece.size());
      REQUIRE(steady.send(chunked ? std::string(size) + "\r\n" + piece + "\r\n" : piece));
      std::this_thread::sleep_for(100ms);
    }
    if (chunked) REQUIRE(steady.send("0\r\n\r\n"));
    const std::optional<reply> answered = steady.read_reply();
    REQUIRE(answered.has_value());
    CHECK(answered->status == 200);
  }
  // The server still serves others.
  connection other{f.port};
  other.send(get("/v2/health/ready"));
  const std::optional<reply> r = other.read_reply();
  REQUIRE(r.has_value());
  CHECK(r->status == 200);
}

TEST_CASE("a reply read slowly, but not below the rate, is written whole past the body timeout") {
  // 12 MiB echoed back to a client with a 256 KiB receive buffer that reads at most 64 KiB every
  // 20 ms (3.2 MiB a second): seconds, against a body timeout of 300 ms that the bytes moved
  // extend by a second for each 64 KiB. The server's send buffer (4 MiB at most by default) and
  // the client's take some of it at once, not most.
  constexpr std::size_t tensor_bytes = std::size_t{12} << 20U;
  fixture f{std::size_t{16} << 20U};
  REQUIRE(f.repository.add(oip::testing::make_scores()).ok());
  connection reader{f.port, 256 << 10};
  REQUIRE(reader.send(post("/v2/models/scores/infer", std::string(tensor_bytes, '\0'),
                           "Inference-Header-Content-Length: 0\r\n")));
  std::string received;
  for (;;) {
    const std::optional<std::string> got = reader.read_some();
    if (!got) break;
    received += *got;
    const std::size_t head_end = received.find("\r\n\r\n");
    if (head_end != std::string::npos) {
      const std::size_t at = received.find("\r\nContent-Length: ");
      REQUIRE(at != std::string::npos);
      if (received.size() >= head_end + 4 + std::stoul(received.substr(at + 18))) break;
    }
    std::this_thread::sleep_for(20ms);
  }
  REQUIRE(received.find("\r\n\r\n") != std::string::npos);
  const std::size_t at = received.find("\r\nContent-Length: ");
  const std::size_t length = std::stoul(received.substr(at + 18));
  CHECK(length >= tensor_bytes);
  CHECK(received.size() == received.find("\r\n\r\n") + 4 + length);
}

TEST_CASE("each phase of a connection keeps its own time limit; a running model has none") {
  oip::model_repository repository;
  oip::executor workers{{2, 64}};
  auto waiter = std::make_shared<oip::testing::waiter>();
  REQUIRE(repository.add(oip::testing::make_simple()).ok());
  REQUIRE(repository.add(waiter).ok());
  oip::http_handler handler{repository, workers};
  oip::http::server_options o;
  o.address = "127.0.0.1";
  o.port = 0;
  o.header_timeout = 600ms;
  o.body_timeout = 300ms;
  o.idle_timeout = 600ms;
  oip::http::server server{handler, o};
  const oip::result<std::uint16_t> port = server.start();
  REQUIRE(port);
  using clock = std::chrono::steady_clock;
  const std::string request = post("/v2/models/simple/infer", simple_body);

  // Requests closer together than the idle time keep a connection open for several of them.
  connection kept{*port};
  for (int i = 0; i < 8; ++i) {
    if (i > 0) std::this_thread::sleep_for(150ms);
    REQUIRE(kept.send(request));
    const std::optional<reply> r = kept.read_reply();
    REQUIRE(r.has_value());
    CHECK(r->status == 200);
  }
  // Then idle: closed once the idle time (600 ms from the reply) has passed, not before.
  auto start = clock::now();
  CHECK(kept.closed_by_server());
  CHECK(clock::now() - start >= 450ms);
  CHECK(clock::now() - start < 3s);

  // A body that stops halfway on a kept-alive connection: the body's shorter limit, not the idle
  // time the connection was waiting under.
  connection halfway{*port};
  REQUIRE(halfway.send(request));
  REQUIRE(halfway.read_reply().has_value());
  REQUIRE(
      halfway.send("POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\n"
                   "Content-Length: 100\r\n\r\n{\"in"));
  start = clock::now();
  CHECK(halfway.closed_by_server());
  CHECK(clock::now() - start >= 250ms);
  CHECK(clock::now() - start < 500ms);  // the idle time's 600 ms would be too late

  // A model that runs past every limit (the request's own `timeout`, 1.5 s, ends it) still
  // answers on its connection, which then serves the next request.
  connection slow{*port};
  REQUIRE(slow.send(post(
      "/v2/models/waiter/infer",
      R"({"parameters":{"timeout":1500000},"inputs":[{"name":"IN","shape":[1],"datatype":"INT32","data":[1]}]})")));
  start = clock::now();
  const std::optional<reply> late = slow.read_reply();
  REQUIRE(late.has_value());
  CHECK(late->status != 200);
  CHECK(clock::now() - start >= 1400ms);
  REQUIRE(slow.send(request));
  const std::optional<reply> next = slow.read_reply();
  REQUIRE(next.has_value());
  CHECK(next->status == 200);
}

TEST_CASE("a HEAD request refused before it is read gets its error's headers, no body") {
  // No Host: a 400 that closes the connection. A body after the headers would be read by the
  // client as the start of another reply.
  fixture f;
  connection c{f.port};
  c.expect_head_reply(true);
  REQUIRE(c.send("HEAD /v2 HTTP/1.1\r\n\r\n"));
  const std::optional<reply> refused = c.read_reply();
  REQUIRE(refused.has_value());
  CHECK(refused->status == 400);
  CHECK(refused->has_header("Content-Length: "));  // the length of the body a GET would get
  CHECK_FALSE(c.read_some().has_value());          // and then the end, no body
}

TEST_CASE("HEAD gets headers only; binary replies carry their header length") {
  fixture f;
  connection c{f.port};
  c.expect_head_reply(true);
  c.send(get("/v2", "HEAD"));
  const std::optional<reply> head = c.read_reply();
  REQUIRE(head.has_value());
  CHECK(head->status == 200);
  CHECK(head->body.empty());
  c.expect_head_reply(false);

  const std::string binary_request =
      R"({"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]},)"
      R"({"name":"INPUT1","shape":[1,16],"datatype":"INT32","data":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}],)"
      R"("parameters":{"binary_data_output":true}})";
  c.send(post("/v2/models/simple/infer", binary_request));
  const std::optional<reply> r = c.read_reply();
  REQUIRE(r.has_value());
  CHECK(r->status == 200);
  CHECK(r->has_header("Content-Type: application/octet-stream"));
  const std::size_t at = r->headers.find("Inference-Header-Content-Length: ");
  REQUIRE(at != std::string::npos);
  const std::size_t json_size = std::stoul(r->headers.substr(at + 33));
  CHECK(r->body.size() == json_size + 2 * 64);  // two INT32 [1,16] outputs after the JSON
  std::int32_t last = 0;
  std::memcpy(&last, r->body.data() + json_size + 60, 4);
  CHECK(last == 16);  // OUTPUT0[15] = 15 + 1
}

TEST_CASE("a client that disconnects cancels its running request") {
  fixture f;
  {
    connection c{f.port};
    c.send(post("/v2/models/waiter/infer",
                R"({"inputs":[{"name":"IN","shape":[1],"datatype":"INT32","data":[1]}]})"));
    REQUIRE(oip::testing::wait_until([&] { return f.waiter->started.load() != 0; }));
  }  // closed while the model runs
  CHECK(oip::testing::wait_until([&] { return f.waiter->saw_cancel.load(); }, 5s));
}

TEST_CASE("stop finishes the request in flight, then closes") {
  fixture f;
  std::atomic<bool> started{false};
  oip::model_config config;
  config.name = "sleeper";
  config.inputs = {{"IN", oip::datatype::int32, {1}, {}}};
  config.outputs = {{"IN", oip::datatype::int32, {1}, {}}};
  REQUIRE(f.repository
              .add(oip::make_model(
                  config,
                  [&](const oip::inference_request& r) -> oip::result<oip::model_output> {
                    started = true;
                    std::this_thread::sleep_for(300ms);
                    return oip::model_output{{r.inputs[0]}, {}};
                  }))
              .ok());
  connection idle{f.port};
  connection busy{f.port};
  busy.send(post("/v2/models/sleeper/infer",
                 R"({"inputs":[{"name":"IN","shape":[1],"datatype":"INT32","data":[7]}]})"));
  REQUIRE(oip::testing::wait_until([&] { return started.load(); }));
  std::thread stopper{[&] { f.server.stop(5s); }};
  CHECK(idle.closed_by_server());  // idle connections close at once
  const std::optional<reply> r = busy.read_reply();
  REQUIRE(r.has_value());
  CHECK(r->status == 200);
  CHECK(r->has_header("Connection: close"));
  CHECK(r->body.find("[7]") != std::string::npos);
  stopper.join();
  CHECK(f.server.connections() == 0);
}

TEST_CASE("once a shutdown has begun, each reply closes its connection; new ones are served") {
  fixture f;
  connection pooled{f.port};
  pooled.send(get("/v2/health/ready"));
  const std::optional<reply> before = pooled.read_reply();
  REQUIRE(before.has_value());
  CHECK(before->status == 200);
  CHECK_FALSE(before->has_header("Connection: close"));
  f.handler.service().begin_shutdown();
  pooled.send(post("/v2/models/simple/infer", simple_body));
  const std::optional<reply> last = pooled.read_reply();
  REQUIRE(last.has_value());
  CHECK(last->status == 200);
  CHECK(last->has_header("Connection: close"));
  CHECK(pooled.closed_by_server());
  connection fresh{f.port};  // the server still accepts until it is stopped
  fresh.send(get("/v2/health/ready"));
  const std::optional<reply> ready = fresh.read_reply();
  REQUIRE(ready.has_value());
  CHECK(ready->status == 503);
  CHECK(ready->has_header("Connection: close"));
}

TEST_CASE("a target in absolute form is routed by its path (RFC 9112, 3.2.2)") {
  fixture f;
  connection c{f.port};
  for (const std::string& target :
       {"http://127.0.0.1:" + std::to_string(f.port) + "/v2/health/ready",
        std::string{"HTTP://oip.example/v2/health/ready?verbose=1"},
        std::string{"https://oip.example:443/v2/health/ready"}}) {
    CAPTURE(target);
    REQUIRE(c.send("GET " + target + " HTTP/1.1\r\nHost: x\r\n\r\n"));
    const std::optional<reply> r = c.read_reply();
    REQUIRE(r.has_value());
    CHECK(r->status == 200);
  }
  REQUIRE(c.send("GET http://oip.example HTTP/1.1\r\nHost: x\r\n\r\n"));  // the root: no route
  const std::optional<reply> root = c.read_reply();
  REQUIRE(root.has_value());
  CHECK(root->status == 404);
  REQUIRE(c.send(post("http://oip.example/v2/models/simple/infer", simple_body)));
  const std::optional<reply> inferred = c.read_reply();
  REQUIRE(inferred.has_value());
  CHECK(inferred->status == 200);
}

TEST_CASE("framing over the wire: raw binary requests and bad header lengths") {
  fixture f;
  oip::model_config config;
  config.name = "echo_fp32";
  config.inputs = {{"x", oip::datatype::fp32, {-1}, {}}};
  config.outputs = {{"x", oip::datatype::fp32, {-1}, {}}};
  REQUIRE(f.repository
              .add(oip::make_model(
                  config,
                  [](const oip::inference_request& r) -> oip::result<oip::model_output> {
                    return oip::model_output{{r.inputs[0]}, {}};
                  }))
              .ok());
  connection c{f.port};
  const float values[3] = {1.5F, -2.0F, 3.25F};
  const std::string raw(reinterpret_cast<const char*>(values), sizeof values);
  c.send(post("/v2/models/echo_fp32/infer", raw, "Inference-Header-Content-Length: 0\r\n"));
  const std::optional<reply> echoed = c.read_reply();
  REQUIRE(echoed.has_value());
  CHECK(echoed->status == 200);
  CHECK(echoed->has_header("Content-Type: application/octet-stream"));
  CHECK(echoed->body.substr(echoed->body.size() - raw.size()) == raw);

  for (const std::string length : {"999", "-1", "abc"}) {
    c.send(post("/v2/models/simple/infer", simple_body,
                "Inference-Header-Content-Length: " + length + "\r\n"));
    const std::optional<reply> r = c.read_reply();
    REQUIRE(r.has_value());
    CHECK_MESSAGE(r->status == 400, length);
  }
  // The connection survives client errors that leave the stream in step.
  c.send(get("/v2/health/live"));
  const std::optional<reply> after = c.read_reply();
  REQUIRE(after.has_value());
  CHECK(after->status == 200);
}

namespace {
// A server's options for loopback, on a port of its own, with the other settings as shipped.
oip::http::server_options on_loopback() {
  oip::http::server_options options;
  options.address = "127.0.0.1";
  options.port = 0;
  return options;
}
}  // namespace

TEST_CASE("connections above the limit are refused; the server keeps serving") {
  oip::model_repository repository;
  oip::executor workers{{1, 8}};
  oip::http_handler handler{repository, workers};
  oip::http::server_options options = on_loopback();
  options.max_connections = 1;
  oip::http::server server{handler, options};
  oip::result<std::uint16_t> port = server.start();
  REQUIRE(port.ok());
  connection first{*port};
  first.send(get("/v2/health/live"));
  REQUIRE(first.read_reply().has_value());
  connection second{*port};
  const std::optional<reply> refused = second.read_reply();
  REQUIRE(refused.has_value());
  CHECK(refused->status == 503);
  CHECK(refused->body == R"({"error":"the server is at its limit of 1 open connections"})");
  CHECK(second.closed_by_server());
  first.send(get("/v2/health/live"));
  const std::optional<reply> again = first.read_reply();
  REQUIRE(again.has_value());
  CHECK(again->status == 200);
}

TEST_CASE("out of descriptors, the server waits to accept instead of spinning, then serves") {
  oip::model_repository repository;
  oip::executor workers{{1, 8}};
  oip::http_handler handler{repository, workers};
  oip::http::server_options options = on_loopback();
  options.io_threads = 1;
  oip::http::server server{handler, options};
  oip::result<std::uint16_t> port = server.start();
  REQUIRE(port.ok());

  // The clients' sockets are made first; then the process may open four descriptors more, which
  // the server's accepts take, and the other connections wait in the kernel's backlog.
  std::vector<int> sockets;
  for (int i = 0; i < 12; ++i) {
    sockets.push_back(::socket(AF_INET, SOCK_STREAM, 0));
    REQUIRE(sockets.back() >= 0);
  }
  rlimit before{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &before) == 0);
  // The limit is on descriptor numbers: it is set past the fourth number not in use.
  std::set<int> in_use;
  for (const auto& entry : std::filesystem::directory_iterator{"/proc/self/fd"}) {
    in_use.insert(std::stoi(entry.path().filename().string()));
  }
  int free_found = 0;
  int fourth_free = 0;
  for (; free_found < 4; ++fourth_free) {
    if (!in_use.contains(fourth_free) && ++free_found == 4) break;
  }
  rlimit lowered = before;
  lowered.rlim_cur = static_cast<rlim_t>(fourth_free) + 1;
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &lowered) == 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(*port);
  ::inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  for (const int fd : sockets) {
    CHECK(::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0);
  }
  const auto cpu_seconds = [] {
    rusage usage{};
    ::getrusage(RUSAGE_SELF, &usage);
    return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
           static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
  };
  std::this_thread::sleep_for(100ms);
  const double cpu_before = cpu_seconds();
  std::this_thread::sleep_for(500ms);
  const double spent = cpu_seconds() - cpu_before;
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &before) == 0);
  CHECK(spent < 0.15);  // an accept loop that retried at once would take the whole 0.5 s

  // With descriptors again, every connection is taken in and answered.
  const std::string request = get("/v2/health/live");
  for (const int fd : sockets) {
    timeval timeout{10, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    CHECK(::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(request.size()));
    char head[12] = {};
    CHECK(::recv(fd, head, sizeof head, MSG_WAITALL) == static_cast<ssize_t>(sizeof head));
    CHECK(std::string_view{head, sizeof head} == "HTTP/1.1 200");
    ::close(fd);
  }
}

TEST_CASE("a streamed reply waits for its model past the body timeout; a client gone cancels it") {
  fixture f;  // a 300 ms body timeout, which bounds each write, not the model's pauses
  oip::model_config config;
  config.name = "pausing";
  config.decoupled = true;
  config.inputs = {{"N", oip::datatype::int32, {1}, {}}};
  config.outputs = {{"I", oip::datatype::int32, {1}, {}}};
  std::promise<oip::status> last_send;
  REQUIRE(f.repository
              .add(oip::make_model(
                  config,
                  [&last_send](oip::inference_call& call) -> oip::result<oip::model_output> {
                    const std::int32_t n = call.request().inputs.at(0).at<std::int32_t>(0);
                    const auto part = [](std::int32_t i) {
                      return oip::model_output{{*oip::tensor::from_values<std::int32_t>(
                                                   "I", {1}, std::span<const std::int32_t>(&i, 1))},
                                               {}};
                    };
                    for (std::int32_t i = 0; i + 1 < n; ++i) {
                      std::this_thread::sleep_for(700ms);
                      if (oip::status sent = call.send(part(i)); !sent.ok()) {
                        last_send.set_value(sent);
                        return sent;
                      }
                    }
                    std::this_thread::sleep_for(700ms);
                    last_send.set_value(oip::status{});
                    return part(n - 1);
                  }))
              .ok());
  const auto read_stream = [](connection& c) {
    std::string all;
    while (all.find("\r\n0\r\n\r\n") == std::string::npos) {
      std::optional<std::string> more = c.read_some();
      if (!more) break;
      all += *more;
    }
    return all;
  };
  {
    connection c{f.port};
    c.send(post("/v2/models/pausing/generate_stream", R"({"N":3})"));
    const std::string stream = read_stream(c);
    CHECK(stream.find("HTTP/1.1 200") == 0);
    for (const char* event : {R"("I":0)", R"("I":1)", R"("I":2)"}) {
      CHECK(stream.find(event) != std::string::npos);
    }
    CHECK(stream.find("\r\n0\r\n\r\n") != std::string::npos);
  }
  CHECK(last_send.get_future().get().code() == oip::errc::ok);

  // A client that goes away between two parts: the model's next send fails.
  last_send = {};
  {
    connection c{f.port};
    c.send(post("/v2/models/pausing/generate_stream", R"({"N":100})"));
    std::optional<std::string> first = c.read_some();
    REQUIRE(first.has_value());
    c.close();
  }
  auto refused = last_send.get_future();
  REQUIRE(refused.wait_for(5s) == std::future_status::ready);
  CHECK(refused.get().code() == oip::errc::unavailable);
}

TEST_CASE("past the grace period, stop cancels the requests still running") {
  fixture f;
  connection busy{f.port};
  busy.send(post("/v2/models/waiter/infer",
                 R"({"inputs":[{"name":"IN","shape":[1],"datatype":"INT32","data":[1]}]})"));
  REQUIRE(oip::testing::wait_until([&] { return f.waiter->started.load() != 0; }));
  const auto start = std::chrono::steady_clock::now();
  f.server.stop(100ms);  // the waiter model runs until it is cancelled
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  CHECK(f.waiter->saw_cancel.load());
  CHECK(f.server.connections() == 0);
  CHECK(busy.closed_by_server());
}

namespace {

// The fixture's settings, every request's timestamps traced to `file`.
oip::server_options tracing_every_request(const oip::testing::temporary_trace_file& file) {
  oip::server_options options = fixture::options();
  options.trace.file = file.path;
  options.trace.level = oip::trace_level::timestamps;
  options.trace.rate = 1;
  return options;
}

// The one trace in `file` has every timestamp of a request served over HTTP, in Triton's names.
// It is written once the reply has gone, which the client may see first.
void check_traced_over_http(const oip::testing::temporary_trace_file& file) {
  std::vector<std::string> names;
  for (int i = 0; i < 200 && names.size() < 10; ++i) {
    names = oip::testing::timestamp_names(file.read(file.path));
    if (names.size() < 10) std::this_thread::sleep_for(10ms);
  }
  CHECK(names == std::vector<std::string>{"HTTP_RECV_START", "HTTP_RECV_END", "REQUEST_START",
                                          "QUEUE_START", "COMPUTE_START", "COMPUTE_END",
                                          "REQUEST_END", "INFER_RESPONSE_COMPLETE",
                                          "HTTP_SEND_START", "HTTP_SEND_END"});
}

}  // namespace

TEST_CASE("a traced request carries the server's receive and send timestamps, in Triton's names") {
  oip::testing::temporary_trace_file file;
  const oip::server_options options = tracing_every_request(file);
  oip::model_repository repository;
  REQUIRE(repository.add(oip::testing::make_simple()).ok());
  oip::executor workers{{2, 64}};
  oip::http_handler handler{repository, workers, options};
  oip::http::server server{handler, fixture::http_options()};
  const oip::result<std::uint16_t> port = server.start();
  REQUIRE(port);
  connection c{*port};
  c.send(post("/v2/models/simple/infer", simple_body));
  const std::optional<reply> r = c.read_reply();
  REQUIRE(r.has_value());
  CHECK(r->status == 200);
  check_traced_over_http(file);
}

TEST_CASE("a traced streamed reply carries its send timestamps, stamped once the request ended") {
  // The stream's head goes out at the first response, while the model still runs: the trace is
  // handed to the transport only when the request ends.
  oip::testing::temporary_trace_file file;
  const oip::server_options options = tracing_every_request(file);
  oip::model_repository repository;
  oip::model_config config;
  config.name = "two_parts";
  config.decoupled = true;
  config.inputs = {{"N", oip::datatype::int32, {1}, {}}};
  config.outputs = {{"I", oip::datatype::int32, {1}, {}}};
  const auto part = [](std::int32_t i) {
    return oip::model_output{
        {*oip::tensor::from_values<std::int32_t>("I", {1}, std::span<const std::int32_t>(&i, 1))},
        {}};
  };
  REQUIRE(repository
              .add(oip::make_model(
                  config,
                  [&part](oip::inference_call& call) -> oip::result<oip::model_output> {
                    if (oip::status sent = call.send(part(0)); !sent.ok()) {
                      return sent;
                    }
                    std::this_thread::sleep_for(100ms);
                    return part(1);
                  }))
              .ok());
  oip::executor workers{{2, 64}};
  oip::http_handler handler{repository, workers, options};
  oip::http::server server{handler, fixture::http_options()};
  const oip::result<std::uint16_t> port = server.start();
  REQUIRE(port);
  connection c{*port};
  c.send(post("/v2/models/two_parts/generate_stream", R"({"N":2})"));
  std::string stream;
  while (stream.find("\r\n0\r\n\r\n") == std::string::npos) {
    std::optional<std::string> more = c.read_some();
    if (!more) break;
    stream += *more;
  }
  CHECK(stream.find("HTTP/1.1 200") == 0);
  check_traced_over_http(file);
}

TEST_CASE("the memory budget: a body that would pass it is a 503 before it is read, a 413 alone") {
  constexpr std::size_t budget = std::size_t{256} << 10U;
  fixture f{std::size_t{1} << 20U, budget};
  const oip::memory_budget& memory = f.handler.service().memory();
  CHECK(memory.capacity() == budget);

  // A request of 200 KiB (JSON padded with spaces) that the waiter holds: its body counts until
  // its reply is written.
  const std::string held_body =
      R"({"inputs":[{"name":"IN","shape":[1],"datatype":"INT32","data":[1]}]})" +
      std::string(std::size_t{200} << 10U, ' ');
  connection holder{f.port};
  REQUIRE(holder.send(post("/v2/models/waiter/infer", held_body)));
  REQUIRE(oip::testing::wait_until([&] { return f.waiter->started.load() == 1; }));
  CHECK(memory.held() >= held_body.size());

  // 100 KiB more would pass the budget: refused from its Content-Length, its body never sent.
  connection refused{f.port};
  REQUIRE(refused.send(
      "POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 102400\r\n\r\n"));
  const std::optional<reply> over = refused.read_reply();
  REQUIRE(over.has_value());
  CHECK(over->status == 503);
  CHECK(over->body.find("limit of 262144 bytes") != std::string::npos);
  CHECK(refused.closed_by_server());

  // A body above the whole budget could never pass it: a 413, not a 503 that invites retries.
  connection never{f.port};
  REQUIRE(never.send("POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                     std::to_string(budget) + "\r\n\r\n"));
  const std::optional<reply> too_large = never.read_reply();
  REQUIRE(too_large.has_value());
  CHECK(too_large->status == 413);
  CHECK(too_large->body.find("262144 bytes that the server holds in flight at most") !=
        std::string::npos);

  // A chunked body is refused as it grows past the budget (a chunk of 100 KiB).
  connection chunked{f.port};
  REQUIRE(chunked.send(
      "POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
      "19000\r\n" +
      std::string(std::size_t{100} << 10U, ' ')));
  const std::optional<reply> grown = chunked.read_reply();
  REQUIRE(grown.has_value());
  CHECK(grown->status == 503);
  CHECK(grown->body.find("limit of 262144 bytes; try again later") != std::string::npos);

  // A gzip body of 1 KB that would decompress to 100 KiB: its decompressed bytes count too.
  connection compressed{f.port};
  REQUIRE(compressed.send(post("/v2/models/simple/infer",
                               oip::testing::gzip(simple_body + std::string(100 << 10, ' ')),
                               "Content-Encoding: gzip\r\n")));
  const std::optional<reply> inflated = compressed.read_reply();
  REQUIRE(inflated.has_value());
  CHECK(inflated->status == 503);
  CHECK(inflated->body.find("limit of 262144 bytes") != std::string::npos);

  // Small requests still fit beside the held one.
  connection small{f.port};
  REQUIRE(small.send(post("/v2/models/simple/infer", simple_body)));
  const std::optional<reply> fits = small.read_reply();
  REQUIRE(fits.has_value());
  CHECK(fits->status == 200);

  // The holder goes away: its request is cancelled, answered, and its bytes given back.
  holder.close();
  CHECK(oip::testing::wait_until([&] { return memory.held() == 0; }));
  const std::string body = simple_body + std::string(std::size_t{100} << 10U, ' ');
  connection after{f.port};
  REQUIRE(after.send(post("/v2/models/simple/infer", body)));
  const std::optional<reply> passes = after.read_reply();
  REQUIRE(passes.has_value());
  CHECK(passes->status == 200);
  CHECK(oip::testing::wait_until([&] { return memory.held() == 0; }));

  // With nothing else held, bodies that grow past the whole budget are 413s too: chunked, and
  // decompressed.
  connection chunked_past{f.port};
  // One byte past the budget, and no more: the server has read all that was sent when it refuses.
  static_assert(budget == 0x40000);
  REQUIRE(chunked_past.send(
      "POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
      "40001\r\n" +
      std::string(budget + 1, ' ')));
  const std::optional<reply> chunked_too_large = chunked_past.read_reply();
  REQUIRE(chunked_too_large.has_value());
  CHECK(chunked_too_large->status == 413);
  CHECK(chunked_too_large->body.find("above the 262144 bytes") != std::string::npos);
  // Its bytes go back once its reply is written, maybe on the other I/O thread.
  REQUIRE(oip::testing::wait_until([&] { return memory.held() == 0; }));
  // Whitespace in no order compresses to about a quarter, so the compressed body the transport
  // holds (about 75 KiB) counts towards the whole budget too.
  std::string spaces(std::size_t{300} << 10U, ' ');
  std::minstd_rand random{7};
  for (char& c : spaces) c = " \t\r\n"[random() % 4];
  connection inflating{f.port};
  REQUIRE(inflating.send(post("/v2/models/simple/infer", oip::testing::gzip(simple_body + spaces),
                              "Content-Encoding: gzip\r\n")));
  const std::optional<reply> inflated_too_large = inflating.read_reply();
  REQUIRE(inflated_too_large.has_value());
  CHECK(inflated_too_large->status == 413);
  CHECK(inflated_too_large->body.find("262144 bytes that the server holds in flight at most") !=
        std::string::npos);
  CHECK(oip::testing::wait_until([&] { return memory.held() == 0; }));

  // A chunked body of 150 KiB beside 40 KiB held elsewhere fits, though the room its buffer
  // would double to (256 KiB) does not: the buffer grows by what fits.
  oip::result<oip::memory_budget::lease> elsewhere =
      f.handler.service().memory().reserve(40U << 10U);
  REQUIRE(elsewhere);
  const std::string chunk = simple_body + std::string(std::size_t{150} << 10U, ' ');
  std::array<char, 16> size_hex{};
  const auto hex_end =
      std::to_chars(size_hex.data(), size_hex.data() + size_hex.size(), chunk.size(), 16).ptr;
  connection fitting{f.port};
  REQUIRE(fitting.send(
      "POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" +
      std::string(size_hex.data(), hex_end) + "\r\n" + chunk + "\r\n0\r\n\r\n"));
  const std::optional<reply> fitted = fitting.read_reply();
  REQUIRE(fitted.has_value());
  CHECK(fitted->status == 200);
  elsewhere->release();
  CHECK(oip::testing::wait_until([&] { return memory.held() == 0; }));
}

TEST_CASE("the memory budget: a reply counts until it is written") {
  // A raw binary request of 12 MiB echoed back as 12 MiB, to a client with a receive buffer of
  // 4 KiB: more than the server's send buffer holds (4 MiB at most by default), so the reply
  // stays unwritten while its client does not read.
  constexpr std::size_t tensor_bytes = std::size_t{12} << 20U;
  // The reply waits for its reader while another client is refused: 30 s to write it.
  fixture f{std::size_t{16} << 20U, std::size_t{30} << 20U, 30s};
  REQUIRE(f.repository.add(oip::testing::make_scores()).ok());
  const oip::memory_budget& memory = f.handler.service().memory();
  connection reader{f.port, 4096};
  REQUIRE(reader.send(post("/v2/models/scores/infer", std::string(tensor_bytes, '\0'),
                           "Inference-Header-Content-Length: 0\r\n")));
  // The request's bytes and its reply's: 24 MiB of 30 while the reply waits for its reader.
  REQUIRE(oip::testing::wait_until([&] { return memory.held() >= 2 * tensor_bytes; }));
  connection refused{f.port};
  REQUIRE(refused.send(
      post("/v2/models/simple/infer", simple_body + std::string(std::size_t{7} << 20U, ' '))));
  const std::optional<reply> over = refused.read_reply();
  REQUIRE(over.has_value());
  CHECK(over->status == 503);

  const std::optional<reply> echoed = reader.read_reply();
  REQUIRE(echoed.has_value());
  CHECK(echoed->status == 200);
  CHECK(echoed->body.size() >= tensor_bytes);
  CHECK(oip::testing::wait_until([&] { return memory.held() == 0; }));
  connection after{f.port};
  REQUIRE(after.send(
      post("/v2/models/simple/infer", simple_body + std::string(std::size_t{7} << 20U, ' '))));
  const std::optional<reply> passes = after.read_reply();
  REQUIRE(passes.has_value());
  CHECK(passes->status == 200);
}

TEST_CASE("a body in a million one-byte chunks, and chunks with long extensions, are read whole") {
  // CVE-2025-23310/23311: a server that recursed or allocated per chunk ran out of stack or
  // memory. Each chunk here costs a few bytes of framing, read as it comes. The body timeout
  // bounds each read, which takes a thousand chunks or more here: 10 s for slow builds (TSan).
  fixture f{std::size_t{1} << 20U, 0, 10s};
  const std::string body = simple_body + std::string(1'000'000 - simple_body.size(), ' ');
  std::string request =
      "POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  request.reserve(request.size() + body.size() * 6 + 8);
  for (const char c : body) {
    request += "1\r\n";
    request += c;
    request += "\r\n";
  }
  request += "0\r\n\r\n";
  connection c{f.port};
  REQUIRE(c.send(request));
  const std::optional<reply> r = c.read_reply();
  REQUIRE(r.has_value());
  CHECK(r->status == 200);

  // 2,000 chunks, each with 1,000 bytes of extensions: 2 MB of framing for a small body.
  std::string extended =
      "POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  const std::string extension = ";ext=" + std::string(995, 'e');
  const std::size_t step = simple_body.size() / 2000 + 1;
  std::size_t chunks = 0;
  for (std::size_t at = 0; at < simple_body.size(); at += step, ++chunks) {
    const std::string piece = simple_body.substr(at, step);
    char size[16];
    std::snprintf(size, sizeof size, "%zx", piece.size());
    extended += std::string{size} + extension + "\r\n" + piece + "\r\n";
  }
  for (; chunks < 2000; ++chunks) extended += "1" + extension + "\r\n \r\n";
  extended += "0\r\n\r\n";
  REQUIRE(c.send(extended));
  const std::optional<reply> e = c.read_reply();
  REQUIRE(e.has_value());
  CHECK(e->status == 200);
}
