#pragma once
// Internal: the OpenAI-compatible front end (`oip/openai.hpp`), the part of `http_handler` that
// answers `/v1/...`. Each request becomes inferences of the service, so that limits, statistics,
// metrics, logs and cancellation are those of every other route.

#include <oip/access.hpp>
#include <oip/http_handler.hpp>
#include <oip/inference_service.hpp>
#include <oip/openai.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

namespace oip::detail {

class openai_front_end {
 public:
  using completion = std::function<void(http_response)>;
  // The request's body with its Content-Encoding undone; with a lease, counted in the budget
  // until the lease goes.
  using body_reader = std::function<result<buffer>(memory_budget::lease*)>;

  openai_front_end(inference_service& service, openai_options options);

  // An error in OpenAI's shape, with its status.
  [[nodiscard]] static http_response error_of(const status& error);
  // Whether a target is one of the front end's (`/v1`, `/v1/...`; the query aside).
  [[nodiscard]] static bool serves(std::string_view target) noexcept;

  // `path`: the target's segments, "v1" first. `done` is called once.
  void handle(const http_request& request, std::span<const std::string> path,
              const body_reader& body, completion& done, const cancellation& cancel) const;

 private:
  struct state;
  std::shared_ptr<const state> state_;
};

}  // namespace oip::detail
