#pragma once
/// \file
/// The CUDA runtime's side of Triton's CUDA shared-memory extension: a client's device memory,
/// exported with `cudaIpcGetMemHandle`, opened in the server with `cudaIpcOpenMemHandle`.

#include <oip/device_memory.hpp>
#include <oip/export.hpp>

#include <memory>

namespace oip::cuda {

/// CUDA IPC through the CUDA runtime, for `server_options::device_memory`: handles of 64 bytes
/// (`cudaIpcMemHandle_t`), opened on the device the client names; copies between host and device
/// memory on that device, an output's waited for before the reply goes out; the extent of the
/// memory a handle exports, from the driver's `cuMemGetAddressRange` (a region past it is refused
/// at registration). Inside that memory the region's size is the client's word, as in Triton: a
/// handle exports the client's whole allocation, and a range past the size it declared but inside
/// that allocation is copied as asked.
///
/// Example:
/// \code
///   oip::server_options options;
///   options.shared_memory = true;
///   options.device_memory = oip::cuda::ipc_memory_access();
/// \endcode
[[nodiscard]] OIP_EXPORT std::shared_ptr<device_memory_access> ipc_memory_access();

}  // namespace oip::cuda
