#pragma once
// Internal: the JSON reading primitives (the document and its errors, numbers, walking and typed
// values, the parser, whole documents) that every JSON decoder of the codecs layer reads with.

// Decoding uses simdjson's on-demand API. On-demand does not validate what it skips, so every
// value of a document is visited: known keys are decoded, unknown ones walked in full.

#include "codecs/detail/decimal.hpp"
#include "core/detail/find_duplicate.hpp"

#include <oip/infer.hpp>
#include <oip/limits.hpp>
#include <oip/parameters.hpp>
#include <oip/status.hpp>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <simdjson.h>

namespace oip::detail {

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
  // A client's outputs in shared memory.
  const shared_memory_output_source* placed_outputs = nullptr;

  [[nodiscard]] std::string for_model() const {
    return model_name.empty() ? std::string{} : fmt::format(" for model '{}'", model_name);
  }
};

status malformed(const document_context& doc, error_code error, const char* where);
const char* location_of(od::value& value);
status malformed_at(const document_context& doc, error_code error, od::value& value);
status malformed_token(const document_context& doc, std::string_view token);

inline std::string_view trim_token(std::string_view token) {
  while (!token.empty() && (token.back() == ' ' || token.back() == '\t' || token.back() == '\n' ||
                            token.back() == '\r')) {
    token.remove_suffix(1);
  }
  return token;
}

// The text of a scalar, trailing whitespace removed. simdjson computes it from the next token's
// position without checks: in a truncated document that can point past the end, so the span is
// clamped to the document (a clamped token is then refused as malformed).
inline std::string_view token_of(const document_context& doc, od::value& value) {
  const std::string_view raw = value.raw_json_token();
  if (raw.data() < doc.begin || raw.data() > doc.end) return {};
  const auto available = static_cast<std::size_t>(doc.end - raw.data());
  return trim_token(raw.substr(0, std::min(raw.size(), available)));
}

// --- numbers -------------------------------------------------------------------------------------

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

// --- walking any value in full -------------------------------------------------------------------

inline status check_depth(const document_context& doc, std::size_t depth, od::value& value) {
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

// --- typed scalars -------------------------------------------------------------------------------

status wrong_type(const document_context& doc, std::string_view field, std::string_view expected);
status missing_field(const document_context& doc, std::string_view role, std::string_view field,
                     std::size_t index);

// A string value with no escapes, read in place and left unconsumed (the enclosing iteration skips
// it); false for any other value.
inline bool in_place_string(const document_context& doc, od::value& value, std::string_view& out) {
  const std::string_view token = value.raw_json_token();
  return !token.empty() && token.front() == '"' && plain_string(doc, token.data() + 1, out);
}

// A string, in the document or unescaped into the parser's buffer: valid until the next document.
status read_string_view(const document_context& doc, od::value value, std::string_view field,
                        std::string_view& out);
status read_string(const document_context& doc, od::value value, std::string_view field,
                   std::string& out);
status read_bool(const document_context& doc, od::value value, std::string_view field, bool& out);
// A parameter's value (`key` names it in messages): integer, double, bool or string.
status read_parameter_value(const document_context& doc, std::string_view key, od::value value,
                            parameter_value& out);
status read_parameters(const document_context& doc, od::value value, std::size_t depth,
                       parameters& out);

// --- documents -----------------------------------------------------------------------------------

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

// Starts reading a JSON text whose root must be an object.
status open_document(document_context& doc, const padded_json& json, od::parser& parser,
                     od::document& document, od::object& root);

// After the root object: a position still in bounds means something follows it.
status check_nothing_follows(const document_context& doc, od::document& document);

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

}  // namespace oip::detail
