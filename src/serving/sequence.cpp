#include "serving/detail/sequence_release_scope.hpp"

#include <oip/log.hpp>
#include <oip/sequence.hpp>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace oip {

std::string sequence_id::to_string() const {
  return is_string() ? std::string{text()} : std::to_string(number());
}

std::string_view to_string(sequence_release reason) noexcept {
  switch (reason) {
    case sequence_release::ended: return "ended";
    case sequence_release::restarted: return "restarted";
    case sequence_release::timed_out: return "timed out";
    case sequence_release::shut_down: return "shut down";
    case sequence_release::cancelled: return "cancelled";
  }
  return "released";
}

result<sequence_flags> read_sequence_flags(const parameters& request_parameters,
                                           std::size_t max_string_length) {
  sequence_flags flags;
  if (const parameter_value* id = request_parameters.find("sequence_id")) {
    if (const auto* number = std::get_if<std::int64_t>(id); number != nullptr && *number >= 0) {
      flags.id = sequence_id{static_cast<std::uint64_t>(*number)};
    } else if (const auto* wide = std::get_if<std::uint64_t>(id)) {
      flags.id = sequence_id{*wide};
    } else if (const auto* text = std::get_if<std::string>(id)) {
      if (text->size() > max_string_length) {
        return status{errc::invalid_argument,
                      fmt::format("sequence_id of {} characters is longer than the limit of {}",
                                  text->size(), max_string_length)};
      }
      flags.id = sequence_id{*text};
    } else {
      return status{errc::invalid_argument,
                    "unable to parse 'sequence_id': expected an unsigned integer or a string"};
    }
  }
  const auto read_flag = [&](std::string_view name, bool& out) -> status {
    const parameter_value* value = request_parameters.find(name);
    if (value == nullptr) return {};
    const bool* flag = std::get_if<bool>(value);
    if (flag == nullptr) {
      return status{errc::invalid_argument,
                    fmt::format("unable to parse '{}': expected a boolean", name)};
    }
    out = *flag;
    return {};
  };
  if (status s = read_flag("sequence_start", flags.start); !s.ok()) return s;
  if (status s = read_flag("sequence_end", flags.end); !s.ok()) return s;
  return flags;
}

namespace detail {

namespace {
thread_local bool releasing_a_sequence = false;
}  // namespace

bool in_sequence_release() noexcept { return releasing_a_sequence; }

sequence_release_scope::sequence_release_scope() noexcept : outer_{releasing_a_sequence} {
  releasing_a_sequence = true;
}

sequence_release_scope::~sequence_release_scope() { releasing_a_sequence = outer_; }

using clock = std::chrono::steady_clock;

struct waiting_request {
  bool start = false;
  bool end = false;
  sequence_manager::run_callback run;
};

struct sequence_entry {
  explicit sequence_entry(sequence_id key) : id{std::move(key)} {}
  const sequence_id id;
  // Touched only by the request whose turn it is (or under the table's mutex when none runs).
  std::any state;
  // A request was cancelled: those queued behind it, up to a START, are too. Touched only by the
  // turn's holder.
  bool cancelled = false;
  // The rest: under the table's mutex.
  std::deque<waiting_request> waiting;
  bool running = false;
  bool ending = false;  // an END was admitted and no START since
  clock::time_point last_used = clock::now();
};

// Triton's words for the id's type in its CORRID messages.
std::string_view id_type_name(correlation_id_type type) {
  return type == correlation_id_type::string ? "BYTES" : "UINT64";
}

struct sequence_table : std::enable_shared_from_this<sequence_table> {
  sequence_table(std::string name, sequence_config settings, sequence_manager::release_callback r)
      : model_name{std::move(name)}, config{std::move(settings)}, on_release{std::move(r)} {}

  const std::string model_name;
  const sequence_config config;
  const sequence_manager::release_callback on_release;
  mutable std::mutex mutex;
  std::map<sequence_id, std::shared_ptr<sequence_entry>> entries;
  std::size_t waiting = 0;  // requests in the entries' queues
  // The manager is gone: a sequence whose turn was held then ends (`shut_down`) once its last
  // request is done, as the idle ones did when the manager went.
  bool closed = false;

  // A model's release hook runs on the reaper thread and where a step completes, neither of
  // which may end with an exception: one that throws is logged, and its state dropped all the same.
  void tell(const sequence_id& id, std::any& state, sequence_release reason) const noexcept {
    if (!on_release || !state.has_value()) return;
    const sequence_release_scope releasing;
    try {
      on_release(id, state, reason);
    } catch (const std::exception& e) {
      report_throw(id, e.what());
    } catch (...) {
      report_throw(id, "an exception that is not a std::exception");
    }
  }

  void report_throw(const sequence_id& id, const char* why) const noexcept {
    try {
      log(log_level::error, fmt::format("model '{}' threw while releasing sequence {}: {}",
                                        model_name, id.to_string(), why));
    } catch (...) {
      log(log_level::error, "a model threw while releasing a sequence");
    }
  }

  // Gives `request` its turn: called without the mutex, with entry->running set.
  void start(const std::shared_ptr<sequence_entry>& entry, const waiting_request& request) {
    if (request.start) entry->cancelled = false;
    if (entry->cancelled) {
      sequence_step step{entry->id, request.start, request.end, true, nullptr, true};
      request.run(sequence_turn{shared_from_this(), entry, std::move(step)});
      return;
    }
    if (request.start && entry->state.has_value()) {
      std::any previous = std::move(entry->state);
      entry->state.reset();
      tell(entry->id, previous, sequence_release::restarted);
    }
    sequence_step step{entry->id, request.start, request.end, true, &entry->state};
    request.run(sequence_turn{shared_from_this(), entry, std::move(step)});
  }

  void finish_turn(const std::shared_ptr<sequence_entry>& entry, const sequence_step& step) {
    if (step.end) release_held(entry, sequence_release::ended);
    hand_over(entry, step.end || entry->cancelled);
  }

  // Called by the turn's holder.
  void cancel(const std::shared_ptr<sequence_entry>& entry) {
    entry->cancelled = true;
    {
      const std::lock_guard lock{mutex};
      const bool start_waiting = std::any_of(entry->waiting.begin(), entry->waiting.end(),
                                             [](const waiting_request& w) { return w.start; });
      if (!start_waiting) entry->ending = true;
    }
    release_held(entry, sequence_release::cancelled);
  }

  // Called by the turn's holder, whose request did not run: frees the turn, leaving the sequence
  // as before the request, unless the sequence cannot go on without it (false, the turn kept).
  bool withdraw(const std::shared_ptr<sequence_entry>& entry, const sequence_step& step) {
    const std::lock_guard lock{mutex};
    if (step.start || entry->cancelled || !entry->waiting.empty() || closed) return false;
    if (step.end) entry->ending = false;  // an END admitted no later request but a START
    entry->running = false;
    entry->last_used = clock::now();
    return true;
  }

  // Lets the model go of a sequence's state while the sequence still holds its turn, so that no
  // request of the same id (a new START) runs alongside the release.
  void release_held(const std::shared_ptr<sequence_entry>& entry, sequence_release reason) {
    std::any released = std::move(entry->state);
    entry->state.reset();
    tell(entry->id, released, reason);
  }

  // Gives the turn to the sequence's next waiting request, or frees it (and, once the sequence is
  // over, forgets the sequence).
  void hand_over(const std::shared_ptr<sequence_entry>& entry, bool over) {
    std::optional<waiting_request> next;
    bool shut_down = false;  // the manager is gone: the sequence ends, its turn still held
    {
      const std::lock_guard lock{mutex};
      entry->last_used = clock::now();
      if (!entry->waiting.empty()) {
        next = std::move(entry->waiting.front());
        entry->waiting.pop_front();
        --waiting;
      } else if (closed && !over) {
        shut_down = true;
      } else {
        entry->running = false;
        if (over) {
          const auto it = entries.find(entry->id);
          if (it != entries.end() && it->second == entry) entries.erase(it);
        }
      }
    }
    if (next) {
      start(entry, *next);
    } else if (shut_down) {
      release_held(entry, sequence_release::shut_down);
      hand_over(entry, true);
    }
  }

  // Releases the sequences idle past `max_idle` (every idle one when `all`), each while holding
  // its turn: a request arriving meanwhile must START anew and waits for the release to end.
  // One sequence at a time, each taken only when its turn in the sweep comes: a release that ends
  // the manager (its last holder letting go of it on the reaper) then leaves the sequences not yet
  // reached to the manager's own sweep, which releases them while the model is still held.
  std::size_t release_idle(clock::time_point now, bool all, sequence_release reason) {
    std::size_t released = 0;
    std::optional<sequence_id> after;  // the last sequence taken: the sweep goes on past it
    for (;;) {
      std::shared_ptr<sequence_entry> idle;
      {
        const std::lock_guard lock{mutex};
        for (auto it = after ? entries.upper_bound(*after) : entries.begin(); it != entries.end();
             ++it) {
          const std::shared_ptr<sequence_entry>& entry = it->second;
          if (!entry->running && entry->waiting.empty() &&
              (all || now - entry->last_used > config.max_idle)) {
            entry->running = true;
            entry->ending = true;
            idle = entry;
            after = it->first;
            break;
          }
        }
      }
      if (!idle) return released;
      release_held(idle, reason);
      hand_over(idle, true);
      ++released;
    }
  }
};

}  // namespace detail

// --- sequence_turn -------------------------------------------------------------------------------

sequence_turn::sequence_turn(std::shared_ptr<detail::sequence_table> table,
                             std::shared_ptr<detail::sequence_entry> entry,
                             sequence_step step) noexcept
    : table_{std::move(table)}, entry_{std::move(entry)}, step_{std::move(step)} {}

sequence_turn::sequence_turn(sequence_turn&& other) noexcept
    : table_{std::move(other.table_)},
      entry_{std::move(other.entry_)},
      step_{std::move(other.step_)} {}

sequence_turn& sequence_turn::operator=(sequence_turn&& other) noexcept {
  if (this != &other) {
    release();
    table_ = std::move(other.table_);
    entry_ = std::move(other.entry_);
    step_ = std::move(other.step_);
  }
  return *this;
}

sequence_turn::~sequence_turn() { release(); }

void sequence_turn::cancel_sequence() noexcept {
  if (!entry_) return;
  table_->cancel(entry_);
  release();
}

bool sequence_turn::withdraw() noexcept {
  if (!entry_) return true;
  if (!table_->withdraw(entry_, step_)) return false;
  // The turn is free: another request of the sequence may hold it already.
  table_.reset();
  entry_.reset();
  step_.state = nullptr;
  return true;
}

void sequence_turn::release() noexcept {
  if (!entry_) return;
  const std::shared_ptr<detail::sequence_table> table = std::move(table_);
  const std::shared_ptr<detail::sequence_entry> entry = std::move(entry_);
  step_.state = nullptr;
  table->finish_turn(entry, step_);
}

// --- sequence_manager ----------------------------------------------------------------------------

namespace detail {
struct sequence_reaper {
  std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;
  std::thread thread;
};
}  // namespace detail

sequence_manager::sequence_manager(std::string model_name, sequence_config config,
                                   release_callback on_release)
    : table_{std::make_shared<detail::sequence_table>(std::move(model_name), std::move(config),
                                                      std::move(on_release))},
      reaper_{std::make_shared<detail::sequence_reaper>()} {
  // The reaper thread holds the table and itself, never the manager, and stops when the manager
  // is gone.
  const auto period = std::clamp<std::chrono::microseconds>(
      table_->config.max_idle / 2, std::chrono::milliseconds{1}, std::chrono::seconds{1});
  reaper_->thread = std::thread([reaper = reaper_, table = table_, period] {
    std::unique_lock lock{reaper->mutex};
    while (!reaper->wake.wait_for(lock, period, [&] { return reaper->stopping; })) {
      lock.unlock();
      table->release_idle(detail::clock::now(), false, sequence_release::timed_out);
      lock.lock();
    }
  });
}

sequence_manager::~sequence_manager() {
  {
    const std::lock_guard lock{reaper_->mutex};
    reaper_->stopping = true;
  }
  reaper_->wake.notify_all();
  if (reaper_->thread.get_id() == std::this_thread::get_id()) {
    // The last holder of the manager let go of it in a release on the reaper itself (a model's
    // `release_sequence` that made a request of its own model while an unload retired it): the
    // thread cannot join itself, and it ends on its own once the release returns.
    reaper_->thread.detach();
  } else {
    reaper_->thread.join();
  }
  {
    const std::lock_guard lock{table_->mutex};
    table_->closed = true;
  }
  table_->release_idle(detail::clock::now(), true, sequence_release::shut_down);
}

const sequence_config& sequence_manager::config() const noexcept { return table_->config; }

std::size_t sequence_manager::active() const {
  const std::lock_guard lock{table_->mutex};
  return table_->entries.size();
}

std::size_t sequence_manager::release_idle() {
  return table_->release_idle(detail::clock::now(), false, sequence_release::timed_out);
}

status sequence_manager::submit(const sequence_flags& flags, run_callback run,
                                std::uint64_t batch_size) {
  detail::sequence_table& table = *table_;
  const std::string& model = table.model_name;
  if (batch_size > 1) {
    return status{errc::invalid_argument,
                  fmt::format("inference request to model '{}' must specify batch-size 1 due to "
                              "requirements of sequence batcher",
                              model)};
  }
  if (flags.id.empty()) {
    return status{errc::invalid_argument,
                  fmt::format("inference request to model '{}' must specify a non-zero or "
                              "non-empty correlation ID",
                              model)};
  }
  const correlation_id_type wanted = table.config.id_type;
  if (wanted != correlation_id_type::any &&
      flags.id.is_string() != (wanted == correlation_id_type::string)) {
    const std::string& control = table.config.correlation_input.empty()
                                     ? std::string{"CORRID"}
                                     : table.config.correlation_input;
    return status{
        errc::invalid_argument,
        fmt::format("sequence batching control '{}' data-type is '{}', but model '{}' expects '{}'",
                    control, flags.id.is_string() ? "BYTES" : "UINT64", model,
                    detail::id_type_name(wanted))};
  }

  std::shared_ptr<detail::sequence_entry> entry;
  {
    const sequence_id& key = flags.id;
    std::unique_lock lock{table.mutex};
    auto it = table.entries.find(key);
    if (it == table.entries.end() || (it->second->ending && !flags.start)) {
      if (!flags.start) {
        return status{errc::invalid_argument,
                      fmt::format("inference request for sequence {} to model '{}' must specify "
                                  "the START flag on the first request of the sequence",
                                  flags.id.to_string(), model)};
      }
      if (table.entries.size() >= table.config.max_active) {
        lock.unlock();
        release_idle();
        lock.lock();
        it = table.entries.find(key);
      }
      if (it == table.entries.end() && table.entries.size() >= table.config.max_active) {
        return status{errc::unavailable,
                      fmt::format("model '{}' has {} active sequences, its limit: sequence {} "
                                  "cannot start until one ends or times out",
                                  model, table.config.max_active, flags.id.to_string())};
      }
      if (it == table.entries.end()) {
        it = table.entries.emplace(key, std::make_shared<detail::sequence_entry>(flags.id)).first;
      }
    }
    entry = it->second;
    if (entry->waiting.size() >= table.config.max_waiting_per_sequence) {
      return status{errc::unavailable,
                    fmt::format("sequence {} of model '{}' already has {} requests waiting",
                                flags.id.to_string(), model, entry->waiting.size())};
    }
    if (entry->running && table.waiting >= table.config.max_waiting) {
      return status{errc::unavailable,
                    fmt::format("model '{}' already has {} requests waiting for their sequences' "
                                "turns",
                                model, table.waiting)};
    }
    entry->last_used = detail::clock::now();
    if (flags.start) entry->ending = false;
    if (flags.end) entry->ending = true;
    detail::waiting_request request{flags.start, flags.end, std::move(run)};
    if (entry->running) {
      entry->waiting.push_back(std::move(request));
      ++table.waiting;
      return {};
    }
    entry->running = true;
    lock.unlock();
    table.start(entry, request);
  }
  return {};
}

}  // namespace oip
