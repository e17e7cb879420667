#include "core/detail/json_string.hpp"

#include <oip/status.hpp>

namespace oip {

std::string status::to_json() const {
  std::string out = "{\"error\":";
  detail::append_json_string(out, message_);
  out.push_back('}');
  return out;
}

}  // namespace oip
