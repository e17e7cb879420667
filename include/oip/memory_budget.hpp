#pragma once
/// \file
/// `oip::memory_budget`: one bound on the bytes that the whole server holds for requests and
/// replies in flight, whatever the transport and however many connections there are.

#include <oip/export.hpp>
#include <oip/status.hpp>

#include <atomic>
#include <cstddef>
#include <memory>

namespace oip {

/// The bytes a server holds for requests and replies in flight, and their bound
/// (`limits::max_inflight_bytes`). A transport reserves a request's bytes before it reads them
/// (an HTTP body from its Content-Length, a chunked body as it grows, a gRPC message from its
/// size) and counts its replies until they are written; what does not fit now is answered 503,
/// and what could not fit even alone 413 (gRPC: `RESOURCE_EXHAUSTED`).
///
/// Example:
/// \code
///   oip::memory_budget budget{std::size_t{1} << 30};
///   oip::result<oip::memory_budget::lease> held = budget.reserve(content_length);
///   if (!held) return held.error();  // 503: the server holds too much already (413: too large)
///   // ... read the body; the bytes are given back when `*held` is destroyed
/// \endcode
class OIP_EXPORT memory_budget {
  struct counter {
    std::size_t capacity = 0;
    std::atomic<std::size_t> held{0};
  };

 public:
  /// A share of the budget, given back when the lease is destroyed (or `release`d). Move-only;
  /// it may outlive the budget that made it.
  class OIP_EXPORT lease {
   public:
    lease() = default;
    lease(lease&& other) noexcept;
    lease& operator=(lease&& other) noexcept;
    lease(const lease&) = delete;
    lease& operator=(const lease&) = delete;
    ~lease() { release(); }

    /// Takes `bytes` more, or (with nothing taken) a 503 where they do not fit beside what the
    /// other leases hold, a 413 (`payload_too_large`) where the lease would pass the whole bound.
    [[nodiscard]] status grow(std::size_t bytes);
    /// Takes as many bytes more as fit, from `most` down to `least` (the excess over `least`
    /// halved at each try), and says how many; or what `grow(least)` says where not even those
    /// fit. For a buffer that grows geometrically: near the bound it still grows.
    [[nodiscard]] result<std::size_t> grow_between(std::size_t least, std::size_t most);
    /// Takes `bytes` more even past the bound: for what the server holds already (a reply made
    /// of a model's outputs), so that what comes next is refused until it is written.
    void add(std::size_t bytes) noexcept;
    /// Gives back all but `bytes` of what the lease holds.
    void shrink_to(std::size_t bytes) noexcept;
    void release() noexcept { shrink_to(0); }
    [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }
    /// The bound of the budget it is a share of (0 for a lease of none).
    [[nodiscard]] std::size_t capacity() const noexcept;

   private:
    friend class memory_budget;
    explicit lease(std::shared_ptr<counter> budget) noexcept : budget_{std::move(budget)} {}
    std::shared_ptr<counter> budget_;
    std::size_t bytes_ = 0;
  };

  /// A budget of `capacity` bytes; 0 means none at all (every reservation of a byte or more is
  /// refused).
  explicit memory_budget(std::size_t capacity);

  /// A lease on `bytes`, or a 503 that says how much the server holds, where they do not fit now
  /// (a 413 where they are above `capacity`).
  [[nodiscard]] result<lease> reserve(std::size_t bytes);
  /// An empty lease, to `grow` or `add` to as bytes arrive.
  [[nodiscard]] lease open();

  [[nodiscard]] std::size_t capacity() const noexcept { return counter_->capacity; }
  /// What the leases hold now.
  [[nodiscard]] std::size_t held() const noexcept { return counter_->held.load(); }

 private:
  std::shared_ptr<counter> counter_;
};

/// The machine's physical memory in bytes (0 when the system does not say).
[[nodiscard]] OIP_EXPORT std::size_t physical_memory_bytes() noexcept;

}  // namespace oip
