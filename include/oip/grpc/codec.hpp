#pragma once

/// Conversions between the gRPC messages of `inference.GRPCInferenceService` (the Open Inference
/// Protocol's, as Triton defines them) and oip's request and response types, both directions: a
/// server decodes requests and encodes responses, a client the reverse.
///
/// Tensor data travels either as typed `contents` or as `raw_input_contents` /
/// `raw_output_contents` (the binary form, which FP16 and BF16 always take). Raw bytes are moved
/// out of a decoded message into the tensors, never copied; encoding copies each tensor's bytes
/// once, into the message (protobuf owns its bytes).

#include <oip/grpc/grpc_service.pb.h>
#include <oip/infer.hpp>
#include <oip/json.hpp>
#include <oip/limits.hpp>
#include <oip/log_settings.hpp>
#include <oip/metadata.hpp>
#include <oip/model_config.hpp>
#include <oip/parameters.hpp>
#include <oip/statistics.hpp>
#include <oip/status.hpp>
#include <oip/trace_settings.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace oip::grpc {

using parameter_map = google::protobuf::Map<std::string, inference::InferParameter>;

/// How a message carries its tensors' elements: `raw`, each tensor's bytes in one entry of
/// `raw_input_contents` / `raw_output_contents`, or `typed`, in each tensor's `contents` (FP16
/// and BF16, which have no typed field, make a whole message raw).
enum class contents_form : std::uint8_t { raw, typed };

/// Server side: a request message to an oip request; `message`'s raw contents are taken. A 400
/// (INVALID_ARGUMENT) for contents and raw data together, a count of raw contents that is not
/// one per input, missing data, element counts that do not match the shape, integers out of their
/// datatype's range, or FP16/BF16 in typed contents.
///
/// Example:
/// \code
///   oip::result<oip::inference_request> request = oip::grpc::decode_request(message);
///   if (!request) return to_grpc_status(request.error());
/// \endcode
///
/// An input may name a registered region instead (`shared_memory_region`,
/// `shared_memory_offset`, `shared_memory_byte_size` parameters, taken out of its parameters); it
/// then has no entry among the raw contents, as in Triton, and is left in `shared_memory_inputs`
/// for the server to read.
[[nodiscard]] result<inference_request> decode_request(inference::ModelInferRequest& message,
                                                       const limits& bounds = {});

/// Server side: a response, raw by default whatever form the request used, as Triton's server
/// answers (Triton's clients read `raw_output_contents[i]` for output i without looking).
/// Outputs that the response lists in `shared_memory_outputs` carry only their name, datatype
/// and shape, and an empty raw entry, so that raw entries stay one per output.
[[nodiscard]] status encode_response(const inference_response& response,
                                     inference::ModelInferResponse& out,
                                     contents_form form = contents_form::raw);

/// Client side: a request for `model` (and `version`, empty for the policy's choice).
[[nodiscard]] status encode_request(const inference_request& request, std::string_view model,
                                    std::string_view version, contents_form form,
                                    inference::ModelInferRequest& out);

/// Client side: a response message to an oip response; `message`'s raw contents are taken. With
/// `shared_memory`, outputs that the request asked for in shared memory are read from the client's
/// mappings of their regions, as `oip::decode_response` reads them.
[[nodiscard]] result<inference_response> decode_response(
    inference::ModelInferResponse& message, const limits& bounds = {},
    const shared_memory_output_source* shared_memory = nullptr);

/// A `RepositoryModelLoad` request's parameters for `model_loader::load_with`: bool, int64,
/// string, and bytes (Triton's `file:<path>` contents) as a string of those bytes; one with no
/// value set is a 400.
[[nodiscard]] result<parameters> decode_load_parameters(
    const google::protobuf::Map<std::string, inference::ModelRepositoryParameter>& in);
/// Client side: a load request's parameters into `out`, `file:<path>` entries as bytes. 400 for
/// what the message cannot carry: a double, or a uint64 above INT64_MAX.
[[nodiscard]] status encode_load_parameters(
    const parameters& in,
    google::protobuf::Map<std::string, inference::ModelRepositoryParameter>& out);

/// Parameters of every kind (bool, int64, uint64, double, string) in both directions.
void encode_parameters(const parameters& in, parameter_map& out);
[[nodiscard]] result<parameters> decode_parameters(const parameter_map& in, std::string_view where);

/// A `LogSettings` request's settings as a change (an empty map changes nothing). Each level
/// must be a `bool_param`, `log_verbose_level` a `uint32_param`, `log_format` a `string_param`
/// ("default" or "ISO8601"), in Triton's wording otherwise (400); `log_file`, whatever its value,
/// is carried so that `update_log_settings` refuses it; other keys are ignored.
[[nodiscard]] result<log_settings_update> decode_log_settings_update(
    const inference::LogSettingsRequest& request);
/// The settings as Triton's `LogSettingsResponse` holds them (`log_file` "").
void encode_log_settings(const log_settings& settings, inference::LogSettingsResponse& out);

/// A `TraceSetting` request's settings as a change: a setting with no values is cleared.
[[nodiscard]] trace_settings_change decode_trace_settings_change(
    const inference::TraceSettingRequest& request);
/// The settings as Triton's `TraceSettingResponse` holds them, each a list of strings.
void encode_trace_settings(const trace_settings& settings, inference::TraceSettingResponse& out);

/// `ModelConfig`'s reply: Triton's model configuration, as `oip::encode(const model_config&)`.
void encode_model_config(const model_config& config, inference::ModelConfig& out);
/// One model version's `ModelStatistics`.
void encode_statistics(const statistics_snapshot& statistics, inference::ModelStatistics& out);
/// `ModelMetadata`'s reply.
void encode_model_metadata(const model_metadata& metadata, inference::ModelMetadataResponse& out);

}  // namespace oip::grpc
