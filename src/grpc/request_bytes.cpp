#include "grpc/request_bytes.hpp"

#include "core/detail/find_duplicate.hpp"
#include "core/detail/utf8.hpp"
#include "grpc/messages.hpp"
#include "grpc/wire_format.hpp"

#include <oip/buffer.hpp>
#include <oip/datatype.hpp>
#include <oip/parameters.hpp>
#include <oip/shape.hpp>
#include <oip/tensor.hpp>

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

#include <grpcpp/support/slice.h>

namespace oip::grpc {

namespace {

// --- protobuf's wire format ----------------------------------------------------------------------
// Every refusal below is a `false` that declines the message, never an error of its own: protobuf
// then parses the same bytes and says what is wrong, or reads what this reader leaves to it.

using namespace wire;  // NOLINT(google-build-using-namespace): the format's names, throughout

// ModelInferRequest
constexpr int request_model_name = 1;
constexpr int request_model_version = 2;
constexpr int request_id = 3;
constexpr int request_parameters = 4;
constexpr int request_inputs = 5;
constexpr int request_outputs = 6;
constexpr int request_raw_input_contents = 7;
// ModelInferRequest.InferInputTensor
constexpr int input_name = 1;
constexpr int input_datatype = 2;
constexpr int input_shape = 3;
constexpr int input_parameters = 4;
constexpr int input_contents = 5;
// ModelInferRequest.InferRequestedOutputTensor
constexpr int output_name = 1;
constexpr int output_parameters = 2;

// Reads one message's fields in order; a read past the end fails rather than happens.
class wire_reader {
 public:
  explicit wire_reader(std::string_view bytes) noexcept : rest_{bytes} {}

  [[nodiscard]] bool done() const noexcept { return rest_.empty(); }

  // A value of at most `max_bytes` bytes (protobuf reads a tag or a length in 5 at most, whatever
  // their value, and a number in 10).
  bool varint(std::uint64_t& value, unsigned max_bytes = 10) noexcept {
    value = 0;
    for (unsigned shift = 0; shift < 7 * max_bytes; shift += 7) {
      if (rest_.empty()) return false;
      const auto byte = static_cast<std::uint8_t>(rest_.front());
      rest_.remove_prefix(1);
      // A tenth byte holds the 64th bit alone: more is protobuf's to judge.
      if (shift == 63 && byte > 1) return false;
      value |= static_cast<std::uint64_t>(byte & 0x7FU) << shift;
      if (byte < 0x80U) return true;
    }
    return false;
  }

  bool tag(int& field, wire_type& type) noexcept {
    std::uint64_t value = 0;
    if (!varint(value, 5) || value > 0xFFFF'FFFFU) return false;
    field = static_cast<int>(value >> 3U);
    type = static_cast<wire_type>(value & 7U);
    return field != 0;
  }

  bool delimited(std::string_view& bytes) noexcept {
    std::uint64_t length = 0;
    if (!varint(length, 5) || length > 0x7FFF'FFFFU || length > rest_.size()) return false;
    bytes = rest_.substr(0, length);
    rest_.remove_prefix(length);
    return true;
  }

  bool fixed64(std::uint64_t& value) noexcept {
    if (rest_.size() < sizeof value) return false;
    value = 0;
    for (std::size_t i = 0; i < sizeof value; ++i) {  // little-endian on the wire
      value |= static_cast<std::uint64_t>(static_cast<std::uint8_t>(rest_[i])) << (8 * i);
    }
    rest_.remove_prefix(sizeof value);
    return true;
  }

  // A field this reader does not use. Groups are protobuf's.
  bool skip(wire_type type) noexcept {
    std::uint64_t ignored = 0;
    std::string_view bytes;
    switch (type) {
      case wire_type::varint: return varint(ignored);
      case wire_type::fixed64: return fixed64(ignored);
      case wire_type::length_delimited: return delimited(bytes);
      case wire_type::fixed32:
        if (rest_.size() < 4) return false;
        rest_.remove_prefix(4);
        return true;
      default: return false;
    }
  }

 private:
  std::string_view rest_;
};

// Proto3's string fields must be UTF-8, or protobuf refuses the message.
bool text(wire_reader& in, std::string_view& out) {
  return in.delimited(out) && detail::find_invalid_utf8(out) == std::string_view::npos;
}

// An InferParameter with exactly one of its fields set (protobuf keeps the last of several).
bool read_parameter(std::string_view bytes, parameter_value& value) {
  wire_reader in{bytes};
  bool set = false;
  while (!in.done()) {
    int field = 0;
    wire_type type{};
    if (!in.tag(field, type)) return false;
    if (field < parameter_bool || field > parameter_uint64) {
      if (!in.skip(type)) return false;
      continue;
    }
    if (set) return false;
    set = true;
    std::uint64_t number = 0;
    std::string_view string;
    switch (field) {
      case parameter_bool:
        if (type != wire_type::varint || !in.varint(number)) return false;
        value = number != 0;
        break;
      case parameter_int64:
        if (type != wire_type::varint || !in.varint(number)) return false;
        value = static_cast<std::int64_t>(number);
        break;
      case parameter_string:
        if (type != wire_type::length_delimited || !text(in, string)) return false;
        value = std::string{string};
        break;
      case parameter_double:
        if (type != wire_type::fixed64 || !in.fixed64(number)) return false;
        value = std::bit_cast<double>(number);
        break;
      default:  // parameter_uint64
        if (type != wire_type::varint || !in.varint(number)) return false;
        value = number;
        break;
    }
  }
  return set;
}

// Parameters beyond this many in one map are protobuf's: each key is looked for among those
// before it, which is quick for a few only.
constexpr std::size_t few_parameters = 16;

// One entry of a map<string, InferParameter>, added to `out`. A key already there is declined:
// protobuf's map keeps the last.
bool read_parameter_entry(std::string_view bytes, parameters& out) {
  if (out.size() == few_parameters) return false;
  wire_reader in{bytes};
  std::string_view key;
  std::string_view value;
  bool has_key = false;
  bool has_value = false;
  while (!in.done()) {
    int field = 0;
    wire_type type{};
    if (!in.tag(field, type) || type != wire_type::length_delimited) return false;
    if (field == entry_key && !has_key) {
      if (!text(in, key)) return false;
      has_key = true;
    } else if (field == entry_value && !has_value) {
      if (!in.delimited(value)) return false;
      has_value = true;
    } else {
      return false;
    }
  }
  parameter_value decoded;
  if (!has_value || !read_parameter(value, decoded) || out.contains(key)) return false;
  out.append_unchecked(std::string{key}, std::move(decoded));
  return true;
}

// An input's fields other than its data, which is among the raw contents.
struct input_fields {
  std::string_view name;
  std::string_view datatype_name;
  shape_type shape;
  datatype type = datatype::fp32;  // parsed from datatype_name, once the fields are checked
};

bool read_input(std::string_view bytes, input_fields& out) {
  wire_reader in{bytes};
  while (!in.done()) {
    int field = 0;
    wire_type type{};
    if (!in.tag(field, type)) return false;
    switch (field) {
      case input_name:
        if (type != wire_type::length_delimited || !text(in, out.name)) return false;
        break;
      case input_datatype:
        if (type != wire_type::length_delimited || !text(in, out.datatype_name)) return false;
        break;
      case input_shape: {
        std::uint64_t dim = 0;
        if (type == wire_type::varint) {  // unpacked: one element per field
          if (!in.varint(dim)) return false;
          out.shape.push_back(static_cast<std::int64_t>(dim));
          break;
        }
        std::string_view packed;
        if (type != wire_type::length_delimited || !in.delimited(packed)) return false;
        wire_reader dims{packed};
        while (!dims.done()) {
          if (!dims.varint(dim)) return false;
          out.shape.push_back(static_cast<std::int64_t>(dim));
        }
        break;
      }
      case input_parameters:
      case input_contents: return false;
      default:
        if (!in.skip(type)) return false;
    }
  }
  return true;
}

bool read_output(std::string_view bytes, requested_output& out) {
  wire_reader in{bytes};
  while (!in.done()) {
    int field = 0;
    wire_type type{};
    if (!in.tag(field, type)) return false;
    std::string_view value;
    if (field == output_name) {
      if (type != wire_type::length_delimited || !text(in, value)) return false;
      out.name = value;
    } else if (field == output_parameters) {
      if (type != wire_type::length_delimited || !in.delimited(value) ||
          !read_parameter_entry(value, out.parameters)) {
        return false;
      }
    } else if (!in.skip(type)) {
      return false;
    }
  }
  return true;
}

constexpr std::size_t tensor_alignment = 64;

constexpr std::size_t aligned(std::size_t size) {
  return (size + tensor_alignment - 1) / tensor_alignment * tensor_alignment;
}

// The inputs as tensors, each holding its raw contents (one per input) from one block.
bool make_inputs(std::vector<input_fields>& fields, std::span<const std::string_view> raw,
                 const limits& bounds, std::vector<tensor>& out) {
  if (raw.size() != fields.size()) return false;
  if (fields.empty()) return true;
  if (detail::find_duplicate_name(fields,
                                  [](const input_fields& f) { return std::string_view{f.name}; })) {
    return false;
  }
  // What can be checked before the bytes are copied is, so that a declined request copies none.
  std::size_t total = 0;
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const result<datatype> type = parse_datatype(fields[i].datatype_name);
    if (!type) return false;
    fields[i].type = *type;
    const result<std::uint64_t> count = element_count(fields[i].shape);
    if (!count || *count > bounds.max_elements) return false;
    if (*type != datatype::bytes) {  // BYTES elements are counted by tensor::make
      const std::size_t size = element_size(*type);
      if (raw[i].size() % size != 0 || raw[i].size() / size != *count) return false;
    }
    total += aligned(raw[i].size());
  }
  result<mutable_buffer> block = mutable_buffer::allocate_for_overwrite(total);
  if (!block) return false;
  std::size_t offset = 0;
  for (const std::string_view bytes : raw) {
    if (!bytes.empty()) std::memcpy(block->data() + offset, bytes.data(), bytes.size());
    // A tensor's padding is readable: it holds zeros, not what the memory held before.
    std::memset(block->data() + offset + bytes.size(), 0, aligned(bytes.size()) - bytes.size());
    offset += aligned(bytes.size());
  }
  const buffer contents{std::move(*block)};
  out.reserve(fields.size());
  offset = 0;
  for (std::size_t i = 0; i < fields.size(); ++i) {
    result<buffer> data = contents.slice(offset, raw[i].size());
    offset += aligned(raw[i].size());
    if (!data) return false;
    result<tensor> made = tensor::make(std::string{fields[i].name}, fields[i].type,
                                       std::move(fields[i].shape), std::move(*data));
    if (!made) return false;
    out.push_back(std::move(*made));
  }
  return true;
}

}  // namespace

std::optional<request_fields> read_request_bytes(std::string_view bytes, const limits& bounds) {
  std::string_view model_name;
  std::string_view model_version;
  std::string_view id;
  parameters params;
  std::vector<input_fields> inputs;
  std::vector<std::string_view> raw;
  std::vector<requested_output> outputs;
  wire_reader in{bytes};
  while (!in.done()) {
    int field = 0;
    wire_type type{};
    if (!in.tag(field, type)) return std::nullopt;
    if (field > request_raw_input_contents) {
      if (!in.skip(type)) return std::nullopt;
      continue;
    }
    std::string_view value;
    if (type != wire_type::length_delimited) return std::nullopt;
    switch (field) {
      case request_model_name:
        if (!text(in, model_name)) return std::nullopt;
        break;
      case request_model_version:
        if (!text(in, model_version)) return std::nullopt;
        break;
      case request_id:
        if (!text(in, id)) return std::nullopt;
        break;
      case request_parameters:
        if (!in.delimited(value) || !read_parameter_entry(value, params)) return std::nullopt;
        break;
      case request_inputs:
        if (!in.delimited(value) || !read_input(value, inputs.emplace_back())) return std::nullopt;
        break;
      case request_outputs:
        if (!in.delimited(value) || !read_output(value, outputs.emplace_back())) {
          return std::nullopt;
        }
        break;
      default:  // request_raw_input_contents
        if (!in.delimited(raw.emplace_back())) return std::nullopt;
        break;
    }
  }
  std::optional<request_fields> read{std::in_place};
  inference_request& request = read->request;
  if (!make_inputs(inputs, raw, bounds, request.inputs)) return std::nullopt;
  if (detail::find_duplicate_name(
          outputs, [](const requested_output& o) { return std::string_view{o.name}; })) {
    return std::nullopt;
  }
  request.outputs = std::move(outputs);
  restore_unsigned_sequence_id(params);
  if (!check_infer_parameters(params).ok()) return std::nullopt;
  request.parameters = std::move(params);
  if (!id.empty()) request.id = std::string{id};
  read->model_name = model_name;
  read->model_version = model_version;
  read->id = id;
  return read;
}

std::optional<request_fields> read_request_bytes(const ::grpc::ByteBuffer& bytes,
                                                 const limits& bounds) {
  ::grpc::Slice slice;
  if (!bytes.TrySingleSlice(&slice).ok()) return std::nullopt;
  return read_request_bytes(
      std::string_view{reinterpret_cast<const char*>(slice.begin()), slice.size()}, bounds);
}

}  // namespace oip::grpc
