#include <oip/cuda/ipc_memory.hpp>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#include <fmt/format.h>

#include <cuda.h>  // the driver API's types only: its functions come through the runtime
#include <cuda_runtime.h>

namespace oip::cuda {

namespace {

status failed(std::string_view what, cudaError_t error, errc code = errc::internal) {
  cudaGetLastError();  // a non-sticky error must not fail the next call
  return status{code, fmt::format("{}: {}", what, cudaGetErrorString(error))};
}

// A copy's failure: the client's range (an invalid value: past its allocation, say) is its
// mistake, a 400; anything else is the device's, a 500.
status copy_failed(std::string_view what, cudaError_t error) {
  return failed(what, error,
                error == cudaErrorInvalidValue ? errc::invalid_argument : errc::internal);
}

// The driver's cuMemGetAddressRange, looked up through the runtime: linking the driver library
// would make every program that links oip::cuda need it at load time, GPU or not. Null when the
// driver does not give it.
using address_range_function = CUresult(CUDAAPI*)(CUdeviceptr*, std::size_t*, CUdeviceptr);

address_range_function address_range() {
  static const address_range_function found = []() -> address_range_function {
    void* function = nullptr;
    cudaDriverEntryPointQueryResult query{};
#if CUDART_VERSION >= 12050
    // The ABI of the name as CUDA 12.0 had it: cuMemGetAddressRange_v2.
    const cudaError_t looked_up = cudaGetDriverEntryPointByVersion(
        "cuMemGetAddressRange", &function, 12000, cudaEnableDefault, &query);
#else
    const cudaError_t looked_up =
        cudaGetDriverEntryPoint("cuMemGetAddressRange", &function, cudaEnableDefault, &query);
#endif
    if (looked_up != cudaSuccess || query != cudaDriverEntryPointSuccess || function == nullptr) {
      cudaGetLastError();
      return nullptr;
    }
    return reinterpret_cast<address_range_function>(function);
  }();
  return found;
}

class ipc_access final : public device_memory_access {
 public:
  result<void*> open(std::span<const std::byte> handle, int device) override {
    cudaIpcMemHandle_t ipc{};
    if (handle.size() != sizeof ipc) {
      return status{errc::invalid_argument,
                    fmt::format("failed to open CUDA IPC handle: the handle has {} bytes, a "
                                "cudaIpcMemHandle_t {}",
                                handle.size(), sizeof ipc)};
    }
    std::memcpy(&ipc, handle.data(), sizeof ipc);
    if (const cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
      return failed(fmt::format("failed to open CUDA IPC handle on device {}", device), e,
                    errc::invalid_argument);
    }
    void* memory = nullptr;
    if (const cudaError_t e = cudaIpcOpenMemHandle(&memory, ipc, cudaIpcMemLazyEnablePeerAccess);
        e != cudaSuccess) {
      return failed("failed to open CUDA IPC handle", e, errc::invalid_argument);
    }
    return memory;
  }

  void close(void* memory, int device) noexcept override {
    cudaSetDevice(device);
    cudaIpcCloseMemHandle(memory);
    cudaGetLastError();
  }

  std::optional<std::uint64_t> extent(const void* memory, int device) override {
    const address_range_function range = address_range();
    if (range == nullptr) return std::nullopt;
    if (cudaSetDevice(device) != cudaSuccess) {
      cudaGetLastError();
      return std::nullopt;
    }
    CUdeviceptr base = 0;
    std::size_t size = 0;
    const auto at = static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(memory));
    if (range(&base, &size, at) != CUDA_SUCCESS || at < base || at - base > size) {
      return std::nullopt;
    }
    return size - (at - base);
  }

  status copy_to_host(std::span<std::byte> host, const void* memory, int device) override {
    if (const cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
      return failed("cudaSetDevice", e);
    }
    // Into pageable memory cudaMemcpy returns once the bytes are there.
    if (const cudaError_t e = cudaMemcpy(host.data(), memory, host.size(), cudaMemcpyDeviceToHost);
        e != cudaSuccess) {
      return copy_failed("reading a CUDA shared memory region", e);
    }
    return {};
  }

  status copy_to_device(void* memory, std::span<const std::byte> host, int device) override {
    if (const cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
      return failed("cudaSetDevice", e);
    }
    // From pageable memory cudaMemcpy may return once the bytes are staged, before they reach the
    // device: the reply must not go out before they do, so the copy is waited for on this
    // thread's stream.
    if (const cudaError_t e = cudaMemcpyAsync(memory, host.data(), host.size(),
                                              cudaMemcpyHostToDevice, cudaStreamPerThread);
        e != cudaSuccess) {
      return copy_failed("writing a CUDA shared memory region", e);
    }
    if (const cudaError_t e = cudaStreamSynchronize(cudaStreamPerThread); e != cudaSuccess) {
      return copy_failed("writing a CUDA shared memory region", e);
    }
    return {};
  }
};

}  // namespace

std::shared_ptr<device_memory_access> ipc_memory_access() { return std::make_shared<ipc_access>(); }

}  // namespace oip::cuda
