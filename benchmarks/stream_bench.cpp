// Decoupled models' streams. First, what one more response on an open stream costs the server,
// beside a unary call of the same payload (one INT32 in, one out): both through the inference
// service, which makes, counts and hands over each response, without a transport. Then the time
// to a request's first response over loopback sockets: gRPC ModelStreamInfer on an open stream,
// and HTTP generate_stream (server-sent events) on a kept-alive connection, the model sending its
// first response at once and three more after it; beside each, the whole round trip of a unary
// request of the same payload on the same transport (gRPC ModelInfer, HTTP generate).

#include <oip/executor.hpp>
#include <oip/grpc/grpc_service.grpc.pb.h>
#include <oip/grpc/server.hpp>
#include <oip/http/server.hpp>
#include <oip/http_handler.hpp>
#include <oip/inference_service.hpp>
#include <oip/model.hpp>
#include <oip/reply_sink.hpp>
#include <oip/repository.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include <benchmark/benchmark.h>
#include <grpcpp/grpcpp.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

namespace {

using clock_type = std::chrono::steady_clock;

oip::model_config config_of(std::string name, bool decoupled) {
  oip::model_config c;
  c.name = std::move(name);
  c.decoupled = decoupled;
  c.inputs = {{"N", oip::datatype::int32, {1}, {}}};
  c.outputs = {{"I", oip::datatype::int32, {1}, {}}};
  return c;
}

oip::model_output output_of(std::int32_t i) {
  return {{*oip::tensor::from_values<std::int32_t>("I", {1}, std::span<const std::int32_t>{&i, 1})},
          {}};
}

// Answers once: I = N.
class unary_model final : public oip::model {
 public:
  [[nodiscard]] const oip::model_config& config() const noexcept override { return config_; }
  void execute(oip::inference_call call) override {
    call.finish(output_of(call.request().inputs[0].at<std::int32_t>(0)));
  }

 private:
  oip::model_config config_ = config_of("unary", false);
};

// Sends N responses, I = 0 .. N-1, then the flag-only final.
class streaming_model final : public oip::model {
 public:
  [[nodiscard]] const oip::model_config& config() const noexcept override { return config_; }
  void execute(oip::inference_call call) override {
    const std::int32_t n = call.request().inputs[0].at<std::int32_t>(0);
    for (std::int32_t i = 0; i < n; ++i) {
      if (!call.send(output_of(i)).ok())
        return call.finish(oip::status{oip::errc::unavailable, "gone"});
    }
    call.finish();
  }

 private:
  oip::model_config config_ = config_of("stream", true);
};

oip::inference_request request_of(std::int32_t n) {
  oip::inference_request r;
  r.inputs.push_back(
      *oip::tensor::from_values<std::int32_t>("N", {1}, std::span<const std::int32_t>{&n, 1}));
  return r;
}

struct served {
  served() {
    (void)models.add(std::make_shared<unary_model>());
    (void)models.add(std::make_shared<streaming_model>());
  }
  oip::model_repository models;
  oip::executor workers{oip::executor_options{2, 1024}};
  oip::inference_service service{models, workers};
};

// Counts a request's responses and wakes the caller at its end.
struct counting_sink final : oip::reply_sink {
  std::mutex mutex;
  std::condition_variable ended;
  std::size_t responses = 0;
  bool done = false;
  void on_response(oip::inference_response response, oip::response_flag /*flag*/) override {
    benchmark::DoNotOptimize(response);
    ++responses;
  }
  void on_complete(const oip::status& /*outcome*/) override {
    const std::lock_guard lock{mutex};
    done = true;
    ended.notify_one();
  }
  void wait() {
    std::unique_lock lock{mutex};
    ended.wait(lock, [&] { return done; });
  }
};

served& in_process() {
  static served s;
  return s;
}

// A unary call: one request, its one response.
void BM_unary_call(benchmark::State& state) {
  served& s = in_process();
  for (auto _ : state) {
    auto sink = std::make_shared<counting_sink>();
    s.service.infer({.model = "unary", .cancel = {}}, request_of(7), sink);
    sink->wait();
  }
  state.SetItemsProcessed(state.iterations());
}

// Responses on an open stream: one request of `range(0)` responses per iteration; the time per
// item is what one more response costs.
void BM_stream_response(benchmark::State& state) {
  served& s = in_process();
  const auto n = static_cast<std::int32_t>(state.range(0));
  for (auto _ : state) {
    auto sink = std::make_shared<counting_sink>();
    s.service.infer({.model = "stream", .cancel = {}}, request_of(n), sink);
    sink->wait();
    if (sink->responses != static_cast<std::size_t>(n)) state.SkipWithError("responses lost");
  }
  state.SetItemsProcessed(state.iterations() * n);
}

BENCHMARK(BM_unary_call)->UseRealTime();
BENCHMARK(BM_stream_response)->Arg(1000)->UseRealTime();

// The servers over the same service, on loopback ports.
struct over_sockets {
  served s;
  oip::http_handler handler{s.service};
  oip::http::server http{handler, {.address = "127.0.0.1", .port = 0}};
  oip::grpc::server grpc{s.service, {"127.0.0.1", 0}};
  std::uint16_t http_port = 0;
  std::uint16_t grpc_port = 0;
  over_sockets() {
    http_port = http.start().value();
    grpc_port = grpc.start().value();
  }
};

over_sockets& sockets() {
  static over_sockets o;
  return o;
}

// Time to first response over gRPC: on one open stream, each request's first response is timed,
// the rest of its stream read after.
void BM_first_response_grpc(benchmark::State& state) {
  over_sockets& o = sockets();
  auto stub = inference::GRPCInferenceService::NewStub(::grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(o.grpc_port), ::grpc::InsecureChannelCredentials()));
  ::grpc::ClientContext context;
  auto stream = stub->ModelStreamInfer(&context);
  inference::ModelInferRequest request;
  request.set_model_name("stream");
  auto* input = request.add_inputs();
  input->set_name("N");
  input->set_datatype("INT32");
  input->add_shape(1);
  const std::int32_t four = 4;
  request.add_raw_input_contents(std::string(reinterpret_cast<const char*>(&four), 4));
  (*request.mutable_parameters())["triton_enable_empty_final_response"].set_bool_param(true);
  inference::ModelStreamInferResponse reply;
  for (auto _ : state) {
    const auto start = clock_type::now();
    stream->Write(request);
    if (!stream->Read(&reply) || !reply.error_message().empty()) {
      state.SkipWithError("no first response");
      break;
    }
    state.SetIterationTime(std::chrono::duration<double>(clock_type::now() - start).count());
    for (int rest = 0; rest < 4; ++rest) stream->Read(&reply);  // three more and the empty final
  }
  stream->WritesDone();
  (void)stream->Finish();
}

// A blocking loopback socket.
class socket_client {
 public:
  explicit socket_client(std::uint16_t port) : fd_{::socket(AF_INET, SOCK_STREAM, 0)} {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    ::inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
    ::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address);
    const int on = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  }
  socket_client(const socket_client&) = delete;
  socket_client& operator=(const socket_client&) = delete;
  ~socket_client() { ::close(fd_); }
  bool send(const std::string& bytes) {
    return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  }
  // Reads until `marker` is in what was read since the last call; false when the server closed.
  bool read_until(std::string_view marker) {
    char chunk[4096];
    while (seen_.find(marker) == std::string::npos) {
      const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n <= 0) return false;
      seen_.append(chunk, static_cast<std::size_t>(n));
    }
    seen_.erase(0, seen_.find(marker) + marker.size());
    return true;
  }

 private:
  int fd_;
  std::string seen_;
};

// Time to first response over HTTP: on one kept-alive connection, each generate_stream request's
// first event is timed, the rest of its body read after.
void BM_first_response_sse(benchmark::State& state) {
  over_sockets& o = sockets();
  socket_client client{o.http_port};
  const std::string body = R"({"N":4})";
  const std::string request =
      "POST /v2/models/stream/generate_stream HTTP/1.1\r\nHost: x\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  for (auto _ : state) {
    const auto start = clock_type::now();
    if (!client.send(request) || !client.read_until("data: ")) {
      state.SkipWithError("no first event");
      break;
    }
    state.SetIterationTime(std::chrono::duration<double>(clock_type::now() - start).count());
    if (!client.read_until("\r\n0\r\n\r\n")) {  // the last chunk
      state.SkipWithError("no end of the body");
      break;
    }
  }
}

// The baseline over gRPC: a unary ModelInfer of the same payload.
void BM_unary_grpc(benchmark::State& state) {
  over_sockets& o = sockets();
  auto stub = inference::GRPCInferenceService::NewStub(::grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(o.grpc_port), ::grpc::InsecureChannelCredentials()));
  inference::ModelInferRequest request;
  request.set_model_name("unary");
  auto* input = request.add_inputs();
  input->set_name("N");
  input->set_datatype("INT32");
  input->add_shape(1);
  const std::int32_t four = 4;
  request.add_raw_input_contents(std::string(reinterpret_cast<const char*>(&four), 4));
  inference::ModelInferResponse reply;
  for (auto _ : state) {
    ::grpc::ClientContext context;
    const auto start = clock_type::now();
    if (!stub->ModelInfer(&context, request, &reply).ok()) {
      state.SkipWithError("ModelInfer failed");
      break;
    }
    state.SetIterationTime(std::chrono::duration<double>(clock_type::now() - start).count());
  }
}

// The baseline over HTTP: a unary generate request of the same payload, its reply read whole.
void BM_unary_http(benchmark::State& state) {
  over_sockets& o = sockets();
  socket_client client{o.http_port};
  const std::string body = R"({"N":4})";
  const std::string request =
      "POST /v2/models/unary/generate HTTP/1.1\r\nHost: x\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  for (auto _ : state) {
    const auto start = clock_type::now();
    // The reply's JSON object is its body's only one: its brace ends it.
    if (!client.send(request) || !client.read_until("\r\n\r\n") || !client.read_until("}")) {
      state.SkipWithError("no reply");
      break;
    }
    state.SetIterationTime(std::chrono::duration<double>(clock_type::now() - start).count());
  }
}

BENCHMARK(BM_first_response_grpc)->UseManualTime();
BENCHMARK(BM_unary_grpc)->UseManualTime();
BENCHMARK(BM_first_response_sse)->UseManualTime();
BENCHMARK(BM_unary_http)->UseManualTime();

}  // namespace

BENCHMARK_MAIN();
