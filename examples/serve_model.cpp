// Your own model behind oip's HTTP and gRPC servers, in one file: Triton's clients and
// perf_analyzer reach it unchanged. Stops cleanly on SIGINT or SIGTERM.
//
//   serve_model [--http-port 8000] [--grpc-port 8001]   (0 picks a free port)
//   echo '{"inputs":[{"name":"X","shape":[3],"datatype":"FP32","data":[1,2,3]}]}' |
//       curl -d @- localhost:8000/v2/models/double/infer

#include <oip/grpc/server.hpp>
#include <oip/http/server.hpp>
#include <oip/http_handler.hpp>
#include <oip/model.hpp>

#include <csignal>
#include <cstdlib>
#include <iostream>
#include <span>
#include <string_view>
#include <vector>

namespace {

// The engine: Y = 2 X over any number of FP32 values.
oip::result<oip::model_output> run_double(const oip::inference_request& request) {
  const oip::tensor& x = request.inputs[0];  // validated against the config: FP32, rank 1
  std::vector<float> y(x.element_count());
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = 2.0F * x.at<float>(i);
  oip::result<oip::tensor> out =
      oip::tensor::from_values<float>("Y", x.shape(), std::span<const float>(y));
  if (!out) return out.error();
  return oip::model_output{{std::move(*out)}, {}};
}

std::uint16_t port_option(int argc, char** argv, std::string_view name, std::uint16_t fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (argv[i] == name) return static_cast<std::uint16_t>(std::strtoul(argv[i + 1], nullptr, 10));
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  // Signals go to sigwait below, not to whichever server thread they would hit.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  oip::model_config config;
  config.name = "double";
  config.inputs = {{"X", oip::datatype::fp32, {-1}, {}}};
  config.outputs = {{"Y", oip::datatype::fp32, {-1}, {}}};
  oip::model_repository models;
  if (oip::status s = models.add(oip::make_model(config, run_double)); !s.ok()) {
    std::cerr << s.message() << '\n';
    return 1;
  }

  // One service (validation, executor, statistics) under both transports.
  oip::executor workers;
  oip::inference_service service{models, workers};
  oip::http_handler handler{service};
  oip::http::server_options http_options;
  http_options.port = port_option(argc, argv, "--http-port", 8000);
  oip::http::server http{handler, http_options};
  oip::grpc::server grpc{service, {"0.0.0.0", port_option(argc, argv, "--grpc-port", 8001)}};
  const oip::result<std::uint16_t> http_port = http.start();
  const oip::result<std::uint16_t> grpc_port = grpc.start();
  if (!http_port || !grpc_port) {
    std::cerr << (http_port ? grpc_port.error() : http_port.error()).message() << '\n';
    return 1;
  }
  std::cout << "HTTP on :" << *http_port << ", gRPC on :" << *grpc_port << std::endl;

  int received = 0;
  sigwait(&signals, &received);
  grpc.stop();  // each finishes the requests in flight
  http.stop();
  return 0;
}
