#pragma once
// Internal: which request and tensor parameters are the server's rather than the model's. The
// batcher joins requests that differ only there, and the response cache answers them alike.

#include <oip/parameters.hpp>

#include <string_view>

namespace oip::detail {

// Whether a tensor's parameter tells the transport how its bytes travel (binary or not, in which
// shared-memory region), rather than telling the model anything.
[[nodiscard]] inline bool transport_parameter(std::string_view name) noexcept {
  return name == parameter_names::binary_data || name == parameter_names::binary_data_size ||
         name == parameter_names::shared_memory_region ||
         name == parameter_names::shared_memory_offset ||
         name == parameter_names::shared_memory_byte_size;
}

// Whether a request's parameter is the server's (how it is scheduled, how its reply travels)
// rather than the model's.
[[nodiscard]] inline bool server_parameter(std::string_view name) noexcept {
  return name == "priority" || name == "timeout" || name == parameter_names::binary_data_output ||
         name == "triton_enable_empty_final_response";
}

}  // namespace oip::detail
