// The OpenAI-compatible front end through the HTTP handler: the mapping's inputs and fields,
// access (keys, restricted APIs), what is refused and how, text cut at stop strings and never
// inside a character, and embeddings over many texts. tests/integration/openai_test.py drives
// the same front end through OpenAI's own Python package over oip-serve's socket.

#include "serving/detail/stop_strings.hpp"
#include "serving_support.hpp"

#include <oip/http_handler.hpp>
#include <oip/in_process_client.hpp>
#include <oip/openai.hpp>

#include <atomic>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

namespace {

using oip::datatype;

// Streams the pieces of its request parameter `pieces` (separated by '|'), or of its prompt cut
// every `bytes_per_piece` bytes, a response each.
class piece_streamer final : public oip::model {
 public:
  piece_streamer() {
    config_.name = "pieces";
    config_.decoupled = true;
    config_.inputs = {{"text_input", datatype::bytes, {1}, {}}};
    config_.outputs = {{"text_output", datatype::bytes, {1}, {}}};
  }
  [[nodiscard]] const oip::model_config& config() const noexcept override { return config_; }
  void execute(oip::inference_call call) override {
    const std::string* all = call.request().parameters.get<std::string>("pieces");
    const std::int64_t* cut = call.request().parameters.get<std::int64_t>("bytes_per_piece");
    std::string_view rest = all != nullptr ? std::string_view{*all} : std::string_view{};
    if (cut != nullptr) rest = *call.request().inputs.at(0).strings().begin();
    while (!rest.empty()) {
      const std::size_t end = cut != nullptr ? static_cast<std::size_t>(*cut) : rest.find('|');
      const std::string_view piece = rest.substr(0, std::min(end, rest.size()));
      rest.remove_prefix(std::min(piece.size() + (cut != nullptr ? 0 : 1), rest.size()));
      oip::model_output out;
      out.outputs.push_back(*oip::tensor::from_strings("text_output", {1}, std::span{&piece, 1}));
      if (!call.send(std::move(out)).ok()) {
        sends_failed.fetch_add(1);
        return call.finish(oip::status{oip::errc::unavailable, "stopped"});
      }
    }
    call.finish();
  }
  std::atomic<int> sends_failed{0};

 private:
  oip::model_config config_;
};

// Echoes its prompt; takes `max_tokens` (INT32 [1]) and `temperature` (FP32 [1]) as inputs and
// reports them in its text.
std::shared_ptr<oip::model> make_fields_echo() {
  oip::model_config c;
  c.name = "fields";
  c.max_batch_size = 4;
  c.inputs = {{"prompt", datatype::bytes, {1}, {}},
              {"limit", datatype::int32, {1}, {}},
              {"heat", datatype::fp32, {1}, {}}};
  c.outputs = {{"answer", datatype::bytes, {1}, {}}};
  return oip::make_model(std::move(c), [](const oip::inference_request& r) {
    std::string text;
    std::int32_t limit = 0;
    float heat = 0;
    for (const oip::tensor& t : r.inputs) {
      if (t.name() == "prompt") text = std::string{*t.strings().begin()};
      if (t.name() == "limit") limit = t.at<std::int32_t>(0);
      if (t.name() == "heat") heat = t.at<float>(0);
    }
    const std::int64_t* seed = r.parameters.get<std::int64_t>("seed");
    const std::string answer =
        fmt::format("{} limit={} heat={} seed={}", text, limit, heat, seed != nullptr ? *seed : -1);
    const std::string_view view = answer;
    oip::model_output out;
    out.outputs.push_back(*oip::tensor::from_strings("answer", {1, 1}, std::span{&view, 1}));
    return oip::result<oip::model_output>{std::move(out)};
  });
}

// An FP32 [3] vector of the text's length, the first letter and 1; fails on "fail".
std::shared_ptr<oip::model> make_lengths() {
  oip::model_config c;
  c.name = "lengths";
  c.inline_execution = true;  // answers on the caller's thread: the batch must not recurse
  c.inputs = {{"text_input", datatype::bytes, {1}, {}}};
  c.outputs = {{"embedding", datatype::fp32, {3}, {}}};
  return oip::make_model(std::move(c), [](const oip::inference_request& r) {
    const std::string_view text = *r.inputs[0].strings().begin();
    if (text == "fail") {
      return oip::result<oip::model_output>{
          oip::status{oip::errc::invalid_argument, "this model refuses 'fail'"}};
    }
    const std::vector<float> v{static_cast<float>(text.size()),
                               text.empty() ? 0.0F : static_cast<float>(text[0]), 1.0F};
    oip::model_output out;
    out.outputs.push_back(*oip::tensor::from_values<float>("embedding", {3}, v));
    return oip::result<oip::model_output>{std::move(out)};
  });
}

struct front_end {
  oip::model_repository repository;
  std::shared_ptr<piece_streamer> pieces = std::make_shared<piece_streamer>();
  oip::executor workers{{2, 64}};
  std::unique_ptr<oip::inference_service> service;
  std::unique_ptr<oip::http_handler> handler;
  std::unique_ptr<oip::in_process_client> client;

  explicit front_end(oip::openai_options options = {}, oip::server_options server = {}) {
    REQUIRE(repository.add(pieces).ok());
    REQUIRE(repository.add(make_fields_echo()).ok());
    REQUIRE(repository.add(make_lengths()).ok());
    REQUIRE(repository.add(oip::testing::make_simple()).ok());
    oip::openai_model text{.id = "pieces", .model = "pieces"};
    oip::openai_model fields{.id = "fields", .model = "fields"};
    fields.prompt_input = "prompt";
    fields.text_output = "answer";
    fields.field_inputs = {{"max_tokens", "limit", std::int64_t{7}}, {"temperature", "heat", {}}};
    oip::openai_model lengths{.id = "lengths", .model = "lengths"};
    lengths.serves = oip::openai_model::kind::embedding;
    oip::openai_model broken{.id = "broken", .model = "simple"};  // no BYTES text_input
    oip::openai_model slashed{.id = "org/pieces", .model = "pieces"};
    options.models = {text, fields, lengths, broken, slashed};
    service = std::make_unique<oip::inference_service>(repository, workers, std::move(server));
    handler = std::make_unique<oip::http_handler>(
        *service,
        oip::http_routes{
            .protocol = true, .metrics = false, .gauges = {}, .openai = std::move(options)});
    client = std::make_unique<oip::in_process_client>(*handler);
  }

  oip::http_response post(std::string_view route, const std::string& body,
                          std::vector<oip::http_header> headers = {}) const {
    return client->send("POST", fmt::format("/v1/{}", route), body, std::move(headers));
  }
};

void check_error(const oip::http_response& r, int status, std::string_view words) {
  CHECK(r.status == status);
  CHECK(r.header("Content-Type") == "application/json");
  const std::string body = r.body();
  CHECK(body.starts_with(R"({"error":{"message":)"));
  CHECK_MESSAGE(body.find(words) != std::string::npos, body);
}

}  // namespace

TEST_CASE("the mapping's fields go to its inputs, with their defaults and datatypes") {
  front_end f;
  oip::http_response r = f.post("completions", R"({"model":"fields","prompt":"hi","max_tokens":3,)"
                                               R"("temperature":0.5,"seed":42})");
  REQUIRE(r.status == 200);
  CHECK(r.body().find(R"("text":"hi limit=3 heat=0.5 seed=42")") != std::string::npos);
  // Left out: the mapping's default for max_tokens; temperature has none, so its input is left
  // out too and the model (which needs all three) refuses the request.
  r = f.post("completions", R"({"model":"fields","prompt":"hi","temperature":1})");
  REQUIRE(r.status == 200);
  CHECK(r.body().find("limit=7") != std::string::npos);
  check_error(f.post("completions", R"({"model":"fields","prompt":"hi"})"), 400,
              "expected 3 inputs");
  check_error(f.post("completions",
                     R"({"model":"fields","prompt":"hi","max_tokens":3000000000,"temperature":1})"),
              400, "'max_tokens' must be an integer from");
  check_error(f.post("completions", R"({"model":"fields","prompt":"hi","temperature":1e300})"), 400,
              "'temperature' must be a number within FP32's range");
  // A message's text parts are its lines.
  r = f.post("chat/completions",
             R"({"model":"fields","max_tokens":1,"temperature":0,"messages":[{"role":"user",)"
             R"("content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]})");
  REQUIRE(r.status == 200);
  CHECK(r.body().find(R"(user: a\nb\nassistant: limit=1 heat=0)") != std::string::npos);
  // A mapping onto a model without the inputs it names is the host's mistake: a 500.
  check_error(f.post("completions", R"({"model":"broken","prompt":"hi"})"), 500,
              "which has no BYTES input 'text_input'");
}

TEST_CASE("the text is cut before a stop string, even across responses, and the model stops") {
  front_end f;
  oip::http_response r = f.post(
      "completions", R"({"model":"pieces","prompt":"","pieces":"ab|cS|TOPde|f","stop":"STOP"})");
  REQUIRE(r.status == 200);
  CHECK(r.body().find(R"("text":"abc","logprobs":null,"finish_reason":"stop")") !=
        std::string::npos);
  CHECK(f.pieces->sends_failed == 1);  // called off: its send after the cut failed
  // A completion cut at its stop string is a request that succeeded, not a cancelled one.
  const auto counts = [&f] {
    const oip::statistics_snapshot s = f.service->statistics("pieces", std::nullopt)->at(0);
    return std::pair{s.success.count, s.fail.count};
  };
  CHECK(counts() == std::pair<std::uint64_t, std::uint64_t>{1, 0});
  r = f.post("completions", R"({"model":"pieces","prompt":"","pieces":"ab|cS|TOPde|f",)"
                            R"("stop":["ST","zz"],"stream":true})");
  REQUIRE(r.status == 200);
  CHECK(r.header("Content-Type") == "text/event-stream; charset=utf-8");
  const std::string events = r.body();
  // An end of the text that begins a stop string ("S") waits for the next response; others go.
  CHECK(events.find(R"("text":"ab",)") != std::string::npos);
  CHECK(events.find(R"("text":"c",)") != std::string::npos);
  CHECK(f.pieces->sends_failed == 2);
  CHECK(counts() == std::pair<std::uint64_t, std::uint64_t>{2, 0});
  CHECK(events.find("TOP") == std::string::npos);
  CHECK(events.find(R"("finish_reason":"stop")") != std::string::npos);
  CHECK(events.ends_with("data: [DONE]\n\n"));
}

TEST_CASE("stop strings: the first one met, the end that could begin one, any string's shape") {
  using oip::detail::stop_strings;
  constexpr std::size_t none = std::string_view::npos;
  const stop_strings stops{{"STOP", "de", "Tx", ""}};
  CHECK(stops.search("abcSTOPde").cut == 3);
  CHECK(stops.search("abcdeSTOP").cut == 3);
  const stop_strings::found open = stops.search("abcST");
  CHECK(open.cut == none);
  CHECK(open.open_tail == 2);  // "ST" begins "STOP"; "T" begins "Tx"
  CHECK(stops.search("abc").open_tail == 0);
  CHECK(stops.search("").cut == none);
  // A match that overlaps a false start.
  CHECK(stop_strings{{"aaab"}}.search("aabaabaaab").cut == 6);
  // Stops that would make a naive search quadratic: 255 'a's then 'b', over a megabyte of 'a's.
  const stop_strings adversarial{{std::string(255, 'a') + "b"}};
  std::string text(1 << 20, 'a');
  const stop_strings::found waiting = adversarial.search(text);
  CHECK(waiting.cut == none);
  CHECK(waiting.open_tail == 255);
  text += 'b';
  CHECK(adversarial.search(text).cut == text.size() - 256);
  CHECK(stop_strings{{""}}.search("abc").cut == none);
}

TEST_CASE("a chunk never ends inside a UTF-8 character") {
  front_end f;
  // The model cuts its prompt every two bytes: "aé b" (é is C3 A9) comes as "a\xC3", "\xA9 "
  // and "b". Each chunk is whole characters.
  const std::string body =
      f.post("completions",
             R"({"model":"pieces","prompt":"a\u00e9 b","stream":true,"bytes_per_piece":2})")
          .body();
  CHECK(body.find(R"("text":"a",)") != std::string::npos);
  CHECK(body.find(R"("text":"é ",)") != std::string::npos);
  CHECK(body.find(R"("text":"b",)") != std::string::npos);
  CHECK(body.find("\xef\xbf\xbd") == std::string::npos);  // no U+FFFD anywhere
  // A chat's first chunk carries the role.
  const std::string chat =
      f.post("chat/completions", R"({"model":"pieces","messages":[{"role":"user","content":"x"}],)"
                                 R"("stream":true,"pieces":"hi"})")
          .body();
  CHECK(chat.find(R"("delta":{"role":"assistant","content":""})") != std::string::npos);
  CHECK(chat.find(R"("delta":{"content":"hi"})") != std::string::npos);
  // Usage asked for, from a model that reports no counts: zeros.
  const std::string usage =
      f.post("completions", R"({"model":"pieces","prompt":"x","stream":true,"pieces":"a",)"
                            R"("stream_options":{"include_usage":true}})")
          .body();
  CHECK(usage.find(R"("choices":[],"usage":{"prompt_tokens":0,"completion_tokens":0,)") !=
        std::string::npos);
  // A body that is not UTF-8 is malformed: a 400, the model never runs.
  check_error(f.post("completions", "{\"model\":\"pieces\",\"prompt\":\"caf\xc3\"}"), 400,
              "failed to parse");
}

TEST_CASE("embeddings over many texts, in order, on a model that answers on the caller's thread") {
  front_end f;
  std::string texts;
  for (int i = 0; i < 300; ++i)
    texts += fmt::format("{}\"{}\"", i == 0 ? "" : ",", std::string(i % 7, 'x'));
  oip::http_response r =
      f.post("embeddings", fmt::format(R"({{"model":"lengths","input":[{}]}})", texts));
  REQUIRE(r.status == 200);
  const std::string body = r.body();
  CHECK(body.find(R"({"object":"embedding","index":299,"embedding":[5,120,1]})") !=
        std::string::npos);
  CHECK(body.find(R"({"object":"embedding","index":0,"embedding":[0,0,1]})") != std::string::npos);
  // One text that fails fails the request, with the model's words.
  check_error(f.post("embeddings", R"({"model":"lengths","input":["a","fail","b"]})"), 400,
              "this model refuses 'fail'");
  // Bounded.
  std::string many = "\"a\"";
  for (int i = 0; i < 2048; ++i) many += ",\"a\"";
  check_error(f.post("embeddings", fmt::format(R"({{"model":"lengths","input":[{}]}})", many)), 400,
              "holds more than 2048 values");
}

TEST_CASE("what the front end does not offer is a 400 that names it; nothing is a 5xx") {
  front_end f;
  std::vector<std::pair<std::string, std::string>> refused = {
      {R"({"model":"pieces","prompt":"x","n":3})", "'n' must be 1"},
      {R"({"model":"pieces","prompt":"x","echo":true})", "'echo' is not supported"},
      {R"({"model":"pieces","prompt":"x","logprobs":2})", "'logprobs' is not supported"},
      {R"({"model":"pieces","prompt":"x","suffix":"y"})", "'suffix' is not supported"},
      {R"({"model":"pieces","prompt":[1,2,3]})", "as tokens is not supported"},
      {R"({"model":"pieces","prompt":["a","b"]})", "one prompt per request"},
      {R"({"model":"pieces"})", "'prompt' is required"},
      {R"({"prompt":"x"})", "'model' is required"},
      {R"({"model":"pieces","prompt":"x","max_tokens":-1})", "a positive integer"},
      {R"({"model":"pieces","prompt":"x","max_tokens":0})", "a positive integer"},
      {R"({"model":"pieces","prompt":"x","temperature":"hot"})", "'temperature' must be a number"},
      {R"({"model":"pieces","prompt":"x","top_p":true})", "'top_p' must be a number"},
      {R"({"model":"pieces","prompt":"x","seed":1.5})", "'seed' must be an integer"},
      {R"({"model":"pieces","prompt":"x","stream_options":{"include_usage":true}})",
       "only allowed when 'stream' is enabled"},
      {R"({"model":"pieces","prompt":"x","stream":false,"stream_options":{}})",
       "only allowed when 'stream' is enabled"},
      {R"({"model":"pieces","prompt":"x","max_tokens":1,"max_completion_tokens":2})", "same field"},
      {R"({"model":"pieces","prompt":"x","stop":[1]})", "as tokens"},
      {R"({"model":"pieces","prompt":"x","stream":"yes"})", "expected a boolean"},
      {R"({"model":"pieces","prompt":"x","metadata":{"a":1}})", "'metadata' is not supported"},
      {R"({"model":"pieces","prompt":"x","timeout":1})", "a parameter of the inference protocol"},
      {R"({"model":"pieces","prompt":"x","sequence_id":7})", "a parameter of the inference"},
      {R"({"model":"pieces","prompt":"x","triton_enable_empty_final_response":true})",
       "a parameter of the inference"},
      {R"({"model":"pieces","prompt":"x","stop":")" + std::string(257, 's') + R"("})",
       "at most 256 bytes"},
      {R"({"model":"pieces","prompt":"x","prompt":"y"})", "duplicate key"},
      {R"({"model":"pieces","prompt":"x"} trailing)", "failed to parse"},
      {"[]", "expected an object"},
      {"", "failed to parse"},
      {std::string(300, '[') + std::string(300, ']'), "expected an object"},
  };
  std::string many_fields = R"({"model":"pieces","prompt":"x")";
  for (int i = 0; i < 65; ++i) many_fields += fmt::format(R"(,"f{}":{})", i, i);
  refused.emplace_back(many_fields + "}", "at most 64 fields");
  for (const auto& [body, words] : refused) {
    CAPTURE(body);
    check_error(f.post("completions", body), 400, words);
  }
  const std::vector<std::pair<std::string, std::string>> chat_refused = {
      {R"({"model":"pieces","messages":[]})", "'messages' is empty"},
      {R"({"model":"pieces","messages":[{"content":"x"}]})", "needs a 'role'"},
      {R"({"model":"pieces","messages":[{"role":"user","content":[{"type":"image_url"}]}]})",
       "content parts of type 'image_url'"},
      {R"({"model":"pieces","messages":[{"role":"user","content":"x"}],"tools":[{}]})",
       "'tools' is not supported"},
      {R"({"model":"pieces","messages":[{"role":"user","content":"x"}],"logprobs":true})",
       "'logprobs' is not supported"},
      {R"({"model":"pieces","messages":[{"role":"user","content":"x"}],)"
       R"("response_format":{"type":"json_object"}})",
       "'response_format' is not supported"},
  };
  for (const auto& [body, words] : chat_refused) {
    CAPTURE(body);
    check_error(f.post("chat/completions", body), 400, words);
  }
  // Left at what leaves them off, they are accepted.
  CHECK(
      f.post(
           "chat/completions",
           R"({"model":"pieces","messages":[{"role":"user","content":[{"type":"text","text":"x"}]}],)"
           R"("n":1,"logprobs":false,"tool_choice":"none","response_format":{"type":"text"},)"
           R"("logit_bias":{},"user":"u","stream":null})")
          .status == 200);
  check_error(f.post("completions", R"({"model":"lengths","prompt":"x"})"), 404,
              "makes embeddings, not text");
  check_error(f.post("embeddings", R"({"model":"pieces","input":"x"})"), 404,
              "does not make embeddings");
  check_error(f.post("embeddings", R"({"model":"lengths","input":"x","encoding_format":"hex"})"),
              400, "'encoding_format' is 'float' or 'base64'");
  check_error(f.client->send("GET", "/v1/completions"), 405, "use POST");
  check_error(f.client->send("POST", "/v1/models"), 405, "use GET");
  check_error(f.client->send("GET", "/v1/nothing"), 404, "no route");
  const oip::http_response slashed = f.client->send("GET", "/v1/models/org/pieces");
  CHECK(slashed.status == 200);
  CHECK(slashed.body().starts_with(R"({"id":"org/pieces","object":"model")"));
  check_error(f.client->send("GET", "/v1/models/org/none"), 404, "model_not_found");
  // `/v1` routes take empty segments (a base URL ending in a slash), and a malformed path is an
  // error in OpenAI's object too.
  CHECK(f.client->send("GET", "/v1/models/").status == 200);
  CHECK(f.client->send("GET", "/v1//models").status == 200);
  check_error(f.client->send("GET", "/v1/models/%ZZ"), 400, "percent-encoding");
}

TEST_CASE("API keys: Bearer auth in constant time; none configured accepts any header") {
  SUBCASE("keys configured") {
    oip::openai_options options;
    options.api_keys = {"sk-one", "sk-two"};
    front_end f{options};
    const std::string body = R"({"model":"pieces","prompt":"x","pieces":"ok"})";
    CHECK(f.post("completions", body, {{"Authorization", "Bearer sk-two"}}).status == 200);
    CHECK(f.post("completions", body, {{"authorization", "bearer sk-one"}}).status == 200);
    check_error(f.post("completions", body), 401, "You didn't provide an API key");
    check_error(f.post("completions", body, {{"Authorization", "Bearer sk-on"}}), 401,
                "Incorrect API key");
    check_error(f.post("completions", body, {{"Authorization", "Bearer sk-one2"}}), 401,
                "Incorrect API key");
    check_error(f.post("completions", body, {{"Authorization", "Basic sk-one"}}), 401, "Bearer");
    check_error(f.client->send("GET", "/v1/models"), 401, "invalid_api_key");
  }
  SUBCASE("none configured") {
    front_end f;
    const std::string body = R"({"model":"pieces","prompt":"x","pieces":"ok"})";
    CHECK(f.post("completions", body).status == 200);
    CHECK(f.post("completions", body, {{"Authorization", "Bearer anything"}}).status == 200);
  }
}

TEST_CASE("restricted APIs: the openai category, and Triton's groups of the front end") {
  oip::openai_options options;
  REQUIRE(options.restrictions.add({{oip::api_category::model_repository}, "admin", "yes"}).ok());
  oip::server_options server;
  REQUIRE(server.restricted_http_api.add({{oip::api_category::openai}, "tenant", "t1"}).ok());
  front_end f{options, server};
  const std::vector<oip::http_header> tenant{{"tenant", "t1"}};
  check_error(f.client->send("GET", "/v1/models"), 403, "expecting header 'tenant'");
  check_error(f.client->send("GET", "/v1/models", {}, tenant), 403, "expecting header 'admin'");
  CHECK(f.client->send("GET", "/v1/models", {}, {{"tenant", "t1"}, {"admin", "yes"}}).status ==
        200);
  CHECK(f.post("completions", R"({"model":"pieces","prompt":"x"})", tenant).status == 200);
  // The protocol's routes keep their own restrictions: none here.
  CHECK(f.client->send("GET", "/v2/health/live").status == 200);
}

TEST_CASE("the front end is off unless the host turns it on") {
  oip::model_repository repository;
  oip::executor workers{{1, 8}};
  oip::http_handler handler{repository, workers};
  oip::in_process_client client{handler};
  CHECK(client.send("GET", "/v1/models").status == 404);
}
