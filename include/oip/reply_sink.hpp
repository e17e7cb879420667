#pragma once
/// \file
/// Where `inference_service` delivers the replies to one request: a transport implements it and
/// turns what it receives into bytes.

#include <oip/infer.hpp>
#include <oip/status.hpp>

#include <functional>
#include <memory>
#include <utility>

namespace oip {

/// The replies to one request, as a stream: each response the model gives, then the end. A model
/// of today answers once, so a request gets one `on_response` and then `on_complete` with an ok
/// status, or `on_complete` with an error alone. The service calls it from any thread, one call at
/// a time, and never after `on_complete`; the statistics and the log line are done before
/// `on_complete`, and the trace too when the transport takes part in it (`transport_trace`);
/// otherwise the trace is written once `on_complete` returns.
///
/// Example:
/// \code
///   struct print_reply final : oip::reply_sink {
///     void on_response(oip::inference_response response) override {
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
  /// `shared_memory_outputs`).
  virtual void on_response(inference_response response) = 0;
  /// The end of the request: ok after its responses, or why it failed.
  virtual void on_complete(const status& outcome) = 0;

 protected:
  reply_sink(reply_sink&&) = default;
  reply_sink& operator=(reply_sink&&) = default;
};

/// A sink for a request that expects one response: `done` is called once, with the response as it
/// arrives, or with the error that ends the request without one. For a host that calls the service
/// itself.
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
    void on_response(inference_response r) override {
      answered = true;
      done(std::move(r));
    }
    void on_complete(const status& outcome) override {
      if (answered) return;
      done(outcome.ok() ? status{errc::internal, "the request completed without a response"}
                        : outcome);
    }
    std::function<void(result<inference_response>)> done;
    bool answered = false;
  };
  return std::make_shared<callback>(std::move(done));
}

}  // namespace oip
