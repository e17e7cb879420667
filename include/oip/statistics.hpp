#pragma once
/// \file
/// Triton's statistics extension: the counters of a model version, and a reading of them as the
/// protocol reports it (`/v2/models[/<m>]/stats`, gRPC `ModelStatistics`).

#include <oip/export.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace oip {

/// Why a request failed: the `reason` label of Triton's `nv_inference_request_failure`.
enum class failure_reason : std::uint8_t {
  rejected,  ///< REJECTED: not run: a full queue, its timeout expired, or the model stopping
  canceled,  ///< CANCELED: the client cancelled it (or went away) before it ran
  backend,   ///< BACKEND: the model failed, or its outputs did not fit its configuration
  other,     ///< OTHER: anything else, a request that fails validation included
};
inline constexpr std::size_t failure_reason_count = 4;

/// Counters of one model version, in Triton's statistics shape. Durations in nanoseconds. Every
/// figure but the pending requests is written and read under one lock, so that a reading is
/// consistent (perf_analyzer stops when the compute counts of two snapshots do not agree): a
/// request's success, durations and inference count are one step, an execution and its batch
/// statistics another.
class OIP_EXPORT model_statistics {
 public:
  struct duration {
    std::uint64_t count = 0;
    std::uint64_t ns = 0;
    void add(std::uint64_t nanoseconds) noexcept {
      count += 1;
      ns += nanoseconds;
    }
  };
  /// Compute durations of the executions of one batch size (Triton's `batch_stats`).
  struct batch_durations {
    std::uint64_t count = 0;
    std::uint64_t compute_input_ns = 0;
    std::uint64_t compute_infer_ns = 0;
    std::uint64_t compute_output_ns = 0;
  };
  /// Upper bounds, in microseconds, of the request latency histogram's buckets (a last bucket
  /// takes everything above).
  static constexpr std::array<std::uint64_t, 14> latency_bounds_us{
      100,    250,    500,     1'000,   2'500,   5'000,     10'000,
      25'000, 50'000, 100'000, 250'000, 500'000, 1'000'000, 5'000'000};

  /// Upper bounds, in milliseconds, of the time-to-first-response histogram's buckets (a last
  /// bucket takes everything above).
  static constexpr std::array<std::uint64_t, 11> first_response_bounds_ms{
      1, 5, 10, 20, 50, 100, 200, 500, 1'000, 2'000, 5'000};

  /// The responses at one place in decoupled models' streams (the first, the second, ...), as
  /// Triton's `response_stats`: a response sent (from the end of the one before, or the start of
  /// the execution, to the model's `send`, then until it was handed to the transport; `success`
  /// is both), a flag-only final, an error that ended a stream, or a stream cancelled there.
  struct response_durations {
    duration compute_infer, compute_output, success, fail, empty_response, cancel;
  };
  /// The places counted in `figures::responses`: a longer stream's later responses are not, so
  /// that a client's long streams cannot grow the statistics without bound.
  static constexpr std::uint64_t response_places = 1024;
  /// How a decoupled model's stream went on at one response.
  enum class response_outcome : std::uint8_t { sent, empty_final, failed, cancelled };

  /// One successful request's durations.
  struct request_durations {
    std::uint64_t queue_ns = 0;
    std::uint64_t compute_input_ns = 0;
    std::uint64_t compute_infer_ns = 0;
    std::uint64_t compute_output_ns = 0;
    std::uint64_t total_ns = 0;  ///< from arrival to reply: `success` and the histogram
    /// From arrival to the request's first response, when that is its reply (0: it was recorded
    /// with `add_first_response` as it went out, or there was none).
    std::uint64_t first_response_ns = 0;
  };

  /// Everything counted, as one reading.
  struct figures {
    std::uint64_t last_inference_ms = 0;  ///< milliseconds since the epoch
    std::uint64_t inference_count = 0;    ///< inferences, counting each batch row
    std::uint64_t execution_count = 0;    ///< model executions
    duration success, fail, queue, compute_input, compute_infer, compute_output;
    /// Requests answered from the response cache (the time to find and copy the response), and
    /// successful ones it missed (the time to look, then to offer it their response), as
    /// Triton's `cache_hit` and `cache_miss`.
    duration cache_hit, cache_miss;
    /// Failures by `failure_reason`; they add up to `fail.count`.
    std::array<std::uint64_t, failure_reason_count> failures{};
    /// Successful requests by latency (from arrival to reply): one count per bucket of
    /// `latency_bounds_us`, then the overflow bucket. Its sum and count are `success`'s.
    std::array<std::uint64_t, latency_bounds_us.size() + 1> latency_buckets{};
    /// Executions by batch size, ascending.
    std::map<std::uint64_t, batch_durations> batches;
    /// Requests by the time from their arrival to their first response: one count per bucket of
    /// `first_response_bounds_ms`, then the overflow bucket (Triton's
    /// `nv_inference_first_response_histogram_ms`); `first_response` is their sum and count.
    std::array<std::uint64_t, first_response_bounds_ms.size() + 1> first_response_buckets{};
    duration first_response;
    /// Decoupled models' responses by their index in the request's stream, from 0 (up to
    /// `response_places`).
    std::map<std::uint64_t, response_durations> responses;
  };

  /// Records one successful request of `rows` inferences (batch rows), finished at `now_ms`
  /// (milliseconds since the epoch).
  void add_success(const request_durations& took, std::uint64_t rows,
                   std::uint64_t now_ms) noexcept;
  /// Records one request answered from the response cache: `total_ns` from its arrival to its
  /// reply, `queue_ns` until the lookup, `lookup_ns` for it. As in Triton, a success that counts
  /// no inference and no execution.
  void add_cache_hit(std::uint64_t total_ns, std::uint64_t queue_ns, std::uint64_t lookup_ns,
                     std::uint64_t now_ms) noexcept;
  /// Records one successful request that the response cache missed: `nanoseconds` to look, then
  /// to offer the cache its response.
  void add_cache_miss(std::uint64_t nanoseconds) noexcept;
  /// Records one execution of `batch_size` rows.
  void add_execution(std::uint64_t batch_size, const batch_durations& took);
  /// Records a request's first response, `nanoseconds` after its arrival.
  void add_first_response(std::uint64_t nanoseconds) noexcept;
  /// Records what happened at response `index` of a decoupled model's stream: `infer_ns` from the
  /// response before (or the start of the execution), `output_ns` to hand it over.
  void add_response(std::uint64_t index, response_outcome outcome, std::uint64_t infer_ns,
                    std::uint64_t output_ns);
  /// Records one failed request, `nanoseconds` after its arrival.
  void add_failure(std::uint64_t nanoseconds, failure_reason why) noexcept;
  [[nodiscard]] figures read() const;

  /// Requests accepted and not yet handed to the model (Triton's
  /// `nv_inference_pending_request_count`): the service counts one in when it queues a request
  /// and out when the request runs or fails before it.
  void request_queued() noexcept { pending_.fetch_add(1, std::memory_order_relaxed); }
  void request_dequeued() noexcept { pending_.fetch_sub(1, std::memory_order_relaxed); }
  [[nodiscard]] std::uint64_t pending_requests() const noexcept {
    return pending_.load(std::memory_order_relaxed);
  }

  /// Records how long one call of the model's `execute` held the thread that made it: until the
  /// model called `finish`, when it did within the call, else until the call returned.
  void add_execute_call(std::uint64_t nanoseconds) noexcept;
  /// How long the model's `execute` calls have lately held their thread: an average that weighs
  /// the last eight calls most, so that it follows a model that turns slower or faster. Empty
  /// before the first call. The service runs a model inline when it is short
  /// (`server_options::inline_below`).
  [[nodiscard]] std::optional<std::uint64_t> recent_execute_call_ns() const noexcept {
    const std::uint64_t recent = recent_call_ns_.load(std::memory_order_relaxed);
    if (recent == no_call) return std::nullopt;
    return recent;
  }

 private:
  mutable std::mutex mutex_;
  figures figures_;
  std::atomic<std::uint64_t> pending_{0};
  static constexpr std::uint64_t no_call = ~std::uint64_t{0};
  std::atomic<std::uint64_t> recent_call_ns_{no_call};
};

/// A model's statistics at one moment, in the shape of Triton's statistics extension.
/// The counted figures (`model_statistics::figures`) and what is known of the model now.
struct statistics_snapshot : model_statistics::figures {
  using duration = model_statistics::duration;
  std::string name;
  std::uint64_t version = 0;
  /// Requests accepted and not yet handed to the model.
  std::uint64_t pending_requests = 0;
  /// Sequences holding state now; empty for a model that is not a sequence model.
  std::optional<std::uint64_t> active_sequences;
};

}  // namespace oip
