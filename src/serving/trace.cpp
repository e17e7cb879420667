#include "codecs/detail/json_values.hpp"
#include "core/detail/json_string.hpp"

#include <oip/log.hpp>
#include <oip/trace.hpp>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <mutex>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace oip {

namespace {

// A model's own settings; each one it did not set follows the global one.
struct model_override {
  std::optional<trace_level> level;
  std::optional<std::uint32_t> rate;
  std::optional<std::int32_t> count;
  std::optional<std::uint32_t> log_frequency;
  std::uint64_t seen = 0;  // requests since its settings last changed

  [[nodiscard]] bool empty() const { return !level && !rate && !count && !log_frequency; }
};

status invalid(std::string message) { return status{errc::invalid_argument, std::move(message)}; }

// A setting's one value as an integer in [low, high], in Triton's wording otherwise.
template <class T>
result<T> integer_setting(std::string_view name, const std::vector<std::string>& values, T low,
                          T high) {
  if (values.size() != 1) return invalid(fmt::format("expect only 1 value for '{}'", name));
  const std::string& text = values.front();
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || end != text.data() + text.size() ||
      (ec != std::errc{} && ec != std::errc::result_out_of_range)) {
    return invalid(fmt::format("Unable to parse '{}', got: {}", name, text.substr(0, 64)));
  }
  if (name == "trace_count" && ec == std::errc{} && value < -1) {
    return invalid(fmt::format("Unable to parse 'trace_count'. Expecting value >= -1, got: {}",
                               text.substr(0, 64)));
  }
  if (ec != std::errc{} || value < static_cast<std::int64_t>(low) ||
      value > static_cast<std::int64_t>(high)) {
    return invalid(fmt::format("Unable to parse '{}', value is out of range [ {}, {} ], got: {}",
                               name, low, high, text.substr(0, 64)));
  }
  return static_cast<T>(value);
}

result<trace_level> level_setting(const std::vector<std::string>& values) {
  if (values.empty()) return invalid("'trace_level' needs a value: OFF, TIMESTAMPS or TENSORS");
  bool off = false;
  trace_level level = trace_level::off;
  for (const std::string& value : values) {
    if (value == "OFF") {
      off = true;
    } else if (value == "TIMESTAMPS") {
      level = level | trace_level::timestamps;
    } else if (value == "TENSORS") {
      level = level | trace_level::tensors;
    } else {
      return invalid(fmt::format("unknown trace level '{}': expected OFF, TIMESTAMPS or TENSORS",
                                 value.substr(0, 64)));
    }
  }
  if (off && values.size() > 1) return invalid("Expect only one trace level 'OFF' is specified");
  return level;
}

// Settings that a change names: absent, a setting stays; an empty optional inside, it is cleared.
template <class T>
using setting_change = std::optional<std::optional<T>>;

struct setting_changes {
  setting_change<trace_level> level;
  setting_change<std::uint32_t> rate;
  setting_change<std::int32_t> count;
  setting_change<std::uint32_t> log_frequency;
};

// No values clear the setting; otherwise `read` parses them.
template <class T, class Read>
status read_change(setting_change<T>& out, const std::optional<std::vector<std::string>>& values,
                   Read&& read) {
  if (!values) {
    out.emplace(std::nullopt);
    return status{};
  }
  result<T> value = std::forward<Read>(read)(*values);
  if (!value) return std::move(value).error();
  out.emplace(*value);
  return status{};
}

// Settings that trace must name a file and sample at a non-zero rate (Triton's wording).
status check_usable(const trace_settings& settings) {
  if (settings.level == trace_level::off) return status{};
  if (settings.file.empty()) {
    return invalid("Attempting to set invalid trace setting :trace file name is not given");
  }
  if (settings.rate == 0) {
    return invalid("Attempting to set invalid trace setting :sample rate must be non-zero");
  }
  return status{};
}

// A model's own value of a setting, else the global one.
template <class T>
T effective(const model_override* own, std::optional<T> model_override::*field, T global) {
  return own != nullptr && (own->*field) ? *(own->*field) : global;
}

trace_settings with_override(trace_settings settings, const model_override* own) {
  settings.level = effective(own, &model_override::level, settings.level);
  settings.rate = effective(own, &model_override::rate, settings.rate);
  settings.count = effective(own, &model_override::count, settings.count);
  settings.log_frequency = effective(own, &model_override::log_frequency, settings.log_frequency);
  return settings;
}

// One traced request in Triton's shape: its model, then one object per timestamp, then one per
// tensor, each part as its level asks. Empty when the level asks for nothing the record holds.
std::string trace_json(const tracer::record& traced) {
  std::string text;
  const auto separate = [&text] {
    if (!text.empty()) text += ',';
  };
  if (includes(traced.level, trace_level::timestamps)) {
    text += fmt::format(R"({{"id":{},"model_name":)", traced.id);
    detail::append_json_string(text, traced.model_name);
    text += fmt::format(R"(,"model_version":{})", traced.model_version);
    if (!traced.request_id.empty()) {
      text += R"(,"request_id":)";
      detail::append_json_string(text, traced.request_id);
    }
    text += '}';
    for (const auto& [name, at] : traced.timestamps) {
      text += fmt::format(
          R"(,{{"id":{},"timestamps":[{{"name":"{}","ns":{}}}]}})", traced.id, name,
          std::chrono::duration_cast<std::chrono::nanoseconds>(at.time_since_epoch()).count());
    }
  }
  if (includes(traced.level, trace_level::tensors) && !traced.tensors.empty()) {
    separate();
    text += traced.tensors;
  }
  return text;
}

// Which file a path named when the server created it.
struct file_identity {
  dev_t device = 0;
  ino_t inode = 0;
};

void log_cannot_create(const std::string& path, int error) {
  log(log_level::error,
      error == EEXIST
          ? fmt::format("the trace file '{}' exists: the server writes only files it creates "
                        "(remove it, or name another); its traces are dropped",
                        path)
          : fmt::format("cannot create the trace file '{}' ({}): its traces are dropped", path,
                        std::strerror(error)));
}

// A file holding one JSON array of traces, written as they come and completed by `close`.
struct json_array_file {
  json_array_file() = default;
  json_array_file(const json_array_file&) = delete;
  json_array_file& operator=(const json_array_file&) = delete;
  ~json_array_file() { close(); }

  // Creates `path`, readable by the server's user alone: never through a symbolic link, and never
  // over a file that exists, which someone else may have put there. 0, or errno's reason.
  int create(const std::string& path) {
    close();
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return errno;
    struct stat made {};
    created = ::fstat(fd, &made) == 0 ? file_identity{made.st_dev, made.st_ino} : file_identity{};
    file = ::fdopen(fd, "w");
    if (file == nullptr) {
      const int error = errno;
      ::close(fd);
      return error;
    }
    return 0;
  }

  // A trace; dropped where the file could not be created (it still counts).
  void append(std::string_view text) {
    ++traces;
    if (file == nullptr) return;
    std::fputc(traces == 1 ? '[' : ',', file);
    std::fwrite(text.data(), 1, text.size(), file);
    std::fflush(file);  // a server that dies keeps every trace written (the array left open)
  }

  void close() {
    if (file != nullptr) {
      std::fputs("]\n", file);
      std::fclose(file);
    }
    file = nullptr;
    traces = 0;
  }

  std::FILE* file = nullptr;
  std::uint64_t traces = 0;  // since opened
  file_identity created;
};

// Removes `path` if it is still the file the server created there.
void remove_created(const std::string& path, file_identity created) {
  struct stat now {};
  if (::lstat(path.c_str(), &now) != 0) return;
  if (now.st_dev == created.device && now.st_ino == created.inode) ::unlink(path.c_str());
}

}  // namespace

struct tracer::state {
  explicit state(trace_settings settings) : host{settings}, global{std::move(settings)} {}

  [[nodiscard]] const model_override* own(std::string_view model) const {
    const auto found = models.find(model);
    return found == models.end() ? nullptr : &found->second;
  }
  // Whether any request could be sampled now: `sample` takes the mutex only then.
  void refresh_any_tracing() {
    const auto traces = [&](const model_override* own) {
      return effective(own, &model_override::level, global.level) != trace_level::off &&
             effective(own, &model_override::count, global.count) != 0 &&
             effective(own, &model_override::rate, global.rate) != 0;
    };
    bool any = traces(nullptr);
    for (const auto& [name, own] : models) any = any || traces(&own);
    any_tracing.store(any, std::memory_order_relaxed);
  }

  // Writes one trace: to the main file's array, or to the numbered file being filled, which is
  // completed after `log_frequency` traces. Nothing is held in memory between writes.
  void write(const std::string& text, std::uint32_t log_frequency) {
    const std::lock_guard lock{file_mutex};
    if (log_frequency == 0) {
      if (!main_created) {
        main_created = true;
        if (const int error = main_file.create(host.file); error != 0) {
          log_cannot_create(host.file, error);
        }
      }
      main_file.append(text);
      return;
    }
    if (numbered_file.traces == 0) create_numbered();
    numbered_file.append(text);
    if (numbered_file.traces >= log_frequency) numbered_file.close();
  }

  // The next numbered file: past those that exist (an earlier run's), and only the newest
  // `max_files` of those this server created are kept.
  void create_numbered() {
    constexpr int attempts = 1000;
    for (int attempt = 0; attempt < attempts; ++attempt) {
      const std::string path = fmt::format("{}.{}", host.file, next_index++);
      const int error = numbered_file.create(path);
      if (error == EEXIST) continue;
      if (error != 0) return log_cannot_create(path, error);
      if (host.max_files == 0) return;  // no bound: nothing to remember
      numbered_created.push_back({path, numbered_file.created});
      while (numbered_created.size() > host.max_files) {
        remove_created(numbered_created.front().first, numbered_created.front().second);
        numbered_created.pop_front();
      }
      return;
    }
    log(log_level::error, fmt::format("the next {} numbered trace files of '{}' all exist: "
                                      "traces are dropped until the next file",
                                      attempts, host.file));
  }

  const trace_settings host;
  mutable std::mutex mutex;  // the settings and the sampling counts
  trace_settings global;
  std::uint64_t global_seen = 0;
  std::map<std::string, model_override, std::less<>> models;
  std::uint64_t next_id = 1;
  std::atomic<bool> any_tracing{false};

  std::mutex file_mutex;  // the files
  json_array_file main_file;
  bool main_created = false;  // tried, once: an existing file is never written over
  json_array_file numbered_file;
  std::deque<std::pair<std::string, file_identity>> numbered_created;  // oldest first
  std::uint64_t next_index = 0;
};

tracer::tracer(trace_settings host) : state_{std::make_unique<state>(std::move(host))} {
  state_->refresh_any_tracing();
}

tracer::~tracer() {
  const std::lock_guard lock{state_->file_mutex};
  state_->main_file.close();
  state_->numbered_file.close();
}

trace_settings tracer::settings(std::optional<std::string_view> model) const {
  const std::lock_guard lock{state_->mutex};
  return with_override(state_->global, model ? state_->own(*model) : nullptr);
}

result<trace_settings> tracer::update(std::optional<std::string_view> model,
                                      const trace_settings_change& change) {
  // The file comes first, whatever else is wrong, as in Triton.
  for (const auto& setting : change.settings) {
    if (setting.first == "trace_file") {
      return status{errc::not_implemented,
                    "trace file location can not be updated through network protocol"};
    }
  }
  // Every value is read before anything changes: a refused change leaves nothing behind.
  setting_changes changes;
  for (const auto& setting : change.settings) {
    const std::string& name = setting.first;
    const std::optional<std::vector<std::string>>& values = setting.second;
    if (name == "trace_mode" && values && *values != std::vector<std::string>{"triton"}) {
      return status{errc::not_implemented, "trace mode 'triton' is the only one oip offers"};
    }
    status s;
    if (name == "trace_level") {
      s = read_change(changes.level, values, level_setting);
    } else if (name == "trace_rate" || name == "log_frequency") {
      s = read_change(name == "trace_rate" ? changes.rate : changes.log_frequency, values,
                      [&](const std::vector<std::string>& v) {
                        return integer_setting<std::uint32_t>(
                            name, v, 0, std::numeric_limits<std::uint32_t>::max());
                      });
    } else if (name == "trace_count") {
      s = read_change(changes.count, values, [&](const std::vector<std::string>& v) {
        return integer_setting<std::int32_t>(name, v, -1, std::numeric_limits<std::int32_t>::max());
      });
    }
    if (!s.ok()) return s;
  }

  const std::lock_guard lock{state_->mutex};
  if (model) {
    const model_override* before = state_->own(*model);
    model_override own = before != nullptr ? *before : model_override{};
    // A cleared setting (nullopt) follows the global one again.
    if (changes.level) own.level = *changes.level;
    if (changes.rate) own.rate = *changes.rate;
    if (changes.count) own.count = *changes.count;
    if (changes.log_frequency) own.log_frequency = *changes.log_frequency;
    own.seen = 0;
    trace_settings after = with_override(state_->global, &own);
    if (status s = check_usable(after); !s.ok()) return s;
    if (own.empty()) {
      state_->models.erase(std::string{*model});
    } else {
      state_->models.insert_or_assign(std::string{*model}, own);
    }
    state_->refresh_any_tracing();
    return after;
  }
  // A cleared global setting goes back to the host's.
  const trace_settings& host = state_->host;
  trace_settings after = state_->global;
  if (changes.level) after.level = changes.level->value_or(host.level);
  if (changes.rate) after.rate = changes.rate->value_or(host.rate);
  if (changes.count) after.count = changes.count->value_or(host.count);
  if (changes.log_frequency)
    after.log_frequency = changes.log_frequency->value_or(host.log_frequency);
  if (status s = check_usable(after); !s.ok()) return s;
  // The models' settings that follow the global ones must stay usable too.
  for (const auto& [name, own] : state_->models) {
    if (status s = check_usable(with_override(after, &own)); !s.ok()) return s;
  }
  state_->global = after;
  state_->global_seen = 0;
  state_->refresh_any_tracing();
  return after;
}

std::optional<tracer::sampled> tracer::sample(std::string_view model) {
  if (!active()) return std::nullopt;
  const std::lock_guard lock{state_->mutex};
  const auto found = state_->models.find(model);
  model_override* own = found == state_->models.end() ? nullptr : &found->second;
  trace_settings& global = state_->global;
  const trace_level level = effective(own, &model_override::level, global.level);
  const std::uint32_t rate = effective(own, &model_override::rate, global.rate);
  std::int32_t& count = own != nullptr && own->count ? *own->count : global.count;
  if (level == trace_level::off || count == 0 || rate == 0) return std::nullopt;
  std::uint64_t& seen = own != nullptr ? own->seen : state_->global_seen;
  if (++seen % rate != 0) return std::nullopt;
  if (count > 0 && --count == 0) state_->refresh_any_tracing();
  return sampled{state_->next_id++, level};
}

bool tracer::active() const noexcept { return state_->any_tracing.load(std::memory_order_relaxed); }

open_trace::open_trace(std::shared_ptr<tracer> to, tracer::record traced) noexcept
    : to_{std::move(to)}, traced_{std::move(traced)} {}

open_trace::~open_trace() { to_->write(traced_); }

void open_trace::stamp(std::string_view name, tracer::clock::time_point at) noexcept {
  try {
    traced_.timestamps.emplace_back(name, at);
  } catch (...) {  // NOLINT(bugprone-empty-catch): only this timestamp is lost
  }
}

std::string tracer::tensor_entry(std::uint64_t id, std::string_view activity, const tensor& t) {
  std::string text = fmt::format(R"({{"id":{},"activity":"{}","tensor":{{"name":)", id, activity);
  detail::append_json_string(text, t.name());
  std::string values;
  if (t.in_host_memory()) {  // the host cannot read a device's memory: no data then
    static_cast<void>(detail::append_json_values(
        values, t, "traced tensor", {.booleans_as_digits = true, .replace_invalid_utf8 = true}));
  }
  text += R"(,"data":)";
  detail::append_json_string(text, values);
  text += fmt::format(R"(,"shape":"{}","dtype":"{}"}}}})", fmt::join(t.shape(), ","),
                      to_string(t.type()));
  return text;
}

void tracer::write(const record& traced) noexcept {
  try {
    std::uint32_t log_frequency = 0;
    {
      const std::lock_guard lock{state_->mutex};
      const model_override* own = state_->own(traced.model_name);
      log_frequency = effective(own, &model_override::log_frequency, state_->global.log_frequency);
    }
    const std::string text = trace_json(traced);
    if (!text.empty()) state_->write(text, log_frequency);
  } catch (...) {  // NOLINT(bugprone-empty-catch): a trace that cannot be formatted is dropped
  }
}

}  // namespace oip
