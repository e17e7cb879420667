#include "cuda/kernels.hpp"

#include <oip/cuda/top_classes.hpp>

#include <fmt/format.h>

#include <cuda_runtime.h>

namespace oip::cuda {

status rank_top_classes(const float* values, std::size_t rows, std::size_t columns, std::size_t k,
                        float* best, std::uint32_t* indices, CUstream_st* stream) {
  if (k == 0 || k > columns || k > max_ranked_classes) {
    return status{errc::invalid_argument,
                  fmt::format("cannot rank the top {} of rows of {} classes on the device (at "
                              "most {})",
                              k, columns, max_ranked_classes)};
  }
  if (columns > max_ranked_columns) {
    return status{errc::invalid_argument,
                  fmt::format("rows of {} classes are too long to rank on the device (at most {})",
                              columns, max_ranked_columns)};
  }
  if (const cudaError_t e =
          detail::launch_top_k_rows(values, rows, columns, k, best, indices, stream);
      e != cudaSuccess) {
    cudaGetLastError();
    return status{errc::internal, fmt::format("ranking the top classes failed on the CUDA device: "
                                              "{} (error {})",
                                              cudaGetErrorString(e), static_cast<int>(e))};
  }
  return {};
}

}  // namespace oip::cuda
