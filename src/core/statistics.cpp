// A model version's counters (Triton's statistics extension), written under one lock so that a
// reading is consistent.

#include <oip/statistics.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

namespace oip {

namespace {

// The histogram bucket of `nanoseconds`: the first whose bound (in units of `unit_ns`) it does
// not pass, or the overflow bucket past the last.
template <std::size_t n>
std::size_t bucket_of(const std::array<std::uint64_t, n>& bounds, std::uint64_t unit_ns,
                      std::uint64_t nanoseconds) noexcept {
  std::size_t bucket = 0;
  while (bucket < n && nanoseconds > bounds[bucket] * unit_ns) ++bucket;
  return bucket;
}

}  // namespace

void model_statistics::add_success(const request_durations& took, std::uint64_t rows,
                                   std::uint64_t now_ms) noexcept {
  const std::size_t bucket = bucket_of(latency_bounds_us, 1000, took.total_ns);
  const std::size_t first = bucket_of(first_response_bounds_ms, 1'000'000, took.first_response_ns);
  const std::lock_guard lock{mutex_};
  if (took.first_response_ns != 0) {
    figures_.first_response_buckets[first] += 1;
    figures_.first_response.add(took.first_response_ns);
  }
  figures_.queue.add(took.queue_ns);
  figures_.compute_input.add(took.compute_input_ns);
  figures_.compute_infer.add(took.compute_infer_ns);
  figures_.compute_output.add(took.compute_output_ns);
  figures_.latency_buckets[bucket] += 1;
  figures_.success.add(took.total_ns);
  figures_.inference_count += rows;
  figures_.last_inference_ms = std::max(figures_.last_inference_ms, now_ms);
}

void model_statistics::add_cache_hit(std::uint64_t total_ns, std::uint64_t queue_ns,
                                     std::uint64_t lookup_ns, std::uint64_t now_ms) noexcept {
  const std::size_t bucket = bucket_of(latency_bounds_us, 1000, total_ns);
  const std::size_t first = bucket_of(first_response_bounds_ms, 1'000'000, total_ns);
  const std::lock_guard lock{mutex_};
  figures_.first_response_buckets[first] += 1;
  figures_.first_response.add(total_ns);
  figures_.queue.add(queue_ns);
  figures_.cache_hit.add(lookup_ns);
  figures_.latency_buckets[bucket] += 1;
  figures_.success.add(total_ns);
  figures_.last_inference_ms = std::max(figures_.last_inference_ms, now_ms);
}

void model_statistics::add_cache_miss(std::uint64_t nanoseconds) noexcept {
  const std::lock_guard lock{mutex_};
  figures_.cache_miss.add(nanoseconds);
}

void model_statistics::add_execution(std::uint64_t batch_size, const batch_durations& took) {
  const std::lock_guard lock{mutex_};
  batch_durations& sum = figures_.batches[batch_size];
  sum.count += 1;
  sum.compute_input_ns += took.compute_input_ns;
  sum.compute_infer_ns += took.compute_infer_ns;
  sum.compute_output_ns += took.compute_output_ns;
  figures_.execution_count += 1;
}

void model_statistics::add_first_response(std::uint64_t nanoseconds) noexcept {
  const std::size_t bucket = bucket_of(first_response_bounds_ms, 1'000'000, nanoseconds);
  const std::lock_guard lock{mutex_};
  figures_.first_response_buckets[bucket] += 1;
  figures_.first_response.add(nanoseconds);
}

void model_statistics::add_response(std::uint64_t index, response_outcome outcome,
                                    std::uint64_t infer_ns, std::uint64_t output_ns) {
  const std::lock_guard lock{mutex_};
  response_durations& at = figures_.responses[index];
  switch (outcome) {
    case response_outcome::sent:
      at.compute_infer.add(infer_ns);
      at.compute_output.add(output_ns);
      at.success.add(infer_ns + output_ns);
      break;
    case response_outcome::empty_final: at.empty_response.add(infer_ns + output_ns); break;
    case response_outcome::failed: at.fail.add(infer_ns + output_ns); break;
    case response_outcome::cancelled: at.cancel.add(infer_ns + output_ns); break;
  }
}

void model_statistics::add_failure(std::uint64_t nanoseconds, failure_reason why) noexcept {
  const std::lock_guard lock{mutex_};
  figures_.fail.add(nanoseconds);
  figures_.failures[static_cast<std::size_t>(why)] += 1;
}

void model_statistics::add_execute_call(std::uint64_t nanoseconds) noexcept {
  // An exponential average with weight 1/8 for the new call. Calls that race may lose one
  // another's update: the figure is a hint for choosing a thread, not a count.
  const std::uint64_t recent = recent_call_ns_.load(std::memory_order_relaxed);
  const std::uint64_t next =
      recent == no_call ? nanoseconds : recent - recent / 8 + nanoseconds / 8;
  recent_call_ns_.store(std::min(next, no_call - 1), std::memory_order_relaxed);
}

model_statistics::figures model_statistics::read() const {
  const std::lock_guard lock{mutex_};
  return figures_;
}

}  // namespace oip
