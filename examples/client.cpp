// Calls a server of the protocol (oip-serve, Triton, KServe...) with oip's clients: Triton's
// `simple` model over HTTP and over gRPC, the same code for both.
//
//   scripts/serve &                # oip-serve on :8000 (HTTP) and :8001 (gRPC)
//   build/release/examples/client  # or: client HOST:HTTP_PORT HOST:GRPC_PORT

#include <oip/grpc/client.hpp>
#include <oip/http/client.hpp>

#include <array>
#include <cstdint>
#include <iostream>
#include <string>

namespace {

// The same calls whichever transport the client speaks.
template <class Client>
int call_simple(Client& client, const char* transport) {
  if (!client.ready("simple")) {
    std::cerr << transport << ": the model 'simple' is not ready\n";
    return 1;
  }
  std::array<std::int32_t, 16> a{};
  std::array<std::int32_t, 16> b{};
  for (std::size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<std::int32_t>(i);
    b[i] = 1;
  }
  oip::inference_request request;
  request.inputs.push_back(*oip::tensor::from_values<std::int32_t>("INPUT0", {1, 16}, a));
  request.inputs.push_back(*oip::tensor::from_values<std::int32_t>("INPUT1", {1, 16}, b));
  const oip::result<oip::inference_response> response = client.infer("simple", request);
  if (!response) {
    std::cerr << transport << ": " << response.error().message() << "\n";
    return 1;
  }
  std::cout << transport << ":";
  for (const oip::tensor& output : response->outputs) {
    std::cout << " " << output.name() << "[3] = " << output.at<std::int32_t>(3);
  }
  std::cout << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string http_address = argc > 1 ? argv[1] : "127.0.0.1:8000";
  const std::string grpc_address = argc > 2 ? argv[2] : "127.0.0.1:8001";
  oip::client_options options;
  options.timeout = std::chrono::seconds{10};
  oip::http::client http{http_address, options};
  oip::grpc::client grpc{grpc_address, options};
  const int http_failed = call_simple(http, "HTTP");
  const int grpc_failed = call_simple(grpc, "gRPC");
  return http_failed + grpc_failed;
}
