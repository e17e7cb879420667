#pragma once
/// \file
/// A caching allocator for device memory and pinned host memory: blocks are rounded up to a power
/// of two (at least 256 bytes) and kept for reuse when released, so that once the pool is warm a
/// request costs no `cudaMalloc` or `cudaMallocHost`. The allocator behind it is a parameter,
/// which lets the pool's bookkeeping run (and be tested) without a GPU.

#include <oip/export.hpp>
#include <oip/status.hpp>

#include <cstddef>
#include <functional>
#include <memory>

namespace oip::cuda {

/// Thread-safe. Releasing a block (dropping its last `std::shared_ptr`) only files it back while
/// the pool exists (a block released after the pool is gone is freed then); freeing cached blocks
/// beyond `max_cached_bytes` happens in `acquire`.
///
/// Example:
/// \code
///   oip::cuda::memory_pool pool = oip::cuda::memory_pool::pinned();
///   oip::result<std::shared_ptr<void>> staging = pool.acquire(bytes);
///   if (!staging) return staging.error();
///   std::memcpy(staging->get(), source, bytes);
/// \endcode
class OIP_EXPORT memory_pool {
 public:
  /// How the pool gets and returns memory: `allocate` returns null on failure.
  struct allocator {
    std::function<void*(std::size_t)> allocate;
    std::function<void(void*)> deallocate;
  };

  struct statistics {
    std::size_t bytes_in_use = 0;  ///< held by blocks handed out
    std::size_t bytes_cached = 0;  ///< released blocks kept for reuse
    std::size_t allocations = 0;   ///< calls to the allocator
    std::size_t reuses = 0;        ///< acquisitions served from the cache
  };

  static constexpr std::size_t min_block = 256;

  memory_pool(allocator source, std::size_t max_cached_bytes);
  memory_pool(memory_pool&&) noexcept;
  memory_pool& operator=(memory_pool&&) = delete;
  memory_pool(const memory_pool&) = delete;
  memory_pool& operator=(const memory_pool&) = delete;
  /// Frees the cached blocks. Blocks still out are freed when they are released.
  ~memory_pool();

  /// Memory on CUDA device `device` (`cudaMalloc`), cached up to `max_cached_bytes`.
  [[nodiscard]] static memory_pool device(int device, std::size_t max_cached_bytes = 1ULL << 30U);
  /// Page-locked host memory (`cudaMallocHost`), for asynchronous copies.
  [[nodiscard]] static memory_pool pinned(std::size_t max_cached_bytes = 256ULL << 20U);

  /// A block of at least `size` bytes (a cached one when there is one); it returns to the pool
  /// when its last copy is dropped. `errc::unavailable` when the allocator fails.
  [[nodiscard]] result<std::shared_ptr<void>> acquire(std::size_t size);

  [[nodiscard]] statistics stats() const;

  /// The size of the block that `acquire(size)` hands out.
  [[nodiscard]] static std::size_t block_size(std::size_t size) noexcept;

 private:
  struct state;
  std::shared_ptr<state> state_;
};

}  // namespace oip::cuda
