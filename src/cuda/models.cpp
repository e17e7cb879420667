#include "cuda/kernels.hpp"

#include <oip/classification.hpp>
#include <oip/cuda/device.hpp>
#include <oip/cuda/models.hpp>
#include <oip/cuda/top_classes.hpp>

#include <algorithm>
#include <any>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace oip::cuda {

namespace {

status device_failure(std::string_view what, cudaError_t error) {
  cudaGetLastError();  // a non-sticky error must not fail the next request
  return status{errc::internal, fmt::format("{} failed on the CUDA device: {} (error {})", what,
                                            cudaGetErrorString(error), static_cast<int>(error))};
}

status blas_failure(std::string_view what, cublasStatus_t error) {
  return status{errc::internal, fmt::format("{} failed on the CUDA device: cuBLAS status {}", what,
                                            static_cast<int>(error))};
}

// One stream (and cuBLAS handle, for models that use it): one request at a time on it.
struct instance {
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
};

// A model's instances. A request waits on an executor thread for a free one, and gives it back
// once its stream has finished.
class instance_pool {
 public:
  static result<std::shared_ptr<instance_pool>> create(int device, std::size_t count,
                                                       bool with_blas) {
    auto pool = std::make_shared<instance_pool>();
    pool->device_ = device;
    if (const cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
      return device_failure("cudaSetDevice", e);
    }
    for (std::size_t i = 0; i < std::max<std::size_t>(count, 1); ++i) {
      auto made = std::make_unique<instance>();
      if (const cudaError_t e = cudaStreamCreateWithFlags(&made->stream, cudaStreamNonBlocking);
          e != cudaSuccess) {
        return device_failure("cudaStreamCreate", e);
      }
      pool->all_.push_back(std::move(made));
      instance& added = *pool->all_.back();
      if (with_blas) {
        if (const cublasStatus_t s = cublasCreate(&added.blas); s != CUBLAS_STATUS_SUCCESS) {
          added.blas = nullptr;
          return blas_failure("cublasCreate", s);
        }
        if (const cublasStatus_t s = cublasSetStream(added.blas, added.stream);
            s != CUBLAS_STATUS_SUCCESS) {
          return blas_failure("cublasSetStream", s);
        }
      }
      pool->free_.push_back(&added);
    }
    return pool;
  }

  instance_pool() = default;
  instance_pool(const instance_pool&) = delete;
  instance_pool& operator=(const instance_pool&) = delete;
  ~instance_pool() {
    cudaSetDevice(device_);
    for (const auto& each : all_) {
      if (each->stream != nullptr) cudaStreamSynchronize(each->stream);
      if (each->blas != nullptr) cublasDestroy(each->blas);
      if (each->stream != nullptr) cudaStreamDestroy(each->stream);
    }
  }

  instance* acquire() {
    std::unique_lock lock{mutex_};
    freed_.wait(lock, [this] { return !free_.empty(); });
    instance* taken = free_.back();
    free_.pop_back();
    return taken;
  }

  void release(instance* done) {
    {
      const std::lock_guard lock{mutex_};
      free_.push_back(done);
    }
    freed_.notify_one();
  }

 private:
  int device_ = 0;
  std::vector<std::unique_ptr<instance>> all_;
  std::mutex mutex_;
  std::condition_variable freed_;
  std::vector<instance*> free_;
};

// What a request holds while its work is on the device: the call (whose request body the input
// copies may still read), its instance, the device blocks and the pinned blocks.
struct job {
  struct output {
    std::string name;
    datatype type;
    shape_type shape;
    std::shared_ptr<void> host;  // pinned; becomes the tensor's bytes
    std::size_t bytes;
  };
  // An output ranked on the device: the values and indices of its rows' top k, in pinned memory.
  struct ranked {
    std::string name;
    std::size_t rows;
    std::size_t k;
    std::shared_ptr<void> classes;  // float[rows * k], then std::uint32_t[rows * k]
  };

  inference_call& call;
  instance* on;
  std::vector<std::shared_ptr<void>> device_blocks;
  std::vector<std::shared_ptr<void>> staging;
  std::vector<output> outputs;
  std::vector<ranked> ranked_outputs;
};

// The number of classes that the request asks of output `name` (its `classification`), or 0.
std::size_t classes_asked(const inference_request& request, std::string_view name) {
  for (const requested_output& output : request.outputs) {
    if (output.name == name) return output.classes_asked();
  }
  return 0;
}

// The shared machinery: an instance per request, inputs up, kernels, outputs down, then the
// executor thread waits for the stream and answers. Subclasses say what runs in between (`enqueue`)
// and may look at the outputs before the request completes (`completed`).
class device_model : public model {
 public:
  device_model(std::shared_ptr<device> on, model_config config,
               std::shared_ptr<instance_pool> instances)
      : device_{std::move(on)}, config_{std::move(config)}, instances_{std::move(instances)} {}

  [[nodiscard]] const model_config& config() const noexcept override { return config_; }

  // Whatever happens, the instance goes back: a lost one would stall the model's requests.
  void execute(inference_call call) override {
    instance* on = instances_->acquire();
    result<model_output> outcome = [&]() -> result<model_output> {
      try {
        return run(call, *on);
      } catch (const std::exception& e) {
        return thrown(e.what());
      } catch (...) {
        return thrown("it threw an exception");
      }
    }();
    instances_->release(on);
    call.finish(std::move(outcome));
  }

 protected:
  virtual status enqueue(job& running) const = 0;
  virtual status completed(job& running) const {
    static_cast<void>(running);
    return {};
  }

  // Kernels and cuBLAS read whole elements, some several at once: an input read in place starts
  // where a pool block could (a client's offset in its region need not).
  static constexpr std::size_t in_place_alignment = 16;

  // The tensor's bytes in device memory: where they are when they are on this device already (an
  // input in a client's CUDA region, which the request keeps open) and aligned, copied from
  // another device or a misaligned place, or copied from the host, through pinned staging (an
  // asynchronous copy) when small, else straight from the request body. Kernels only read inputs,
  // so the client's memory is not written.
  result<const void*> upload(job& running, const tensor& t) const {
    const std::size_t bytes = t.data().size();
    if (t.device() == device_->index() && t.data().is_aligned(in_place_alignment)) {
      return static_cast<const void*>(t.data().data());
    }
    result<std::shared_ptr<void>> block = device_->device_memory().acquire(bytes);
    if (!block) return std::move(block).error();
    void* target = block->get();
    running.device_blocks.push_back(std::move(*block));
    const void* source = t.data().data();
    if (!t.in_host_memory()) {
      if (bytes != 0) {
        if (const cudaError_t e = cudaMemcpyPeerAsync(target, device_->index(), source, t.device(),
                                                      bytes, running.on->stream);
            e != cudaSuccess) {
          return device_failure(
              fmt::format("copying input '{}' from device {}", t.name(), t.device()), e);
        }
      }
      return static_cast<const void*>(target);
    }
    if (bytes <= device::pinned_staging_limit) {
      result<std::shared_ptr<void>> staged = device_->pinned_memory().acquire(bytes);
      if (!staged) return std::move(staged).error();
      if (bytes != 0) std::memcpy(staged->get(), source, bytes);
      source = staged->get();
      running.staging.push_back(std::move(*staged));
    }
    if (bytes != 0) {
      if (const cudaError_t e =
              cudaMemcpyAsync(target, source, bytes, cudaMemcpyHostToDevice, running.on->stream);
          e != cudaSuccess) {
        return device_failure(fmt::format("copying input '{}' to the device", t.name()), e);
      }
    }
    return static_cast<const void*>(target);
  }

  // Device memory for an intermediate or output, freed with the request.
  result<void*> scratch(job& running, std::size_t bytes) const {
    result<std::shared_ptr<void>> block = device_->device_memory().acquire(bytes);
    if (!block) return std::move(block).error();
    void* at = block->get();
    running.device_blocks.push_back(std::move(*block));
    return at;
  }

  // Queues the copy of `bytes` at `from` into pinned memory that becomes output `name`.
  status download(job& running, const void* from, std::size_t bytes, std::string name,
                  datatype type, shape_type shape) const {
    result<std::shared_ptr<void>> host = device_->pinned_memory().acquire(bytes);
    if (!host) return std::move(host).error();
    if (bytes != 0) {
      if (const cudaError_t e =
              cudaMemcpyAsync(host->get(), from, bytes, cudaMemcpyDeviceToHost, running.on->stream);
          e != cudaSuccess) {
        return device_failure(fmt::format("copying output '{}' from the device", name), e);
      }
    }
    running.outputs.push_back({std::move(name), type, std::move(shape), std::move(*host), bytes});
    return {};
  }

  // The smallest output whose classes are ranked on the device: below it, copying the output back
  // whole and ranking on the host answers sooner; from it, ranking on the device takes a fraction
  // of the host's CPU time (docs/performance.md, "Classification on the device").
  static constexpr std::size_t rank_on_device_from = std::size_t{16} << 10U;

  // Queues the copy of FP32 output `name`, [rows, columns] at `from`, as the request asks for it:
  // when it asks for the output's classification (of few enough classes, in short enough rows:
  // rank_top_classes' bounds, and an output of at least rank_on_device_from bytes), its classes
  // are ranked on the device and only each row's best come back (a batching model's rows are the
  // batch's, any other model's output is one row, as the classification extension reads them);
  // otherwise the whole output.
  status download_fp32(job& running, const float* from, std::size_t rows, std::size_t columns,
                       std::string name) const {
    const std::size_t asked = classes_asked(running.call.request(), name);
    const bool batch_rows = config_.max_batch_size > 0;
    const std::size_t row_count = batch_rows ? rows : 1;
    const std::size_t row_size = batch_rows ? columns : rows * columns;
    const std::size_t k = std::min(asked, row_size);
    if (k == 0 || k > max_ranked_classes || row_size > max_ranked_columns ||
        rows * columns * sizeof(float) < rank_on_device_from) {
      return download(running, from, rows * columns * sizeof(float), std::move(name),
                      datatype::fp32,
                      {static_cast<std::int64_t>(rows), static_cast<std::int64_t>(columns)});
    }
    const std::size_t count = row_count * k;
    // The values, then the indices, in one block each way: one copy back.
    const std::size_t bytes = count * (sizeof(float) + sizeof(std::uint32_t));
    result<void*> ranked = scratch(running, bytes);
    if (!ranked) return ranked.error();
    auto* best = static_cast<float*>(*ranked);
    if (status s =
            rank_top_classes(from, row_count, row_size, k, best,
                             reinterpret_cast<std::uint32_t*>(best + count), running.on->stream);
        !s.ok()) {
      return s;
    }
    result<std::shared_ptr<void>> host = device_->pinned_memory().acquire(bytes);
    if (!host) return std::move(host).error();
    if (const cudaError_t e =
            cudaMemcpyAsync(host->get(), best, bytes, cudaMemcpyDeviceToHost, running.on->stream);
        e != cudaSuccess) {
      return device_failure(fmt::format("copying the classes of output '{}' from the device", name),
                            e);
    }
    running.ranked_outputs.push_back({std::move(name), row_count, k, std::move(*host)});
    return {};
  }

  // The classification tensor of an output ranked on the device.
  [[nodiscard]] result<tensor> classification_of(const job::ranked& ranked) const {
    const std::size_t count = ranked.rows * ranked.k;
    const auto* best = static_cast<const std::byte*>(ranked.classes.get());
    const bool batch_rows = config_.max_batch_size > 0;
    shape_type shape{static_cast<std::int64_t>(ranked.k)};
    if (batch_rows) shape.insert(shape.begin(), static_cast<std::int64_t>(ranked.rows));
    result<tensor> values =
        tensor::make(ranked.name, datatype::fp32, std::move(shape),
                     buffer::view({best, count * sizeof(float)}, ranked.classes));
    if (!values) return std::move(values).error();
    std::vector<std::uint64_t> indices(count);
    const std::byte* at = best + count * sizeof(float);
    for (std::size_t i = 0; i < count; ++i) {
      std::uint32_t index = 0;
      std::memcpy(&index, at + i * sizeof index, sizeof index);
      indices[i] = index;
    }
    return classification_of_ranked(
        *values, indices,
        batch_rows ? classification_rows::batch_rows : classification_rows::whole_tensor,
        config_.labels_of(ranked.name));
  }

  // Queues the call's work on the instance's stream, waits for it, and makes the outputs the
  // response's tensors (the pinned blocks are their bytes). The device and staging blocks go back
  // to their pools on return, once the stream no longer uses them.
  result<model_output> run(inference_call& call, instance& on) const {
    job running{call, &on, {}, {}, {}, {}};
    status queued = [&] {
      if (const cudaError_t e = cudaSetDevice(device_->index()); e != cudaSuccess) {
        return device_failure("cudaSetDevice", e);
      }
      try {
        return enqueue(running);
      } catch (const std::exception& e) {
        return thrown(e.what());
      } catch (...) {
        return thrown("it threw an exception");
      }
    }();
    // The executor thread waits for the stream (the runtime spins while there are cores to spare):
    // a small round trip takes about 20 µs on an H100 this way against 51 µs with a stream callback
    // waking another thread (benchmarks/cuda_wait_bench.cu). A device fault comes back as the
    // wait's error.
    const cudaError_t waited = cudaStreamSynchronize(on.stream);
    if (!queued.ok()) {
      cudaGetLastError();
      return queued;
    }
    if (waited != cudaSuccess)
      return device_failure(fmt::format("model '{}'", config_.name), waited);
    if (status s = completed(running); !s.ok()) return s;
    model_output out;
    for (job::output& o : running.outputs) {
      const auto* bytes = static_cast<const std::byte*>(o.host.get());
      result<tensor> t = tensor::make(std::move(o.name), o.type, std::move(o.shape),
                                      buffer::view({bytes, o.bytes}, std::move(o.host)));
      if (!t) return std::move(t).error();
      out.outputs.push_back(std::move(*t));
    }
    for (const job::ranked& ranked : running.ranked_outputs) {
      result<tensor> classes = classification_of(ranked);
      if (!classes) return std::move(classes).error();
      out.classified.push_back(std::move(*classes));
    }
    return out;
  }

 private:
  [[nodiscard]] status thrown(std::string_view what) const {
    return status{errc::internal,
                  fmt::format("model '{}' failed on the CUDA device: {}", config_.name, what)};
  }

  std::shared_ptr<device> device_;
  model_config config_;
  std::shared_ptr<instance_pool> instances_;
};

const tensor* input_named(const inference_request& request, std::string_view name) {
  for (const tensor& t : request.inputs) {
    if (t.name() == name) return &t;
  }
  return nullptr;
}

status missing_input(std::string_view model, std::string_view name) {
  return status{errc::invalid_argument,
                fmt::format("expected input '{}' for model '{}'", name, model)};
}

class add_sub : public device_model {
 public:
  using device_model::device_model;

 protected:
  status enqueue(job& running) const override {
    const inference_request& request = running.call.request();
    const tensor* a = input_named(request, "INPUT0");
    const tensor* b = input_named(request, "INPUT1");
    if (a == nullptr) return missing_input(config().name, "INPUT0");
    if (b == nullptr) return missing_input(config().name, "INPUT1");
    if (a->shape() != b->shape()) {
      return status{
          errc::invalid_argument,
          fmt::format("inputs 'INPUT0' and 'INPUT1' of model '{}' differ in shape", config().name)};
    }
    const std::size_t bytes = a->data().size();
    result<const void*> x = upload(running, *a);
    if (!x) return x.error();
    result<const void*> y = upload(running, *b);
    if (!y) return y.error();
    result<void*> sum = scratch(running, bytes);
    if (!sum) return sum.error();
    result<void*> difference = scratch(running, bytes);
    if (!difference) return difference.error();
    if (const cudaError_t e = detail::launch_add_sub(a->type(), *x, *y, *sum, *difference,
                                                     static_cast<std::size_t>(a->element_count()),
                                                     running.on->stream);
        e != cudaSuccess) {
      return device_failure("the add_sub kernel", e);
    }
    if (status s = download(running, *sum, bytes, "OUTPUT0", a->type(), a->shape()); !s.ok()) {
      return s;
    }
    return download(running, *difference, bytes, "OUTPUT1", a->type(), a->shape());
  }
};

class identity : public device_model {
 public:
  using device_model::device_model;

 protected:
  status enqueue(job& running) const override {
    const tensor& in = running.call.request().inputs.at(0);
    result<const void*> on = upload(running, in);
    if (!on) return on.error();
    return download(running, *on, in.data().size(), config().outputs.at(0).name, in.type(),
                    in.shape());
  }
};

class accumulator : public device_model {
 public:
  using device_model::device_model;

 protected:
  status enqueue(job& running) const override {
    sequence_step* step = running.call.sequence();
    if (step == nullptr || step->state == nullptr) {
      return status{errc::invalid_argument,
                    fmt::format("model '{}' needs a sequence_id", config().name)};
    }
    const tensor& in = running.call.request().inputs.at(0);
    std::any& state = *step->state;
    const std::int32_t sum =
        step->start || !state.has_value() ? 0 : std::any_cast<std::int32_t>(state);
    result<const void*> x = upload(running, in);
    if (!x) return x.error();
    result<void*> out = scratch(running, in.data().size());
    if (!out) return out.error();
    if (const cudaError_t e = detail::launch_add_scalar(
            static_cast<const std::int32_t*>(*x), sum, static_cast<std::int32_t*>(*out),
            static_cast<std::size_t>(in.element_count()), running.on->stream);
        e != cudaSuccess) {
      return device_failure("the accumulator kernel", e);
    }
    return download(running, *out, in.data().size(), config().outputs.at(0).name, in.type(),
                    in.shape());
  }

  // The sequence keeps the sum that the device computed.
  status completed(job& running) const override {
    const job::output& out = running.outputs.at(0);
    std::int32_t sum = 0;
    if (out.bytes >= sizeof sum) std::memcpy(&sum, out.host.get(), sizeof sum);
    *running.call.sequence()->state = sum;
    return {};
  }
};

class dense_softmax : public device_model {
 public:
  dense_softmax(std::shared_ptr<device> on, model_config config,
                std::shared_ptr<instance_pool> instances, std::shared_ptr<void> weights,
                std::size_t features, std::size_t classes)
      : device_model{std::move(on), std::move(config), std::move(instances)},
        weights_{std::move(weights)},
        features_{features},
        classes_{classes} {}

 protected:
  status enqueue(job& running) const override {
    const tensor& x = running.call.request().inputs.at(0);
    const auto rows = static_cast<std::size_t>(x.shape().at(0));
    result<const void*> in = upload(running, x);
    if (!in) return in.error();
    const std::size_t out_bytes = rows * classes_ * sizeof(float);
    result<void*> out = scratch(running, out_bytes);
    if (!out) return out.error();
    // Row-major out[rows, classes] = x[rows, features] · W[features, classes] is, read as
    // column-major, outᵀ = Wᵀ · xᵀ: one sgemm with the operands as they lie.
    const float one = 1.0F;
    const float zero = 0.0F;
    if (const cublasStatus_t s =
            cublasSgemm(running.on->blas, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(classes_),
                        static_cast<int>(rows), static_cast<int>(features_), &one,
                        static_cast<const float*>(weights_.get()), static_cast<int>(classes_),
                        static_cast<const float*>(*in), static_cast<int>(features_), &zero,
                        static_cast<float*>(*out), static_cast<int>(classes_));
        s != CUBLAS_STATUS_SUCCESS) {
      return blas_failure("cublasSgemm", s);
    }
    if (const cudaError_t e = detail::launch_softmax_rows(static_cast<float*>(*out), rows, classes_,
                                                          running.on->stream);
        e != cudaSuccess) {
      return device_failure("the softmax kernel", e);
    }
    return download_fp32(running, static_cast<const float*>(*out), rows, classes_,
                         config().outputs.at(0).name);
  }

 private:
  std::shared_ptr<void> weights_;
  std::size_t features_;
  std::size_t classes_;
};

status bad_config(const model_config& config, std::string_view why) {
  return status{errc::invalid_argument,
                fmt::format("model '{}' cannot run on the CUDA device: {}", config.name, why)};
}

template <class Model, class... Extra>
result<std::shared_ptr<model>> make(std::shared_ptr<device> on, model_config config,
                                    std::size_t instances, bool with_blas, Extra&&... extra) {
  if (!on) return status{errc::invalid_argument, "no CUDA device given"};
  result<std::shared_ptr<instance_pool>> pool =
      instance_pool::create(on->index(), instances, with_blas);
  if (!pool) return std::move(pool).error();
  config.gpus = {on->index()};
  config.device_inputs = true;  // upload() takes inputs in this device's memory where they are
  // As many batches at once as the model has instances (Triton's instance_group count).
  config.batching.instances = std::max<std::size_t>(instances, 1);
  return std::shared_ptr<model>{std::make_shared<Model>(
      std::move(on), std::move(config), std::move(*pool), std::forward<Extra>(extra)...)};
}

}  // namespace

result<std::shared_ptr<device>> device::open(int index) {
  const probe_result found = probe();
  if (!found.usable()) {
    return status{errc::unavailable,
                  fmt::format("CUDA device {} cannot be used: {}", index, found.message)};
  }
  if (index < 0 || index >= found.device_count) {
    return status{errc::unavailable, fmt::format("CUDA device {} does not exist ({} found)", index,
                                                 found.device_count)};
  }
  if (const cudaError_t e = cudaSetDevice(index); e != cudaSuccess) {
    return device_failure("cudaSetDevice", e);
  }
  return std::shared_ptr<device>{
      new device{index, memory_pool::device(index), memory_pool::pinned()}};
}

result<std::shared_ptr<model>> add_sub_model(std::shared_ptr<device> on, model_config config,
                                             std::size_t instances) {
  if (config.inputs.size() != 2 || config.outputs.size() != 2 ||
      !is_numeric(config.inputs[0].type) || config.inputs[1].type != config.inputs[0].type ||
      config.outputs[0].type != config.inputs[0].type ||
      config.outputs[1].type != config.inputs[0].type) {
    return bad_config(config, "add_sub needs INPUT0, INPUT1, OUTPUT0, OUTPUT1 of one numeric type");
  }
  return make<add_sub>(std::move(on), std::move(config), instances, false);
}

result<std::shared_ptr<model>> identity_model(std::shared_ptr<device> on, model_config config,
                                              std::size_t instances) {
  if (config.inputs.size() != 1 || config.outputs.size() != 1 ||
      config.inputs[0].type == datatype::bytes || config.outputs[0].type != config.inputs[0].type) {
    return bad_config(config, "identity needs one input and one output of one fixed-size type");
  }
  return make<identity>(std::move(on), std::move(config), instances, false);
}

result<std::shared_ptr<model>> accumulator_model(std::shared_ptr<device> on, model_config config,
                                                 std::size_t instances) {
  if (!config.sequence_batching || config.inputs.size() != 1 || config.outputs.size() != 1 ||
      config.inputs[0].type != datatype::int32 || config.outputs[0].type != datatype::int32) {
    return bad_config(config,
                      "the accumulator is a sequence model with one INT32 input and output");
  }
  return make<accumulator>(std::move(on), std::move(config), instances, false);
}

result<std::shared_ptr<model>> dense_softmax_model(std::shared_ptr<device> on, model_config config,
                                                   std::span<const float> weights,
                                                   std::size_t instances) {
  if (config.max_batch_size <= 0 || config.inputs.size() != 1 || config.outputs.size() != 1 ||
      config.inputs[0].type != datatype::fp32 || config.outputs[0].type != datatype::fp32 ||
      config.inputs[0].shape.size() != 1 || config.outputs[0].shape.size() != 1 ||
      config.inputs[0].shape[0] <= 0 || config.outputs[0].shape[0] <= 0) {
    return bad_config(config,
                      "dense_softmax needs a batching model with FP32 [features] → FP32 [classes]");
  }
  const auto features = static_cast<std::size_t>(config.inputs[0].shape[0]);
  const auto classes = static_cast<std::size_t>(config.outputs[0].shape[0]);
  if (weights.size() != features * classes) {
    return bad_config(
        config, fmt::format("expected {} x {} weights, got {}", features, classes, weights.size()));
  }
  if (!on) return status{errc::invalid_argument, "no CUDA device given"};
  if (const cudaError_t e = cudaSetDevice(on->index()); e != cudaSuccess) {
    return device_failure("cudaSetDevice", e);
  }
  result<std::shared_ptr<void>> on_device = on->device_memory().acquire(weights.size_bytes());
  if (!on_device) return std::move(on_device).error();
  // A copy from pageable memory may return before its DMA is done, and the instances' streams do
  // not wait for the legacy stream: synchronise before any request can read the weights.
  if (const cudaError_t e = cudaMemcpy(on_device->get(), weights.data(), weights.size_bytes(),
                                       cudaMemcpyHostToDevice);
      e != cudaSuccess) {
    return device_failure("copying the weights to the device", e);
  }
  if (const cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) {
    return device_failure("copying the weights to the device", e);
  }
  return make<dense_softmax>(std::move(on), std::move(config), instances, true,
                             std::move(*on_device), features, classes);
}

}  // namespace oip::cuda
