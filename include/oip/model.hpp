#pragma once
/// \file
/// The model interface a host implements: what the model is (its configuration) and how it runs
/// (execute, possibly asynchronously, observing cancellation).

#include <oip/cancellation.hpp>
#include <oip/export.hpp>
#include <oip/infer.hpp>
#include <oip/metadata.hpp>
#include <oip/model_config.hpp>
#include <oip/parameters.hpp>
#include <oip/sequence.hpp>
#include <oip/status.hpp>
#include <oip/tensor.hpp>

#include <any>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace oip {

/// What a model produces for one request: its output tensors (all of them, or only the requested
/// ones: oip keeps those the client asked for) and response parameters.
struct model_output {
  std::vector<tensor> outputs;
  oip::parameters parameters;
  /// Outputs the model classified itself, for requested outputs that ask for `classification`:
  /// the tensor that `classify` would make, answered in place of the output (which the model may
  /// then leave out). A model on a GPU ranks there and copies back only the best classes
  /// (`classification_of_ranked`); oip classifies every other output itself.
  std::vector<tensor> classified = {};
};

class model;
class inference_call;

namespace detail {
struct call_state;
/// Runs `m.execute(call)`. A model that throws gets its request answered with a 500 carrying the
/// exception's message (when the call was still on its stack), and nothing else is affected.
OIP_EXPORT void execute_guarded(model& m, inference_call call) noexcept;
}  // namespace detail

/// One request handed to a model. Move-only; `finish` is called exactly once, from any thread, so
/// a model may complete on a thread or stream of its own without blocking the transport. A call
/// destroyed without `finish` answers the client with a 500 ("the model returned no result")
/// rather than leaving it waiting.
///
/// A decoupled model (`model_config::decoupled`) may first `send` any number of responses, from
/// any thread, each delivered to the client as it is sent; it then finishes with a last response,
/// with none (`finish()`: the flag-only final), or with an error that ends the stream.
class OIP_EXPORT inference_call {
 public:
  /// What the call ends with: its last response (none: a decoupled model finished without one),
  /// or the error that ended it.
  using completion = std::function<void(result<std::optional<model_output>>)>;
  /// Where a decoupled model's `send` delivers a response; it says why one was not delivered.
  using response_sender = std::function<status(model_output)>;

  inference_call(inference_request request, std::uint64_t version, cancellation cancel,
                 completion done, sequence_turn turn = {}, response_sender send = {});
  inference_call(inference_call&&) noexcept;
  inference_call& operator=(inference_call&&) noexcept;
  inference_call(const inference_call&) = delete;
  inference_call& operator=(const inference_call&) = delete;
  ~inference_call();

  /// The validated request: inputs match the model's configuration; tensor data may be views
  /// into the request body (kept alive by the request), or into device memory for a model that
  /// reads it there (`model_config::device_inputs`, `tensor::device()`).
  [[nodiscard]] const inference_request& request() const noexcept;
  [[nodiscard]] inference_request& request() noexcept;
  [[nodiscard]] std::uint64_t version() const noexcept;
  /// Whether the client went away or the request's deadline passed: a long-running model should
  /// look now and then, and may finish early with any status.
  [[nodiscard]] bool cancelled() const noexcept;
  /// For a sequence model: the request's control values and its sequence's state, which the model
  /// may read and replace (nothing else touches it until this call finishes). Null otherwise.
  [[nodiscard]] sequence_step* sequence() noexcept;
  [[nodiscard]] const sequence_step* sequence() const noexcept;

  /// For a decoupled model: sends one response now, not the last. Waits while the client has
  /// `limits::max_unsent_responses` responses of the request unread, so call it from a thread
  /// that may wait (never a transport's). An error, and nothing sent, when the call has finished,
  /// the client went away or the request was cancelled (the model should then stop and
  /// `finish`), the model is not decoupled, or the response does not fit the configuration.
  [[nodiscard]] status send(model_output response);

  /// Completes the call with outputs or an error (and lets the sequence's next request run). For a
  /// decoupled model, the outputs are its last response. Later calls are ignored.
  void finish(result<model_output> outcome);
  /// For a decoupled model: completes the call after the responses it sent, with no further one
  /// (Triton's flag-only final). A model that is not decoupled fails its request with this.
  void finish();

 private:
  friend void detail::execute_guarded(model& m, inference_call call) noexcept;
  explicit inference_call(std::unique_ptr<detail::call_state> state) noexcept;
  void complete(result<std::optional<model_output>> outcome);
  std::unique_ptr<detail::call_state> state_;
};

/// The model interface. `execute` runs on an executor worker thread, never on a transport thread,
/// unless the model's configuration sets `inline_execution`.
///
/// Example:
/// \code
///   class doubler : public oip::model {
///    public:
///     const oip::model_config& config() const noexcept override { return config_; }
///     void execute(oip::inference_call call) override { call.finish(run(call.request())); }
///    ...
///   };
/// \endcode
///
/// A model that completes elsewhere (its engine's thread, a device stream's callback) hands the
/// call over and returns at once; the call is move-only, so it travels in a `shared_ptr` through
/// callbacks that must be copyable (`std::function`):
/// \code
///   void execute(oip::inference_call call) override {
///     auto held = std::make_shared<oip::inference_call>(std::move(call));
///     engine_.enqueue([held] {  // runs later, on the engine's thread
///       if (held->cancelled()) {
///         return held->finish(oip::status{oip::errc::unavailable, "cancelled"});
///       }
///       held->finish(run(held->request()));
///     });
///   }
/// \endcode
///
/// A decoupled model (`config.decoupled = true`) streams its responses, then finishes:
/// \code
///   void execute(oip::inference_call call) override {
///     for (const std::string& token : generate(call.request())) {
///       if (!call.send(output_of(token)).ok()) break;  // the client went away
///     }
///     call.finish();
///   }
/// \endcode
class OIP_EXPORT model {
 public:
  model() = default;
  model(const model&) = delete;
  model& operator=(const model&) = delete;
  virtual ~model();

  [[nodiscard]] virtual const model_config& config() const noexcept = 0;
  [[nodiscard]] virtual bool ready() const noexcept { return true; }
  virtual void execute(inference_call call) = 0;
  /// For a sequence model: the sequence `id` is over (its END completed, a START restarted it, it
  /// was idle past `sequence_config::max_idle`, a request of it was cancelled before it ran, or
  /// the server stopped, or the model was unloaded or reloaded through `inference_service`), and
  /// `state` is what the model kept in it. Override to free what the state refers to elsewhere;
  /// called with no request of the sequence running. Never wait here for a load or unload
  /// (`inference_service::load`, `unload`, or their completions): an unload of this model may be
  /// waiting for this call to return. The waiting forms are refused here; start one with a
  /// completion and return.
  virtual void release_sequence(const sequence_id& id, std::any& state, sequence_release reason) {
    static_cast<void>(id);
    static_cast<void>(state);
    static_cast<void>(reason);
  }
};

/// A synchronous model from a function: the few lines that most CPU models need.
///
/// Example:
/// \code
///   auto identity = oip::make_model(config, [](const oip::inference_request& r)
///                                               -> oip::result<oip::model_output> {
///     oip::model_output out;
///     out.outputs.push_back(r.inputs[0]);
///     return out;
///   });
/// \endcode
///
/// A function that takes the `inference_call` instead sees what the request alone does not: a
/// long computation checks `call.cancelled()` between its steps, a sequence model reads
/// `call.sequence()`. It returns its outputs and leaves `finish` to the model (a call it
/// finished or moved away drops what it returns). A generic lambda is taken as a function of
/// the request.
/// \code
///   auto slow = oip::make_model(config, [](oip::inference_call& call)
///                                           -> oip::result<oip::model_output> {
///     for (int step = 0; step < 100; ++step) {
///       if (call.cancelled()) return oip::status{oip::errc::unavailable, "cancelled"};
///       refine(call.request(), step);
///     }
///     return finish(call.request());
///   });
/// \endcode
class OIP_EXPORT function_model : public model {
 public:
  using function = std::function<result<model_output>(const inference_request&)>;
  using call_function = std::function<result<model_output>(inference_call&)>;

  function_model(model_config config, function run);
  function_model(model_config config, call_function run)
      : config_{std::move(config)}, run_{std::move(run)} {}

  [[nodiscard]] const model_config& config() const noexcept override { return config_; }
  void execute(inference_call call) override;

 private:
  model_config config_;
  call_function run_;
};

/// A `function_model` of `run`: a function of the request, or of the `inference_call`.
template <class Run>
[[nodiscard]] std::shared_ptr<model> make_model(model_config config, Run run) {
  if constexpr (std::is_invocable_r_v<result<model_output>, Run&, const inference_request&>) {
    return std::make_shared<function_model>(std::move(config),
                                            function_model::function{std::move(run)});
  } else {
    static_assert(std::is_invocable_r_v<result<model_output>, Run&, inference_call&>,
                  "run takes a const inference_request& or an inference_call& and returns a "
                  "result<model_output>");
    return std::make_shared<function_model>(std::move(config),
                                            function_model::call_function{std::move(run)});
  }
}

}  // namespace oip
