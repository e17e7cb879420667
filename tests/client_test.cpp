// oip's network clients against oip-serve, run as its own process: every call of the clients over
// each transport, with the same test body for both.

#include "oip_serve_process.hpp"
#include "shm_object.hpp"

#include <oip/http/client.hpp>
#ifdef OIP_TEST_GRPC_CLIENT
#include <oip/grpc/client.hpp>
#endif

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace {

using oip::testing::oip_serve_process;

struct http_transport {
  using client = oip::http::client;
  static constexpr oip::received_over via = oip::received_over::http;
  static constexpr int not_found = 404;
  static std::string address(const oip_serve_process& server) { return server.http_address(); }
};

#ifdef OIP_TEST_GRPC_CLIENT
struct grpc_transport {
  using client = oip::grpc::client;
  static constexpr oip::received_over via = oip::received_over::grpc;
  static constexpr int not_found = 5;  // NOT_FOUND
  static std::string address(const oip_serve_process& server) { return server.grpc_address(); }
};
#define OIP_CLIENT_TRANSPORTS http_transport, grpc_transport
#else
#define OIP_CLIENT_TRANSPORTS http_transport
#endif

// One server for the tests that need no special settings.
oip_serve_process& shared_server() {
  static oip_serve_process server{{"--models",
                                   "simple,sequence_accumulator,identity_fp32,simple_string,"
                                   "identity_bytes,repeat_int32",
                                   "--allow-shared-memory", "true"}};
  return server;
}

oip::inference_request simple_request(std::int32_t base = 0) {
  std::vector<std::int32_t> a(16);
  std::vector<std::int32_t> b(16, 1);
  for (std::int32_t i = 0; i < 16; ++i) a[static_cast<std::size_t>(i)] = base + i;
  oip::inference_request request;
  request.inputs.push_back(*oip::tensor::from_values<std::int32_t>("INPUT0", {1, 16}, a));
  request.inputs.push_back(*oip::tensor::from_values<std::int32_t>("INPUT1", {1, 16}, b));
  return request;
}

void check_simple(const oip::result<oip::inference_response>& response, std::int32_t base = 0) {
  REQUIRE_MESSAGE(response.ok(), response.to_status().message());
  REQUIRE(response->outputs.size() == 2);
  const oip::tensor* sum = nullptr;
  const oip::tensor* difference = nullptr;
  for (const oip::tensor& t : response->outputs) {
    if (t.name() == "OUTPUT0") sum = &t;
    if (t.name() == "OUTPUT1") difference = &t;
  }
  REQUIRE(sum != nullptr);
  REQUIRE(difference != nullptr);
  CHECK(sum->shape() == oip::shape_type{1, 16});
  for (std::size_t i = 0; i < 16; ++i) {
    CHECK(sum->at<std::int32_t>(i) == base + static_cast<std::int32_t>(i) + 1);
    CHECK(difference->at<std::int32_t>(i) == base + static_cast<std::int32_t>(i) - 1);
  }
}

}  // namespace

TEST_CASE_TEMPLATE("a client's inference, health and metadata calls", T, OIP_CLIENT_TRANSPORTS) {
  typename T::client client{T::address(shared_server())};
  CHECK(client.live());
  CHECK(client.ready());
  CHECK(client.ready("simple"));
  CHECK_FALSE(client.ready("no_such_model"));

  check_simple(client.infer("simple", simple_request()));
  check_simple(client.infer("simple", simple_request(7), oip::request_format{}), 7);
  check_simple(client.infer("simple", simple_request(9), oip::binary_format, 1), 9);

  const oip::result<oip::server_metadata> server = client.metadata();
  REQUIRE(server.ok());
  CHECK(server->name == "oip");
  CHECK(std::find(server->extensions.begin(), server->extensions.end(), "system_shared_memory") !=
        server->extensions.end());
  const oip::result<oip::model_metadata> model = client.metadata("simple");
  REQUIRE(model.ok());
  CHECK(model->name == "simple");
  CHECK(model->inputs.size() == 2);

  const oip::result<oip::inference_response> unknown =
      client.infer("no_such_model", simple_request());
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.error().code() == oip::errc::not_found);
  CHECK(unknown.error().received() == T::via);
  CHECK(unknown.error().received_code() == T::not_found);
  CHECK(unknown.error().message().find("no_such_model") != std::string::npos);

  oip::inference_request wrong = simple_request();
  wrong.inputs.pop_back();
  const oip::result<oip::inference_response> refused = client.infer("simple", wrong);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code() == oip::errc::invalid_argument);
}

TEST_CASE_TEMPLATE("strings, classification and sequences through a client", T,
                   OIP_CLIENT_TRANSPORTS) {
  typename T::client client{T::address(shared_server())};

  oip::inference_request strings;
  strings.inputs.push_back(*oip::tensor::from_strings(
      "INPUT0", {1, 3}, std::vector<std::string_view>{"a", "", "ünïcode"}));
  const oip::result<oip::inference_response> echoed = client.infer("identity_bytes", strings);
  REQUIRE_MESSAGE(echoed.ok(), echoed.to_status().message());
  std::vector<std::string> got;
  for (std::string_view s : echoed->outputs.at(0).strings()) got.emplace_back(s);
  CHECK(got == std::vector<std::string>{"a", "", "ünïcode"});

  oip::inference_request top = simple_request();
  oip::requested_output asked{"OUTPUT0", {}};
  asked.parameters.set("classification", std::int64_t{2});
  top.outputs.push_back(asked);
  const oip::result<oip::inference_response> classes = client.infer("simple", top);
  REQUIRE_MESSAGE(classes.ok(), classes.to_status().message());
  got.clear();
  for (std::string_view s : classes->outputs.at(0).strings()) got.emplace_back(s);
  CHECK(got == std::vector<std::string>{"16:15", "15:14"});

  // sequence_accumulator answers the sequence's running sum.
  std::int32_t total = 0;
  for (std::int32_t step = 0; step < 4; ++step) {
    const std::int32_t value = step + 1;
    oip::inference_request r;
    r.parameters.set("sequence_id", std::int64_t{4242});
    if (step == 0) r.parameters.set("sequence_start", true);
    if (step == 3) r.parameters.set("sequence_end", true);
    r.inputs.push_back(*oip::tensor::from_values<std::int32_t>(
        "INPUT", {1}, std::span<const std::int32_t>(&value, 1)));
    const oip::result<oip::inference_response> out = client.infer("sequence_accumulator", r);
    REQUIRE_MESSAGE(out.ok(), out.to_status().message());
    total += value;
    CHECK(out->outputs.at(0).template at<std::int32_t>(0) == total);
  }
}

TEST_CASE_TEMPLATE("many calls in flight from many threads share a client", T,
                   OIP_CLIENT_TRANSPORTS) {
  oip::client_options options;
  options.max_connections = 3;
  typename T::client client{T::address(shared_server()), options};

  std::vector<std::future<oip::result<oip::inference_response>>> pending;
  for (std::int32_t i = 0; i < 64; ++i)
    pending.push_back(client.async_infer("simple", simple_request(i)));
  for (std::int32_t i = 0; i < 64; ++i) check_simple(pending[static_cast<std::size_t>(i)].get(), i);

  std::atomic<int> answered{0};
  std::atomic<int> wrong{0};
  std::promise<void> all_done;
  for (std::int32_t i = 0; i < 32; ++i) {
    client.async_infer("simple", simple_request(i), [&, i](oip::result<oip::inference_response> r) {
      if (!r.ok() || r->outputs.at(0).at<std::int32_t>(0) != i + 1) ++wrong;
      if (++answered == 32) all_done.set_value();
    });
  }
  all_done.get_future().get();
  CHECK(wrong.load() == 0);

  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (std::int32_t i = 0; i < 50; ++i) {
        const oip::result<oip::inference_response> r =
            client.infer("simple", simple_request(t * 100 + i));
        if (!r.ok() || r->outputs.at(1).at<std::int32_t>(0) != t * 100 + i - 1) ++failures;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  CHECK(failures.load() == 0);
}

TEST_CASE_TEMPLATE("configuration, statistics, logging and trace settings through a client", T,
                   OIP_CLIENT_TRANSPORTS) {
  typename T::client client{T::address(shared_server())};
  check_simple(client.infer("simple", simple_request()));

  const oip::result<std::string> config = client.model_config("simple");
  REQUIRE_MESSAGE(config.ok(), config.to_status().message());
  CHECK(config->find("\"simple\"") != std::string::npos);
  CHECK(config->find("INPUT0") != std::string::npos);

  const oip::result<std::string> stats = client.statistics("simple");
  REQUIRE_MESSAGE(stats.ok(), stats.to_status().message());
  CHECK(stats->find("inference_count") != std::string::npos);
  const oip::result<std::string> all_stats = client.statistics();
  REQUIRE(all_stats.ok());
  CHECK(all_stats->find("sequence_accumulator") != std::string::npos);

  const oip::result<oip::log_settings> logging = client.log_settings();
  REQUIRE_MESSAGE(logging.ok(), logging.to_status().message());
  oip::log_settings_update change;
  change.verbose_level = 1;
  const oip::result<oip::log_settings> changed = client.update_log_settings(change);
  REQUIRE_MESSAGE(changed.ok(), changed.to_status().message());
  CHECK(changed->verbose_level == 1);
  change.verbose_level = logging->verbose_level;
  CHECK(client.update_log_settings(change).ok());

  const oip::result<oip::trace_settings_change> trace = client.trace_settings();
  REQUIRE_MESSAGE(trace.ok(), trace.to_status().message());
  oip::trace_settings_change rate;
  rate.settings.push_back({"trace_rate", std::vector<std::string>{"7"}});
  const oip::result<oip::trace_settings_change> after =
      client.update_trace_settings(rate, "simple");
  REQUIRE_MESSAGE(after.ok(), after.to_status().message());
  bool seen = false;
  for (const auto& [name, values] : after->settings) {
    if (name == "trace_rate") {
      seen = true;
      CHECK((values && values->size() == 1 && values->front() == "7"));
    }
  }
  CHECK(seen);
}

TEST_CASE_TEMPLATE("load and unload through a client, in explicit model control", T,
                   OIP_CLIENT_TRANSPORTS) {
  oip_serve_process server{{"--models", "simple,simple_string", "--model-control-mode", "explicit",
                            "--load-model", "simple"}};
  typename T::client client{T::address(server)};
  CHECK(client.ready("simple"));
  CHECK_FALSE(client.ready("simple_string"));

  const oip::result<std::vector<oip::model_index_entry>> index = client.repository_index();
  REQUIRE_MESSAGE(index.ok(), index.to_status().message());
  CHECK(index->size() == 2);

  REQUIRE(client.load("simple_string").ok());
  CHECK(client.ready("simple_string"));
  const oip::result<std::vector<oip::model_index_entry>> ready = client.repository_index(true);
  REQUIRE(ready.ok());
  CHECK(ready->size() == 2);

  REQUIRE(client.unload("simple").ok());
  CHECK_FALSE(client.ready("simple"));
  const oip::result<oip::inference_response> gone = client.infer("simple", simple_request());
  CHECK_FALSE(gone.ok());

  const oip::status unknown = client.load("no_such_model");
  CHECK_FALSE(unknown.ok());
  CHECK(unknown.received() == T::via);
}

TEST_CASE_TEMPLATE("inputs and outputs in a shared-memory region registered through a client", T,
                   OIP_CLIENT_TRANSPORTS) {
  typename T::client client{T::address(shared_server())};
  oip::testing::shm_object region{
      std::string{"client_"} + (T::via == oip::received_over::http ? "h" : "g"), 256};

  const oip::status registered =
      client.register_system_shared_memory("client_region", region.key(), 0, 256);
  REQUIRE_MESSAGE(registered.ok(), registered.message());
  const oip::result<std::vector<oip::shared_memory_region>> listed =
      client.system_shared_memory_status("client_region");
  REQUIRE_MESSAGE(listed.ok(), listed.to_status().message());
  REQUIRE(listed->size() == 1);
  CHECK(listed->front().byte_size == 256);

  // OUTPUT0 goes to bytes [64, 128) of the region; OUTPUT1 comes in the reply.
  oip::inference_request request = simple_request(3);
  oip::requested_output placed{"OUTPUT0", {}};
  placed.parameters.set("shared_memory_region", std::string{"client_region"});
  placed.parameters.set("shared_memory_offset", std::int64_t{64});
  placed.parameters.set("shared_memory_byte_size", std::int64_t{64});
  request.outputs.push_back(placed);
  request.outputs.push_back({"OUTPUT1", {}});
  const oip::result<oip::inference_response> response = client.infer("simple", request);
  REQUIRE_MESSAGE(response.ok(), response.to_status().message());
  for (const oip::tensor& t : response->outputs) {
    if (t.name() == "OUTPUT0") CHECK(t.at<std::int32_t>(5) == 3 + 5 + 1);
    if (t.name() == "OUTPUT1") CHECK(t.at<std::int32_t>(5) == 3 + 5 - 1);
  }
  CHECK(region.get<std::int32_t>(64 + 5 * 4, 1).at(0) == 3 + 5 + 1);

  REQUIRE(client.unregister_system_shared_memory("client_region").ok());
  const oip::result<std::vector<oip::shared_memory_region>> none =
      client.system_shared_memory_status();
  REQUIRE(none.ok());
  CHECK(none->empty());
  // A region that this process cannot map is refused before the server is asked.
  CHECK_FALSE(client.register_system_shared_memory("missing", "/oip_no_such_object", 0, 16).ok());
}

TEST_CASE_TEMPLATE("compression both ways, and headers for a restricted API", T,
                   OIP_CLIENT_TRANSPORTS) {
  oip_serve_process server{{"--models", "simple", "--http-restricted-api",
                            "inference:oip-key=secret", "--grpc-restricted-protocol",
                            "inference:oip-key=secret"}};
  {
    typename T::client client{T::address(server)};
    const oip::result<oip::inference_response> refused = client.infer("simple", simple_request());
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().code() == oip::errc::forbidden);
    CHECK(client.ready());  // health is not restricted
  }
  oip::client_options options;
  const bool http = T::via == oip::received_over::http;
  options.headers.push_back({http ? "oip-key" : "triton-grpc-protocol-oip-key", "secret"});
  options.request_compression = oip::wire_compression::gzip;
  options.response_compression = oip::wire_compression::gzip;
  typename T::client client{T::address(server), options};
  check_simple(client.infer("simple", simple_request(11)), 11);
  check_simple(client.infer("simple", simple_request(12), oip::request_format{}), 12);
  options.request_compression = oip::wire_compression::deflate;
  options.response_compression = oip::wire_compression::deflate;
  typename T::client deflating{T::address(server), options};
  check_simple(deflating.infer("simple", simple_request(13)), 13);
}

TEST_CASE_TEMPLATE("a server that is not there is an error, not a wait", T, OIP_CLIENT_TRANSPORTS) {
  std::uint16_t closed_port = 0;
  {
    oip_serve_process gone{{"--models", "simple"}};
    closed_port = T::via == oip::received_over::http ? gone.http_port : gone.grpc_port;
  }
  oip::client_options options;
  options.timeout = std::chrono::milliseconds{2000};
  typename T::client client{"127.0.0.1:" + std::to_string(closed_port), options};
  const auto started = std::chrono::steady_clock::now();
  const oip::result<oip::inference_response> r = client.infer("simple", simple_request());
  REQUIRE_FALSE(r.ok());
  CHECK((r.error().code() == oip::errc::unavailable ||
         r.error().code() == oip::errc::deadline_exceeded));
  CHECK(r.error().received() ==
        (T::via == oip::received_over::grpc ? T::via : oip::received_over::none));
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds{10});
  CHECK_FALSE(client.live());
}

#ifdef OIP_TEST_GRPC_CLIENT
TEST_CASE("a decoupled model's responses, one by one, over a gRPC stream") {
  oip::grpc::client client{shared_server().grpc_address()};
  oip::inference_request request;
  const std::vector<std::int32_t> values{4, 5, 6};
  const std::vector<std::uint32_t> delays{20, 20, 20};
  const std::uint32_t wait = 0;
  request.inputs.push_back(*oip::tensor::from_values<std::int32_t>("IN", {3}, values));
  request.inputs.push_back(*oip::tensor::from_values<std::uint32_t>("DELAY", {3}, delays));
  request.inputs.push_back(*oip::tensor::from_values<std::uint32_t>(
      "WAIT", {1}, std::span<const std::uint32_t>(&wait, 1)));
  std::vector<std::int32_t> got;
  const oip::status end =
      client.infer_stream("repeat_int32", request, [&](oip::inference_response response) {
        for (const oip::tensor& t : response.outputs) {
          if (t.name() == "OUT") {
            got.push_back(t.at<std::int32_t>(0));
          }
        }
      });
  REQUIRE_MESSAGE(end.ok(), end.message());
  CHECK(got == values);

  oip::inference_request none = request;
  none.inputs.clear();
  const std::vector<std::int32_t> empty;
  none.inputs.push_back(*oip::tensor::from_values<std::int32_t>("IN", {0}, empty));
  none.inputs.push_back(
      *oip::tensor::from_values<std::uint32_t>("DELAY", {0}, std::vector<std::uint32_t>{}));
  none.inputs.push_back(request.inputs[2]);
  got.clear();
  CHECK(
      client.infer_stream("repeat_int32", none, [&](oip::inference_response) { got.push_back(0); })
          .ok());
  CHECK(got.empty());

  const oip::status unknown =
      client.infer_stream("no_such_model", request, [](oip::inference_response) {});
  CHECK_FALSE(unknown.ok());
  CHECK(unknown.message().find("no_such_model") != std::string::npos);
}
#endif

// --- a server that misbehaves -------------------------------------------------------------------

namespace {

// Listens on a free loopback port; each connection is handed to `answer` on the listener's
// thread, which reads the request as it likes and writes what it likes.
class scripted_server {
 public:
  explicit scripted_server(std::function<void(int)> answer) : answer_{std::move(answer)} {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(listener_ >= 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    socklen_t length = sizeof address;
    REQUIRE(getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length) == 0);
    port_ = ntohs(address.sin_port);
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
    shutdown(listener_, SHUT_RDWR);
    close(listener_);
    thread_.join();
  }
  [[nodiscard]] std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  std::function<void(int)> answer_;
  int listener_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

// Reads an HTTP request's header section and its Content-Length body.
void read_request(int fd) {
  std::string got;
  std::array<char, 4096> chunk{};
  std::size_t body_at = std::string::npos;
  while (body_at == std::string::npos) {
    const ssize_t n = recv(fd, chunk.data(), chunk.size(), 0);
    if (n <= 0) return;
    got.append(chunk.data(), static_cast<std::size_t>(n));
    body_at = got.find("\r\n\r\n");
  }
  std::size_t length = 0;
  if (const std::size_t at = got.find("Content-Length: "); at != std::string::npos) {
    length = std::stoul(got.substr(at + 16));
  }
  while (got.size() < body_at + 4 + length) {
    const ssize_t n = recv(fd, chunk.data(), chunk.size(), 0);
    if (n <= 0) return;
    got.append(chunk.data(), static_cast<std::size_t>(n));
  }
}

void write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n <= 0) return;
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
}

// oip-serve's reply to simple_request(), binary outputs, as a server writes it.
std::string valid_reply() {
  static const std::string reply = [] {
    oip::http::client client{shared_server().http_address()};
    oip::result<oip::http_call> call = client.protocol().infer("simple", simple_request());
    REQUIRE(call.ok());
    oip::result<oip::http_reply> got = client.send(std::move(*call));
    REQUIRE(got.ok());
    std::string text = "HTTP/1.1 200 OK\r\n";
    for (const oip::http_header& h : got->headers) {
      text += h.name + ": " + h.value + "\r\n";
    }
    text += "\r\n";
    text += got->body.as_string_view();
    return text;
  }();
  return reply;
}

oip::result<oip::inference_response> infer_at(const scripted_server& server,
                                              std::chrono::milliseconds timeout,
                                              std::size_t max_reply_bytes = std::size_t{256}
                                                                            << 20U) {
  oip::client_options options;
  options.timeout = timeout;
  options.reply_bounds.max_body_bytes = max_reply_bytes;
  oip::http::client client{server.address(), options};
  return client.infer("simple", simple_request());
}

}  // namespace

TEST_CASE("an HTTP server's broken replies are clear errors, within the deadline") {
  const std::chrono::milliseconds deadline{3000};
  SUBCASE("the real reply, to begin with") {
    scripted_server server{[](int fd) {
      read_request(fd);
      write_all(fd, valid_reply());
    }};
    check_simple(infer_at(server, deadline));
  }
  SUBCASE("a reply cut short") {
    scripted_server server{[](int fd) {
      read_request(fd);
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
      read_request(fd);
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
      read_request(fd);
      write_all(fd, "SSH-2.0-OpenSSH_9.2\r\n\r\n");
    }};
    const oip::result<oip::inference_response> r = infer_at(server, deadline);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == oip::errc::internal);
    CHECK(r.error().message().find("not valid HTTP") != std::string::npos);
  }
  SUBCASE("a connection closed with no reply") {
    scripted_server server{[](int fd) { read_request(fd); }};
    const oip::result<oip::inference_response> r = infer_at(server, deadline);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == oip::errc::unavailable);
  }
  SUBCASE("a reply larger than the client takes") {
    scripted_server server{[](int fd) {
      read_request(fd);
      write_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 1000000000000\r\n\r\n{}");
    }};
    const oip::result<oip::inference_response> r = infer_at(server, deadline, 1U << 20U);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == oip::errc::payload_too_large);
  }
  SUBCASE("a server that never answers") {
    std::atomic<bool> release{false};
    scripted_server server{[&](int fd) {
      read_request(fd);
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
    read_request(fd);
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
#endif
