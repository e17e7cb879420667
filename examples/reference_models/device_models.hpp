#pragma once
// Where oip-serve's models run (--device): the reference models that oip::cuda provides move to
// the chosen CUDA device; the others, and all of them on the CPU path, stay as they are.

#include <oip/device_memory.hpp>
#include <oip/metrics.hpp>
#include <oip/model.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace oip_serve {

struct placement {
  std::vector<std::shared_ptr<oip::model>> models;
  /// One line for the start-up log: where the models run, and why.
  std::string where;
  /// Memory in use in the device's pools, for /metrics (empty on the CPU path).
  std::vector<oip::metric_gauge> gauges = {};
  /// The CUDA runtime's IPC, for the CUDA shared-memory extension (null on the CPU path).
  std::shared_ptr<oip::device_memory_access> device_memory = {};
};

/// `choice` is auto, cpu, cuda or cuda:N. An error (bad choice, or a CUDA device that cannot be
/// used when one was asked for) leaves `models` empty and says why in `where`.
placement place_models(std::vector<std::shared_ptr<oip::model>> cpu_models, std::string_view choice,
                       bool& failed);

/// The classifier on CUDA device 0, taking batches of up to `max_batch_size` rows and running each
/// request as it comes (no dynamic batching): for benchmarks at batch sizes past oip-serve's 8.
/// `errc::unavailable` without a usable device or the CUDA component.
oip::result<std::shared_ptr<oip::model>> device_classifier(std::int64_t max_batch_size);

}  // namespace oip_serve
