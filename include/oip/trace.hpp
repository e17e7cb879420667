#pragma once
/// \file
/// Triton's trace extension: a sample of the requests (one in `rate`, `count` of them at most)
/// leaves its timestamps in the host's trace file, in Triton's JSON shape. Settings are global,
/// and a model may override any of them; clients read and change them over HTTP
/// (`/v2[/models/<m>]/trace/setting`) and gRPC (`TraceSetting`). The file is the host's alone:
/// a client that could name it could make the server write anywhere.

#include <oip/export.hpp>
#include <oip/status.hpp>
#include <oip/tensor.hpp>
#include <oip/trace_settings.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace oip {

/// The trace settings of one server, and the traces they take. Thread-safe.
///
/// Example:
/// \code
///   oip::trace_settings host;
///   host.level = oip::trace_level::timestamps;
///   host.rate = 100;
///   host.file = "/tmp/trace.json";
///   oip::tracer traces{host};
///   if (std::optional<oip::tracer::sampled> chosen = traces.sample("simple")) { /* ... */ }
/// \endcode
class OIP_EXPORT tracer {
 public:
  using clock = std::chrono::steady_clock;

  /// A request chosen for tracing: its trace's id, and what its trace records.
  struct sampled {
    std::uint64_t id = 0;
    trace_level level = trace_level::timestamps;
  };

  /// A traced request: its model and id, its timestamps in the order they were taken, and its
  /// tensors' entries (`tensor_entry`, joined by commas). `level` says which of them the file
  /// gets.
  struct record {
    std::uint64_t id = 0;
    std::string model_name;
    std::uint64_t model_version = 0;
    std::string request_id;
    std::vector<std::pair<std::string_view, clock::time_point>> timestamps;
    trace_level level = trace_level::timestamps;
    std::string tensors{};
  };

  /// A tensor's entry in trace `id`, in Triton's shape, with Triton's name for when it was taken
  /// (`TENSOR_QUEUE_INPUT`, `TENSOR_BACKEND_OUTPUT`). Its values are one text of comma-separated
  /// values, as Triton writes them: numbers in their shortest form, BOOL as 1 and 0, BYTES
  /// elements as JSON strings (bytes that are not UTF-8 become U+FFFD). Made when the tensor is
  /// taken, as Triton does: an input in a client's shared memory may change once it is answered.
  [[nodiscard]] static std::string tensor_entry(std::uint64_t id, std::string_view activity,
                                                const tensor& t);

  explicit tracer(trace_settings host = {});
  tracer(const tracer&) = delete;
  tracer& operator=(const tracer&) = delete;
  /// Completes the trace file (its closing bracket).
  ~tracer();

  /// The global settings (no model) or a model's, its own where it set them.
  [[nodiscard]] trace_settings settings(std::optional<std::string_view> model = std::nullopt) const;
  /// Applies `change` whole, or nothing: 400 for a value that does not parse, is out of range, or
  /// leaves the settings unable to trace (no file, a rate of 0); 501 for `trace_file`. Returns the
  /// settings after it. The caller has checked that `model` exists.
  [[nodiscard]] result<trace_settings> update(std::optional<std::string_view> model,
                                              const trace_settings_change& change);

  /// Whether any request could be sampled now (one atomic load): a transport that would allocate
  /// to take part in traces asks first.
  [[nodiscard]] bool active() const noexcept;
  /// Whether to trace the next request for `model`: its trace's id and level when it is one.
  [[nodiscard]] std::optional<sampled> sample(std::string_view model);
  /// Writes a traced request to the file its model's settings say.
  void write(const record& traced) noexcept;

 private:
  struct state;
  std::unique_ptr<state> state_;
};

/// A sampled request's trace while its transport finishes it: timestamps are added as they are
/// taken, and the trace is written (`tracer::write`) when the last owner lets go of it.
class OIP_EXPORT open_trace {
 public:
  open_trace(std::shared_ptr<tracer> to, tracer::record traced) noexcept;
  open_trace(const open_trace&) = delete;
  open_trace& operator=(const open_trace&) = delete;
  ~open_trace();

  /// Adds a timestamp; `name` must outlive the trace (a literal, in Triton's names).
  void stamp(std::string_view name, tracer::clock::time_point at = tracer::clock::now()) noexcept;

 private:
  std::shared_ptr<tracer> to_;
  tracer::record traced_;
};

/// One timestamp that a transport takes; an empty name is none.
struct trace_stamp {
  std::string_view name;  ///< a literal, such as "HTTP_RECV_START"
  tracer::clock::time_point at{};
};

/// How a transport takes part in a request's trace, as Triton's frontends do: it sets `read` to
/// when it read the request (`HTTP_RECV_START`/`_END`, `GRPC_WAITREAD_START`/`_END`), passes this
/// to `inference_service::infer` (`arrival::trace`), and keeps it alive and in place until its
/// reply sink's `on_complete` has been called. When the tracer sampled the request, the service
/// sets `sampled` before it calls the sink; the transport stamps `INFER_RESPONSE_COMPLETE` and the
/// reply's sending
/// (`HTTP_SEND_START`/`_END`, `GRPC_SEND_START`/`_END`) on it, then lets go of it, which writes
/// the trace. (Triton's `trace_summary.py` reads only traces with a transport's timestamps.)
struct transport_trace {
  std::array<trace_stamp, 2> read{};
  std::shared_ptr<open_trace> sampled;
};

}  // namespace oip
