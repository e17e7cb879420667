#pragma once
// A POSIX shared-memory object that a test (the client) creates, maps and removes: what Triton's
// clients do before they register a region.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

namespace oip::testing {

class shm_object {
 public:
  shm_object(const std::string& tag, std::size_t size)
      : key_{"/oip_test_" + std::to_string(getpid()) + "_" + tag}, size_{size} {
    const int fd = shm_open(key_.c_str(), O_CREAT | O_RDWR | O_TRUNC, 0600);
    REQUIRE(fd >= 0);
    REQUIRE(ftruncate(fd, static_cast<off_t>(size)) == 0);
    void* at = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    REQUIRE(at != MAP_FAILED);
    bytes_ = static_cast<std::byte*>(at);
  }
  shm_object(const shm_object&) = delete;
  shm_object& operator=(const shm_object&) = delete;
  ~shm_object() {
    munmap(bytes_, size_);
    shm_unlink(key_.c_str());
  }

  [[nodiscard]] const std::string& key() const { return key_; }
  template <class T>
  void put(std::size_t byte_offset, const std::vector<T>& values) {
    std::memcpy(bytes_ + byte_offset, values.data(), values.size() * sizeof(T));
  }
  template <class T>
  [[nodiscard]] std::vector<T> get(std::size_t byte_offset, std::size_t count) const {
    std::vector<T> out(count);
    std::memcpy(out.data(), bytes_ + byte_offset, count * sizeof(T));
    return out;
  }

 private:
  std::string key_;
  std::size_t size_;
  std::byte* bytes_ = nullptr;
};

inline std::vector<std::int32_t> iota(std::int32_t from, std::size_t n) {
  std::vector<std::int32_t> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = from + static_cast<std::int32_t>(i);
  return out;
}

}  // namespace oip::testing
