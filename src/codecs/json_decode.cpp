// JSON decoding with simdjson's on-demand API. On-demand does not validate what it skips, so every
// value of a document is visited here: known keys are decoded, unknown ones walked in full.

#include "core/detail/bytes_format.hpp"
#include "codecs/detail/decimal.hpp"
#include "core/detail/find_duplicate.hpp"

#include <oip/json.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cassert>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include <fmt/format.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <simdjson.h>

namespace oip {

namespace {

namespace od = simdjson::ondemand;
using simdjson::error_code;

// --- the document and its errors -----------------------------------------------------------------

// One document being decoded: where it starts (for error offsets), the limits, and the names that
// messages mention.
struct document_context {
  const char* begin = nullptr;
  const char* end = nullptr;  // one past the JSON text (its padding follows)
  const limits* bounds = nullptr;
  std::string_view what = "request";  // "request", "response", "model metadata", ...
  std::string_view model_name;        // for messages, may be empty
  const shared_memory_output_source* placed_outputs = nullptr;  // a client's outputs in shared memory

  [[nodiscard]] std::string for_model() const {
    return model_name.empty() ? std::string{} : fmt::format(" for model '{}'", model_name);
  }
};

status malformed(const document_context& doc, error_code error, const char* where) {
  const std::size_t offset =
      where != nullptr && where >= doc.begin ? static_cast<std::size_t>(where - doc.begin) : 0;
  // Triton writes BYTES output as it is, UTF-8 or not, which makes JSON no parser takes.
  const std::string_view hint =
      error == error_code::UTF8_ERROR && doc.what == "response"
          ? " (a BYTES output that is not UTF-8 must be asked for as binary data)"
          : "";
  return status{errc::invalid_argument,
                fmt::format("failed to parse the {} JSON buffer: {} at {}{}", doc.what,
                            simdjson::error_message(error), offset, hint)};
}

const char* location_of(od::value& value) {
  const char* where = nullptr;
  if (value.current_location().get(where) != error_code::SUCCESS) return nullptr;
  return where;
}

status malformed_at(const document_context& doc, error_code error, od::value& value) {
  return malformed(doc, error, location_of(value));
}

status malformed_token(const document_context& doc, std::string_view token) {
  return malformed(doc, error_code::TAPE_ERROR, token.data());
}

std::string_view trim_token(std::string_view token) {
  while (!token.empty() && (token.back() == ' ' || token.back() == '\t' || token.back() == '\n' ||
                            token.back() == '\r')) {
    token.remove_suffix(1);
  }
  return token;
}

// The text of a scalar, trailing whitespace removed. simdjson computes it from the next token's
// position without checks: in a truncated document that can point past the end, so the span is
// clamped to the document (a clamped token is then refused as malformed).
std::string_view token_of(const document_context& doc, od::value& value) {
  const std::string_view raw = value.raw_json_token();
  if (raw.data() < doc.begin || raw.data() > doc.end) return {};
  const auto available = static_cast<std::size_t>(doc.end - raw.data());
  return trim_token(raw.substr(0, std::min(raw.size(), available)));
}

// --- numbers
// ---------------------------------------------------------------------------------------

// One pass over a JSON number token (RFC 8259: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?):
// whether it is one, and whether it is an integer (no fraction, no exponent).
struct number_shape {
  bool valid = false;
  bool integer = false;
};

inline bool is_digit(char c) { return static_cast<unsigned>(c - '0') < 10U; }

inline number_shape scan_number(std::string_view s) {
  const char* p = s.data();
  const char* const end = p + s.size();
  if (p != end && *p == '-') ++p;
  if (p == end) return {};
  if (*p == '0') {
    ++p;
  } else if (is_digit(*p)) {
    while (p != end && is_digit(*p)) ++p;
  } else {
    return {};
  }
  bool integer = true;
  if (p != end && *p == '.') {
    integer = false;
    if (++p == end || !is_digit(*p)) return {};
    while (p != end && is_digit(*p)) ++p;
  }
  if (p != end && (*p == 'e' || *p == 'E')) {
    integer = false;
    if (++p != end && (*p == '+' || *p == '-')) ++p;
    if (p == end || !is_digit(*p)) return {};
    while (p != end && is_digit(*p)) ++p;
  }
  return {p == end, integer};
}

bool is_json_number(std::string_view s) { return scan_number(s).valid; }

// A floating-point leaf: a JSON number, or NaN, Infinity, -Infinity (what Triton writes and
// Python's json reads). Parsed straight to T with correct rounding (std::from_chars).
template <class T>
bool parse_floating(std::string_view token, T& out) {
  const char first = token.front();
  if (first == 'N' || first == 'I' || (first == '-' && token.size() > 1 && token[1] == 'I'))
      [[unlikely]] {
    if (token == "NaN") {
      out = std::numeric_limits<T>::quiet_NaN();
    } else if (token == "Infinity" || token == "-Infinity") {
      out = first == '-' ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
    } else {
      return false;
    }
    return true;
  }
  if (!scan_number(token).valid) return false;
  const auto [end, error] = std::from_chars(token.data(), token.data() + token.size(), out);
  if (error == std::errc::result_out_of_range) [[unlikely]] {
    // from_chars reports overflow and underflow without a value: the correctly rounded results
    // are infinity and (signed) zero.
    const bool negative = first == '-';
    const bool tiny = detail::decimal_magnitude_below_one(token);
    out = tiny ? (negative ? -T{0} : T{0})
               : (negative ? -std::numeric_limits<T>::infinity()
                           : std::numeric_limits<T>::infinity());
    return true;
  }
  return error == std::errc{} && end == token.data() + token.size();
}

// A JSON integer token that fits T. `out_of_range` tells an integer too large (or negative for
// an unsigned T) from a token that is no integer at all.
template <class T>
bool parse_integer(std::string_view token, T& out, bool& out_of_range) {
  out_of_range = false;
  const char* p = token.data();
  const char* const end = p + token.size();
  const bool negative = p != end && *p == '-';
  if (negative) ++p;
  if (p == end || (*p == '0' && p + 1 != end)) return false;  // "-", "01", "0.5", "0e1"
  // Nineteen digits never overflow 64 bits, twenty do above UINT64_MAX, more always do; the loop
  // itself then needs no overflow check.
  const auto digits = static_cast<std::size_t>(end - p);
  const bool overflow =
      digits > 20 || (digits == 20 && std::string_view(p, digits) > "18446744073709551615");
  std::uint64_t magnitude = 0;
  for (; p != end; ++p) {
    const auto digit = static_cast<unsigned>(*p - '0');
    if (digit >= 10U) return false;
    magnitude = magnitude * 10U + digit;
  }
  if constexpr (std::is_unsigned_v<T>) {
    if (overflow || (negative && magnitude != 0) || magnitude > std::numeric_limits<T>::max()) {
      out_of_range = true;
      return false;
    }
    out = static_cast<T>(magnitude);
  } else {
    const auto max = static_cast<std::uint64_t>(std::numeric_limits<T>::max());
    if (overflow || magnitude > max + (negative ? 1U : 0U)) {
      out_of_range = true;
      return false;
    }
    out = static_cast<T>(negative ? 0U - magnitude : magnitude);  // modular, as C++20 defines
  }
  return true;
}

// --- walking any value in full
// --------------------------------------------------------------------

status check_depth(const document_context& doc, std::size_t depth, od::value& value) {
  if (depth > doc.bounds->max_json_depth) {
    return status{errc::invalid_argument,
                  fmt::format("failed to parse the {} JSON buffer: nesting deeper than {} at {}",
                              doc.what, doc.bounds->max_json_depth,
                              location_of(value) != nullptr ? location_of(value) - doc.begin : 0)};
  }
  return {};
}

status walk_value(const document_context& doc, od::value value, std::size_t depth);

// The names seen in one object or array, checked for duplicates at the end: the first few live
// inline (no allocation for the usual small objects), the rest in a vector. Names point into the
// parser's string buffer or into decoded values, valid until the check.
class name_set {
 public:
  name_set() noexcept {}  // leaves the inline slots uninitialised: they are written before use
  name_set(const name_set&) = delete;
  name_set& operator=(const name_set&) = delete;

  void add(std::string_view name) {
    if (more_.empty() && inline_count_ < inline_capacity) {
      inline_names_[inline_count_++] = name;
      return;
    }
    if (more_.empty()) more_.assign(inline_names_, inline_names_ + inline_count_);
    more_.push_back(name);
  }
  std::optional<std::string_view> duplicate() {
    if (more_.empty()) return detail::find_duplicate(std::span(inline_names_, inline_count_));
    return detail::find_duplicate(more_);
  }

 private:
  static constexpr std::size_t inline_capacity = 16;
  union {
    std::string_view inline_names_[inline_capacity];
  };
  std::size_t inline_count_ = 0;
  std::vector<std::string_view> more_;
};

// A string (`text` points after its opening quote) as it stands in the document when it needs no
// unescaping, the usual case: its text up to the closing quote, with no copy (stage 1 has
// validated the UTF-8). Strings with escapes or control characters are left to simdjson, which
// unescapes and validates them.
inline bool plain_string(const document_context& doc, const char* text, std::string_view& out) {
  const char* p = text;
#if defined(__SSE2__)
  // Sixteen bytes at a time: a load that starts before the document's end stays inside the
  // padding that follows it (SIMDJSON_PADDING bytes).
  static_assert(simdjson::SIMDJSON_PADDING >= 16);
  const __m128i quote = _mm_set1_epi8('"');
  const __m128i backslash = _mm_set1_epi8('\\');
  const __m128i below_space = _mm_set1_epi8(0x1F);
  for (;; p += 16) {
    if (p >= doc.end) return false;
    const __m128i chunk = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i control = _mm_cmpeq_epi8(_mm_min_epu8(chunk, below_space), chunk);
    const __m128i stops = _mm_or_si128(
        _mm_or_si128(_mm_cmpeq_epi8(chunk, quote), _mm_cmpeq_epi8(chunk, backslash)), control);
    const auto mask = static_cast<unsigned>(_mm_movemask_epi8(stops));
    if (mask != 0) {
      p += std::countr_zero(mask);
      break;
    }
  }
#else
  while (p < doc.end && static_cast<unsigned char>(*p) >= 0x20 && *p != '"' && *p != '\\') ++p;
#endif
  if (p >= doc.end || *p != '"') return false;
  out = std::string_view(text, static_cast<std::size_t>(p - text));
  return true;
}

// Iterates an object's fields, refusing duplicate keys; `on_field(key, value)` returns a status.
// `where()` gives the current position for messages.
template <class Where, class OnField>
status for_each_member(const document_context& doc, od::object& object, Where&& where,
                       OnField&& on_field) {
  // Sorting the keys once at the end keeps duplicate detection O(n log n), 16 bytes per key.
  name_set keys;
  for (auto field_result : object) {
    if (error_code e = field_result.error()) return malformed(doc, e, where());
    od::field field = field_result.value_unsafe();
    std::string_view key;
    if (!plain_string(doc, field.key().raw(), key)) {
      if (error_code e = field.unescaped_key().get(key)) return malformed(doc, e, where());
    }
    keys.add(key);
    if (status s = on_field(key, field.value()); !s.ok()) return s;
  }
  if (std::optional<std::string_view> duplicate = keys.duplicate()) {
    return status{errc::invalid_argument,
                  fmt::format("failed to parse the {} JSON buffer: duplicate key '{}'", doc.what,
                              *duplicate)};
  }
  return {};
}

template <class OnField>
status for_each_field(const document_context& doc, od::value value, std::size_t depth,
                      OnField&& on_field) {
  if (status s = check_depth(doc, depth, value); !s.ok()) return s;
  od::object object;
  if (error_code e = value.get_object().get(object)) return malformed_at(doc, e, value);
  return for_each_member(
      doc, object, [&] { return location_of(value); }, on_field);
}

template <class OnElement>
status for_each_element(const document_context& doc, od::value value, std::size_t depth,
                        OnElement&& on_element) {
  if (status s = check_depth(doc, depth, value); !s.ok()) return s;
  od::array array;
  if (error_code e = value.get_array().get(array)) return malformed_at(doc, e, value);
  for (auto element_result : array) {
    if (error_code e = element_result.error()) return malformed_at(doc, e, value);
    od::value element = element_result.value_unsafe();
    if (status s = on_element(element); !s.ok()) return s;
  }
  return {};
}

status walk_value(const document_context& doc, od::value value, std::size_t depth) {
  od::json_type type;
  if (error_code e = value.type().get(type)) return malformed_at(doc, e, value);
  switch (type) {
    case od::json_type::object:
      return for_each_field(doc, value, depth + 1, [&](std::string_view, od::value v) {
        return walk_value(doc, v, depth + 1);
      });
    case od::json_type::array:
      return for_each_element(doc, value, depth + 1,
                              [&](od::value v) { return walk_value(doc, v, depth + 1); });
    case od::json_type::string: {
      std::string_view s;
      if (error_code e = value.get_string().get(s)) return malformed_at(doc, e, value);
      return {};
    }
    case od::json_type::number: {
      const std::string_view token = token_of(doc, value);
      if (!is_json_number(token)) return malformed_token(doc, token);
      return {};
    }
    case od::json_type::boolean: {
      bool b = false;
      if (error_code e = value.get_bool().get(b)) return malformed_at(doc, e, value);
      return {};
    }
    case od::json_type::null: {
      bool is_null = false;
      if (error_code e = value.is_null().get(is_null); e || !is_null) {
        return malformed_at(doc, e ? e : error_code::N_ATOM_ERROR, value);
      }
      return {};
    }
  }
  return malformed_at(doc, error_code::TAPE_ERROR, value);
}

// --- typed scalars
// --------------------------------------------------------------------------------

status wrong_type(const document_context& doc, std::string_view field, std::string_view expected) {
  return status{
      errc::invalid_argument,
      fmt::format("unable to parse '{}' in the {} JSON: expected {}", field, doc.what, expected)};
}

// A string value with no escapes, read in place and left unconsumed (the enclosing iteration skips
// it); false for any other value.
bool in_place_string(const document_context& doc, od::value& value, std::string_view& out) {
  const std::string_view token = value.raw_json_token();
  return !token.empty() && token.front() == '"' && plain_string(doc, token.data() + 1, out);
}

// A string, in the document or unescaped into the parser's buffer: valid until the next document.
status read_string_view(const document_context& doc, od::value value, std::string_view field,
                        std::string_view& out) {
  if (in_place_string(doc, value, out)) return {};
  if (error_code e = value.get_string().get(out)) {
    if (e == error_code::INCORRECT_TYPE) {
      if (status walked = walk_value(doc, value, 0); !walked.ok()) return walked;
      return wrong_type(doc, field, "a string");
    }
    return malformed_at(doc, e, value);
  }
  return {};
}

status read_string(const document_context& doc, od::value value, std::string_view field,
                   std::string& out) {
  std::string_view s;
  if (status read = read_string_view(doc, value, field, s); !read.ok()) return read;
  out.assign(s);
  return {};
}

status read_bool(const document_context& doc, od::value value, std::string_view field, bool& out) {
  if (value.get_bool().get(out) != error_code::SUCCESS) {
    if (status walked = walk_value(doc, value, 0); !walked.ok()) return walked;
    return wrong_type(doc, field, "a boolean");
  }
  return {};
}

// A parameter value keeps its JSON type: integer (int64, or uint64 above INT64_MAX), double,
// bool or string. Anything else is refused, with Triton's wording.
status read_parameter_value(const document_context& doc, std::string_view key, od::value value,
                            parameter_value& out) {
  // NaN and Infinity, which JSON lacks, as in tensor data (and as the encoder writes them).
  if (const std::string_view token = token_of(doc, value);
      token == "NaN" || token == "Infinity" || token == "-Infinity") {
    double special = 0;
    (void)parse_floating(token, special);
    out = special;
    return {};
  }
  od::json_type type;
  if (error_code e = value.type().get(type)) return malformed_at(doc, e, value);
  switch (type) {
    case od::json_type::string: {
      std::string s;
      if (status st = read_string(doc, value, key, s); !st.ok()) return st;
      out = std::move(s);
      return {};
    }
    case od::json_type::boolean: {
      bool b = false;
      if (status st = read_bool(doc, value, key, b); !st.ok()) return st;
      out = b;
      return {};
    }
    case od::json_type::number: {
      const std::string_view token = token_of(doc, value);
      const number_shape number = scan_number(token);
      if (!number.valid) return malformed_token(doc, token);
      if (number.integer) {
        bool out_of_range = false;
        std::int64_t i = 0;
        if (parse_integer(token, i, out_of_range)) {
          out = i;
          return {};
        }
        std::uint64_t u = 0;
        if (parse_integer(token, u, out_of_range)) {
          out = u;
          return {};
        }
      }
      double d = 0;
      if (!parse_floating(token, d)) return malformed_token(doc, token);
      out = d;
      return {};
    }
    case od::json_type::null:
    case od::json_type::array:
    case od::json_type::object:
      if (status walked = walk_value(doc, value, 1); !walked.ok()) return walked;
      return status{errc::invalid_argument,
                    fmt::format("parameter '{}' has invalid type. It should be either 'int', "
                                "'double', 'bool', or 'string'.",
                                key)};
  }
  return malformed_at(doc, error_code::TAPE_ERROR, value);
}

status read_parameters(const document_context& doc, od::value value, std::size_t depth,
                       parameters& out) {
  od::json_type type;
  if (error_code e = value.type().get(type)) return malformed_at(doc, e, value);
  if (type != od::json_type::object) {
    if (status walked = walk_value(doc, value, depth); !walked.ok()) return walked;
    return wrong_type(doc, "parameters", "an object");
  }
  return for_each_field(doc, value, depth, [&](std::string_view key, od::value v) {
    parameter_value parsed;
    if (status s = read_parameter_value(doc, key, v, parsed); !s.ok()) return s;
    out.append_unchecked(std::string{key}, std::move(parsed));  // for_each_field refuses duplicates
    return status{};
  });
}

status read_shape(const document_context& doc, od::value value, std::size_t depth,
                  std::string_view role, std::string_view name, shape_type& out) {
  od::json_type type;
  if (error_code e = value.type().get(type)) return malformed_at(doc, e, value);
  if (type != od::json_type::array) {
    if (status walked = walk_value(doc, value, depth); !walked.ok()) return walked;
    return status{
        errc::invalid_argument,
        fmt::format("unable to parse 'shape' for {} '{}': expected an array", role, name)};
  }
  return for_each_element(doc, value, depth, [&](od::value element) {
    const std::string_view token = token_of(doc, element);
    std::int64_t dim = 0;
    bool out_of_range = false;
    if (!parse_integer(token, dim, out_of_range)) {
      if (status walked = walk_value(doc, element, depth + 1); !walked.ok()) return walked;
      return status{errc::invalid_argument,
                    fmt::format("unable to parse 'shape' for {} '{}': dimension {} is not an "
                                "integer in [0, 2^63)",
                                role, name, out.size())};
    }
    out.push_back(dim);
    return status{};
  });
}

// --- tensor data -------------------------------------------------------------------------------

// Writes decoded leaves into the tensor's typed buffer; counts leaves past the end without
// writing, so that a count mismatch reports the real count.
struct leaf_sink {
  std::byte* out = nullptr;
  std::uint64_t capacity = 0;
  std::uint64_t count = 0;

  template <class T>
  void put(const T& value) {
    if (count < capacity) [[likely]] {
      // A typed store into the aligned buffer: unlike a byte copy, a store of a 16- or 32-bit
      // type or a float cannot alias the sink's own fields, which then stay in registers
      // through the element loop.
      reinterpret_cast<T*>(out)[count] = value;
    }
    ++count;
  }
};

struct tensor_context {
  const document_context* doc;
  std::string_view role;  // "input" or "output"
  std::string_view name;
  datatype type;
};

// The leaf readers: `read(element, sink)` stores one value and returns true, or returns false
// and leaves the explanation to `explain_leaf` (off the hot path). Numbers go through simdjson's
// validating, correctly rounded parser; the few tokens it refuses that JSON data may still hold
// (NaN, Infinity, -Infinity) and the rare values whose rounding needs the decimal itself take the
// slow path through the token's text.
template <class T>
struct integer_leaf {
  const document_context* doc;
  bool operator()(od::value& element, leaf_sink& sink) const {
    if constexpr (std::is_signed_v<T>) {
      std::int64_t value = 0;
      if (element.get_int64().get(value) != error_code::SUCCESS) return slow(element, sink);
      if (value < std::numeric_limits<T>::min() || value > std::numeric_limits<T>::max()) {
        return false;
      }
      sink.put(static_cast<T>(value));
    } else {
      std::uint64_t value = 0;
      if (element.get_uint64().get(value) != error_code::SUCCESS) return slow(element, sink);
      if (value > std::numeric_limits<T>::max()) return false;
      sink.put(static_cast<T>(value));
    }
    return true;
  }
  // "-0" is a fine unsigned zero that simdjson refuses.
  bool slow(od::value& element, leaf_sink& sink) const {
    T value;
    bool out_of_range = false;
    if (!parse_integer(token_of(*doc, element), value, out_of_range)) return false;
    sink.put(value);
    return true;
  }
};

// simdjson before 3.6.3 (Debian 12 has 3.0.1) misreads a number whose integer part is 0 and whose
// fraction holds more than 19 digits after its leading zeros: the 64-bit digit accumulator wraps
// unnoticed, and "0.95000000000000000000" reads as 0.0277 (simdjson#2093). Such a token is at
// least 22 characters ("0." and 20 digits); those few go to the exact path through the text.
constexpr bool simdjson_misreads_long_fractions =
    simdjson::SIMDJSON_VERSION_MAJOR < 3 ||
    (simdjson::SIMDJSON_VERSION_MAJOR == 3 &&
     (simdjson::SIMDJSON_VERSION_MINOR < 6 ||
      (simdjson::SIMDJSON_VERSION_MINOR == 6 && simdjson::SIMDJSON_VERSION_REVISION < 3)));

// Whether simdjson's get_double may misread `element` (see above). The raw token runs to the next
// structural character, so it may include whitespace: the test errs towards the exact path.
inline bool may_be_misread(od::value& element) {
  if constexpr (!simdjson_misreads_long_fractions) return false;
  const std::string_view raw = element.raw_json_token();
  if (raw.size() < 22) return false;
  const std::size_t at = raw[0] == '-' ? 1 : 0;
  return raw[at] == '0' && raw[at + 1] == '.';
}

// FP32 from simdjson's double when that is safe: a double that is not exactly halfway between two
// floats rounds to the same float as the decimal does. Halfway doubles, and values outside the
// normal float range, are parsed again from the text, straight to float.
inline bool double_rounds_like_decimal(double d) {
  const auto bits = std::bit_cast<std::uint64_t>(d);
  const auto exponent = static_cast<int>((bits >> 52U) & 0x7FFU) - 1023;
  constexpr std::uint64_t below_float_precision = (std::uint64_t{1} << 29U) - 1U;
  return exponent >= -126 && exponent <= 126 &&
         (bits & below_float_precision) != (std::uint64_t{1} << 28U);
}

struct fp32_leaf {
  const document_context* doc;
  bool operator()(od::value& element, leaf_sink& sink) const {
    double value = 0;
    if (!may_be_misread(element) && element.get_double().get(value) == error_code::SUCCESS &&
        double_rounds_like_decimal(value)) [[likely]] {
      sink.put(static_cast<float>(value));
      return true;
    }
    float exact = 0;
    const std::string_view token = token_of(*doc, element);
    if (token.empty() || !parse_floating(token, exact)) return false;
    sink.put(exact);
    return true;
  }
};

struct fp64_leaf {
  const document_context* doc;
  bool operator()(od::value& element, leaf_sink& sink) const {
    double value = 0;
    if (may_be_misread(element) || element.get_double().get(value) != error_code::SUCCESS)
        [[unlikely]] {
      const std::string_view token = token_of(*doc, element);
      if (token.empty() || !parse_floating(token, value)) return false;
    }
    sink.put(value);
    return true;
  }
};

// FP16/BF16: the decimal is rounded to double, then to 16 bits; a double exactly halfway between
// two 16-bit values may stand for a decimal just above or below it, which settles the tie.
template <class Half>
struct half_leaf {
  const document_context* doc;
  static Half rounded(double value) {
    if constexpr (std::is_same_v<Half, half>) {
      return detail::double_to_half(value);
    } else {
      return detail::double_to_bfloat16(value);
    }
  }
  bool operator()(od::value& element, leaf_sink& sink) const {
    // simdjson's double is the decimal correctly rounded, so rounding it again is exact unless it
    // lies halfway between two 16-bit values: only then is the decimal's own text needed.
    double value = 0;
    if (!may_be_misread(element) && element.get_double().get(value) == error_code::SUCCESS)
        [[likely]] {
      const Half once = rounded(value);
      if (!detail::is_half_tie(once, value)) {
        sink.put(once);
        return true;
      }
    }
    const std::string_view token = token_of(*doc, element);
    if (token.empty() || !parse_floating(token, value)) return false;
    sink.put(detail::correct_half_tie(rounded(value), value, token));
    return true;
  }
};

struct bool_leaf {
  bool operator()(od::value& element, leaf_sink& sink) const {
    bool value = false;
    if (element.get_bool().get(value) != error_code::SUCCESS) return false;
    sink.put(static_cast<std::uint8_t>(value ? 1 : 0));
    return true;
  }
};

template <class T>
std::string_view integer_expectation() {
  if constexpr (std::is_signed_v<T>) {
    return "a signed integer";
  } else {
    return "an unsigned integer";
  }
}

template <class T>
std::string range_of() {
  return fmt::format("[{}, {}]", +std::numeric_limits<T>::min(), +std::numeric_limits<T>::max());
}

std::string integer_range(datatype type) {
  switch (type) {
    case datatype::uint8: return range_of<std::uint8_t>();
    case datatype::uint16: return range_of<std::uint16_t>();
    case datatype::uint32: return range_of<std::uint32_t>();
    case datatype::uint64: return range_of<std::uint64_t>();
    case datatype::int8: return range_of<std::int8_t>();
    case datatype::int16: return range_of<std::int16_t>();
    case datatype::int32: return range_of<std::int32_t>();
    default: return range_of<std::int64_t>();
  }
}

// Why a leaf was refused: malformed JSON (reported as such), an integer out of range, or a value
// of the wrong JSON type for the datatype.
[[gnu::cold]] status explain_leaf(const tensor_context& t, od::value& element,
                                  std::string_view token, std::uint64_t index) {
  if (status walked = walk_value(*t.doc, element, 0); !walked.ok()) return walked;
  const std::string shown{token.substr(0, 64)};
  const number_shape number = scan_number(token);
  if (is_integer(t.type) && number.valid && number.integer) {
    return status{
        errc::invalid_argument,
        fmt::format("unable to parse 'data' for {} '{}': element {} is {}, out of range "
                    "for {} {}",
                    t.role, t.name, index, shown, to_string(t.type), integer_range(t.type))};
  }
  std::string expected;
  if (is_signed_integer(t.type)) {
    expected = fmt::format("a signed integer for {}", to_string(t.type));
  } else if (is_unsigned_integer(t.type)) {
    expected = fmt::format("an unsigned integer for {}", to_string(t.type));
  } else if (is_floating(t.type)) {
    expected = fmt::format("a number for {}", to_string(t.type));
  } else if (is_bool(t.type)) {
    expected = "true or false for BOOL";
  } else {
    expected = "a string for BYTES";
  }
  return status{errc::invalid_argument,
                fmt::format("unable to parse 'data' for {} '{}': element {} is {}, expected {}",
                            t.role, t.name, index, shown, expected)};
}

// Walks `data` (nested arrays at any depth, flattened in row-major order, as Triton does) and
// hands each leaf to `read`.
template <class Read>
status read_leaves(const tensor_context& t, od::value value, std::size_t depth, leaf_sink& sink,
                   const Read& read) {
  const document_context& doc = *t.doc;
  if (status s = check_depth(doc, depth, value); !s.ok()) return s;
  od::array array;
  if (error_code e = value.get_array().get(array)) return malformed_at(doc, e, value);
  for (auto element_result : array) {
    if (error_code e = element_result.error()) [[unlikely]]
      return malformed_at(doc, e, value);
    od::value element = element_result.value_unsafe();
    if (read(element, sink)) [[likely]]
      continue;
    // Not a leaf of the datatype: a nested array (natural form), or a mistake.
    od::json_type type;
    if (element.type().get(type) == error_code::SUCCESS && type == od::json_type::array) {
      if (status s = read_leaves(t, element, depth + 1, sink, read); !s.ok()) return s;
      continue;
    }
    {
      const std::string_view token = token_of(doc, element);
      if (token.empty()) return malformed_at(doc, error_code::TAPE_ERROR, element);
      return explain_leaf(t, element, token, sink.count);
    }
  }
  return {};
}

status decode_leaves(const tensor_context& t, od::value data, std::size_t depth, leaf_sink& sink) {
  switch (t.type) {
    case datatype::boolean: return read_leaves(t, data, depth, sink, bool_leaf{});
    case datatype::uint8:
      return read_leaves(t, data, depth, sink, integer_leaf<std::uint8_t>{t.doc});
    case datatype::uint16:
      return read_leaves(t, data, depth, sink, integer_leaf<std::uint16_t>{t.doc});
    case datatype::uint32:
      return read_leaves(t, data, depth, sink, integer_leaf<std::uint32_t>{t.doc});
    case datatype::uint64:
      return read_leaves(t, data, depth, sink, integer_leaf<std::uint64_t>{t.doc});
    case datatype::int8: return read_leaves(t, data, depth, sink, integer_leaf<std::int8_t>{t.doc});
    case datatype::int16:
      return read_leaves(t, data, depth, sink, integer_leaf<std::int16_t>{t.doc});
    case datatype::int32:
      return read_leaves(t, data, depth, sink, integer_leaf<std::int32_t>{t.doc});
    case datatype::int64:
      return read_leaves(t, data, depth, sink, integer_leaf<std::int64_t>{t.doc});
    case datatype::fp16: return read_leaves(t, data, depth, sink, half_leaf<half>{t.doc});
    case datatype::bf16: return read_leaves(t, data, depth, sink, half_leaf<bfloat16>{t.doc});
    case datatype::fp32: return read_leaves(t, data, depth, sink, fp32_leaf{t.doc});
    case datatype::fp64: return read_leaves(t, data, depth, sink, fp64_leaf{t.doc});
    case datatype::bytes: break;
  }
  return status{errc::internal, "BYTES data reached the fixed-size decoder"};
}

status element_count_mismatch(const tensor_context& t, const shape_type& shape,
                              std::uint64_t expected, std::uint64_t actual) {
  return status{errc::invalid_argument,
                fmt::format("unable to parse 'data' for {} '{}': shape {} expects {} elements, "
                            "got {}",
                            t.role, t.name, to_string(shape), expected, actual)};
}

// Decodes `data` into `out`, a new buffer of `expected` elements of t.type.
status decode_data(const tensor_context& t, od::value data, std::size_t depth,
                   const shape_type& shape, std::uint64_t expected, std::size_t json_size,
                   buffer& out) {
  if (t.type == datatype::bytes) {
    // Elements are appended in the BYTES format as they are read; the string becomes the buffer.
    std::string elements;
    leaf_sink counter;  // counts only
    const auto read_string_leaf = [&elements](od::value& element, leaf_sink& sink) {
      std::string_view s;
      if (element.get_string().get(s) != error_code::SUCCESS) return false;
      // A string is shorter than the JSON it came from, which the limits keep far below 4 GiB.
      std::byte prefix[4];
      detail::write_bytes_length(prefix, static_cast<std::uint32_t>(s.size()));
      elements.append(reinterpret_cast<const char*>(prefix), 4);
      elements.append(s);
      ++sink.count;
      return true;
    };
    if (status s = read_leaves(t, data, depth, counter, read_string_leaf); !s.ok()) return s;
    const std::uint64_t count = counter.count;
    if (count != expected) return element_count_mismatch(t, shape, expected, count);
    out = buffer::from_string(std::move(elements));
    return {};
  }
  // Each leaf takes at least one byte of JSON: more elements than JSON bytes cannot match, so
  // count them without allocating.
  const std::uint64_t capacity = expected <= json_size ? expected : 0;
  result<mutable_buffer> storage = mutable_buffer::allocate(capacity * element_size(t.type));
  if (!storage) return std::move(storage).error();
  leaf_sink sink{storage->data(), capacity, 0};
  if (status s = decode_leaves(t, data, depth, sink); !s.ok()) return s;
  if (sink.count != expected) return element_count_mismatch(t, shape, expected, sink.count);
  out = buffer{std::move(*storage)};
  return {};
}

// --- tensors in a request or response
// -------------------------------------------------------------

// What a tensor object holds before its data is placed.
struct parsed_tensor {
  std::string name;
  std::optional<datatype> type;
  std::optional<shape_type> shape;
  oip::parameters parameters;
  std::optional<std::int64_t> binary_size;
  std::optional<shared_memory_reference> shared_memory;
  bool has_data = false;
  buffer data;
  // "data" seen before "datatype"/"shape": its raw text, decoded once the object is complete.
  std::string_view deferred_data;
};

status missing_field(const document_context& doc, std::string_view role, std::string_view field,
                     std::size_t index) {
  return status{
      errc::invalid_argument,
      fmt::format("unable to parse the {} JSON: {} {} has no '{}'", doc.what, role, index, field)};
}

result<buffer> decode_deferred_data(const tensor_context& t, std::string_view raw,
                                    const shape_type& shape, std::uint64_t expected,
                                    const char* document_end);

// Moves a tensor's `binary_data_size` parameter, if any, out of its parameters into `size`.
status take_binary_data_size(parameters& params, std::string_view role, std::string_view name,
                             std::optional<std::int64_t>& size) {
  const parameter_value* value = params.find(parameter_names::binary_data_size);
  if (value == nullptr) return {};
  const auto* as_int = std::get_if<std::int64_t>(value);
  if (as_int == nullptr || *as_int < 0) {
    return status{errc::invalid_argument,
                  fmt::format("unable to parse 'binary_data_size' for {} '{}': expected a "
                              "non-negative integer",
                              role, name)};
  }
  size = *as_int;
  params.erase(parameter_names::binary_data_size);
  return {};
}

// Reads one tensor object ($request_input or $response_output).
status read_tensor(const document_context& doc, od::value value, std::size_t depth,
                   std::string_view role, std::size_t index, std::size_t json_size,
                   const char* document_end, parsed_tensor& out) {
  od::json_type type;
  if (error_code e = value.type().get(type)) return malformed_at(doc, e, value);
  if (type != od::json_type::object) {
    if (status walked = walk_value(doc, value, depth); !walked.ok()) return walked;
    return status{
        errc::invalid_argument,
        fmt::format("unable to parse the {} JSON: {} {} is not an object", doc.what, role, index)};
  }
  // Until its "name" is read, a tensor is called by its position in messages.
  char position[24] = {'#'};
  std::string_view name_for_messages(
      position,
      static_cast<std::size_t>(std::to_chars(position + 1, position + 24, index).ptr - position));
  bool has_name = false;
  status field_status = for_each_field(doc, value, depth, [&](std::string_view key, od::value v) {
    if (key == "name") {
      if (status s = read_string(doc, v, "name", out.name); !s.ok()) return s;
      name_for_messages = out.name;
      has_name = true;
      return status{};
    }
    if (key == "datatype") {
      std::string_view text;
      if (status s = read_string_view(doc, v, "datatype", text); !s.ok()) return s;
      result<datatype> parsed = parse_datatype(text);
      if (!parsed) {
        return status{errc::invalid_argument, fmt::format("invalid datatype '{}' for {} '{}'", text,
                                                          role, name_for_messages)};
      }
      out.type = *parsed;
      return status{};
    }
    if (key == "shape") {
      shape_type shape;
      if (status s = read_shape(doc, v, depth + 1, role, name_for_messages, shape); !s.ok()) {
        return s;
      }
      out.shape = std::move(shape);
      return status{};
    }
    if (key == "parameters") {
      if (status s = read_parameters(doc, v, depth + 1, out.parameters); !s.ok()) return s;
      if (role == "input") {
        result<std::optional<shared_memory_reference>> place =
            take_shared_memory_reference(out.parameters, role, name_for_messages);
        if (!place) return std::move(place).error();
        out.shared_memory = std::move(*place);
      }
      return take_binary_data_size(out.parameters, role, name_for_messages, out.binary_size);
    }
    if (key == "data") {
      out.has_data = true;
      od::json_type data_type;
      if (error_code e = v.type().get(data_type)) return malformed_at(doc, e, v);
      if (data_type != od::json_type::array) {
        if (status walked = walk_value(doc, v, depth + 1); !walked.ok()) return walked;
        return status{errc::invalid_argument,
                      fmt::format("unable to parse 'data' for {} '{}': expected an array", role,
                                  name_for_messages)};
      }
      if (out.type && out.shape) {
        const tensor_context t{&doc, role, name_for_messages, *out.type};
        result<std::uint64_t> count = element_count(*out.shape);
        if (!count) return status{};                             // reported with the shape below
        if (*count > doc.bounds->max_elements) return status{};  // reported below
        return decode_data(t, v, depth + 1, *out.shape, *count, json_size, out.data);
      }
      od::array array;
      if (error_code e = v.get_array().get(array)) return malformed_at(doc, e, v);
      std::string_view raw;
      if (error_code e = array.raw_json().get(raw)) return malformed_at(doc, e, v);
      out.deferred_data = raw;
      return status{};
    }
    return walk_value(doc, v, depth + 1);
  });
  if (!field_status.ok()) return field_status;

  if (!has_name) return missing_field(doc, role, "name", index);
  if (!out.type) return missing_field(doc, role, "datatype", index);
  if (!out.shape) return missing_field(doc, role, "shape", index);
  result<std::uint64_t> count = element_count(*out.shape);
  if (!count) {
    return status{errc::invalid_argument, fmt::format("unable to parse 'shape' for {} '{}': {}",
                                                      role, out.name, count.error().message())};
  }
  if (*count > doc.bounds->max_elements) {
    return status{errc::payload_too_large,
                  fmt::format("{} '{}' has {} elements, above the limit of {}", role, out.name,
                              *count, doc.bounds->max_elements)};
  }
  if (!out.has_data && !out.binary_size && doc.placed_outputs != nullptr) {
    // A server answers an output that it wrote to shared memory with no data at all.
    if (const shared_memory_reference* place = doc.placed_outputs->find(out.name)) {
      out.shared_memory = *place;
    }
  }
  const int sources =
      (out.has_data ? 1 : 0) + (out.binary_size ? 1 : 0) + (out.shared_memory ? 1 : 0);
  if (sources != 1) {
    std::string set = "no field is set";
    if (sources > 1) {
      set = fmt::format("set{}{}{}", out.has_data ? " 'data'" : "",
                        out.binary_size ? " 'binary_data_size'" : "",
                        out.shared_memory ? " 'shared_memory_region'" : "");
    }
    // A client reading a reply: an output with nothing is most likely one the server wrote to
    // shared memory.
    const std::string_view hint = role == "output" && sources == 0
                                      ? " (an output written to shared memory is read with the "
                                        "client's shared_memory_outputs)"
                                      : "";
    return status{
        errc::invalid_argument,
        fmt::format("{} '{}' must set only one of the following fields: 'data', "
                    "'binary_data_size' in 'parameters'{}. But {}{}",
                    role, out.name,
                    role == "input" ? ", 'shared_memory_region' in 'parameters'" : "", set, hint)};
  }
  if (!out.deferred_data.empty()) {
    const tensor_context t{&doc, role, out.name, *out.type};
    result<buffer> data =
        decode_deferred_data(t, out.deferred_data, *out.shape, *count, document_end);
    if (!data) return std::move(data).error();
    out.data = std::move(*data);
  }
  return {};
}

// A fixed-size tensor's binary data against its shape.
status check_byte_size(const document_context& doc, std::string_view role, const parsed_tensor& t,
                       std::uint64_t size) {
  if (is_bytes(*t.type)) return {};  // its elements are checked when the tensor is made
  // Fails only where a host's element limit lets the byte size pass 2^64.
  const result<std::uint64_t> expected = byte_size(*t.type, *t.shape);
  if (!expected) {
    return status{errc::invalid_argument, fmt::format("unable to parse 'shape' for {} '{}': {}",
                                                      role, t.name, expected.error().message())};
  }
  if (size != *expected) {
    return status{errc::invalid_argument,
                  fmt::format("{} byte size mismatch for {} '{}'{}. Expected {}, got {}", role,
                              role, t.name, doc.for_model(), *expected, size)};
  }
  return {};
}

// Places a client's outputs that a server wrote to shared memory: views into its mapping.
status place_shared_memory_outputs(const document_context& doc,
                                   std::vector<parsed_tensor>& tensors) {
  for (parsed_tensor& t : tensors) {
    if (!t.shared_memory) continue;
    result<buffer> bytes =
        doc.placed_outputs->read(*t.shared_memory, t.name, *t.type, *t.shape, *doc.bounds);
    if (!bytes) return std::move(bytes).error();
    t.data = std::move(*bytes);
  }
  return {};
}

// Places binary tensors: each `binary_data_size` bytes of `binary`, in tensor order, as views.
status place_binary(const document_context& doc, std::string_view role,
                    std::vector<parsed_tensor>& tensors, const buffer& binary) {
  std::size_t offset = 0;
  for (parsed_tensor& t : tensors) {
    if (!t.binary_size) continue;
    const auto size = static_cast<std::uint64_t>(*t.binary_size);
    if (size > binary.size() - offset) {
      return status{errc::invalid_argument,
                    fmt::format("unexpected size for {} '{}', expecting {} additional bytes{}",
                                role, t.name, size - (binary.size() - offset), doc.for_model())};
    }
    result<buffer> slice = binary.slice(offset, static_cast<std::size_t>(size));
    if (!slice) return slice.error();
    offset += static_cast<std::size_t>(size);
    if (status s = check_byte_size(doc, role, t, size); !s.ok()) return s;
    t.data = std::move(*slice);
  }
  if (offset != binary.size()) {
    return status{errc::invalid_argument,
                  fmt::format("unexpected additional {} data{}: {} bytes after the last binary {}",
                              role, doc.for_model(), binary.size() - offset, role)};
  }
  return {};
}

result<tensor> finish_tensor(const document_context& doc, parsed_tensor&& t) {
  result<tensor> made =
      tensor::make(std::move(t.name), *t.type, std::move(*t.shape), std::move(t.data));
  if (!made) {
    // Only BYTES data can be malformed here (fixed sizes were checked): name the model too.
    return status{made.error().code(),
                  fmt::format("{}{}", made.error().message(), doc.for_model())};
  }
  made->parameters() = std::move(t.parameters);
  return made;
}

// Places the binary tensors, then builds the final tensors in order. Inputs that name a
// shared-memory region go to `in_regions`, for the server to read.
result<std::vector<tensor>> assemble_tensors(
    const document_context& doc, std::string_view role, std::vector<parsed_tensor>& parsed,
    const buffer& binary, std::vector<input_in_shared_memory>* in_regions = nullptr) {
  if (role != "input") {
    if (status s = place_shared_memory_outputs(doc, parsed); !s.ok()) return s;
  }
  if (status s = place_binary(doc, role, parsed, binary); !s.ok()) return s;
  std::vector<tensor> tensors;
  tensors.reserve(parsed.size());
  for (parsed_tensor& p : parsed) {
    if (role == "input" && p.shared_memory) {
      in_regions->push_back({tensors.size() + in_regions->size(), std::move(p.name), *p.type,
                             std::move(*p.shape), std::move(p.parameters),
                             std::move(*p.shared_memory)});
      continue;
    }
    result<tensor> t = finish_tensor(doc, std::move(p));
    if (!t) return std::move(t).error();
    tensors.push_back(std::move(*t));
  }
  return tensors;
}

// An optional string field, such as "id".
status read_optional_string(const document_context& doc, od::value value, std::string_view field,
                            std::optional<std::string>& out) {
  std::string text;
  if (status s = read_string(doc, value, field, text); !s.ok()) return s;
  out = std::move(text);
  return {};
}

// --- documents
// --------------------------------------------------------------------------------------

// The JSON part of a body, padded for simdjson: read in place when the body's storage has the
// padding after it (a body allocated by a transport, or binary data following the JSON),
// otherwise copied (the JSON part only, never tensor bytes).
struct padded_json {
  const char* data = nullptr;
  std::size_t size = 0;
  std::size_t capacity = 0;
  std::string copy;

  padded_json(const char* bytes, std::size_t length, std::size_t readable_after) {
    if (readable_after >= simdjson::SIMDJSON_PADDING) {
      data = bytes;
      size = length;
      capacity = length + readable_after;
    } else {
      copy.reserve(length + simdjson::SIMDJSON_PADDING);
      copy.assign(bytes, length);
      copy.append(simdjson::SIMDJSON_PADDING, ' ');
      data = copy.data();
      size = length;
      capacity = copy.size();
    }
  }
};

// A parser keeps its buffers (about 7 bytes per JSON byte) for the next document. Each thread
// keeps two (documents, and data that came before its datatype) for documents up to
// `thread_parser_capacity`; larger documents share one process-wide parser, kept after use up to
// `large_parser_capacity`, so that large requests cost no fresh buffers (and their page faults)
// each time, yet do not pin that memory in every thread that ever served one.
constexpr std::size_t thread_parser_capacity = std::size_t{16} << 20U;
constexpr std::size_t large_parser_capacity = std::size_t{64} << 20U;

// The parser for one document of `size` bytes, held while the document is read.
class parser_lease {
 public:
  parser_lease(int which, std::size_t size) {
    if (size <= thread_parser_capacity) {
      thread_local od::parser parsers[2];
      parser_ = &parsers[which];
      return;
    }
    {
      const std::lock_guard lock{large_mutex};
      large_ = std::move(large_kept);
    }
    if (large_ == nullptr) large_ = std::make_unique<od::parser>();
    parser_ = large_.get();
  }
  parser_lease(const parser_lease&) = delete;
  parser_lease& operator=(const parser_lease&) = delete;
  ~parser_lease() {
    if (large_ == nullptr || large_->capacity() > large_parser_capacity) return;
    const std::lock_guard lock{large_mutex};
    if (large_kept == nullptr || large_kept->capacity() < large_->capacity()) {
      std::swap(large_kept, large_);  // the smaller one, if any, is freed with this lease
    }
  }

  [[nodiscard]] od::parser& get() const noexcept { return *parser_; }

 private:
  static inline std::mutex large_mutex;
  static inline std::unique_ptr<od::parser> large_kept;
  od::parser* parser_ = nullptr;
  std::unique_ptr<od::parser> large_;
};

result<buffer> decode_deferred_data(const tensor_context& t, std::string_view raw,
                                    const shape_type& shape, std::uint64_t expected,
                                    const char* document_end) {
  // `raw` lies inside the document, whose padding follows `document_end`.
  const auto readable =
      static_cast<std::size_t>(document_end - raw.data()) + simdjson::SIMDJSON_PADDING;
  const parser_lease parser{1, raw.size()};
  od::document doc;
  if (error_code e = parser.get().iterate(raw.data(), raw.size(), readable).get(doc)) {
    return malformed(*t.doc, e, raw.data());
  }
  // Checked by the document itself: the array is closed (see parse_document).
  od::array closed;
  if (error_code e = doc.get_array().get(closed)) return malformed(*t.doc, e, raw.data());
  doc.rewind();
  od::value root;
  if (error_code e = doc.get_value().get(root)) return malformed(*t.doc, e, raw.data());
  // Offsets in messages stay relative to the outer document.
  buffer data;
  if (status s = decode_data(t, root, 1, shape, expected, raw.size(), data); !s.ok()) return s;
  if (const char* trailing = nullptr; doc.current_location().get(trailing) == error_code::SUCCESS) {
    return malformed(*t.doc, error_code::TRAILING_CONTENT, trailing);
  }
  return data;
}

// Starts reading a JSON text whose root must be an object.
status open_document(document_context& doc, const padded_json& json, od::parser& parser,
                     od::document& document, od::object& root) {
  doc.begin = json.data;
  doc.end = json.data + json.size;
  if (error_code e = parser.iterate(json.data, json.size, json.capacity).get(document)) {
    return malformed(doc, e, json.data);
  }
  od::json_type type;
  if (error_code e = document.type().get(type)) return malformed(doc, e, json.data);
  if (type != od::json_type::object) {
    return status{
        errc::invalid_argument,
        fmt::format("failed to parse the {} JSON buffer: expected an object at 0", doc.what)};
  }
  // The document's own get_object() checks that the root object is closed; simdjson relies on
  // that check to never read past the last token of an unbalanced document.
  if (error_code e = document.get_object().get(root)) return malformed(doc, e, json.data);
  return {};
}

// After the root object: a position still in bounds means something follows it.
status check_nothing_follows(const document_context& doc, od::document& document) {
  if (const char* trailing = nullptr;
      document.current_location().get(trailing) == error_code::SUCCESS) {
    return malformed(doc, error_code::TRAILING_CONTENT, trailing);
  }
  return {};
}

// Runs `read_root(fields)` over a JSON text with the thread's parser, where `fields(on_field)`
// iterates the root object's members; then checks that nothing follows the root object.
template <class ReadRoot>
status parse_document(document_context& doc, const padded_json& json, ReadRoot&& read_root) {
  if (json.size > doc.bounds->max_json_bytes) {
    return status{errc::payload_too_large,
                  fmt::format("the {} JSON is {} bytes, above the limit of {}", doc.what, json.size,
                              doc.bounds->max_json_bytes)};
  }
  const parser_lease parser{0, json.size};
  od::document document;
  od::object root;
  if (status opened = open_document(doc, json, parser.get(), document, root); !opened.ok()) {
    return opened;
  }
  const auto where = [&document]() -> const char* {
    const char* at = nullptr;
    return document.current_location().get(at) == error_code::SUCCESS ? at : nullptr;
  };
  status read =
      read_root([&](auto&& on_field) { return for_each_member(doc, root, where, on_field); });
  if (!read.ok()) return read;
  return check_nothing_follows(doc, document);
}

// Triton's wording for two tensors (or requested outputs) of one name.
template <class Item>
status check_unique_names(const std::vector<Item>& items, std::string Item::*name,
                          std::string_view role, std::string_view where) {
  name_set names;
  for (const Item& item : items) names.add(item.*name);
  if (std::optional<std::string_view> duplicate = names.duplicate()) {
    return status{errc::invalid_argument,
                  fmt::format("{} '{}' already exists in {}", role, *duplicate, where)};
  }
  return {};
}

status read_request_outputs(const document_context& doc, od::value value,
                            std::vector<requested_output>& outputs) {
  std::size_t index = 0;
  status read = for_each_element(doc, value, 1, [&](od::value element) {
    requested_output out;
    bool has_name = false;
    status s = for_each_field(doc, element, 2, [&](std::string_view key, od::value v) {
      if (key == "name") {
        has_name = true;
        return read_string(doc, v, "name", out.name);
      }
      if (key == "parameters") return read_parameters(doc, v, 3, out.parameters);
      return walk_value(doc, v, 3);
    });
    if (!s.ok()) return s;
    if (!has_name) return missing_field(doc, "output", "name", index);
    outputs.push_back(std::move(out));
    ++index;
    return status{};
  });
  if (!read.ok()) return read;
  return check_unique_names(outputs, &requested_output::name, "output", "request");
}

status read_tensors(const document_context& doc, od::value value, std::string_view role,
                    std::size_t json_size, const char* document_end,
                    std::vector<parsed_tensor>& tensors) {
  tensors.reserve(4);
  status read = for_each_element(doc, value, 1, [&](od::value element) {
    parsed_tensor t;
    if (status s = read_tensor(doc, element, 2, role, tensors.size(), json_size, document_end, t);
        !s.ok()) {
      return s;
    }
    tensors.push_back(std::move(t));
    return status{};
  });
  if (!read.ok()) return read;
  return check_unique_names(tensors, &parsed_tensor::name, role, doc.what);
}

}  // namespace

namespace detail {
struct checked_tensor_parts {
  // Appends a tensor of parts that tensor::make would accept: `count` is the shape's element
  // count, and `data` holds that many elements of `type` (BYTES elements validated). Built in
  // place: no temporary tensor is moved into the vector.
  static void append(std::vector<tensor>& tensors, std::string_view name, datatype type,
                     shape_type&& shape, std::uint64_t count, buffer&& data, parameters&& params) {
    assert(is_bytes(type) ? validate_bytes_elements(data.bytes(), count, name).ok()
                          : data.size() == count * element_size(type));
    tensors.emplace_back(checked_parts_key{}, name, type, std::move(shape), count, std::move(data),
                         std::move(params));
  }
};
}  // namespace detail

namespace {

// --- the usual request, read directly
// ---------------------------------------------------------------
// Nearly every request has one form: known keys only, keys and names without escapes, each
// input's datatype and shape before its data. `read_usual_request` reads that form alone, with
// fewer layers than the general reader (no per-object key sets, no status on every value, each
// tensor built as soon as its object ends) and no messages: at anything else, an error included,
// it returns false and decode_request reads the document again with the general reader, which
// takes every form and words every error. What it accepts, it has visited in full, and it decodes
// to what the general reader would (tests/json_test.cpp and the request fuzzer compare the two).

// Which of an object's known keys `key` is (one bit each), or 0. A key written with escapes is
// none of them.
// Inlined and unrolled, so that each comparison has a constant length (no call to memcmp).
template <std::size_t n>
[[gnu::always_inline]] inline unsigned key_bit(od::raw_json_string key,
                                               const std::array<std::string_view, n>& known) {
#pragma GCC unroll 8
  for (std::size_t i = 0; i < n; ++i) {
    if (key.unsafe_is_equal(known[i])) return 1U << i;
  }
  return 0;
}

// The bit of a field's key when it is a known key seen for the first time, else 0. The field and
// its value are used in place: a copy of simdjson's small iterator structs, stored piecewise and
// read back whole, stalls on store forwarding.
template <std::size_t n>
[[gnu::always_inline]] inline unsigned usual_key(simdjson::simdjson_result<od::field>& field_result,
                                                 const std::array<std::string_view, n>& known,
                                                 unsigned& seen) {
  if (field_result.error() != error_code::SUCCESS) return 0;
  const unsigned bit = key_bit(field_result.value_unsafe().key(), known);
  if ((seen & bit) != 0) return 0;
  seen |= bit;
  return bit;
}

// The shape and its element count; false for a negative dimension or a product that overflows
// (the general reader then decides: a zero dimension makes the count 0, else it is an error).
bool read_usual_shape(od::value& value, shape_type& shape, std::uint64_t& count) {
  od::array array;
  if (value.get_array().get(array) != error_code::SUCCESS) return false;
  count = 1;
  bool overflow = false;
  for (auto dim_result : array) {
    std::int64_t dim = 0;
    if (dim_result.get_int64().get(dim) != error_code::SUCCESS || dim < 0) return false;
    overflow = __builtin_mul_overflow(count, static_cast<std::uint64_t>(dim), &count) || overflow;
    shape.push_back(dim);
  }
  return !overflow;
}

// The most inputs, and requested outputs, that the usual reader takes.
constexpr std::size_t usual_tensor_count = 16;

constexpr std::array<std::string_view, 5> tensor_keys{"name", "datatype", "shape", "parameters",
                                                      "data"};
constexpr unsigned name_key = 1U;
constexpr unsigned datatype_key = 2U;
constexpr unsigned shape_key = 4U;
constexpr unsigned parameters_key = 8U;
constexpr unsigned data_key = 16U;

// One input, appended to `inputs`; its binary data, if any, is the next bytes of `binary` after
// `binary_offset`.
bool read_usual_input(const document_context& doc, od::value& value, std::size_t json_size,
                      const buffer& binary, std::size_t& binary_offset,
                      std::vector<tensor>& inputs) {
  // Names are checked against each earlier one: more tensors go to the general reader.
  if (inputs.size() == usual_tensor_count) return false;
  od::object object;
  if (value.get_object().get(object) != error_code::SUCCESS) return false;
  unsigned seen = 0;
  std::string_view name;
  datatype type = datatype::bytes;
  shape_type shape;
  std::uint64_t count = 0;
  parameters params;
  std::optional<std::int64_t> binary_size;
  buffer data;
  for (auto field_result : object) {
    const unsigned key = usual_key(field_result, tensor_keys, seen);
    if (key == 0) return false;
    od::value& v = field_result.value_unsafe().value();
    if (key == name_key) {
      if (!in_place_string(doc, v, name)) return false;
    } else if (key == datatype_key) {
      std::string_view text;
      if (!in_place_string(doc, v, text)) return false;
      result<datatype> parsed = parse_datatype(text);
      if (!parsed) return false;
      type = *parsed;
    } else if (key == shape_key) {
      if (!read_usual_shape(v, shape, count) || count > doc.bounds->max_elements) return false;
    } else if (key == parameters_key) {
      if (!read_parameters(doc, v, 3, params).ok()) return false;
      // Shared memory is for the general reader.
      if (params.contains(parameter_names::shared_memory_region) ||
          params.contains(parameter_names::shared_memory_offset) ||
          params.contains(parameter_names::shared_memory_byte_size)) {
        return false;
      }
      if (!take_binary_data_size(params, "input", name, binary_size).ok()) return false;
    } else {  // data, after the datatype and shape that say how to read it
      if ((seen & (datatype_key | shape_key)) != (datatype_key | shape_key)) return false;
      const tensor_context t{&doc, "input", name, type};
      if (!decode_data(t, v, 3, shape, count, json_size, data).ok()) return false;
    }
  }
  if ((seen & (name_key | datatype_key | shape_key)) != (name_key | datatype_key | shape_key) ||
      ((seen & data_key) != 0) == binary_size.has_value()) {
    return false;
  }
  if (binary_size) {
    const auto size = static_cast<std::uint64_t>(*binary_size);
    if (size > binary.size() - binary_offset) return false;
    if (!is_bytes(type)) {
      const result<std::uint64_t> expected = byte_size(type, shape);
      if (!expected || size != *expected) return false;
    }
    result<buffer> slice = binary.slice(binary_offset, static_cast<std::size_t>(size));
    if (!slice) return false;
    binary_offset += static_cast<std::size_t>(size);
    data = std::move(*slice);
  }
  for (const tensor& earlier : inputs) {
    if (earlier.name() == name) return false;
  }
  // Fixed-size data was sized from the shape just read (JSON) or checked against it (binary);
  // BYTES data must hold exactly `count` elements.
  if (is_bytes(type) && !validate_bytes_elements(data.bytes(), count, name).ok()) return false;
  detail::checked_tensor_parts::append(inputs, name, type, std::move(shape), count, std::move(data),
                                       std::move(params));
  return true;
}

bool read_usual_output(const document_context& doc, od::value& value,
                       std::vector<requested_output>& outputs) {
  constexpr std::array<std::string_view, 2> keys{"name", "parameters"};
  constexpr unsigned output_name_key = 1U;
  if (outputs.size() == usual_tensor_count) return false;  // as for inputs
  od::object object;
  if (value.get_object().get(object) != error_code::SUCCESS) return false;
  unsigned seen = 0;
  std::string_view name;
  requested_output out;
  for (auto field_result : object) {
    const unsigned key = usual_key(field_result, keys, seen);
    if (key == 0) return false;
    od::value& v = field_result.value_unsafe().value();
    if (key == output_name_key) {
      if (!in_place_string(doc, v, name)) return false;
    } else if (!read_parameters(doc, v, 3, out.parameters).ok()) {
      return false;
    }
  }
  if ((seen & output_name_key) == 0) return false;
  for (const requested_output& earlier : outputs) {
    if (earlier.name == name) return false;
  }
  out.name.assign(name);
  outputs.push_back(std::move(out));
  return true;
}

template <class ReadElement>
bool read_usual_array(od::value& value, ReadElement&& read_element) {
  od::array array;
  if (value.get_array().get(array) != error_code::SUCCESS) return false;
  for (auto element_result : array) {
    if (element_result.error() != error_code::SUCCESS) return false;
    if (!read_element(element_result.value_unsafe())) return false;
  }
  return true;
}

bool read_usual_request(document_context& doc, const padded_json& json, const buffer& binary,
                        inference_request& request) {
  // Depths 1 to 3 hold the inputs, their objects and their shapes and data: a host that sets a
  // smaller limit gets its error from the general reader.
  if (json.size > doc.bounds->max_json_bytes || doc.bounds->max_json_depth < 3) return false;
  constexpr std::array<std::string_view, 4> keys{"id", "parameters", "inputs", "outputs"};
  constexpr unsigned id_key = 1U;
  constexpr unsigned request_parameters_key = 2U;
  constexpr unsigned inputs_key = 4U;
  constexpr unsigned outputs_key = 8U;
  const parser_lease parser{0, json.size};
  doc.begin = json.data;
  doc.end = json.data + json.size;
  od::document document;
  od::object root;
  // The document's get_object() checks that the root object is closed (see open_document).
  if (parser.get().iterate(json.data, json.size, json.capacity).get(document) !=
          error_code::SUCCESS ||
      document.get_object().get(root) != error_code::SUCCESS) {
    return false;
  }
  unsigned seen = 0;
  std::size_t binary_offset = 0;
  for (auto field_result : root) {
    const unsigned key = usual_key(field_result, keys, seen);
    if (key == 0) return false;
    od::value& v = field_result.value_unsafe().value();
    bool read = false;
    switch (key) {
      case id_key: {
        std::string_view id;
        read = in_place_string(doc, v, id);
        if (read) request.id.emplace(id);
        break;
      }
      case request_parameters_key:
        read = read_parameters(doc, v, 1, request.parameters).ok();
        break;
      case inputs_key:
        request.inputs.reserve(4);
        read = read_usual_array(v, [&](od::value& input) {
          return read_usual_input(doc, input, json.size, binary, binary_offset, request.inputs);
        });
        break;
      case outputs_key:
        read = read_usual_array(
            v, [&](od::value& output) { return read_usual_output(doc, output, request.outputs); });
        break;
      default: break;  // usual_key admits known keys only
    }
    if (!read) return false;
  }
  return (seen & inputs_key) != 0 && binary_offset == binary.size() &&
         check_nothing_follows(doc, document).ok();
}

// Splits a body into its JSON part and binary part per the header length.
struct body_parts {
  const char* json = nullptr;
  std::size_t json_size = 0;
  std::size_t readable_after = 0;
  buffer binary;
};

result<body_parts> split_body(const buffer& body, std::optional<std::size_t> header_length,
                              const limits& bounds, std::string_view what) {
  if (body.size() > bounds.max_body_bytes) {
    return status{errc::payload_too_large,
                  fmt::format("the {} body is {} bytes, above the limit of {}", what, body.size(),
                              bounds.max_body_bytes)};
  }
  body_parts parts;
  parts.json = reinterpret_cast<const char*>(body.data());
  parts.json_size = header_length.value_or(body.size());
  if (parts.json_size > body.size()) {
    return status{errc::invalid_argument,
                  fmt::format("inference header size should be in range (0, {}), got: {}",
                              body.size(), parts.json_size)};
  }
  parts.readable_after = body.size() - parts.json_size + body.padding();
  if (parts.json_size == body.size()) {
    // No binary part: an empty view at the body's end, which needs no share of its ownership.
    parts.binary = buffer::unowned(std::span(body.data() + body.size(), 0));
    return parts;
  }
  result<buffer> binary = body.slice(parts.json_size, body.size() - parts.json_size);
  if (!binary) return binary.error();
  parts.binary = std::move(*binary);
  return parts;
}

}  // namespace

namespace {

status decode_request_into(const buffer& body, std::optional<std::size_t> header_length,
                           const limits& bounds, std::string_view model_name,
                           inference_request& request) {
  if (header_length && *header_length == 0) {
    return status{errc::invalid_argument,
                  "a raw binary request (Inference-Header-Content-Length: 0) needs the model's "
                  "input metadata: decode it with decode_raw_request"};
  }
  result<body_parts> parts = split_body(body, header_length, bounds, "request");
  if (!parts) return std::move(parts).error();
  document_context doc{nullptr, nullptr, &bounds, "request", model_name};
  const padded_json json{parts->json, parts->json_size, parts->readable_after};
  const char* document_end = json.data + json.size;

  if (read_usual_request(doc, json, parts->binary, request)) return {};
  request = inference_request{};
  std::vector<parsed_tensor> inputs;
  bool has_inputs = false;
  status parsed = parse_document(doc, json, [&](auto&& fields) {
    return fields([&](std::string_view key, od::value v) {
      if (key == "id") return read_optional_string(doc, v, "id", request.id);
      if (key == "parameters") return read_parameters(doc, v, 1, request.parameters);
      if (key == "inputs") {
        has_inputs = true;
        return read_tensors(doc, v, "input", json.size, document_end, inputs);
      }
      if (key == "outputs") return read_request_outputs(doc, v, request.outputs);
      return walk_value(doc, v, 1);
    });
  });
  if (!parsed.ok()) return parsed;
  if (!has_inputs) {
    return status{errc::invalid_argument, "unable to parse the request JSON: it has no 'inputs'"};
  }
  result<std::vector<tensor>> tensors =
      assemble_tensors(doc, "input", inputs, parts->binary, &request.shared_memory_inputs);
  if (!tensors) return std::move(tensors).error();
  request.inputs = std::move(*tensors);
  return {};
}

}  // namespace

result<inference_request> decode_request(const buffer& body,
                                         std::optional<std::size_t> header_length,
                                         const limits& bounds, std::string_view model_name) {
  // Decoded in place in the result that is returned (one object, so no move of the request).
  result<inference_request> decoded{inference_request{}};
  if (status s = decode_request_into(body, header_length, bounds, model_name, *decoded); !s.ok()) {
    decoded = std::move(s);
  }
  return decoded;
}

result<inference_response> decode_response(const buffer& body,
                                           std::optional<std::size_t> header_length,
                                           const limits& bounds,
                                           const shared_memory_output_source* shared_memory) {
  result<body_parts> parts = split_body(body, header_length, bounds, "response");
  if (!parts) return std::move(parts).error();
  document_context doc{nullptr, nullptr, &bounds, "response", {}, shared_memory};
  const padded_json json{parts->json, parts->json_size, parts->readable_after};
  const char* document_end = json.data + json.size;

  inference_response response;
  std::vector<parsed_tensor> outputs;
  status parsed = parse_document(doc, json, [&](auto&& fields) {
    return fields([&](std::string_view key, od::value v) {
      if (key == "id") return read_optional_string(doc, v, "id", response.id);
      if (key == "model_name") return read_string(doc, v, "model_name", response.model_name);
      if (key == "model_version") {
        return read_string(doc, v, "model_version", response.model_version);
      }
      if (key == "parameters") return read_parameters(doc, v, 1, response.parameters);
      if (key == "outputs") return read_tensors(doc, v, "output", json.size, document_end, outputs);
      return walk_value(doc, v, 1);
    });
  });
  if (!parsed.ok()) return parsed;
  result<std::vector<tensor>> tensors = assemble_tensors(doc, "output", outputs, parts->binary);
  if (!tensors) return std::move(tensors).error();
  response.outputs = std::move(*tensors);
  return response;
}

namespace {

template <class Reader>
status decode_small(std::string_view text, std::string_view what, const limits& bounds,
                    Reader&& read) {
  document_context doc{nullptr, nullptr, &bounds, what, {}};
  const padded_json json{text.data(), text.size(), 0};
  return parse_document(doc, json, [&](auto&& fields) { return read(doc, fields); });
}

status read_string_array(const document_context& doc, od::value value, std::string_view field,
                         std::vector<std::string>& out) {
  od::json_type type;
  if (error_code e = value.type().get(type)) return malformed_at(doc, e, value);
  if (type != od::json_type::array) {
    if (status walked = walk_value(doc, value, 1); !walked.ok()) return walked;
    return wrong_type(doc, field, "an array of strings");
  }
  return for_each_element(doc, value, 1, [&](od::value element) {
    std::string s;
    if (status st = read_string(doc, element, field, s); !st.ok()) return st;
    out.push_back(std::move(s));
    return status{};
  });
}

status read_tensor_metadata(const document_context& doc, od::value value,
                            std::vector<tensor_metadata>& out, std::string_view role) {
  return for_each_element(doc, value, 1, [&](od::value element) {
    tensor_metadata t;
    bool has_name = false;
    bool has_type = false;
    bool has_shape = false;
    status s = for_each_field(doc, element, 2, [&](std::string_view key, od::value v) {
      if (key == "name") {
        has_name = true;
        return read_string(doc, v, "name", t.name);
      }
      if (key == "datatype") {
        std::string_view text;
        if (status st = read_string_view(doc, v, "datatype", text); !st.ok()) return st;
        result<datatype> parsed = parse_datatype(text);
        if (!parsed) return parsed.error();
        t.type = *parsed;
        has_type = true;
        return status{};
      }
      if (key == "shape") {
        has_shape = true;
        return for_each_element(doc, v, 3, [&](od::value dim) {
          const std::string_view token = token_of(doc, dim);
          std::int64_t d = 0;
          bool out_of_range = false;
          if (!parse_integer(token, d, out_of_range) || d < -1) {
            if (status walked = walk_value(doc, dim, 4); !walked.ok()) return walked;
            return status{errc::invalid_argument,
                          fmt::format("unable to parse 'shape' of {} '{}': dimensions are -1 or "
                                      "non-negative integers",
                                      role, t.name)};
          }
          t.shape.push_back(d);
          return status{};
        });
      }
      if (key == "parameters") return read_parameters(doc, v, 3, t.parameters);
      return walk_value(doc, v, 3);
    });
    if (!s.ok()) return s;
    if (!has_name) return missing_field(doc, role, "name", out.size());
    if (!has_type) return missing_field(doc, role, "datatype", out.size());
    if (!has_shape) return missing_field(doc, role, "shape", out.size());
    out.push_back(std::move(t));
    return status{};
  });
}

}  // namespace

result<server_metadata> decode_server_metadata(std::string_view json, const limits& bounds) {
  server_metadata out;
  status s = decode_small(json, "server metadata", bounds, [&](auto& doc, auto&& fields) {
    return fields([&](std::string_view key, od::value v) {
      if (key == "name") return read_string(doc, v, "name", out.name);
      if (key == "version") return read_string(doc, v, "version", out.version);
      if (key == "extensions") return read_string_array(doc, v, "extensions", out.extensions);
      return walk_value(doc, v, 1);
    });
  });
  if (!s.ok()) return s;
  return out;
}

result<model_metadata> decode_model_metadata(std::string_view json, const limits& bounds) {
  model_metadata out;
  status s = decode_small(json, "model metadata", bounds, [&](auto& doc, auto&& fields) {
    return fields([&](std::string_view key, od::value v) {
      if (key == "name") return read_string(doc, v, "name", out.name);
      if (key == "versions") return read_string_array(doc, v, "versions", out.versions);
      if (key == "platform") return read_string(doc, v, "platform", out.platform);
      if (key == "inputs") return read_tensor_metadata(doc, v, out.inputs, "input");
      if (key == "outputs") return read_tensor_metadata(doc, v, out.outputs, "output");
      if (key == "properties") return read_parameters(doc, v, 1, out.properties);
      return walk_value(doc, v, 1);
    });
  });
  if (!s.ok()) return s;
  return out;
}

namespace {
bool is_blank(std::string_view text) {
  return text.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

template <class Object>
result<Object> decode_flag_object(std::string_view json, std::optional<int> http_status,
                                  std::string_view what, std::string_view flag,
                                  bool Object::*member, std::string* name = nullptr) {
  Object out;
  if (http_status && is_blank(json)) {
    out.*member = *http_status == 200;
    return out;
  }
  bool found = false;
  const limits bounds;
  status s = decode_small(json, what, bounds, [&](auto& doc, auto&& fields) {
    return fields([&](std::string_view key, od::value v) {
      if (key == flag) {
        found = true;
        return read_bool(doc, v, flag, out.*member);
      }
      if (name != nullptr && key == "name") return read_string(doc, v, "name", *name);
      return walk_value(doc, v, 1);
    });
  });
  if (!s.ok()) return s;
  if (!found) {
    return status{errc::invalid_argument,
                  fmt::format("unable to parse the {} JSON: it has no '{}'", what, flag)};
  }
  return out;
}
}  // namespace

result<server_live> decode_server_live(std::string_view json, std::optional<int> http_status) {
  return decode_flag_object<server_live>(json, http_status, "server live", "live",
                                         &server_live::live);
}

result<server_ready> decode_server_ready(std::string_view json, std::optional<int> http_status) {
  return decode_flag_object<server_ready>(json, http_status, "server ready", "ready",
                                          &server_ready::ready);
}

result<model_ready> decode_model_ready(std::string_view json, std::optional<int> http_status) {
  std::string name;
  result<model_ready> out = decode_flag_object<model_ready>(json, http_status, "model ready",
                                                            "ready", &model_ready::ready, &name);
  if (out) out->name = std::move(name);
  return out;
}

result<repository_index_request> decode_repository_index_request(std::string_view json,
                                                                 const limits& bounds) {
  repository_index_request out;
  if (is_blank(json)) return out;
  status s = decode_small(json, "repository index request", bounds, [&](auto& doc, auto&& fields) {
    return fields([&](std::string_view key, od::value v) {
      if (key == "ready") return read_bool(doc, v, "ready", out.ready);
      return walk_value(doc, v, 1);
    });
  });
  if (!s.ok()) return s;
  return out;
}

namespace {
// Standard base64 with its padding, as Python's base64.b64encode writes it; nullopt otherwise.
std::optional<std::string> from_base64(std::string_view text) {
  const auto value_of = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (std::size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    const int padding = last ? (text[i + 3] == '=') + (text[i + 2] == '=') : 0;
    std::uint32_t bits = 0;
    for (int j = 0; j < 4 - padding; ++j) {
      const int v = value_of(text[i + static_cast<std::size_t>(j)]);
      if (v < 0) return std::nullopt;
      bits = bits << 6U | static_cast<std::uint32_t>(v);
    }
    bits <<= 6U * static_cast<unsigned>(padding);
    out.push_back(static_cast<char>(bits >> 16U));
    if (padding < 2) out.push_back(static_cast<char>(bits >> 8U & 0xFFU));
    if (padding < 1) out.push_back(static_cast<char>(bits & 0xFFU));
  }
  return out;
}
}  // namespace

result<parameters> decode_repository_load_request(std::string_view json, const limits& bounds) {
  parameters out;
  if (is_blank(json)) return out;
  status s = decode_small(json, "model load request", bounds, [&](auto& doc, auto&& fields) {
    return fields([&](std::string_view key, od::value v) {
      if (key == "parameters") return read_parameters(doc, v, 1, out);
      return walk_value(doc, v, 1);
    });
  });
  if (!s.ok()) return s;
  // A file's content comes in base64 over HTTP (Triton's form): the loader gets its bytes.
  parameters decoded;
  for (const auto& [name, value] : out) {
    if (!name.starts_with("file:")) {
      decoded.set(name, value);
      continue;
    }
    const auto* text = std::get_if<std::string>(&value);
    std::optional<std::string> bytes = text != nullptr ? from_base64(*text) : std::nullopt;
    if (!bytes) {
      return status{errc::invalid_argument,
                    fmt::format("unable to parse parameter '{}' of the model load request: "
                                "expected its content in base64",
                                name)};
    }
    decoded.set(name, std::move(*bytes));
  }
  return decoded;
}

result<shared_memory_region> decode_shared_memory_register(std::string_view json, std::string name,
                                                           const limits& bounds) {
  shared_memory_region out;
  out.name = std::move(name);
  bool has_key = false;
  bool has_byte_size = false;
  const auto read_size = [](const document_context& doc, od::value v, std::string_view field,
                            std::uint64_t& size) {
    if (v.get_uint64().get(size) != error_code::SUCCESS) {
      if (status walked = walk_value(doc, v, 0); !walked.ok()) return walked;
      return wrong_type(doc, field, "a non-negative integer");
    }
    return status{};
  };
  status s =
      decode_small(json, "shared memory register request", bounds, [&](auto& doc, auto&& fields) {
        return fields([&](std::string_view key, od::value v) {
          if (key == "key") {
            has_key = true;
            return read_string(doc, v, "key", out.key);
          }
          if (key == "offset") return read_size(doc, v, "offset", out.offset);
          if (key == "byte_size") {
            has_byte_size = true;
            return read_size(doc, v, "byte_size", out.byte_size);
          }
          return walk_value(doc, v, 1);
        });
      });
  if (!s.ok()) return s;
  if (!has_key) {
    return status{errc::invalid_argument, "Shared memory register request has no 'key' field"};
  }
  if (!has_byte_size) {
    return status{errc::invalid_argument,
                  "Shared memory register request has no 'byte_size' field"};
  }
  return out;
}

namespace {

// The logging settings' fields, in either direction; a null leaves `out` as it is.
status read_log_field(const document_context& doc, std::string_view key, od::value v,
                      log_settings_update& out) {
  bool is_null = false;
  if (v.is_null().get(is_null) == error_code::SUCCESS && is_null) return status{};
  const auto read_level = [&](std::optional<bool>& level) {
    bool on = false;
    if (status s = read_bool(doc, v, key, on); !s.ok()) return s;
    level = on;
    return status{};
  };
  if (key == "log_error") return read_level(out.error);
  if (key == "log_warning") return read_level(out.warning);
  if (key == "log_info") return read_level(out.info);
  if (key == "log_verbose_level") {
    std::uint64_t level = 0;
    if (v.get_uint64().get(level) != error_code::SUCCESS ||
        level > std::numeric_limits<std::uint32_t>::max()) {
      if (status walked = walk_value(doc, v, 0); !walked.ok()) return walked;
      return wrong_type(doc, key, "an integer from 0 to 4294967295");
    }
    out.verbose_level = static_cast<std::uint32_t>(level);
    return status{};
  }
  if (key == "log_format") {
    std::string name;
    if (status s = read_string(doc, v, key, name); !s.ok()) return s;
    result<log_format> format = parse_log_format(name);
    if (!format) return std::move(format).error();
    out.format = *format;
    return status{};
  }
  if (key == "log_file") {
    std::string file;
    if (status s = read_string(doc, v, key, file); !s.ok()) return s;
    out.file = std::move(file);
    return status{};
  }
  return walk_value(doc, v, 1);
}

}  // namespace

result<log_settings_update> decode_log_settings_update(std::string_view json,
                                                       const limits& bounds) {
  log_settings_update out;
  status s = decode_small(json, "logging settings", bounds, [&](auto& doc, auto&& fields) {
    return fields(
        [&](std::string_view key, od::value v) { return read_log_field(doc, key, v, out); });
  });
  if (!s.ok()) return s;
  return out;
}

result<log_settings> decode_log_settings(std::string_view json, const limits& bounds) {
  log_settings_update read;
  status s = decode_small(json, "logging settings", bounds, [&](auto& doc, auto&& fields) {
    return fields(
        [&](std::string_view key, od::value v) { return read_log_field(doc, key, v, read); });
  });
  if (!s.ok()) return s;
  if (!read.error || !read.warning || !read.info || !read.verbose_level || !read.format) {
    return status{errc::invalid_argument,
                  "the logging settings JSON lacks one of 'log_error', 'log_warning', 'log_info', "
                  "'log_verbose_level' and 'log_format'"};
  }
  return log_settings{*read.error, *read.warning, *read.info, *read.verbose_level, *read.format};
}

result<trace_settings_change> decode_trace_settings_change(std::string_view json,
                                                           const limits& bounds) {
  trace_settings_change out;
  status s = decode_small(json, "trace settings", bounds, [&](auto& doc, auto&& fields) {
    return fields([&](std::string_view key, od::value v) -> status {
      if (key != "trace_level" && key != "trace_rate" && key != "trace_count" &&
          key != "log_frequency" && key != "trace_file" && key != "trace_mode") {
        return walk_value(doc, v, 1);
      }
      auto& [name, values] = out.settings.emplace_back(std::string{key}, std::nullopt);
      bool is_null = false;
      if (v.is_null().get(is_null) == error_code::SUCCESS && is_null) return status{};
      values.emplace();
      if (key == "trace_level") return read_string_array(doc, v, name, *values);
      return read_string(doc, v, name, values->emplace_back());
    });
  });
  if (!s.ok()) return s;
  return out;
}

status decode_error(std::string_view json, int http_status) {
  std::string message;
  bool found = false;
  const limits bounds;
  status s = decode_small(json, "error", bounds, [&](auto& doc, auto&& fields) {
    return fields([&](std::string_view key, od::value v) {
      if (key == "error") {
        found = true;
        return read_string(doc, v, "error", message);
      }
      return walk_value(doc, v, 1);
    });
  });
  errc code = errc::internal;
  for (const detail::errc_mapping& row : detail::errc_table) {
    if (row.http_status == http_status && row.code != errc::ok) {
      code = row.code;
      break;
    }
  }
  if (is_blank(json)) return status{code, fmt::format("HTTP {} with no body", http_status)};
  if (!s.ok())
    return status{code,
                  fmt::format("HTTP {} with a malformed error body: {}", http_status, s.message())};
  if (!found)
    return status{code, fmt::format("HTTP {} with an error body that has no 'error'", http_status)};
  return status{code, std::move(message)};
}

}  // namespace oip
