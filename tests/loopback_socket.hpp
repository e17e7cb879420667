#pragma once
// A TCP socket bound to a free port on 127.0.0.1, for tests that play a server (or hold a port
// that refuses connections): the descriptor, the port, and the address to connect to.

#include <cstdint>
#include <string>

#include <doctest/doctest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace oip::testing {

struct loopback_socket {
  int fd = -1;
  std::uint16_t port = 0;
  sockaddr_in address{};

  [[nodiscard]] std::string host_port() const { return "127.0.0.1:" + std::to_string(port); }
};

inline loopback_socket bind_loopback() {
  loopback_socket out;
  out.fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(out.fd >= 0);
  out.address.sin_family = AF_INET;
  out.address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(out.fd, reinterpret_cast<sockaddr*>(&out.address), sizeof out.address) == 0);
  socklen_t length = sizeof out.address;
  REQUIRE(getsockname(out.fd, reinterpret_cast<sockaddr*>(&out.address), &length) == 0);
  out.port = ntohs(out.address.sin_port);
  return out;
}

}  // namespace oip::testing
