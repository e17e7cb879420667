#include "serving/detail/instance_extras.hpp"

#include <oip/model.hpp>

#include <any>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace oip::detail {

namespace {

std::shared_ptr<sequence_manager> make_sequences(const std::shared_ptr<model>& instance) {
  const model_config& config = instance->config();
  return std::make_shared<sequence_manager>(
      config.name, config.sequence,
      [weak = std::weak_ptr<model>{instance}](const sequence_id& id, std::any& sequence_state,
                                              sequence_release reason) {
        if (const std::shared_ptr<model> held = weak.lock()) {
          held->release_sequence(id, sequence_state, reason);
        }
      });
}

}  // namespace

// The repository is asked outside the lock (a model's `ready` runs there); a retire between the
// question and the manager's making is seen by its count, and the question asked again.
result<std::shared_ptr<sequence_manager>> instance_extras::sequences_of(const model_lease& lease) {
  const std::shared_ptr<model>& instance = lease.shared();
  std::vector<entry> pruned;  // destroyed after the lock
  for (;;) {
    std::uint64_t retirements_seen = 0;
    {
      const std::lock_guard lock{mutex_};
      if (const entry* found = find(instance)) return found->sequences;
      retirements_seen = retirements_;
    }
    if (status s = still_serving(lease); !s.ok()) return s;
    const std::lock_guard lock{mutex_};
    if (retirements_ != retirements_seen) continue;
    if (const entry* found = find(instance)) return found->sequences;
    std::shared_ptr<sequence_manager> made = make_sequences(instance);
    add(instance, entry{instance, made, nullptr}, pruned);
    return made;
  }
}

std::shared_ptr<batcher> instance_extras::batches_of(const model_lease& lease,
                                                     const make_batcher& make) {
  const std::shared_ptr<model>& instance = lease.shared();
  std::vector<entry> pruned;  // destroyed after the lock
  const std::lock_guard lock{mutex_};
  if (batching_stopped_) return nullptr;
  if (const entry* found = find(instance)) return found->batches;
  std::shared_ptr<batcher> made = make(instance->config());
  add(instance, entry{instance, nullptr, made}, pruned);
  return made;
}

void instance_extras::retire_sequences(const std::vector<std::shared_ptr<model>>& instances) {
  std::vector<std::shared_ptr<sequence_manager>> retired;  // destroyed outside the lock
  retired.reserve(instances.size());
  const std::lock_guard lock{mutex_};
  ++retirements_;
  for (const std::shared_ptr<model>& instance : instances) {
    const auto it = entries_.find(instance.get());
    if (it == entries_.end() || it->second.instance.lock() != instance || !it->second.sequences) {
      continue;
    }
    retired.push_back(std::move(it->second.sequences));
    entries_.erase(it);
  }
}

void instance_extras::stop_batching() {
  std::vector<std::shared_ptr<batcher>> stopping;
  {
    const std::lock_guard lock{mutex_};
    batching_stopped_ = true;
    for (auto& [key, extras] : entries_) {
      if (extras.batches) stopping.push_back(std::move(extras.batches));
    }
  }
  stopping.clear();  // outside the lock: a batch that is starting may need it
}

std::optional<std::size_t> instance_extras::active_sequences(const model_lease& lease) {
  const std::lock_guard lock{mutex_};
  const entry* found = find(lease.shared());
  if (found == nullptr || !found->sequences) return std::nullopt;
  return found->sequences->active();
}

// Under the lock.
instance_extras::entry* instance_extras::find(const std::shared_ptr<model>& instance) {
  const auto it = entries_.find(instance.get());
  return it != entries_.end() && it->second.instance.lock() == instance ? &it->second : nullptr;
}

// Under the lock. The entries of freed instances (one at the same address among them) go to
// `pruned`, for the caller to destroy after the lock.
void instance_extras::add(const std::shared_ptr<model>& instance, entry made,
                          std::vector<entry>& pruned) {
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->second.instance.expired() || it->first == instance.get()) {
      pruned.push_back(std::move(it->second));
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  entries_.emplace(instance.get(), std::move(made));
}

// Whether the lease's instance is still the one that its model's version serves with.
status instance_extras::still_serving(const model_lease& lease) const {
  const std::string& name = lease.get().config().name;
  const result<model_lease> current = repository_.acquire(name, lease.version());
  if (current && current->shared() == lease.shared()) return {};
  // "is unloading" or "is not ready": the model's state now.
  if (!current && current.error().code() == errc::unavailable) return current.error();
  return status{errc::unavailable,
                fmt::format("model '{}' version {} was unloaded or reloaded after this request "
                            "came; send it again",
                            name, lease.version())};
}

}  // namespace oip::detail
