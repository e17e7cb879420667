#pragma once
/// \file
/// The models a server holds, by name and version, safe to change while requests are in flight.

#include <oip/export.hpp>
#include <oip/model.hpp>
#include <oip/parameters.hpp>
#include <oip/status.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace oip {

/// Counters of one model version, in Triton's statistics shape. Durations in nanoseconds.
struct model_statistics {
  struct duration {
    std::atomic<std::uint64_t> count{0};
    std::atomic<std::uint64_t> ns{0};
    void add(std::uint64_t nanoseconds) noexcept {
      count.fetch_add(1, std::memory_order_relaxed);
      ns.fetch_add(nanoseconds, std::memory_order_relaxed);
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

  std::atomic<std::uint64_t> last_inference_ms{0};  ///< milliseconds since the epoch
  std::atomic<std::uint64_t> inference_count{0};    ///< inferences, counting each batch row
  std::atomic<std::uint64_t> execution_count{0};    ///< model executions
  duration success, fail, queue, compute_input, compute_infer, compute_output;

  /// Successful requests by latency (from arrival to reply): one count per bucket of
  /// `latency_bounds_us`, then the overflow bucket. Its sum and count are `success`'s.
  std::array<std::atomic<std::uint64_t>, latency_bounds_us.size() + 1> latency_buckets{};

  /// One successful request's durations.
  struct request_durations {
    std::uint64_t queue_ns = 0;
    std::uint64_t compute_input_ns = 0;
    std::uint64_t compute_infer_ns = 0;
    std::uint64_t compute_output_ns = 0;
    std::uint64_t total_ns = 0;  ///< from arrival to reply: `success` and the histogram
  };
  /// Records one successful request: its durations, its latency and its histogram bucket, as one
  /// step that `read_consistently` never sees half done (perf_analyzer stops when the compute
  /// counts of two snapshots do not agree).
  void add_success(const request_durations& took) noexcept {
    const std::uint64_t us = took.total_ns / 1000;
    std::size_t bucket = 0;
    while (bucket < latency_bounds_us.size() && us > latency_bounds_us[bucket]) ++bucket;
    const std::lock_guard lock{successes_mutex_};
    queue.add(took.queue_ns);
    compute_input.add(took.compute_input_ns);
    compute_infer.add(took.compute_infer_ns);
    compute_output.add(took.compute_output_ns);
    latency_buckets[bucket].fetch_add(1, std::memory_order_relaxed);
    success.add(took.total_ns);
  }
  /// Calls `read()` while no success is being recorded: what it reads of the successes' figures
  /// (`success`, `queue`, the compute durations, `latency_buckets`) is consistent.
  template <class Read>
  void read_consistently(Read&& read) const {
    const std::lock_guard lock{successes_mutex_};
    std::forward<Read>(read)();
  }

  /// Records one successful execution of `batch_size` rows.
  void add_execution(std::uint64_t batch_size, const batch_durations& took) {
    const std::lock_guard lock{batches_mutex_};
    batch_durations& sum = batches_[batch_size];
    sum.count += 1;
    sum.compute_input_ns += took.compute_input_ns;
    sum.compute_infer_ns += took.compute_infer_ns;
    sum.compute_output_ns += took.compute_output_ns;
  }
  /// By batch size, ascending.
  [[nodiscard]] std::map<std::uint64_t, batch_durations> executions_by_batch_size() const {
    const std::lock_guard lock{batches_mutex_};
    return batches_;
  }

 private:
  mutable std::mutex successes_mutex_;
  mutable std::mutex batches_mutex_;
  std::map<std::uint64_t, batch_durations> batches_;
};

namespace detail {
struct model_slot;
struct repository_state;
}  // namespace detail

/// A model version held for one request: the model cannot be unloaded from under it. Cheap to
/// move; releasing the last lease of a draining model completes its unload.
class OIP_EXPORT model_lease {
 public:
  model_lease() = default;
  model_lease(std::shared_ptr<detail::repository_state> repository,
              std::shared_ptr<detail::model_slot> slot) noexcept;
  model_lease(model_lease&&) noexcept;
  model_lease& operator=(model_lease&&) noexcept;
  model_lease(const model_lease&) = delete;
  model_lease& operator=(const model_lease&) = delete;
  ~model_lease();

  [[nodiscard]] model& get() const noexcept;
  [[nodiscard]] const std::shared_ptr<model>& shared() const noexcept;
  [[nodiscard]] std::uint64_t version() const noexcept;
  [[nodiscard]] model_statistics& statistics() const noexcept;
  [[nodiscard]] explicit operator bool() const noexcept { return slot_ != nullptr; }

 private:
  void release() noexcept;
  std::shared_ptr<detail::repository_state> repository_;
  std::shared_ptr<detail::model_slot> slot_;
};

/// One row of the repository index (Triton's `POST /v2/repository/index`).
struct model_index_entry {
  std::string name;
  std::uint64_t version = 0;
  std::string state;  ///< READY, UNAVAILABLE (not ready) or UNLOADING (draining)
  std::string reason;
};

/// What the repository extension's load and unload routes call, when the host provides one.
class OIP_EXPORT model_loader {
 public:
  model_loader() = default;
  model_loader(const model_loader&) = delete;
  model_loader& operator=(const model_loader&) = delete;
  virtual ~model_loader();
  /// Models the host could load, by name (shown by the index as UNAVAILABLE until loaded).
  [[nodiscard]] virtual std::vector<std::string> available() const = 0;
  /// Builds the model `name`; the repository registers it as version 1.
  [[nodiscard]] virtual result<std::shared_ptr<model>> load(std::string_view name) = 0;
  /// Builds `name` with the parameters of the client's load request (Triton's `config`, a model
  /// configuration in JSON, and `file:<path>` entries, each a string of the file's bytes, decoded
  /// from base64 when they came over HTTP). Called also to reload a model that is loaded. The
  /// default refuses any parameter with a 400, so that a configuration a loader cannot apply is
  /// never ignored, and calls `load(name)` otherwise.
  [[nodiscard]] virtual result<std::shared_ptr<model>> load_with(std::string_view name,
                                                                 const parameters& request);
};

/// Models by name and version. Versions are positive integers; without a version a request goes
/// to the highest ready version. Every member is thread-safe.
///
/// Removing a model lets the requests already holding it finish: until the last of them is done
/// the model is draining (new requests get 503), then it is gone (404).
///
/// Example:
/// \code
///   oip::model_repository repository;
///   (void)repository.add(oip::make_model(config, run));        // version 1
///   oip::result<oip::model_lease> m = repository.acquire("simple", std::nullopt);
/// \endcode
class OIP_EXPORT model_repository {
 public:
  model_repository();
  model_repository(const model_repository&) = delete;
  model_repository& operator=(const model_repository&) = delete;
  ~model_repository();

  /// Registers `m` under its configured name; 400 when that version is already there.
  [[nodiscard]] status add(std::shared_ptr<model> m, std::uint64_t version = 1);
  /// Registers `m` in place of the version there, if any (a reload): new requests go to `m` at
  /// once, requests that hold the model it replaces finish on it, and its statistics start again.
  [[nodiscard]] status replace(std::shared_ptr<model> m, std::uint64_t version = 1);
  /// Starts unloading one version, or every version; 404 when there is none.
  [[nodiscard]] status remove(std::string_view name,
                              std::optional<std::uint64_t> version = std::nullopt);
  /// Waits until `name` has no version left (draining included), up to `timeout`.
  [[nodiscard]] bool wait_removed(std::string_view name, std::chrono::milliseconds timeout) const;

  /// The model for one request: 404 unknown model or version, 503 draining or not ready.
  [[nodiscard]] result<model_lease> acquire(std::string_view name,
                                            std::optional<std::uint64_t> version) const;
  /// Like acquire, for metadata and statistics: not-ready and draining versions are returned.
  [[nodiscard]] result<model_lease> find(std::string_view name,
                                         std::optional<std::uint64_t> version) const;
  /// Every version of every model, by name then version.
  [[nodiscard]] std::vector<model_index_entry> index() const;
  /// The versions of `name`, ascending (empty when unknown).
  [[nodiscard]] std::vector<std::uint64_t> versions(std::string_view name) const;
  /// Whether every registered model version is ready (and none is draining).
  [[nodiscard]] bool all_ready() const;

  void set_loader(std::shared_ptr<model_loader> loader);
  [[nodiscard]] std::shared_ptr<model_loader> loader() const;

 private:
  std::shared_ptr<detail::repository_state> state_;
};

/// Triton's refusal (501, gRPC UNIMPLEMENTED) of a repository named by a load, an unload or a gRPC
/// index: a server has one.
[[nodiscard]] OIP_EXPORT status repository_name_refused();

/// Triton's message for a model (and version) that the repository does not hold.
[[nodiscard]] OIP_EXPORT status unknown_model(std::string_view name,
                                              std::optional<std::uint64_t> version);

}  // namespace oip
