// The decoupled reference models: Triton's repeat and square examples, and a text streamer.

#include "decoupled_models.hpp"

#include "text_models.hpp"

#include <oip/tensor.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace oip_serve {

namespace {

using oip::datatype;
using oip::model_output;
using oip::result;
using oip::status;
using oip::tensor;

// The threads that send a model's responses after its `execute` returned, as Triton's repeat
// and square backends do: the executor's worker is free for other requests meanwhile. Each is
// detached and holds what it uses, since the model may be released from one of them (its last
// request completing after an unload). The model, when it goes, asks them to stop and waits for
// the others.
class responders {
 public:
  // More at once are refused: each is a thread.
  static constexpr std::size_t most = 256;

  responders() = default;
  responders(const responders&) = delete;
  responders& operator=(const responders&) = delete;
  ~responders() {
    std::unique_lock lock{shared_->mutex};
    shared_->stopping = true;
    shared_->changed.notify_all();
    const std::size_t own = current == shared_.get() ? 1 : 0;
    shared_->changed.wait(lock, [&] { return shared_->running <= own; });
  }

  // Runs `work(call, pause)` on a thread of its own; `pause(ms)` sleeps, and says false when the
  // call should stop (cancelled, or the model going).
  template <class Work>
  void start(oip::inference_call call, Work work) {
    {
      const std::lock_guard lock{shared_->mutex};
      if (shared_->running >= most) {
        return call.finish(
            status{oip::errc::unavailable,
                   fmt::format("the model has {} requests streaming already", most)});
      }
      ++shared_->running;
    }
    std::thread{[state = shared_, call = std::move(call), work = std::move(work)]() mutable {
      current = state.get();
      const auto pause = [&](std::uint32_t ms) {
        std::unique_lock lock{state->mutex};
        const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds{ms};
        // Looks at the call's cancellation now and then: nothing wakes this when it is cancelled.
        while (!state->stopping && !call.cancelled() && std::chrono::steady_clock::now() < until) {
          state->changed.wait_until(lock, std::min(until, std::chrono::steady_clock::now() +
                                                              std::chrono::milliseconds{10}));
        }
        return !state->stopping && !call.cancelled();
      };
      work(call, pause);
      if (state->stopping) call.finish(status{oip::errc::unavailable, "the model is unloading"});
      const std::lock_guard lock{state->mutex};
      --state->running;
      state->changed.notify_all();
    }}.detach();
  }

 private:
  struct state {
    std::mutex mutex;
    std::condition_variable changed;
    std::size_t running = 0;
    bool stopping = false;
  };
  static thread_local const state* current;
  std::shared_ptr<state> shared_ = std::make_shared<state>();
};

thread_local const responders::state* responders::current = nullptr;

template <class T>
result<tensor> scalar(std::string name, T value) {
  return tensor::from_values<T>(std::move(name), {1}, std::span<const T>{&value, 1});
}

const tensor* find_input(const oip::inference_request& r, std::string_view name) {
  for (const tensor& t : r.inputs) {
    if (t.name() == name) return &t;
  }
  return nullptr;
}

// Triton's repeat example: a response per element of IN (OUT = the element, IDX = its index),
// each DELAY[i] milliseconds after the one before, then a flag-only final; the instance holds
// the request WAIT milliseconds before it takes the next.
class repeat_model final : public oip::model {
 public:
  repeat_model() {
    config_.name = "repeat_int32";
    config_.platform = "repeat";
    config_.decoupled = true;
    config_.inputs = {{"IN", datatype::int32, {-1}, {}},
                      {"DELAY", datatype::uint32, {-1}, {}},
                      {"WAIT", datatype::uint32, {1}, {}}};
    config_.outputs = {{"OUT", datatype::int32, {1}, {}}, {"IDX", datatype::uint32, {1}, {}}};
  }
  [[nodiscard]] const oip::model_config& config() const noexcept override { return config_; }

  static constexpr std::uint32_t max_wait_ms = 10'000;

  void execute(oip::inference_call call) override {
    const tensor* in = find_input(call.request(), "IN");
    const tensor* delay = find_input(call.request(), "DELAY");
    const tensor* wait = find_input(call.request(), "WAIT");
    if (in->element_count() != delay->element_count()) {
      return call.finish(status{oip::errc::invalid_argument,
                                fmt::format("expected DELAY to have {} elements as IN has, got {}",
                                            in->element_count(), delay->element_count())});
    }
    const std::uint32_t wait_ms = wait->at<std::uint32_t>(0);
    // The wait holds an executor worker, and nothing cancels it.
    if (wait_ms > max_wait_ms) {
      return call.finish(
          status{oip::errc::invalid_argument,
                 fmt::format("WAIT is at most {} milliseconds, got {}", max_wait_ms, wait_ms)});
    }
    responders_.start(std::move(call), [](oip::inference_call& c, const auto& pause) {
      const tensor& values = *find_input(c.request(), "IN");
      const tensor& delays = *find_input(c.request(), "DELAY");
      for (std::size_t i = 0; i < values.element_count(); ++i) {
        if (!pause(delays.at<std::uint32_t>(i))) {
          return c.finish(status{oip::errc::unavailable, "the request was cancelled"});
        }
        model_output out;
        for (result<tensor> t : {scalar<std::int32_t>("OUT", values.at<std::int32_t>(i)),
                                 scalar<std::uint32_t>("IDX", static_cast<std::uint32_t>(i))}) {
          if (!t) return c.finish(t.error());
          out.outputs.push_back(std::move(*t));
        }
        if (!c.send(std::move(out)).ok()) {
          return c.finish(status{oip::errc::unavailable, "the client went away"});
        }
      }
      c.finish();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds{wait_ms});
  }

 private:
  oip::model_config config_;
  responders responders_;
};

// Triton's square example: IN holds n; n responses, each OUT = n, then a flag-only final.
class square_model final : public oip::model {
 public:
  square_model() {
    config_.name = "square_int32";
    config_.platform = "square";
    config_.decoupled = true;
    config_.inputs = {{"IN", datatype::int32, {1}, {}}};
    config_.outputs = {{"OUT", datatype::int32, {1}, {}}};
  }
  [[nodiscard]] const oip::model_config& config() const noexcept override { return config_; }

  void execute(oip::inference_call call) override {
    const std::int32_t n = call.request().inputs.at(0).at<std::int32_t>(0);
    if (n < 0) {
      return call.finish(
          status{oip::errc::invalid_argument, fmt::format("IN must not be negative, got {}", n)});
    }
    responders_.start(std::move(call), [n](oip::inference_call& c, const auto& /*pause*/) {
      for (std::int32_t i = 0; i < n; ++i) {
        result<tensor> out = scalar<std::int32_t>("OUT", n);
        if (!out) return c.finish(out.error());
        if (!c.send(model_output{{std::move(*out)}, {}}).ok()) {
          return c.finish(status{oip::errc::unavailable, "the client went away"});
        }
      }
      c.finish();
    });
  }

 private:
  oip::model_config config_;
  responders responders_;
};

// Streams its prompt back a word at a time: `text_input` (BYTES) in, a `text_output` response
// per word, at most `max_tokens` of them (a request parameter, as generate and OpenAI clients
// send it), `delay_ms` apart; each response's parameters count the prompt's words and the words
// sent so far.
class text_stream_model final : public oip::model {
 public:
  text_stream_model() {
    config_.name = "text_stream";
    config_.platform = "text_stream";
    config_.decoupled = true;
    config_.inputs = {{"text_input", datatype::bytes, {1}, {}}};
    config_.outputs = {{"text_output", datatype::bytes, {1}, {}}};
  }
  [[nodiscard]] const oip::model_config& config() const noexcept override { return config_; }

  void execute(oip::inference_call call) override {
    const oip::parameters& p = call.request().parameters;
    result<std::int64_t> max_tokens = integer_parameter(p, "max_tokens", INT64_MAX);
    if (!max_tokens) return call.finish(max_tokens.error());
    result<std::int64_t> delay = integer_parameter(p, "delay_ms", 0);
    if (!delay) return call.finish(delay.error());
    if (*delay > 10'000) {
      return call.finish(status{oip::errc::invalid_argument, "delay_ms is at most 10000"});
    }
    const std::int64_t most = *max_tokens;
    const auto pause_ms = static_cast<std::uint32_t>(*delay);
    responders_.start(std::move(call), [most, pause_ms](oip::inference_call& c, const auto& pause) {
      const std::string_view prompt = *c.request().inputs.at(0).strings().begin();
      const std::vector<std::string_view> words = words_of(prompt);
      const auto count = static_cast<std::size_t>(
          std::min<std::int64_t>(most, static_cast<std::int64_t>(words.size())));
      for (std::size_t i = 0; i < count; ++i) {
        if (i != 0 && !pause(pause_ms)) {
          return c.finish(status{oip::errc::unavailable, "the request was cancelled"});
        }
        result<tensor> word = tensor::from_strings("text_output", {1}, std::span{&words[i], 1});
        if (!word) return c.finish(word.error());
        model_output out{{std::move(*word)}, {}};
        out.parameters.set("prompt_tokens", static_cast<std::int64_t>(words.size()));
        out.parameters.set("completion_tokens", static_cast<std::int64_t>(i + 1));
        out.parameters.set("finish_reason", std::string{i + 1 < words.size() ? "length" : "stop"});
        if (i + 1 < count) {
          if (!c.send(std::move(out)).ok()) {
            return c.finish(status{oip::errc::unavailable, "the client went away"});
          }
        } else {
          return c.finish(std::move(out));  // the last word is the final response
        }
      }
      c.finish();  // an empty prompt, or max_tokens 0: no response
    });
  }

 private:
  oip::model_config config_;
  responders responders_;
};

}  // namespace

std::shared_ptr<oip::model> repeat_int32() { return std::make_shared<repeat_model>(); }
std::shared_ptr<oip::model> square_int32() { return std::make_shared<square_model>(); }
std::shared_ptr<oip::model> text_stream() { return std::make_shared<text_stream_model>(); }

}  // namespace oip_serve
