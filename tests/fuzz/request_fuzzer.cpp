// libFuzzer target: request decoding, JSON and binary framing and raw requests.
// Input: byte 0 picks the mode, bytes 1-4 a little-endian header length, the rest is the body.
//   mode % 3 == 0: JSON only; 1: JSON + binary (header length taken modulo body size + 1);
//   2: raw binary request against a spec chosen by bytes 1-2.

#include "compare_readers.hpp"

#include <oip/json.hpp>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

namespace {
void exercise(const oip::inference_request& request) {
  // Whatever decodes must encode again and decode to the same thing.
  oip::result<oip::response_format> format = oip::response_format::from_request(request);
  (void)format;
  for (bool binary : {false, true}) {
    oip::result<oip::encoded_body> encoded =
        oip::encode_request(request, {.binary_inputs = binary});
    if (!encoded) continue;  // e.g. BYTES that are not UTF-8, as JSON
    const std::string flat = encoded->flatten();
    oip::result<oip::inference_request> again = oip::decode_request(
        oip::buffer::from_string(flat),
        encoded->uses_binary ? std::optional<std::size_t>{encoded->header_length()} : std::nullopt);
    if (!again || again->inputs.size() != request.inputs.size()) __builtin_trap();
  }
}
// The same request, compared through its binary encoding (NaN parameters and bytes included).
std::string encoded(const oip::inference_request& request) {
  oip::result<oip::encoded_body> body = oip::encode_request(request, {.binary_inputs = true});
  return body ? body->flatten() : body.error().message();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 5) return 0;
  const std::uint8_t mode = data[0] % 3;
  std::uint32_t header = 0;
  std::memcpy(&header, data + 1, 4);
  const std::string body_text(reinterpret_cast<const char*>(data + 5), size - 5);
  const oip::buffer body = oip::buffer::from_string(body_text);
  oip::limits bounds;
  bounds.max_elements = 1U << 20U;
  if (mode == 2) {
    const oip::raw_input_spec spec{
        "INPUT0", oip::all_datatypes[data[1] % oip::all_datatypes.size()],
        data[2] % 2 == 0 ? oip::shape_type{-1} : oip::shape_type{2, -1}, data[2] % 4 < 2};
    oip::result<oip::inference_request> r = oip::decode_raw_request(body, spec, bounds);
    if (r) exercise(*r);
    return 0;
  }
  std::optional<std::size_t> header_length;
  if (mode == 1) header_length = header % (body.size() + 1);
  if (header_length == std::optional<std::size_t>{0}) return 0;
  oip::result<oip::inference_request> r = oip::decode_request(body, header_length, bounds);
  oip::fuzz::compare_readers(
      body_text, header_length, r,
      [&](const oip::buffer& b, std::optional<std::size_t> length) {
        return oip::decode_request(b, length, bounds);
      },
      encoded);
  if (r) exercise(*r);
  return 0;
}
