#pragma once
// A stand-in for a GPU runtime's IPC, for the CUDA shared-memory extension on machines without a
// GPU: "device memory" is host memory that the test allocates, a handle is 64 bytes naming one of
// its blocks, and a copy past a block's end fails, as cudaMemcpy does past an allocation. It
// knows each block's extent, as the CUDA runtime does, unless told not to (`knows_extent`).

#include <oip/device_memory.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace oip::testing {

class fake_device_memory final : public device_memory_access {
 public:
  // A block of `size` bytes, and the handle that exports it.
  std::string allocate(std::size_t size) {
    const std::lock_guard lock{mutex_};
    blocks_.emplace_back(size);
    std::string handle(64, '\0');
    const std::uint64_t index = blocks_.size() - 1;
    std::memcpy(handle.data(), &index, sizeof index);
    return handle;
  }
  std::vector<std::byte>& block(std::size_t index) { return blocks_.at(index); }

  result<void*> open(std::span<const std::byte> handle, int device) override {
    const std::lock_guard lock{mutex_};
    std::uint64_t index = 0;
    if (handle.size() != 64 || device != 0 ||
        (std::memcpy(&index, handle.data(), sizeof index), index >= blocks_.size())) {
      return status{errc::invalid_argument, "failed to open CUDA IPC handle: invalid argument"};
    }
    ++opened;
    return static_cast<void*>(blocks_[index].data());
  }
  void close(void* /*memory*/, int /*device*/) noexcept override {
    const std::lock_guard lock{mutex_};
    ++closed;
  }
  std::optional<std::uint64_t> extent(const void* memory, int /*device*/) override {
    if (!knows_extent) return std::nullopt;
    const std::lock_guard lock{mutex_};
    const auto* at = static_cast<const std::byte*>(memory);
    for (const std::vector<std::byte>& b : blocks_) {
      if (at >= b.data() && at <= b.data() + b.size()) {
        return static_cast<std::uint64_t>(b.data() + b.size() - at);
      }
    }
    return std::nullopt;
  }
  status copy_to_host(std::span<std::byte> host, const void* memory, int /*device*/) override {
    if (!inside(memory, host.size())) return past_end();
    if (!host.empty()) std::memcpy(host.data(), memory, host.size());
    return {};
  }
  status copy_to_device(void* memory, std::span<const std::byte> host, int /*device*/) override {
    if (!inside(memory, host.size())) return past_end();
    if (!host.empty()) std::memcpy(memory, host.data(), host.size());
    return {};
  }

  std::atomic<bool> knows_extent{true};
  std::atomic<int> opened{0};
  std::atomic<int> closed{0};

 private:
  bool inside(const void* memory, std::size_t size) {
    const std::lock_guard lock{mutex_};
    const auto* at = static_cast<const std::byte*>(memory);
    return std::any_of(blocks_.begin(), blocks_.end(), [&](const std::vector<std::byte>& b) {
      return at >= b.data() && at <= b.data() + b.size() &&
             size <= static_cast<std::size_t>(b.data() + b.size() - at);
    });
  }
  static status past_end() {
    return status{errc::invalid_argument, "copying a CUDA shared memory region: invalid argument"};
  }

  std::mutex mutex_;
  std::vector<std::vector<std::byte>> blocks_;  // allocated before any is opened
};

}  // namespace oip::testing
