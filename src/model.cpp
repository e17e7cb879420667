#include <oip/model.hpp>

#include <atomic>

namespace oip {

namespace detail {
struct call_state {
  inference_request request;
  std::uint64_t version = 0;
  cancellation cancel;
  inference_call::completion done;
  sequence_turn turn;
  std::atomic<bool> finished{false};  // a model may race two threads to finish
};
}  // namespace detail

inference_call::inference_call(inference_request request, std::uint64_t version,
                               cancellation cancel, completion done, sequence_turn turn)
    : state_{new detail::call_state{std::move(request), version, std::move(cancel), std::move(done),
                                    std::move(turn)}} {}

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
  if (state_ && !state_->finished.load())
    finish(status{errc::internal, "the model returned no result"});
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

void inference_call::finish(result<model_output> outcome) {
  if (!state_ || state_->finished.exchange(true)) return;
  // The completion may release the last reference to the model: nothing of `this` is used after.
  // The reply is made before the sequence's next request may run, which keeps replies in order.
  completion done = std::move(state_->done);
  sequence_turn turn = std::move(state_->turn);
  if (done) done(std::move(outcome));
  turn.release();
}

model::~model() = default;

void function_model::execute(inference_call call) {
  if (call.cancelled()) {
    call.finish(status{errc::unavailable, "the request was cancelled before the model ran"});
    return;
  }
  call.finish(run_(call.request()));
}

}  // namespace oip
