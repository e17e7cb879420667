// The endpoint handler: every route, validation in Triton's wording, classification, binary and
// raw requests, compression, cancellation, statistics and configuration, the in-process client.

#include "gzip.hpp"
#include "serving_support.hpp"
#include "test_support.hpp"

#include <oip/classification.hpp>
#include <oip/http_handler.hpp>
#include <oip/in_process_client.hpp>
#include <oip/json.hpp>

#include <condition_variable>
#include <functional>
#include <future>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <zlib.h>

using oip::http_response;
using oip::testing::gzip;

namespace {

oip::server_options test_options() {
  oip::server_options options;
  options.name = "test-server";
  options.version = "9.9.9";
  options.compression_threshold = 16;
  return options;
}

struct server {
  oip::model_repository repository;
  oip::executor workers{{2, 64}};
  oip::http_handler handler{repository, workers, test_options()};
  oip::in_process_client client{handler};

  server() {
    REQUIRE(repository.add(oip::testing::make_simple()).ok());
    REQUIRE(repository.add(oip::testing::make_scores()).ok());
  }

  http_response send(std::string method, std::string target, std::string body = {},
                     std::vector<oip::http_header> headers = {}) {
    return client.send(std::move(method), std::move(target), std::move(body), std::move(headers));
  }
};

const std::string simple_body =
    R"({"id":"42","inputs":[)"
    R"({"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]},)"
    R"({"name":"INPUT1","shape":[1,16],"datatype":"INT32","data":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}]})";

std::string infer_body(const std::string& inputs, const std::string& rest = "") {
  return R"({"inputs":[)" + inputs + "]" + rest + "}";
}

std::string int32_input(const std::string& name, const std::string& shape, std::size_t count,
                        const std::string& type = "INT32") {
  std::string data = "[";
  for (std::size_t i = 0; i < count; ++i) data += (i == 0 ? "" : ",") + std::to_string(i);
  return R"({"name":")" + name + R"(","shape":)" + shape + R"(,"datatype":")" + type +
         R"(","data":)" + data + "]}";
}

void check_error(const http_response& r, int status, const std::string& message) {
  CHECK(r.status == status);
  CHECK(r.header("Content-Type") == "application/json");
  const oip::status decoded = oip::decode_error(r.body(), r.status);
  CHECK_MESSAGE(decoded.message() == message, decoded.message());
}

std::string gunzip(const std::string& data, int window_bits = 31) {
  z_stream s{};
  REQUIRE(inflateInit2(&s, window_bits) == Z_OK);
  std::string out(1 << 20, '\0');
  s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  s.avail_in = static_cast<uInt>(data.size());
  s.next_out = reinterpret_cast<Bytef*>(out.data());
  s.avail_out = static_cast<uInt>(out.size());
  REQUIRE(inflate(&s, Z_FINISH) == Z_STREAM_END);
  out.resize(s.total_out);
  inflateEnd(&s);
  return out;
}

}  // namespace

TEST_CASE("health, server metadata, model metadata and readiness") {
  server s;
  http_response live = s.send("GET", "/v2/health/live");
  CHECK(live.status == 200);
  CHECK(live.body() == R"({"live":true})");
  CHECK(s.send("GET", "/v2/health/ready").status == 200);

  oip::result<oip::server_metadata> meta = s.client.metadata();
  REQUIRE(meta.ok());
  CHECK(meta->name == "test-server");
  CHECK(meta->version == "9.9.9");
  CHECK(std::find(meta->extensions.begin(), meta->extensions.end(), "classification") !=
        meta->extensions.end());

  oip::result<oip::model_metadata> simple = s.client.metadata("simple");
  REQUIRE(simple.ok());
  CHECK(simple->versions == std::vector<std::string>{"1"});
  REQUIRE(simple->inputs.size() == 2);
  CHECK(simple->inputs[0].shape == oip::shape_type{-1, 16});  // the batch dimension shown
  CHECK(s.client.metadata("simple", 1).ok());
  CHECK(s.client.ready("simple"));
  CHECK(s.send("GET", "/v2/models/simple/versions/1/ready").body() ==
        R"({"name":"simple","ready":true})");

  check_error(s.send("GET", "/v2/models/nope"), 404,
              "Request for unknown model: 'nope' is not found");
  check_error(s.send("GET", "/v2/models/simple/versions/3"), 404,
              "Request for unknown model: 'simple' version 3 is not found");
  check_error(s.send("GET", "/v2/models/simple/versions/v10"), 400,
              "invalid model version 'v10': versions are positive integers");
  CHECK(s.send("GET", "/v2/models/nope/ready").status == 404);
}

TEST_CASE("a shutdown begun turns readiness 503 while every other route answers as before") {
  server s;
  REQUIRE(s.send("GET", "/v2/health/ready").status == 200);
  s.handler.service().begin_shutdown();
  CHECK(s.handler.service().shutting_down());
  const http_response ready = s.send("GET", "/v2/health/ready");
  CHECK(ready.status == 503);
  CHECK(ready.body() == R"({"ready":false})");
  CHECK(s.send("GET", "/v2/health/live").status == 200);
  CHECK(s.send("GET", "/v2/models/simple/ready").status == 200);
  CHECK(s.send("POST", "/v2/models/simple/infer", simple_body).status == 200);
}

TEST_CASE("routing: unknown routes 404, wrong methods 405, the query is ignored") {
  server s;
  CHECK(s.send("GET", "/v3").status == 404);
  CHECK(s.send("GET", "/v2/models/simple/explode").status == 404);
  CHECK(s.send("GET", "/").status == 404);
  const http_response post_to_get = s.send("POST", "/v2/health/live");
  CHECK(post_to_get.status == 405);
  CHECK(post_to_get.header("Allow") == "GET, HEAD");
  CHECK(post_to_get.body() == R"({"error":"method POST is not allowed here; use GET"})");
  const http_response get_to_post = s.send("GET", "/v2/models/simple/infer");
  CHECK(get_to_post.status == 405);
  CHECK(get_to_post.header("Allow") == "POST");
  CHECK(s.send("DELETE", "/v2/models/simple").header("Allow") == "GET, HEAD");
  CHECK(s.send("HEAD", "/v2/models/simple/infer").header("Allow") == "POST");
  CHECK(s.send("GET", "/v2/health/live?verbose=1").status == 200);
  CHECK(s.send("GET", "/v2/models/sim%70le").status == 200);  // percent-decoded
  CHECK(s.send("GET", "/v2/models/sim%7").status == 400);
  CHECK(s.send("POST", "/v2/models/simple/infer?x=y", simple_body).status == 200);
  // Routes are matched whole, as Triton's: an empty segment (a client's empty model name) or a
  // trailing slash names no route, rather than a route of the segments that are left.
  const http_response empty_name = s.send("POST", "/v2/models//infer", simple_body);
  CHECK(empty_name.status == 404);
  CHECK(empty_name.body() == R"({"error":"no route for POST /v2/models//infer"})");
  CHECK(s.send("GET", "/v2/models//ready").status == 404);
  CHECK(s.send("GET", "/v2//health//ready/").status == 404);
  CHECK(s.send("GET", "/v2/health/ready/").status == 404);
  CHECK(s.send("POST", "/v2/models/simple/infer/", simple_body).status == 404);
  CHECK(s.send("GET", "v2/health/ready").status == 404);
  CHECK(s.send("GET", "/v2/health/ready/?x=/").status == 404);
  CHECK(s.send("GET", "/v2/health/ready?x=//").status == 200);
}

TEST_CASE("inference: outputs, id, version and response parameters") {
  server s;
  http_response r = s.send("POST", "/v2/models/simple/infer", simple_body);
  REQUIRE(r.status == 200);
  CHECK(r.header("Content-Type") == "application/json");
  oip::result<oip::inference_response> response =
      oip::decode_response(oip::buffer::from_string(r.body()), std::nullopt);
  REQUIRE(response.ok());
  CHECK(response->id == "42");
  CHECK(response->model_name == "simple");
  CHECK(response->model_version == "1");
  CHECK(*response->parameters.get<std::string>("computed_by") == "simple");
  REQUIRE(response->outputs.size() == 2);
  CHECK(response->outputs[0].name() == "OUTPUT0");
  CHECK(response->outputs[0].shape() == oip::shape_type{1, 16});
  CHECK(response->outputs[0].at<std::int32_t>(15) == 16);
  CHECK(response->outputs[1].at<std::int32_t>(15) == 14);

  // Only the requested outputs, in the request's order; binary when asked.
  const std::string only_one =
      infer_body(int32_input("INPUT0", "[2,16]", 32) + "," + int32_input("INPUT1", "[2,16]", 32),
                 R"(,"outputs":[{"name":"OUTPUT1","parameters":{"binary_data":true}}])");
  http_response binary = s.send("POST", "/v2/models/simple/infer", only_one);
  REQUIRE(binary.status == 200);
  CHECK(binary.header("Content-Type") == "application/octet-stream");
  REQUIRE(binary.header("Inference-Header-Content-Length").has_value());
  CHECK(binary.tail.size() == 1);  // tensor bytes handed over, not copied into the head
  oip::result<oip::inference_response> decoded = oip::decode_response(
      oip::buffer::from_string(binary.body()),
      std::stoul(std::string{*binary.header("Inference-Header-Content-Length")}));
  REQUIRE(decoded.ok());
  REQUIRE(decoded->outputs.size() == 1);
  CHECK(decoded->outputs[0].name() == "OUTPUT1");
  CHECK(decoded->outputs[0].shape() == oip::shape_type{2, 16});
  CHECK(decoded->outputs[0].at<std::int32_t>(31) == 0);
}

TEST_CASE("validation against the model, in Triton's wording") {
  server s;
  const auto infer = [&](const std::string& body) {
    return s.send("POST", "/v2/models/simple/infer", body);
  };
  check_error(infer(infer_body(int32_input("INPUT0", "[1,16]", 16))), 400,
              "expected 2 inputs but got 1 inputs for model 'simple'. Got input(s) ['INPUT0'], "
              "but missing required input(s) ['INPUT1']. Please provide all required input(s).");
  check_error(infer(infer_body(int32_input("INPUT0", "[1,16]", 16) + "," +
                               int32_input("INPUT9", "[1,16]", 16))),
              400, "unexpected inference input 'INPUT9' for model 'simple'");
  check_error(infer(infer_body(int32_input("INPUT0", "[1,16]", 16, "FP32") + "," +
                               int32_input("INPUT1", "[1,16]", 16))),
              400,
              "inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects "
              "'INT32'");
  check_error(infer(infer_body(int32_input("INPUT0", "[1,15]", 15) + "," +
                               int32_input("INPUT1", "[1,16]", 16))),
              400,
              "unexpected shape for input 'INPUT0' for model 'simple'. Expected [-1,16], got "
              "[1,15]");
  const http_response no_batch = infer(
      infer_body(int32_input("INPUT0", "[16]", 16) + "," + int32_input("INPUT1", "[16]", 16)));
  CHECK(no_batch.status == 400);
  CHECK(no_batch.body().find("NOTE: Setting a non-zero max_batch_size") != std::string::npos);
  check_error(infer(infer_body(int32_input("INPUT0", "[9,16]", 144) + "," +
                               int32_input("INPUT1", "[9,16]", 144))),
              400, "inference request batch-size must be <= 8 for 'simple'");
  check_error(infer(infer_body(int32_input("INPUT0", "[2,16]", 32) + "," +
                               int32_input("INPUT1", "[1,16]", 16))),
              400, "input 'INPUT1' batch size does not match other inputs for 'simple'");
  check_error(infer(infer_body(
                  int32_input("INPUT0", "[1,16]", 16) + "," + int32_input("INPUT1", "[1,16]", 16),
                  R"(,"outputs":[{"name":"OUTPUT7"}])")),
              400, "unexpected inference output 'OUTPUT7' for model 'simple'");
  check_error(infer(infer_body(
                  int32_input("INPUT0", "[1,16]", 16) + "," + int32_input("INPUT1", "[1,16]", 16),
                  R"(,"outputs":[{"name":"OUTPUT0","parameters":{"classification":-1}}])")),
              400, "parameter 'classification' of output 'OUTPUT0' must be a non-negative integer");
  check_error(s.send("POST", "/v2/models/nope/infer", simple_body), 404,
              "Request for unknown model: 'nope' is not found");
  // Codec errors come through with the model named.
  const http_response malformed = infer("{\"inputs\":[1,2,}");
  CHECK(malformed.status == 400);
  const http_response short_binary = s.send(
      "POST", "/v2/models/simple/infer",
      R"({"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","parameters":{"binary_data_size":64}}]})",
      {{"Inference-Header-Content-Length", "98"}});
  CHECK(short_binary.status == 400);
}

TEST_CASE("classification through the protocol: JSON and binary, labels, batch rows") {
  server s;
  const std::string body =
      R"({"inputs":[{"name":"IN","shape":[4],"datatype":"FP32","data":[0.5,3.3,1.25,3.3]}],)"
      R"("outputs":[{"name":"OUT","parameters":{"classification":2}}]})";
  oip::result<oip::inference_response> r = oip::decode_response(
      oip::buffer::from_string(s.send("POST", "/v2/models/scores/infer", body).body()),
      std::nullopt);
  REQUIRE(r.ok());
  REQUIRE(r->outputs.size() == 1);
  CHECK(r->outputs[0].type() == oip::datatype::bytes);
  std::vector<std::string> got;
  for (std::string_view e : r->outputs[0].strings()) got.emplace_back(e);
  CHECK(got == std::vector<std::string>{"3.3:1:dog", "3.3:3"});

  const std::string binary_body =
      R"({"inputs":[{"name":"IN","shape":[3],"datatype":"FP32","data":[1,2,3]}],)"
      R"("outputs":[{"name":"OUT","parameters":{"classification":1,"binary_data":true}}]})";
  http_response binary = s.send("POST", "/v2/models/scores/infer", binary_body);
  REQUIRE(binary.status == 200);
  CHECK(binary.header("Content-Type") == "application/octet-stream");
  CHECK(binary.body().find("3:2:bird") != std::string::npos);

  // Batched: top 1 per row of the simple model's OUTPUT0.
  const std::string batched =
      infer_body(int32_input("INPUT0", "[2,16]", 32) + "," + int32_input("INPUT1", "[2,16]", 32),
                 R"(,"outputs":[{"name":"OUTPUT0","parameters":{"classification":1}}])");
  oip::result<oip::inference_response> rows = oip::decode_response(
      oip::buffer::from_string(s.send("POST", "/v2/models/simple/infer", batched).body()),
      std::nullopt);
  REQUIRE(rows.ok());
  CHECK(rows->outputs[0].shape() == oip::shape_type{2, 1});
  got.clear();
  for (std::string_view e : rows->outputs[0].strings()) got.emplace_back(e);
  CHECK(got == std::vector<std::string>{"30:15", "62:15"});
}

// `scores` with its own ranking: it answers a classification with the classes it ranked itself
// (as a model on a GPU does) and leaves the output out; anything else as `scores`.
std::shared_ptr<oip::model> make_self_ranking_scores() {
  oip::model_config c = oip::testing::make_scores()->config();
  c.name = "self_ranking";
  return oip::make_model(
      std::move(c), [](const oip::inference_request& r) -> oip::result<oip::model_output> {
        oip::model_output out;
        const oip::tensor& in = r.inputs[0];
        oip::result<oip::tensor> all = oip::tensor::make("OUT", in.type(), in.shape(), in.data());
        REQUIRE(all.ok());
        const auto* asked = r.outputs.empty()
                                ? nullptr
                                : r.outputs[0].parameters.get<std::int64_t>("classification");
        if (asked == nullptr) {
          out.outputs.push_back(std::move(*all));
          return out;
        }
        const oip::classification_rows rows = oip::classification_rows::whole_tensor;
        oip::result<std::vector<std::uint64_t>> at =
            oip::top_classes(*all, static_cast<std::size_t>(*asked), rows);
        if (!at) return std::move(at).error();
        std::vector<float> best;
        for (const std::uint64_t i : *at) best.push_back(all->at<float>(i));
        const auto k = static_cast<std::int64_t>(best.size());
        oip::result<oip::tensor> values =
            oip::tensor::from_values<float>("OUT", {k}, std::span<const float>(best));
        REQUIRE(values.ok());
        oip::result<oip::tensor> classes = oip::classification_of_ranked(
            *values, *at, rows, std::vector<std::string>{"cat", "dog", "bird"});
        if (!classes) return std::move(classes).error();
        out.classified.push_back(std::move(*classes));
        return out;
      });
}

TEST_CASE("a model that ranks its own classes answers as oip's classification does") {
  server s;
  REQUIRE(s.repository.add(make_self_ranking_scores()).ok());
  for (const std::string top : {"1", "2", "3", "9"}) {
    CAPTURE(top);
    const std::string body =
        std::string{
            R"({"inputs":[{"name":"IN","shape":[5],"datatype":"FP32","data":[0.5,3.3,-1,3.3,-7]}],)"} +
        R"("outputs":[{"name":"OUT","parameters":{"classification":)" + top + "}}]}";
    const http_response by_oip = s.send("POST", "/v2/models/scores/infer", body);
    const http_response by_model = s.send("POST", "/v2/models/self_ranking/infer", body);
    REQUIRE(by_oip.status == 200);
    REQUIRE(by_model.status == 200);
    oip::result<oip::inference_response> a =
        oip::decode_response(oip::buffer::from_string(by_oip.body()), std::nullopt);
    oip::result<oip::inference_response> b =
        oip::decode_response(oip::buffer::from_string(by_model.body()), std::nullopt);
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    REQUIRE(b->outputs.size() == 1);
    CHECK(b->outputs[0].shape() == a->outputs[0].shape());
    const auto as_strings = [](const oip::tensor& t) {
      std::vector<std::string> out;
      for (std::string_view e : t.strings()) out.emplace_back(e);
      return out;
    };
    CHECK(as_strings(b->outputs[0]) == as_strings(a->outputs[0]));
  }
  // Without a classification the output itself comes back.
  const http_response plain =
      s.send("POST", "/v2/models/self_ranking/infer",
             R"({"inputs":[{"name":"IN","shape":[2],"datatype":"FP32","data":[1,2]}]})");
  CHECK(plain.status == 200);
  CHECK(plain.body().find(R"("datatype":"FP32")") != std::string::npos);
}

TEST_CASE("a raw binary request goes to the model's only input; outputs come back binary") {
  server s;
  std::string raw(12, '\0');
  const float values[3] = {1.0F, 2.0F, 3.0F};
  std::memcpy(raw.data(), values, 12);
  http_response r =
      s.send("POST", "/v2/models/scores/infer", raw, {{"Inference-Header-Content-Length", "0"}});
  REQUIRE(r.status == 200);
  CHECK(r.header("Content-Type") == "application/octet-stream");
  CHECK(r.tail.size() == 1);
  CHECK(r.tail[0].as_string_view() == raw);
  // The two-input model cannot take one.
  CHECK(s.send("POST", "/v2/models/simple/infer", raw, {{"Inference-Header-Content-Length", "0"}})
            .status == 400);
}

TEST_CASE("compression: gzip and deflate requests, compressed replies, 415, bombs") {
  server s;
  http_response gz = s.send("POST", "/v2/models/simple/infer", gzip(simple_body),
                            {{"Content-Encoding", "gzip"}, {"Accept-Encoding", "gzip"}});
  REQUIRE(gz.status == 200);
  CHECK(gz.header("Content-Encoding") == "gzip");
  CHECK(gunzip(gz.body()).find(R"("model_name":"simple")") != std::string::npos);

  http_response deflated =
      s.send("POST", "/v2/models/simple/infer", gzip(simple_body, 15),
             {{"Content-Encoding", "deflate"}, {"Accept-Encoding", "gzip;q=0, deflate"}});
  REQUIRE(deflated.status == 200);
  CHECK(deflated.header("Content-Encoding") == "deflate");
  CHECK(gunzip(deflated.body(), 15).find(R"("id":"42")") != std::string::npos);

  // As in Triton, only a successful inference reply is compressed: errors and the other routes'
  // replies never are (tritonclient.http.aio reads them as they come while aiohttp asks for gzip).
  for (const char* target : {"/v2", "/v2/models/simple", "/v2/models/simple/config",
                             "/v2/models/stats", "/v2/models/nope"}) {
    CAPTURE(target);
    const http_response r = s.send("GET", target, "", {{"Accept-Encoding", "gzip, deflate"}});
    CHECK(r.body_size() > 16);
    CHECK_FALSE(r.header("Content-Encoding").has_value());
    CHECK(r.body().front() == '{');
  }
  const http_response refused =
      s.send("POST", "/v2/models/simple/infer", R"({"inputs":[]})", {{"Accept-Encoding", "gzip"}});
  CHECK(refused.status == 400);
  CHECK_FALSE(refused.header("Content-Encoding").has_value());
  CHECK(refused.body().find(R"({"error":)") == 0);

  http_response plain =
      s.send("POST", "/v2/models/simple/infer", simple_body, {{"Accept-Encoding", "br"}});
  CHECK(plain.status == 200);
  CHECK_FALSE(plain.header("Content-Encoding").has_value());

  // The reply's coding follows the q-values: the highest accepted, gzip on a tie, none when the
  // client ranks identity first or accepts no coding; a malformed qvalue drops its member.
  const std::pair<const char*, const char*> choices[] = {
      {"deflate;q=1, gzip;q=0.5", "deflate"},
      {"gzip;q=0.5, deflate;q=0.5", "gzip"},
      {"gzip;q=0.8, identity;q=0.9", ""},
      {"identity, gzip;q=0.9", ""},
      {"*", "gzip"},
      {"*;q=0.5, gzip;q=0", "deflate"},
      {"deflate;q=0.001", "deflate"},
      {"gzip;q=0", ""},
      {"gzip;q=2", ""},
      {"gzip;q=nan", ""},
      {"gzip;q=0.1234", ""},
      {"br, GZIP ; q=0.7", "gzip"},
      {"gzip;q=0.5;x=1, deflate;q=0.4", "gzip"},
      {"gzip;x=1;q=0.3, deflate;q=0.4", "deflate"},
      {"*;q=0, gzip", "gzip"},
      {"identity;q=0.5, gzip;q=0.5", "gzip"},
      {"", ""},
  };
  for (const auto& [accept, coding] : choices) {
    CAPTURE(accept);
    const http_response r =
        s.send("POST", "/v2/models/simple/infer", simple_body, {{"Accept-Encoding", accept}});
    CHECK(r.status == 200);
    CHECK(r.header("Content-Encoding").value_or("") == coding);
  }

  check_error(s.send("POST", "/v2/models/simple/infer", simple_body, {{"Content-Encoding", "br"}}),
              415, "unsupported Content-Encoding 'br': gzip, deflate or identity");
  CHECK(s.send("POST", "/v2/models/simple/infer", "not gzip", {{"Content-Encoding", "gzip"}})
            .status == 400);
  CHECK(s.send("POST", "/v2/models/simple/infer", gzip(simple_body).substr(0, 20),
               {{"Content-Encoding", "gzip"}})
            .status == 400);

  // A gzip body of two members (RFC 1952; `cat a.gz b.gz`) is read whole; bytes after a deflate
  // stream, or after the last member, are a 400, not dropped.
  const std::size_t half = simple_body.size() / 2;
  const http_response members =
      s.send("POST", "/v2/models/simple/infer",
             gzip(simple_body.substr(0, half)) + gzip(simple_body.substr(half)),
             {{"Content-Encoding", "gzip"}});
  CHECK(members.status == 200);
  for (const auto& [coding, body] :
       {std::pair<std::string, std::string>{"gzip", gzip(simple_body) + "trailing"},
        std::pair<std::string, std::string>{"deflate", gzip(simple_body, 15) + gzip("x", 15)}}) {
    CAPTURE(coding);
    const http_response trailing =
        s.send("POST", "/v2/models/simple/infer", body, {{"Content-Encoding", coding}});
    CHECK(trailing.status == 400);
  }
  const http_response after_deflate =
      s.send("POST", "/v2/models/simple/infer", gzip(simple_body, 15) + "x",
             {{"Content-Encoding", "deflate"}});
  CHECK(oip::decode_error(after_deflate.body(), 400).message() ==
        "the request body is not valid deflate data: bytes follow the end of the compressed data");

  // 64 MiB of zeros compress to ~64 KiB; a 1 MiB limit stops the inflation at the limit.
  oip::model_repository repository;
  REQUIRE(repository.add(oip::testing::make_simple()).ok());
  oip::executor workers{{1, 4}};
  oip::server_options options;
  options.bounds.max_body_bytes = 1 << 20;
  oip::http_handler small{repository, workers, options};
  oip::in_process_client client{small};
  const http_response bomb =
      client.send("POST", "/v2/models/simple/infer", gzip(std::string(64 << 20, '\0')),
                  {{"Content-Encoding", "gzip"}});
  CHECK(bomb.status == 413);

  // The routes that read a body for themselves count its decompression against the budget too:
  // 8 MiB decompressed could never fit in 1 MiB, a 413.
  options.bounds.max_body_bytes = 16 << 20;
  options.bounds.max_inflight_bytes = 1 << 20;
  oip::http_handler budgeted{repository, workers, options};
  oip::in_process_client budgeted_client{budgeted};
  const std::string zeros = gzip(std::string(8 << 20, ' '));
  for (const char* route : {"/v2/repository/index", "/v2/trace/setting", "/v2/logging"}) {
    CAPTURE(route);
    const http_response over =
        budgeted_client.send("POST", route, zeros, {{"Content-Encoding", "gzip"}});
    CHECK(over.status == 413);
    CHECK(over.body().find("the 1048576 bytes that the server holds in flight at most") !=
          std::string::npos);
  }
  CHECK(budgeted.service().memory().held() == 0);
}

TEST_CASE("the in-process client reads a reply larger than what the server's requests may take") {
  // A model's outputs are not bounded by its requests' limits: a server that takes little may
  // still answer more, and its own client must read that answer.
  oip::model_repository repository;
  REQUIRE(repository.add(oip::testing::make_simple()).ok());
  oip::executor workers{{1, 4}};
  oip::server_options options;
  options.bounds.max_json_bytes = 240;
  oip::http_handler handler{repository, workers, options};
  oip::in_process_client client{handler};

  std::vector<std::int32_t> large(16);
  std::vector<std::int32_t> large_plus_one(16);
  for (std::int32_t i = 0; i < 16; ++i) {
    large[static_cast<std::size_t>(i)] = 100000 + i;
    large_plus_one[static_cast<std::size_t>(i)] = 100001 + i;
  }
  oip::inference_request request;
  request.inputs.push_back(*oip::tensor::from_values<std::int32_t>(
      "INPUT0", {1, 16}, std::span<const std::int32_t>(large)));
  request.inputs.push_back(*oip::tensor::from_values<std::int32_t>(
      "INPUT1", {1, 16}, std::span<const std::int32_t>(std::vector<std::int32_t>(16, 1))));
  const oip::result<oip::encoded_body> sent = oip::encode_request(request, {.binary_inputs = true});
  REQUIRE(sent.ok());
  REQUIRE(sent->json.size() <= options.bounds.max_json_bytes);

  const oip::result<oip::inference_response> r = client.infer("simple", request, {true});
  REQUIRE_MESSAGE(r, r.error().message());
  REQUIRE(r->outputs.size() == 2);
  CHECK(oip::testing::values_of<std::int32_t>(r->outputs[0]) == large_plus_one);
  const oip::result<oip::encoded_body> answered = oip::encode_response(*r);
  REQUIRE(answered.ok());
  CHECK(answered->json.size() > options.bounds.max_json_bytes);  // the premise: a larger reply
}

TEST_CASE("the executor's full queue is a 503; cancellation reaches a running model") {
  oip::model_repository repository;
  auto waiter = std::make_shared<oip::testing::waiter>();
  REQUIRE(repository.add(waiter).ok());
  oip::executor workers{{1, 1}};
  oip::http_handler handler{repository, workers};
  const std::string body =
      R"({"inputs":[{"name":"IN","shape":[1],"datatype":"INT32","data":[1]}]})";
  const auto request = [&] {
    return oip::http_request{"POST", "/v2/models/waiter/infer", {}, oip::buffer::from_string(body)};
  };

  oip::cancellation first_cancel;
  std::atomic<int> first_status{0};
  handler.handle(
      request(), [&](http_response r) { first_status = r.status; }, first_cancel);
  while (waiter->started.load() == 0) std::this_thread::yield();  // the worker is busy now
  std::atomic<int> second_status{0};
  oip::cancellation second_cancel;
  handler.handle(
      request(), [&](http_response r) { second_status = r.status; }, second_cancel);
  // The one queue slot is taken by the second request: a third is refused at once.
  http_response third = handler.handle(request());
  CHECK(third.status == 503);
  CHECK(third.body().find("overloaded") != std::string::npos);

  second_cancel.cancel();  // cancelled while queued: the model never runs it
  first_cancel.cancel();   // cancelled while running: the model sees it and stops
  while (first_status.load() == 0 || second_status.load() == 0) std::this_thread::yield();
  CHECK(first_status.load() == 503);
  CHECK(second_status.load() == 503);
  CHECK(waiter->saw_cancel.load());
  CHECK(waiter->started.load() == 1);

  // A request whose timeout (microseconds, Triton's parameter) passes in the queue never runs.
  const std::string timed =
      R"({"parameters":{"timeout":1},"inputs":[{"name":"IN","shape":[1],"datatype":"INT32","data":[1]}]})";
  std::this_thread::sleep_for(std::chrono::milliseconds{2});
  http_response expired = handler.handle(
      oip::http_request{"POST", "/v2/models/waiter/infer", {}, oip::buffer::from_string(timed)});
  CHECK(expired.status == 503);
  CHECK(expired.body().find("timeout") != std::string::npos);
}

TEST_CASE("a host's own request with twin inputs or outputs is a 400, never run") {
  server s;
  // Straight to the service, as a host's own code calls it: no decoder in between.
  const auto infer = [&](oip::inference_request request) {
    auto promise = std::make_shared<std::promise<oip::result<oip::inference_response>>>();
    std::future<oip::result<oip::inference_response>> answer = promise->get_future();
    s.handler.service().infer({.model = "simple", .cancel = {}}, std::move(request),
                              oip::reply_to([promise](oip::result<oip::inference_response> r) {
                                promise->set_value(std::move(r));
                              }));
    return answer.get();
  };
  const std::vector<std::int32_t> values(16, 1);
  oip::inference_request twins;
  twins.inputs.push_back(*oip::tensor::from_values<std::int32_t>("INPUT0", {1, 16}, values));
  twins.inputs.push_back(*oip::tensor::from_values<std::int32_t>("INPUT0", {1, 16}, values));
  const oip::result<oip::inference_response> refused = infer(twins);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().http_status() == 400);
  CHECK(refused.error().message() == "duplicate input name 'INPUT0'");

  oip::inference_request asked = twins;
  asked.inputs[1] = *oip::tensor::from_values<std::int32_t>("INPUT1", {1, 16}, values);
  asked.outputs = {{"OUTPUT0", {}}, {"OUTPUT0", {}}};
  const oip::result<oip::inference_response> outputs = infer(asked);
  REQUIRE_FALSE(outputs.ok());
  CHECK(outputs.error().http_status() == 400);
  CHECK(outputs.error().message() == "duplicate requested output name 'OUTPUT0'");
  asked.outputs.pop_back();
  CHECK(infer(asked).ok());
}

TEST_CASE("the scheduling parameters: timeout an int64, priority an integer, triton_ reserved") {
  server s;
  const auto with_parameter = [](std::string_view name, std::string_view value) {
    std::string body = R"({"parameters":{")";
    body.append(name).append(R"(":)").append(value).append("},").append(simple_body, 1);
    return body;
  };
  CHECK(s.send("POST", "/v2/models/simple/infer", with_parameter("timeout", "60000000")).status ==
        200);
  // Timeouts beyond what the clock counts are no deadline, not an overflow into the past.
  for (const char* long_wait : {"10000000000000000", "9223372036854775807", "0"}) {
    CAPTURE(long_wait);
    CHECK(s.send("POST", "/v2/models/simple/infer", with_parameter("timeout", long_wait)).status ==
          200);
  }
  const http_response negative =
      s.send("POST", "/v2/models/simple/infer", with_parameter("timeout", "-1"));
  CHECK(negative.status == 400);
  CHECK(
      negative.body() ==
      R"x({"error":"invalid value -1 for 'timeout' parameter, expected microseconds (0 for none)"})x");
  CHECK(s.send("POST", "/v2/models/simple/infer", with_parameter("priority", "1")).status == 200);
  CHECK(
      s.send("POST", "/v2/models/simple/infer", with_parameter("priority", "18446744073709551615"))
          .status == 200);
  for (const char* wrong : {"\"1000\"", "1.5", "true", "18446744073709551615"}) {
    CAPTURE(wrong);
    const http_response r =
        s.send("POST", "/v2/models/simple/infer", with_parameter("timeout", wrong));
    CHECK(r.status == 400);
    CHECK(r.body() ==
          R"({"error":"invalid value type for 'timeout' parameter, expected an int64 integer"})");
  }
  for (const char* wrong : {"\"high\"", "0.5", "false"}) {
    CAPTURE(wrong);
    const http_response r =
        s.send("POST", "/v2/models/simple/infer", with_parameter("priority", wrong));
    CHECK(r.status == 400);
    CHECK(r.body() ==
          R"({"error":"invalid value type for 'priority' parameter, expected an integer"})");
  }
  // A priority is unsigned in Triton (its HTTP server reads it as one).
  const http_response below_zero =
      s.send("POST", "/v2/models/simple/infer", with_parameter("priority", "-3"));
  CHECK(below_zero.status == 400);
  CHECK(below_zero.body() == R"x({"error":"invalid value -3 for 'priority' parameter, expected a )x"
                             R"x(non-negative integer (0 for the default)"})x");
  // Triton reserves the prefix `triton_`: of it, a client sends only the empty final response's.
  const http_response reserved =
      s.send("POST", "/v2/models/simple/infer", with_parameter("triton_mine", "1"));
  CHECK(reserved.status == 400);
  CHECK(reserved.body().find("parameter keys starting with 'triton_' are reserved for Triton "
                             "usage. Only the following keys starting with 'triton_' are allowed: "
                             "triton_enable_empty_final_response") != std::string::npos);
  CHECK(s.send("POST", "/v2/models/simple/infer",
               with_parameter("triton_enable_empty_final_response", "true"))
            .status == 200);
  // Sequence parameters are checked for a model without sequences too, as Triton's frontends
  // do; well-formed ones are ignored.
  CHECK(s.send("POST", "/v2/models/simple/infer", with_parameter("sequence_id", "7")).status ==
        200);
  const http_response not_bool =
      s.send("POST", "/v2/models/simple/infer", with_parameter("sequence_start", "\"yes\""));
  CHECK(not_bool.status == 400);
  CHECK(not_bool.body() == R"({"error":"unable to parse 'sequence_start': expected a boolean"})");
  CHECK(s.send("POST", "/v2/models/simple/infer", with_parameter("sequence_id", "1.5")).status ==
        400);
}

TEST_CASE("statistics and configuration in Triton's shapes") {
  server s;
  REQUIRE(s.send("POST", "/v2/models/simple/infer", simple_body).status == 200);
  REQUIRE(s.send("POST", "/v2/models/simple/infer", "{").status == 400);
  const std::string stats = s.send("GET", "/v2/models/simple/stats").body();
  CHECK(stats.find(R"({"model_stats":[{"name":"simple","version":"1",)") == 0);
  CHECK(stats.find(R"("inference_count":1,"execution_count":1)") != std::string::npos);
  CHECK(stats.find(R"("success":{"count":1,)") != std::string::npos);
  CHECK(stats.find(R"("fail":{"count":1,)") != std::string::npos);
  CHECK(stats.find(R"("cache_hit":{"count":0,"ns":0})") != std::string::npos);
  CHECK(stats.find(R"("batch_stats":[{"batch_size":1,"compute_input":{"count":1,)") !=
        std::string::npos);
  CHECK(stats.find(R"("compute_output":{"count":1,)") != std::string::npos);
  const std::string all = s.send("GET", "/v2/models/stats").body();
  CHECK(all.find(R"("name":"scores")") != std::string::npos);
  CHECK(s.send("GET", "/v2/models/nope/stats").status == 404);

  const std::string config = s.send("GET", "/v2/models/simple/config").body();
  CHECK(config.find(R"("name":"simple","platform":"oip")") != std::string::npos);
  CHECK(config.find(R"("max_batch_size":8)") != std::string::npos);
  CHECK(config.find(R"({"name":"INPUT0","data_type":"TYPE_INT32","dims":[16]})") !=
        std::string::npos);
  CHECK(config.find("dynamic_batching") == std::string::npos);
  // Triton's autocompleted configs always have one (a tritonclient user may read it unchecked).
  CHECK(config.find(
            R"("instance_group":[{"name":"simple","kind":"KIND_CPU","count":1,"gpus":[]}])") !=
        std::string::npos);
}

namespace {
// A repository, with no model yet, behind a handler and an in-process client.
struct repository_host {
  oip::model_repository repository;
  oip::executor workers{{1, 8}};
  oip::http_handler handler{repository, workers, oip::testing::with_model_control()};
  oip::in_process_client client{handler};
};

class loader : public oip::model_loader {
 public:
  std::vector<std::string> available() const override { return {"simple", "scores"}; }
  oip::result<std::shared_ptr<oip::model>> load(std::string_view name) override {
    if (name == "simple") return oip::testing::make_simple();
    if (name == "scores") return oip::testing::make_scores();
    return oip::status{oip::errc::not_found, "no such model in the test loader"};
  }
};
}  // namespace

TEST_CASE("repository extension: index, load, unload") {
  repository_host host;
  oip::model_repository& repository = host.repository;
  oip::in_process_client& client = host.client;
  CHECK(client.send("POST", "/v2/repository/models/simple/load").status == 400);  // no loader
  repository.set_loader(std::make_shared<loader>());
  CHECK(client.send("POST", "/v2/repository/index").body() ==
        R"([{"name":"simple","state":"UNAVAILABLE","reason":"unloaded"},)"
        R"({"name":"scores","state":"UNAVAILABLE","reason":"unloaded"}])");
  CHECK(client.send("POST", "/v2/repository/models/simple/load").status == 200);
  CHECK(client.send("POST", "/v2/repository/models/simple/load").status == 200);  // no-op
  CHECK(client.ready("simple"));
  CHECK(client.send("POST", "/v2/repository/index")
            .body()
            .find(R"({"name":"simple","version":"1","state":"READY","reason":""})") == 1);
  CHECK(client.send("POST", "/v2/repository/models/nope/load").status == 404);
  CHECK(client.send("POST", "/v2/repository/models/simple/unload").status == 200);
  CHECK(repository.wait_removed("simple", std::chrono::seconds{5}));
  CHECK(client.send("GET", "/v2/models/simple").status == 404);
  CHECK(client.send("POST", "/v2/repository/models/simple/unload").status == 404);
  CHECK(client.send("GET", "/v2/repository/index").status == 405);

  // Triton's routes may name a repository: the index ignores it; a load or unload is refused.
  CHECK(client.send("POST", "/v2/repository/models/index").body() ==
        client.send("POST", "/v2/repository/index").body());
  for (const char* target :
       {"/v2/repository/models/models/simple/load", "/v2/repository/r/models/simple/unload"}) {
    CAPTURE(target);
    const http_response named = client.send("POST", target);
    CHECK(named.status == 501);
    CHECK(oip::decode_error(named.body(), 501).message() ==
          "'repository_name' specification is not supported");
  }
  CHECK(client.send("POST", "/v2/repository/r/models/simple").status == 404);
  CHECK(client.send("GET", "/v2/repository/r/models/simple/load").status == 405);
}

namespace {
// A loader that applies a `config` parameter: the model's name must match, and the loader keeps
// what it was given.
class configurable_loader : public loader {
 public:
  oip::result<std::shared_ptr<oip::model>> load_with(std::string_view name,
                                                     const oip::parameters& request) override {
    given = request;
    ++loads;
    return load(name);
  }
  oip::parameters given;
  int loads = 0;
};
}  // namespace

TEST_CASE("a model load's parameters reach the host's loader; one that takes none refuses them") {
  repository_host host;
  oip::model_repository& repository = host.repository;
  oip::in_process_client& client = host.client;
  repository.set_loader(std::make_shared<loader>());
  const std::string with_config = R"({"parameters":{"config":"{\"max_batch_size\":4}"}})";
  const oip::http_response refused =
      client.send("POST", "/v2/repository/models/simple/load", with_config);
  CHECK(refused.status == 400);
  CHECK(oip::decode_error(refused.body(), 400).message() ==
        "this server's model loader takes no load parameters: got 'config' for model 'simple'");
  for (const char* bad :
       {R"({"parameters":{"file:x":"not base64!"}})", R"({"parameters":{"file:x":"aGVsbG8"}})",
        R"({"parameters":{"file:x":5}})", R"({"parameters":[1]})",
        R"({"parameters":{"config":"a"})"}) {
    CAPTURE(bad);
    CHECK(client.send("POST", "/v2/repository/models/simple/load", bad).status == 400);
  }
  CHECK_FALSE(client.ready("simple"));
  CHECK(client.send("POST", "/v2/repository/models/simple/load", "{}").status == 200);

  auto configurable = std::make_shared<configurable_loader>();
  repository.set_loader(configurable);
  // "aGVsbG8=" is base64 for "hello": a file's content arrives as its bytes.
  const oip::http_response loaded =
      client.send("POST", "/v2/repository/models/scores/load",
                  R"({"parameters":{"config":"{}","file:1/model.bin":"aGVsbG8=","verbose":true}})");
  REQUIRE_MESSAGE(loaded.status == 200, loaded.body());
  CHECK(*configurable->given.find("config") == oip::parameter_value{std::string{"{}"}});
  CHECK(*configurable->given.find("file:1/model.bin") ==
        oip::parameter_value{std::string{"hello"}});
  CHECK(*configurable->given.find("verbose") == oip::parameter_value{true});
  CHECK(client.ready("scores"));

  // A loaded model is reloaded when parameters come (as in Triton), and left alone without.
  CHECK(client.send("POST", "/v2/repository/models/scores/load", with_config).status == 200);
  CHECK(configurable->loads == 2);
  CHECK(*configurable->given.find("config") ==
        oip::parameter_value{std::string{R"({"max_batch_size":4})"}});
  CHECK(client.ready("scores"));
  CHECK(client.send("POST", "/v2/repository/models/scores/load").status == 200);
  CHECK(configurable->loads == 2);
}

TEST_CASE("a load reloads a model that is there but not serving; other versions are refused") {
  repository_host host;
  // Each load makes a new model; the test turns the latest one's readiness off.
  struct counting_loader : oip::model_loader {
    std::vector<std::string> available() const override { return {"m"}; }
    oip::result<std::shared_ptr<oip::model>> load(std::string_view /*name*/) override {
      oip::model_config config;
      config.name = "m";
      config.outputs = {{"OUT", oip::datatype::int32, {1}, {}}};
      latest = std::make_shared<switchable>(std::move(config));
      ++loads;
      return std::shared_ptr<oip::model>{latest};
    }
    struct switchable : oip::function_model {
      explicit switchable(oip::model_config config)
          : function_model{std::move(config), [](const oip::inference_request&) {
                             return oip::result<oip::model_output>{oip::model_output{}};
                           }} {}
      [[nodiscard]] bool ready() const noexcept override { return is_ready.load(); }
      std::atomic<bool> is_ready{true};
    };
    std::shared_ptr<switchable> latest;
    int loads = 0;
  };
  auto models = std::make_shared<counting_loader>();
  host.repository.set_loader(models);
  oip::in_process_client& client = host.client;
  REQUIRE(client.send("POST", "/v2/repository/models/m/load").status == 200);
  CHECK(client.send("POST", "/v2/repository/models/m/load").status == 200);  // serving: a no-op
  CHECK(models->loads == 1);
  models->latest->is_ready = false;
  CHECK_FALSE(client.ready("m"));
  CHECK(client.send("POST", "/v2/repository/models/m/load").status == 200);  // reloaded
  CHECK(models->loads == 2);
  CHECK(client.ready("m"));

  // A version of the host's own, which the loader's version 1 could not replace.
  REQUIRE(host.repository.add(models->latest, 3).ok());
  const http_response refused = client.send("POST", "/v2/repository/models/m/load", "{}");
  CHECK(refused.status == 200);  // serving, no parameters: nothing to do
  models->latest->is_ready = false;
  const http_response other_version = client.send("POST", "/v2/repository/models/m/load");
  CHECK(other_version.status == 400);
  CHECK(oip::decode_error(other_version.body(), 400).message() ==
        "model 'm' has version 3, which this server's model loader does not make (it loads "
        "version 1): unload the model first");
  CHECK(models->loads == 2);
}

TEST_CASE("repository index: the ready filter of the body, and bodies that are not one") {
  repository_host host;
  oip::model_repository& repository = host.repository;
  oip::in_process_client& client = host.client;
  repository.set_loader(std::make_shared<loader>());
  REQUIRE(client.send("POST", "/v2/repository/models/scores/load").status == 200);
  const std::string scores = R"({"name":"scores","version":"1","state":"READY","reason":""})";
  const std::string simple = R"({"name":"simple","state":"UNAVAILABLE","reason":"unloaded"})";
  CHECK(client.send("POST", "/v2/repository/index", R"({"ready":true})").body() ==
        "[" + scores + "]");
  CHECK(client
            .send("POST", "/v2/repository/index", gzip(R"({"ready":true})"),
                  {{"Content-Encoding", "gzip"}})
            .body() == "[" + scores + "]");
  for (const char* every : {"", " \n", "{}", R"({"ready":false})", R"({"other":[1,{"x":2}]})"}) {
    CAPTURE(every);
    const std::string listed = client.send("POST", "/v2/repository/index", every).body();
    CHECK(listed.find(scores) != std::string::npos);
    CHECK(listed.find(simple) != std::string::npos);
  }
  for (const char* bad : {"{", "[]", R"({"ready":"yes"})", R"({"ready":1})",
                          R"({"ready":true,"ready":false})", R"({"ready":true} x)", "tru"}) {
    CAPTURE(bad);
    const http_response r = client.send("POST", "/v2/repository/index", bad);
    CHECK(r.status == 400);
    CHECK(r.body().find("repository index request") != std::string::npos);
  }
}

TEST_CASE("the in-process client: the whole protocol path in a few lines") {
  server s;
  oip::inference_request request;
  std::vector<std::int32_t> a(16, 5);
  std::vector<std::int32_t> b(16, 2);
  request.inputs.push_back(
      *oip::tensor::from_values<std::int32_t>("INPUT0", {1, 16}, std::span<const std::int32_t>(a)));
  request.inputs.push_back(
      *oip::tensor::from_values<std::int32_t>("INPUT1", {1, 16}, std::span<const std::int32_t>(b)));
  for (const bool binary : {false, true}) {
    oip::result<oip::inference_response> r = s.client.infer("simple", request, {binary, false});
    REQUIRE(r.ok());
    CHECK(r->outputs[0].at<std::int32_t>(0) == 7);
    CHECK(r->outputs[1].at<std::int32_t>(0) == 3);
  }
  oip::result<oip::inference_response> missing = s.client.infer("nope", request);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code() == oip::errc::not_found);
  CHECK(s.client.live());
  CHECK(s.client.ready());
}

TEST_CASE("the in-process client reaches a model whatever its name holds") {
  oip::model_config config = oip::testing::simple_config();
  config.name = "odd name?#%x";  // a '/' is no model name's (check_model_name)
  oip::model_repository repository;
  REQUIRE(repository.add(oip::testing::make_simple(config)).ok());
  oip::executor workers{{1, 8}};
  oip::http_handler handler{repository, workers};
  oip::in_process_client client{handler};
  CHECK(client.ready(config.name));
  oip::result<oip::inference_response> r =
      client.infer(config.name, oip::testing::simple_request(1));
  REQUIRE(r);
  CHECK(r->model_name == config.name);
}

TEST_CASE("model control off (the default): load and unload are a 400 in Triton's words") {
  server s;  // test_options(): model_control_mode::none
  s.repository.set_loader(std::make_shared<loader>());
  const std::string refused = "explicit model load / unload is not allowed if polling is enabled";
  check_error(s.send("POST", "/v2/repository/models/simple/unload"), 400, refused);
  check_error(s.send("POST", "/v2/repository/models/scores/load"), 400, refused);
  CHECK(s.client.ready("simple"));  // still served
  const http_response index = s.send("POST", "/v2/repository/index");
  CHECK(index.status == 200);
  CHECK(index.body().find(R"({"name":"simple","version":"1","state":"READY","reason":""})") !=
        std::string::npos);
}

TEST_CASE("a bad model name is a 400 in one wording on every route that names a model") {
  repository_host host;
  REQUIRE(host.repository.add(oip::testing::make_simple()).ok());
  const std::string why =
      "invalid model name: a model name is 1 to 255 bytes, not '.' or '..', without '/', '\\', "
      "NUL or other control characters";
  // Each as it stands in a path: percent-encoded where it would not be one segment otherwise.
  for (const std::string& bad :
       {std::string{".."}, std::string{"."}, std::string{"..%2Fsimple"}, std::string{"a%5Cb"},
        std::string{"a%00b"}, std::string{"a%0Ab"}, std::string(256, 'm')}) {
    CAPTURE(bad);
    const std::string model = "/v2/models/" + bad;
    for (const auto& [method, target] :
         {std::pair{"GET", model}, std::pair{"GET", model + "/ready"},
          std::pair{"GET", model + "/config"}, std::pair{"GET", model + "/stats"},
          std::pair{"GET", model + "/versions/1"}, std::pair{"POST", model + "/infer"},
          std::pair{"POST", model + "/generate"}, std::pair{"GET", model + "/trace/setting"},
          std::pair{"POST", "/v2/repository/models/" + bad + "/load"},
          std::pair{"POST", "/v2/repository/models/" + bad + "/unload"}}) {
      CAPTURE(target);
      check_error(host.client.send(method, target, method == std::string{"POST"} ? "{}" : ""), 400,
                  why);
    }
  }
  CHECK(host.client.ready("simple"));
}

namespace {
// Lists two models; counts what it builds and on which thread.
class watched_loader : public oip::model_loader {
 public:
  std::vector<std::string> available() const override { return {"simple", "scores"}; }
  oip::result<std::shared_ptr<oip::model>> load(std::string_view name) override {
    const std::lock_guard lock{mutex};
    built.emplace_back(name);
    threads.push_back(std::this_thread::get_id());
    if (name == "simple") return oip::testing::make_simple();
    return oip::testing::make_scores();
  }
  std::mutex mutex;
  std::vector<std::string> built;
  std::vector<std::thread::id> threads;
};
}  // namespace

TEST_CASE("the index builds nothing; loads build one model, off the caller's thread") {
  repository_host host;
  auto models = std::make_shared<watched_loader>();
  host.repository.set_loader(models);
  CHECK(host.client.send("POST", "/v2/repository/index").status == 200);
  CHECK(models->built.empty());
  // A name the loader does not list is refused before anything is built.
  check_error(host.client.send("POST", "/v2/repository/models/nope/load"), 404,
              "failed to load 'nope': this server's model loader has no model of that name");
  CHECK(models->built.empty());

  // The handler is called on this thread, as a transport's I/O thread calls it.
  REQUIRE(host.client.send("POST", "/v2/repository/models/scores/load").status == 200);
  REQUIRE(models->built == std::vector<std::string>{"scores"});
  CHECK(models->threads[0] != std::this_thread::get_id());
  REQUIRE(host.client.send("POST", "/v2/repository/models/scores/unload").status == 200);
  CHECK(host.repository.wait_removed("scores", std::chrono::seconds{5}));
  // Loads in a row are built one after the other, each once.
  REQUIRE(host.client.send("POST", "/v2/repository/models/simple/load").status == 200);
  CHECK(models->built == std::vector<std::string>{"scores", "simple"});
}

namespace {
// Builds "scores" only once `open` is called: the model-control thread is busy until then.
class gated_loader : public oip::model_loader {
 public:
  std::vector<std::string> available() const override { return {"scores", "simple"}; }
  oip::result<std::shared_ptr<oip::model>> load(std::string_view name) override {
    if (name == "simple") return oip::testing::make_simple();
    std::unique_lock lock{mutex_};
    opened_.wait(lock, [this] { return open_; });
    return oip::testing::make_scores();
  }
  void open() {
    const std::lock_guard lock{mutex_};
    open_ = true;
    opened_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable opened_;
  bool open_ = false;
};
}  // namespace

TEST_CASE("loads and unloads take effect in the order asked, a load of a serving model's too") {
  repository_host host;
  auto models = std::make_shared<gated_loader>();
  host.repository.set_loader(models);
  oip::inference_service& service = host.handler.service();
  REQUIRE(service.load("simple").ok());
  // While "scores" is built, an unload of "simple" and then a load of it, with no parameters, wait
  // their turn: the load finds the model unloaded, and loads it again.
  std::mutex mutex;
  std::vector<std::pair<std::string, oip::status>> outcomes;
  const auto record = [&](std::string what) {
    return [&, what = std::move(what)](oip::status s) {
      const std::lock_guard lock{mutex};
      outcomes.emplace_back(what, std::move(s));
    };
  };
  service.load("scores", {}, record("load scores"));
  service.unload("simple", record("unload simple"));
  service.load("simple", {}, record("load simple"));
  {
    const std::lock_guard lock{mutex};
    CHECK(outcomes.empty());  // each waits for the one before
  }
  models->open();
  const auto all_done = [&] {
    const std::lock_guard lock{mutex};
    return outcomes.size() == 3;
  };
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds{10};
  while (!all_done() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds{5});
  }
  const std::lock_guard lock{mutex};
  REQUIRE(outcomes.size() == 3);
  CHECK(outcomes[0].first == "load scores");
  CHECK(outcomes[1].first == "unload simple");
  CHECK(outcomes[2].first == "load simple");
  for (const auto& [what, outcome] : outcomes) CHECK_MESSAGE(outcome.ok(), what);
  CHECK(host.client.ready("simple"));
}

namespace {
// Answers whatever `answer` says, whatever it is asked; configured with OUT FP32 [4].
std::shared_ptr<oip::model> make_misconfigured(std::function<oip::tensor()> answer) {
  oip::model_config c;
  c.name = "wrong";
  c.inputs = {{"IN", oip::datatype::fp32, {4}, {}}};
  c.outputs = {{"OUT", oip::datatype::fp32, {4}, {}}};
  return oip::make_model(std::move(c), [answer](const oip::inference_request&) {
    return oip::result<oip::model_output>{oip::model_output{{answer()}, {}}};
  });
}
}  // namespace

TEST_CASE("outputs that do not fit the configuration fail the request with a 500 that names them") {
  const auto values = [](const char* name, oip::datatype type, oip::shape_type shape) {
    std::size_t count = 1;
    for (const std::int64_t d : shape) count *= static_cast<std::size_t>(d);
    return *oip::tensor::make(
        name, type, shape,
        oip::buffer::from_string(std::string(count * oip::element_size(type), '\0')));
  };
  const std::string body =
      R"({"inputs":[{"name":"IN","shape":[4],"datatype":"FP32","data":[1,2,3,4]}]})";
  struct wrong_output {
    std::function<oip::tensor()> answer;
    std::string why;
  };
  for (const wrong_output& wrong :
       {wrong_output{[&] { return values("Y", oip::datatype::fp32, {4}); },
                     "unexpected inference output 'Y' for model 'wrong'"},
        wrong_output{[&] { return values("OUT", oip::datatype::fp64, {4}); },
                     "model 'wrong' produced output 'OUT' as FP64, but its configuration says "
                     "FP32"},
        wrong_output{[&] { return values("OUT", oip::datatype::fp32, {3}); },
                     "model 'wrong' produced output 'OUT' with shape [3], which does not fit its "
                     "configuration's [4]"}}) {
    CAPTURE(wrong.why);
    repository_host host;
    REQUIRE(host.repository.add(make_misconfigured(wrong.answer)).ok());
    // Whether the client names the output or asks for all of them.
    check_error(host.client.send("POST", "/v2/models/wrong/infer", body), 500, wrong.why);
    const std::string naming = R"({"inputs":[{"name":"IN","shape":[4],"datatype":"FP32",)"
                               R"("data":[1,2,3,4]}],"outputs":[{"name":"OUT"}]})";
    check_error(host.client.send("POST", "/v2/models/wrong/infer", naming), 500, wrong.why);
    CHECK(host.client.send("GET", "/v2/health/live").status == 200);  // the server goes on
  }
  repository_host fine;
  REQUIRE(fine.repository
              .add(make_misconfigured([&] { return values("OUT", oip::datatype::fp32, {4}); }))
              .ok());
  CHECK(fine.client.send("POST", "/v2/models/wrong/infer", body).status == 200);
}

TEST_CASE("a JSON reply is bounded by the request's bytes on the wire; binary replies are not") {
  // identity_fp16's shape: 1 Mi FP16 zeros sent as binary data, gzip'd to about 2 KB.
  oip::model_config c;
  c.name = "identity_fp16";
  c.inputs = {{"INPUT0", oip::datatype::fp16, {-1}, {}}};
  c.outputs = {{"OUTPUT0", oip::datatype::fp16, {-1}, {}}};
  const auto identity = oip::make_model(c, [](const oip::inference_request& r) {
    return oip::result<oip::model_output>{
        oip::model_output{{*oip::tensor::make("OUTPUT0", oip::datatype::fp16, r.inputs[0].shape(),
                                              r.inputs[0].data())},
                          {}}};
  });
  const std::size_t count = std::size_t{1} << 20U;
  const auto request = [&](bool binary_output) {
    const std::string json = fmt::format(
        R"({{"inputs":[{{"name":"INPUT0","shape":[{}],"datatype":"FP16",)"
        R"("parameters":{{"binary_data_size":{}}}}}],"parameters":{{"binary_data_output":{}}}}})",
        count, count * 2, binary_output);
    return std::pair{gzip(json + std::string(count * 2, '\0')),
                     std::vector<oip::http_header>{
                         {"Inference-Header-Content-Length", std::to_string(json.size())},
                         {"Content-Encoding", "gzip"},
                         {"Accept-Encoding", "identity"}}};
  };
  {
    repository_host host;
    REQUIRE(host.repository.add(identity).ok());
    auto [wire, headers] = request(false);
    CHECK(wire.size() < 16 * 1024);
    const http_response refused =
        host.client.send("POST", "/v2/models/identity_fp16/infer", wire, headers);
    CHECK(refused.status == 400);
    CHECK(refused.body_size() < 1024);
    CHECK(oip::decode_error(refused.body(), 400).message() ==
          "the JSON reply of model 'identity_fp16' would be larger than 1048576 bytes, this "
          "request's bound: ask for its outputs as binary data (binary_data_output, or "
          "binary_data on each output)");
    auto [binary_wire, binary_headers] = request(true);
    const http_response binary =
        host.client.send("POST", "/v2/models/identity_fp16/infer", binary_wire, binary_headers);
    CHECK(binary.status == 200);
    CHECK(binary.body_size() > count * 2);
  }
  {
    // A host that raises the bound gets its JSON reply.
    oip::model_repository repository;
    oip::executor workers{{1, 8}};
    oip::server_options raised;
    raised.bounds.max_response_bytes = std::size_t{8} << 20U;
    oip::http_handler handler{repository, workers, raised};
    oip::in_process_client client{handler};
    REQUIRE(repository.add(identity).ok());
    auto [wire, headers] = request(false);
    const http_response answered =
        client.send("POST", "/v2/models/identity_fp16/infer", wire, headers);
    CHECK(answered.status == 200);
    CHECK(answered.body_size() > count * 2);  // "0," for each element
  }
}

TEST_CASE("a generate reply is bounded by the request's bytes on the wire too") {
  oip::model_config c;
  c.name = "echo";
  c.inputs = {{"INPUT0", oip::datatype::fp16, {-1}, {}}};
  c.outputs = {{"OUTPUT0", oip::datatype::fp16, {-1}, {}}};
  repository_host host;
  REQUIRE(
      host.repository
          .add(oip::make_model(c,
                               [](const oip::inference_request& r) {
                                 return oip::result<oip::model_output>{oip::model_output{
                                     {*oip::tensor::make("OUTPUT0", oip::datatype::fp16,
                                                         r.inputs[0].shape(), r.inputs[0].data())},
                                     {}}};
                               }))
          .ok());
  std::string zeros = "0";
  for (int i = 1; i < (1 << 20); ++i) zeros += ",0";
  const std::string wire = gzip(R"({"INPUT0":[)" + zeros + "]}");
  CHECK(wire.size() < 16 * 1024);
  const http_response refused =
      host.client.send("POST", "/v2/models/echo/generate", wire, {{"Content-Encoding", "gzip"}});
  CHECK(refused.status == 400);
  CHECK(oip::decode_error(refused.body(), 400).message() ==
        "the generate reply of model 'echo' would be larger than 1048576 bytes, this request's "
        "bound");
  // A small reply is answered.
  const http_response answered =
      host.client.send("POST", "/v2/models/echo/generate", R"({"INPUT0":[1,2,3]})");
  CHECK(answered.status == 200);
}

TEST_CASE("a loader that throws fails its load with a 500; the next load is served") {
  struct throwing_loader : oip::model_loader {
    std::vector<std::string> available() const override { return {"simple", "broken"}; }
    oip::result<std::shared_ptr<oip::model>> load(std::string_view name) override {
      if (name == "broken") throw std::runtime_error("no weights");
      return oip::testing::make_simple();
    }
  };
  repository_host host;
  host.repository.set_loader(std::make_shared<throwing_loader>());
  check_error(host.client.send("POST", "/v2/repository/models/broken/load"), 500,
              "loading model 'broken' failed: no weights");
  CHECK(host.client.send("POST", "/v2/repository/models/simple/load").status == 200);
  CHECK(host.client.ready("simple"));
  // A model that serves is left as it is, whether or not the loader lists it.
  REQUIRE(host.repository.add(oip::testing::make_scores()).ok());
  CHECK(host.client.send("POST", "/v2/repository/models/scores/load").status == 200);

  // A loader that cannot list its models: the index shows what serves, a load is a 500.
  struct unlisting_loader : oip::model_loader {
    std::vector<std::string> available() const override {
      throw std::runtime_error("repository gone");
    }
    oip::result<std::shared_ptr<oip::model>> load(std::string_view /*name*/) override {
      return oip::testing::make_simple();
    }
  };
  host.repository.set_loader(std::make_shared<unlisting_loader>());
  const oip::http_response index = host.client.send("POST", "/v2/repository/index");
  CHECK(index.status == 200);
  CHECK(index.body().find(R"("name":"scores")") != std::string::npos);
  check_error(host.client.send("POST", "/v2/repository/models/other/load"), 500,
              "this server's model loader failed to list its models");
}
