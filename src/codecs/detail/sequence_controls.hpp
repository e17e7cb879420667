#pragma once
// The control inputs a sequence model's configuration shows, in Triton's terms: both the HTTP
// config route (JSON) and the gRPC ModelConfig RPC describe them from this one list.

#include <oip/model_config.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace oip::detail {

struct sequence_control {
  std::string name;
  std::string_view kind;        // CONTROL_SEQUENCE_START, ...
  bool is_correlation = false;  // carries the id (data type), not int32 false/true values
};

inline std::vector<sequence_control> sequence_controls(const sequence_config& config) {
  std::vector<sequence_control> out;
  const auto add = [&](const std::string& name, std::string_view kind, bool correlation) {
    if (!name.empty()) out.push_back({name, kind, correlation});
  };
  add(config.start_input, "CONTROL_SEQUENCE_START", false);
  add(config.end_input, "CONTROL_SEQUENCE_END", false);
  add(config.ready_input, "CONTROL_SEQUENCE_READY", false);
  add(config.correlation_input, "CONTROL_SEQUENCE_CORRID", true);
  return out;
}

// The CORRID control's data type: TYPE_STRING for string ids, TYPE_UINT64 otherwise.
inline std::string_view correlation_data_type(const sequence_config& config) {
  return config.id_type == correlation_id_type::string ? "TYPE_STRING" : "TYPE_UINT64";
}

}  // namespace oip::detail
