#pragma once
// Internal: what the gRPC service's calls share: statuses as grpc++'s, and messages parsed from and
// serialized to grpc++'s byte buffers.

#include "core/detail/utf8.hpp"

#include <oip/grpc/codec.hpp>
#include <oip/status.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>

#include <fmt/format.h>
#include <google/protobuf/arena.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/proto_utils.h>

namespace oip::grpc {

// A status message travels percent-encoded in a trailer, and clients refuse trailers above 8 to
// 16 KiB, which would replace the error with RESOURCE_EXHAUSTED. Messages repeat what the client
// sent (names, shapes), so a long one is cut, at a UTF-8 character boundary.
inline constexpr std::size_t max_status_message_bytes = 2048;

inline ::grpc::Status to_grpc(const status& s) {
  if (s.ok()) return ::grpc::Status::OK;
  const auto code = static_cast<::grpc::StatusCode>(s.grpc_status());
  // Clients read the message as UTF-8 text, and it may quote a client's bytes that are not.
  const std::string message = oip::detail::find_invalid_utf8(s.message()) == std::string::npos
                                  ? s.message()
                                  : oip::detail::valid_utf8(s.message());
  if (message.size() <= max_status_message_bytes) return ::grpc::Status{code, message};
  std::size_t cut = max_status_message_bytes;
  while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0U) == 0x80U) --cut;
  return ::grpc::Status{code, message.substr(0, cut) + "..."};
}

inline ::grpc::ServerUnaryReactor* finish(::grpc::CallbackServerContext* context, const status& s) {
  ::grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(to_grpc(s));
  return reactor;
}

// Where an inference call's messages live: a protobuf arena whose first block is part of this
// object, so a small message's fields take no heap allocation and none is freed one by one (a
// string's own bytes, past its inline capacity, still come from the heap).
class message_arena {
 public:
  message_arena() : arena_{options(block_)} {}  // NOLINT(cppcoreguidelines-pro-type-member-init)
  message_arena(const message_arena&) = delete;
  message_arena& operator=(const message_arena&) = delete;

  template <class Message>
  Message& make() {
    return *google::protobuf::Arena::CreateMessage<Message>(&arena_);
  }

 private:
  static google::protobuf::ArenaOptions options(std::array<char, 4096>& block) {
    google::protobuf::ArenaOptions o;
    o.initial_block = block.data();
    o.initial_block_size = block.size();
    return o;
  }

  // Left uninitialised: the arena writes it before it reads it.
  alignas(std::max_align_t) std::array<char, 4096> block_;
  google::protobuf::Arena arena_;
};

template <class Message>
status parse(const ::grpc::ByteBuffer& bytes, Message& message) {
  ::grpc::ByteBuffer shared{bytes};  // shares the slices: Deserialize consumes its buffer
  if (::grpc::SerializationTraits<Message>::Deserialize(&shared, &message).ok()) return {};
  return status{errc::invalid_argument,
                fmt::format("the request is not a valid {} message: protobuf cannot parse it (a "
                            "malformed field, or a string field that is not valid UTF-8)",
                            Message::descriptor()->full_name())};
}

template <class Message>
status serialize(const Message& message, ::grpc::ByteBuffer& out) {
  bool own_buffer = false;
  if (::grpc::SerializationTraits<Message>::Serialize(message, &out, &own_buffer).ok()) return {};
  return status{errc::internal,
                fmt::format("cannot serialize the {} message ({} bytes)",
                            Message::descriptor()->full_name(), message.ByteSizeLong())};
}

// Triton's gRPC clients send a sequence id above INT64_MAX as a negative int64_param, and
// Triton reads it back as the uint64 it was.
inline void restore_unsigned_sequence_id(parameters& params) {
  if (const auto* id = params.get<std::int64_t>("sequence_id"); id != nullptr && *id < 0) {
    params.set("sequence_id", static_cast<std::uint64_t>(*id));
  }
}

// What the service refuses in an inference message's parameters beyond what decode_request does.
inline status check_infer_parameters(const parameters& params) {
  if (const parameter_value* flag = params.find("triton_enable_empty_final_response");
      flag != nullptr && !std::holds_alternative<bool>(*flag)) {
    return status{errc::invalid_argument,
                  "invalid value type for 'triton_enable_empty_final_response' parameter, "
                  "expected bool_param."};
  }
  return {};
}

// The service's decoding of an inference message; its raw contents move into the request's
// tensors rather than being copied.
inline result<inference_request> decode_infer_message(inference::ModelInferRequest& message,
                                                      const limits& bounds) {
  result<inference_request> request = decode_request(message, bounds);
  if (!request) return request;
  if (status refused = check_infer_parameters(request->parameters); !refused.ok()) return refused;
  return request;
}

}  // namespace oip::grpc
