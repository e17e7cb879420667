#pragma once
// The reference models of oip-serve, named and shaped as Triton's example models so that Triton's
// clients and examples run against oip unchanged.

#include <oip/model.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace oip_serve {

/// simple, simple_int8, simple_string, simple_identity, identity_<type> for every datatype,
/// classifier, and the sequence models simple_sequence, simple_dyna_sequence,
/// simple_string_dyna_sequence and sequence_accumulator, and the decoupled repeat_int32,
/// square_int32 and text_stream (decoupled_models.hpp). `dynamic_batching` turns on the
/// classifier's dynamic batching.
std::vector<std::shared_ptr<oip::model>> reference_models(bool dynamic_batching = true);

/// The names of `reference_models`, in the same order, without building any model.
std::vector<std::string> reference_model_names();

/// The reference model `name` alone, or null when there is none of that name.
std::shared_ptr<oip::model> reference_model(std::string_view name, bool dynamic_batching = true);

/// The classifier's weights, row-major [2048, 1000], from a seeded generator: the CPU and the
/// CUDA classifier use the same.
std::vector<float> classifier_weights();

}  // namespace oip_serve
