#include <oip/memory_budget.hpp>

#include <algorithm>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include <unistd.h>

namespace oip {

memory_budget::lease::lease(lease&& other) noexcept
    : budget_{std::move(other.budget_)}, bytes_{std::exchange(other.bytes_, 0)} {}

memory_budget::lease& memory_budget::lease::operator=(lease&& other) noexcept {
  if (this != &other) {
    release();
    budget_ = std::move(other.budget_);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

status memory_budget::lease::grow(std::size_t bytes) {
  if (bytes == 0) return {};
  if (!budget_) return status{errc::internal, "a memory lease with no budget"};
  const std::size_t capacity = budget_->capacity;
  if (bytes > capacity || bytes_ > capacity - bytes) {
    // Not even alone would it fit: no retry can pass, so this is the client's request to shrink.
    return status{
        errc::payload_too_large,
        fmt::format("the request needs {} bytes in flight, above the {} bytes that the "
                    "server holds in flight at most",
                    std::min(bytes, std::numeric_limits<std::size_t>::max() - bytes_) + bytes_,
                    capacity)};
  }
  std::size_t held = budget_->held.load(std::memory_order_relaxed);
  for (;;) {
    if (held > capacity - bytes) {
      return status{errc::unavailable,
                    fmt::format("the server holds {} bytes of requests and replies in flight: {} "
                                "more would pass its limit of {} bytes; try again later",
                                held, bytes, capacity)};
    }
    if (budget_->held.compare_exchange_weak(held, held + bytes, std::memory_order_relaxed)) break;
  }
  bytes_ += bytes;
  return {};
}

std::size_t memory_budget::lease::capacity() const noexcept {
  return budget_ ? budget_->capacity : 0;
}

result<std::size_t> memory_budget::lease::grow_between(std::size_t least, std::size_t most) {
  std::size_t take = std::max(least, most);
  for (;;) {
    status grown = grow(take);
    if (grown.ok()) return take;
    if (take <= least) return grown;
    take = least + (take - least) / 2;
  }
}

void memory_budget::lease::add(std::size_t bytes) noexcept {
  if (bytes == 0 || !budget_) return;
  budget_->held.fetch_add(bytes, std::memory_order_relaxed);
  bytes_ += bytes;
}

void memory_budget::lease::shrink_to(std::size_t bytes) noexcept {
  if (bytes >= bytes_ || !budget_) return;
  budget_->held.fetch_sub(bytes_ - bytes, std::memory_order_relaxed);
  bytes_ = bytes;
}

memory_budget::memory_budget(std::size_t capacity) : counter_{std::make_shared<counter>()} {
  counter_->capacity = capacity;
}

result<memory_budget::lease> memory_budget::reserve(std::size_t bytes) {
  lease held{counter_};
  if (status s = held.grow(bytes); !s.ok()) return s;
  return held;
}

memory_budget::lease memory_budget::open() { return lease{counter_}; }

std::size_t physical_memory_bytes() noexcept {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return 0;
  const auto p = static_cast<unsigned long long>(pages);
  const auto size = static_cast<unsigned long long>(page);
  if (p > std::numeric_limits<std::size_t>::max() / size) {
    return std::numeric_limits<std::size_t>::max();
  }
  return static_cast<std::size_t>(p * size);
}

}  // namespace oip
