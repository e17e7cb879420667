#pragma once
// The CUDA kernels of the reference models, behind host functions that launch them on a stream
// (compiled by nvcc in kernels.cu; everything else is ordinary C++).

#include <oip/datatype.hpp>

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

namespace oip::cuda::detail {

/// sum = a + b and difference = a - b over `count` elements of numeric `type`.
cudaError_t launch_add_sub(datatype type, const void* a, const void* b, void* sum, void* difference,
                           std::size_t count, cudaStream_t stream);

/// out[i] = in[i] + addend (INT32, wrapping).
cudaError_t launch_add_scalar(const std::int32_t* in, std::int32_t addend, std::int32_t* out,
                              std::size_t count, cudaStream_t stream);

/// Each of `rows` rows of `columns` values becomes its softmax, in place.
cudaError_t launch_softmax_rows(float* values, std::size_t rows, std::size_t columns,
                                cudaStream_t stream);

/// The top `k` (at most `columns` and oip::cuda::max_ranked_classes; `columns` at most
/// oip::cuda::max_ranked_columns) of each of
/// `rows` rows of `columns` values, in oip::top_classes' order: their values into best[rows, k]
/// and their indices in the row into indices[rows, k].
cudaError_t launch_top_k_rows(const float* values, std::size_t rows, std::size_t columns,
                              std::size_t k, float* best, std::uint32_t* indices,
                              cudaStream_t stream);

}  // namespace oip::cuda::detail
