#pragma once
/// \file
/// The binary tensor data extension: message framing (`Inference-Header-Content-Length`), bodies
/// written as a JSON header plus tensor buffers (scatter/gather), and raw binary requests.

#include <oip/buffer.hpp>
#include <oip/datatype.hpp>
#include <oip/export.hpp>
#include <oip/infer.hpp>
#include <oip/limits.hpp>
#include <oip/status.hpp>
#include <oip/tensor.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace oip {

/// The HTTP header that announces the JSON part's length when binary data follows it.
inline constexpr std::string_view header_length_field = "Inference-Header-Content-Length";
inline constexpr std::string_view json_content_type = "application/json";
inline constexpr std::string_view binary_content_type = "application/octet-stream";

/// A message body as the encoders produce it: a JSON header followed by tensor buffers, in order.
/// A transport writes `json` and then each buffer (scatter/gather): tensor bytes are never copied
/// into a second body.
struct encoded_body {
  std::string json;
  /// The binary tensors that follow the JSON, each a view of the tensor's own bytes.
  std::vector<buffer> binary;
  /// True when the body uses the binary extension (even if every binary tensor is empty); the
  /// transport then sends `Inference-Header-Content-Length: header_length()`.
  bool uses_binary = false;

  [[nodiscard]] std::size_t size() const noexcept {
    std::size_t total = json.size();
    for (const buffer& b : binary) total += b.size();
    return total;
  }
  [[nodiscard]] std::size_t header_length() const noexcept { return json.size(); }
  [[nodiscard]] std::string_view content_type() const noexcept {
    return uses_binary ? binary_content_type : json_content_type;
  }
  /// The whole body in one string (a copy: for tests and simple transports).
  [[nodiscard]] std::string flatten() const {
    std::string out;
    out.reserve(size());
    out += json;
    for (const buffer& b : binary) out += b.as_string_view();
    return out;
  }
};

/// Parses an `Inference-Header-Content-Length` value against the body it describes: decimal digits
/// only, at most `body_size`. 0 announces a raw binary request.
[[nodiscard]] OIP_EXPORT result<std::size_t> parse_header_length(std::string_view value,
                                                                 std::size_t body_size);

/// What a raw binary request (`Inference-Header-Content-Length: 0`) is decoded against: the
/// model's single input. Shape dimensions of -1 are variable; with `batching`, the first
/// dimension of `shape` is not part of the metadata and the request is a batch of 1.
struct raw_input_spec {
  std::string name;
  datatype type = datatype::fp32;
  shape_type shape;
  bool batching = false;
};

/// Decodes a raw binary request: the whole body is the single input's bytes. Name, datatype and
/// shape come from `spec`; at most one variable dimension is allowed (non-BYTES), whose size
/// follows from the byte count, and BYTES inputs must have shape [1]. The body is not copied. The
/// request asks for every output in binary (`binary_data_output: true`), as the extension says.
[[nodiscard]] OIP_EXPORT result<inference_request> decode_raw_request(const buffer& body,
                                                                      const raw_input_spec& spec,
                                                                      const limits& bounds = {});

}  // namespace oip
