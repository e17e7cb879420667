#include "device_models.hpp"

#include "reference_models.hpp"

#include <oip/datatype.hpp>

#include <utility>

#if OIP_SERVE_WITH_CUDA
#include <oip/cuda/device.hpp>
#include <oip/cuda/ipc_memory.hpp>
#include <oip/cuda/models.hpp>
#endif

namespace oip_serve {

namespace {

#if OIP_SERVE_WITH_CUDA
bool is_add_sub(const oip::model_config& c) {
  return !c.sequence_batching && c.inputs.size() == 2 && c.outputs.size() == 2 &&
         c.inputs[0].name == "INPUT0" && oip::is_numeric(c.inputs[0].type) &&
         (c.name == "simple" || c.name.starts_with("simple_"));
}

// The device version of `cpu` (same configuration), or null when oip::cuda has none.
oip::result<std::shared_ptr<oip::model>> on_device(const std::shared_ptr<oip::cuda::device>& device,
                                                   const oip::model& cpu) {
  const oip::model_config& c = cpu.config();
  if (is_add_sub(c)) return oip::cuda::add_sub_model(device, c);
  if (c.name.starts_with("identity_") && c.inputs.at(0).type != oip::datatype::bytes) {
    return oip::cuda::identity_model(device, c);
  }
  if (c.name == "sequence_accumulator") return oip::cuda::accumulator_model(device, c);
  if (c.name == "classifier") {
    const std::vector<float> weights = classifier_weights();
    return oip::cuda::dense_softmax_model(device, c, weights);
  }
  return std::shared_ptr<oip::model>{};
}
#endif

}  // namespace

placement place_models(std::vector<std::shared_ptr<oip::model>> cpu_models, std::string_view choice,
                       bool& failed) {
  failed = false;
#if OIP_SERVE_WITH_CUDA
  oip::result<oip::cuda::device_selection> selected = oip::cuda::select_device(choice);
  if (!selected) {
    failed = true;
    return {{}, selected.error().message()};
  }
  if (selected->kind == oip::cuda::backend::cpu) return {std::move(cpu_models), selected->reason};
  oip::result<std::shared_ptr<oip::cuda::device>> device = oip::cuda::device::open(selected->index);
  if (!device) {
    failed = true;
    return {{}, device.error().message()};
  }
  for (std::shared_ptr<oip::model>& m : cpu_models) {
    oip::result<std::shared_ptr<oip::model>> moved = on_device(*device, *m);
    if (!moved) {
      failed = true;
      return {{}, moved.error().message()};
    }
    if (*moved) m = std::move(*moved);
  }
  const std::shared_ptr<oip::cuda::device> on = *device;
  oip::metric_gauge in_use{
      "oip_pool_memory_in_use_bytes",
      "Bytes handed out by oip's memory pools",
      {{R"(pool="cuda_device")",
        [on] { return static_cast<double>(on->device_memory().stats().bytes_in_use); }},
       {R"(pool="cuda_pinned")",
        [on] { return static_cast<double>(on->pinned_memory().stats().bytes_in_use); }}}};
  return {std::move(cpu_models),
          selected->reason + " (simple*, identity_*, sequence_accumulator and classifier on it)",
          {std::move(in_use)},
          oip::cuda::ipc_memory_access()};
#else
  if (choice == "auto" || choice == "cpu") {
    return {std::move(cpu_models), choice == "cpu"
                                       ? "the CPU, as asked (--device cpu)"
                                       : "the CPU: oip was built without the CUDA component"};
  }
  failed = true;
  if (choice == "cuda" || choice.starts_with("cuda:")) {
    return {{}, "oip-serve was built without the CUDA component (no nvcc when it was built)"};
  }
  return {{}, "bad device '" + std::string{choice} + "': expected auto, cpu, cuda or cuda:N"};
#endif
}

oip::result<std::shared_ptr<oip::model>> device_classifier(std::int64_t max_batch_size) {
#if OIP_SERVE_WITH_CUDA
  oip::result<std::shared_ptr<oip::cuda::device>> device = oip::cuda::device::open(0);
  if (!device) return std::move(device).error();
  oip::model_config c = reference_model("classifier", false)->config();
  c.max_batch_size = max_batch_size;
  return oip::cuda::dense_softmax_model(*device, std::move(c), classifier_weights());
#else
  static_cast<void>(max_batch_size);
  return oip::status{oip::errc::unavailable, "oip was built without the CUDA component"};
#endif
}

}  // namespace oip_serve
