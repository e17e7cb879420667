// The repository extension's loads and unloads (`inference_service::load`, `unload`), on the
// model-control thread.

#include "serving/detail/model_control.hpp"

#include "serving/detail/sequence_release_scope.hpp"

#include <oip/log.hpp>

#include <algorithm>
#include <exception>
#include <future>
#include <new>

#include <fmt/format.h>

namespace oip::detail {

namespace {

// Builds `model` with `loader` and registers it (in place of the version there, if any).
status build_and_register(model_repository& repository, model_loader& loader,
                          const std::string& model, const parameters& request) {
  // The loader's models are version 1: a version the host registered would go on serving
  // requests that name none, whatever was loaded.
  for (const std::uint64_t version : repository.versions(model)) {
    if (version != 1) {
      return status{errc::invalid_argument,
                    fmt::format("model '{}' has version {}, which this server's model loader "
                                "does not make (it loads version 1): unload the model first",
                                model, version)};
    }
  }
  result<std::shared_ptr<oip::model>> loaded = loader.load_with(model, request);
  if (!loaded) return loaded.error();
  if (*loaded == nullptr || (*loaded)->config().name != model) {
    return status{errc::internal, fmt::format("the loader did not produce model '{}'", model)};
  }
  // A model that is there is reloaded, as in Triton: with parameters, or when it is not ready or
  // is being unloaded.
  return repository.replace(std::move(*loaded));
}

// Builds `model` with `loader` and registers it; on the model-control thread. A loader that throws
// fails the load, not the thread; running out of memory even while the failure is worded goes to
// the thread's own catch (`run_in_turn`).
status load_now(model_repository& repository, model_loader& loader, const std::string& model,
                const parameters& request) {
  try {
    return build_and_register(repository, loader, model, request);
  } catch (const std::exception& e) {
    return status{errc::internal, fmt::format("loading model '{}' failed: {}", model, e.what())};
  } catch (...) {
    return status{errc::internal, fmt::format("loading model '{}' failed", model)};
  }
}

enum class instances { held, serving };

// The instances of `model`'s versions: every one the repository holds (draining and not ready
// included), or those that take requests.
std::vector<std::shared_ptr<model>> instances_of(const model_repository& repository,
                                                 const std::string& model, instances which) {
  std::vector<std::shared_ptr<oip::model>> out;
  for (const std::uint64_t version : repository.versions(model)) {
    result<model_lease> lease = which == instances::held ? repository.find(model, version)
                                                         : repository.acquire(model, version);
    if (lease) out.push_back(lease->shared());
  }
  return out;
}

// A load or unload that waits on the model-control thread would wait for itself; one that waits
// in a model's `release_sequence` could wait for a change that waits for that release to return.
status waited_where_it_may_wait_for_itself() {
  return status{errc::internal,
                "a load or unload that waits for its outcome cannot be made from a model loader, "
                "a load's completion or a model's release_sequence: use the form that takes a "
                "completion"};
}

// The completion holds the promise, so that it outlives a `set_value` on the control thread.
template <class Start>
status wait_for(Start&& start) {
  auto outcome = std::make_shared<std::promise<status>>();
  std::future<status> ready = outcome->get_future();
  start([outcome](status s) { outcome->set_value(std::move(s)); });
  return ready.get();
}

// One load or unload on the control thread, a plain thread of its own: an exception from the work
// (out of memory) or from the transport's completion must not end the process there.
void run_in_turn(const std::function<status()>& work, const model_control::completion& done) {
  status outcome;
  try {
    outcome = work();
  } catch (const std::bad_alloc&) {
    outcome = status{errc::unavailable, "a model load or unload ran out of memory"};
  } catch (...) {
    outcome = status{errc::internal, "a model load or unload failed"};
  }
  try {
    done(std::move(outcome));
  } catch (...) {
    log(log_level::error, "the completion of a model load or unload threw");
  }
}
}  // namespace

status model_control::allowed() const {
  if (mode_ != model_control_mode::explicit_loading) return model_control_refused();
  return {};
}

void model_control::load(std::string model, parameters request, completion done) {
  if (status s = allowed(); !s.ok()) return done(s);
  if (status s = check_model_name(model); !s.ok()) return done(s);
  // All of it in turn with the other loads and unloads: a load asked after an unload of the same
  // model sees the unload's outcome.
  post([this, model = std::move(model),
        request = std::move(request)] { return load_in_turn(model, request); },
       std::move(done));
}

status model_control::load_in_turn(const std::string& model, const parameters& request) {
  // A model that serves is left as it is when no parameters come, whoever registered it.
  if (request.empty() && repository_.acquire(model, std::nullopt).ok()) return {};
  const std::shared_ptr<model_loader> loader = repository_.loader();
  if (!loader) {
    return status{errc::invalid_argument,
                  "this server has no model loader: its models are registered by the host "
                  "application"};
  }
  std::vector<std::string> offered;
  try {
    offered = loader->available();
  } catch (...) {
    return status{errc::internal, "this server's model loader failed to list its models"};
  }
  if (std::find(offered.begin(), offered.end(), model) == offered.end()) {
    return status{errc::not_found,
                  fmt::format("failed to load '{}': this server's model loader has no model of "
                              "that name",
                              model)};
  }
  return retiring(model, [&] { return load_now(repository_, *loader, model, request); });
}

status model_control::retiring(const std::string& model, const std::function<status()>& change) {
  // Held here, the instances outlive the change: the service lets go of what it keeps for them
  // (their sequences) while each model can still hear of it.
  std::vector<std::shared_ptr<oip::model>> before =
      instances_of(repository_, model, instances::held);
  status changed = change();
  if (!changed.ok() || !retired_) return changed;
  // A loader may hand back the instance it made before: that one still serves.
  const std::vector<std::shared_ptr<oip::model>> after =
      instances_of(repository_, model, instances::serving);
  std::erase_if(before, [&](const std::shared_ptr<oip::model>& m) {
    return std::find(after.begin(), after.end(), m) != after.end();
  });
  if (before.empty()) return changed;
  try {
    retired_(before);
  } catch (...) {  // the change is made all the same; its models' sequences are not told
    log(log_level::error, "letting go of a retired model's sequences failed");
  }
  return changed;
}

void model_control::unload(std::string model, completion done) {
  if (status s = allowed(); !s.ok()) return done(s);
  if (status s = check_model_name(model); !s.ok()) return done(s);
  auto remove = [this, model = std::move(model)] {
    return retiring(model, [&] { return repository_.remove(model); });
  };
  post(std::move(remove), std::move(done));
}

status model_control::load_and_wait(std::string model, parameters request) {
  if (on_control_thread() || detail::in_sequence_release()) {
    return waited_where_it_may_wait_for_itself();
  }
  return wait_for(
      [&](completion done) { load(std::move(model), std::move(request), std::move(done)); });
}

status model_control::unload_and_wait(std::string model) {
  if (on_control_thread() || detail::in_sequence_release()) {
    return waited_where_it_may_wait_for_itself();
  }
  return wait_for([&](completion done) { unload(std::move(model), std::move(done)); });
}

std::vector<model_index_entry> model_control::index() const {
  std::vector<model_index_entry> out = repository_.index();
  if (const std::shared_ptr<model_loader> loader = repository_.loader()) {
    std::vector<std::string> offered;
    try {
      offered = loader->available();
    } catch (...) {
      // The index still lists what serves; the transport's thread never sees the exception.
      log(log_level::error, "this server's model loader failed to list its models");
    }
    for (const std::string& name : offered) {
      const bool listed = std::any_of(out.begin(), out.end(),
                                      [&](const model_index_entry& e) { return e.name == name; });
      if (!listed) out.push_back({name, 0, "UNAVAILABLE", "unloaded"});
    }
  }
  return out;
}

void model_control::close() {
  std::unique_ptr<serial_worker> worker;
  {
    const std::lock_guard lock{mutex_};
    closed_ = true;
    worker = std::move(worker_);
  }
}  // the worker runs what was posted before it stops

void model_control::post(std::function<status()> work, completion done) {
  {
    const std::lock_guard lock{mutex_};
    if (!closed_) {
      if (!worker_) worker_ = std::make_unique<serial_worker>();
      worker_->post([work = std::move(work), done = std::move(done)] { run_in_turn(work, done); });
      return;
    }
  }
  done(status{errc::unavailable, "the server is stopping: no model loads or unloads"});
}

bool model_control::on_control_thread() {
  const std::lock_guard lock{mutex_};
  return worker_ && worker_->runs_here();
}

}  // namespace oip::detail
