#include <oip/cuda/device.hpp>
#include <oip/cuda/memory_pool.hpp>

#include <algorithm>
#include <bit>
#include <charconv>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <cuda_runtime.h>

namespace oip::cuda {

namespace {

std::string version_text(int version) {
  return fmt::format("{}.{}", version / 1000, version % 1000 / 10);
}

probe_result probe_once() {
  probe_result out;
  cudaRuntimeGetVersion(&out.runtime_version);
  cudaDriverGetVersion(&out.driver_version);
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  out.error = static_cast<int>(error);
  if (error == cudaSuccess && count > 0) {
    out.device_count = count;
    cudaDeviceProp properties{};
    cudaGetDeviceProperties(&properties, 0);
    out.message = fmt::format(
        "{} CUDA device(s); device 0: {} (compute capability {}.{}, {} MiB), driver {}, runtime {}",
        count, properties.name, properties.major, properties.minor,
        properties.totalGlobalMem >> 20U, version_text(out.driver_version),
        version_text(out.runtime_version));
    return out;
  }
  cudaGetLastError();  // clear the sticky error for later calls
  if (error == cudaSuccess || error == cudaErrorNoDevice) {
    out.absent = true;
    out.message = "no CUDA device on this machine";
  } else if ((error == cudaErrorInsufficientDriver && out.driver_version == 0) ||
             error == cudaErrorStubLibrary) {
    // No driver at all, or only the toolkit's stub libcuda: nothing here to run on.
    out.absent = true;
    out.message = "no CUDA driver installed (no GPU on this machine)";
  } else {
    out.message = fmt::format("a CUDA device cannot be used: {} (error {}; driver {}, runtime {})",
                              cudaGetErrorString(error), out.error,
                              version_text(out.driver_version), version_text(out.runtime_version));
  }
  return out;
}

}  // namespace

probe_result probe() {
  static const probe_result once = probe_once();
  return once;
}

result<device_selection> select_device(std::string_view choice) {
  if (choice == "cpu") return device_selection{backend::cpu, 0, "the CPU, as asked (--device cpu)"};
  const probe_result found = probe();
  if (choice == "auto") {
    if (found.usable()) {
      return device_selection{backend::cuda, 0, fmt::format("CUDA: {}", found.message)};
    }
    return device_selection{backend::cpu, 0, fmt::format("the CPU: {}", found.message)};
  }
  int index = 0;
  if (choice.starts_with("cuda:")) {
    const std::string_view digits = choice.substr(5);
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec != std::errc{} || end != digits.data() + digits.size() || digits.empty() || index < 0) {
      return status{errc::invalid_argument,
                    fmt::format("bad device '{}': expected auto, cpu, cuda or cuda:N", choice)};
    }
  } else if (choice != "cuda") {
    return status{errc::invalid_argument,
                  fmt::format("bad device '{}': expected auto, cpu, cuda or cuda:N", choice)};
  }
  if (!found.usable()) {
    return status{errc::unavailable,
                  fmt::format("CUDA device {} cannot be used: {}", index, found.message)};
  }
  if (index >= found.device_count) {
    return status{errc::unavailable, fmt::format("CUDA device {} does not exist ({} found)", index,
                                                 found.device_count)};
  }
  cudaDeviceProp properties{};
  cudaGetDeviceProperties(&properties, index);
  return device_selection{backend::cuda, index,
                          fmt::format("CUDA device {}: {} (compute capability {}.{})", index,
                                      properties.name, properties.major, properties.minor)};
}

// --- memory_pool ------------------------------------------------------------------------------

struct memory_pool::state {
  allocator source;
  std::size_t max_cached_bytes = 0;
  mutable std::mutex mutex;
  std::map<std::size_t, std::vector<void*>> cached;  // by block size
  statistics stats;
  bool closed = false;  // the pool is gone: released blocks are freed, not cached

  // Takes cached blocks out until at most `limit` bytes stay cached; the caller frees them.
  std::vector<void*> trim_locked(std::size_t limit) {
    std::vector<void*> out;
    for (auto it = cached.rbegin(); it != cached.rend() && stats.bytes_cached > limit; ++it) {
      while (!it->second.empty() && stats.bytes_cached > limit) {
        out.push_back(it->second.back());
        it->second.pop_back();
        stats.bytes_cached -= it->first;
      }
    }
    return out;
  }

  void release(void* block, std::size_t size) {
    {
      const std::lock_guard lock{mutex};
      stats.bytes_in_use -= size;
      if (!closed) {
        cached[size].push_back(block);
        stats.bytes_cached += size;
        return;
      }
    }
    source.deallocate(block);
  }
};

memory_pool::memory_pool(allocator source, std::size_t max_cached_bytes)
    : state_{std::make_shared<state>()} {
  state_->source = std::move(source);
  state_->max_cached_bytes = max_cached_bytes;
}

memory_pool::memory_pool(memory_pool&&) noexcept = default;

memory_pool::~memory_pool() {
  if (!state_) return;
  std::vector<void*> blocks;
  {
    const std::lock_guard lock{state_->mutex};
    state_->closed = true;
    blocks = state_->trim_locked(0);
  }
  for (void* block : blocks) state_->source.deallocate(block);
}

std::size_t memory_pool::block_size(std::size_t size) noexcept {
  return std::bit_ceil(std::max(size, min_block));
}

result<std::shared_ptr<void>> memory_pool::acquire(std::size_t size) {
  if (size > (std::size_t{1} << 62U)) {
    return status{errc::unavailable, fmt::format("cannot allocate {} bytes", size)};
  }
  const std::size_t block = block_size(size);
  void* found = nullptr;
  std::vector<void*> surplus;
  {
    const std::lock_guard lock{state_->mutex};
    auto it = state_->cached.find(block);
    if (it != state_->cached.end() && !it->second.empty()) {
      found = it->second.back();
      it->second.pop_back();
      state_->stats.bytes_cached -= block;
      ++state_->stats.reuses;
    }
    surplus = state_->trim_locked(state_->max_cached_bytes);
  }
  for (void* p : surplus) state_->source.deallocate(p);
  if (found == nullptr) {
    found = state_->source.allocate(block);
    if (found == nullptr) {
      // Cached blocks of other sizes may be what stands in the way: give them back and retry.
      std::vector<void*> all;
      {
        const std::lock_guard lock{state_->mutex};
        all = state_->trim_locked(0);
      }
      for (void* p : all) state_->source.deallocate(p);
      found = state_->source.allocate(block);
      if (found == nullptr) {
        return status{errc::unavailable,
                      fmt::format("out of memory: cannot allocate a block of {} bytes", block)};
      }
    }
    const std::lock_guard lock{state_->mutex};
    ++state_->stats.allocations;
  }
  {
    const std::lock_guard lock{state_->mutex};
    state_->stats.bytes_in_use += block;
  }
  return std::shared_ptr<void>(found,
                               [owner = state_, block](void* p) { owner->release(p, block); });
}

memory_pool::statistics memory_pool::stats() const {
  const std::lock_guard lock{state_->mutex};
  return state_->stats;
}

memory_pool memory_pool::device(int device, std::size_t max_cached_bytes) {
  return memory_pool{
      {[device](std::size_t size) -> void* {
         void* p = nullptr;
         if (cudaSetDevice(device) != cudaSuccess || cudaMalloc(&p, size) != cudaSuccess) {
           cudaGetLastError();
           return nullptr;
         }
         return p;
       },
       [device](void* p) {
         cudaSetDevice(device);
         cudaFree(p);
       }},
      max_cached_bytes};
}

memory_pool memory_pool::pinned(std::size_t max_cached_bytes) {
  return memory_pool{{[](std::size_t size) -> void* {
                        void* p = nullptr;
                        if (cudaMallocHost(&p, size) != cudaSuccess) {
                          cudaGetLastError();
                          return nullptr;
                        }
                        return p;
                      },
                      [](void* p) { cudaFreeHost(p); }},
                     max_cached_bytes};
}

}  // namespace oip::cuda
