// libFuzzer target: Triton's generate extension, decoded and encoded.
// Input: byte 0 picks the model whose inputs the members name; the rest is the request body.
// Whatever decodes must have the model's inputs with the model's datatypes, encode as an infer
// request that decodes again, and come back unchanged through a generate reply read as a request.

#include <oip/float16.hpp>
#include <oip/generate.hpp>
#include <oip/json.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace {

oip::model_config model_of(std::uint8_t pick) {
  using oip::datatype;
  oip::model_config config;
  config.name = "fuzzed";
  switch (pick % 3) {
    case 0:  // a text model, as LLM front ends call it
      config.inputs = {{"text_input", datatype::bytes, {1}, {}},
                       {"max_tokens", datatype::int32, {1}, {}},
                       {"stream", datatype::boolean, {1}, {}}};
      break;
    case 1:  // one variable input of every datatype
      for (const datatype type : oip::all_datatypes) {
        config.inputs.push_back({std::string{oip::to_string(type)}, type, {-1}, {}});
      }
      break;
    default:  // batched, several dimensions
      config.max_batch_size = 4;
      config.inputs = {{"X", datatype::fp32, {2, -1}, {}},
                       {"Y", datatype::uint64, {3}, {}},
                       {"Z", datatype::fp16, {-1, -1}, {}}};
      break;
  }
  return config;
}

bool has_nan(const oip::tensor& t) {
  for (std::uint64_t i = 0; i < t.element_count(); ++i) {
    switch (t.type()) {
      case oip::datatype::fp32:
        if (std::isnan(t.at<float>(i))) return true;
        break;
      case oip::datatype::fp64:
        if (std::isnan(t.at<double>(i))) return true;
        break;
      case oip::datatype::fp16:
        if (std::isnan(oip::to_float(t.at<oip::half>(i)))) return true;
        break;
      case oip::datatype::bf16:
        if (std::isnan(oip::to_float(t.at<oip::bfloat16>(i)))) return true;
        break;
      default: return false;
    }
  }
  return false;
}

// Whether the reply writes `t` as it is: not NaN (whose payload JSON drops), not BYTES that are
// not UTF-8 (written with U+FFFD), and with one dimension (a reply is flat).
bool survives_a_reply(const oip::tensor& t) {
  if (t.shape().size() != 1 || has_nan(t)) return false;
  if (t.type() != oip::datatype::bytes) return true;
  oip::inference_request alone;
  alone.inputs = {t};
  return oip::encode_request(alone).ok();  // JSON refuses BYTES that are not UTF-8
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const oip::model_config model = model_of(data[0]);
  const oip::buffer body =
      oip::buffer::from_string(std::string(reinterpret_cast<const char*>(data + 1), size - 1));
  oip::limits bounds;
  bounds.max_elements = 1U << 16U;
  const oip::result<oip::inference_request> request =
      oip::decode_generate_request(body, model, bounds);
  if (!request) {
    if (oip::http_status(request.error().code()) >= 500) __builtin_trap();
    return 0;
  }
  for (const oip::tensor& input : request->inputs) {
    bool known = false;
    for (const oip::tensor_metadata& spec : model.inputs) {
      if (spec.name == input.name()) known = spec.type == input.type();
    }
    if (!known) __builtin_trap();
  }
  const oip::result<oip::encoded_body> infer =
      oip::encode_request(*request, {.binary_inputs = true});
  if (!infer) __builtin_trap();
  const oip::result<oip::inference_request> again = oip::decode_request(
      oip::buffer::from_string(infer->flatten()),
      infer->uses_binary ? std::optional<std::size_t>{infer->header_length()} : std::nullopt);
  if (!again || again->inputs.size() != request->inputs.size()) __builtin_trap();

  // The inputs as a model's outputs: the reply must be written, and where it holds them as they
  // are, read back as a request for the same model it gives the same values.
  oip::inference_response response;
  response.id = request->id;
  response.model_name = model.name;
  response.model_version = "1";
  response.outputs = request->inputs;
  const oip::result<std::string> reply = oip::encode_generate_response(response);
  if (!reply) return 0;
  if (model.max_batch_size != 0) return 0;  // a batched input's shape has one more dimension
  const oip::result<oip::inference_request> read_back =
      oip::decode_generate_request(oip::buffer::from_string(*reply), model, bounds);
  if (!read_back) __builtin_trap();
  // An empty id is not written, as in Triton.
  const bool has_id = request->id && !request->id->empty();
  if (has_id ? read_back->id != request->id : read_back->id.has_value()) __builtin_trap();
  for (const oip::tensor& sent : request->inputs) {
    if (!survives_a_reply(sent)) continue;
    const oip::tensor* back = nullptr;
    for (const oip::tensor& t : read_back->inputs) {
      if (t.name() == sent.name()) back = &t;
    }
    if (back == nullptr || back->type() != sent.type() ||
        back->element_count() != sent.element_count() ||
        back->data().size() != sent.data().size() ||
        std::memcmp(back->data().data(), sent.data().data(), sent.data().size()) != 0) {
      __builtin_trap();
    }
  }
  return 0;
}
