// Consumes the installed oip::http component: serve on a free loopback port, call it with the
// installed client, then stop.
#include <oip/http/client.hpp>
#include <oip/http/server.hpp>

#include <iostream>
#include <string>

int main() {
  oip::model_repository models;
  oip::executor workers{{1, 4}};
  oip::http_handler handler{models, workers};
  oip::http::server_options options;
  options.address = "127.0.0.1";
  options.port = 0;
  oip::http::server server{handler, options};
  const oip::result<std::uint16_t> port = server.start();
  if (!port) {
    std::cerr << port.error().message() << "\n";
    return 1;
  }
  oip::http::client client{"127.0.0.1:" + std::to_string(*port)};
  const bool live = client.live();
  const oip::result<oip::server_metadata> metadata = client.metadata();
  server.stop();
  if (!live || !metadata) {
    std::cerr << "the client's calls failed\n";
    return 1;
  }
  std::cout << "oip::http served " << metadata->name << " on port " << *port
            << " to oip::http::client\n";
  return 0;
}
