#pragma once
/// \file
/// The inference objects of the protocol: request (with requested outputs) and response, and the
/// parameter names of the binary tensor data extension.

#include <oip/parameters.hpp>
#include <oip/tensor.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace oip {

/// Parameter names the codecs interpret.
namespace parameter_names {
/// On an input or output tensor: its bytes follow the JSON (int64, the byte count).
inline constexpr std::string_view binary_data_size = "binary_data_size";
/// On a requested output: return it as binary data (bool).
inline constexpr std::string_view binary_data = "binary_data";
/// On a request: return every output as binary data unless the output says otherwise (bool).
inline constexpr std::string_view binary_data_output = "binary_data_output";
/// On a requested output: return the top N classes instead of the tensor (int).
inline constexpr std::string_view classification = "classification";
/// On an input or requested output: the registered shared-memory region that holds its bytes
/// (string), where they start in it (int, default 0) and the room they have there (int).
inline constexpr std::string_view shared_memory_region = "shared_memory_region";
inline constexpr std::string_view shared_memory_offset = "shared_memory_offset";
inline constexpr std::string_view shared_memory_byte_size = "shared_memory_byte_size";
}  // namespace parameter_names

/// An entry of a request's "outputs": which output the client wants, and how.
struct requested_output {
  std::string name;
  oip::parameters parameters;

  friend bool operator==(const requested_output&, const requested_output&) = default;
};

/// `$inference_request`. Inputs decoded from a body are views into it (binary data) or own their
/// decoded values (JSON data). The tensor-level `binary_data_size` parameter is consumed by the
/// framing and does not appear in the inputs' parameters; every other parameter is kept as sent.
struct inference_request {
  std::optional<std::string> id;
  oip::parameters parameters;
  std::vector<tensor> inputs;
  /// Empty: the client asked for every output, with default settings.
  std::vector<requested_output> outputs;
};

/// `$inference_response`.
struct inference_response {
  std::string model_name;
  /// Empty: not reported.
  std::string model_version;
  std::optional<std::string> id;
  oip::parameters parameters;
  std::vector<tensor> outputs;
};

}  // namespace oip
