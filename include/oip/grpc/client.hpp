#pragma once
/// \file
/// A client of any server of the protocol over gRPC (`inference.GRPCInferenceService`: oip-serve,
/// Triton, KServe, MLServer, OpenVINO Model Server): the calls of `in_process_client` and
/// `oip::http::client`, by the same names and with the same results, over one channel (HTTP/2
/// multiplexes every call in flight on it). Thread-safe. Tensors travel as raw contents; a
/// reply's raw contents are moved into its tensors, not copied.
///
/// Example:
/// \code
///   oip::grpc::client client{"127.0.0.1:8001"};
///   oip::result<oip::inference_response> r = client.infer("my_model", request);
///   // A decoupled model's responses, one by one:
///   oip::status end = client.infer_stream("text_stream", request,
///                                         [](oip::inference_response token) { use(token); });
/// \endcode

#include <oip/client_options.hpp>
#include <oip/export.hpp>
#include <oip/infer.hpp>
#include <oip/json.hpp>
#include <oip/log_settings.hpp>
#include <oip/metadata.hpp>
#include <oip/parameters.hpp>
#include <oip/status.hpp>
#include <oip/trace_settings.hpp>

#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace oip::grpc {

namespace detail {
class client_state;
class stream_state;
}  // namespace detail

class OIP_EXPORT client {
 public:
  using infer_callback = std::function<void(result<inference_response>)>;

  /// `host_port` is a gRPC target (`"127.0.0.1:8001"`, `"dns:///host:8001"`). Nothing is
  /// connected before the first call.
  explicit client(std::string host_port, client_options options = {});
  client(const client&) = delete;
  client& operator=(const client&) = delete;
  /// Asynchronous calls still in flight are cancelled, and their callbacks run, before it
  /// returns. Run in one of those callbacks (which held the client's last reference), it returns
  /// at once and a thread of its own ends the client once the callback is done. A `stream` keeps
  /// the channel it uses.
  ~client();

  /// `ModelInfer`. `format.binary_inputs` false sends typed contents (FP16 and BF16 stay raw);
  /// the reply's form is the server's. Outputs that the request asks for in a region registered
  /// through this client are read from it.
  [[nodiscard]] result<inference_response> infer(std::string_view model,
                                                 const inference_request& request,
                                                 const request_format& format = binary_format,
                                                 std::optional<std::uint64_t> version = {});
  /// The same without waiting: `done` is called once, on one of grpc++'s threads (on the caller's,
  /// before this returns, when the request cannot be encoded). An exception from `done` is
  /// written to stderr and goes no further.
  void async_infer(std::string_view model, const inference_request& request, infer_callback done,
                   const request_format& format = binary_format,
                   std::optional<std::uint64_t> version = {});
  [[nodiscard]] std::future<result<inference_response>> async_infer(
      std::string_view model, const inference_request& request,
      const request_format& format = binary_format, std::optional<std::uint64_t> version = {});

  /// One request over `ModelStreamInfer`, its responses as they come (a decoupled model's many,
  /// or none): `on_response` is called with each, in order, on one of grpc++'s threads; returns
  /// once the model's final response has come, with how the request ended. Triton's
  /// `triton_final_response` marks the end (the request asks for the empty final response).
  [[nodiscard]] status infer_stream(std::string_view model, inference_request request,
                                    std::function<void(inference_response)> on_response,
                                    std::optional<std::uint64_t> version = {});

  /// An open `ModelStreamInfer` call: requests go in the order `send` is called (from any thread),
  /// their responses come to the stream's callback in the order the server sends them, each
  /// response or the error of one request (the stream carries an error's message, no code: it is
  /// an `errc::internal` here). A sequence's requests in order on one stream, a decoupled model's
  /// many responses (Triton's `triton_final_response` parameter marks each request's last where
  /// the request asked for it with `triton_enable_empty_final_response`).
  ///
  /// Example:
  /// \code
  ///   oip::grpc::client::stream s = client.open_stream([](auto r) { use(r); });
  ///   oip::status sent = s.send("sequence_accumulator", step);
  ///   oip::status ended = s.finish();
  /// \endcode
  class OIP_EXPORT stream {
   public:
    stream(stream&&) noexcept;
    stream& operator=(stream&&) noexcept;
    /// Cancels the call if `finish` was not called.
    ~stream();

    /// Queues one more request; an error once the stream has ended or is finishing.
    [[nodiscard]] status send(std::string_view model, const inference_request& request,
                              std::optional<std::uint64_t> version = {});
    /// No more requests: waits until the server has answered those sent and ended the call, and
    /// returns how the call ended.
    [[nodiscard]] status finish();

   private:
    friend class client;
    explicit stream(std::unique_ptr<detail::stream_state> state);
    std::unique_ptr<detail::stream_state> state_;
  };
  using response_callback = std::function<void(result<inference_response>)>;
  /// Opens a stream; `on_response` is called on one of grpc++'s threads, one response at a time
  /// (an exception from it is written to stderr, and the stream goes on). `finish` and the
  /// stream's destructor wait for the call's end, which cannot come while `on_response` runs:
  /// `finish` called from it returns `errc::failed_precondition` at once, and a stream let go
  /// there (or in any other callback of a client's) is cancelled and ends on a thread of its own.
  /// Once a stream is let go in a callback its own callback is called no more: letting it go
  /// waits for that callback if it runs on another thread, so it must not be let go while holding
  /// a lock its callback takes, nor two streams each in the other's callback.
  [[nodiscard]] stream open_stream(response_callback on_response);
  /// The same, each result given with the id of the request it answers, as the server echoes it
  /// in a response and in an error (empty for a request sent without one, and for the call's
  /// own end): for a stream with many requests in flight, which one failed.
  using identified_callback =
      std::function<void(std::string_view request_id, result<inference_response>)>;
  [[nodiscard]] stream open_stream(identified_callback on_response);

  [[nodiscard]] result<server_metadata> metadata();
  [[nodiscard]] result<model_metadata> metadata(std::string_view model,
                                                std::optional<std::uint64_t> version = {});
  /// False also when the server cannot be reached.
  [[nodiscard]] bool live();
  [[nodiscard]] bool ready();
  [[nodiscard]] bool ready(std::string_view model, std::optional<std::uint64_t> version = {});

  /// Triton's model configuration as JSON (protobuf's JSON form, field names as in the proto).
  [[nodiscard]] result<std::string> model_config(std::string_view model,
                                                 std::optional<std::uint64_t> version = {});
  /// Triton's statistics as JSON (`{"model_stats":[...]}`), of one model or every model.
  [[nodiscard]] result<std::string> statistics(std::string_view model = {},
                                               std::optional<std::uint64_t> version = {});
  [[nodiscard]] result<std::vector<model_index_entry>> repository_index(bool ready_only = false);
  [[nodiscard]] status load(std::string_view model, const parameters& settings = {});
  [[nodiscard]] status unload(std::string_view model);
  [[nodiscard]] result<oip::log_settings> log_settings();
  [[nodiscard]] result<oip::log_settings> update_log_settings(const log_settings_update& change);
  [[nodiscard]] result<trace_settings_change> trace_settings(std::string_view model = {});
  [[nodiscard]] result<trace_settings_change> update_trace_settings(
      const trace_settings_change& change, std::string_view model = {});

  /// As `oip::http::client`'s: registered with the server and mapped here.
  [[nodiscard]] status register_system_shared_memory(const std::string& name,
                                                     const std::string& key, std::uint64_t offset,
                                                     std::uint64_t byte_size);
  [[nodiscard]] status unregister_system_shared_memory(std::string_view name = {});
  [[nodiscard]] result<std::vector<shared_memory_region>> system_shared_memory_status(
      std::string_view name = {});

 private:
  std::shared_ptr<detail::client_state> state_;
};

}  // namespace oip::grpc
