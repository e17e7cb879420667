#pragma once
/// \file
/// The classification extension on the device: a model whose output lies in device memory ranks
/// its classes there and copies back only the best of each row, instead of the whole output.

#include <oip/export.hpp>
#include <oip/status.hpp>

#include <cstddef>
#include <cstdint>

// The CUDA runtime's stream type (`cudaStream_t` is `CUstream_st*`), declared here so that this
// header needs no CUDA include path.
struct CUstream_st;

namespace oip::cuda {

/// The longest row that `rank_top_classes` takes (a row is held in a block's shared memory).
inline constexpr std::size_t max_ranked_columns = 8192;
/// The most classes per row that `rank_top_classes` takes: each costs a pass over the row, and
/// where more are asked, copying the whole output back costs about the same.
inline constexpr std::size_t max_ranked_classes = 64;

/// Queues on `stream` the ranking of each of `rows` rows of `columns` FP32 values at `values`
/// (device memory) in the order of `oip::top_classes` (larger first, NaN last, equal values lower
/// index first), writing the values of each row's top `k` classes to `best` and their indices in
/// the row to `indices` (device memory, rows x k each, best first). With
/// `oip::classification_of_ranked`, the classification extension for a device model's output
/// (`oip::cuda::dense_softmax_model` answers `classification` this way). 400 when `k` is 0 or
/// above `columns` or `max_ranked_classes`, or `columns` is above `max_ranked_columns`; 500 when
/// the launch fails.
///
/// Example:
/// \code
///   // scores: float[rows * 1000] on the device; top: float[rows * 5], at: std::uint32_t[rows * 5]
///   oip::status queued = oip::cuda::rank_top_classes(scores, rows, 1000, 5, top, at, stream);
/// \endcode
[[nodiscard]] OIP_EXPORT status rank_top_classes(const float* values, std::size_t rows,
                                                 std::size_t columns, std::size_t k, float* best,
                                                 std::uint32_t* indices, CUstream_st* stream);

}  // namespace oip::cuda
