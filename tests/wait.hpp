#pragma once
// Waiting on a condition in a test: bounded, so that a condition that never holds fails the test
// at once instead of running until CTest's timeout.

#include <chrono>
#include <thread>

namespace oip::testing {

/// Whether `condition()` held within `bound`, checked every millisecond.
template <class Condition>
[[nodiscard]] bool wait_until(Condition&& condition,
                              std::chrono::milliseconds bound = std::chrono::seconds{10}) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds{1});
  }
  return true;
}

}  // namespace oip::testing
