// Consumes the installed oip::http component: serve on a free loopback port, then stop.
#include <oip/http/server.hpp>

#include <iostream>

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
  std::cout << "oip::http listened on port " << *port << "\n";
  server.stop();
  return *port != 0 ? 0 : 1;
}
