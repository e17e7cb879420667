#pragma once
// Internal: ModelStreamInfer, the gRPC stream of inference requests and their replies.

#include "grpc/messages.hpp"

#include <oip/inference_service.hpp>
#include <oip/status.hpp>

#include <cstdint>

#include <grpcpp/grpcpp.h>

namespace oip::grpc {

using stream_reactor_base = ::grpc::ServerBidiReactor<::grpc::ByteBuffer, ::grpc::ByteBuffer>;

/// How a stream answers a request that fails.
enum class stream_errors : std::uint8_t {
  /// With a reply whose `error_message` says why; the stream goes on (Triton's default).
  in_replies,
  /// By ending the stream with the error's status, where its reply would have been written: what
  /// a client asks for with the metadata `triton_grpc_error: true` as it opens the stream.
  end_stream,
};

/// A stream over `service`: it reads one request at a time, hands each to the service, and writes
/// the replies in the order the requests came (a reply that is ready waits for those before it),
/// as Triton does. grpc++ owns the reactor, which deletes itself when the stream is done.
[[nodiscard]] stream_reactor_base* open_infer_stream(inference_service& service,
                                                     stream_errors errors);

/// A stream refused as it opens, before any request is read, with `why`.
class refused_stream final : public stream_reactor_base {
 public:
  explicit refused_stream(const status& why) { Finish(to_grpc(why)); }
  void OnDone() override { delete this; }
};

}  // namespace oip::grpc
