// libFuzzer target: response, metadata, health and error decoding (the client side).
// Input: byte 0 picks the decoder, bytes 1-4 a header length (responses), the rest is the body.

#include "compare_readers.hpp"

#include <oip/json.hpp>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace {
// The same response, compared through its binary encoding (NaN parameters and bytes included).
std::string encoded(const oip::inference_response& response) {
  oip::response_format format;
  format.binary_by_default = true;
  oip::result<oip::encoded_body> body = oip::encode_response(response, format);
  return body ? body->flatten() : body.error().message();
}

// What decodes encodes, and decodes again to what encodes the same (NaN parameters make operator==
// unusable for the check).
template <class Object>
void check_round_trip(oip::result<Object> (*decode)(std::string_view, const oip::limits&),
                      const std::string& text, const oip::limits& bounds) {
  oip::result<Object> first = decode(text, bounds);
  if (!first) return;
  const std::string encoded = oip::encode(*first);
  oip::result<Object> again = decode(encoded, bounds);
  if (!again || oip::encode(*again) != encoded) __builtin_trap();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 5) return 0;
  std::uint32_t header = 0;
  std::memcpy(&header, data + 1, 4);
  const std::string text(reinterpret_cast<const char*>(data + 5), size - 5);
  oip::limits bounds;
  bounds.max_elements = 1U << 20U;
  switch (data[0] % 7) {
    case 0:
    case 1: {
      const oip::buffer body = oip::buffer::from_string(text);
      std::optional<std::size_t> header_length;
      if (data[0] % 7 == 1) header_length = header % (body.size() + 1);
      oip::result<oip::inference_response> r = oip::decode_response(body, header_length, bounds);
      oip::fuzz::compare_readers(
          text, header_length, r,
          [&](const oip::buffer& b, std::optional<std::size_t> length) {
            return oip::decode_response(b, length, bounds);
          },
          encoded);
      if (r) {
        oip::response_format format;
        format.binary_by_default = (header & 1U) != 0;
        oip::result<oip::encoded_body> encoded = oip::encode_response(*r, format);
        (void)encoded;
      }
      break;
    }
    case 2: check_round_trip(oip::decode_model_metadata, text, bounds); break;
    case 3: check_round_trip(oip::decode_server_metadata, text, bounds); break;
    case 4: (void)oip::decode_server_ready(text); break;
    case 5: (void)oip::decode_model_ready(text); break;
    default: (void)oip::decode_error(text, 400 + static_cast<int>(header % 200)); break;
  }
  return 0;
}
