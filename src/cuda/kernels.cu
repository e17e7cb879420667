#include "cuda/kernels.hpp"

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

}  // namespace oip::cuda::detail
