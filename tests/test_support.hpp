#pragma once
// Helpers shared by the codec tests.

#include <oip/buffer.hpp>
#include <oip/tensor.hpp>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>

namespace oip::testing {

inline oip::buffer body_of(std::string text) { return oip::buffer::from_string(std::move(text)); }

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot read " << path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

/// Same name, datatype, shape, parameters and bytes.
inline void check_same_tensor(const oip::tensor& a, const oip::tensor& b) {
  CAPTURE(a.name());
  CHECK(a.name() == b.name());
  CHECK(a.type() == b.type());
  CHECK(a.shape() == b.shape());
  CHECK(a.parameters() == b.parameters());
  CHECK(a.data().as_string_view() == b.data().as_string_view());
}

inline void check_same_tensors(const std::vector<oip::tensor>& a,
                               const std::vector<oip::tensor>& b) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) check_same_tensor(a[i], b[i]);
}

template <class T>
std::vector<T> values_of(const oip::tensor& t) {
  std::vector<T> out;
  for (std::size_t i = 0; i < t.element_count(); ++i) out.push_back(t.at<T>(i));
  return out;
}

inline std::vector<std::string> strings_of(const oip::tensor& t) {
  std::vector<std::string> out;
  for (std::string_view s : t.strings()) out.emplace_back(s);
  return out;
}

}  // namespace oip::testing
