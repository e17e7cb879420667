#pragma once
// Debian's abseil is built without NDEBUG, so its mutexes run the debug build's deadlock
// detection: every lock and unlock of grpc++'s many mutexes also updates a process-wide graph of
// lock order, under a lock of its own, which is about a tenth of the instructions of a small call.
// A release build of abseil has it off; oip's gRPC server and client turn it off the same way,
// unless they are told to keep it (`keep_abseil_deadlock_detection`).

#include <absl/synchronization/mutex.h>

namespace oip::grpc::detail {

/// Turns abseil's mutex deadlock detection off for the process, unless `keep`.
inline void settle_deadlock_detection(bool keep) {
  if (!keep) absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace oip::grpc::detail
