#include "grpc/response_bytes.hpp"

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <grpcpp/support/slice.h>

namespace oip::grpc {

namespace {

// Below this, an output's bytes are copied into the message: a copy of a few kilobytes costs
// less than the shared slice (a holder and grpc++'s reference count, both allocated).
constexpr std::size_t shared_slice_bytes = std::size_t{16} << 10U;

// Protobuf's wire format: a length-delimited field's tag, and a varint.
constexpr char raw_output_contents_tag = (6 << 3) | 2;  // ModelInferResponse.raw_output_contents
constexpr char infer_response_tag = (2 << 3) | 2;       // ModelStreamInferResponse.infer_response

std::size_t varint_size(std::uint64_t value) {
  std::size_t size = 1;
  for (; value >= 0x80U; value >>= 7U) ++size;
  return size;
}

void append_varint(std::string& out, std::uint64_t value) {
  for (; value >= 0x80U; value >>= 7U) out += static_cast<char>((value & 0x7FU) | 0x80U);
  out += static_cast<char>(value);
}

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
  inference::ModelInferResponse fields;
  if (status s = encode_response_without_raw_contents(response, fields); !s.ok()) return s;
  if (framing.in_stream) {
    (*fields.mutable_parameters())["triton_final_response"].set_bool_param(framing.final_response);
  }
  std::size_t inner = fields.ByteSizeLong();
  for (const tensor& t : response.outputs) {
    const std::size_t size = raw_size(response, t);
    inner += 1 + varint_size(size) + size;
  }
  // Protobuf's bound on a message, past which no client could read it.
  if (inner + 16 > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
    return status{
        errc::internal,
        fmt::format("cannot serialize the inference.ModelInferResponse message ({} bytes)", inner)};
  }
  slice_list slices;
  std::string& pending = slices.pending();
  if (framing.in_stream) {
    pending += infer_response_tag;
    append_varint(pending, inner);
  }
  if (!fields.AppendToString(&pending)) {
    return status{errc::internal, "cannot serialize the inference.ModelInferResponse message"};
  }
  for (const tensor& t : response.outputs) {
    const std::size_t size = raw_size(response, t);
    pending += raw_output_contents_tag;
    append_varint(pending, size);
    if (size >= shared_slice_bytes) {
      slices.share(t.data());
    } else if (size > 0) {
      pending.append(reinterpret_cast<const char*>(t.data().data()), size);
    }
  }
  out = slices.take();
  return {};
}

}  // namespace oip::grpc
