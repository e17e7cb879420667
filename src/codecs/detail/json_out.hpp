#pragma once
// Internal: the JSON encoder's writer, shared by the inference bodies (json_encode.cpp) and the
// protocol's other objects (json_encode_objects.cpp).

#include "core/detail/json_string.hpp"

#include <oip/parameters.hpp>
#include <oip/shape.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace oip::detail {

// A key with its quotes and colon, spelled out at compile time.
template <std::size_t N>
struct quoted_key {
  char text[N + 2] = {};
  consteval quoted_key(const char (&key)[N]) {  // NOLINT(google-explicit-constructor)
    text[0] = '"';
    for (std::size_t i = 0; i + 1 < N; ++i) text[i + 1] = key[i];
    text[N] = '"';
    text[N + 1] = ':';
  }
};

// Appends to a string through a raw pointer: the encoder reserves the worst case of a whole
// tensor at once, then writes numbers straight into it.
class json_out {
 public:
  explicit json_out(std::string& out) : out_{out} {}

  void raw(std::string_view s) { out_.append(s); }
  void raw(char c) { out_.push_back(c); }
  void string(std::string_view s) { detail::append_json_string(out_, s); }
  void key(std::string_view k) {
    string(k);
    out_.push_back(':');
  }
  // The protocol's own keys need no escaping: quotes, key and colon are one constant, written
  // with one copy. (Assembled on the stack at each call, they were read back before the stores
  // could forward.)
  template <quoted_key k>
  void key() {
    out_.append(k.text, sizeof k.text);
  }
  std::string& text() { return out_; }

 private:
  std::string& out_;
};

// What write_parameters does with `binary_data_size`, which on a tensor object is framing.
struct tensor_framing {
  bool is_tensor = false;                    // drop the tensor's own binary_data_size
  std::optional<std::uint64_t> binary_size;  // and write this one instead
};

// Where a member goes in its object: first, or after another (a comma before it).
enum class member : std::uint8_t { first, after_another };

// Writes `"<key>":{...}` (after a comma when `place` says so), or nothing when there is nothing to
// write.
void write_parameters(json_out& out, const parameters& params, member place,
                      const tensor_framing& framing = {}, std::string_view key = "parameters");

// `"shape":[...]`.
void write_shape(json_out& out, const shape_type& shape);

}  // namespace oip::detail
