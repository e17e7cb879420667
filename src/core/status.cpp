#include "core/detail/json_string.hpp"

#include <oip/status.hpp>

namespace oip {

status out_of_memory(std::string_view what) noexcept {
  try {
    std::string message = "the server ran out of memory ";
    message += what;
    return status{errc::unavailable, std::move(message)};
  } catch (const std::bad_alloc&) {
    return status{errc::unavailable, "out of memory"};  // short enough to need no allocation
  }
}

std::string status::to_json() const {
  std::string out = "{\"error\":";
  detail::append_json_string(out, message_);
  out.push_back('}');
  return out;
}

}  // namespace oip
