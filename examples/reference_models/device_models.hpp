#pragma once
// Where oip-serve's models run (--device): the reference models that oip::cuda provides move to
// the chosen CUDA device; the others, and all of them on the CPU path, stay as they are.

#include <oip/metrics.hpp>
#include <oip/model.hpp>

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
};

/// `choice` is auto, cpu, cuda or cuda:N. An error (bad choice, or a CUDA device that cannot be
/// used when one was asked for) leaves `models` empty and says why in `where`.
placement place_models(std::vector<std::shared_ptr<oip::model>> cpu_models, std::string_view choice,
                       bool& failed);

}  // namespace oip_serve
