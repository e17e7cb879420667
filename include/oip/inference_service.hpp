#pragma once

/// The protocol's operations over a model repository, independent of any transport: the HTTP
/// handler and the gRPC server both sit on one `inference_service`, so that a sequence started over
/// one transport goes on over the other, in order.

#include <oip/access.hpp>
#include <oip/device_memory.hpp>
#include <oip/executor.hpp>
#include <oip/export.hpp>
#include <oip/infer.hpp>
#include <oip/limits.hpp>
#include <oip/memory_budget.hpp>
#include <oip/metadata.hpp>
#include <oip/model.hpp>
#include <oip/reply_sink.hpp>
#include <oip/repository.hpp>
#include <oip/shared_memory.hpp>
#include <oip/status.hpp>
#include <oip/trace.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace oip {

/// Whether clients may load and unload models through the repository extension (Triton's
/// `--model-control-mode`).
enum class model_control_mode : std::uint8_t {
  /// The host's models only: clients' loads and unloads are refused (400, gRPC
  /// FAILED_PRECONDITION); the index still answers.
  none,
  /// Clients load the models that the host's `model_loader` offers, and unload any model.
  explicit_loading,
};

/// Triton's refusal of a load or unload where model control is off, in its words, as a 400.
[[nodiscard]] OIP_EXPORT status model_control_refused();

/// What a host configures about its server, whatever the transport.
struct server_options {
  std::string name = "oip";
  std::string version;  ///< defaults to oip's own version
  limits bounds;
  bool compress_responses = true;
  std::size_t compression_threshold = 1024;  ///< smaller HTTP replies are never compressed
  /// A model whose `execute` calls have lately returned within this
  /// (`model_statistics::recent_execute_call_ns`) runs on the thread that received its request, as
  /// with `model_config::inline_execution`, instead of waiting for an executor worker to wake:
  /// the hand-off costs more than such a model's whole call. Its first request, and any while it
  /// is slower, go to the executor, where its time is measured as well. Sequences, dynamically
  /// batched requests and decoupled models always go to the executor. Zero: only models with
  /// `inline_execution` run inline. A model that is usually quick but sometimes blocks for long
  /// holds up the other connections of that thread when it does: set 0 where such models are.
  std::chrono::microseconds inline_below{10};
  /// Offer Triton's system shared-memory extension: clients register regions of POSIX shared
  /// memory by name, and inputs and outputs pass through them. Off by default: a client that
  /// registers a region maps any shared-memory object it can name that this process may open,
  /// so turn it on only where every client is trusted (as Triton's `--allow-client-shm`).
  bool shared_memory = false;
  /// With `shared_memory`, offer Triton's CUDA shared-memory extension too, through this GPU
  /// runtime (`oip::cuda::ipc_memory_access()`): clients register their device memory by handle,
  /// and inputs and outputs pass through it. Null (the default): CUDA regions are refused (501).
  std::shared_ptr<device_memory_access> device_memory{};
  /// The HTTP routes that need a header (Triton's `--http-restricted-api`); none by default. The
  /// gRPC server has its own set (`grpc::server_options::restricted_protocol`), as in Triton.
  api_restrictions restricted_http_api{};
  /// Triton's trace extension, as the host starts it. Clients may change every setting but the
  /// file (as in Triton), so with a file set any client can have every request traced, a file per
  /// trace with `log_frequency` 1: set one only where clients are trusted.
  trace_settings trace{};
  /// Off by default: a load builds a model (its weights read, its memory taken) and an unload
  /// stops one, so allow clients to only where they are trusted with that.
  model_control_mode model_control = model_control_mode::none;
  /// The bytes that Triton's response cache may hold (as Triton's `--cache-config local,size=`):
  /// the responses of models with `model_config::response_cache` and the keys of the requests
  /// they answer (a copy of their inputs), each entry counted with an allowance for its
  /// allocations, least recently used first out. Zero (the default): no cache. While a request
  /// runs, its key is held in the memory budget (`limits::max_inflight_bytes`).
  std::size_t response_cache_bytes = 0;
};

/// Every operation of the protocol, once, whatever the transport. A transport reads bytes, calls
/// the service and turns what it gets back into bytes; an inference request's whole lifecycle
/// (the model's lease, decoding, shared memory, validation, sequences, batching, the model,
/// statistics, traces, logging) happens here, and its replies reach the transport through a
/// `reply_sink`.
///
/// Example:
/// \code
///   oip::model_repository models;
///   oip::executor workers;
///   oip::inference_service service{models, workers};
///   service.infer({.model = "simple", .cancel = {}}, std::move(request),
///                 oip::reply_to([](oip::result<oip::inference_response> r) {
///                   // encode and send r, or r.error()
///                 }));
/// \endcode
class OIP_EXPORT inference_service {
 public:
  using clock = std::chrono::steady_clock;

  inference_service(model_repository& repository, executor& workers, server_options options = {});
  inference_service(const inference_service&) = delete;
  inference_service& operator=(const inference_service&) = delete;
  ~inference_service();

  [[nodiscard]] const server_options& options() const noexcept;
  [[nodiscard]] model_repository& repository() const noexcept;
  /// The bound on the bytes of requests and replies in flight (`limits::max_inflight_bytes`),
  /// which every transport on this service reserves from.
  [[nodiscard]] memory_budget& memory() const noexcept;

  // --- health and metadata ---------------------------------------------------------------------
  /// Name, version and the extensions oip supports.
  [[nodiscard]] server_metadata metadata() const;
  /// Whether the server takes requests: every model ready, and no shutdown begun.
  [[nodiscard]] bool ready() const;
  /// Readiness turns false from now on (`/v2/health/ready` 503, `ServerReady` false,
  /// grpc.health.v1 `NOT_SERVING`) while every route answers as before, so that load balancers
  /// take the server out of rotation before it stops accepting connections. It is not undone.
  ///
  /// Example (a SIGTERM handler's thread, as oip-serve's `--exit-delay-secs`):
  /// \code
  ///   service.begin_shutdown();
  ///   std::this_thread::sleep_for(exit_delay);  // endpoints are removed meanwhile
  ///   http.stop(exit_timeout);                  // then in-flight requests finish
  /// \endcode
  void begin_shutdown() noexcept;
  [[nodiscard]] bool shutting_down() const noexcept;
  /// 404 for an unknown model or version.
  [[nodiscard]] result<model_metadata> metadata(std::string_view model,
                                                std::optional<std::uint64_t> version) const;
  /// Whether the model can take requests now; 404 for an unknown model or version.
  [[nodiscard]] result<bool> ready(std::string_view model,
                                   std::optional<std::uint64_t> version) const;
  [[nodiscard]] result<model_config> configuration(std::string_view model,
                                                   std::optional<std::uint64_t> version) const;
  /// Every model's (no name), one model's, or one version's; 404 for an unknown model.
  [[nodiscard]] result<std::vector<statistics_snapshot>> statistics(
      std::optional<std::string_view> model, std::optional<std::uint64_t> version) const;

  // --- the model repository extension ----------------------------------------------------------
  /// The registered models and, when a loader is set, the ones it could load (from the names it
  /// lists: no model is built).
  [[nodiscard]] std::vector<model_index_entry> repository_index() const;
  using control_completion = std::function<void(status)>;
  /// Loads `model` through the host's loader (`model_loader::load_with`), with the parameters of
  /// the client's request; a model already loaded is reloaded when parameters are given
  /// (`model_repository::replace`, as in Triton) and left as it is otherwise (whether or not the
  /// loader lists it). A loader that throws fails the load with a 500. Refused at once,
  /// with `done` called on this thread: model control off (`model_control_refused`) or a bad
  /// name. Otherwise everything else happens on the service's model-control thread, one load or
  /// unload at a time, in the order asked (a load asked after an unload of the same model sees
  /// it unloaded), and `done` is called there, never on the caller's thread, which is a
  /// transport's: no loader (400), a name the loader does not list (404), or the model built.
  void load(std::string model, parameters request, control_completion done);
  /// Starts unloading `model` (requests in flight finish on it), on the model-control thread as
  /// `load`; 404 when there is no such model.
  void unload(std::string model, control_completion done);
  /// `load` and `unload`, waiting for the outcome: for a host's own code, never from a model
  /// loader or a load's completion (which run on the model-control thread) or a model's
  /// `release_sequence` (which an unload may wait for): a 500 there.
  [[nodiscard]] status load(std::string model, parameters request = {});
  [[nodiscard]] status unload(std::string model);
  /// Whether clients may load and unload models (`model_control_refused` where they may not): a
  /// transport asks before it decodes a load request's body.
  [[nodiscard]] status model_control_allowed() const;

  // --- the shared-memory extensions ------------------------------------------------------------
  /// The registered regions, or null when `server_options::shared_memory` is off.
  [[nodiscard]] shared_memory_registry* shared_memory() const noexcept;
  /// Every system region (no name) or the one named (404 when unknown). Where the server does not
  /// offer the extension (`server_options::shared_memory` off) there is none, and the clients'
  /// clean-up calls (perf_analyzer unregisters every region, whatever its mode) still succeed.
  [[nodiscard]] result<std::vector<shared_memory_region>> system_shared_memory_status(
      std::optional<std::string_view> region) const;
  /// 501 where the server does not offer the extension.
  [[nodiscard]] status register_system_shared_memory(shared_memory_region region);
  /// Every region (no name) or the one named; an unknown name is not an error (as in Triton).
  [[nodiscard]] status unregister_system_shared_memory(std::optional<std::string_view> region);
  /// Every CUDA region (no name) or the one named (404 when unknown). Where the server does not
  /// offer the CUDA extension (`server_options::device_memory` unset) there is none.
  [[nodiscard]] result<std::vector<cuda_shared_memory_region>> cuda_shared_memory_status(
      std::optional<std::string_view> region) const;
  /// 501 where the server does not offer the CUDA extension; else as
  /// `shared_memory_registry::register_cuda_region`.
  [[nodiscard]] status register_cuda_shared_memory(const cuda_shared_memory_registration& region);
  /// Every CUDA region (no name) or the one named; an unknown name is not an error, and where
  /// the extension is not offered this succeeds too (perf_analyzer unregisters CUDA's regions,
  /// whatever its mode).
  [[nodiscard]] status unregister_cuda_shared_memory(std::optional<std::string_view> region);

  // --- the trace extension ---------------------------------------------------------------------
  /// The global trace settings (no model) or a model's; 400 for a model that is unknown or not
  /// ready, in Triton's words (`Request for unknown model : <m>`).
  [[nodiscard]] result<trace_settings> tracing(std::optional<std::string_view> model) const;
  /// Changes them as `tracer::update` does; 400 for a model that is unknown or not ready.
  [[nodiscard]] result<trace_settings> update_tracing(std::optional<std::string_view> model,
                                                      const trace_settings_change& change);
  /// Whether any request could be traced now (`tracer::active`).
  [[nodiscard]] bool tracing_active() const noexcept;

  // --- inference -------------------------------------------------------------------------------
  /// What a transport knows of a request as it arrives, before its body is decoded.
  struct arrival {
    std::string_view model{};
    std::optional<std::uint64_t> version{};  ///< none: the model's newest
    /// How the client or the transport calls the request off; Triton's `timeout` parameter sets
    /// its deadline.
    cancellation cancel;
    clock::time_point received = clock::now();
    /// The request's id where the transport knows it before decoding (gRPC): for the log line of
    /// a request refused before then.
    std::string_view id{};
    /// How the transport takes part in the request's trace (see `transport_trace`); without, a
    /// sampled request's trace is written once the sink's `on_complete` returns.
    transport_trace* trace = nullptr;
  };

  /// Serves one request: the lease on the model it names (404, or 503 while the model drains or
  /// is not ready), then `decode(config)`, called on this thread with the model's configuration
  /// (which raw binary and generate requests need) to make the request of the transport's bytes,
  /// then as the `infer` below. A failure at any step reaches `sink` as `on_complete` with the
  /// error, recorded in the model's statistics and logged.
  template <class Decode>
  requires std::is_invocable_r_v<result<inference_request>, Decode&, const model_config&> void
  infer(arrival request, Decode&& decode, std::shared_ptr<reply_sink> sink) {
    using function = std::remove_reference_t<Decode>;
    infer_decoding(std::move(request),
                   decoder{const_cast<void*>(static_cast<const void*>(std::addressof(decode))),
                           [](void* f, const model_config& config) -> result<inference_request> {
                             return (*static_cast<function*>(f))(config);
                           }},
                   std::move(sink));
  }

  /// Serves one decoded request: its inputs in shared memory read from their regions and its
  /// outputs' regions looked up (as Triton, when it arrives), validation against the model's
  /// configuration, the sequence rules for a sequence model (one request at a time per sequence,
  /// in arrival order), Triton's `timeout` parameter, dynamic batching, the executor, the model,
  /// then the response with only the requested outputs (classification applied), its outputs in
  /// shared memory written to their regions. `sink` is held until its `on_complete` returns.
  void infer(arrival request, inference_request decoded, std::shared_ptr<reply_sink> sink);

 private:
  // A borrowed decoding function: `infer` calls it before returning, so nothing is allocated.
  struct decoder {
    void* function;
    result<inference_request> (*call)(void* function, const model_config& config);
  };
  void infer_decoding(arrival request, decoder decode, std::shared_ptr<reply_sink> sink);
  // The steps after decoding.
  void infer_decoded(arrival request, model_lease lease, inference_request decoded,
                     std::shared_ptr<reply_sink> sink);

  struct state;
  std::shared_ptr<state> state_;
};

}  // namespace oip
