#pragma once
// A repository, executor and inference service around a list of models, with a blocking infer:
// the tests that run reference models through the same path a transport takes.

#include <oip/executor.hpp>
#include <oip/inference_service.hpp>
#include <oip/model.hpp>
#include <oip/repository.hpp>

#include <cstdint>
#include <future>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

namespace oip::testing {

struct served {
  explicit served(const std::vector<std::shared_ptr<model>>& list, server_options options = {})
      : service{models, workers, std::move(options)} {
    for (const std::shared_ptr<model>& m : list) {
      if (status s = models.add(m); !s.ok()) failures.push_back(s);
    }
  }

  std::future<result<inference_response>> send(std::string_view name, inference_request request) {
    auto promise = std::make_shared<std::promise<result<inference_response>>>();
    auto future = promise->get_future();
    service.infer({.model = name, .cancel = {}}, std::move(request),
                  reply_to([promise](result<inference_response> response) {
                    promise->set_value(std::move(response));
                  }));
    return future;
  }

  result<inference_response> infer(std::string_view name, inference_request request) {
    return send(name, std::move(request)).get();
  }

  /// One request of sequence `id` to a sequence model with an INT32 [1] INPUT and OUTPUT: its
  /// OUTPUT value.
  result<std::int32_t> sequence_step(std::string_view model_name, std::int64_t id,
                                     std::int32_t value, bool start) {
    inference_request r;
    r.parameters.set("sequence_id", id);
    if (start) r.parameters.set("sequence_start", true);
    r.inputs.push_back(
        *tensor::from_values<std::int32_t>("INPUT", {1}, std::span<const std::int32_t>(&value, 1)));
    result<inference_response> out = infer(model_name, std::move(r));
    if (!out) return std::move(out).error();
    return out->outputs.at(0).at<std::int32_t>(0);
  }

  model_repository models;
  executor workers{executor_options{4, 4096}};
  inference_service service{models, workers};
  std::vector<status> failures;
};

}  // namespace oip::testing
