#pragma once
// What the inference service keeps per model instance, made on the instance's first request that
// needs it: a sequence model's sequence manager, or a batching model's batch queue. Held with the
// instance weakly: an unloaded model is freed, and what it had here goes when the next entry is
// made.

#include "serving/detail/batching.hpp"

#include <oip/repository.hpp>
#include <oip/sequence.hpp>
#include <oip/status.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

namespace oip::detail {

class instance_extras {
 public:
  explicit instance_extras(const model_repository& repository) : repository_{repository} {}
  instance_extras(const instance_extras&) = delete;
  instance_extras& operator=(const instance_extras&) = delete;

  /// The sequence manager of the lease's model, made on its first sequence request. A request
  /// that took its lease before an unload or a reload of its model, and comes here after
  /// `retire_sequences` let go of that instance's sequences, is refused (503): a manager made for
  /// it then would keep sequences whose end the retired model never hears of.
  [[nodiscard]] result<std::shared_ptr<sequence_manager>> sequences_of(const model_lease& lease);

  using make_batcher = std::function<std::shared_ptr<batcher>(const model_config&)>;
  /// The batch queue of the lease's model, made by `make` on its first request; null once
  /// `stop_batching` has run.
  [[nodiscard]] std::shared_ptr<batcher> batches_of(const model_lease& lease,
                                                    const make_batcher& make);

  /// Lets go of the sequence managers of model instances that a load replaced or an unload
  /// removed, while the instances are still alive (the caller holds them): each model hears of
  /// its sequences' end (`shut_down`; a sequence with a request running or waiting, once those
  /// are done) before it is freed, and their states go before it does.
  void retire_sequences(const std::vector<std::shared_ptr<model>>& instances);

  /// Stops every batch queue, and waits for its thread unless a request that is being queued
  /// still holds it (its thread is then joined when that request lets go). No queue is made
  /// after it.
  void stop_batching();

  /// The sequences open on the lease's model, or none when it has no manager.
  [[nodiscard]] std::optional<std::size_t> active_sequences(const model_lease& lease);

 private:
  struct entry {
    std::weak_ptr<model> instance;
    std::shared_ptr<sequence_manager> sequences;
    std::shared_ptr<batcher> batches;
  };

  entry* find(const std::shared_ptr<model>& instance);
  void add(const std::shared_ptr<model>& instance, entry made, std::vector<entry>& pruned);
  [[nodiscard]] status still_serving(const model_lease& lease) const;

  const model_repository& repository_;
  std::mutex mutex_;
  std::map<const model*, entry> entries_;
  std::uint64_t retirements_ = 0;  // calls of `retire_sequences`
  bool batching_stopped_ = false;  // by `stop_batching`: no batch queue is made after it
};

}  // namespace oip::detail
