// std::bad_alloc from the allocator itself, on the transports' own paths: while armed, every
// allocation of at least `failing_from` bytes fails (the throwing forms throw, the nothrow ones
// return null). Each request that meets it is answered 503 over its real socket, and the server
// answers the next one. The global operator new is replaced here, which the sanitizers do
// themselves: this test runs in the plain builds (tests/out_of_memory_test.cpp runs everywhere).

#include "serving_support.hpp"
#include "wait.hpp"

#include <oip/grpc/codec.hpp>
#include <oip/grpc/grpc_service.grpc.pb.h>
#include <oip/grpc/server.hpp>
#include <oip/http/server.hpp>
#include <oip/http_handler.hpp>
#include <oip/inference_service.hpp>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <grpcpp/grpcpp.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace {

std::atomic<std::size_t> failing_from{0};  // 0: nothing fails
std::atomic<std::size_t> failed{0};
// Whether only the first allocation that meets `failing_from` fails (it then disarms itself).
std::atomic<bool> failing_once{false};
// The test's own thread, the client's side of each exchange, is spared.
thread_local bool spared = false;

void* allocate(std::size_t size, std::size_t alignment) noexcept {
  const std::size_t limit = failing_from.load(std::memory_order_relaxed);
  if (limit != 0 && size >= limit && !spared) {
    std::size_t armed = limit;
    if (!failing_once.load(std::memory_order_relaxed) ||
        failing_from.compare_exchange_strong(armed, 0)) {
      failed.fetch_add(1);
      return nullptr;
    }
  }
  if (size == 0) size = 1;
  if (alignment <= alignof(std::max_align_t)) return std::malloc(size);
  return std::aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment);
}

// Arms one failure for the scope: the first allocation of `from` bytes or more, on any thread but
// the test's.
struct one_failing_allocation {
  explicit one_failing_allocation(std::size_t from) {
    spared = true;
    failing_once = true;
    failing_from = from;
  }
  one_failing_allocation(const one_failing_allocation&) = delete;
  one_failing_allocation& operator=(const one_failing_allocation&) = delete;
  ~one_failing_allocation() {
    failing_from = 0;
    failing_once = false;
    spared = false;
  }
};

// Arms the failure for the scope.
struct failing_allocations {
  explicit failing_allocations(std::size_t from) {
    spared = true;
    failing_from = from;
  }
  failing_allocations(const failing_allocations&) = delete;
  failing_allocations& operator=(const failing_allocations&) = delete;
  ~failing_allocations() {
    failing_from = 0;
    spared = false;
  }
};

}  // namespace

void* operator new(std::size_t size) {
  if (void* p = allocate(size, 0)) return p;
  throw std::bad_alloc{};
}
void* operator new[](std::size_t size) { return operator new(size); }
void* operator new(std::size_t size, std::align_val_t a) {
  if (void* p = allocate(size, static_cast<std::size_t>(a))) return p;
  throw std::bad_alloc{};
}
void* operator new[](std::size_t size, std::align_val_t a) { return operator new(size, a); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept { return allocate(size, 0); }
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept { return allocate(size, 0); }
void* operator new(std::size_t size, std::align_val_t a, const std::nothrow_t&) noexcept {
  return allocate(size, static_cast<std::size_t>(a));
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace {

constexpr std::size_t threshold = std::size_t{512} << 10U;

// One HTTP exchange on a fresh connection: the reply's status line and body.
struct http_reply {
  int status = 0;
  std::string body;
};

std::optional<http_reply> http_exchange(std::uint16_t port, const std::string& request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return std::nullopt;
  timeval timeout{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  ::inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  std::string in;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) {
    std::size_t sent = 0;
    while (sent < request.size()) {
      const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<std::size_t>(n);
    }
    char chunk[65536];
    for (;;) {  // the request says Connection: close, so the reply ends with the connection
      const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
      if (n <= 0) break;
      in.append(chunk, static_cast<std::size_t>(n));
    }
  }
  ::close(fd);
  const std::size_t end = in.find("\r\n\r\n");
  if (in.size() < 12 || end == std::string::npos) return std::nullopt;
  return http_reply{std::stoi(in.substr(9, 3)), in.substr(end + 4)};
}

std::string post(const std::string& target, const std::string& body,
                 const std::string& extra_headers = "") {
  return "POST " + target + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n" + extra_headers + "\r\n" + body;
}

const std::string simple_body =
    R"({"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]},)"
    R"({"name":"INPUT1","shape":[1,16],"datatype":"INT32","data":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}]})";

struct servers {
  oip::model_repository models;
  oip::executor workers{oip::executor_options{2, 64}};
  oip::http_handler handler{models, workers};
  oip::http::server http{handler, {.address = "127.0.0.1", .port = 0}};
  oip::grpc::server grpc{handler.service(), {"127.0.0.1", 0}};
  std::uint16_t http_port = 0;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub;

  servers() {
    REQUIRE(models.add(oip::testing::make_simple()).ok());
    REQUIRE(models.add(oip::testing::make_scores()).ok());
    oip::result<std::uint16_t> h = http.start();
    REQUIRE(h);
    http_port = *h;
    oip::result<std::uint16_t> g = grpc.start();
    REQUIRE(g);
    stub = inference::GRPCInferenceService::NewStub(::grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(*g), ::grpc::InsecureChannelCredentials()));
  }

  // The server still answers: a simple request over each transport.
  void check_serving() {
    const std::optional<http_reply> r =
        http_exchange(http_port, post("/v2/models/simple/infer", simple_body));
    REQUIRE(r.has_value());
    CHECK(r->status == 200);
    ::grpc::ClientContext context;
    inference::ModelInferResponse response;
    CHECK(stub->ModelInfer(&context, simple_message(0), &response).ok());
  }

  // simple's request, with `padding` bytes of a parameter that makes the message large.
  static inference::ModelInferRequest simple_message(std::size_t padding) {
    oip::inference_request r;
    std::vector<std::int32_t> a(16, 1);
    r.inputs.push_back(*oip::tensor::from_values<std::int32_t>("INPUT0", {1, 16}, a));
    r.inputs.push_back(*oip::tensor::from_values<std::int32_t>("INPUT1", {1, 16}, a));
    inference::ModelInferRequest message;
    REQUIRE(
        oip::grpc::encode_request(r, "simple", "", oip::grpc::contents_form::raw, message).ok());
    if (padding != 0)
      (*message.mutable_parameters())["padding"].set_string_param(std::string(padding, 'x'));
    return message;
  }
};

}  // namespace

TEST_CASE("a merged batch whose outputs cannot be split back: each request a 503, the queue on") {
  // Two requests of 32,768 rows merged into one execution; the model arms the failure as it
  // returns, so that splitting its output back (an offset per row: 512 KiB) finds no memory.
  constexpr std::int64_t rows_each = 32768;
  std::atomic<bool> arm{true};
  oip::model_config c;
  c.name = "wide";
  c.max_batch_size = 2 * rows_each;
  c.dynamic_batching = true;
  c.batching.max_queue_delay = std::chrono::seconds{5};
  c.batching.preferred_batch_sizes = {2 * rows_each};
  c.inputs = {{"X", oip::datatype::fp32, {1}, {}}};
  c.outputs = {{"Y", oip::datatype::fp32, {1}, {}}};
  servers s;
  REQUIRE(s.models
              .add(oip::make_model(c,
                                   [&](const oip::inference_request& r) {
                                     oip::model_output out;
                                     out.outputs.push_back(*oip::tensor::make(
                                         "Y", oip::datatype::fp32, r.inputs[0].shape(),
                                         r.inputs[0].data()));
                                     if (arm.exchange(false)) failing_from = threshold;
                                     return oip::result<oip::model_output>{std::move(out)};
                                   }))
              .ok());
  std::string data = "1";
  for (std::int64_t i = 1; i < rows_each; ++i) data += ",1";
  const std::string body = R"({"inputs":[{"name":"X","shape":[)" + std::to_string(rows_each) +
                           R"(,1],"datatype":"FP32","data":[)" + data +
                           R"(]}],"parameters":{"binary_data_output":true}})";
  std::optional<http_reply> replies[2];
  {
    const auto exchange = [&](std::optional<http_reply>& reply) {
      spared = true;  // the client's side
      reply = http_exchange(s.http_port, post("/v2/models/wide/infer", body));
    };
    std::thread first{[&] { exchange(replies[0]); }};
    std::thread second{[&] { exchange(replies[1]); }};
    first.join();
    second.join();
  }
  failing_from = 0;
  CHECK(failed.load() > 0);
  for (const std::optional<http_reply>& r : replies) {
    REQUIRE(r.has_value());
    CHECK(r->status == 503);
    CHECK(r->body.find("splitting the batch's outputs") != std::string::npos);
  }
  // The model's queue was not left waiting on the failed batch: the next two run.
  {
    const auto exchange = [&](std::optional<http_reply>& reply) {
      reply = http_exchange(s.http_port, post("/v2/models/wide/infer", body));
    };
    std::thread first{[&] { exchange(replies[0]); }};
    std::thread second{[&] { exchange(replies[1]); }};
    first.join();
    second.join();
  }
  for (const std::optional<http_reply>& r : replies) {
    REQUIRE(r.has_value());
    CHECK(r->status == 200);
  }
  s.check_serving();
}

TEST_CASE("HTTP: a connection the server cannot get memory for is dropped; the next is served") {
  // Its session cannot be made: that connection closes unanswered, and accepting goes on.
  servers s;
  const std::size_t failures = failed.load();
  std::optional<http_reply> dropped;
  {
    const one_failing_allocation armed{1024};  // the server's next, its session's (larger)
    dropped = http_exchange(s.http_port, post("/v2/models/simple/infer", simple_body));
  }
  CHECK_FALSE(dropped.has_value());
  CHECK(failed.load() > failures);
  s.check_serving();
}

TEST_CASE("HTTP: a JSON body the parser cannot get memory for is a 503") {
  servers s;
  const std::string body = simple_body + std::string(std::size_t{1} << 20U, ' ');
  std::optional<http_reply> r;
  {
    const failing_allocations armed{threshold};
    r = http_exchange(s.http_port, post("/v2/models/simple/infer", body));
  }
  REQUIRE(r.has_value());
  CHECK(r->status == 503);
  CHECK(r->body.find("out of memory") != std::string::npos);
  s.check_serving();
}

TEST_CASE("HTTP: a chunked body that cannot grow is a 503") {
  servers s;
  std::string request =
      "POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
      "Transfer-Encoding: chunked\r\n\r\n";
  const std::string piece(std::size_t{64} << 10U, ' ');
  for (int i = 0; i < 16; ++i) request += "10000\r\n" + piece + "\r\n";
  request += "0\r\n\r\n";
  std::optional<http_reply> r;
  {
    const failing_allocations armed{threshold};
    r = http_exchange(s.http_port, request);
  }
  REQUIRE(r.has_value());
  CHECK(r->status == 503);
  CHECK(r->body.find("out of memory reading the request body") != std::string::npos);
  s.check_serving();
}

TEST_CASE("HTTP: a JSON reply that cannot be written is a 503") {
  servers s;
  // 200,000 FP32 values in binary; the reply asks for them as JSON (about 800 KB of text).
  constexpr std::size_t count = 200000;
  const std::string header =
      R"({"inputs":[{"name":"IN","shape":[200000],"datatype":"FP32","parameters":{"binary_data_size":800000}}],)"
      R"("outputs":[{"name":"OUT","parameters":{"binary_data":false}}]})";
  std::string body = header;
  const float value = 1.5F;  // "1.5," in JSON
  for (std::size_t i = 0; i < count; ++i) body.append(reinterpret_cast<const char*>(&value), 4);
  const std::string request =
      post("/v2/models/scores/infer", body,
           "Inference-Header-Content-Length: " + std::to_string(header.size()) + "\r\n");
  const std::size_t failures = failed.load();
  std::optional<http_reply> r;
  {
    const failing_allocations armed{threshold};
    r = http_exchange(s.http_port, request);
  }
  REQUIRE(r.has_value());
  CHECK(r->status == 503);
  INFO(r->body);
  CHECK(r->body.find("out of memory writing the response") != std::string::npos);
  CHECK(failed.load() > failures);
  const std::optional<http_reply> again = http_exchange(s.http_port, request);
  REQUIRE(again.has_value());
  CHECK(again->status == 200);
}

TEST_CASE(
    "gRPC: a message that cannot be parsed for want of memory is refused, unary or streamed") {
  servers s;
  const inference::ModelInferRequest large = servers::simple_message(std::size_t{1} << 20U);
  ::grpc::Status unary;
  inference::ModelStreamInferResponse streamed;
  {
    const failing_allocations armed{threshold};
    ::grpc::ClientContext context;
    inference::ModelInferResponse response;
    unary = s.stub->ModelInfer(&context, large, &response);
    ::grpc::ClientContext stream_context;
    auto stream = s.stub->ModelStreamInfer(&stream_context);
    REQUIRE(stream->Write(large));
    REQUIRE(stream->Read(&streamed));
    stream->WritesDone();
    CHECK(stream->Finish().ok());
  }
  CHECK(streamed.error_message().find("out of memory") != std::string::npos);
  CHECK(unary.error_code() == ::grpc::StatusCode::UNAVAILABLE);
  CHECK(unary.error_message().find("out of memory") != std::string::npos);
  s.check_serving();
}
