// The CUDA component's caching allocator, driven by a host allocator: the bookkeeping that the
// device and pinned pools rely on, checked without a GPU.

#include <oip/cuda/memory_pool.hpp>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

namespace {

// malloc/free with counts, and a switch that makes allocation fail.
struct counting_allocator {
  std::atomic<int> allocated{0};
  std::atomic<int> freed{0};
  std::atomic<bool> failing{false};

  oip::cuda::memory_pool::allocator get() {
    return {[this](std::size_t size) -> void* {
              if (failing) return nullptr;
              ++allocated;
              return std::malloc(size);
            },
            [this](void* p) {
              ++freed;
              std::free(p);
            }};
  }
};

}  // namespace

TEST_CASE("blocks are powers of two of at least 256 bytes") {
  using oip::cuda::memory_pool;
  CHECK(memory_pool::block_size(0) == 256);
  CHECK(memory_pool::block_size(1) == 256);
  CHECK(memory_pool::block_size(256) == 256);
  CHECK(memory_pool::block_size(257) == 512);
  CHECK(memory_pool::block_size(3 << 20) == 4 << 20);
}

TEST_CASE("a released block is reused, not allocated again") {
  counting_allocator counts;
  oip::cuda::memory_pool pool{counts.get(), 1 << 20};
  void* first_address = nullptr;
  {
    oip::result<std::shared_ptr<void>> first = pool.acquire(1000);
    REQUIRE(first);
    first_address = first->get();
    std::memset(first->get(), 0xAB, 1000);  // the whole size is usable
    CHECK(pool.stats().bytes_in_use == 1024);
  }
  CHECK(pool.stats().bytes_in_use == 0);
  CHECK(pool.stats().bytes_cached == 1024);
  oip::result<std::shared_ptr<void>> again = pool.acquire(700);  // same block size
  REQUIRE(again);
  CHECK(again->get() == first_address);
  CHECK(counts.allocated == 1);
  CHECK(pool.stats().reuses == 1);
  CHECK(pool.stats().allocations == 1);
  // A different size class needs its own block.
  oip::result<std::shared_ptr<void>> other = pool.acquire(5000);
  REQUIRE(other);
  CHECK(other->get() != first_address);
  CHECK(counts.allocated == 2);
}

TEST_CASE("the cache is trimmed to its limit, and everything is freed at the end") {
  counting_allocator counts;
  {
    oip::cuda::memory_pool pool{counts.get(), 4096};
    {
      std::vector<std::shared_ptr<void>> held;
      for (int i = 0; i < 8; ++i) held.push_back(*pool.acquire(4096));
    }
    // Eight 4 KiB blocks came back; the next acquisition of another size trims to 4 KiB.
    CHECK(pool.stats().bytes_cached == 8 * 4096);
    oip::result<std::shared_ptr<void>> small = pool.acquire(100);
    REQUIRE(small);
    CHECK(pool.stats().bytes_cached <= 4096);
    CHECK(counts.freed >= 7);
  }
  CHECK(counts.freed == counts.allocated);
}

TEST_CASE("an allocator that fails gives an unavailable status, after giving back the cache") {
  counting_allocator counts;
  oip::cuda::memory_pool pool{counts.get(), 1 << 20};
  { auto cached = *pool.acquire(300); }
  counts.failing = true;
  oip::result<std::shared_ptr<void>> none = pool.acquire(10000);
  REQUIRE_FALSE(none);
  CHECK(none.error().code() == oip::errc::unavailable);
  CHECK(none.error().message().find("16384") != std::string::npos);
  CHECK(pool.stats().bytes_cached == 0);  // the cached block was returned to make room
  CHECK(counts.freed == 1);
  oip::result<std::shared_ptr<void>> huge = pool.acquire(std::size_t{1} << 63U);
  REQUIRE_FALSE(huge);
  CHECK(huge.error().code() == oip::errc::unavailable);
}

TEST_CASE("a block released after its pool is gone is freed, not leaked") {
  counting_allocator counts;
  std::shared_ptr<void> survivor;
  {
    oip::cuda::memory_pool pool{counts.get(), 1 << 20};
    survivor = *pool.acquire(64);
  }
  CHECK(counts.freed == 0);
  survivor.reset();
  CHECK(counts.freed == 1);
  CHECK(counts.allocated == 1);
}

TEST_CASE("threads acquire and release concurrently without sharing a block") {
  counting_allocator counts;
  oip::cuda::memory_pool pool{counts.get(), 1 << 20};
  std::atomic<bool> clash{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        std::shared_ptr<void> block = *pool.acquire(static_cast<std::size_t>(256 << (i % 3)));
        auto* bytes = static_cast<unsigned char*>(block.get());
        std::memset(bytes, t, 256);
        for (int j = 0; j < 256; ++j) {
          if (bytes[j] != t) clash = true;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  CHECK_FALSE(clash);
  CHECK(pool.stats().bytes_in_use == 0);
  CHECK(counts.allocated <= 12);  // at most one block per size class per thread
}
