#pragma once
/// \file
/// A client of any server of the protocol over HTTP/1.1 (oip-serve, Triton, KServe, MLServer,
/// OpenVINO Model Server): the calls of `in_process_client`, by the same names and with the same
/// results, and the extensions' calls beside them. Calls may be made from any number of threads;
/// each takes a kept-alive connection from a pool (`client_options::max_connections`) and waits
/// for one when all are busy. A synchronous call does its I/O on the caller's thread; asynchronous
/// ones share the client's I/O thread. Tensor bytes go from the request's buffers to the socket,
/// and a reply's tensors are views of the body received.
///
/// Example:
/// \code
///   oip::http::client client{"127.0.0.1:8000"};
///   oip::inference_request request;
///   request.inputs.push_back(*oip::tensor::from_values<float>("x", {2}, values));
///   oip::result<oip::inference_response> r = client.infer("my_model", request);
///   if (!r) std::cerr << r.error().message() << "\n";
/// \endcode

#include <oip/client_options.hpp>
#include <oip/export.hpp>
#include <oip/http_client_protocol.hpp>
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

namespace oip::http {

namespace detail {
class client_state;
}

class OIP_EXPORT client {
 public:
  using infer_callback = std::function<void(result<inference_response>)>;
  using reply_callback = std::function<void(result<http_reply>)>;

  /// `host_port` is `"host:port"` (`"[::1]:8000"` for IPv6), without a scheme. Nothing is
  /// connected before the first call.
  explicit client(std::string host_port, client_options options = {});
  client(const client&) = delete;
  client& operator=(const client&) = delete;
  /// Calls still in flight end with `errc::unavailable`, their callbacks run, before it returns.
  /// Run in one of those callbacks (which held the client's last reference), it returns at once
  /// and a thread of its own ends the client once the callback is done.
  ~client();

  /// `POST <model>/infer`, binary data both ways unless `format` says otherwise. Outputs that the
  /// request asks for in a region registered through this client are read from it.
  [[nodiscard]] result<inference_response> infer(std::string_view model,
                                                 const inference_request& request,
                                                 const request_format& format = binary_format,
                                                 std::optional<std::uint64_t> version = {});
  /// The same without waiting: `done` is called once, on the client's I/O thread (a synchronous
  /// call made there holds that thread until it returns; an exception from `done` is written to
  /// stderr and goes no further). The request is encoded before this returns; its tensors'
  /// buffers are held until the body is sent.
  void async_infer(std::string_view model, const inference_request& request, infer_callback done,
                   const request_format& format = binary_format,
                   std::optional<std::uint64_t> version = {});
  [[nodiscard]] std::future<result<inference_response>> async_infer(
      std::string_view model, const inference_request& request,
      const request_format& format = binary_format, std::optional<std::uint64_t> version = {});

  [[nodiscard]] result<server_metadata> metadata();
  [[nodiscard]] result<model_metadata> metadata(std::string_view model,
                                                std::optional<std::uint64_t> version = {});
  /// False also when the server cannot be reached.
  [[nodiscard]] bool live();
  [[nodiscard]] bool ready();
  [[nodiscard]] bool ready(std::string_view model, std::optional<std::uint64_t> version = {});

  /// Triton's model configuration, as the server's JSON.
  [[nodiscard]] result<std::string> model_config(std::string_view model,
                                                 std::optional<std::uint64_t> version = {});
  /// Triton's statistics (`{"model_stats":[...]}`) of one model, or of every model.
  [[nodiscard]] result<std::string> statistics(std::string_view model = {},
                                               std::optional<std::uint64_t> version = {});
  [[nodiscard]] result<std::vector<model_index_entry>> repository_index(bool ready_only = false);
  /// Model control (a server in explicit mode): `settings` as Triton's (`config`, `file:<path>`).
  [[nodiscard]] status load(std::string_view model, const parameters& settings = {});
  [[nodiscard]] status unload(std::string_view model);
  [[nodiscard]] result<oip::log_settings> log_settings();
  [[nodiscard]] result<oip::log_settings> update_log_settings(const log_settings_update& change);
  /// No model: the server's settings.
  [[nodiscard]] result<trace_settings_change> trace_settings(std::string_view model = {});
  [[nodiscard]] result<trace_settings_change> update_trace_settings(
      const trace_settings_change& change, std::string_view model = {});

  /// Registers a system shared-memory region (`key` as `shm_open` names it) with the server and
  /// maps it here too, so that outputs a request places in it are read back into the response.
  [[nodiscard]] status register_system_shared_memory(const std::string& name,
                                                     const std::string& key, std::uint64_t offset,
                                                     std::uint64_t byte_size);
  /// No name: every region.
  [[nodiscard]] status unregister_system_shared_memory(std::string_view name = {});
  [[nodiscard]] result<std::vector<shared_memory_region>> system_shared_memory_status(
      std::string_view name = {});

  /// Any call, as `http_client_protocol` makes them (or by hand).
  [[nodiscard]] result<http_reply> send(const http_call& call);
  void async_send(http_call call, reply_callback done);

  [[nodiscard]] const http_client_protocol& protocol() const noexcept;

 private:
  std::shared_ptr<detail::client_state> state_;
};

}  // namespace oip::http
