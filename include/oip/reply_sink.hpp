#pragma once
/// \file
/// Where `inference_service` delivers the replies to one request: a transport implements it and
/// turns what it receives into bytes.

#include <oip/cancellation.hpp>
#include <oip/export.hpp>
#include <oip/infer.hpp>
#include <oip/status.hpp>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

namespace oip {

/// Whether a response is its request's last (Triton's final-response flag): a model that is not
/// decoupled gives one response, the final one; a decoupled model's responses are not final but
/// the one it finishes with, if any.
enum class response_flag : std::uint8_t { none, final_response };

/// The responses that a transport was given and has not yet written: it counts each in (`add`)
/// and out (`written`), and closes the backlog when its client goes away. A decoupled model's
/// `inference_call::send` waits while the backlog is at its limit, so that a slow reader holds the
/// model back instead of the server's memory growing. Thread-safe.
class OIP_EXPORT response_backlog {
 public:
  void add() noexcept;
  void written() noexcept;
  /// The client is gone: senders waiting for room stop, and later ones do not wait.
  void close() noexcept;
  [[nodiscard]] std::size_t held() const noexcept;

  /// Waits until fewer than `limit` responses are held; an error once the backlog is closed,
  /// `cancel` is cancelled (or past its deadline), or no response has been written for `patience`
  /// (counted from the later of the wait's start and the last response written) meanwhile.
  [[nodiscard]] status wait_for_room(
      std::size_t limit, const cancellation& cancel,
      std::chrono::milliseconds patience = std::chrono::milliseconds::max());

 private:
  mutable std::mutex mutex_;
  std::condition_variable room_;
  std::size_t held_ = 0;
  bool closed_ = false;
  std::chrono::steady_clock::time_point last_written_;
};

/// The replies to one request, as a stream: each response the model gives, then the end. A model
/// that is not decoupled answers once, so its request gets one `on_response` (the final one) and
/// then `on_complete` with an ok status, or `on_complete` with an error alone. A decoupled model's
/// request gets any number of responses, the last of them perhaps final, then `on_complete`: an
/// error after responses ends the stream with it. The service calls it from any thread, one call
/// at a time, and never after `on_complete`; the statistics and the log line are done before
/// `on_complete`, and the trace too when the transport takes part in it (`transport_trace`);
/// otherwise the trace is written once `on_complete` returns.
///
/// Example:
/// \code
///   struct print_reply final : oip::reply_sink {
///     void on_response(oip::inference_response response, oip::response_flag) override {
///       std::puts(oip::encode_response(response)->json.c_str());
///     }
///     void on_complete(const oip::status& outcome) override {
///       if (!outcome.ok()) std::puts(outcome.to_json().c_str());
///     }
///   };
/// \endcode
class reply_sink {
 public:
  reply_sink() = default;
  reply_sink(const reply_sink&) = delete;
  reply_sink& operator=(const reply_sink&) = delete;
  virtual ~reply_sink() = default;

  /// The request is decoded and goes on to its model: a failure from now on is the request's own
  /// (a transport that streams may start its reply here); one before is a refusal of the call.
  /// Called on the thread that called `infer`, before it returns.
  virtual void on_admitted() {}
  /// A response, its outputs in shared memory already written to their regions (it names them in
  /// `shared_memory_outputs`); `flag` says whether it is the request's last.
  virtual void on_response(inference_response response, response_flag flag) = 0;
  /// The end of the request: ok after its responses (a decoupled model's may have had no final
  /// one: this is then the flag-only final), or why it failed.
  virtual void on_complete(const status& outcome) = 0;
  /// For a transport that writes responses after `on_response` returns: the backlog it keeps of
  /// them, which a decoupled model's sends wait on. None: each response is written (or held by
  /// the caller) when `on_response` returns.
  [[nodiscard]] virtual response_backlog* backlog() noexcept { return nullptr; }

 protected:
  reply_sink(reply_sink&&) = default;
  reply_sink& operator=(reply_sink&&) = default;
};

/// A sink for a request that expects one response: `done` is called once, with the response as
/// it arrives (a decoupled model's, once its request has ended), or with the error that ended the
/// request. A decoupled model's request that gives no response or more than one fails (as
/// Triton's generate route does). For a host
/// that calls the service itself.
///
/// Example:
/// \code
///   service.infer({.model = "simple", .cancel = {}}, std::move(request),
///                 oip::reply_to([](oip::result<oip::inference_response> r) { /* ... */ }));
/// \endcode
[[nodiscard]] inline std::shared_ptr<reply_sink> reply_to(
    std::function<void(result<inference_response>)> done) {
  struct callback final : reply_sink {
    explicit callback(std::function<void(result<inference_response>)> f) : done{std::move(f)} {}
    void on_response(inference_response r, response_flag flag) override {
      ++responses;
      if (responses > 1) return;
      // The usual case, a model's one response, is answered at once; a decoupled model's first
      // is kept until its request has ended with no other.
      if (flag == response_flag::final_response) {
        answered = true;
        return done(std::move(r));
      }
      kept = std::move(r);
    }
    void on_complete(const status& outcome) override {
      if (answered) return;
      if (!outcome.ok()) return done(outcome);
      if (responses == 1) return done(std::move(*kept));
      done(status{errc::invalid_argument,
                  responses == 0
                      ? "the request completed without a response"
                      : "the model gave more than one response to a request that expects one"});
    }
    std::function<void(result<inference_response>)> done;
    std::optional<inference_response> kept;
    std::size_t responses = 0;
    bool answered = false;
  };
  return std::make_shared<callback>(std::move(done));
}

}  // namespace oip
