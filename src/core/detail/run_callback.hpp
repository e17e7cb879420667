#pragma once
// Internal: a callback of the caller's, run on a client's own thread (the HTTP client's I/O thread,
// one of grpc's). An exception from it must not reach that thread's loop, which would end with it
// (grpc's, the process): it is reported on stderr, and the client goes on with its other calls.

#include <cstdio>
#include <exception>
#include <utility>

namespace oip {

template <class Callback, class... Args>
void run_callback(const char* client, Callback& callback, Args&&... args) noexcept {
  try {
    callback(std::forward<Args>(args)...);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: a callback threw: %s\n", client, e.what());
  } catch (...) {
    std::fprintf(stderr, "%s: a callback threw\n", client);
  }
}

}  // namespace oip
