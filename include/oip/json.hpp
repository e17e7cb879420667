#pragma once
/// \file
/// JSON codecs for every object of the protocol, in both directions: a server decodes requests
/// and encodes responses, a client encodes requests and decodes responses, with the same library.
/// Bodies that carry binary tensor data (the binary extension) are handled here too; see
/// `binary.hpp` for the framing types.
///
/// Decoding is strict: malformed JSON anywhere, duplicate keys, wrong JSON types, integers out of
/// range for their datatype, element counts that do not match the shape, and anything above the
/// host's `oip::limits` are `errc::invalid_argument` (400) or `errc::payload_too_large` (413)
/// with a message that names the tensor and the expected and actual values. Unknown keys are
/// accepted (and validated).

#include <oip/binary.hpp>
#include <oip/buffer.hpp>
#include <oip/export.hpp>
#include <oip/infer.hpp>
#include <oip/limits.hpp>
#include <oip/log_settings.hpp>
#include <oip/metadata.hpp>
#include <oip/model_config.hpp>
#include <oip/statistics.hpp>
#include <oip/status.hpp>
#include <oip/trace_settings.hpp>

#include <cstddef>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace oip {

/// How a response's outputs are written.
struct response_format {
  /// Outputs not named in `binary_outputs`/`json_outputs` go binary when true.
  bool binary_by_default = false;
  /// Per-output choices (from each requested output's `binary_data`).
  std::vector<std::pair<std::string, bool>> binary_outputs;
  /// Write NaN and infinities as `null` instead of `NaN`, `Infinity`, `-Infinity`.
  bool non_finite_as_null = false;
  /// The longest JSON text the reply may have: past it, encoding stops (within a block of 4,096
  /// numbers, or one BYTES element's escapes) with a 400 that asks for binary data. A server sets
  /// it from its limits
  /// (`limits::json_response_bound`); unbounded by default.
  std::size_t max_json_bytes = std::numeric_limits<std::size_t>::max();

  [[nodiscard]] bool is_binary(std::string_view output_name) const noexcept {
    for (const auto& [name, binary] : binary_outputs) {
      if (name == output_name) return binary;
    }
    return binary_by_default;
  }

  /// The format a request asks for: `binary_data` on a requested output, else the request's
  /// `binary_data_output`, else JSON. Either parameter with a non-boolean value is a 400.
  [[nodiscard]] OIP_EXPORT static result<response_format> from_request(
      const inference_request& request);
};

/// How a client writes a request's inputs.
struct request_format {
  /// Send every input's data as binary (after the JSON) instead of in "data".
  bool binary_inputs = false;
  /// Write NaN and infinities as `null` (a server then rejects them) instead of the tokens.
  bool non_finite_as_null = false;
  /// Send FP16 and BF16 inputs as JSON numbers, which oip's servers read and Triton refuses
  /// ("receiving FP16 data via JSON is not supported"). Off, they go as binary data whatever
  /// `binary_inputs` says, the other inputs staying in JSON.
  bool half_precision_as_json = false;
  /// Ask for the outputs as binary data: the request's `binary_data_output` parameter is sent as
  /// true unless the request sets it itself (a requested output's `binary_data` still decides for
  /// that output).
  bool binary_outputs = false;
};

/// The request format that oip's network clients use unless told otherwise: binary data both
/// ways.
inline constexpr request_format binary_format{.binary_inputs = true, .binary_outputs = true};

// --- inference ---------------------------------------------------------------------------------

/// Decodes `$inference_request` from a body. `header_length` is the value of
/// `Inference-Header-Content-Length` (see `parse_header_length`): absent, the whole body is JSON;
/// present, the JSON is its first `header_length` bytes and binary inputs follow, in input
/// order, each a zero-copy view into `body`. (Length 0, a raw binary request, needs the model's
/// metadata: use `decode_raw_request`.) `model_name`, when given, is named in error messages as
/// Triton names it.
///
/// Example:
/// \code
///   oip::result<oip::inference_request> r = oip::decode_request(body, std::nullopt);
///   if (!r) return reply(r.error().http_status(), r.error().to_json());
/// \endcode
///
/// An input may name a registered region instead of carrying data (`shared_memory_region`,
/// `shared_memory_offset`, `shared_memory_byte_size` in its parameters, which are then taken out
/// of them): it is left in `shared_memory_inputs` for the server to read.
[[nodiscard]] OIP_EXPORT result<inference_request> decode_request(
    const buffer& body, std::optional<std::size_t> header_length, const limits& bounds = {},
    std::string_view model_name = {});

/// Encodes `$inference_request` (the client side).
[[nodiscard]] OIP_EXPORT result<encoded_body> encode_request(const inference_request& request,
                                                             const request_format& format = {});

/// Encodes `$inference_response`; outputs go binary as `format` says, and those that the
/// response lists in `shared_memory_outputs` with their name, datatype and shape only.
[[nodiscard]] OIP_EXPORT result<encoded_body> encode_response(const inference_response& response,
                                                              const response_format& format = {});

/// Decodes `$inference_response` (the client side), binary outputs as views into `body`.
///
/// With `shared_memory`, an output that the request asked for in shared memory and that the
/// response carries no data for (as a server answers it) is read from the client's mapping of its
/// region (`shared_memory_output_data`); an output the response does carry data for is read from
/// the response as usual. Without, such an output is a 400.
[[nodiscard]] OIP_EXPORT result<inference_response> decode_response(
    const buffer& body, std::optional<std::size_t> header_length, const limits& bounds = {},
    const shared_memory_output_source* shared_memory = nullptr);

// --- model configuration, statistics, the repository index ------------------------------------

/// The config route's reply: Triton's model configuration (`TYPE_*` datatypes, `dims`,
/// `instance_group`, and the scheduler: `sequence_batching` over `dynamic_batching`).
[[nodiscard]] OIP_EXPORT std::string encode(const model_config& config);
/// The statistics route's reply: `{"model_stats":[...]}`, in Triton's shape.
[[nodiscard]] OIP_EXPORT std::string encode(const std::vector<statistics_snapshot>& statistics);
/// The repository index's reply: one object per row; a row without a version (a model the
/// loader could load) has no `version` key.
[[nodiscard]] OIP_EXPORT std::string encode(const std::vector<model_index_entry>& index);

// --- metadata, health, errors ------------------------------------------------------------------

[[nodiscard]] OIP_EXPORT std::string encode(const server_metadata& metadata);
[[nodiscard]] OIP_EXPORT std::string encode(const model_metadata& metadata);
[[nodiscard]] OIP_EXPORT std::string encode(const server_live& live);
[[nodiscard]] OIP_EXPORT std::string encode(const server_ready& ready);
[[nodiscard]] OIP_EXPORT std::string encode(const model_ready& ready);
[[nodiscard]] OIP_EXPORT std::string encode(const repository_index_request& request);
/// A model load's body (the client side): `{"parameters":{...}}`, or `{}` for none. A
/// `file:<path>` entry holds the file's bytes, sent in base64 (Triton's form); one that is not a
/// string is a 400.
[[nodiscard]] OIP_EXPORT result<std::string> encode_repository_load_request(
    const parameters& request);

[[nodiscard]] OIP_EXPORT result<server_metadata> decode_server_metadata(std::string_view json,
                                                                        const limits& bounds = {});
[[nodiscard]] OIP_EXPORT result<model_metadata> decode_model_metadata(std::string_view json,
                                                                      const limits& bounds = {});
/// The health replies. Triton's carry no body: an empty one is read from `http_status` when given
/// (200: live, or ready), and is a 400 otherwise.
[[nodiscard]] OIP_EXPORT result<server_live> decode_server_live(
    std::string_view json, std::optional<int> http_status = std::nullopt);
[[nodiscard]] OIP_EXPORT result<server_ready> decode_server_ready(
    std::string_view json, std::optional<int> http_status = std::nullopt);
[[nodiscard]] OIP_EXPORT result<model_ready> decode_model_ready(
    std::string_view json, std::optional<int> http_status = std::nullopt);
/// An empty (or all-blank) body is the default request; `ready`, when present, must be a bool;
/// other keys are ignored.
[[nodiscard]] OIP_EXPORT result<repository_index_request> decode_repository_index_request(
    std::string_view json, const limits& bounds = {});
/// A model load's body (`POST /v2/repository/models/<m>/load`): its `parameters`, types kept
/// (Triton's `config` and `file:<path>` entries), for `model_loader::load_with`. An empty (or
/// all-blank) body has none; other keys are ignored.
[[nodiscard]] OIP_EXPORT result<parameters> decode_repository_load_request(
    std::string_view json, const limits& bounds = {});

/// The repository index's reply (the client side): each row's `name` (required), `version` (a
/// string of digits, as Triton writes it; absent for a model the loader could load), `state` and
/// `reason`; other keys are ignored. 400 otherwise.
[[nodiscard]] OIP_EXPORT result<std::vector<model_index_entry>> decode_repository_index(
    std::string_view json, const limits& bounds = {});

// --- the system shared-memory extension -------------------------------------------------------

/// The body of `POST /v2/systemsharedmemory/region/<name>/register`: `key`, `offset` and
/// `byte_size` (the name is the route's).
[[nodiscard]] OIP_EXPORT std::string encode_shared_memory_register(
    const shared_memory_region& region);
/// Reads that body for region `name`: `key` (a string) and `byte_size` are required, `offset`
/// defaults to 0; other keys are ignored. 400 otherwise.
[[nodiscard]] OIP_EXPORT result<shared_memory_region> decode_shared_memory_register(
    std::string_view json, std::string name, const limits& bounds = {});
/// The status routes' reply: `[{"name", "key", "offset", "byte_size"}, ...]`.
[[nodiscard]] OIP_EXPORT std::string encode(const std::vector<shared_memory_region>& regions);
/// Reads that reply (the client side): `name` and `byte_size` required, `key` and `offset`
/// optional (Triton's CUDA regions have no key); other keys are ignored. 400 otherwise.
[[nodiscard]] OIP_EXPORT result<std::vector<shared_memory_region>> decode_shared_memory_status(
    std::string_view json, const limits& bounds = {});

// --- the CUDA shared-memory extension ---------------------------------------------------------

/// Reads the body of `POST /v2/cudasharedmemory/region/<name>/register` for region `name`:
/// `raw_handle` (`{"b64": "<the cudaIpcMemHandle_t's bytes in base64>"}`), `device_id` and
/// `byte_size`, all required; other keys are ignored. 400 otherwise.
[[nodiscard]] OIP_EXPORT result<cuda_shared_memory_registration> decode_cuda_shared_memory_register(
    std::string_view json, std::string name, const limits& bounds = {});
/// The CUDA status routes' reply: `[{"name", "device_id", "byte_size"}, ...]`.
[[nodiscard]] OIP_EXPORT std::string encode(const std::vector<cuda_shared_memory_region>& regions);

// --- the logging extension --------------------------------------------------------------------

/// `GET /v2/logging`'s reply, in Triton's shape: `log_file` (always "": oip writes to its sink),
/// `log_info`, `log_warning`, `log_error`, `log_verbose_level`, `log_format`.
[[nodiscard]] OIP_EXPORT std::string encode(const log_settings& settings);
/// Reads that reply (the client side); `log_file` is read and dropped.
[[nodiscard]] OIP_EXPORT result<log_settings> decode_log_settings(std::string_view json,
                                                                  const limits& bounds = {});
/// The body of `POST /v2/logging`: only the settings that `update` sets.
[[nodiscard]] OIP_EXPORT std::string encode(const log_settings_update& update);
/// Reads that body: each key is optional and `null` leaves its setting as it is (as in Triton);
/// the levels are booleans, `log_verbose_level` an integer from 0 to 2^32 - 1, `log_format`
/// "default" or "ISO8601", `log_file` a string; other keys are ignored. 400 otherwise.
[[nodiscard]] OIP_EXPORT result<log_settings_update> decode_log_settings_update(
    std::string_view json, const limits& bounds = {});

// --- the trace extension ----------------------------------------------------------------------

/// `GET /v2[/models/<m>]/trace/setting`'s reply, in Triton's shape: `trace_level` a list
/// (`["OFF"]` or `["TIMESTAMPS"]`), `trace_rate`, `trace_count`, `log_frequency`, `trace_file` and
/// `trace_mode` ("triton") strings.
[[nodiscard]] OIP_EXPORT std::string encode(const trace_settings& settings);
/// That body as a client writes it: `trace_level` a list, every other setting its first value as a
/// string, a cleared one `null`.
[[nodiscard]] OIP_EXPORT std::string encode(const trace_settings_change& change);
/// The body of `POST /v2[/models/<m>]/trace/setting`: each setting a string (`trace_level` a list
/// of strings), or `null` to clear it; other keys are ignored. 400 for another JSON type.
[[nodiscard]] OIP_EXPORT result<trace_settings_change> decode_trace_settings_change(
    std::string_view json, const limits& bounds = {});

/// The status that an error reply reports: the code follows `http_status`, the message is the
/// body's "error" (or says what is wrong with a body that is not `{"error": "..."}`, or that
/// there was none: some of Triton's error replies have no body).
[[nodiscard]] OIP_EXPORT status decode_error(std::string_view json, int http_status);

}  // namespace oip
