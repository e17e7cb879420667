#include "grpc/response_bytes.hpp"

#include "grpc/wire_format.hpp"

#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include <fmt/format.h>
#include <grpcpp/support/slice.h>

namespace oip::grpc {

namespace {

// Below this, an output's bytes are copied into the message: a copy of a few kilobytes costs
// less than the shared slice (a holder and grpc++'s reference count, both allocated).
constexpr std::size_t shared_slice_bytes = std::size_t{16} << 10U;

// --- protobuf's wire format, for the fields a ModelInferResponse has ----------------------------
// Every field number here is below 16, so each tag is one byte. The bytes are those protobuf's own
// serialization gives, but for the order of map entries, which protobuf leaves open.

using namespace wire;  // NOLINT(google-build-using-namespace): the format's names, throughout

constexpr char tag(int field, wire_type type) {
  return static_cast<char>((field << 3) | static_cast<int>(type));
}

// ModelStreamInferResponse
constexpr int stream_error_message = 1;
constexpr int stream_infer_response = 2;
// ModelInferResponse
constexpr int response_model_name = 1;
constexpr int response_model_version = 2;
constexpr int response_id = 3;
constexpr int response_parameters = 4;
constexpr int response_outputs = 5;
constexpr int response_raw_output_contents = 6;
// ModelInferResponse.InferOutputTensor
constexpr int output_name = 1;
constexpr int output_datatype = 2;
constexpr int output_shape = 3;
constexpr int output_parameters = 4;
std::size_t varint_size(std::uint64_t value) {
  std::size_t size = 1;
  for (; value >= 0x80U; value >>= 7U) ++size;
  return size;
}

// A length-delimited field holding `length` bytes, its tag and length included.
std::size_t delimited_size(std::size_t length) { return 1 + varint_size(length) + length; }

// Proto3 leaves out a string field that is empty.
std::size_t string_field_size(std::string_view text) {
  return text.empty() ? 0 : delimited_size(text.size());
}

// An InferParameter: the one field of its oneof that is set, written even when it is zero.
std::size_t parameter_size(const parameter_value& value) {
  return std::visit(
      [](const auto& v) -> std::size_t {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool>) {
          return 2;
        } else if constexpr (std::is_same_v<T, double>) {
          return 1 + sizeof(double);
        } else if constexpr (std::is_same_v<T, std::string>) {
          return delimited_size(v.size());
        } else {
          return 1 + varint_size(static_cast<std::uint64_t>(v));
        }
      },
      value);
}

// A map<string, InferParameter> entry: protobuf writes its key and value even when empty.
std::size_t entry_size(std::string_view name, const parameter_value& value) {
  return delimited_size(name.size()) + delimited_size(parameter_size(value));
}

// A response's parameters, with the stream's flag in a stream, which replaces a parameter of its
// name.
struct parameter_fields {
  const parameters* values = nullptr;
  const bool* final_response = nullptr;  // set in a stream
};

template <class Visit>
void for_each_parameter(const parameter_fields& fields, Visit&& visit) {
  for (const auto& [name, value] : *fields.values) {
    if (fields.final_response == nullptr || name != parameter_names::triton_final_response)
      visit(name, value);
  }
  if (fields.final_response != nullptr) {
    visit(parameter_names::triton_final_response, parameter_value{*fields.final_response});
  }
}

// The map field's entries, each with its tag and length.
std::size_t parameters_size(const parameter_fields& fields) {
  std::size_t size = 0;
  for_each_parameter(fields, [&size](std::string_view name, const parameter_value& value) {
    size += delimited_size(entry_size(name, value));
  });
  return size;
}

std::size_t shape_size(const shape_type& shape) {
  std::size_t size = 0;
  for (const std::int64_t d : shape) size += varint_size(static_cast<std::uint64_t>(d));
  return size;
}

// An InferOutputTensor: an output in shared memory has its name, datatype and shape only.
std::size_t output_size(const tensor& t, bool in_shared_memory) {
  const std::size_t shape = shape_size(t.shape());
  return string_field_size(t.name()) + string_field_size(to_string(t.type())) +
         (shape == 0 ? 0 : delimited_size(shape)) +
         (in_shared_memory ? 0 : parameters_size({.values = &t.parameters()}));
}

class wire_writer {
 public:
  explicit wire_writer(std::string& out) noexcept : out_{out} {}

  void varint(std::uint64_t value) {
    for (; value >= 0x80U; value >>= 7U) out_ += static_cast<char>((value & 0x7FU) | 0x80U);
    out_ += static_cast<char>(value);
  }

  // A length-delimited field's tag and length: its bytes follow.
  void delimited(int field, std::size_t length) {
    out_ += tag(field, wire_type::length_delimited);
    varint(length);
  }

  void bytes(int field, std::string_view data) {
    delimited(field, data.size());
    out_.append(data);
  }

  void string_field(int field, std::string_view text) {
    if (!text.empty()) bytes(field, text);
  }

  void parameters_field(int field, const parameter_fields& fields) {
    for_each_parameter(fields, [this, field](std::string_view name, const parameter_value& value) {
      delimited(field, entry_size(name, value));
      bytes(entry_key, name);
      delimited(entry_value, parameter_size(value));
      parameter(value);
    });
  }

  void output(const tensor& t, bool in_shared_memory) {
    delimited(response_outputs, output_size(t, in_shared_memory));
    string_field(output_name, t.name());
    string_field(output_datatype, to_string(t.type()));
    if (const std::size_t shape = shape_size(t.shape()); shape != 0) {
      delimited(output_shape, shape);
      for (const std::int64_t d : t.shape()) varint(static_cast<std::uint64_t>(d));
    }
    if (!in_shared_memory) parameters_field(output_parameters, {.values = &t.parameters()});
  }

 private:
  void parameter(const parameter_value& value) {
    std::visit(
        [this](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, bool>) {
            out_ += tag(parameter_bool, wire_type::varint);
            out_ += static_cast<char>(v ? 1 : 0);
          } else if constexpr (std::is_same_v<T, std::int64_t>) {
            out_ += tag(parameter_int64, wire_type::varint);
            varint(static_cast<std::uint64_t>(v));
          } else if constexpr (std::is_same_v<T, std::uint64_t>) {
            out_ += tag(parameter_uint64, wire_type::varint);
            varint(v);
          } else if constexpr (std::is_same_v<T, double>) {
            // Little-endian, as the wire format's fixed64 is.
            static_assert(std::endian::native == std::endian::little);
            out_ += tag(parameter_double, wire_type::fixed64);
            std::array<char, sizeof(double)> raw{};
            std::memcpy(raw.data(), &v, sizeof(double));
            out_.append(raw.data(), raw.size());
          } else {
            bytes(parameter_string, v);
          }
        },
        value);
  }

  std::string& out_;
};

// The bytes of one output's raw entry, in shared memory or not (an empty entry then).
std::size_t raw_size(const inference_response& response, const tensor& t) {
  return response.in_shared_memory(t.name()) ? 0 : t.data().size();
}

// Builds the message as slices: bytes made here gather in `pending`, which becomes a slice of its
// own before each shared one.
class slice_list {
 public:
  std::string& pending() noexcept { return pending_; }

  void share(const buffer& bytes) {
    flush();
    auto held = std::make_unique<buffer>(bytes);
    ::grpc::Slice slice{const_cast<std::byte*>(held->data()), held->size(),  // NOLINT: read only
                        [](void* owner) { delete static_cast<buffer*>(owner); }, held.get()};
    held.release();  // NOLINT(bugprone-unused-return-value): the slice owns it now
    slices_.push_back(std::move(slice));
  }

  ::grpc::ByteBuffer take() {
    flush();
    return ::grpc::ByteBuffer{slices_.data(), slices_.size()};
  }

 private:
  void flush() {
    if (pending_.empty()) return;
    slices_.emplace_back(pending_.data(), pending_.size());  // a copy: `pending_` is reused
    pending_.clear();
  }

  std::string pending_;
  std::vector<::grpc::Slice> slices_;
};

}  // namespace

status serialize_response(const inference_response& response, ::grpc::ByteBuffer& out,
                          response_framing framing) {
  const parameter_fields parameters{
      .values = &response.parameters,
      .final_response = framing.in_stream ? &framing.final_response : nullptr};
  const std::string_view id = response.id ? std::string_view{*response.id} : std::string_view{};
  const std::size_t fields = string_field_size(response.model_name) +
                             string_field_size(response.model_version) + string_field_size(id) +
                             parameters_size(parameters);
  std::size_t inner = fields;
  std::size_t shared = 0;  // raw contents passed on as slices of their own
  for (const tensor& t : response.outputs) {
    const std::size_t size = raw_size(response, t);
    inner +=
        delimited_size(output_size(t, response.in_shared_memory(t.name()))) + delimited_size(size);
    if (size >= shared_slice_bytes) shared += size;
  }
  // Protobuf's bound on a message, past which no client could read it.
  if (inner + 16 > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
    return status{
        errc::internal,
        fmt::format("cannot serialize the inference.ModelInferResponse message ({} bytes)", inner)};
  }
  slice_list slices;
  std::string& pending = slices.pending();
  pending.reserve(32 + framing.error_message.size() + inner - shared);
  wire_writer write{pending};
  if (framing.in_stream) {
    write.string_field(stream_error_message, framing.error_message);
    write.delimited(stream_infer_response, inner);
  }
  write.string_field(response_model_name, response.model_name);
  write.string_field(response_model_version, response.model_version);
  write.string_field(response_id, id);
  write.parameters_field(response_parameters, parameters);
  for (const tensor& t : response.outputs) write.output(t, response.in_shared_memory(t.name()));
  for (const tensor& t : response.outputs) {
    const std::size_t size = raw_size(response, t);
    write.delimited(response_raw_output_contents, size);
    if (size >= shared_slice_bytes) {
      slices.share(t.data());
    } else if (size > 0) {
      pending.append(reinterpret_cast<const char*>(t.data().data()), size);
    }
  }
  // Swapped in: grpc++'s ByteBuffer has no move assignment, and a copy would make its buffer anew.
  ::grpc::ByteBuffer made = slices.take();
  out.Swap(&made);
  return {};
}

}  // namespace oip::grpc
