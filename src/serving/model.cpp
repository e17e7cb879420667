#include <oip/model.hpp>

#include <atomic>
#include <exception>
#include <memory>
#include <string_view>

#include <fmt/format.h>

namespace oip {

namespace detail {

// Where a call goes when the model throws with the call still on its stack: `execute_guarded`
// finishes it with the exception's message instead of "no result".
struct unwound_call {
  std::atomic<bool> armed{true};
  int exceptions = 0;  // std::uncaught_exceptions() when the model was called
  std::unique_ptr<call_state> state;
};

struct call_state {
  inference_request request;
  std::uint64_t version = 0;
  cancellation cancel;
  inference_call::completion done;
  sequence_turn turn;
  inference_call::response_sender send;
  std::atomic<bool> finished{false};  // a model may race two threads to finish
  std::shared_ptr<unwound_call> unwound = nullptr;
};

}  // namespace detail

inference_call::inference_call(inference_request request, std::uint64_t version,
                               cancellation cancel, completion done, sequence_turn turn,
                               response_sender send)
    : state_{new detail::call_state{std::move(request), version, std::move(cancel), std::move(done),
                                    std::move(turn), std::move(send)}} {}

inference_call::inference_call(inference_call&&) noexcept = default;

inference_call& inference_call::operator=(inference_call&& other) noexcept {
  if (this != &other) {
    if (state_ && !state_->finished.load()) {
      finish(status{errc::internal, "the model returned no result"});
    }
    state_ = std::move(other.state_);
  }
  return *this;
}

inference_call::~inference_call() {
  if (!state_ || state_->finished.load()) return;
  if (const std::shared_ptr<detail::unwound_call> slot = state_->unwound;
      slot && slot->armed.load() && std::uncaught_exceptions() > slot->exceptions) {
    slot->state = std::move(state_);  // the model threw: execute_guarded reports why
    return;
  }
  finish(status{errc::internal, "the model returned no result"});
}

inference_call::inference_call(std::unique_ptr<detail::call_state> state) noexcept
    : state_{std::move(state)} {}

void detail::execute_guarded(model& m, inference_call call) noexcept {
  auto slot = std::make_shared<unwound_call>();
  slot->exceptions = std::uncaught_exceptions();
  call.state_->unwound = slot;
  // `why()` makes the answer; where even that fails, the call's destructor answers.
  const auto report_status = [&](const auto& why) {
    slot->armed = false;
    if (!slot->state) return;  // the model kept the call (it finishes, or its destructor does)
    inference_call unwound{std::move(slot->state)};
    try {
      unwound.finish(why());
    } catch (...) {  // NOLINT(bugprone-empty-catch): the destructor answers instead
    }
  };
  const auto report = [&](std::string_view what) {
    report_status([&] {
      return status{errc::internal,
                    fmt::format("model '{}' failed: {}", m.config().name, what.substr(0, 1000))};
    });
  };
  try {
    m.execute(std::move(call));
    slot->armed = false;
  } catch (const std::bad_alloc&) {
    report_status(
        [&] { return out_of_memory(fmt::format("running model '{}'", m.config().name)); });
  } catch (const std::exception& e) {
    report(e.what());
  } catch (...) {
    report("it threw an exception");
  }
}

const inference_request& inference_call::request() const noexcept { return state_->request; }
inference_request& inference_call::request() noexcept { return state_->request; }
std::uint64_t inference_call::version() const noexcept { return state_->version; }
bool inference_call::cancelled() const noexcept { return state_->cancel.cancelled(); }
sequence_step* inference_call::sequence() noexcept {
  return state_->turn ? &state_->turn.step() : nullptr;
}
const sequence_step* inference_call::sequence() const noexcept {
  return state_->turn ? &state_->turn.step() : nullptr;
}

status inference_call::send(model_output response) {
  if (!state_ || state_->finished.load()) {
    return status{errc::failed_precondition, "the call has finished: the response was not sent"};
  }
  if (!state_->send) {
    return status{errc::failed_precondition,
                  "send is for decoupled models; this model answers with finish"};
  }
  return state_->send(std::move(response));
}

void inference_call::finish(result<model_output> outcome) {
  if (!outcome) return complete(std::move(outcome).error());
  complete(std::optional<model_output>{std::move(*outcome)});
}

void inference_call::finish() {
  if (state_ && !state_->send) {
    return complete(status{errc::internal, "the model returned no result"});
  }
  complete(std::optional<model_output>{});
}

void inference_call::complete(result<std::optional<model_output>> outcome) {
  if (!state_ || state_->finished.exchange(true)) return;
  // The completion may release the last reference to the model: nothing of `this` is used after.
  // The reply is made before the sequence's next request may run, which keeps replies in order.
  completion done = std::move(state_->done);
  sequence_turn turn = std::move(state_->turn);
  if (done) done(std::move(outcome));
  turn.release();
}

model::~model() = default;

function_model::function_model(model_config config, function run)
    : config_{std::move(config)}, run_{[run = std::move(run)](inference_call& call) {
        return run(call.request());
      }} {}

// No cancellation check of its own: the service has just made it, and a request cancelled there
// ends its sequence and is counted by its reason, which a refusal from here would not do.
void function_model::execute(inference_call call) {
  result<model_output> outcome = run_(call);
  call.finish(std::move(outcome));
}

}  // namespace oip
