#pragma once
// Internal: the repository extension's loads and unloads, for `inference_service`. They build and
// tear down models (milliseconds to seconds), so they run on a thread of their own, one at a
// time, never on a transport's thread.

#include "serving/detail/serial_worker.hpp"

#include <oip/inference_service.hpp>
#include <oip/metadata.hpp>
#include <oip/parameters.hpp>
#include <oip/repository.hpp>
#include <oip/status.hpp>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace oip::detail {

class model_control {
 public:
  using completion = std::function<void(status)>;
  /// Told, on the control thread, of the model instances that a load replaced or an unload
  /// removed, while they are still alive (requests in flight may still hold them).
  using retired_callback = std::function<void(const std::vector<std::shared_ptr<model>>&)>;

  model_control(model_repository& repository, model_control_mode mode, retired_callback retired)
      : repository_{repository}, mode_{mode}, retired_{std::move(retired)} {}

  /// `model_control_refused` unless clients may load and unload.
  [[nodiscard]] status allowed() const;
  /// As `inference_service::load` and `unload`.
  void load(std::string model, parameters request, completion done);
  void unload(std::string model, completion done);
  /// The same, waiting for the outcome; a 500 on the control thread, which would wait for itself.
  [[nodiscard]] status load_and_wait(std::string model, parameters request);
  [[nodiscard]] status unload_and_wait(std::string model);
  /// The registered models, then those the loader lists and nobody registered.
  [[nodiscard]] std::vector<model_index_entry> index() const;
  /// Waits for the loads and unloads posted; later ones are refused.
  void close();

 private:
  // Runs `work` on the control thread and hands its outcome to `done` there; once closed, `done`
  // gets a refusal at once.
  void post(std::function<status()> work, completion done);
  [[nodiscard]] bool on_control_thread();
  // A load's checks and work, on the control thread.
  [[nodiscard]] status load_in_turn(const std::string& model, const parameters& request);
  // Runs `change` (a replace or a remove of `model`), then tells `retired_` of the instances
  // that served before it, if it succeeded.
  [[nodiscard]] status retiring(const std::string& model, const std::function<status()>& change);

  model_repository& repository_;
  const model_control_mode mode_;
  const retired_callback retired_;
  std::mutex mutex_;
  std::unique_ptr<serial_worker> worker_;  // made with the first load or unload
  bool closed_ = false;
};

}  // namespace oip::detail
