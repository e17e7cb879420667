// Triton's names for the trace levels, as the trace extension carries them.

#include <oip/trace_settings.hpp>

namespace oip {

std::vector<std::string_view> level_names(trace_level level) {
  std::vector<std::string_view> names;
  if (includes(level, trace_level::timestamps)) names.emplace_back("TIMESTAMPS");
  if (includes(level, trace_level::tensors)) names.emplace_back("TENSORS");
  if (names.empty()) names.emplace_back("OFF");
  return names;
}

}  // namespace oip
