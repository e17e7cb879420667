#pragma once
// Trace files in tests: a file name of each test's own, and the timestamp names a file holds.

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

namespace oip::testing {

// A file name of its own for each test, removed (with its numbered siblings) at the end.
struct temporary_trace_file {
  temporary_trace_file() {
    static int n = 0;
    path = (std::filesystem::temp_directory_path() /
            ("oip_trace_test_" + std::to_string(::getpid()) + "_" + std::to_string(n++) + ".json"))
               .string();
  }
  ~temporary_trace_file() {
    std::filesystem::remove(path);
    for (int i = 0; i < 16; ++i) std::filesystem::remove(path + "." + std::to_string(i));
  }
  [[nodiscard]] std::string read(const std::string& which) const {
    std::ifstream in{which};
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  std::string path;
};

// The timestamp names of a trace file, in file order.
inline std::vector<std::string> timestamp_names(const std::string& text) {
  static constexpr std::string_view key = R"("name":")";
  std::vector<std::string> names;
  for (std::size_t at = text.find(key); at != std::string::npos; at = text.find(key, at)) {
    at += key.size();
    const std::size_t end = text.find('"', at);
    names.push_back(text.substr(at, end - at));
  }
  return names;
}

}  // namespace oip::testing
