#pragma once
// oip-serve run as its own process, as a client meets it: started with free ports, its ports read
// from the line it prints once it listens, stopped with SIGTERM.

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace oip::testing {

class oip_serve_process {
 public:
  explicit oip_serve_process(std::vector<std::string> extra = {}) {
    std::vector<std::string> args{
        OIP_SERVE_PATH,   "--address", "127.0.0.1", "--http-port", "0", "--grpc-port", "0",
        "--metrics-port", "0"};
    args.insert(args.end(), extra.begin(), extra.end());
    int out[2];
    REQUIRE(pipe(out) == 0);
    pid_ = fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);
      close(out[0]);
      close(out[1]);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(out[1]);
    lines_ = fdopen(out[0], "r");
    REQUIRE(lines_ != nullptr);
    char line[4096];
    while (fgets(line, sizeof line, lines_) != nullptr) {
      const std::string text{line};
      if (text.rfind("oip-serve ", 0) != 0) continue;
      http_port = port_after(text, "HTTP on 127.0.0.1:");
      grpc_port = port_after(text, "gRPC on 127.0.0.1:");
      break;
    }
    // Later output stays in the pipe (kept open: a write to a closed one would end the server).
    REQUIRE(http_port != 0);
    REQUIRE(grpc_port != 0);
  }
  oip_serve_process(const oip_serve_process&) = delete;
  oip_serve_process& operator=(const oip_serve_process&) = delete;
  ~oip_serve_process() {
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    if (lines_ != nullptr) fclose(lines_);
  }

  [[nodiscard]] std::string http_address() const {
    return "127.0.0.1:" + std::to_string(http_port);
  }
  [[nodiscard]] std::string grpc_address() const {
    return "127.0.0.1:" + std::to_string(grpc_port);
  }

  std::uint16_t http_port = 0;
  std::uint16_t grpc_port = 0;

 private:
  static std::uint16_t port_after(const std::string& text, const std::string& marker) {
    const std::size_t at = text.find(marker);
    if (at == std::string::npos) return 0;
    return static_cast<std::uint16_t>(std::stoul(text.substr(at + marker.size())));
  }

  pid_t pid_ = -1;
  FILE* lines_ = nullptr;
};

}  // namespace oip::testing
