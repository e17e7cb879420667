#pragma once
/// \file
/// Models that run on a CUDA device: the reference models of oip-serve (`simple` and its typed
/// variants, identity, the sequence accumulator, the classifier) and the machinery they share,
/// which a host's own device models can follow. Each model has a number of instances, each with
/// its own CUDA stream; a request's inputs go to device memory from the pool, its kernels and
/// copies are issued asynchronously on its instance's stream, its outputs come back into pinned
/// host memory from the pool and become the response's tensor bytes without another copy, and the
/// executor thread that queued the work waits for the stream and answers (no transport thread
/// waits on the device).

#include <oip/cuda/memory_pool.hpp>
#include <oip/export.hpp>
#include <oip/model.hpp>
#include <oip/status.hpp>

#include <cstddef>
#include <memory>
#include <span>

namespace oip::cuda {

/// A CUDA device opened for models, with the memory pools that the models on it share.
class OIP_EXPORT device {
 public:
  /// Inputs up to this size are staged through pinned memory (an asynchronous copy); larger ones
  /// are copied from the request body straight to the device (the driver stages pageable memory).
  static constexpr std::size_t pinned_staging_limit = std::size_t{1} << 20U;

  /// Opens CUDA device `index`: `errc::unavailable` with the runtime's reason when it cannot be
  /// used.
  [[nodiscard]] static result<std::shared_ptr<device>> open(int index);

  [[nodiscard]] int index() const noexcept { return index_; }
  [[nodiscard]] memory_pool& device_memory() noexcept { return device_memory_; }
  [[nodiscard]] memory_pool& pinned_memory() noexcept { return pinned_memory_; }

 private:
  device(int index, memory_pool device_memory, memory_pool pinned_memory)
      : index_{index},
        device_memory_{std::move(device_memory)},
        pinned_memory_{std::move(pinned_memory)} {}
  int index_;
  memory_pool device_memory_;
  memory_pool pinned_memory_;
};

/// OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 = INPUT0 - INPUT1 element by element, with the
/// `oip::elementwise` functors, for `config` (two inputs and two outputs of one numeric datatype,
/// named as Triton's `simple`). `errc::invalid_argument` for any other configuration.
[[nodiscard]] OIP_EXPORT result<std::shared_ptr<model>> add_sub_model(std::shared_ptr<device> on,
                                                                      model_config config,
                                                                      std::size_t instances = 2);

/// OUTPUT0 = INPUT0, through the device (copied there and back), for one fixed-size datatype.
[[nodiscard]] OIP_EXPORT result<std::shared_ptr<model>> identity_model(std::shared_ptr<device> on,
                                                                       model_config config,
                                                                       std::size_t instances = 2);

/// A sequence model whose INT32 OUTPUT is the running sum of its INT32 INPUT (0 at START): the
/// sum is added on the device.
[[nodiscard]] OIP_EXPORT result<std::shared_ptr<model>> accumulator_model(
    std::shared_ptr<device> on, model_config config, std::size_t instances = 2);

/// softmax(x · W) per row: FP32 INPUT0 [batch, features] → FP32 OUTPUT0 [batch, classes], with
/// `weights` row-major [features, classes] kept on the device; cuBLAS for the product, a kernel for
/// the softmax.
[[nodiscard]] OIP_EXPORT result<std::shared_ptr<model>> dense_softmax_model(
    std::shared_ptr<device> on, model_config config, std::span<const float> weights,
    std::size_t instances = 2);

}  // namespace oip::cuda
