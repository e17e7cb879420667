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

/// The indices of the `n` largest elements of each row, best first; equal values go lower index
/// first, NaN ranks below every number. A row is the whole tensor, or with `batched` one slice of
/// the first dimension. `n` above a row's size is clamped. Every integer and floating datatype;
/// BOOL and BYTES are a 400.
///
/// Example:
/// \code
///   oip::result<std::vector<std::uint64_t>> top = oip::top_classes(scores, 5, false);
/// \endcode
[[nodiscard]] OIP_EXPORT result<std::vector<std::uint64_t>> top_classes(const tensor& output,
                                                                        std::size_t n,
                                                                        bool batched);

/// The same selection written to `out`, which must hold at least rows x min(`n`, row size)
/// indices (else a 400): no allocation. Returns how many indices were written.
///
/// Example:
/// \code
///   std::array<std::uint64_t, 5> best;
///   oip::result<std::size_t> written = oip::top_classes(scores, 5, false, best);
/// \endcode
[[nodiscard]] OIP_EXPORT result<std::size_t> top_classes(const tensor& output, std::size_t n,
                                                         bool batched,
                                                         std::span<std::uint64_t> out);

/// The classification of `output`: a BYTES tensor of the same name holding, per row, the top `n`
/// classes as `"<value>:<index>"`, with `":<label>"` when `labels` has an entry for the index.
/// Shape [n] (whole tensor), or [batch, n] with `batched`. Values are written in the shortest
/// form that reads back to the same value of the output's type ("3.3", not "3.300000").
///
/// Example:
/// \code
///   oip::result<oip::tensor> top3 = oip::classify(scores, 3, false, labels);  // "0.9:2:cat", ...
/// \endcode
[[nodiscard]] OIP_EXPORT result<tensor> classify(const tensor& output, std::size_t n, bool batched,
                                                 std::span<const std::string> labels = {});

}  // namespace oip
