// The shared-memory extensions: the registry (mapping, bounds, lifetime), its routes, and inputs
// and outputs that pass through regions, in Triton's shapes and wording; CUDA regions through a
// stand-in for the GPU runtime (tests/fake_device_memory.hpp; the real one in gpu-check).

#include "codecs/detail/base64.hpp"
#include "fake_device_memory.hpp"
#include "served.hpp"
#include "serving_support.hpp"
#include "shm_object.hpp"
#include "test_support.hpp"
#include "trace_support.hpp"
#include "wait.hpp"

#include <oip/http_handler.hpp>
#include <oip/in_process_client.hpp>
#include <oip/json.hpp>
#include <oip/shared_memory.hpp>
#include <oip/trace_settings.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include <sys/statvfs.h>

TEST_CASE("the registry maps a region, reads and writes inside it, and reports it") {
  oip::testing::shm_object object{"registry", 8192};
  object.put(4096 + 16, oip::testing::iota(100, 4));
  oip::shared_memory_registry regions;
  REQUIRE(regions.register_region("r", object.key(), 4096, 1024).ok());

  // Offsets are within the region, which starts 4096 bytes into the object.
  oip::result<oip::buffer> bytes = regions.bytes("r", 16, 16);
  REQUIRE(bytes);
  CHECK(bytes->size() == 16);
  CHECK(bytes->load<std::int32_t>(0) == 100);
  CHECK(bytes->load<std::int32_t>(3) == 103);

  // A region that starts inside a page is mapped from that page.
  object.put(100 + 40, oip::testing::iota(5, 2));
  oip::shared_memory_registry unaligned;
  REQUIRE(unaligned.register_region("u", object.key(), 100, 4000).ok());
  oip::result<oip::buffer> inside = unaligned.bytes("u", 40, 8);
  REQUIRE(inside);
  CHECK(inside->load<std::int32_t>(0) == 5);
  CHECK(inside->load<std::int32_t>(1) == 6);
  CHECK(unaligned.bytes("u", 3996, 8).error().code() == oip::errc::invalid_argument);

  const std::vector<std::int32_t> written = oip::testing::iota(7, 3);
  oip::result<std::vector<oip::shared_memory_destination>> places =
      regions.destinations({{"OUT", {"r", 100, 12}}});
  REQUIRE(places);
  oip::inference_response response;
  response.outputs.push_back(*oip::tensor::from_values<std::int32_t>("OUT", {3}, written));
  REQUIRE(oip::write_outputs(*places, response).ok());
  CHECK(object.get<std::int32_t>(4096 + 100, 3) == written);

  oip::result<std::vector<oip::shared_memory_region>> all = regions.regions();
  REQUIRE(all);
  REQUIRE(all->size() == 1);
  CHECK(all->front() == oip::shared_memory_region{"r", object.key(), 4096, 1024});
  CHECK(oip::encode(*all) ==
        R"([{"name":"r","key":")" + object.key() + R"(","offset":4096,"byte_size":1024}])");

  SUBCASE("a view outlives the region's unregistration") {
    regions.unregister("r");
    CHECK(bytes->load<std::int32_t>(1) == 101);  // still mapped: the view holds the mapping
    CHECK(regions.bytes("r", 0, 4).error().code() == oip::errc::not_found);
  }
}

TEST_CASE("the registry refuses what a client gets wrong, with 4xx and Triton's wording") {
  oip::testing::shm_object object{"refusals", 4096};
  oip::shared_memory_registry regions;
  REQUIRE(regions.register_region("r", object.key(), 0, 64).ok());

  const oip::status taken = regions.register_region("r", object.key(), 0, 64);
  CHECK(taken.code() == oip::errc::already_exists);  // Triton's: HTTP 400, gRPC ALREADY_EXISTS
  CHECK(taken.http_status() == 400);
  CHECK(taken.grpc_status() == oip::grpc_code::already_exists);
  CHECK(taken.message() == "shared memory region 'r' already in manager");

  const oip::status missing = regions.register_region("x", "/oip_test_no_such_object", 0, 64);
  CHECK(missing.code() == oip::errc::invalid_argument);
  CHECK(missing.message().find("Unable to open shared memory region: '/oip_test_no_such_object'") ==
        0);

  const oip::status too_large = regions.register_region("y", object.key(), 4000, 200);
  CHECK(too_large.code() == oip::errc::invalid_argument);
  CHECK(too_large.message().find("failed to register shared memory region 'y': invalid args") == 0);
  CHECK(regions.register_region("z", object.key(), UINT64_MAX, 2).code() ==
        oip::errc::invalid_argument);
  CHECK(regions.register_region("", object.key(), 0, 64).message() ==
        "'region name' is necessary to register system shared memory region");

  CHECK(regions.bytes("nope", 0, 4).error().message() ==
        "Unable to find shared memory region: 'nope'");
  CHECK(regions.bytes("r", 64, 4)
            .error()
            .message()
            .find("Invalid offset for shared memory region: 'r'") == 0);
  CHECK(regions.bytes("r", 60, 8)
            .error()
            .message()
            .find("Invalid offset + byte size for shared memory region: 'r'") == 0);
  oip::inference_response two_values;
  two_values.outputs.push_back(
      *oip::tensor::from_values<std::int32_t>("OUT", {2}, std::vector<std::int32_t>{1, 2}));
  CHECK(oip::write_outputs(*regions.destinations({{"OUT", {"r", 0, 4}}}), two_values).message() ==
        "shared memory size specified with the request for output 'OUT' (4 bytes) should be at "
        "least 8 bytes to hold the results");
  CHECK(regions.destinations({{"OUT", {"gone", 0, 4}}}).error().code() == oip::errc::not_found);

  // Keys that are not one POSIX shared-memory name.
  for (const std::string& key :
       std::vector<std::string>{"", "/", "/a/b", "..", std::string{"/a\0b", 4}}) {
    CAPTURE(key);
    CHECK(regions.register_region("k", key, 0, 8)
              .message()
              .find("is not a shared memory object "
                    "name") != std::string::npos);
  }
  CHECK(regions.regions(std::string_view{"nope"}).error().code() == oip::errc::not_found);

  regions.unregister("never-registered");  // not an error, as in Triton
  regions.unregister_all();
  CHECK(regions.regions()->empty());
}

namespace {

struct shm_server {
  oip::model_repository repository;
  oip::executor workers{{2, 64}};
  oip::http_handler handler;
  oip::in_process_client client{handler};

  explicit shm_server(bool offered = true) : shm_server{make_options(offered)} {}
  explicit shm_server(oip::server_options options)
      : handler{repository, workers, std::move(options)} {
    REQUIRE(repository.add(oip::testing::make_simple()).ok());
  }
  static oip::server_options make_options(bool offered) {
    oip::server_options options;
    options.shared_memory = offered;
    return options;
  }
  oip::http_response send(std::string method, std::string target, std::string body = {}) {
    return client.send(std::move(method), std::move(target), std::move(body));
  }
  void register_region(const std::string& name, const oip::testing::shm_object& object,
                       std::uint64_t offset, std::uint64_t byte_size) {
    const oip::http_response r =
        send("POST", "/v2/systemsharedmemory/region/" + name + "/register",
             oip::encode_shared_memory_register({name, object.key(), offset, byte_size}));
    REQUIRE_MESSAGE(r.status == 200, r.body());
  }
};

std::string shm_input(const std::string& name, const std::string& region, std::size_t offset,
                      std::size_t byte_size) {
  return R"({"name":")" + name + R"(","shape":[1,16],"datatype":"INT32","parameters":{)" +
         R"("shared_memory_region":")" + region + R"(","shared_memory_offset":)" +
         std::to_string(offset) + R"(,"shared_memory_byte_size":)" + std::to_string(byte_size) +
         "}}";
}

std::string shm_output(const std::string& name, const std::string& region, std::size_t offset,
                       std::size_t byte_size) {
  return R"({"name":")" + name + R"(","parameters":{"shared_memory_region":")" + region +
         R"(","shared_memory_offset":)" + std::to_string(offset) +
         R"(,"shared_memory_byte_size":)" + std::to_string(byte_size) + "}}";
}

}  // namespace

TEST_CASE("inputs and outputs pass through registered regions (HTTP routes, Triton's shapes)") {
  oip::testing::shm_object inputs{"inputs", 128};
  oip::testing::shm_object outputs{"outputs", 256};
  inputs.put(0, oip::testing::iota(0, 16));
  inputs.put(64, std::vector<std::int32_t>(16, 1));
  shm_server server;

  const oip::http_response metadata = server.send("GET", "/v2");
  CHECK(metadata.body().find("\"system_shared_memory\"") != std::string::npos);

  server.register_region("in", inputs, 0, 128);
  server.register_region("out", outputs, 0, 256);
  const oip::http_response status = server.send("GET", "/v2/systemsharedmemory/status");
  CHECK(status.status == 200);
  CHECK(status.body() == R"([{"name":"in","key":")" + inputs.key() +
                             R"(","offset":0,"byte_size":128},{"name":"out","key":")" +
                             outputs.key() + R"(","offset":0,"byte_size":256}])");
  CHECK(server.send("GET", "/v2/systemsharedmemory/region/in/status").body() ==
        R"([{"name":"in","key":")" + inputs.key() + R"(","offset":0,"byte_size":128}])");

  // OUTPUT0 to the region, OUTPUT1 in the JSON as usual.
  const std::string body = R"({"id":"7","inputs":[)" + shm_input("INPUT0", "in", 0, 64) + "," +
                           shm_input("INPUT1", "in", 64, 64) + R"(],"outputs":[)" +
                           shm_output("OUTPUT0", "out", 128, 128) + R"(,{"name":"OUTPUT1"}]})";
  const oip::http_response r = server.send("POST", "/v2/models/simple/infer", body);
  REQUIRE_MESSAGE(r.status == 200, r.body());
  CHECK(r.body().find(R"({"name":"OUTPUT0","datatype":"INT32","shape":[1,16]})") !=
        std::string::npos);
  CHECK(r.body().find("shared_memory") == std::string::npos);
  CHECK(r.body().find(R"("name":"OUTPUT1","datatype":"INT32","shape":[1,16],"data":[-1,0,1,)") !=
        std::string::npos);
  CHECK(outputs.get<std::int32_t>(128, 16) == oip::testing::iota(1, 16));
  CHECK(outputs.get<std::int32_t>(0, 16) == std::vector<std::int32_t>(16, 0));  // untouched

  SUBCASE("the decoder names the regions; the inputs read from them are views, in order") {
    oip::shared_memory_registry regions;
    REQUIRE(regions.register_region("in", inputs.key(), 0, 128).ok());
    oip::result<oip::inference_request> decoded =
        oip::decode_request(oip::buffer::from_string(body), std::nullopt, {}, "simple");
    REQUIRE(decoded);
    CHECK(decoded->inputs.empty());
    REQUIRE(decoded->shared_memory_inputs.size() == 2);
    CHECK(decoded->shared_memory_inputs[1].name == "INPUT1");
    CHECK(decoded->shared_memory_inputs[1].position == 1);
    CHECK(decoded->shared_memory_inputs[1].place == oip::shared_memory_reference{"in", 64, 64});
    CHECK(decoded->shared_memory_inputs[1].parameters.empty());
    REQUIRE(oip::read_shared_memory_inputs(*decoded, &regions, {}, "simple").ok());
    CHECK(decoded->shared_memory_inputs.empty());
    REQUIRE(decoded->inputs.size() == 2);
    CHECK(decoded->inputs[0].name() == "INPUT0");
    CHECK(decoded->inputs[0].parameters().empty());
    CHECK(decoded->inputs[1].data().size() == 64);
    CHECK(decoded->inputs[1].at<std::int32_t>(0) == 1);
    inputs.put(64, std::vector<std::int32_t>{5});
    CHECK(decoded->inputs[1].at<std::int32_t>(0) == 5);  // no copy was made
  }

  SUBCASE("unregistering one region, then all") {
    CHECK(server.send("POST", "/v2/systemsharedmemory/region/in/unregister").status == 200);
    CHECK(server.send("GET", "/v2/systemsharedmemory/region/in/status").status == 404);
    const oip::http_response again = server.send("POST", "/v2/models/simple/infer", body);
    CHECK(again.status == 404);
    CHECK(oip::decode_error(again.body(), again.status).message() ==
          "Unable to find shared memory region: 'in'");
    CHECK(server.send("POST", "/v2/systemsharedmemory/unregister").status == 200);
    CHECK(server.send("GET", "/v2/systemsharedmemory/status").body() == "[]");
  }
}

TEST_CASE("shared-memory mistakes are 4xx in Triton's wording") {
  oip::testing::shm_object inputs{"mistakes", 256};
  shm_server server;
  server.register_region("in", inputs, 0, 256);
  const auto infer = [&](const std::string& inputs_json, const std::string& outputs_json = "") {
    const std::string body = R"({"inputs":[)" + inputs_json + "]" +
                             (outputs_json.empty() ? "" : R"(,"outputs":[)" + outputs_json + "]") +
                             "}";
    return server.send("POST", "/v2/models/simple/infer", body);
  };
  const auto message = [](const oip::http_response& r) {
    return oip::decode_error(r.body(), r.status).message();
  };
  const std::string input1 = shm_input("INPUT1", "in", 64, 64);

  oip::http_response r = infer(shm_input("INPUT0", "in", 0, 60) + "," + input1);
  CHECK(r.status == 400);
  CHECK(message(r) ==
        "input byte size mismatch for input 'INPUT0' for model 'simple'. Expected "
        "64, got 60");

  r = infer(shm_input("INPUT0", "in", 224, 64) + "," + input1);
  CHECK(r.status == 400);
  CHECK(message(r).find("Invalid offset + byte size for shared memory region: 'in'") == 0);

  r = infer(shm_input("INPUT0", "elsewhere", 0, 64) + "," + input1);
  CHECK(r.status == 404);
  CHECK(message(r) == "Unable to find shared memory region: 'elsewhere'");

  // data and a region both, or a region of the wrong type.
  r = infer(R"({"name":"INPUT0","shape":[1,16],"datatype":"INT32",)"
            R"("data":[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],)"
            R"("parameters":{"shared_memory_region":"in","shared_memory_byte_size":64}},)" +
            input1);
  CHECK(r.status == 400);
  CHECK(message(r).find("But set 'data' 'shared_memory_region'") != std::string::npos);
  r = infer(
      R"({"name":"INPUT0","shape":[1,16],"datatype":"INT32","parameters":{"shared_memory_region":1}},)" +
      input1);
  CHECK(r.status == 400);
  CHECK(message(r) ==
        "invalid value for 'shared_memory_region' of input 'INPUT0': expected a string");
  r = infer(
      R"({"name":"INPUT0","shape":[1,16],"datatype":"INT32","parameters":{"shared_memory_offset":0}},)" +
      input1);
  CHECK(r.status == 400);
  CHECK(message(r) ==
        "'shared_memory_offset' can not be specified without "
        "'shared_memory_region' parameter for input 'INPUT0'");

  r = infer(
      R"({"name":"INPUT0","shape":[1,16],"datatype":"INT32","parameters":{"shared_memory_region":"in"}},)" +
      input1);
  CHECK(r.status == 400);
  CHECK(message(r) ==
        "'shared_memory_byte_size' must be specified along with "
        "'shared_memory_region' parameter for input 'INPUT0'");

  // An output region unknown (found before the model runs), too small, or with classification.
  r = infer(shm_input("INPUT0", "in", 0, 64) + "," + input1,
            shm_output("OUTPUT0", "nowhere", 0, 64));
  CHECK(r.status == 404);
  CHECK(message(r) == "Unable to find shared memory region: 'nowhere'");
  const std::string both_inputs = shm_input("INPUT0", "in", 0, 64) + "," + input1;
  r = infer(both_inputs, shm_output("OUTPUT0", "in", 128, 32));
  CHECK(r.status == 400);
  CHECK(message(r) ==
        "shared memory size specified with the request for output 'OUTPUT0' (32 "
        "bytes) should be at least 64 bytes to hold the results");
  r = infer(
      both_inputs,
      R"({"name":"OUTPUT0","parameters":{"classification":2,"shared_memory_region":"in","shared_memory_byte_size":8}})");
  CHECK(r.status == 400);
  CHECK(message(r).find("Output can't set both 'shared_memory_region' and 'classification'") == 0);

  // Registration mistakes.
  r = server.send("POST", "/v2/systemsharedmemory/region/in/register",
                  oip::encode_shared_memory_register({"in", inputs.key(), 0, 64}));
  CHECK(r.status == 400);
  CHECK(message(r) == "shared memory region 'in' already in manager");
  r = server.send("POST", "/v2/systemsharedmemory/region/other/register", R"({"byte_size":4})");
  CHECK(r.status == 400);
  CHECK(message(r) == "Shared memory register request has no 'key' field");
  r = server.send("POST", "/v2/systemsharedmemory/region/other/register",
                  R"({"key":"/k","byte_size":-4})");
  CHECK(r.status == 400);
  r = server.send("POST", "/v2/systemsharedmemory/register", R"({"key":"/k","byte_size":4})");
  CHECK(r.status == 400);
  CHECK(server.send("GET", "/v2/systemsharedmemory/region/in/register").status == 405);
  CHECK(server.send("POST", "/v2/systemsharedmemory/status").status == 405);
  CHECK(server.send("GET", "/v2/systemsharedmemory/region/in/bogus").status == 404);
}

TEST_CASE("without the extension, shared memory is refused and CUDA's routes answer as empty") {
  shm_server server{false};
  const oip::http_response metadata = server.send("GET", "/v2");
  CHECK(metadata.body().find("system_shared_memory") == std::string::npos);
  // No region is there: the status is empty, and the clients' clean-up calls succeed
  // (perf_analyzer unregisters every region, system ones first, whatever its mode).
  CHECK(server.send("GET", "/v2/systemsharedmemory/status").body() == "[]");
  const oip::http_response named = server.send("GET", "/v2/systemsharedmemory/region/in/status");
  CHECK(named.status == 404);
  CHECK(oip::decode_error(named.body(), 404).message() ==
        "Unable to find system shared memory region: 'in'");
  CHECK(server.send("POST", "/v2/systemsharedmemory/unregister").status == 200);
  CHECK(server.send("POST", "/v2/systemsharedmemory/region/in/unregister").status == 200);
  // Registering says the extension is not offered, before it looks at the request.
  for (const char* target :
       {"/v2/systemsharedmemory/register", "/v2/systemsharedmemory/region/in/register"}) {
    const oip::http_response refused = server.send("POST", target, "not json");
    CHECK(refused.status == 501);
    CHECK(oip::decode_error(refused.body(), refused.status).message() ==
          "this server does not offer the system shared-memory extension");
  }
  const oip::http_response r = server.send("POST", "/v2/models/simple/infer",
                                           R"({"inputs":[)" + shm_input("INPUT0", "in", 0, 64) +
                                               "," + shm_input("INPUT1", "in", 64, 64) + "]}");
  CHECK(r.status == 400);
  CHECK(oip::decode_error(r.body(), r.status).message() ==
        "input 'INPUT0' names shared memory region 'in', but this server does not offer the "
        "shared-memory extension");

  // perf_analyzer unregisters CUDA regions before it starts, whatever its mode.
  CHECK(server.send("POST", "/v2/cudasharedmemory/unregister").status == 200);
  CHECK(server.send("GET", "/v2/cudasharedmemory/status").body() == "[]");
  CHECK(server.send("POST", "/v2/cudasharedmemory/region/g/register", "{}").status == 501);
}

TEST_CASE("a BYTES input in shared memory is checked element by element") {
  oip::testing::shm_object object{"bytes", 64};
  const std::vector<std::uint8_t> two_strings{3, 0, 0, 0, 'a', 'b', 'c', 0, 0, 0, 0};
  object.put(0, two_strings);
  oip::shared_memory_registry regions;
  REQUIRE(regions.register_region("s", object.key(), 0, 64).ok());
  const auto decode = [&](std::size_t byte_size, const std::string& shape) {
    const std::string body = R"({"inputs":[{"name":"TEXT","shape":)" + shape +
                             R"(,"datatype":"BYTES","parameters":{"shared_memory_region":"s",)"
                             R"("shared_memory_byte_size":)" +
                             std::to_string(byte_size) + "}}]}";
    oip::result<oip::inference_request> decoded =
        oip::decode_request(oip::buffer::from_string(body), std::nullopt, {}, "m");
    if (!decoded) return decoded;
    if (oip::status s = oip::read_shared_memory_inputs(*decoded, &regions, {}, "m"); !s.ok()) {
      return oip::result<oip::inference_request>{s};
    }
    return decoded;
  };
  oip::result<oip::inference_request> good = decode(two_strings.size(), "[2]");
  REQUIRE(good);
  std::vector<std::string> seen;
  for (std::string_view element : good->inputs[0].strings()) seen.emplace_back(element);
  CHECK(seen == std::vector<std::string>{"abc", ""});
  // A copy: a length prefix that the client changes afterwards cannot reach the tensor.
  object.put(0, std::vector<std::uint8_t>{0xff, 0xff, 0xff, 0x7f});
  CHECK(good->inputs[0].data().load<std::uint8_t>(0) == 3);

  // One element short of the shape, and a length that runs past the bytes given.
  CHECK(decode(two_strings.size(), "[3]").error().code() == oip::errc::invalid_argument);
  const oip::result<oip::inference_request> cut = decode(6, "[2]");
  REQUIRE_FALSE(cut);
  CHECK(cut.error().code() == oip::errc::invalid_argument);
  CHECK(cut.error().message().find("for model 'm'") != std::string::npos);
}

TEST_CASE("a client reads the outputs that a server wrote to its regions (in-process client)") {
  oip::testing::shm_object inputs{"client_in", 128};
  oip::testing::shm_object outputs{"client_out", 256};
  inputs.put(0, oip::testing::iota(0, 16));
  shm_server server;
  server.register_region("out", outputs, 0, 256);
  oip::shared_memory_registry mine;  // the client's own mapping of the region it registered
  REQUIRE(mine.register_region("out", outputs.key(), 0, 256).ok());
  oip::in_process_client client{server.handler, &mine};

  oip::inference_request request;
  request.inputs.push_back(*oip::tensor::from_values<std::int32_t>(
      "INPUT0", {1, 16}, std::span<const std::int32_t>(oip::testing::iota(0, 16))));
  request.inputs.push_back(*oip::tensor::from_values<std::int32_t>(
      "INPUT1", {1, 16}, std::span<const std::int32_t>(std::vector<std::int32_t>(16, 1))));
  oip::parameters in_region;
  in_region.set("shared_memory_region", std::string{"out"});
  in_region.set("shared_memory_offset", std::int64_t{64});
  in_region.set("shared_memory_byte_size", std::int64_t{128});
  request.outputs.push_back({"OUTPUT0", in_region});
  request.outputs.push_back({"OUTPUT1", {}});

  for (const bool binary : {false, true}) {
    CAPTURE(binary);
    oip::result<oip::inference_response> r = client.infer("simple", request, {binary});
    REQUIRE_MESSAGE(r, r.error().message());
    REQUIRE(r->outputs.size() == 2);
    const oip::tensor& sum = r->outputs[0];
    CHECK(sum.name() == "OUTPUT0");
    CHECK(sum.shape() == oip::shape_type{1, 16});
    REQUIRE(sum.data().size() == 64);  // the output's bytes, not the whole room
    CHECK(oip::testing::values_of<std::int32_t>(sum) == oip::testing::iota(1, 16));
    CHECK(sum.parameters().empty());
    CHECK(oip::testing::values_of<std::int32_t>(r->outputs[1]) == oip::testing::iota(-1, 16));
    outputs.put(64, std::vector<std::int32_t>{42});
    CHECK(sum.at<std::int32_t>(0) == 42);  // a view of the client's mapping, not a copy
  }

  SUBCASE("a request-level binary_data_output leaves the output in shared memory as it is") {
    // The client spells binary_data out on listed outputs, but not on one placed in a region:
    // the server refuses the two together.
    oip::inference_request all_binary = request;
    all_binary.parameters.set("binary_data_output", true);
    const oip::result<oip::encoded_body> body = oip::encode_request(all_binary);
    REQUIRE(body.ok());
    CHECK(body->json.find(R"({"name":"OUTPUT1","parameters":{"binary_data":true}})") !=
          std::string::npos);
    CHECK(body->json.find(R"("shared_memory_byte_size":128,"binary_data")") == std::string::npos);
    const oip::result<oip::inference_response> r = client.infer("simple", all_binary);
    REQUIRE_MESSAGE(r, r.error().message());
    REQUIRE(r->outputs.size() == 2);
    CHECK(oip::testing::values_of<std::int32_t>(r->outputs[0]) == oip::testing::iota(1, 16));
    CHECK(oip::testing::values_of<std::int32_t>(r->outputs[1]) == oip::testing::iota(-1, 16));
  }
  SUBCASE("without its own mapping, the client cannot read such an output") {
    oip::in_process_client unmapped{server.handler};
    const oip::result<oip::inference_response> r = unmapped.infer("simple", request);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == oip::errc::invalid_argument);
    CHECK(r.error().message().find("'OUTPUT0' must set only one of") != std::string::npos);
  }
  SUBCASE("a region the client has not mapped is named") {
    oip::shared_memory_registry other;
    oip::in_process_client lost{server.handler, &other};
    const oip::result<oip::inference_response> r = lost.infer("simple", request);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == oip::errc::not_found);
    CHECK(r.error().message() == "Unable to find shared memory region: 'out'");
  }
}

TEST_CASE("decode_response reads outputs in shared memory: fixed sizes fit, BYTES are walked") {
  oip::testing::shm_object object{"response", 64};
  const std::vector<std::uint8_t> two_strings{2, 0, 0, 0, 'h', 'i', 0, 0, 0, 0};
  object.put(0, two_strings);
  object.put(32, std::vector<float>{1.5F, -2.0F});
  oip::shared_memory_registry mine;
  REQUIRE(mine.register_region("r", object.key(), 0, 64).ok());
  const auto places = [&](std::uint64_t offset, std::uint64_t room) {
    return oip::shared_memory_outputs{&mine, {{"Y", {"r", offset, room}}}};
  };
  const auto decode = [](const std::string& output, const oip::shared_memory_outputs& placed) {
    return oip::decode_response(
        oip::buffer::from_string(R"({"model_name":"m","outputs":[)" + output + "]}"), std::nullopt,
        {}, &placed);
  };

  const oip::shared_memory_outputs strings = places(0, 32);
  oip::result<oip::inference_response> text =
      decode(R"({"name":"Y","datatype":"BYTES","shape":[2]})", strings);
  REQUIRE_MESSAGE(text, text.error().message());
  std::vector<std::string> seen;
  for (std::string_view element : text->outputs[0].strings()) seen.emplace_back(element);
  CHECK(seen == std::vector<std::string>{"hi", ""});
  CHECK(text->outputs[0].data().size() == two_strings.size());  // the elements, not the room
  object.put(0, std::vector<std::uint8_t>{0xff, 0xff, 0xff, 0x7f});
  CHECK(text->outputs[0].data().load<std::uint8_t>(0) == 2);  // BYTES are copied
  const oip::result<oip::inference_response> garbled =
      decode(R"({"name":"Y","datatype":"BYTES","shape":[2]})", strings);
  REQUIRE_FALSE(garbled);
  CHECK(garbled.error().code() == oip::errc::invalid_argument);
  CHECK(garbled.error().message() ==
        "malformed BYTES data for output 'Y' in shared memory region 'r': element 0 has length "
        "2147483647 but only 28 bytes remain");
  object.put(0, two_strings);
  const oip::result<oip::inference_response> short_of =
      decode(R"({"name":"Y","datatype":"BYTES","shape":[3]})", places(0, 10));
  REQUIRE_FALSE(short_of);
  CHECK(short_of.error().message() ==
        "unexpected number of BYTES elements for output 'Y' in shared memory region 'r': "
        "expecting 3, got 2");

  oip::result<oip::inference_response> floats =
      decode(R"({"name":"Y","datatype":"FP32","shape":[2]})", places(32, 32));
  REQUIRE(floats);
  CHECK(oip::testing::values_of<float>(floats->outputs[0]) == std::vector<float>{1.5F, -2.0F});
  const oip::result<oip::inference_response> too_big =
      decode(R"({"name":"Y","datatype":"FP32","shape":[3]})", places(32, 8));
  REQUIRE_FALSE(too_big);
  CHECK(too_big.error().code() == oip::errc::invalid_argument);
  CHECK(
      too_big.error().message() ==
      "output 'Y' of shape [3] does not fit in the 8 bytes asked for in shared memory region 'r'");
  const oip::result<oip::inference_response> outside =
      decode(R"({"name":"Y","datatype":"FP32","shape":[2]})", places(60, 8));
  REQUIRE_FALSE(outside);
  CHECK(outside.error().code() == oip::errc::invalid_argument);

  // Data that the response does carry is read from it; other outputs are as usual.
  oip::result<oip::inference_response> carried =
      decode(R"({"name":"Y","datatype":"FP32","shape":[1],"data":[7]},)"
             R"({"name":"Z","datatype":"INT8","shape":[1],"data":[3]})",
             places(32, 32));
  REQUIRE(carried);
  CHECK(oip::testing::values_of<float>(carried->outputs[0]) == std::vector<float>{7.0F});
  CHECK(oip::testing::values_of<std::int8_t>(carried->outputs[1]) == std::vector<std::int8_t>{3});

  // The places are read from the request as a server reads them, and the request keeps them.
  oip::inference_request request;
  oip::parameters in_region;
  in_region.set("shared_memory_region", std::string{"r"});
  in_region.set("shared_memory_byte_size", std::int64_t{8});
  request.outputs.push_back({"Y", in_region});
  request.outputs.push_back({"Z", {}});
  const oip::result<oip::shared_memory_outputs> asked =
      oip::shared_memory_outputs::of(request, mine);
  REQUIRE(asked);
  REQUIRE(asked->outputs.size() == 1);
  CHECK(asked->outputs[0].name == "Y");
  CHECK(asked->outputs[0].place.region == "r");
  CHECK(asked->outputs[0].place.offset == 0);
  CHECK(asked->outputs[0].place.byte_size == 8);
  CHECK(asked->find("Z") == nullptr);
  CHECK(request.outputs[0].parameters.size() == 2);
  request.outputs[0].parameters = {};
  request.outputs[0].parameters.set("shared_memory_region", std::string{"r"});
  const oip::result<oip::shared_memory_outputs> no_size =
      oip::shared_memory_outputs::of(request, mine);
  REQUIRE_FALSE(no_size);
  CHECK(no_size.error().message() ==
        "'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter "
        "for output 'Y'");
}

TEST_CASE("an object shrunk after registration is refused on use, not read past its end") {
  oip::testing::shm_object object{"shrunk", 8192};
  object.put(0, oip::testing::iota(0, 16));
  object.put(64, std::vector<std::int32_t>(16, 1));
  shm_server server;
  server.register_region("in", object, 0, 8192);
  const std::string body = R"({"inputs":[)" + shm_input("INPUT0", "in", 0, 64) + "," +
                           shm_input("INPUT1", "in", 64, 64) + R"(],"outputs":[)" +
                           shm_output("OUTPUT0", "in", 4096, 64) + "]}";
  REQUIRE(server.send("POST", "/v2/models/simple/infer", body).status == 200);

  // The client shrinks the object to one page: the inputs are still backed, the output's place
  // is not (written, it would be a SIGBUS that ends the server).
  const int fd = shm_open(object.key().c_str(), O_RDWR, 0);
  REQUIRE(fd >= 0);
  REQUIRE(ftruncate(fd, 4096) == 0);
  close(fd);
  const oip::http_response refused = server.send("POST", "/v2/models/simple/infer", body);
  CHECK(refused.status == 400);
  CHECK(refused.body().find("shared memory region 'in' is no longer backed: its object is now 4096 "
                            "bytes, and the range asked for ends at byte 4160") !=
        std::string::npos);
  const std::string inputs_only = R"({"inputs":[)" + shm_input("INPUT0", "in", 0, 64) + "," +
                                  shm_input("INPUT1", "in", 64, 64) + "]}";
  CHECK(server.send("POST", "/v2/models/simple/infer", inputs_only).status == 200);
}

TEST_CASE("a region /dev/shm cannot hold is refused at registration, not a SIGBUS on use") {
  // A sparse object larger than the whole tmpfs: ftruncate gives it a size and no memory, as
  // Triton's client utilities make regions. Touched page by page, it would fail at the page that
  // finds the tmpfs full, with a SIGBUS in whichever process touched it.
  struct statvfs fs {};
  REQUIRE(statvfs("/dev/shm", &fs) == 0);
  const std::uint64_t capacity = std::uint64_t{fs.f_blocks} * fs.f_frsize;
  if (capacity == 0) return;  // a tmpfs without a size limit
  const std::string key = "/oip_test_" + std::to_string(getpid()) + "_sparse";
  const int fd = shm_open(key.c_str(), O_CREAT | O_RDWR | O_TRUNC, 0600);
  REQUIRE(fd >= 0);
  const std::uint64_t size = capacity + (std::uint64_t{1} << 20);
  REQUIRE(ftruncate(fd, static_cast<off_t>(size)) == 0);
  close(fd);
  oip::shared_memory_registry regions;
  const oip::status refused = regions.register_region("sparse", key, 0, size);
  CHECK(refused.code() == oip::errc::invalid_argument);
  CHECK(refused.message().find("cannot be reserved") != std::string::npos);
  CHECK(regions.regions(std::nullopt)->empty());
  shm_unlink(key.c_str());
  // A region that fits is reserved and registered.
  oip::testing::shm_object fits{"fits", 8192};
  CHECK(regions.register_region("fits", fits.key(), 4096, 4096).ok());
}

TEST_CASE("registered regions are bounded in number and in bytes mapped") {
  oip::testing::shm_object object{"bounded", 8192};
  oip::shared_memory_registry regions{{.max_regions = 2, .max_mapped_bytes = 8192}};
  REQUIRE(regions.register_region("a", object.key(), 0, 4096).ok());
  const oip::status too_large = regions.register_region("b", object.key(), 0, 8192);
  CHECK(too_large.code() == oip::errc::failed_precondition);
  CHECK(too_large.message().find("past their limit of 8192 bytes mapped") != std::string::npos);
  REQUIRE(regions.register_region("b", object.key(), 4096, 4096).ok());
  const oip::status too_many = regions.register_region("c", object.key(), 0, 1);
  CHECK(too_many.code() == oip::errc::failed_precondition);
  CHECK(too_many.message().find("its limit of 2 regions") != std::string::npos);
  regions.unregister("a");
  CHECK(regions.register_region("c", object.key(), 0, 4096).ok());
  regions.unregister_all();
  CHECK(regions.register_region("d", object.key(), 0, 8192).ok());

  // The server's bounds come from its limits.
  oip::model_repository repository;
  oip::executor workers{{1, 8}};
  oip::server_options options;
  options.shared_memory = true;
  options.bounds.max_shared_memory_regions = 1;
  oip::inference_service service{repository, workers, options};
  REQUIRE(service.register_system_shared_memory({"one", object.key(), 0, 64}).ok());
  CHECK(service.register_system_shared_memory({"two", object.key(), 0, 64}).http_status() == 400);
}

namespace {

// A server offering CUDA regions through `device`.
struct cuda_shm_server : shm_server {
  explicit cuda_shm_server(std::shared_ptr<oip::device_memory_access> device)
      : shm_server{make_options(std::move(device))} {}
  static oip::server_options make_options(std::shared_ptr<oip::device_memory_access> device) {
    oip::server_options options;
    options.shared_memory = true;
    options.device_memory = std::move(device);
    return options;
  }
};

std::string cuda_register_body(const std::string& handle, std::int64_t device,
                               std::uint64_t byte_size) {
  std::string b64;
  oip::detail::append_base64(b64, reinterpret_cast<const unsigned char*>(handle.data()),
                             handle.size());
  return R"({"raw_handle":{"b64":")" + b64 + R"("},"device_id":)" + std::to_string(device) +
         R"(,"byte_size":)" + std::to_string(byte_size) + "}";
}

template <class T>
std::vector<T> values_in(const std::vector<std::byte>& block, std::size_t offset,
                         std::size_t count) {
  std::vector<T> out(count);
  std::memcpy(out.data(), block.data() + offset, count * sizeof(T));
  return out;
}

}  // namespace

TEST_CASE("CUDA regions: register, status, inputs and outputs through the device, unregister") {
  auto device = std::make_shared<oip::testing::fake_device_memory>();
  const std::string in_handle = device->allocate(128);
  const std::string out_handle = device->allocate(256);
  const std::vector<std::int32_t> a = oip::testing::iota(0, 16);
  const std::vector<std::int32_t> b(16, 1);
  std::memcpy(device->block(0).data(), a.data(), 64);
  std::memcpy(device->block(0).data() + 64, b.data(), 64);
  cuda_shm_server server{device};

  CHECK(server.send("GET", "/v2").body().find("\"cuda_shared_memory\"") != std::string::npos);
  for (const auto& [name, handle, size] :
       {std::tuple{"in", in_handle, 128}, std::tuple{"out", out_handle, 256}}) {
    const oip::http_response r =
        server.send("POST", std::string{"/v2/cudasharedmemory/region/"} + name + "/register",
                    cuda_register_body(handle, 0, static_cast<std::uint64_t>(size)));
    REQUIRE_MESSAGE(r.status == 200, r.body());
  }
  CHECK(device->opened == 2);
  CHECK(
      server.send("GET", "/v2/cudasharedmemory/status").body() ==
      R"([{"name":"in","device_id":0,"byte_size":128},{"name":"out","device_id":0,"byte_size":256}])");
  CHECK(server.send("GET", "/v2/cudasharedmemory/region/out/status").body() ==
        R"([{"name":"out","device_id":0,"byte_size":256}])");
  // One name space for both kinds, each listed by its own routes.
  CHECK(server.send("GET", "/v2/systemsharedmemory/status").body() == "[]");
  const oip::http_response other_kind =
      server.send("GET", "/v2/systemsharedmemory/region/in/status");
  CHECK(other_kind.status == 404);
  CHECK(oip::decode_error(other_kind.body(), other_kind.status).message() ==
        "The region named 'in' is registered as CUDA shared memory, not system shared memory");
  oip::testing::shm_object system_object{"cuda_names", 64};
  const oip::http_response taken =
      server.send("POST", "/v2/systemsharedmemory/region/in/register",
                  oip::encode_shared_memory_register({"in", system_object.key(), 0, 64}));
  CHECK(taken.status == 400);
  CHECK(oip::decode_error(taken.body(), taken.status).message() ==
        "shared memory region 'in' already in manager");

  const std::string body = R"({"inputs":[)" + shm_input("INPUT0", "in", 0, 64) + "," +
                           shm_input("INPUT1", "in", 64, 64) + R"(],"outputs":[)" +
                           shm_output("OUTPUT0", "out", 128, 64) + "," +
                           shm_output("OUTPUT1", "out", 0, 64) + "]}";
  const oip::http_response r = server.send("POST", "/v2/models/simple/infer", body);
  REQUIRE_MESSAGE(r.status == 200, r.body());
  CHECK(r.body().find(R"({"name":"OUTPUT0","datatype":"INT32","shape":[1,16]})") !=
        std::string::npos);
  CHECK(values_in<std::int32_t>(device->block(1), 128, 16) == oip::testing::iota(1, 16));
  CHECK(values_in<std::int32_t>(device->block(1), 0, 16) == oip::testing::iota(-1, 16));

  // A range past the region, and one the client's memory does not hold (its byte_size lied).
  const oip::http_response past =
      server.send("POST", "/v2/models/simple/infer",
                  R"({"inputs":[)" + shm_input("INPUT0", "in", 100, 64) + "," +
                      shm_input("INPUT1", "in", 0, 64) + "]}");
  CHECK(past.status == 400);
  CHECK(oip::decode_error(past.body(), past.status)
            .message()
            .starts_with("Invalid offset + byte size for shared memory region: 'in'"));
  // A byte_size past the memory the handle exports: refused where the runtime tells the extent
  // (and closed again), a copy that fails where it cannot.
  const std::string short_handle = device->allocate(32);
  const oip::http_response too_long =
      server.send("POST", "/v2/cudasharedmemory/region/short/register",
                  cuda_register_body(short_handle, 0, 128));
  CHECK(too_long.status == 400);
  CHECK(oip::decode_error(too_long.body(), too_long.status).message() ==
        "failed to register CUDA shared memory region 'short': byte_size 128 is past the end of "
        "the 32 bytes of device memory that the handle exports");
  CHECK(device->closed == 1);
  device->knows_extent = false;
  REQUIRE(server
              .send("POST", "/v2/cudasharedmemory/region/short/register",
                    cuda_register_body(short_handle, 0, 128))
              .status == 200);
  const oip::http_response beyond =
      server.send("POST", "/v2/models/simple/infer",
                  R"({"inputs":[)" + shm_input("INPUT0", "short", 0, 64) + "," +
                      shm_input("INPUT1", "in", 0, 64) + "]}");
  CHECK(beyond.status == 400);

  CHECK(server.send("POST", "/v2/cudasharedmemory/region/in/unregister").status == 200);
  // The last request's hold on its regions goes when its worker drops it, just after the answer.
  CHECK(oip::testing::wait_until([&] { return device->closed == 2; }));
  CHECK(server.send("GET", "/v2/cudasharedmemory/region/in/status").status == 404);
  // Unregistering a system region by a CUDA region's name leaves it.
  CHECK(server.send("POST", "/v2/systemsharedmemory/region/out/unregister").status == 200);
  CHECK(server.send("GET", "/v2/cudasharedmemory/region/out/status").status == 200);
  CHECK(server.send("POST", "/v2/cudasharedmemory/unregister").status == 200);
  CHECK(server.send("GET", "/v2/cudasharedmemory/status").body() == "[]");
  CHECK(oip::testing::wait_until([&] { return device->closed == 4; }));
}

TEST_CASE("CUDA registrations a client gets wrong are 4xx; a region in use closes after it") {
  auto device = std::make_shared<oip::testing::fake_device_memory>();
  const std::string handle = device->allocate(64);
  cuda_shm_server server{device};
  const auto refused = [&](const std::string& target, const std::string& body) {
    const oip::http_response r = server.send("POST", target, body);
    CHECK(r.status == 400);
    return oip::decode_error(r.body(), r.status).message();
  };
  const std::string target = "/v2/cudasharedmemory/region/r/register";
  CHECK(refused(target, R"({"device_id":0,"byte_size":64})") ==
        "CUDA shared memory register request has no 'raw_handle' field");
  CHECK(refused(target, R"({"raw_handle":{"b64":"%%%"},"device_id":0,"byte_size":64})") ==
        R"('raw_handle' must be {"b64": <the handle's bytes in base64>})");
  CHECK(refused(target, cuda_register_body("abc", 0, 64)) ==
        "failed to register CUDA shared memory region 'r': failed to open CUDA IPC handle: "
        "invalid argument");
  CHECK(refused(target, cuda_register_body(handle, -1, 64)) ==
        "failed to register CUDA shared memory region 'r': no CUDA device -1");
  CHECK(refused(target, cuda_register_body(handle, 0, 0)) ==
        "failed to register CUDA shared memory region 'r': byte_size must be at least 1");
  CHECK(refused("/v2/cudasharedmemory/register", cuda_register_body(handle, 0, 64)) ==
        "'region name' is necessary to register CUDA shared memory region");
  CHECK(device->opened == 0);

  // The registry: an output's place holds the region open past its unregistration.
  oip::shared_memory_registry regions{{}, device};
  REQUIRE(regions.register_cuda_region("r", std::as_bytes(std::span{handle}), 0, 64).ok());
  oip::result<std::vector<oip::shared_memory_destination>> places =
      regions.destinations({{"OUT", {"r", 0, 16}}});
  REQUIRE(places);
  // A CUDA input is copied to the host: bounded as a request body is.
  CHECK(regions.bytes("r", 0, 64, 63).error().http_status() == 413);
  CHECK(regions.bytes("r", 0, 64, 64).ok());
  regions.unregister("r", oip::shared_memory_kind::cuda);
  CHECK(device->closed == 0);
  oip::inference_response response;
  response.outputs.push_back(
      *oip::tensor::from_values<std::int32_t>("OUT", {4}, oip::testing::iota(3, 4)));
  REQUIRE(oip::write_outputs(*places, response).ok());
  CHECK(values_in<std::int32_t>(device->block(0), 0, 4) == oip::testing::iota(3, 4));
  places->clear();
  CHECK(device->closed == 1);
}

namespace {

// What a model that reads device memory was handed: its requests' inputs, kept.
struct handed_inputs {
  std::mutex mutex;
  std::vector<oip::tensor> inputs;

  std::vector<oip::tensor> take() {
    const std::lock_guard lock{mutex};
    return std::exchange(inputs, {});
  }
};

enum class device_reader_answer : std::uint8_t { copy_of_input, the_input_itself };

// A model on `gpus` that reads device memory (`device_inputs`): it keeps its inputs in `handed` and
// answers OUTPUT0 = INPUT0, read where its bytes are (the stand-in's "device memory" is the
// host's), or answers with the input's own tensor.
std::shared_ptr<oip::model> make_device_reader(
    std::string name, std::vector<int> gpus, std::shared_ptr<handed_inputs> handed,
    bool dynamic_batching = false,
    device_reader_answer answer = device_reader_answer::copy_of_input) {
  oip::model_config config;
  config.name = std::move(name);
  config.max_batch_size = dynamic_batching ? 8 : 0;
  config.dynamic_batching = dynamic_batching;
  const oip::shape_type dims = dynamic_batching ? oip::shape_type{16} : oip::shape_type{1, 16};
  config.inputs = {{"INPUT0", oip::datatype::int32, dims, {}}};
  config.outputs = {{"OUTPUT0", oip::datatype::int32, dims, {}}};
  config.gpus = std::move(gpus);
  config.device_inputs = true;
  return oip::make_model(std::move(config),
                         [handed = std::move(handed), answer](
                             const oip::inference_request& r) -> oip::result<oip::model_output> {
                           const oip::tensor& in = r.inputs.at(0);
                           {
                             const std::lock_guard lock{handed->mutex};
                             handed->inputs.push_back(in);
                           }
                           oip::model_output out;
                           if (answer == device_reader_answer::the_input_itself) {
                             out.outputs.push_back(*oip::tensor::in_device_memory(
                                 "OUTPUT0", in.type(), in.shape(), in.data(), in.device()));
                             return out;
                           }
                           oip::result<oip::buffer> bytes = oip::buffer::copy_of(in.data().bytes());
                           if (!bytes) return bytes.error();
                           out.outputs.push_back(*oip::tensor::make("OUTPUT0", in.type(),
                                                                    in.shape(), std::move(*bytes)));
                           return out;
                         });
}

// OUTPUT0's values in an answer of the device reader.
std::vector<std::int32_t> output_values(const oip::http_response& r) {
  oip::result<oip::inference_response> decoded =
      oip::decode_response(oip::buffer::from_string(r.body()), std::nullopt);
  REQUIRE_MESSAGE(decoded, r.body());
  const oip::tensor& out = decoded->outputs.at(0);
  std::vector<std::int32_t> values(out.element_count());
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = out.at<std::int32_t>(i);
  return values;
}

}  // namespace

TEST_CASE("a model that reads device memory reads inputs in CUDA regions in place") {
  auto device = std::make_shared<oip::testing::fake_device_memory>();
  const std::string handle = device->allocate(128);
  const std::vector<std::int32_t> values = oip::testing::iota(5, 16);
  std::byte* const at = device->block(0).data() + 64;
  std::memcpy(at, values.data(), 64);
  auto handed = std::make_shared<handed_inputs>();
  cuda_shm_server server{device};
  REQUIRE(server.repository.add(make_device_reader("on_0", {0}, handed)).ok());
  REQUIRE(server.repository.add(make_device_reader("on_1", {1}, handed)).ok());
  REQUIRE(server.repository.add(make_device_reader("batched", {0}, handed, true)).ok());
  REQUIRE(server
              .send("POST", "/v2/cudasharedmemory/region/in/register",
                    cuda_register_body(handle, 0, 128))
              .status == 200);
  const auto infer = [&](const std::string& model) {
    return server.send("POST", "/v2/models/" + model + "/infer",
                       R"({"inputs":[)" + shm_input("INPUT0", "in", 64, 64) + "]}");
  };

  // On the region's device: the client's memory itself, no copy.
  const oip::http_response r = infer("on_0");
  REQUIRE_MESSAGE(r.status == 200, r.body());
  CHECK(output_values(r) == values);
  std::vector<oip::tensor> seen = handed->take();
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].device() == 0);
  CHECK_FALSE(seen[0].in_host_memory());
  CHECK(seen[0].data().data() == at);
  CHECK(seen[0].data().size() == 64);
  CHECK(seen[0].shape() == oip::shape_type{1, 16});

  // On another device, and joined into a batch on the host: a copy in host memory.
  for (const std::string model : {"on_1", "batched"}) {
    CAPTURE(model);
    const oip::http_response copied = infer(model);
    REQUIRE_MESSAGE(copied.status == 200, copied.body());
    CHECK(output_values(copied) == values);
    const std::vector<oip::tensor> inputs = handed->take();
    REQUIRE(inputs.size() == 1);
    CHECK(inputs[0].in_host_memory());
    CHECK(inputs[0].device() == -1);
    CHECK(inputs[0].data().data() != at);
  }
  // A model that does not read device memory: a copy too (`simple`).
  const oip::http_response plain =
      server.send("POST", "/v2/models/simple/infer",
                  R"({"inputs":[)" + shm_input("INPUT0", "in", 64, 64) + "," +
                      shm_input("INPUT1", "in", 0, 64) + "]}");
  CHECK_MESSAGE(plain.status == 200, plain.body());

  // A region whose extent the runtime cannot tell may be shorter than the client said: a kernel
  // must not read it, a copy is bounded.
  device->knows_extent = false;
  const std::string unbounded_handle = device->allocate(64);
  std::memcpy(device->block(1).data(), values.data(), 64);
  REQUIRE(server
              .send("POST", "/v2/cudasharedmemory/region/unbounded/register",
                    cuda_register_body(unbounded_handle, 0, 64))
              .status == 200);
  const oip::http_response unbounded =
      server.send("POST", "/v2/models/on_0/infer",
                  R"({"inputs":[)" + shm_input("INPUT0", "unbounded", 0, 64) + "]}");
  REQUIRE_MESSAGE(unbounded.status == 200, unbounded.body());
  CHECK(output_values(unbounded) == values);
  REQUIRE(handed->inputs.size() == 1);
  CHECK(handed->take()[0].in_host_memory());

  // The view holds the region open past its unregistration, until the model lets it go.
  const oip::http_response held = infer("on_0");
  REQUIRE_MESSAGE(held.status == 200, held.body());
  seen = handed->take();
  REQUIRE(seen.size() == 1);
  CHECK(server.send("POST", "/v2/cudasharedmemory/region/in/unregister").status == 200);
  CHECK(device->closed == 0);
  seen.clear();
  // The request's own hold goes when its worker drops it, just after the answer.
  for (int i = 0; i < 500 && device->closed == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds{10});
  }
  CHECK(device->closed == 1);
}

TEST_CASE("a host's own input in device memory reaches only a model that reads it there") {
  auto handed = std::make_shared<handed_inputs>();
  oip::testing::served s{{make_device_reader("on_0", {0}, handed),
                          make_device_reader("batched", {0}, handed, true),
                          oip::testing::make_simple()}};
  // Host bytes stand in for device 0's memory: only the device reader reads them.
  const std::vector<std::int32_t> values = oip::testing::iota(2, 16);
  const oip::buffer bytes = *oip::buffer::copy_of(std::as_bytes(std::span{values}));
  const auto request_on = [&](int device) {
    oip::inference_request r;
    r.inputs.push_back(
        *oip::tensor::in_device_memory("INPUT0", oip::datatype::int32, {1, 16}, bytes, device));
    return r;
  };

  const oip::result<oip::inference_response> read = s.infer("on_0", request_on(0));
  REQUIRE_MESSAGE(read, read.error().message());
  CHECK(read->outputs.at(0).at<std::int32_t>(15) == 17);
  const std::vector<oip::tensor> inputs = handed->take();
  REQUIRE(inputs.size() == 1);
  CHECK(inputs[0].device() == 0);
  CHECK(inputs[0].data().data() == bytes.data());

  const auto refused = [&](std::string_view model, oip::inference_request r) {
    const oip::result<oip::inference_response> answer = s.infer(model, std::move(r));
    REQUIRE_FALSE(answer);
    CHECK(answer.error().http_status() == 400);
    return answer.error().message();
  };
  CHECK(refused("on_0", request_on(1)) ==
        "input 'INPUT0' is in the memory of CUDA device 1, where model 'on_0' does not read its "
        "inputs; give it in host memory");
  CHECK(refused("batched", request_on(0)) ==
        "input 'INPUT0' is in the memory of CUDA device 0, where model 'batched' does not read "
        "its inputs; give it in host memory");
  oip::inference_request mixed = request_on(0);
  mixed.inputs.push_back(*oip::tensor::from_values<std::int32_t>("INPUT1", {1, 16}, values));
  CHECK(refused("simple", std::move(mixed)) ==
        "input 'INPUT0' is in the memory of CUDA device 0, where model 'simple' does not read "
        "its inputs; give it in host memory");
  CHECK(handed->take().empty());
}

TEST_CASE("a traced request's CUDA inputs reach the host; a device tensor is no output") {
  auto device = std::make_shared<oip::testing::fake_device_memory>();
  const std::string handle = device->allocate(64);
  const std::vector<std::int32_t> values = oip::testing::iota(-3, 16);
  std::memcpy(device->block(0).data(), values.data(), 64);
  auto handed = std::make_shared<handed_inputs>();
  oip::testing::temporary_trace_file file;
  oip::server_options options = cuda_shm_server::make_options(device);
  options.trace.file = file.path;
  options.trace.rate = 1;
  options.trace.level = oip::trace_level::tensors;
  shm_server server{std::move(options)};
  REQUIRE(server.repository.add(make_device_reader("on_0", {0}, handed)).ok());
  REQUIRE(server.repository
              .add(make_device_reader("giver", {0}, handed, false,
                                      device_reader_answer::the_input_itself))
              .ok());
  REQUIRE(server
              .send("POST", "/v2/cudasharedmemory/region/in/register",
                    cuda_register_body(handle, 0, 64))
              .status == 200);
  const std::string body = R"({"inputs":[)" + shm_input("INPUT0", "in", 0, 64) + "]}";

  // The trace writes the input's values, so they are read on the host.
  const oip::http_response traced = server.send("POST", "/v2/models/on_0/infer", body);
  REQUIRE_MESSAGE(traced.status == 200, traced.body());
  CHECK(output_values(traced) == values);
  const std::vector<oip::tensor> inputs = handed->take();
  REQUIRE(inputs.size() == 1);
  CHECK(inputs[0].in_host_memory());

  // Untraced, a model that hands its device input back as an output fails the request, a 500
  // that names it, and no codec reads the device's memory.
  oip::trace_settings_change off;
  off.settings.push_back({"trace_level", std::vector<std::string>{"OFF"}});
  REQUIRE(server.handler.service().update_tracing(std::nullopt, off));
  const oip::http_response given = server.send("POST", "/v2/models/giver/infer", body);
  CHECK(given.status == 500);
  CHECK(oip::decode_error(given.body(), given.status).message() ==
        "model 'giver' produced output 'OUTPUT0' in the memory of CUDA device 0; outputs must be "
        "in host memory");
  const std::vector<oip::tensor> given_inputs = handed->take();
  REQUIRE(given_inputs.size() == 1);
  CHECK(given_inputs[0].device() == 0);
}

TEST_CASE("a batch's output in device memory fails each of its requests with a 500") {
  oip::model_config config;
  config.name = "batched_giver";
  config.max_batch_size = 8;
  config.dynamic_batching = true;
  // Two requests make a batch at once; one alone would wait five seconds.
  config.batching.max_queue_delay = std::chrono::seconds{5};
  config.batching.preferred_batch_sizes = {2};
  config.inputs = {{"INPUT0", oip::datatype::int32, {16}, {}}};
  config.outputs = {{"OUTPUT0", oip::datatype::int32, {16}, {}}};
  auto rows = std::make_shared<std::atomic<std::int64_t>>(0);
  // The batch's host bytes stand in for device 0's memory: the split must not read them.
  oip::testing::served s{{oip::make_model(
      config, [rows](const oip::inference_request& r) -> oip::result<oip::model_output> {
        const oip::tensor& in = r.inputs.at(0);
        *rows = in.shape().at(0);
        oip::model_output out;
        out.outputs.push_back(
            *oip::tensor::in_device_memory("OUTPUT0", in.type(), in.shape(), in.data(), 0));
        return out;
      })}};
  const auto one_row = [] {
    oip::inference_request r;
    r.inputs.push_back(
        *oip::tensor::from_values<std::int32_t>("INPUT0", {1, 16}, oip::testing::iota(0, 16)));
    return r;
  };
  auto first = s.send("batched_giver", one_row());
  auto second = s.send("batched_giver", one_row());
  for (auto* answer : {&first, &second}) {
    const oip::result<oip::inference_response> r = answer->get();
    REQUIRE_FALSE(r);
    CHECK(r.error().http_status() == 500);
    CHECK(r.error().message() ==
          "model 'batched_giver' produced output 'OUTPUT0' in the memory of CUDA device 0; "
          "outputs must be in host memory");
  }
  CHECK(*rows == 2);
}
