// The floor for big tensors: a client sends BYTES over loopback TCP to an echo peer, which reads
// them all and sends them back, round after round on one connection, as an HTTP or gRPC server
// reads a whole request before it answers. Prints the round trips per second and the bytes per
// second counted both ways; scripts/bench-http and scripts/bench-grpc set oip's 16 MiB FP32
// request and reply against it.
//
//   loopback_floor [BYTES, default 16 MiB] [SECONDS, default 5]

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <string_view>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

namespace {

bool send_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t sent = ::send(fd, data, size, MSG_NOSIGNAL);
    if (sent <= 0) return false;
    data += sent;
    size -= static_cast<std::size_t>(sent);
  }
  return true;
}

bool receive_all(int fd, char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t got = ::recv(fd, data, size, 0);
    if (got <= 0) return false;
    data += got;
    size -= static_cast<std::size_t>(got);
  }
  return true;
}

std::size_t number(const char* text, std::size_t fallback) {
  if (text == nullptr) return fallback;
  std::size_t n = 0;
  const std::string_view s{text};
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  return ec == std::errc{} && end == s.data() + s.size() && n > 0 ? n : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t bytes = number(argc > 1 ? argv[1] : nullptr, std::size_t{16} << 20U);
  const std::size_t seconds = number(argc > 2 ? argv[2] : nullptr, 5);
  if (bytes == 0 || seconds == 0) {
    std::fprintf(stderr, "usage: loopback_floor [BYTES] [SECONDS]\n");
    return 2;
  }
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (listener < 0 ||
      ::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(listener, 1) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    std::perror("loopback_floor: listen");
    return 1;
  }
  std::thread echo{[listener, bytes] {
    const int peer = ::accept(listener, nullptr, nullptr);
    std::vector<char> held(bytes);
    while (peer >= 0 && receive_all(peer, held.data(), bytes) &&
           send_all(peer, held.data(), bytes)) {
    }
    if (peer >= 0) ::close(peer);
  }};
  const int client = ::socket(AF_INET, SOCK_STREAM, 0);
  const int on = 1;
  ::setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  if (client < 0 || ::connect(client, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    std::perror("loopback_floor: connect");
    return 1;
  }
  // The client keeps what it sends, as a client does its request, and reads the echo through a
  // small buffer, as wrk and h2load read a reply they do not keep: the peer holds the whole
  // message, as a server holds a request.
  std::vector<char> out(bytes, '\x01');
  std::vector<char> in(std::size_t{64} << 10U);
  std::size_t rounds = 0;
  const auto start = std::chrono::steady_clock::now();
  const auto end = start + std::chrono::seconds{seconds};
  auto now = start;
  while (now < end) {
    bool echoed = send_all(client, out.data(), bytes);
    for (std::size_t left = bytes; echoed && left > 0;) {
      const ssize_t got = ::recv(client, in.data(), std::min(left, in.size()), 0);
      echoed = got > 0;
      left -= echoed ? static_cast<std::size_t>(got) : 0;
    }
    if (!echoed) {
      std::perror("loopback_floor: echo");
      return 1;
    }
    ++rounds;
    now = std::chrono::steady_clock::now();
  }
  ::shutdown(client, SHUT_RDWR);
  ::close(client);
  echo.join();
  ::close(listener);
  const double elapsed = std::chrono::duration<double>(now - start).count();
  std::printf("%.3e bytes/s both ways, %.1f round trips/s (%zu bytes each way, %zu rounds)\n",
              2.0 * static_cast<double>(bytes) * static_cast<double>(rounds) / elapsed,
              static_cast<double>(rounds) / elapsed, bytes, rounds);
  return 0;
}
