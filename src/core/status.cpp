#include "core/detail/json_string.hpp"

#include <oip/status.hpp>

namespace oip {

status out_of_memory(std::string_view what) {
  std::string message = "the server ran out of memory ";
  message += what;
  return status{errc::unavailable, std::move(message)};
}

std::string status::to_json() const {
  std::string out = "{\"error\":";
  detail::append_json_string(out, message_);
  out.push_back('}');
  return out;
}

}  // namespace oip
