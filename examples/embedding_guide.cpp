// docs/embedding.md's code, whole: every ```cpp block of the guide is a part of this file (the
// `embedding_guide_in_sync` test checks it), and ctest runs it. A change to the model interface
// that breaks the guide breaks this build.

#include <oip/executor.hpp>
#include <oip/http_handler.hpp>
#include <oip/in_process_client.hpp>
#include <oip/inference_service.hpp>
#include <oip/log.hpp>
#include <oip/model.hpp>
#include <oip/repository.hpp>
#include <oip/tensor.hpp>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace {

int failures = 0;
void expect(bool holds, const char* what) {
  if (!holds) {
    std::fprintf(stderr, "embedding_guide: %s does not hold\n", what);
    ++failures;
  }
}
#define EXPECT(condition) expect((condition), #condition)

// Y = 2 * X, row by row: FP32 [batch, 4] in, FP32 [batch, 4] out.
oip::model_config double_config() {
  oip::model_config config;
  config.name = "double";
  config.max_batch_size = 8;  // > 0: every request's first dimension is its batch size...
  config.inputs = {{"X", oip::datatype::fp32, {4}, {}}};   // ...so dims leave it out: [4]
  config.outputs = {{"Y", oip::datatype::fp32, {4}, {}}};  // is [batch, 4] on the wire
  return config;
}

oip::result<oip::model_output> run_double(const oip::inference_request& request) {
  const oip::tensor& x = request.inputs[0];  // checked against the configuration already
  std::vector<float> y(x.element_count());
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = 2 * x.at<float>(i);
  oip::result<oip::tensor> out = oip::tensor::from_values<float>("Y", x.shape(), y);
  if (!out) return out.error();  // an error here fails the request with its status
  oip::model_output produced;
  produced.outputs.push_back(std::move(*out));
  return produced;
}

// Keeps oip's log lines instead of writing them to stderr.
struct captured_log : oip::log_sink {
  void write(oip::log_level /*level*/, std::string_view line) noexcept override {
    const std::lock_guard lock{mutex};
    lines.emplace_back(line);
  }
  std::mutex mutex;
  std::vector<std::string> lines;
};

// Streams N, N-1, ..., 1, a response each as it is made: a decoupled model.
class countdown final : public oip::model {
 public:
  countdown() {
    config_.name = "countdown";
    config_.decoupled = true;  // any number of responses to a request, on a stream
    config_.inputs = {{"N", oip::datatype::int32, {1}, {}}};
    config_.outputs = {{"LEFT", oip::datatype::int32, {1}, {}}};
  }
  const oip::model_config& config() const noexcept override { return config_; }
  void execute(oip::inference_call call) override {
    for (std::int32_t left = call.request().inputs[0].at<std::int32_t>(0); left > 0; --left) {
      oip::model_output out;
      out.outputs.push_back(*oip::tensor::from_values<std::int32_t>("LEFT", {1}, {&left, 1}));
      // Waits while the client has many responses unread; fails once it went away.
      if (oip::status sent = call.send(std::move(out)); !sent.ok()) return call.finish(sent);
    }
    call.finish();  // the end, with no last response: the stream's final flag alone
  }

 private:
  oip::model_config config_;
};

}  // namespace

int main() {
  auto log = std::make_shared<captured_log>();
  oip::set_log_sink(log);  // for the whole process; set_log_sink(nullptr) restores stderr

  oip::model_repository models;  // oip/repository.hpp
  if (oip::status s = models.add(oip::make_model(double_config(), run_double)); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 1;
  }
  oip::executor workers{{.threads = 2, .queue_capacity = 64}};  // oip/executor.hpp
  oip::server_options options;                                  // oip/inference_service.hpp
  options.name = "my_service";
  oip::inference_service service{models, workers, options};

  oip::http_handler handler{service};  // the routes, without a socket
  oip::in_process_client client{handler};

  oip::inference_request request;
  const std::vector<float> x{1, 2, 3, 4, 5, 6, 7, 8};
  request.inputs.push_back(*oip::tensor::from_values<float>("X", {2, 4}, x));  // a batch of 2
  oip::result<oip::inference_response> r = client.infer("double", request);
  if (!r) {
    std::fprintf(stderr, "%s\n", r.error().message().c_str());
    return 1;
  }
  EXPECT(r->outputs[0].name() == "Y");
  EXPECT(r->outputs[0].at<float>(7) == 16.0F);

  // Without the batch dimension: a 400, in Triton's words.
  oip::inference_request flat;
  flat.inputs.push_back(*oip::tensor::from_values<float>("X", {4}, {x.data(), 4}));
  oip::result<oip::inference_response> refused = client.infer("double", flat);
  EXPECT(!refused.ok());
  EXPECT(refused.error().code() == oip::errc::invalid_argument);
  EXPECT(refused.error().http_status() == 400);
  EXPECT(refused.error().message().starts_with(
      "unexpected shape for input 'X' for model 'double'. Expected [-1,4], got [4]. NOTE: "
      "Setting a non-zero max_batch_size in the model config requires a batch dimension to be "
      "prepended to each input shape."));

  // A decoupled model, its responses read as server-sent events.
  EXPECT(models.add(std::make_shared<countdown>()).ok());
  const oip::http_response events =
      client.send("POST", "/v2/models/countdown/generate_stream", R"({"N":3})");
  EXPECT(events.status == 200);
  const std::string body = events.body();
  const std::size_t three = body.find(R"("LEFT":3)");
  const std::size_t one = body.find(R"("LEFT":1)");
  EXPECT(three != std::string::npos && one != std::string::npos && three < one);
  EXPECT(client.infer("countdown", {}).error().http_status() == 400);  // not on /infer

  EXPECT(!log->lines.empty());  // the refused request's line
  oip::set_log_sink(nullptr);

  std::printf("%d passed, %d failed\n", failures == 0 ? 1 : 0, failures == 0 ? 0 : 1);
  return failures == 0 ? 0 : 1;
}
