#pragma once
/// \file
/// What the server needs of a GPU runtime for Triton's CUDA shared-memory extension, where a
/// client on the same host registers device memory of its own (a `cudaIpcMemHandle_t`) and
/// tensors pass through it. The core links no CUDA library: the `cuda` component provides this
/// (`oip::cuda::ipc_memory_access()`), and a host offers the extension by setting
/// `server_options::device_memory`.

#include <oip/export.hpp>
#include <oip/status.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace oip {

/// A GPU runtime's memory operations, as the shared-memory registry uses them. Thread-safe.
class OIP_EXPORT device_memory_access {
 public:
  device_memory_access() = default;
  device_memory_access(const device_memory_access&) = delete;
  device_memory_access& operator=(const device_memory_access&) = delete;
  virtual ~device_memory_access() = default;

  /// Opens memory that another process exported (`handle`: a `cudaIpcMemHandle_t`'s bytes) on
  /// device `device`, in this process; it stays open until `close`. 400 with the runtime's reason
  /// when it cannot be opened.
  [[nodiscard]] virtual result<void*> open(std::span<const std::byte> handle, int device) = 0;
  /// Closes what `open` returned.
  virtual void close(void* memory, int device) noexcept = 0;
  /// The bytes from `memory` (as `open` returned it) to the end of the memory that the handle
  /// exported, where the runtime can tell; none where it cannot. A region that is known to fit
  /// is read in place by a model on its device; one past the end is refused at registration.
  [[nodiscard]] virtual std::optional<std::uint64_t> extent(const void* memory, int device) {
    static_cast<void>(memory);
    static_cast<void>(device);
    return std::nullopt;
  }
  /// Copies `host.size()` bytes from device memory at `memory` into `host`.
  [[nodiscard]] virtual status copy_to_host(std::span<std::byte> host, const void* memory,
                                            int device) = 0;
  /// Copies `host` into device memory at `memory`.
  [[nodiscard]] virtual status copy_to_device(void* memory, std::span<const std::byte> host,
                                              int device) = 0;
};

}  // namespace oip
