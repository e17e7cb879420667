#pragma once
// Internal: a decoded request checked against its model's configuration before the model runs,
// and the model's outputs turned into the response the client asked for.

#include <oip/infer.hpp>
#include <oip/model.hpp>
#include <oip/status.hpp>

#include <cstdint>
#include <span>
#include <string_view>

namespace oip::detail {

/// Every failure is a 400 in Triton's wording.
[[nodiscard]] status validate_request(const model_config& config, const inference_request& request);

/// The batch size of a validated request: the first input's first dimension for a batching
/// model, else 1.
[[nodiscard]] std::uint64_t batch_size(const model_config& config,
                                       const inference_request& request) noexcept;

/// The outputs the client asked for, in its order (all of the model's when it named none), with
/// classification applied; id, model name and version set. An output that the configuration does
/// not name, or whose datatype or shape (with the batch dimension) differs from it, and a requested
/// output that the model did not produce, are the model's fault (500).
[[nodiscard]] result<inference_response> make_response(const model_config& config,
                                                       std::uint64_t version,
                                                       const std::optional<std::string>& id,
                                                       const std::vector<requested_output>& asked,
                                                       model_output&& produced);

/// 400 for an input in device memory (a host's own request can hold one) that the model would
/// read on the host: its bytes must be on one of `readable_devices`.
[[nodiscard]] status check_input_memory(const model_config& config,
                                        const inference_request& request,
                                        std::span<const int> readable_devices);

/// A 500 for an output in device memory: the codecs, classification and the batcher's split read
/// outputs on the host.
[[nodiscard]] status check_in_host_memory(std::string_view model, const tensor& output);

/// The model's outputs against its configuration: in host memory, name, datatype, shape (see
/// make_response).
[[nodiscard]] status check_outputs(const model_config& config, const std::vector<tensor>& produced);

}  // namespace oip::detail
