// The gRPC client's shared state: its channel, made from the client's options, and the calls in
// flight.

#include "grpc/client_state.hpp"

#include "grpc/deadlock_detection.hpp"

#include <oip/grpc/codec.hpp>

#include <algorithm>
#include <climits>
#include <new>

#include <fmt/format.h>

namespace oip::grpc::detail {

namespace {

// The nearest errc for a gRPC code; the code itself is kept (`status::received_code`).
errc errc_of(::grpc::StatusCode code) {
  switch (code) {
    case ::grpc::StatusCode::INVALID_ARGUMENT:
    case ::grpc::StatusCode::OUT_OF_RANGE: return errc::invalid_argument;
    case ::grpc::StatusCode::NOT_FOUND: return errc::not_found;
    case ::grpc::StatusCode::ALREADY_EXISTS: return errc::already_exists;
    case ::grpc::StatusCode::DEADLINE_EXCEEDED: return errc::deadline_exceeded;
    case ::grpc::StatusCode::PERMISSION_DENIED: return errc::forbidden;
    case ::grpc::StatusCode::UNAUTHENTICATED: return errc::unauthenticated;
    case ::grpc::StatusCode::RESOURCE_EXHAUSTED: return errc::payload_too_large;
    case ::grpc::StatusCode::FAILED_PRECONDITION: return errc::failed_precondition;
    case ::grpc::StatusCode::UNIMPLEMENTED: return errc::not_implemented;
    case ::grpc::StatusCode::UNAVAILABLE:
    case ::grpc::StatusCode::CANCELLED:
    case ::grpc::StatusCode::ABORTED: return errc::unavailable;
    default: return errc::internal;
  }
}

grpc_compression_algorithm algorithm_of(wire_compression compression) {
  switch (compression) {
    case wire_compression::gzip: return GRPC_COMPRESS_GZIP;
    case wire_compression::deflate: return GRPC_COMPRESS_DEFLATE;
    case wire_compression::none: break;
  }
  return GRPC_COMPRESS_NONE;
}

std::shared_ptr<::grpc::Channel> make_channel(const std::string& target,
                                              const client_options& options) {
  ::grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(static_cast<int>(
      std::min<std::size_t>(options.reply_bounds.max_body_bytes, std::size_t{INT32_MAX})));
  arguments.SetMaxSendMessageSize(-1);
  if (options.keepalive_time.count() > 0) {
    arguments.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, static_cast<int>(options.keepalive_time.count()));
    arguments.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                     static_cast<int>(options.keepalive_timeout.count()));
    arguments.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS,
                     options.keepalive_without_calls ? 1 : 0);
  }
  if (options.request_compression != wire_compression::none) {
    arguments.SetCompressionAlgorithm(algorithm_of(options.request_compression));
  }
  std::shared_ptr<::grpc::ChannelCredentials> credentials;
  if (options.tls.enabled) {
    ::grpc::SslCredentialsOptions tls;
    tls.pem_root_certs = options.tls.root_certificates;
    tls.pem_private_key = options.tls.private_key;
    tls.pem_cert_chain = options.tls.certificate_chain;
    credentials = ::grpc::SslCredentials(tls);
  } else {
    credentials = ::grpc::InsecureChannelCredentials();
  }
  return ::grpc::CreateCustomChannel(target, credentials, arguments);
}

std::string lower(std::string_view text) {
  std::string out{text};
  for (char& c : out) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return out;
}

// Whether grpc++ can send each header as metadata: a name of lower-case letters, digits, '-', '_'
// and '.' (names are sent in lower case), not one of the protocol's own (`grpc-`, `:`-prefixed),
// and, unless the name ends in "-bin", a value of printable ASCII. grpc++ aborts the process on a
// call with anything else, so it is refused when the client is made, as the HTTP client refuses
// what HTTP cannot carry.
status check_metadata(const std::vector<http_header>& headers) {
  for (const http_header& h : headers) {
    const std::string name = lower(h.name);
    const bool legal_name = !name.empty() && !name.starts_with("grpc-") &&
                            std::all_of(name.begin(), name.end(), [](char c) {
                              return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
                                     c == '_' || c == '.';
                            });
    const bool binary = name.ends_with("-bin");
    const bool legal_value = binary || std::all_of(h.value.begin(), h.value.end(),
                                                   [](char c) { return c >= 0x20 && c <= 0x7E; });
    if (!legal_name || !legal_value) {
      return status{errc::invalid_argument,
                    fmt::format("the header '{}' cannot be sent as gRPC metadata: a name of "
                                "letters, digits, '-', '_' and '.' (not 'grpc-'), and a value of "
                                "printable ASCII unless the name ends in '-bin'",
                                h.name.substr(0, 200))};
    }
  }
  return {};
}

}  // namespace

status status_of(const ::grpc::Status& s) {
  if (s.ok()) return {};
  return status{errc_of(s.error_code()), s.error_message()}.received_as(
      received_over::grpc, static_cast<int>(s.error_code()));
}

std::string version_text(std::optional<std::uint64_t> version) {
  return version ? std::to_string(*version) : std::string{};
}

client_state::client_state(std::string target, client_options options)
    : options_{std::move(options)},
      headers_check_{check_metadata(options_.headers)},
      target_{std::move(target)},
      channel_{make_channel(target_, options_)},
      stub_{Service::NewStub(channel_)} {
  detail::settle_deadlock_detection(options_.keep_abseil_deadlock_detection);
}

status client_state::prepare(::grpc::ClientContext& context) const {
  if (!headers_check_.ok()) return headers_check_;
  for (const http_header& h : options_.headers) context.AddMetadata(lower(h.name), h.value);
  if (options_.timeout.count() > 0) {
    context.set_deadline(std::chrono::system_clock::now() + options_.timeout);
  }
  if (options_.request_compression != wire_compression::none) {
    context.set_compression_algorithm(algorithm_of(options_.request_compression));
  }
  return {};
}

// A reply decoded for the caller's callback, which is called whatever happens: an exception here,
// on grpc++'s thread, would end the call without it.
result<inference_response> decoded(inference::ModelInferResponse& reply, const limits& bounds,
                                   const shared_memory_output_source* placed) {
  try {
    return decode_response(reply, bounds, placed);
  } catch (const std::bad_alloc&) {
    return status{errc::unavailable, "no memory on this client for the reply's tensors"};
  }
}

// The outputs of `request` that go to regions registered through this client, if any.
result<std::shared_ptr<shared_memory_outputs>> placed_outputs(client_state& state,
                                                              const inference_request& request) {
  if (!state.has_regions() || request.outputs.empty()) {
    return std::shared_ptr<shared_memory_outputs>{};
  }
  result<shared_memory_outputs> asked = shared_memory_outputs::of(request, state.regions());
  if (!asked) return std::move(asked).error();
  if (asked->outputs.empty()) return std::shared_ptr<shared_memory_outputs>{};
  return std::make_shared<shared_memory_outputs>(std::move(*asked));
}

}  // namespace oip::grpc::detail
