// Consumes the installed oip::grpc component: serve on a free loopback port, ask it whether it
// is live through the installed generated stub, then stop.
#include <oip/grpc/grpc_service.grpc.pb.h>
#include <oip/grpc/server.hpp>

#include <iostream>
#include <string>

#include <grpcpp/grpcpp.h>

int main() {
  oip::model_repository models;
  oip::executor workers{{1, 4}};
  oip::inference_service service{models, workers};
  oip::grpc::server server{service, {"127.0.0.1", 0}};
  const oip::result<std::uint16_t> port = server.start();
  if (!port) {
    std::cerr << port.error().message() << "\n";
    return 1;
  }
  auto stub = inference::GRPCInferenceService::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(*port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  inference::ServerLiveResponse live;
  const grpc::Status s = stub->ServerLive(&context, inference::ServerLiveRequest{}, &live);
  server.stop();
  if (!s.ok() || !live.live()) {
    std::cerr << "ServerLive failed: " << s.error_message() << "\n";
    return 1;
  }
  std::cout << "oip::grpc served ServerLive on port " << *port << "\n";
  return 0;
}
