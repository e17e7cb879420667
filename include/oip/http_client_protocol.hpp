#pragma once
/// \file
/// The client side of the protocol's HTTP routes without a transport: each call as the request to
/// send (`http_call`) and its reply (`http_reply`) read into oip's types. `oip::http::client`
/// sends these over sockets and `in_process_client` through a handler; a host with an HTTP stack
/// of its own (libcurl, say) can send them too.
///
/// Example:
/// \code
///   oip::http_client_protocol protocol{oip::client_options{}};
///   oip::result<oip::http_call> call = protocol.infer("simple", request);
///   oip::http_reply reply = my_transport.send(*call);  // head, then each tail buffer
///   oip::result<oip::inference_response> response = protocol.read_infer(std::move(reply));
/// \endcode

#include <oip/buffer.hpp>
#include <oip/client_options.hpp>
#include <oip/export.hpp>
#include <oip/http_handler.hpp>
#include <oip/infer.hpp>
#include <oip/json.hpp>
#include <oip/limits.hpp>
#include <oip/log_settings.hpp>
#include <oip/metadata.hpp>
#include <oip/parameters.hpp>
#include <oip/status.hpp>
#include <oip/trace_settings.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace oip {

/// A request as a client sends it: the body is `head` followed by each buffer of `tail`, written
/// in order (scatter/gather), so that tensor bytes go from the caller's buffers to the socket.
struct http_call {
  std::string method;
  std::string target;
  std::vector<http_header> headers;
  std::string head;
  std::vector<buffer> tail;

  [[nodiscard]] std::size_t body_size() const noexcept {
    std::size_t total = head.size();
    for (const buffer& b : tail) total += b.size();
    return total;
  }
};

/// A reply as a client receives it, its body whole.
struct http_reply {
  int status = 0;
  std::vector<http_header> headers;
  buffer body;

  [[nodiscard]] std::optional<std::string_view> header(std::string_view name) const noexcept {
    return find_header(headers, name);
  }
};

/// Makes calls and reads replies; holds the headers every call carries, the compression, and the
/// bounds a reply is read within. Thread-safe (it is not changed after construction).
class OIP_EXPORT http_client_protocol {
 public:
  explicit http_client_protocol(const client_options& options);

  /// The path of a model's routes: `/v2/models/<model>[/versions/<version>]`, the name
  /// percent-encoded where it needs to be.
  [[nodiscard]] static std::string model_target(std::string_view model,
                                                std::optional<std::uint64_t> version);

  // --- calls -----------------------------------------------------------------------------------
  /// `POST <model>/infer`: inputs as `format` says (binary data after the JSON, or in it).
  [[nodiscard]] result<http_call> infer(std::string_view model, const inference_request& request,
                                        const request_format& format = binary_format,
                                        std::optional<std::uint64_t> version = {}) const;
  [[nodiscard]] http_call server_metadata() const;
  [[nodiscard]] http_call model_metadata(std::string_view model,
                                         std::optional<std::uint64_t> version = {}) const;
  [[nodiscard]] http_call live() const;
  [[nodiscard]] http_call ready() const;
  [[nodiscard]] http_call model_ready(std::string_view model,
                                      std::optional<std::uint64_t> version = {}) const;
  /// Triton's model configuration and statistics routes; no model: every model's statistics.
  [[nodiscard]] http_call model_config(std::string_view model,
                                       std::optional<std::uint64_t> version = {}) const;
  [[nodiscard]] http_call statistics(std::string_view model = {},
                                     std::optional<std::uint64_t> version = {}) const;
  [[nodiscard]] result<http_call> repository_index(bool ready_only = false) const;
  [[nodiscard]] result<http_call> load(std::string_view model,
                                       const parameters& settings = {}) const;
  [[nodiscard]] result<http_call> unload(std::string_view model) const;
  [[nodiscard]] http_call log_settings() const;
  [[nodiscard]] result<http_call> update_log_settings(const log_settings_update& change) const;
  /// No model: the server's own settings.
  [[nodiscard]] http_call trace_settings(std::string_view model = {}) const;
  [[nodiscard]] result<http_call> update_trace_settings(const trace_settings_change& change,
                                                        std::string_view model = {}) const;
  [[nodiscard]] result<http_call> register_shared_memory(const shared_memory_region& region) const;
  /// No name: every region.
  [[nodiscard]] result<http_call> unregister_shared_memory(std::string_view name = {}) const;
  [[nodiscard]] http_call shared_memory_status(std::string_view name = {}) const;

  // --- replies ---------------------------------------------------------------------------------
  /// An inference reply. With `shared_memory`, outputs that the request asked for in a region
  /// are read from the client's mapping of it (see `shared_memory_outputs`).
  [[nodiscard]] result<inference_response> read_infer(
      http_reply reply, const shared_memory_output_source* shared_memory = nullptr) const;
  [[nodiscard]] result<oip::server_metadata> read_server_metadata(http_reply reply) const;
  [[nodiscard]] result<oip::model_metadata> read_model_metadata(http_reply reply) const;
  /// The health routes answer with their status alone: 200 is true, anything else false.
  [[nodiscard]] static bool read_health(const http_reply& reply) noexcept;
  /// A reply's body as text (the configuration's and the statistics' JSON, as the server wrote
  /// them).
  [[nodiscard]] result<std::string> read_text(http_reply reply) const;
  [[nodiscard]] result<std::vector<model_index_entry>> read_repository_index(
      http_reply reply) const;
  [[nodiscard]] result<oip::log_settings> read_log_settings(http_reply reply) const;
  /// The settings as the server reports them, each as text (as `trace_settings_change` holds
  /// them).
  [[nodiscard]] result<trace_settings_change> read_trace_settings(http_reply reply) const;
  [[nodiscard]] result<std::vector<shared_memory_region>> read_shared_memory_status(
      http_reply reply) const;
  /// A reply that carries nothing but success or an error (load, unload, registrations).
  [[nodiscard]] status read_outcome(http_reply reply) const;

 private:
  [[nodiscard]] http_call get(std::string target) const;
  [[nodiscard]] result<http_call> post(std::string target, std::string json) const;
  // The body of a 200 reply, decompressed; an error reply's status otherwise.
  [[nodiscard]] result<buffer> body_of(http_reply& reply) const;

  std::vector<http_header> headers_;
  wire_compression request_compression_;
  wire_compression response_compression_;
  limits bounds_;
};

}  // namespace oip
