// The OpenAI-compatible front end's overhead, beside the same model called through Triton's
// generate_stream, in one run: the same decoupled model (one response per word of its prompt),
// the same handler, no transport. `words:1` is the cost of a request with one chunk; the
// difference between `words:64` and `words:1`, over 63, is the cost of each further chunk.
//
//   build/release/benchmarks/openai_bench --benchmark_repetitions=9
//     --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true
// (one command line)

#include <oip/executor.hpp>
#include <oip/http_handler.hpp>
#include <oip/inference_service.hpp>
#include <oip/model.hpp>
#include <oip/openai.hpp>
#include <oip/repository.hpp>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include <benchmark/benchmark.h>

namespace {

// Streams its prompt back one word (and the space before it) per response, as text_stream does,
// on the executor's thread.
class words_model final : public oip::model {
 public:
  words_model() {
    config_.name = "words";
    config_.decoupled = true;
    config_.inputs = {{"text_input", oip::datatype::bytes, {1}, {}}};
    config_.outputs = {{"text_output", oip::datatype::bytes, {1}, {}}};
  }
  [[nodiscard]] const oip::model_config& config() const noexcept override { return config_; }
  void execute(oip::inference_call call) override {
    const std::string_view text = *call.request().inputs[0].strings().begin();
    std::size_t start = 0;
    std::int64_t sent = 0;
    while (start < text.size()) {
      const std::size_t end = std::min(text.find(' ', start + 1), text.size());
      const std::string_view word = text.substr(start, end - start);
      oip::model_output out;
      out.outputs.push_back(*oip::tensor::from_strings("text_output", {1}, std::span{&word, 1}));
      out.parameters.set("completion_tokens", ++sent);
      if (!call.send(std::move(out)).ok()) {
        return call.finish(oip::status{oip::errc::unavailable, "gone"});
      }
      start = end;
    }
    call.finish();
  }

 private:
  oip::model_config config_;
};

struct served {
  served() {
    static_cast<void>(repository.add(std::make_shared<words_model>()));
    oip::openai_options openai;
    openai.models.push_back(oip::openai_model{.id = "words", .model = "words"});
    handler = std::make_unique<oip::http_handler>(
        service,
        oip::http_routes{
            .protocol = true, .metrics = false, .gauges = {}, .openai = std::move(openai)});
  }
  oip::model_repository repository;
  oip::executor workers{{1, 64}};
  oip::inference_service service{repository, workers};
  std::unique_ptr<oip::http_handler> handler;
};

served& server() {
  static served instance;
  return instance;
}

std::string prompt_of(std::int64_t words) {
  std::string prompt = "w";
  for (std::int64_t i = 1; i < words; ++i) prompt += " w";
  return prompt;
}

void run(benchmark::State& state, const std::string& target, const std::string& body) {
  served& s = server();
  for (auto _ : state) {
    oip::http_response reply =
        s.handler->handle({"POST", target, {}, oip::buffer::from_string(body)});
    if (reply.status != 200) {
      state.SkipWithError("the request failed");
      return;
    }
    benchmark::DoNotOptimize(reply.head.data());
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}

void generate_stream(benchmark::State& state) {
  run(state, "/v2/models/words/generate_stream",
      R"({"text_input":")" + prompt_of(state.range(0)) + R"("})");
}

void openai_stream(benchmark::State& state) {
  run(state, "/v1/completions",
      R"({"model":"words","stream":true,"prompt":")" + prompt_of(state.range(0)) + R"("})");
}

void openai_completion(benchmark::State& state) {
  run(state, "/v1/completions",
      R"({"model":"words","prompt":")" + prompt_of(state.range(0)) + R"("})");
}

}  // namespace

BENCHMARK(generate_stream)->ArgName("words")->Arg(1)->Arg(64)->UseRealTime();
BENCHMARK(openai_stream)->ArgName("words")->Arg(1)->Arg(64)->UseRealTime();
BENCHMARK(openai_completion)->ArgName("words")->Arg(1)->Arg(64)->UseRealTime();

BENCHMARK_MAIN();
