#pragma once
// A decoupled model for the fuzzers that reach a server: bounded, so that no input makes a stream
// that a fuzzer's client would wait on for long. IN INT32 [-1]: a response per element
// (OUT = the element) for up to 16 elements (more is a 400); a stream of a multiple of 3 elements
// ends with an error after its responses, the others with the flag-only final.

#include <oip/model.hpp>
#include <oip/tensor.hpp>

#include <cstdint>
#include <memory>
#include <span>

namespace oip_fuzz {

class stream_model final : public oip::model {
 public:
  stream_model() {
    config_.name = "fuzz_stream";
    config_.decoupled = true;
    config_.inputs = {{"IN", oip::datatype::int32, {-1}, {}}};
    config_.outputs = {{"OUT", oip::datatype::int32, {1}, {}}};
  }
  [[nodiscard]] const oip::model_config& config() const noexcept override { return config_; }
  void execute(oip::inference_call call) override {
    const oip::tensor& in = call.request().inputs.at(0);
    if (in.element_count() > 16) {
      return call.finish(oip::status{oip::errc::invalid_argument, "IN has more than 16 elements"});
    }
    for (std::size_t i = 0; i < in.element_count(); ++i) {
      const std::int32_t value = in.at<std::int32_t>(i);
      oip::result<oip::tensor> out = oip::tensor::from_values<std::int32_t>(
          "OUT", {1}, std::span<const std::int32_t>{&value, 1});
      if (!out) return call.finish(out.error());
      if (!call.send(oip::model_output{{std::move(*out)}, {}}).ok()) {
        return call.finish(oip::status{oip::errc::unavailable, "the client went away"});
      }
    }
    if (in.element_count() != 0 && in.element_count() % 3 == 0) {
      return call.finish(oip::status{oip::errc::invalid_argument, "a multiple of 3 elements"});
    }
    call.finish();
  }

 private:
  oip::model_config config_;
};

}  // namespace oip_fuzz
