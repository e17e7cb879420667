// oip-load: throughput and latency of a server, measured with oip's own clients, as Triton's
// perf_analyzer measures them with Triton's. Requests to `simple` (two INT32 [1,16]) at a fixed
// concurrency, synchronous (one thread per request in flight, each waiting for its reply) or
// asynchronous (one thread keeping the requests in flight through callbacks).
//
//   oip-load --url 127.0.0.1:8000 --protocol http --concurrency 8 --async --seconds 5
//
// Prints one line: key=value pairs (requests, throughput, latency percentiles, the client's CPU
// microseconds per request from its own rusage over the measured window).
//
// `--protocol grpc-bare` is the floor of any client built on this machine's grpc++: the generated
// stub called with one request message built once, its replies parsed by protobuf and dropped; no
// oip code runs per call.

#include <oip/grpc/client.hpp>
#include <oip/grpc/grpc_service.grpc.pb.h>
#include <oip/http/client.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include <absl/synchronization/mutex.h>
#include <sys/resource.h>

namespace {

using clock_type = std::chrono::steady_clock;

struct settings {
  std::string url = "127.0.0.1:8000";
  std::string protocol = "http";
  std::string model = "simple";
  int concurrency = 1;
  bool async = false;
  double seconds = 5;
  double warmup_seconds = 1;
};

oip::inference_request simple_request() {
  std::vector<std::int32_t> a(16);
  std::vector<std::int32_t> b(16, 1);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<std::int32_t>(i);
  oip::inference_request request;
  request.inputs.push_back(*oip::tensor::from_values<std::int32_t>("INPUT0", {1, 16}, a));
  request.inputs.push_back(*oip::tensor::from_values<std::int32_t>("INPUT1", {1, 16}, b));
  return request;
}

// The generated stub alone, with the calls oip-load makes of a client.
class bare_grpc_client {
 public:
  bare_grpc_client(const std::string& host_port, const oip::client_options& /*unused*/) {
    // As oip's client does (src/grpc/deadlock_detection.hpp), for the same floor.
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
    ::grpc::ChannelArguments arguments;
    arguments.SetMaxReceiveMessageSize(-1);
    stub_ = inference::GRPCInferenceService::NewStub(
        ::grpc::CreateCustomChannel(host_port, ::grpc::InsecureChannelCredentials(), arguments));
    message_.set_model_name("simple");
    for (const char* name : {"INPUT0", "INPUT1"}) {
      inference::ModelInferRequest::InferInputTensor* input = message_.add_inputs();
      input->set_name(name);
      input->set_datatype("INT32");
      input->add_shape(1);
      input->add_shape(16);
      message_.add_raw_input_contents(std::string(16 * sizeof(std::int32_t), '\1'));
    }
  }

  bool ready(const std::string& model) {
    ::grpc::ClientContext context;
    inference::ModelReadyRequest request;
    request.set_name(model);
    inference::ModelReadyResponse response;
    return stub_->ModelReady(&context, request, &response).ok() && response.ready();
  }

  oip::result<oip::inference_response> infer(const std::string& /*model*/,
                                             const oip::inference_request& /*unused*/) {
    ::grpc::ClientContext context;
    inference::ModelInferResponse response;
    const ::grpc::Status outcome = stub_->ModelInfer(&context, message_, &response);
    if (!outcome.ok()) return oip::status{oip::errc::unavailable, outcome.error_message()};
    return oip::inference_response{};
  }

  void async_infer(const std::string& /*model*/, const oip::inference_request& /*unused*/,
                   std::function<void(oip::result<oip::inference_response>)> done) {
    struct call {
      std::optional<::grpc::ClientContext> context{std::in_place};
      inference::ModelInferResponse response;
    };
    auto pending = std::make_shared<call>();
    stub_->async()->ModelInfer(
        &*pending->context, &message_, &pending->response,
        [pending, done = std::move(done)](const ::grpc::Status& outcome) {
          // The context holds the channel. It goes before `done`, after which oip-load may end
          // the client, so that the channel's last reference is never let go on grpc++'s thread
          // (as in oip's client, src/grpc/client.cpp).
          pending->context.reset();
          if (!outcome.ok()) {
            return done(oip::status{oip::errc::unavailable, outcome.error_message()});
          }
          done(oip::inference_response{});
        });
  }

 private:
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
  inference::ModelInferRequest message_;
};

double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// What the measured window saw: each reply's latency, and the errors.
struct tally {
  std::mutex mutex;
  std::vector<double> latencies_us;
  std::uint64_t errors = 0;
  std::string first_error;

  void add(clock_type::time_point sent, const oip::result<oip::inference_response>& reply,
           bool measured) {
    const double us = std::chrono::duration<double, std::micro>(clock_type::now() - sent).count();
    if (!measured) return;
    const std::lock_guard lock{mutex};
    if (reply.ok()) {
      latencies_us.push_back(us);
    } else {
      if (errors++ == 0) first_error = reply.error().message();
    }
  }
};

// The phases of a run: warm-up, then the measured window, then the end.
struct phases {
  std::atomic<bool> measuring{false};
  std::atomic<bool> stopping{false};
};

template <class Client>
void run_sync(Client& client, const settings& s, tally& counts, phases& phase) {
  const oip::inference_request request = simple_request();
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(s.concurrency));
  for (int t = 0; t < s.concurrency; ++t) {
    threads.emplace_back([&] {
      while (!phase.stopping.load(std::memory_order_relaxed)) {
        const bool measured = phase.measuring.load(std::memory_order_relaxed);
        const clock_type::time_point sent = clock_type::now();
        const oip::result<oip::inference_response> reply = client.infer(s.model, request);
        counts.add(sent, reply, measured && !phase.stopping.load(std::memory_order_relaxed));
      }
    });
  }
  for (std::thread& t : threads) t.join();
}

template <class Client>
void run_async(Client& client, const settings& s, tally& counts, phases& phase) {
  const oip::inference_request request = simple_request();
  std::mutex mutex;
  std::condition_variable idle;
  int in_flight = 0;
  // Each completion sends the next request, until the run stops.
  std::function<void()> send_one = [&] {
    const clock_type::time_point sent = clock_type::now();
    const bool measured = phase.measuring.load(std::memory_order_relaxed);
    client.async_infer(
        s.model, request, [&, sent, measured](const oip::result<oip::inference_response>& r) {
          counts.add(sent, r, measured && !phase.stopping.load(std::memory_order_relaxed));
          if (!phase.stopping.load(std::memory_order_relaxed)) return send_one();
          const std::lock_guard lock{mutex};
          if (--in_flight == 0) idle.notify_all();
        });
  };
  {
    const std::lock_guard lock{mutex};
    in_flight = s.concurrency;
  }
  for (int i = 0; i < s.concurrency; ++i) send_one();
  std::unique_lock lock{mutex};
  idle.wait(lock, [&] { return in_flight == 0; });
}

template <class Client>
int measure(const settings& s) {
  oip::client_options options;
  options.max_connections = static_cast<std::size_t>(s.concurrency);
  // No deadline, as perf_analyzer sets none by default (a deadline costs grpc++ a timer a call).
  Client client{s.url, options};
  if (!client.ready(s.model)) {
    std::fprintf(stderr, "oip-load: model '%s' is not ready at %s\n", s.model.c_str(),
                 s.url.c_str());
    return 1;
  }
  tally counts;
  phases phase;
  double cpu_at_start = 0;
  clock_type::time_point started;
  double measured_seconds = 0;
  double cpu_used = 0;
  std::thread timer{[&] {
    std::this_thread::sleep_for(std::chrono::duration<double>(s.warmup_seconds));
    cpu_at_start = cpu_seconds();
    started = clock_type::now();
    phase.measuring = true;
    std::this_thread::sleep_for(std::chrono::duration<double>(s.seconds));
    cpu_used = cpu_seconds() - cpu_at_start;
    measured_seconds = std::chrono::duration<double>(clock_type::now() - started).count();
    phase.stopping = true;
  }};
  if (s.async) {
    run_async(client, s, counts, phase);
  } else {
    run_sync(client, s, counts, phase);
  }
  timer.join();

  std::vector<double>& l = counts.latencies_us;
  std::sort(l.begin(), l.end());
  const auto percentile = [&l](double p) {
    if (l.empty()) return 0.0;
    return l[std::min(l.size() - 1, static_cast<std::size_t>(p * static_cast<double>(l.size())))];
  };
  double total = 0;
  for (const double v : l) total += v;
  const auto requests = static_cast<double>(l.size());
  std::printf(
      "protocol=%s mode=%s concurrency=%d requests=%zu errors=%llu throughput=%.1f avg_us=%.1f "
      "p50_us=%.1f p90_us=%.1f p99_us=%.1f cpu_us_per_request=%.2f\n",
      s.protocol.c_str(), s.async ? "async" : "sync", s.concurrency, l.size(),
      static_cast<unsigned long long>(counts.errors), requests / measured_seconds,
      l.empty() ? 0.0 : total / requests, percentile(0.5), percentile(0.9), percentile(0.99),
      l.empty() ? 0.0 : cpu_used * 1e6 / requests);
  if (counts.errors != 0) {
    std::fprintf(stderr, "oip-load: %llu errors, the first: %s\n",
                 static_cast<unsigned long long>(counts.errors), counts.first_error.c_str());
    return 1;
  }
  return 0;
}

int usage() {
  std::fprintf(stderr,
               "usage: oip-load [--url HOST:PORT] [--protocol http|grpc|grpc-bare] [--model NAME]\n"
               "                [--concurrency N] [--async] [--seconds S] [--warmup S]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  settings s;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--async") {
      s.async = true;
    } else if (arg == "--url" && has_value) {
      s.url = argv[++i];
    } else if (arg == "--protocol" && has_value) {
      s.protocol = argv[++i];
    } else if (arg == "--model" && has_value) {
      s.model = argv[++i];
    } else if (arg == "--concurrency" && has_value) {
      s.concurrency = std::atoi(argv[++i]);
    } else if (arg == "--seconds" && has_value) {
      s.seconds = std::atof(argv[++i]);
    } else if (arg == "--warmup" && has_value) {
      s.warmup_seconds = std::atof(argv[++i]);
    } else {
      return usage();
    }
  }
  if (s.concurrency < 1 || s.seconds <= 0 || s.warmup_seconds < 0) return usage();
  if (s.protocol == "http") return measure<oip::http::client>(s);
  if (s.protocol == "grpc") return measure<oip::grpc::client>(s);
  if (s.protocol == "grpc-bare") return measure<bare_grpc_client>(s);
  return usage();
}
