#include "cuda/kernels.hpp"

#include <oip/cuda/top_classes.hpp>
#include <oip/elementwise.hpp>
#include <oip/float16.hpp>

#include <algorithm>
#include <cfloat>

namespace oip::cuda::detail {

namespace {

constexpr unsigned threads_per_block = 256;

unsigned blocks_for(std::size_t count) {
  const std::size_t blocks = (count + threads_per_block - 1) / threads_per_block;
  return static_cast<unsigned>(std::min<std::size_t>(std::max<std::size_t>(blocks, 1), 65535));
}

// Grid-stride loops: any count with a bounded grid.
template <class T>
__global__ void add_sub_kernel(const T* a, const T* b, T* sum, T* difference, std::size_t count) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    oip::elementwise::add_sub(a[i], b[i], sum[i], difference[i]);
  }
}

__global__ void add_scalar_kernel(const std::int32_t* in, std::int32_t addend, std::int32_t* out,
                                  std::size_t count) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    out[i] = oip::elementwise::add<std::int32_t>{}(in[i], addend);
  }
}

// The order of oip::top_classes (src/serving/classification.cpp): larger first, NaN last, equal
// values lower index first. A strict total order, so every element of a row has a distinct rank.
__device__ bool ranks_above(float a, unsigned ia, float b, unsigned ib) {
  const bool a_nan = isnan(a);
  const bool b_nan = isnan(b);
  if (a_nan || b_nan) return a_nan == b_nan ? ia < ib : b_nan;
  if (a != b) return a > b;
  return ia < ib;
}

constexpr unsigned no_index = 0xFFFFFFFFU;

// Keeps in (value, index) the better of it and (other, other_index); no_index is no candidate.
__device__ void keep_better(float& value, unsigned& index, float other, unsigned other_index) {
  if (other_index != no_index &&
      (index == no_index || ranks_above(other, other_index, value, index))) {
    value = other;
    index = other_index;
  }
}

// The best of the block's candidates, valid in thread 0: each warp's best by shuffles, then the
// warps' bests in warp 0.
__device__ void block_best(float& value, unsigned& index) {
  __shared__ float warp_value[32];
  __shared__ unsigned warp_index[32];
  const unsigned lane = threadIdx.x % 32;
  const unsigned warp = threadIdx.x / 32;
  for (unsigned offset = 16; offset > 0; offset /= 2) {
    keep_better(value, index, __shfl_down_sync(0xFFFFFFFFU, value, offset),
                __shfl_down_sync(0xFFFFFFFFU, index, offset));
  }
  if (lane == 0) {
    warp_value[warp] = value;
    warp_index[warp] = index;
  }
  __syncthreads();
  if (warp == 0) {
    const bool present = lane < blockDim.x / 32;
    value = present ? warp_value[lane] : 0.0F;
    index = present ? warp_index[lane] : no_index;
    for (unsigned offset = 16; offset > 0; offset /= 2) {
      keep_better(value, index, __shfl_down_sync(0xFFFFFFFFU, value, offset),
                  __shfl_down_sync(0xFFFFFFFFU, index, offset));
    }
  }
}

// One block per row, the row in shared memory: k rounds, each taking the best value not yet
// taken (the order is total, so each round's best is one element). A round costs a pass over the
// row's share of each thread and two barriers, so k is bounded (max_ranked_classes).
__global__ void top_k_rows_kernel(const float* values, unsigned columns, unsigned k, float* best,
                                  unsigned* indices) {
  extern __shared__ float row[];  // columns values, then a byte per column: taken
  auto* taken = reinterpret_cast<unsigned char*>(row + columns);
  const float* source = values + static_cast<std::size_t>(blockIdx.x) * columns;
  for (unsigned c = threadIdx.x; c < columns; c += blockDim.x) {
    row[c] = source[c];
    taken[c] = 0;
  }
  __syncthreads();
  for (unsigned round = 0; round < k; ++round) {
    float value = 0.0F;
    unsigned index = no_index;
    for (unsigned c = threadIdx.x; c < columns; c += blockDim.x) {
      if (taken[c] == 0) keep_better(value, index, row[c], c);
    }
    block_best(value, index);
    if (threadIdx.x == 0) {
      best[static_cast<std::size_t>(blockIdx.x) * k + round] = value;
      indices[static_cast<std::size_t>(blockIdx.x) * k + round] = index;
      taken[index] = 1;
    }
    __syncthreads();
  }
}

// One block per row: the maximum, the sum of exp(x - max), then the quotients.
__global__ void softmax_rows_kernel(float* values, std::size_t columns) {
  __shared__ float partial[threads_per_block];
  float* row = values + static_cast<std::size_t>(blockIdx.x) * columns;
  float top = -FLT_MAX;
  for (std::size_t c = threadIdx.x; c < columns; c += blockDim.x) top = fmaxf(top, row[c]);
  partial[threadIdx.x] = top;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      partial[threadIdx.x] = fmaxf(partial[threadIdx.x], partial[threadIdx.x + half]);
    }
    __syncthreads();
  }
  top = partial[0];
  __syncthreads();
  float sum = 0.0F;
  for (std::size_t c = threadIdx.x; c < columns; c += blockDim.x) {
    row[c] = expf(row[c] - top);
    sum += row[c];
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  const float total = partial[0];
  for (std::size_t c = threadIdx.x; c < columns; c += blockDim.x) row[c] /= total;
}

template <class T>
cudaError_t add_sub_typed(const void* a, const void* b, void* sum, void* difference,
                          std::size_t count, cudaStream_t stream) {
  add_sub_kernel<T><<<blocks_for(count), threads_per_block, 0, stream>>>(
      static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(sum),
      static_cast<T*>(difference), count);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_add_sub(datatype type, const void* a, const void* b, void* sum, void* difference,
                           std::size_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  switch (type) {
    case datatype::uint8: return add_sub_typed<std::uint8_t>(a, b, sum, difference, count, stream);
    case datatype::uint16:
      return add_sub_typed<std::uint16_t>(a, b, sum, difference, count, stream);
    case datatype::uint32:
      return add_sub_typed<std::uint32_t>(a, b, sum, difference, count, stream);
    case datatype::uint64:
      return add_sub_typed<std::uint64_t>(a, b, sum, difference, count, stream);
    case datatype::int8: return add_sub_typed<std::int8_t>(a, b, sum, difference, count, stream);
    case datatype::int16: return add_sub_typed<std::int16_t>(a, b, sum, difference, count, stream);
    case datatype::int32: return add_sub_typed<std::int32_t>(a, b, sum, difference, count, stream);
    case datatype::int64: return add_sub_typed<std::int64_t>(a, b, sum, difference, count, stream);
    case datatype::fp16: return add_sub_typed<oip::half>(a, b, sum, difference, count, stream);
    case datatype::bf16: return add_sub_typed<oip::bfloat16>(a, b, sum, difference, count, stream);
    case datatype::fp32: return add_sub_typed<float>(a, b, sum, difference, count, stream);
    case datatype::fp64: return add_sub_typed<double>(a, b, sum, difference, count, stream);
    case datatype::boolean:
    case datatype::bytes: break;
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_add_scalar(const std::int32_t* in, std::int32_t addend, std::int32_t* out,
                              std::size_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  add_scalar_kernel<<<blocks_for(count), threads_per_block, 0, stream>>>(in, addend, out, count);
  return cudaGetLastError();
}

cudaError_t launch_softmax_rows(float* values, std::size_t rows, std::size_t columns,
                                cudaStream_t stream) {
  if (rows == 0 || columns == 0) return cudaSuccess;
  if (rows > 2147483647U) return cudaErrorInvalidValue;
  softmax_rows_kernel<<<static_cast<unsigned>(rows), threads_per_block, 0, stream>>>(values,
                                                                                     columns);
  return cudaGetLastError();
}

cudaError_t launch_top_k_rows(const float* values, std::size_t rows, std::size_t columns,
                              std::size_t k, float* best, std::uint32_t* indices,
                              cudaStream_t stream) {
  if (rows == 0 || k == 0) return cudaSuccess;
  if (rows > 2147483647U || columns > max_ranked_columns || k > columns || k > max_ranked_classes) {
    return cudaErrorInvalidValue;
  }
  const std::size_t shared = columns * (sizeof(float) + 1);
  top_k_rows_kernel<<<static_cast<unsigned>(rows), threads_per_block, shared, stream>>>(
      values, static_cast<unsigned>(columns), static_cast<unsigned>(k), best, indices);
  return cudaGetLastError();
}

}  // namespace oip::cuda::detail
