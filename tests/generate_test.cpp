// Triton's generate extension: requests read as Triton maps them onto a model's inputs, replies
// written flat, and the /generate and /generate_stream routes.

#include "serving_support.hpp"

#include <oip/generate.hpp>
#include <oip/http_handler.hpp>
#include <oip/in_process_client.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

namespace {

// A text model's inputs: `text_input` (BYTES [1]) and `tokens` (INT32 [-1]).
oip::model_config text_model(std::int64_t max_batch_size = 0) {
  oip::model_config c;
  c.name = "llm";
  c.max_batch_size = max_batch_size;
  c.inputs = {{"text_input", oip::datatype::bytes, {1}, {}},
              {"tokens", oip::datatype::int32, {-1}, {}}};
  c.outputs = {{"text_output", oip::datatype::bytes, {1}, {}}};
  return c;
}

oip::result<oip::inference_request> decode(const std::string& json,
                                           const oip::model_config& model = text_model()) {
  return oip::decode_generate_request(oip::buffer::from_string(json), model);
}

std::string error_of(const std::string& json, const oip::model_config& model = text_model()) {
  oip::result<oip::inference_request> r = decode(json, model);
  REQUIRE_FALSE(r);
  CHECK(r.error().http_status() == 400);
  return r.error().message();
}

const oip::tensor* input(const oip::inference_request& r, std::string_view name) {
  for (const oip::tensor& t : r.inputs) {
    if (t.name() == name) return &t;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("members that name inputs are inputs; the rest are parameters") {
  oip::result<oip::inference_request> r = decode(
      R"({"id":"r1","text_input":"h\u00e9llo","parameters":{"max_tokens":16,"temperature":0.5,)"
      R"("stream":false,"stop":"\n","tokens":[1,2,3]},"seed":18446744073709551615})");
  REQUIRE(r);
  CHECK(r->id == "r1");
  REQUIRE(r->inputs.size() == 2);
  const oip::tensor* text = input(*r, "text_input");
  REQUIRE(text != nullptr);
  CHECK(text->type() == oip::datatype::bytes);
  CHECK(text->shape() == oip::shape_type{1});
  CHECK(*text->strings().begin() == "h\xc3\xa9llo");
  const oip::tensor* tokens = input(*r, "tokens");  // inside `parameters`, still an input
  REQUIRE(tokens != nullptr);
  CHECK(tokens->shape() == oip::shape_type{3});
  CHECK(tokens->at<std::int32_t>(2) == 3);
  CHECK(*r->parameters.get<std::int64_t>("max_tokens") == 16);
  CHECK(*r->parameters.get<double>("temperature") == 0.5);
  CHECK_FALSE(*r->parameters.get<bool>("stream"));
  CHECK(*r->parameters.get<std::string>("stop") == "\n");
  CHECK(*r->parameters.get<std::uint64_t>("seed") == 18446744073709551615ULL);
}

TEST_CASE("shapes: the model's dimensions, the variable ones filled from the element count") {
  SUBCASE("a batching model: the batch dimension is 1 unless the data fills it") {
    const oip::model_config batched = text_model(8);
    oip::result<oip::inference_request> r = decode(R"({"text_input":"a","tokens":5})", batched);
    REQUIRE(r);
    CHECK(input(*r, "text_input")->shape() == oip::shape_type{1, 1});
    CHECK(input(*r, "tokens")->shape() == oip::shape_type{1, 1});
    r = decode(R"({"text_input":["a","b","c"],"tokens":[[1,2],[3,4]]})", batched);
    REQUIRE(r);
    CHECK(input(*r, "text_input")->shape() == oip::shape_type{3, 1});  // a batch of three
    CHECK(input(*r, "tokens")->shape() == oip::shape_type{1, 4});      // nested, flattened
  }
  SUBCASE("no values: only where a dimension may be 0") {
    oip::model_config zero = text_model();
    CHECK(error_of(R"({"text_input":[]})", zero) ==
          "The schema can not convert input 'text_input' to tensor with proper shape");
    oip::result<oip::inference_request> r = decode(R"({"tokens":[]})", zero);
    REQUIRE(r);
    CHECK(input(*r, "tokens")->shape() == oip::shape_type{0});
    zero.inputs[1].shape = {0, -1};
    r = decode(R"({"tokens":[]})", zero);
    REQUIRE(r);
    CHECK(input(*r, "tokens")->shape() == oip::shape_type{0, 1});
  }
  SUBCASE("fixed dimensions must divide the count") {
    oip::model_config pairs = text_model();
    pairs.inputs[1].shape = {2};
    CHECK(error_of(R"({"tokens":[1,2,3]})", pairs) ==
          "The schema can not convert input 'tokens' to tensor with proper shape");
    CHECK(decode(R"({"tokens":[1,2]})", pairs));
  }
}

TEST_CASE("parameters and ids are read as an infer request's are") {
  oip::result<oip::inference_request> r =
      decode(R"({"temperature":0.95000000000000000000,"seed":99999999999999999999,"bias":NaN,)"
             R"("text\u005finput":"escaped key","id":")" +
             std::string(300, 'i') + R"("})");
  REQUIRE(r);
  CHECK(*r->parameters.get<double>("temperature") == 0.95);  // not simdjson 3.0.1's misreading
  CHECK(*r->parameters.get<double>("seed") == 1e20);
  CHECK(std::isnan(*r->parameters.get<double>("bias")));
  CHECK(r->id->size() == 300);  // no limit on a request's id, as in an infer request
  REQUIRE(input(*r, "text_input") != nullptr);
  CHECK(*input(*r, "text_input")->strings().begin() == "escaped key");

  // Many parameters cost a sort, not a comparison of each with all the others.
  std::string many = "{";
  for (int i = 0; i < 100'000; ++i) many += fmt::format(R"("p{}":{},)", i, i);
  many.back() = '}';
  r = decode(many);
  REQUIRE(r);
  CHECK(r->parameters.size() == 100'000);
}

TEST_CASE("NaN and the infinities, as in an infer request's data") {
  oip::model_config model = text_model();
  model.inputs.push_back({"scores", oip::datatype::fp32, {-1}, {}});
  oip::result<oip::inference_request> r = decode(R"({"scores":[NaN,-Infinity,1.5]})", model);
  REQUIRE(r);
  const oip::tensor* scores = input(*r, "scores");
  REQUIRE(scores != nullptr);
  CHECK(scores->shape() == oip::shape_type{3});
  CHECK(std::isnan(scores->at<float>(0)));
  CHECK(scores->at<float>(1) == -std::numeric_limits<float>::infinity());
  r = decode(R"({"scores":Infinity,"n":1})", model);
  REQUIRE(r);
  CHECK(input(*r, "scores")->at<float>(0) == std::numeric_limits<float>::infinity());
  CHECK(error_of(R"({"tokens":[NaN]})", model).starts_with("failed to parse"));  // as in data
}

TEST_CASE("every mistake is a 400 in words that name it") {
  CHECK(error_of(R"([1,2])") == "the generate request must be a JSON object");
  CHECK(error_of(R"({"parameters":5})") == "Expected JSON object for keyword: 'parameters'");
  CHECK(error_of(R"({"x":[1]})") ==
        "parameter 'x' has invalid type. It should be either 'int', 'bool', or 'string'.");
  CHECK(error_of(R"({"parameters":{"x":null}})") ==
        "Converting keyword: 'parameters': parameter 'x' has invalid type. It should be either "
        "'int', 'bool', or 'string'.");
  CHECK(error_of(R"({"id":7})") == "unable to parse 'id': expected a string");
  CHECK(error_of(R"({"x":1,"x":2})") ==
        "failed to parse the request JSON buffer: duplicate key 'x'");
  CHECK(error_of(R"({"x":1,"parameters":{"x":2}})").ends_with("duplicate key 'x'"));
  CHECK(error_of(R"({"id":"a","id":"b"})").ends_with("duplicate key 'id'"));
  CHECK(error_of(R"({"tokens":[1],"tokens":[2]})") == "input 'tokens' already exists in request");
  CHECK(error_of(R"({"tokens":]})").starts_with("failed to parse"));
  CHECK(error_of(R"({"x":nope})").starts_with("parameter 'x' has invalid type"));
  CHECK(error_of(R"({"tokens":{"a":1}})").find("not an object") != std::string::npos);
  CHECK(error_of(R"({"text_input":"a"} x)").starts_with("failed to parse"));
  CHECK(error_of(R"({"text_input":"a"} {})") ==
        "unexpected content after the generate request's JSON object");
  // What the first reading skips is checked when the inputs are decoded.
  CHECK(error_of(R"({"tokens":[1,2,}]})").find("failed to parse") != std::string::npos);
  CHECK(error_of(R"({"tokens":[1,tru]})").find("failed to parse") != std::string::npos);
  CHECK(error_of(R"({"tokens":[10000000000]})").find("out of range") != std::string::npos);
  CHECK(error_of(R"({"tokens":["7"]})").find("tokens") != std::string::npos);
  CHECK(error_of(R"({"tokens":[1],"parameters":{"tokens":[2]}})").find("tokens") !=
        std::string::npos);
  oip::model_config named = text_model();
  named.inputs[1].name = "parameters";
  CHECK(error_of(R"({"parameters":{}})", named) ==
        "Keyword 'parameters' for nested schema also given as input tensor name");
  oip::limits small;
  small.max_json_bytes = 8;
  CHECK(oip::decode_generate_request(oip::buffer::from_string(R"({"text_input":"long"})"),
                                     text_model(), small)
            .error()
            .http_status() == 413);
}

TEST_CASE("the reply: flat, in name order, one element as a value, BYTES as strings") {
  oip::inference_response response;
  response.id = "r1";
  response.model_name = "llm";
  response.model_version = "1";
  response.parameters.set("tokens_used", std::int64_t{3});
  response.parameters.set("ratio", 0.5);
  const std::vector<std::string_view> text{"hi \"there\""};
  response.outputs.push_back(*oip::tensor::from_strings("text_output", {1}, text));
  const std::vector<float> scores{0.25F, 1.5F, -2.0F, 3.0F};
  response.outputs.push_back(*oip::tensor::from_values<float>("scores", {2, 2}, scores));
  const std::vector<std::int32_t> none;
  response.outputs.push_back(*oip::tensor::from_values<std::int32_t>("none", {0}, none));
  const std::vector<std::string_view> cut{"caf\xc3"};  // a character cut at a token limit
  response.outputs.push_back(*oip::tensor::from_strings("cut", {1}, cut));
  const std::vector<std::int32_t> one{7};
  response.outputs.push_back(*oip::tensor::from_values<std::int32_t>("model_name", {1}, one));
  oip::result<std::string> json = oip::encode_generate_response(response);
  REQUIRE(json);
  // `model_name` the output is dropped: the name was written first.
  CHECK(*json ==
        "{\"cut\":\"caf\xef\xbf\xbd\","
        R"("id":"r1","model_name":"llm","model_version":"1","none":[],"ratio":0.5,)"
        R"("scores":[0.25,1.5,-2,3],"text_output":"hi \"there\"","tokens_used":3})");
}

TEST_CASE("the /generate and /generate_stream routes") {
  oip::model_repository repository;
  REQUIRE(repository.add(oip::testing::make_simple()).ok());
  oip::executor workers{{2, 64}};
  oip::http_handler handler{repository, workers};
  oip::in_process_client client{handler};
  const std::string body = R"({"id":"g","INPUT0":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15],)"
                           R"("INPUT1":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]})";

  const oip::http_response plain = client.send("POST", "/v2/models/simple/generate", body);
  CHECK(plain.status == 200);
  CHECK(plain.header("Content-Type") == "application/json");
  CHECK(plain.body() ==
        R"({"OUTPUT0":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16],)"
        R"("OUTPUT1":[-1,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14],"computed_by":"simple",)"
        R"("id":"g","model_name":"simple","model_version":"1"})");

  const oip::http_response stream =
      client.send("POST", "/v2/models/simple/versions/1/generate_stream", body);
  CHECK(stream.status == 200);
  CHECK(stream.header("Content-Type") == "text/event-stream; charset=utf-8");
  CHECK(stream.body() == "data: " + plain.body() + "\n\n");

  CHECK(client.send("GET", "/v2/models/simple/generate").status == 405);
  CHECK(client.send("POST", "/v2/models/missing/generate", body).status == 404);
  const oip::http_response missing_input =
      client.send("POST", "/v2/models/simple/generate", R"({"INPUT0":[1]})");
  CHECK(missing_input.status == 400);
  CHECK(missing_input.header("Content-Type") == "application/json");
  const oip::http_response stream_error =
      client.send("POST", "/v2/models/simple/generate_stream", R"({"INPUT0":"x"})");
  CHECK(stream_error.status == 400);  // refused before the model: a plain error, as in Triton
  CHECK(stream_error.body().starts_with(R"({"error":)"));
}

TEST_CASE("a model's error in a stream is an event") {
  oip::model_config config = text_model();
  config.name = "broken";
  oip::model_repository repository;
  REQUIRE(repository
              .add(oip::make_model(config,
                                   [](const oip::inference_request&) {
                                     return oip::result<oip::model_output>{
                                         oip::status{oip::errc::internal, "the engine is down"}};
                                   }))
              .ok());
  oip::executor workers{{1, 8}};
  oip::http_handler handler{repository, workers};
  oip::in_process_client client{handler};
  const oip::http_response r = client.send("POST", "/v2/models/broken/generate_stream",
                                           R"({"text_input":"hi","tokens":[1]})");
  CHECK(r.status == 500);
  CHECK(r.header("Content-Type") == "text/event-stream; charset=utf-8");
  CHECK(r.body() == "data: {\"error\":\"the engine is down\"}\n\n");
}

TEST_CASE("a response a stream cannot carry ends it with its error and stops the model") {
  // Replies here may be 64 bytes at most: the model's first response is too large to encode.
  // The client gets the error as the stream's last event, and the model, which sends until it
  // is stopped, is stopped.
  oip::model_config config = text_model();
  config.name = "chatty";
  config.decoupled = true;
  std::atomic<bool> stopped{false};
  oip::model_repository repository;
  REQUIRE(repository
              .add(oip::make_model(
                  config,
                  [&stopped](oip::inference_call& call) -> oip::result<oip::model_output> {
                    const std::string text(200, 'x');
                    const std::string_view view{text};
                    for (int i = 0; i < 1000 && !call.cancelled(); ++i) {  // 5 s at most
                      (void)call.send(oip::model_output{
                          {*oip::tensor::from_strings("text_output", {1},
                                                      std::span<const std::string_view>{&view, 1})},
                          {}});
                      std::this_thread::sleep_for(std::chrono::milliseconds{5});
                    }
                    stopped = call.cancelled();
                    return oip::status{oip::errc::unavailable, "stopped"};
                  }))
              .ok());
  oip::executor workers{{2, 8}};
  oip::server_options options;
  options.bounds.max_response_bytes = 64;
  oip::http_handler handler{repository, workers, options};
  oip::in_process_client client{handler};
  const auto began = std::chrono::steady_clock::now();
  const oip::http_response r = client.send("POST", "/v2/models/chatty/generate_stream",
                                           R"({"text_input":"hi","tokens":[1]})");
  CHECK(std::chrono::steady_clock::now() - began < std::chrono::seconds{3});
  CHECK(r.status == 200);  // the stream had begun: its error is its last event
  CHECK(r.body().starts_with("data: {\"error\":"));
  CHECK(r.body().find("\n\ndata: ") == std::string::npos);  // nothing after it
  CHECK(stopped.load());
}
