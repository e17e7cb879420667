#pragma once
/// \file
/// The inference objects of the protocol: request (with requested outputs) and response, and the
/// parameter names of the binary tensor data extension.

#include <oip/buffer.hpp>
#include <oip/datatype.hpp>
#include <oip/export.hpp>
#include <oip/limits.hpp>
#include <oip/parameters.hpp>
#include <oip/shape.hpp>
#include <oip/status.hpp>
#include <oip/tensor.hpp>

#include <cstddef>
#include <cstdint>
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
/// On a response in a gRPC stream: whether it is its request's last (bool).
inline constexpr std::string_view triton_final_response = "triton_final_response";
}  // namespace parameter_names

/// An entry of a request's "outputs": which output the client wants, and how.
struct requested_output {
  std::string name;
  oip::parameters parameters;

  /// How many classes its `classification` parameter asks for (the classification extension),
  /// or 0 without one.
  [[nodiscard]] std::size_t classes_asked() const noexcept {
    const auto* top = parameters.get<std::int64_t>(parameter_names::classification);
    return top != nullptr && *top > 0 ? static_cast<std::size_t>(*top) : 0;
  }

  friend bool operator==(const requested_output&, const requested_output&) = default;
};

/// Where a tensor's bytes lie in a registered shared-memory region: its `shared_memory_*`
/// parameters.
struct shared_memory_reference {
  std::string region;
  std::uint64_t offset = 0;     ///< within the region
  std::uint64_t byte_size = 0;  ///< the bytes (an input) or the room (an output)

  friend bool operator==(const shared_memory_reference&, const shared_memory_reference&) = default;
};

/// The reference that a tensor's parameters hold, if any, taken out of them. 400 when the region
/// is not a string, the byte size is missing, an offset or byte size is not a non-negative
/// integer, or an offset or byte size comes without a region. `role` ("input" or "output") and
/// `tensor` name it in messages.
[[nodiscard]] OIP_EXPORT result<std::optional<shared_memory_reference>>
take_shared_memory_reference(parameters& params, std::string_view role, std::string_view tensor);

/// The other way, for a client's encoders: `place` written into `params` as Triton's clients write
/// it (the offset and byte size as int64); 400 for an offset or byte size above INT64_MAX.
[[nodiscard]] OIP_EXPORT status put_shared_memory_reference(parameters& params,
                                                            const shared_memory_reference& place);

/// An input whose bytes a shared-memory region holds, as a decoder leaves it: the codecs know no
/// regions, so the server reads the bytes (`inference_service`, through
/// `read_shared_memory_inputs`) and puts the tensor at `position` among the request's inputs.
struct input_in_shared_memory {
  std::size_t position = 0;  ///< its index among the request's inputs, once it is read
  std::string name;
  datatype type = datatype::fp32;
  shape_type shape;
  oip::parameters parameters;  ///< as sent, the `shared_memory_*` ones taken out
  shared_memory_reference place;
};

/// Where a client finds the outputs that it asked a server to write to shared memory: the response
/// decoders read each output that a response answers with no data through it, so that they know
/// no region themselves (`shared_memory_outputs` in `shared_memory.hpp` reads the client's own
/// mappings).
class shared_memory_output_source {
 public:
  shared_memory_output_source() = default;
  shared_memory_output_source(const shared_memory_output_source&) = default;
  shared_memory_output_source& operator=(const shared_memory_output_source&) = default;
  shared_memory_output_source(shared_memory_output_source&&) = default;
  shared_memory_output_source& operator=(shared_memory_output_source&&) = default;
  virtual ~shared_memory_output_source() = default;

  /// Where output `name` was asked for, or null when it was not placed in shared memory.
  [[nodiscard]] virtual const shared_memory_reference* find(
      std::string_view name) const noexcept = 0;
  /// The data of output `name`, of `type` and `shape`, that the server wrote at `place`.
  [[nodiscard]] virtual result<buffer> read(const shared_memory_reference& place,
                                            std::string_view name, datatype type,
                                            const shape_type& shape,
                                            const limits& bounds) const = 0;
};

/// `$inference_request`. Inputs decoded from a body are views into it (binary data) or own their
/// decoded values (JSON data). The tensor-level `binary_data_size` parameter is consumed by the
/// framing and does not appear in the inputs' parameters; every other parameter is kept as sent.
struct inference_request {
  std::optional<std::string> id;
  oip::parameters parameters;
  std::vector<tensor> inputs;
  /// Inputs still to be read from shared memory (a decoded request's; empty once a server has read
  /// them into `inputs`).
  std::vector<input_in_shared_memory> shared_memory_inputs;
  /// Empty: the client asked for every output, with default settings.
  std::vector<requested_output> outputs;

  /// The input in shared memory at `position` among all the inputs, if any: a client's encoders
  /// list the inputs in position order, those in `inputs` taking the positions left.
  [[nodiscard]] const input_in_shared_memory* shared_memory_input_at(
      std::size_t position) const noexcept {
    for (const input_in_shared_memory& placed : shared_memory_inputs) {
      if (placed.position == position) return &placed;
    }
    return nullptr;
  }
};

/// `$inference_response`.
struct inference_response {
  std::string model_name;
  /// Empty: not reported.
  std::string model_version;
  std::optional<std::string> id;
  oip::parameters parameters;
  std::vector<tensor> outputs;
  /// Outputs that a server wrote to the shared-memory regions the request named: a reply carries
  /// their name, datatype and shape only (as Triton's).
  std::vector<std::string> shared_memory_outputs;

  [[nodiscard]] bool in_shared_memory(std::string_view output_name) const noexcept {
    for (const std::string& name : shared_memory_outputs) {
      if (name == output_name) return true;
    }
    return false;
  }
};

}  // namespace oip
