// The codecs side by side with what peers use, each adapter doing the same job: parse a request
// into a typed contiguous buffer, or write the same response JSON.
//   oip               decode_request / encode_response
//   simdjson_floor    a bare simdjson on-demand loop over the data array (the floor: no checks)
//   simdjson_minimal  the `simple` request's fields all read by simdjson on-demand, nothing checked
//                     (the ceiling of any on-demand decoder of it), with and without its tensors
//   rapidjson_triton  RapidJSON DOM as Triton calls it: Parse<kParseNanAndInfFlag |
//                     kParseIterativeFlag> per request, then GetDouble/GetInt64 into the buffer;
//                     for encoding, a DOM then a Writer (Triton's way) and a bare Writer
//   nlohmann          nlohmann::json
//
//   cmake --preset release && cmake --build --preset release --target codec_bench
//   build/release/benchmarks/codec_bench --benchmark_repetitions=7
//       --benchmark_enable_random_interleaving=true --benchmark_out=bench.json
//   scripts/bench-report bench.json

#include <oip/float16.hpp>
#include <oip/json.hpp>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <nlohmann/json.hpp>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <simdjson.h>

namespace {

constexpr std::size_t large = 1'000'000;

// --- inputs
// ---------------------------------------------------------------------------------------

std::vector<float> random_floats(std::size_t n) {
  std::mt19937 rng{42};
  std::normal_distribution<float> normal{0.0F, 1.0F};
  std::vector<float> v(n);
  for (float& f : v) f = normal(rng);
  return v;
}

// What Python clients send: each FP32 widened to double and written in the double's shortest form
// (numpy's tolist() then json.dumps).
std::string float_array(const std::vector<float>& values, std::size_t row) {
  std::string out = "[";
  char buffer[32];
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (row != 0 && i % row == 0)
      out += i == 0 ? "[" : "],[";
    else if (i != 0)
      out += ',';
    out.append(buffer, std::to_chars(buffer, buffer + 32, static_cast<double>(values[i])).ptr);
  }
  if (row != 0) out += ']';
  return out + "]";
}

std::string int_array(std::size_t n) {
  std::mt19937 rng{7};
  std::uniform_int_distribution<std::int32_t> dist{-1'000'000, 1'000'000};
  std::string out = "[";
  for (std::size_t i = 0; i < n; ++i) {
    if (i != 0) out += ',';
    out += std::to_string(dist(rng));
  }
  return out + "]";
}

std::string request(const std::string& type, const std::string& shape, const std::string& data) {
  return R"({"id":"1","inputs":[{"name":"INPUT0","shape":)" + shape + R"(,"datatype":")" + type +
         R"(","data":)" + data + "}]}";
}

const std::string& flat_fp32() {
  static const std::string json =
      request("FP32", "[1000000]", float_array(random_floats(large), 0));
  return json;
}
const std::string& nested_fp32() {
  static const std::string json =
      request("FP32", "[1000,1000]", float_array(random_floats(large), 1000));
  return json;
}
const std::string& flat_int32() {
  static const std::string json = request("INT32", "[1000000]", int_array(large));
  return json;
}
const std::string& simple_request() {
  static const std::string json =
      R"({"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]},)"
      R"({"name":"INPUT1","shape":[1,16],"datatype":"INT32","data":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}]})";
  return json;
}

// A body as a transport holds it: one allocation with simdjson's padding after it.
oip::buffer padded_body(const std::string& text) {
  oip::result<oip::mutable_buffer> b = oip::mutable_buffer::allocate_for_overwrite(text.size(), 64);
  std::memcpy(b->data(), text.data(), text.size());
  return oip::buffer{std::move(*b)};
}

void set_bytes(benchmark::State& state, std::size_t bytes) {
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}

// --- decode adapters
// ------------------------------------------------------------------------------

void decode_oip(benchmark::State& state, const std::string& json) {
  const oip::buffer body = padded_body(json);
  for (auto _ : state) {
    oip::result<oip::inference_request> r = oip::decode_request(body, std::nullopt);
    if (!r) state.SkipWithError(r.error().message().c_str());
    benchmark::DoNotOptimize(r);
  }
  set_bytes(state, json.size());
}

template <class T>
void simdjson_leaves(simdjson::ondemand::array array, T* out, std::size_t& n) {
  for (auto element : array) {
    simdjson::ondemand::value v = element.value_unsafe();
    if (v.type().value_unsafe() == simdjson::ondemand::json_type::array) {
      simdjson_leaves(v.get_array().value_unsafe(), out, n);
    } else if constexpr (std::is_same_v<T, float>) {
      out[n++] = static_cast<float>(v.get_double().value_unsafe());
    } else {
      out[n++] = static_cast<T>(v.get_int64().value_unsafe());
    }
  }
}

template <class T>
void decode_simdjson_floor(benchmark::State& state, const std::string& json) {
  const simdjson::padded_string padded(json);
  simdjson::ondemand::parser parser;
  std::vector<T> out(large);
  for (auto _ : state) {
    simdjson::ondemand::document doc = parser.iterate(padded).value_unsafe();
    std::size_t n = 0;
    for (auto input : doc["inputs"].get_array().value_unsafe()) {
      simdjson_leaves(input["data"].get_array().value_unsafe(), out.data(), n);
    }
    benchmark::DoNotOptimize(out.data());
  }
  set_bytes(state, json.size());
}

template <class T>
void rapidjson_leaves(const rapidjson::Value& array, T* out, std::size_t& n) {
  for (const rapidjson::Value& v : array.GetArray()) {
    if (v.IsArray()) {
      rapidjson_leaves(v, out, n);
    } else if constexpr (std::is_same_v<T, float>) {
      out[n++] = static_cast<float>(v.GetDouble());
    } else {
      out[n++] = static_cast<T>(v.GetInt64());
    }
  }
}

template <class T>
void decode_rapidjson_triton(benchmark::State& state, const std::string& json) {
  std::vector<T> out(large);
  for (auto _ : state) {
    rapidjson::Document doc;
    doc.Parse<rapidjson::kParseNanAndInfFlag | rapidjson::kParseIterativeFlag>(json.data(),
                                                                               json.size());
    std::size_t n = 0;
    for (const rapidjson::Value& input : doc["inputs"].GetArray()) {
      rapidjson_leaves(input["data"], out.data(), n);
    }
    benchmark::DoNotOptimize(out.data());
  }
  set_bytes(state, json.size());
}

template <class T>
void nlohmann_leaves(const nlohmann::json& array, T* out, std::size_t& n) {
  for (const nlohmann::json& v : array) {
    if (v.is_array()) {
      nlohmann_leaves(v, out, n);
    } else {
      out[n++] = v.get<T>();
    }
  }
}

template <class T>
void decode_nlohmann(benchmark::State& state, const std::string& json) {
  std::vector<T> out(large);
  for (auto _ : state) {
    const nlohmann::json doc = nlohmann::json::parse(json);
    std::size_t n = 0;
    for (const nlohmann::json& input : doc["inputs"]) nlohmann_leaves(input["data"], out.data(), n);
    benchmark::DoNotOptimize(out.data());
  }
  set_bytes(state, json.size());
}

// --- encode adapters
// ------------------------------------------------------------------------------

const std::vector<float>& output_values() {
  static const std::vector<float> v = random_floats(large);
  return v;
}

oip::inference_response response_of(const std::vector<float>& values, oip::shape_type shape) {
  oip::inference_response r;
  r.id = "1";
  r.model_name = "model";
  r.model_version = "1";
  r.outputs = {*oip::tensor::from_values<float>("OUTPUT0", std::move(shape), values)};
  return r;
}

// The same values as FP16 (JSON numbers are an oip extension for FP16 and BF16).
oip::inference_response fp16_response_of(const std::vector<float>& values) {
  std::vector<oip::half> halves(values.size());
  std::transform(values.begin(), values.end(), halves.begin(),
                 [](float f) { return oip::to_half(f); });
  oip::inference_response r;
  r.id = "1";
  r.model_name = "model";
  r.model_version = "1";
  r.outputs = {*oip::tensor::from_values<oip::half>(
      "OUTPUT0", {static_cast<std::int64_t>(halves.size())}, halves)};
  return r;
}

void encode_oip(benchmark::State& state, const oip::inference_response& response) {
  std::size_t bytes = 0;
  for (auto _ : state) {
    oip::result<oip::encoded_body> body = oip::encode_response(response);
    bytes = body->json.size();
    benchmark::DoNotOptimize(body);
  }
  state.counters["output_bytes"] = static_cast<double>(bytes);
  set_bytes(state, bytes);
}

void encode_rapidjson_dom(benchmark::State& state, const std::vector<float>& values,
                          std::int64_t rows) {
  std::size_t bytes = 0;
  for (auto _ : state) {
    rapidjson::Document doc;
    doc.SetObject();
    auto& a = doc.GetAllocator();
    doc.AddMember("id", "1", a);
    doc.AddMember("model_name", "model", a);
    doc.AddMember("model_version", "1", a);
    rapidjson::Value outputs(rapidjson::kArrayType);
    rapidjson::Value output(rapidjson::kObjectType);
    output.AddMember("name", "OUTPUT0", a);
    output.AddMember("datatype", "FP32", a);
    rapidjson::Value shape(rapidjson::kArrayType);
    shape.PushBack(rows, a);
    if (values.size() / static_cast<std::size_t>(rows) != 1) {
      shape.PushBack(static_cast<std::int64_t>(values.size()) / rows, a);
    }
    output.AddMember("shape", shape, a);
    rapidjson::Value data(rapidjson::kArrayType);
    for (float f : values) data.PushBack(static_cast<double>(f), a);
    output.AddMember("data", data, a);
    outputs.PushBack(output, a);
    doc.AddMember("outputs", outputs, a);
    rapidjson::StringBuffer buffer;
    rapidjson::Writer<rapidjson::StringBuffer, rapidjson::UTF8<>, rapidjson::UTF8<>,
                      rapidjson::CrtAllocator, rapidjson::kWriteNanAndInfFlag>
        writer(buffer);
    doc.Accept(writer);
    bytes = buffer.GetSize();
    benchmark::DoNotOptimize(buffer.GetString());
  }
  state.counters["output_bytes"] = static_cast<double>(bytes);
  set_bytes(state, bytes);
}

void encode_rapidjson_writer(benchmark::State& state, const std::vector<float>& values) {
  std::size_t bytes = 0;
  for (auto _ : state) {
    rapidjson::StringBuffer buffer;
    rapidjson::Writer<rapidjson::StringBuffer, rapidjson::UTF8<>, rapidjson::UTF8<>,
                      rapidjson::CrtAllocator, rapidjson::kWriteNanAndInfFlag>
        w(buffer);
    w.StartObject();
    w.Key("id");
    w.String("1");
    w.Key("model_name");
    w.String("model");
    w.Key("model_version");
    w.String("1");
    w.Key("outputs");
    w.StartArray();
    w.StartObject();
    w.Key("name");
    w.String("OUTPUT0");
    w.Key("datatype");
    w.String("FP32");
    w.Key("shape");
    w.StartArray();
    w.Int64(static_cast<std::int64_t>(values.size()));
    w.EndArray();
    w.Key("data");
    w.StartArray();
    for (float f : values) w.Double(static_cast<double>(f));
    w.EndArray();
    w.EndObject();
    w.EndArray();
    w.EndObject();
    bytes = buffer.GetSize();
    benchmark::DoNotOptimize(buffer.GetString());
  }
  state.counters["output_bytes"] = static_cast<double>(bytes);
  set_bytes(state, bytes);
}

void encode_nlohmann(benchmark::State& state, const std::vector<float>& values) {
  std::size_t bytes = 0;
  for (auto _ : state) {
    nlohmann::json out = {{"id", "1"}, {"model_name", "model"}, {"model_version", "1"}};
    nlohmann::json output = {{"name", "OUTPUT0"}, {"datatype", "FP32"}, {"shape", {values.size()}}};
    output["data"] = values;
    out["outputs"] = nlohmann::json::array({output});
    const std::string text = out.dump();
    bytes = text.size();
    benchmark::DoNotOptimize(text.data());
  }
  state.counters["output_bytes"] = static_cast<double>(bytes);
  set_bytes(state, bytes);
}

// --- the small `simple` request and its response
// ------------------------------------------------------

// The least that any simdjson on-demand decoder of the `simple` request does: every field of
// every tensor read (name and datatype as strings, shape and data as integers) and, with
// `build_tensors`, the request's two tensors built. Nothing else is checked: no duplicate keys, no
// validation of what is skipped, no messages. A ceiling for the approach, not a decoder.
namespace od = simdjson::ondemand;

bool minimal_tensor(od::object input, bool build_tensors, std::vector<oip::tensor>& inputs) {
  std::string name;
  std::int64_t dims[4];
  std::size_t rank = 0;
  oip::buffer data;
  for (auto field_result : input) {
    od::field field = field_result.value_unsafe();
    od::value value = field.value();
    if (field.key().unsafe_is_equal("name")) {
      std::string_view text;
      if (value.get_string().get(text) != simdjson::SUCCESS) return false;
      name.assign(text);
    } else if (field.key().unsafe_is_equal("datatype")) {
      std::string_view text;
      if (value.get_string().get(text) != simdjson::SUCCESS || text != "INT32") return false;
    } else if (field.key().unsafe_is_equal("shape")) {
      for (auto dim : value.get_array().value_unsafe()) {
        if (rank == 4 || dim.get_int64().get(dims[rank++]) != simdjson::SUCCESS) return false;
      }
    } else if (field.key().unsafe_is_equal("data")) {
      std::uint64_t count = 1;
      for (std::size_t i = 0; i < rank; ++i) count *= static_cast<std::uint64_t>(dims[i]);
      std::int32_t scratch[64];
      oip::result<oip::mutable_buffer> storage = oip::mutable_buffer::allocate_for_overwrite(
          build_tensors ? count * sizeof(std::int32_t) : 0);
      auto* out = build_tensors ? reinterpret_cast<std::int32_t*>(storage->data()) : scratch;
      std::uint64_t n = 0;
      for (auto element : value.get_array().value_unsafe()) {
        std::int64_t v = 0;
        if (element.get_int64().get(v) != simdjson::SUCCESS || n == count || n == 64) return false;
        out[n++] = static_cast<std::int32_t>(v);
      }
      if (n != count) return false;
      if (build_tensors) data = oip::buffer{std::move(*storage)};
    }
  }
  if (!build_tensors) return true;
  oip::result<oip::tensor> t = oip::tensor::make(
      std::move(name), oip::datatype::int32, oip::shape_type(dims, dims + rank), std::move(data));
  if (!t) return false;
  inputs.push_back(std::move(*t));
  return true;
}

void decode_simdjson_minimal(benchmark::State& state, bool build_tensors) {
  const oip::buffer body = padded_body(simple_request());
  od::parser parser;
  for (auto _ : state) {
    oip::inference_request request;
    od::document doc = parser
                           .iterate(reinterpret_cast<const char*>(body.data()),
                                    simple_request().size(), body.size() + body.padding())
                           .value_unsafe();
    bool ok = true;
    for (auto input : doc["inputs"].get_array().value_unsafe()) {
      ok = ok && minimal_tensor(input.get_object().value_unsafe(), build_tensors, request.inputs);
    }
    if (!ok) state.SkipWithError("minimal decoder failed");
    benchmark::DoNotOptimize(request);
  }
  set_bytes(state, simple_request().size());
}

void simple_round_trip_oip(benchmark::State& state) {
  const oip::buffer body = padded_body(simple_request());
  for (auto _ : state) {
    oip::result<oip::inference_request> r = oip::decode_request(body, std::nullopt);
    oip::inference_response response;
    response.model_name = "simple";
    response.model_version = "1";
    // OUTPUT0/OUTPUT1 are INT32 [1,16] too; moved, as a model hands its outputs over (a copy of
    // the tensors is neither decoding nor encoding).
    response.outputs = std::move(r->inputs);
    oip::result<oip::encoded_body> encoded = oip::encode_response(response);
    benchmark::DoNotOptimize(encoded);
  }
  set_bytes(state, simple_request().size());
}

// --- binary
// -----------------------------------------------------------------------------------------

void binary_decode(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const std::string json = R"({"inputs":[{"name":"INPUT0","shape":[)" + std::to_string(bytes) +
                           R"(],"datatype":"UINT8","parameters":{"binary_data_size":)" +
                           std::to_string(bytes) + "}}]}";
  oip::result<oip::mutable_buffer> storage =
      oip::mutable_buffer::allocate_for_overwrite(json.size() + bytes);
  std::memcpy(storage->data(), json.data(), json.size());
  std::memset(storage->data() + json.size(), 1, bytes);
  const oip::buffer body{std::move(*storage)};
  oip::limits limits;
  limits.max_body_bytes = std::size_t{1} << 30U;
  for (auto _ : state) {
    oip::result<oip::inference_request> r = oip::decode_request(body, json.size(), limits);
    benchmark::DoNotOptimize(r);
  }
  set_bytes(state, body.size());
}

// Named instances, for the registration macros.
void decode_simdjson_floor_fp32(benchmark::State& s, const std::string& j) {
  decode_simdjson_floor<float>(s, j);
}
void decode_simdjson_floor_int32(benchmark::State& s, const std::string& j) {
  decode_simdjson_floor<std::int32_t>(s, j);
}
void decode_rapidjson_triton_fp32(benchmark::State& s, const std::string& j) {
  decode_rapidjson_triton<float>(s, j);
}
void decode_rapidjson_triton_int32(benchmark::State& s, const std::string& j) {
  decode_rapidjson_triton<std::int32_t>(s, j);
}
void decode_nlohmann_fp32(benchmark::State& s, const std::string& j) {
  decode_nlohmann<float>(s, j);
}
void decode_nlohmann_int32(benchmark::State& s, const std::string& j) {
  decode_nlohmann<std::int32_t>(s, j);
}

}  // namespace

BENCHMARK_CAPTURE(decode_oip, fp32_flat, flat_fp32())->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(decode_simdjson_floor_fp32, fp32_flat, flat_fp32())
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(decode_rapidjson_triton_fp32, fp32_flat, flat_fp32())
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(decode_nlohmann_fp32, fp32_flat, flat_fp32())->Unit(benchmark::kMillisecond);

BENCHMARK_CAPTURE(decode_oip, fp32_nested, nested_fp32())->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(decode_simdjson_floor_fp32, fp32_nested, nested_fp32())
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(decode_rapidjson_triton_fp32, fp32_nested, nested_fp32())
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(decode_nlohmann_fp32, fp32_nested, nested_fp32())->Unit(benchmark::kMillisecond);

BENCHMARK_CAPTURE(decode_oip, int32_flat, flat_int32())->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(decode_simdjson_floor_int32, int32_flat, flat_int32())
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(decode_rapidjson_triton_int32, int32_flat, flat_int32())
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(decode_nlohmann_int32, int32_flat, flat_int32())->Unit(benchmark::kMillisecond);

BENCHMARK_CAPTURE(decode_oip, simple, simple_request());
BENCHMARK_CAPTURE(decode_simdjson_floor_int32, simple, simple_request());
BENCHMARK_CAPTURE(decode_rapidjson_triton_int32, simple, simple_request());
BENCHMARK_CAPTURE(decode_nlohmann_int32, simple, simple_request());
BENCHMARK_CAPTURE(decode_simdjson_minimal, simple_fields_only, false);
BENCHMARK_CAPTURE(decode_simdjson_minimal, simple_with_tensors, true);
BENCHMARK(simple_round_trip_oip);

BENCHMARK_CAPTURE(encode_oip, fp32, response_of(output_values(), {1000000}))
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(encode_oip, fp16, fp16_response_of(output_values()))
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(encode_rapidjson_dom, fp32, output_values(), 1000000)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(encode_rapidjson_writer, fp32, output_values())->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(encode_nlohmann, fp32, output_values())->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(encode_oip, simple, response_of(std::vector<float>(16, 1.5F), {1, 16}));
BENCHMARK_CAPTURE(encode_rapidjson_dom, simple, std::vector<float>(16, 1.5F), 1);
BENCHMARK_CAPTURE(encode_rapidjson_writer, simple, std::vector<float>(16, 1.5F));

BENCHMARK(binary_decode)->Arg(3 << 10)->Arg(64 << 20)->Unit(benchmark::kMicrosecond);

// Every benchmark runs on a warm heap, as a server's is: glibc's defaults hand large blocks back
// to the system and map them again, so that a run's figures depended on which benchmark had run
// before (RapidJSON's DOM encode of 1M FP32 measured 97 to 130 ms in one run).
int main(int argc, char** argv) {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
#endif
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
