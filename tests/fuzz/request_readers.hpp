#pragma once
// The two readers of a ModelInferRequest's bytes side by side: request_bytes, straight from the
// wire, and protobuf's parse with decode_infer_message. Where the first reads a request, the
// second must read the same one.

#include "grpc/messages.hpp"
#include "grpc/request_bytes.hpp"

#include <oip/grpc/codec.hpp>
#include <oip/infer.hpp>
#include <oip/limits.hpp>
#include <oip/parameters.hpp>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

namespace oip_test {

inline bool same_value(const oip::parameter_value& a, const oip::parameter_value& b) {
  if (std::holds_alternative<double>(a) && std::holds_alternative<double>(b)) {  // NaN too
    return std::bit_cast<std::uint64_t>(std::get<double>(a)) ==
           std::bit_cast<std::uint64_t>(std::get<double>(b));
  }
  return a == b;
}

// The same parameters, in any order (a protobuf map's is open).
inline bool same_parameters(const oip::parameters& a, const oip::parameters& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [name, value] : a) {
    const oip::parameter_value* other = b.find(name);
    if (other == nullptr || !same_value(value, *other)) return false;
  }
  return true;
}

inline bool same_tensor(const oip::tensor& a, const oip::tensor& b) {
  return a.name() == b.name() && a.type() == b.type() &&
         std::equal(a.shape().begin(), a.shape().end(), b.shape().begin(), b.shape().end()) &&
         a.data().size() == b.data().size() &&
         (a.data().empty() ||
          std::memcmp(a.data().data(), b.data().data(), a.data().size()) == 0) &&
         same_parameters(a.parameters(), b.parameters());
}

struct readers_outcome {
  bool read_from_wire = false;
  std::string disagreement;  // empty when the readers agree
};

inline readers_outcome compare_request_readers(std::string_view bytes, const oip::limits& bounds) {
  readers_outcome out;
  std::optional<oip::grpc::request_fields> wire = oip::grpc::read_request_bytes(bytes, bounds);
  if (!wire) return out;
  out.read_from_wire = true;
  inference::ModelInferRequest message;
  if (!message.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    out.disagreement = "protobuf cannot parse what the wire reader read";
    return out;
  }
  if (message.model_name() != wire->model_name || message.model_version() != wire->model_version ||
      message.id() != wire->id) {
    out.disagreement = "model name, version or id";
    return out;
  }
  oip::result<oip::inference_request> decoded = oip::grpc::decode_infer_message(message, bounds);
  if (!decoded) {
    out.disagreement =
        "decode_request refuses what the wire reader read: " + decoded.error().message();
    return out;
  }
  const oip::inference_request& a = wire->request;
  const oip::inference_request& b = *decoded;
  if (a.id != b.id) out.disagreement = "request id";
  if (!same_parameters(a.parameters, b.parameters)) out.disagreement = "request parameters";
  if (!b.shared_memory_inputs.empty() || !a.shared_memory_inputs.empty()) {
    out.disagreement = "inputs in shared memory";
  }
  if (a.inputs.size() != b.inputs.size()) {
    out.disagreement = "number of inputs";
  } else {
    for (std::size_t i = 0; i < a.inputs.size(); ++i) {
      if (!same_tensor(a.inputs[i], b.inputs[i])) out.disagreement = "input " + std::to_string(i);
    }
  }
  if (a.outputs.size() != b.outputs.size()) {
    out.disagreement = "number of outputs";
  } else {
    for (std::size_t i = 0; i < a.outputs.size(); ++i) {
      if (a.outputs[i].name != b.outputs[i].name ||
          !same_parameters(a.outputs[i].parameters, b.outputs[i].parameters)) {
        out.disagreement = "output " + std::to_string(i);
      }
    }
  }
  return out;
}

}  // namespace oip_test
