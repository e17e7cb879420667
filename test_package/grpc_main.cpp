// Consumes the installed oip::grpc component: serve on a free loopback port, call it with the
// installed client (and so the installed generated stub), then stop.
#include <oip/grpc/client.hpp>
#include <oip/grpc/server.hpp>

#include <iostream>
#include <string>

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
  oip::grpc::client client{"127.0.0.1:" + std::to_string(*port)};
  const bool live = client.live();
  const oip::result<oip::server_metadata> metadata = client.metadata();
  server.stop();
  if (!live || !metadata) {
    std::cerr << "the client's calls failed\n";
    return 1;
  }
  std::cout << "oip::grpc served " << metadata->name << " on port " << *port
            << " to oip::grpc::client\n";
  return 0;
}
