#include <oip/repository.hpp>

#include <algorithm>
#include <charconv>
#include <condition_variable>
#include <map>
#include <mutex>
#include <shared_mutex>

#include <fmt/format.h>

namespace oip {

namespace detail {

struct model_slot {
  std::shared_ptr<model> instance;
  std::uint64_t version = 0;
  model_statistics statistics;
  std::atomic<std::uint64_t> in_flight{0};
  std::atomic<bool> draining{false};
};

// One lock guards the map and the draining flags: requests take it shared, changes exclusive.
struct repository_state {
  mutable std::shared_mutex mutex;
  mutable std::condition_variable_any removed;
  std::map<std::string, std::map<std::uint64_t, std::shared_ptr<model_slot>>, std::less<>> models;
  std::shared_ptr<model_loader> loader;

  // Drops a draining slot once nothing holds it; the caller holds the exclusive lock.
  void erase_if_drained(const std::string& name, const std::shared_ptr<model_slot>& slot) {
    if (slot->in_flight.load() != 0) return;
    const auto model = models.find(name);
    if (model == models.end()) return;
    const auto version = model->second.find(slot->version);
    if (version == model->second.end() || version->second != slot) return;
    model->second.erase(version);
    if (model->second.empty()) models.erase(model);
    removed.notify_all();
  }
};

}  // namespace detail

// --- lease -------------------------------------------------------------------------------------

model_lease::model_lease(std::shared_ptr<detail::repository_state> repository,
                         std::shared_ptr<detail::model_slot> slot) noexcept
    : repository_{std::move(repository)}, slot_{std::move(slot)} {}

model_lease::model_lease(model_lease&& other) noexcept
    : repository_{std::move(other.repository_)}, slot_{std::move(other.slot_)} {}

model_lease& model_lease::operator=(model_lease&& other) noexcept {
  if (this != &other) {
    release();
    repository_ = std::move(other.repository_);
    slot_ = std::move(other.slot_);
  }
  return *this;
}

model_lease::~model_lease() { release(); }

void model_lease::release() noexcept {
  if (!slot_) return;
  if (slot_->in_flight.fetch_sub(1) == 1 && slot_->draining.load()) {
    const std::unique_lock lock{repository_->mutex};
    repository_->erase_if_drained(slot_->instance->config().name, slot_);
  }
  slot_.reset();
  repository_.reset();
}

model& model_lease::get() const noexcept { return *slot_->instance; }
const std::shared_ptr<model>& model_lease::shared() const noexcept { return slot_->instance; }
std::uint64_t model_lease::version() const noexcept { return slot_->version; }
model_statistics& model_lease::statistics() const noexcept { return slot_->statistics; }

model_loader::~model_loader() = default;

result<std::shared_ptr<model>> model_loader::load_with(std::string_view name,
                                                       const parameters& request) {
  if (request.empty()) return load(name);
  return status{errc::invalid_argument,
                fmt::format("this server's model loader takes no load parameters: got '{}' for "
                            "model '{}'",
                            request.begin()->first, name)};
}

// --- repository --------------------------------------------------------------------------------

status repository_name_refused() {
  return status{errc::not_implemented, "'repository_name' specification is not supported"};
}

status unknown_model(std::string_view name, std::optional<std::uint64_t> version) {
  if (version) {
    return status{errc::not_found, fmt::format("Request for unknown model: '{}' version {} is not "
                                               "found",
                                               name, *version)};
  }
  return status{errc::not_found, fmt::format("Request for unknown model: '{}' is not found", name)};
}

status check_model_name(std::string_view name) {
  const bool control = std::any_of(name.begin(), name.end(), [](char c) {
    const auto byte = static_cast<unsigned char>(c);
    return byte < 0x20 || byte == 0x7F || c == '/' || c == '\\';
  });
  if (name.empty() || name.size() > max_model_name_bytes || name == "." || name == ".." ||
      control) {
    return status{errc::invalid_argument,
                  fmt::format("invalid model name: a model name is 1 to {} bytes, not '.' or '..', "
                              "without '/', '\\', NUL or other control characters",
                              max_model_name_bytes)};
  }
  return {};
}

result<std::optional<std::uint64_t>> parse_model_version(std::string_view text) {
  if (text.empty()) return std::optional<std::uint64_t>{};
  std::uint64_t version = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), version);
  if (ec != std::errc{} || end != text.data() + text.size() || version == 0) {
    return status{errc::invalid_argument,
                  fmt::format("invalid model version '{}': versions are positive integers", text)};
  }
  return std::optional<std::uint64_t>{version};
}

model_repository::model_repository() : state_{std::make_shared<detail::repository_state>()} {}
model_repository::~model_repository() = default;

namespace {
status check_registrable(const std::shared_ptr<model>& m, std::uint64_t version) {
  if (!m) return status{errc::invalid_argument, "no model to add"};
  if (status s = check_model_name(m->config().name); !s.ok()) return s;
  if (version == 0) {
    return status{errc::invalid_argument,
                  fmt::format("model '{}': versions are positive integers", m->config().name)};
  }
  // Triton's tools read an ensemble's `ensemble_scheduling` without looking (perf_analyzer
  // crashes), and oip has no ensemble scheduler to report.
  if (m->config().platform == "ensemble") {
    return status{errc::invalid_argument,
                  fmt::format("model '{}': platform 'ensemble' is Triton's ensemble scheduler, "
                              "which oip does not have",
                              m->config().name)};
  }
  if (const model_config& c = m->config(); c.decoupled && c.dynamic_batching) {
    return status{errc::invalid_argument,
                  fmt::format("model '{}': a decoupled model cannot use dynamic batching in this "
                              "server (a batch's responses could not be told apart); use "
                              "sequence batching or none",
                              c.name)};
  }
  if (const model_config& c = m->config();
      c.response_cache && (c.decoupled || c.sequence_batching)) {
    return status{errc::invalid_argument,
                  fmt::format("model '{}': the response cache is not offered for a {} model (its "
                              "responses depend on more than the request)",
                              c.name, c.decoupled ? "decoupled" : "sequence")};
  }
  if (const model_config& c = m->config(); c.dynamic_batching && c.batching.max_queue_size == 0) {
    return status{errc::invalid_argument,
                  fmt::format("model '{}': a max_queue_size of 0 would refuse every request (this "
                              "server always bounds the batch queue, where Triton's 0 means no "
                              "bound); give a positive bound",
                              c.name)};
  }
  if (const model_config& c = m->config();
      c.dynamic_batching && c.batching.priority_levels > 0 &&
      (c.batching.default_priority_level == 0 ||
       c.batching.default_priority_level > c.batching.priority_levels)) {
    return status{errc::invalid_argument,
                  fmt::format("model '{}': default priority level must be in range [1, {}]", c.name,
                              c.batching.priority_levels)};
  }
  if (const model_config& c = m->config(); c.dynamic_batching) {
    const auto negative_timeout = [](const queue_policy& p) {
      return p.default_timeout.count() < 0;
    };
    if (negative_timeout(c.batching.default_queue_policy) ||
        std::any_of(c.batching.priority_queue_policy.begin(),
                    c.batching.priority_queue_policy.end(),
                    [&](const auto& p) { return negative_timeout(p.second); })) {
      return status{
          errc::invalid_argument,
          fmt::format("model '{}': a queue policy's default timeout cannot be negative", c.name)};
    }
    // Where the model has no levels, Triton ignores the levels' policies; a policy that can never
    // apply is refused here instead.
    const auto& policies = c.batching.priority_queue_policy;
    for (auto it = policies.begin(); it != policies.end(); ++it) {
      if (it->first == 0 || it->first > c.batching.priority_levels) {
        return status{errc::invalid_argument,
                      fmt::format("model '{}': priority queue policy must have priority level in "
                                  "range [1, {}]",
                                  c.name, c.batching.priority_levels)};
      }
      if (std::any_of(policies.begin(), it, [&](const auto& p) { return p.first == it->first; })) {
        return status{
            errc::invalid_argument,
            fmt::format("model '{}': priority level {} has two queue policies", c.name, it->first)};
      }
    }
  }
  if (const model_config& c = m->config(); c.sequence_batching) {
    // A zero idle time would drop every sequence between two requests (Triton makes it 1 s);
    // zero sequences or waiting requests would refuse every request.
    if (c.sequence.max_idle.count() <= 0 || c.sequence.max_active == 0 ||
        c.sequence.max_waiting_per_sequence == 0 || c.sequence.max_waiting == 0) {
      return status{errc::invalid_argument,
                    fmt::format("model '{}': its sequence settings need a positive max_idle, "
                                "max_active, max_waiting_per_sequence and max_waiting",
                                c.name)};
    }
  }
  return {};
}

std::shared_ptr<detail::model_slot> slot_of(std::shared_ptr<model> m, std::uint64_t version) {
  auto slot = std::make_shared<detail::model_slot>();
  slot->instance = std::move(m);
  slot->version = version;
  return slot;
}
}  // namespace

status model_repository::add(std::shared_ptr<model> m, std::uint64_t version) {
  if (status s = check_registrable(m, version); !s.ok()) return s;
  const std::string name = m->config().name;
  const std::unique_lock lock{state_->mutex};
  auto& versions = state_->models[name];
  if (versions.contains(version)) {
    return status{errc::invalid_argument,
                  fmt::format("model '{}' version {} is already loaded", name, version)};
  }
  versions.emplace(version, slot_of(std::move(m), version));
  return {};
}

status model_repository::replace(std::shared_ptr<model> m, std::uint64_t version) {
  if (status s = check_registrable(m, version); !s.ok()) return s;
  const std::string name = m->config().name;
  const std::unique_lock lock{state_->mutex};
  // The slot replaced leaves the map; the requests that hold it keep it until they finish.
  state_->models[name][version] = slot_of(std::move(m), version);
  return {};
}

status model_repository::remove(std::string_view name, std::optional<std::uint64_t> version) {
  if (status s = check_model_name(name); !s.ok()) return s;
  const std::unique_lock lock{state_->mutex};
  const auto model = state_->models.find(name);
  if (model == state_->models.end()) return unknown_model(name, version);
  std::vector<std::shared_ptr<detail::model_slot>> slots;
  for (const auto& [v, slot] : model->second) {
    if (!version || v == *version) slots.push_back(slot);
  }
  if (slots.empty()) return unknown_model(name, version);
  const std::string key = model->first;  // the map entry may go below
  for (const auto& slot : slots) {
    slot->draining.store(true);
    state_->erase_if_drained(key, slot);
  }
  return {};
}

bool model_repository::wait_removed(std::string_view name,
                                    std::chrono::milliseconds timeout) const {
  std::shared_lock lock{state_->mutex};
  return state_->removed.wait_for(lock, timeout, [&] { return !state_->models.contains(name); });
}

namespace {

enum class lookup { for_inference, for_metadata };

result<model_lease> lookup_model(const std::shared_ptr<detail::repository_state>& state,
                                 std::string_view name, std::optional<std::uint64_t> version,
                                 lookup purpose) {
  if (status s = check_model_name(name); !s.ok()) return s;
  const std::shared_lock lock{state->mutex};
  const auto model = state->models.find(name);
  if (model == state->models.end()) return unknown_model(name, version);
  std::shared_ptr<detail::model_slot> slot;
  if (version) {
    const auto found = model->second.find(*version);
    if (found == model->second.end()) return unknown_model(name, version);
    slot = found->second;
  } else {
    // The latest version that can serve; for metadata, the latest of all.
    for (auto it = model->second.rbegin(); it != model->second.rend(); ++it) {
      if (purpose == lookup::for_metadata ||
          (!it->second->draining.load() && it->second->instance->ready())) {
        slot = it->second;
        break;
      }
    }
    if (!slot) slot = model->second.rbegin()->second;  // explained below
  }
  if (purpose == lookup::for_inference) {
    if (slot->draining.load()) {
      return status{errc::unavailable,
                    fmt::format("model '{}' version {} is unloading", name, slot->version)};
    }
    if (!slot->instance->ready()) {
      return status{errc::unavailable,
                    fmt::format("model '{}' version {} is not ready", name, slot->version)};
    }
  }
  slot->in_flight.fetch_add(1);
  return model_lease{state, std::move(slot)};
}

}  // namespace

result<model_lease> model_repository::acquire(std::string_view name,
                                              std::optional<std::uint64_t> version) const {
  return lookup_model(state_, name, version, lookup::for_inference);
}

result<model_lease> model_repository::find(std::string_view name,
                                           std::optional<std::uint64_t> version) const {
  return lookup_model(state_, name, version, lookup::for_metadata);
}

std::vector<model_index_entry> model_repository::index() const {
  const std::shared_lock lock{state_->mutex};
  std::vector<model_index_entry> out;
  for (const auto& [name, versions] : state_->models) {
    for (const auto& [version, slot] : versions) {
      model_index_entry entry{name, version, "READY", ""};
      if (slot->draining.load()) {
        entry.state = "UNLOADING";
        entry.reason = "unloading: waiting for requests in flight";
      } else if (!slot->instance->ready()) {
        entry.state = "UNAVAILABLE";
        entry.reason = "the model is not ready";
      }
      out.push_back(std::move(entry));
    }
  }
  return out;
}

std::vector<std::uint64_t> model_repository::versions(std::string_view name) const {
  const std::shared_lock lock{state_->mutex};
  std::vector<std::uint64_t> out;
  if (const auto model = state_->models.find(name); model != state_->models.end()) {
    for (const auto& entry : model->second) out.push_back(entry.first);
  }
  return out;
}

bool model_repository::all_ready() const {
  const std::shared_lock lock{state_->mutex};
  for (const auto& [name, versions] : state_->models) {
    for (const auto& [version, slot] : versions) {
      if (slot->draining.load() || !slot->instance->ready()) return false;
    }
  }
  return true;
}

void model_repository::set_loader(std::shared_ptr<model_loader> loader) {
  const std::unique_lock lock{state_->mutex};
  state_->loader = std::move(loader);
}

std::shared_ptr<model_loader> model_repository::loader() const {
  const std::shared_lock lock{state_->mutex};
  return state_->loader;
}

}  // namespace oip
