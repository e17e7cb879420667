#pragma once
/// \file
/// A client that drives an `http_handler` without a socket: a host's unit tests exercise their
/// model through the real protocol path (encode, route, decode, validate, execute, encode,
/// decode) in a few lines.

#include <oip/export.hpp>
#include <oip/http_client_protocol.hpp>
#include <oip/http_handler.hpp>
#include <oip/infer.hpp>
#include <oip/json.hpp>
#include <oip/metadata.hpp>
#include <oip/shared_memory.hpp>
#include <oip/status.hpp>

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace oip {

/// Example:
/// \code
///   oip::in_process_client client{handler};
///   oip::inference_request request;
///   request.inputs.push_back(*oip::tensor::from_values<float>("x", {2}, values));
///   oip::result<oip::inference_response> r = client.infer("my_model", request);
/// \endcode
class OIP_EXPORT in_process_client {
 public:
  /// `regions`, when given, are the client's own mappings of the shared-memory regions that it
  /// registered with the server (by the same names): outputs that a request asks for in one are
  /// read from it.
  explicit in_process_client(http_handler& handler,
                             const shared_memory_registry* regions = nullptr);

  /// POST /v2/models/<model>[/versions/<version>]/infer; inputs go as binary data when
  /// `format.binary_inputs` is set. An error reply becomes the error status, code included.
  [[nodiscard]] result<inference_response> infer(std::string_view model,
                                                 const inference_request& request,
                                                 const request_format& format = {},
                                                 std::optional<std::uint64_t> version = {});

  /// A request to a decoupled model (or any model), its responses as a stream: `on_response` is
  /// called with each as the model sends it, on the thread it sends from, one at a time; returns
  /// once the request has ended, with how it ended. The request goes to the handler's service as a
  /// stream transport hands it over (validation, the model, each response made and counted),
  /// without a codec: no HTTP route carries a stream of protocol responses.
  ///
  /// Example:
  /// \code
  ///   std::vector<oip::inference_response> tokens;
  ///   oip::status end = client.infer_stream("text_stream", request,
  ///                                         [&](oip::inference_response r) { tokens.push_back(r);
  ///                                         });
  /// \endcode
  [[nodiscard]] status infer_stream(std::string_view model, inference_request request,
                                    std::function<void(inference_response)> on_response,
                                    std::optional<std::uint64_t> version = {});

  [[nodiscard]] result<server_metadata> metadata();
  [[nodiscard]] result<model_metadata> metadata(std::string_view model,
                                                std::optional<std::uint64_t> version = {});
  [[nodiscard]] bool live();
  [[nodiscard]] bool ready();
  [[nodiscard]] bool ready(std::string_view model, std::optional<std::uint64_t> version = {});

  /// Any request, as a transport would pass it.
  [[nodiscard]] http_response send(std::string method, std::string target, std::string body = {},
                                   std::vector<http_header> headers = {});

 private:
  http_reply send(const http_call& call);

  http_handler& handler_;
  const shared_memory_registry* regions_;
  http_client_protocol protocol_;
};

}  // namespace oip
