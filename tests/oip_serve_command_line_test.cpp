// oip-serve's command line: each option in both of Triton's forms, booleans in all four spellings,
// and every wrong value refused with a message that names the option.

#include <initializer_list>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <command_line.hpp>

namespace {

using oip_serve::options;

oip::result<options> parse(std::initializer_list<std::string> arguments) {
  std::vector<const char*> argv{"oip-serve"};
  for (const std::string& argument : arguments) argv.push_back(argument.c_str());
  return oip_serve::parse_command_line(static_cast<int>(argv.size()), argv.data());
}

options parsed(std::initializer_list<std::string> arguments) {
  oip::result<options> o = parse(arguments);
  REQUIRE_MESSAGE(o, o.error().message());
  return std::move(*o);
}

std::string refusal(std::initializer_list<std::string> arguments) {
  oip::result<options> o = parse(arguments);
  REQUIRE_FALSE(o);
  CHECK(o.error().code() == oip::errc::invalid_argument);
  return o.error().message();
}

}  // namespace

TEST_CASE("defaults: every server on, shared memory and model control off") {
  const options o = parsed({});
  CHECK_FALSE(o.help);
  CHECK(o.http.port == 8000);
  CHECK(o.grpc.port == 8001);
  CHECK(o.metrics.port == 8002);
  CHECK(o.allow_http);
  CHECK(o.allow_grpc);
  CHECK(o.allow_metrics);
  CHECK_FALSE(o.server.shared_memory);
  CHECK(o.server.model_control == oip::model_control_mode::none);
  CHECK(o.server.bounds.max_response_bytes == 0);
  CHECK(o.dynamic_batching);
  CHECK(o.models.empty());
}

TEST_CASE("--name=VALUE and --name VALUE mean the same") {
  for (const bool adjacent : {false, true}) {
    CAPTURE(adjacent);
    const auto with = [&](const std::string& name, const std::string& value) {
      return adjacent ? parsed({"--" + name + "=" + value}) : parsed({"--" + name, value});
    };
    CHECK(with("http-port", "9000").http.port == 9000);
    CHECK(with("grpc-port", "0").grpc.port == 0);
    CHECK(with("metrics-port", "65535").metrics.port == 65535);
    CHECK(with("threads", "3").executor.threads == 3);
    CHECK(with("io-threads", "4").http.io_threads == 4);
    CHECK(with("queue", "5").executor.queue_capacity == 5);
    CHECK(with("max-connections", "6").http.max_connections == 6);
    CHECK(with("http-body-timeout-ms", "2500").http.body_timeout ==
          std::chrono::milliseconds{2500});
    CHECK(with("http-body-min-rate", "0").http.body_min_bytes_per_second == 0);
    CHECK(with("max-body-bytes", "1024").server.bounds.max_body_bytes == 1024);
    CHECK(with("max-inflight-bytes", "4096").server.bounds.max_inflight_bytes == 4096);
    CHECK(with("max-response-bytes", "2048").server.bounds.max_response_bytes == 2048);
    CHECK(with("server-name", "triton").server.name == "triton");
    CHECK(with("device", "cpu").device == "cpu");
    CHECK(with("trace-file", "/tmp/t.json").server.trace.file == "/tmp/t.json");
    CHECK(with("grpc-server-cert", "c.pem").grpc_tls.certificate_chain == "c.pem");
    CHECK(with("grpc-server-key", "k.pem").grpc_tls.private_key == "k.pem");
    CHECK(with("grpc-root-cert", "r.pem").grpc_tls.root_certificates == "r.pem");
    CHECK(with("models", "simple,classifier").models ==
          std::set<std::string>{"simple", "classifier"});
    CHECK(with("model-control-mode", "explicit").server.model_control ==
          oip::model_control_mode::explicit_loading);
    CHECK(with("log-level", "verbose").log_level == oip::log_level::verbose);
    CHECK(with("log-format", "ISO8601").log_format == oip::log_format::iso8601);
    CHECK(with("grpc-keepalive-time", "7000").grpc_channel_arguments.size() == 1);
    CHECK(with("trace-count", "-1").trace_flags.settings.size() == 1);  // a value, not an option
    CHECK(with("http-restricted-api", "health:k=v")
              .server.restricted_http_api.of(oip::api_category::health) != nullptr);
  }
}

TEST_CASE(
    "booleans are Triton's true, on, 1, false, off or 0, any case, either form; nothing else") {
  struct flag {
    const char* name;
    bool (*read)(const options&);
  };
  const flag flags[] = {
      {"allow-shared-memory", [](const options& o) { return o.server.shared_memory; }},
      {"allow-http", [](const options& o) { return o.allow_http; }},
      {"allow-grpc", [](const options& o) { return o.allow_grpc; }},
      {"allow-metrics", [](const options& o) { return o.allow_metrics; }},
      {"inline-execution", [](const options& o) { return o.inline_execution; }},
      {"grpc-use-ssl", [](const options& o) { return o.grpc_tls.use_ssl; }},
      {"grpc-use-ssl-mutual", [](const options& o) { return o.grpc_tls.mutual; }},
      {"reuse-grpc-port", [](const options& o) { return o.grpc.reuse_port; }},
  };
  for (const flag& f : flags) {
    CAPTURE(f.name);
    const std::string name = std::string{"--"} + f.name;
    for (const auto& [text, value] :
         {std::pair{"true", true}, std::pair{"1", true}, std::pair{"On", true},
          std::pair{"TRUE", true}, std::pair{"false", false}, std::pair{"0", false},
          std::pair{"off", false}, std::pair{"False", false}}) {
      CAPTURE(text);
      CHECK(f.read(parsed({name + "=" + text})) == value);
      CHECK(f.read(parsed({name, text})) == value);
    }
    for (const char* wrong : {"yes", "tru", "2", "-1"}) {
      CAPTURE(wrong);
      CHECK(refusal({name + "=" + wrong}) ==
            name + " takes true, false, on, off, 1 or 0, not '" + wrong + "'");
    }
    // A boolean takes a value: alone, or empty, it would read as one way or the other.
    CHECK(refusal({name}).find(f.name) != std::string::npos);
    CHECK(refusal({name + "="}).find(f.name) != std::string::npos);
  }
  CHECK(refusal({"--allow-gpu-metrics", "maybe"}) ==
        "--allow-gpu-metrics takes true, false, on, off, 1 or 0, not 'maybe'");
  CHECK(refusal({"--grpc-keepalive-permit-without-calls=2"}) ==
        "--grpc-keepalive-permit-without-calls takes true, false, on, off, 1 or 0, not '2'");
}

TEST_CASE("numbers out of range or not numbers are refused, never defaulted") {
  CHECK(refusal({"--http-port", "65536"}) ==
        "--http-port takes a whole number from 0 to 65535, not '65536'");
  CHECK(refusal({"--grpc-port=-1"}) ==
        "--grpc-port takes a whole number from 0 to 65535, not '-1'");
  CHECK(refusal({"--io-threads", "0"}).starts_with("--io-threads takes a whole number from 1"));
  CHECK(refusal({"--queue", "many"}).starts_with("--queue takes a whole number from 1"));
  CHECK(refusal({"--max-body-bytes", "12k"}).starts_with("--max-body-bytes takes a whole number"));
  CHECK(refusal({"--threads", ""}).starts_with("--threads takes a whole number"));
  CHECK(refusal({"--grpc-keepalive-time", "3000000000"}) ==
        "--grpc-keepalive-time takes a whole number from 0 to 2147483647, not '3000000000'");
  CHECK(refusal({"--metrics-interval-ms", "x"}).starts_with("--metrics-interval-ms takes"));
}

TEST_CASE("unknown options, missing values, repeats and stray words are refused") {
  CHECK(refusal({"--no-such-option", "1"}).find("no-such-option") != std::string::npos);
  CHECK(refusal({"--http"}).find("http") != std::string::npos);  // no prefix matching
  CHECK(refusal({"--http-port"}).find("http-port") != std::string::npos);
  CHECK(refusal({"--http-port", "1", "--http-port", "2"}).find("http-port") != std::string::npos);
  CHECK(refusal({"stray"}) == "unexpected argument 'stray': every option starts with --");
  CHECK(refusal({"--http-port", "1", "2"}) ==
        "unexpected argument '2': every option starts with --");
  CHECK(refusal({"-h"}) == "unexpected argument '-h': every option starts with --");
  CHECK(refusal({"--no-dynamic-batching=true"}).find("no-dynamic-batching") != std::string::npos);
  CHECK(refusal({"--log-level", "loud"}).find("loud") != std::string::npos);
  CHECK(refusal({"--http-restricted-api", "nonsense"}).find("http-restricted-api") !=
        std::string::npos);
}

TEST_CASE("model control: none or explicit, and --load-model only with explicit") {
  CHECK(refusal({"--model-control-mode", "poll"}) ==
        "--model-control-mode takes none or explicit, not 'poll' (oip-serve has no model "
        "repository to poll)");
  CHECK(refusal({"--load-model", "simple"}) ==
        "--load-model needs --model-control-mode explicit (in none mode every model of --models "
        "is loaded)");
  const options o = parsed(
      {"--model-control-mode=explicit", "--load-model", "simple", "--load-model=classifier"});
  CHECK(o.load_models == std::set<std::string>{"simple", "classifier"});
  CHECK_FALSE(o.load_all);
  CHECK(parsed({"--model-control-mode", "explicit", "--load-model", "*"}).load_all);
  CHECK(parsed({"--model-control-mode=EXPLICIT"}).server.model_control ==
        oip::model_control_mode::explicit_loading);  // any case, as Triton
}

TEST_CASE("switches, addresses, repeated options and help") {
  CHECK(parsed({"--help"}).help);
  CHECK_FALSE(parsed({"--no-dynamic-batching"}).dynamic_batching);
  const options addressed = parsed({"--address", "127.0.0.1", "--http-address=10.0.0.1"});
  CHECK(addressed.http.address == "10.0.0.1");
  CHECK(addressed.metrics.address == "10.0.0.1");  // the metrics follow HTTP's, as in Triton
  CHECK(addressed.grpc.address == "127.0.0.1");
  CHECK(parsed({"--http-address=a", "--metrics-address=b"}).metrics.address == "b");
  const options traced = parsed({"--trace-level", "TIMESTAMPS", "--trace-level=TENSORS"});
  REQUIRE(traced.trace_flags.settings.size() == 1);
  CHECK(traced.trace_flags.settings[0].second == std::vector<std::string>{"TIMESTAMPS", "TENSORS"});
  const options restricted =
      parsed({"--grpc-restricted-protocol", "health:k=v", "--grpc-restricted-protocol=trace:a=b"});
  const oip::api_restriction* health =
      restricted.grpc.restricted_protocol.of(oip::api_category::health);
  REQUIRE(health != nullptr);
  CHECK(health->header == "triton-grpc-protocol-k");
  CHECK(restricted.grpc.restricted_protocol.of(oip::api_category::trace) != nullptr);
}

TEST_CASE("the OpenAI front end: off by default, keys, and Triton's restricted-API form") {
  CHECK_FALSE(parsed({}).openai);
  const options o = parsed({"--openai", "true", "--openai-api-key", "sk-1", "--openai-api-key=sk-2",
                            "--openai-restricted-api", "inference,model-repository", "admin",
                            "secret", "--http-port", "9"});
  CHECK(o.openai);
  CHECK(o.openai_access.api_keys == std::vector<std::string>{"sk-1", "sk-2"});
  const oip::api_restriction* needed =
      o.openai_access.restrictions.of(oip::api_category::model_repository);
  REQUIRE(needed != nullptr);
  CHECK(needed->header == "admin");
  CHECK(needed->value == "secret");
  CHECK(o.http.port == 9);
  CHECK(parsed({"--openai=1", "--http-restricted-api", "openai:tenant=t"})
            .server.restricted_http_api.of(oip::api_category::openai) != nullptr);
  CHECK(refusal({"--openai", "maybe"}).find("--openai takes true") != std::string::npos);
  CHECK(refusal({"--openai-api-key", "k"}).find("need --openai true") != std::string::npos);
  CHECK(refusal({"--openai", "true", "--openai-restricted-api", "inference", "admin"})
            .find("three values") != std::string::npos);
  CHECK(refusal({"--openai", "true", "--openai-restricted-api", "logging", "a", "b"})
            .find("inference and model-repository") != std::string::npos);
  CHECK(refusal({"--openai", "true", "--openai-api-key", ""}).find("not an empty string") !=
        std::string::npos);
  CHECK(refusal({"--openai", "true", "--openai-api-key="}).find("openai-api-key") !=
        std::string::npos);
}

TEST_CASE("the response cache: none by default, Triton's local,size= form, nothing else") {
  CHECK(parsed({}).server.response_cache_bytes == 0);
  CHECK(parsed({"--cache-config", "local,size=1048576"}).server.response_cache_bytes == 1048576);
  CHECK(parsed({"--cache-config=local,size=0"}).server.response_cache_bytes == 0);
  for (const std::string wrong :
       {"local", "local,size=", "local,size=1k", "redis,size=10", "local,size=-1", "size=10"}) {
    CAPTURE(wrong);
    CHECK(refusal({"--cache-config", wrong}) ==
          "--cache-config takes local,size=BYTES (the cache in this server's memory), not '" +
              wrong + "'");
  }
}
