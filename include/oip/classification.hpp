#pragma once
/// \file
/// The classification extension: an output's top N classes as `"<value>:<index>[:<label>]"`
/// strings. Usable on its own, and applied by the endpoint handler when a requested output has
/// the parameter `classification: N`.

#include <oip/export.hpp>
#include <oip/status.hpp>
#include <oip/tensor.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace oip {

/// What a classification's rows are: the whole tensor is one row, or each slice of the first
/// (batch) dimension is a row.
enum class classification_rows : std::uint8_t { whole_tensor, batch_rows };

/// The indices of the `n` largest elements of each row, best first; equal values go lower index
/// first, NaN ranks below every number. `rows` says what a row is. `n` above a row's size is
/// clamped. Every integer and floating datatype; BOOL and BYTES are a 400.
///
/// Example:
/// \code
///   oip::result<std::vector<std::uint64_t>> top = oip::top_classes(scores, 5,
///   oip::classification_rows::whole_tensor);
/// \endcode
[[nodiscard]] OIP_EXPORT result<std::vector<std::uint64_t>> top_classes(const tensor& output,
                                                                        std::size_t n,
                                                                        classification_rows rows);

/// The same selection written to `out`, which must hold at least rows x min(`n`, row size)
/// indices (else a 400): no allocation. Returns how many indices were written.
///
/// Example:
/// \code
///   std::array<std::uint64_t, 5> best;
///   oip::result<std::size_t> written = oip::top_classes(scores, 5,
///   oip::classification_rows::whole_tensor, best);
/// \endcode
[[nodiscard]] OIP_EXPORT result<std::size_t> top_classes(const tensor& output, std::size_t n,
                                                         classification_rows rows,
                                                         std::span<std::uint64_t> out);

/// The classification of `output`: a BYTES tensor of the same name holding, per row, the top `n`
/// classes as `"<value>:<index>"`, with `":<label>"` when `labels` has an entry for the index.
/// Shape [n] (`whole_tensor`), or [batch, n] (`batch_rows`). Values are written in the shortest
/// form that reads back to the same value of the output's type ("3.3", not "3.300000").
///
/// Example:
/// \code
///   oip::result<oip::tensor> top3 = oip::classify(scores, 3,
///   oip::classification_rows::whole_tensor, labels);  // "0.9:2:cat", ...
/// \endcode
[[nodiscard]] OIP_EXPORT result<tensor> classify(const tensor& output, std::size_t n,
                                                 classification_rows rows,
                                                 std::span<const std::string> labels = {});

/// The same classification from classes ranked elsewhere, for a model that ranks its output itself
/// (a model on a GPU that copies back only its best classes): `best` holds, per row, the values of
/// its top k classes best first, named and typed as the output, shape [rows, k] (`batch_rows`) or
/// [k] (`whole_tensor`); `indices` holds their indices in their rows, in the same order. 500 when
/// the two do not agree (the model's mistake), 400 for BOOL and BYTES, as `classify`.
///
/// Example:
/// \code
///   // top3: FP32 [1, 3] {0.9, 0.05, 0.03}, ranked on the device; at: {2, 0, 7}
///   oip::result<oip::tensor> classes = oip::classification_of_ranked(top3, at,
///   oip::classification_rows::batch_rows, labels);  // [["0.9:2:cat", ...]]
/// \endcode
[[nodiscard]] OIP_EXPORT result<tensor> classification_of_ranked(
    const tensor& best, std::span<const std::uint64_t> indices, classification_rows rows,
    std::span<const std::string> labels = {});

}  // namespace oip
