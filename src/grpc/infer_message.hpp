#pragma once
// Internal: an inference message as ModelInfer and ModelStreamInfer receive it, read once:
// straight from its bytes where request_bytes reads it, through protobuf otherwise.

#include "grpc/messages.hpp"
#include "grpc/request_bytes.hpp"

#include <oip/infer.hpp>
#include <oip/limits.hpp>
#include <oip/parameters.hpp>
#include <oip/status.hpp>

#include <optional>
#include <string_view>
#include <variant>

#include <grpcpp/support/byte_buffer.h>

namespace oip::grpc {

class infer_message {
 public:
  /// Reads `bytes`; an error is protobuf's refusal of a malformed message (INVALID_ARGUMENT).
  [[nodiscard]] status read(const ::grpc::ByteBuffer& bytes, const limits& bounds) {
    read_ = read_request_bytes(bytes, bounds);
    if (read_) return {};
    message_ = &arena_.emplace().make<inference::ModelInferRequest>();
    return parse(bytes, *message_);
  }

  [[nodiscard]] std::string_view model_name() const {
    return read_ ? std::string_view{read_->model_name} : message_->model_name();
  }
  [[nodiscard]] std::string_view model_version() const {
    return read_ ? std::string_view{read_->model_version} : message_->model_version();
  }
  [[nodiscard]] std::string_view id() const {
    return read_ ? std::string_view{read_->id} : message_->id();
  }

  /// Whether the request asks for an empty final response on a stream, as Triton reads its
  /// `triton_enable_empty_final_response` (a value other than a bool is refused by `decode`).
  [[nodiscard]] bool empty_final_response() const {
    if (read_) {
      const parameter_value* flag =
          read_->request.parameters.find("triton_enable_empty_final_response");
      return flag != nullptr && std::holds_alternative<bool>(*flag) && std::get<bool>(*flag);
    }
    const auto flag = message_->parameters().find("triton_enable_empty_final_response");
    return flag != message_->parameters().end() && flag->second.bool_param();
  }

  /// The request, or what is wrong with it; the message's tensors move into it (call once).
  [[nodiscard]] result<inference_request> decode(const limits& bounds) {
    if (read_) return std::move(read_->request);
    return decode_infer_message(*message_, bounds);
  }

 private:
  std::optional<request_fields> read_;
  std::optional<message_arena> arena_;
  inference::ModelInferRequest* message_ = nullptr;
};

}  // namespace oip::grpc
