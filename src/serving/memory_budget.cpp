#include <oip/memory_budget.hpp>

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
  std::size_t held = budget_->held.load(std::memory_order_relaxed);
  for (;;) {
    if (bytes > budget_->capacity || held > budget_->capacity - bytes) {
      return status{errc::unavailable,
                    fmt::format("the server holds {} bytes of requests and replies in flight: {} "
                                "more would pass its limit of {} bytes; try again later",
                                held, bytes, budget_->capacity)};
    }
    if (budget_->held.compare_exchange_weak(held, held + bytes, std::memory_order_relaxed)) break;
  }
  bytes_ += bytes;
  return {};
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
