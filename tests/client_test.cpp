// oip's network clients against oip-serve, run as its own process: every call of the clients over
// each transport, with the same test body for both.

#include "client_checks.hpp"
#include "loopback_socket.hpp"
#include "oip_serve_process.hpp"
#include "shm_object.hpp"

#include <oip/http/client.hpp>
#ifdef OIP_TEST_GRPC_CLIENT
#include <oip/grpc/client.hpp>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <future>
#include <iterator>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

namespace {

using oip::testing::check_simple;
using oip::testing::oip_serve_process;
using oip::testing::simple_request;

struct http_transport {
  using client = oip::http::client;
  static constexpr oip::received_over via = oip::received_over::http;
  static constexpr int not_found = 404;
  static std::string address(const oip_serve_process& server) { return server.http_address(); }
};

#ifdef OIP_TEST_GRPC_CLIENT
struct grpc_transport {
  using client = oip::grpc::client;
  static constexpr oip::received_over via = oip::received_over::grpc;
  static constexpr int not_found = 5;  // NOT_FOUND
  static std::string address(const oip_serve_process& server) { return server.grpc_address(); }
};
#define OIP_CLIENT_TRANSPORTS http_transport, grpc_transport
#else
#define OIP_CLIENT_TRANSPORTS http_transport
#endif

// One server for the tests that need no special settings.
oip_serve_process& shared_server() {
  static oip_serve_process server{{"--models",
                                   "simple,sequence_accumulator,identity_fp32,simple_string,"
                                   "identity_bytes,repeat_int32",
                                   "--allow-shared-memory", "true"}};
  return server;
}

}  // namespace

TEST_CASE_TEMPLATE("a client's inference, health and metadata calls", T, OIP_CLIENT_TRANSPORTS) {
  typename T::client client{T::address(shared_server())};
  CHECK(client.live());
  CHECK(client.ready());
  CHECK(client.ready("simple"));
  CHECK_FALSE(client.ready("no_such_model"));

  check_simple(client.infer("simple", simple_request()));
  check_simple(client.infer("simple", simple_request(7), oip::request_format{}), 7);
  check_simple(client.infer("simple", simple_request(9), oip::binary_format, 1), 9);

  const oip::result<oip::server_metadata> server = client.metadata();
  REQUIRE(server.ok());
  CHECK(server->name == "oip");
  CHECK(std::find(server->extensions.begin(), server->extensions.end(), "system_shared_memory") !=
        server->extensions.end());
  const oip::result<oip::model_metadata> model = client.metadata("simple");
  REQUIRE(model.ok());
  CHECK(model->name == "simple");
  CHECK(model->inputs.size() == 2);

  const oip::result<oip::inference_response> unknown =
      client.infer("no_such_model", simple_request());
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.error().code() == oip::errc::not_found);
  CHECK(unknown.error().received() == T::via);
  CHECK(unknown.error().received_code() == T::not_found);
  CHECK(unknown.error().message().find("no_such_model") != std::string::npos);

  oip::inference_request wrong = simple_request();
  wrong.inputs.pop_back();
  const oip::result<oip::inference_response> refused = client.infer("simple", wrong);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code() == oip::errc::invalid_argument);
}

TEST_CASE_TEMPLATE("strings, classification and sequences through a client", T,
                   OIP_CLIENT_TRANSPORTS) {
  typename T::client client{T::address(shared_server())};

  oip::inference_request strings;
  strings.inputs.push_back(*oip::tensor::from_strings(
      "INPUT0", {1, 3}, std::vector<std::string_view>{"a", "", "ünïcode"}));
  const oip::result<oip::inference_response> echoed = client.infer("identity_bytes", strings);
  REQUIRE_MESSAGE(echoed.ok(), echoed.to_status().message());
  std::vector<std::string> got;
  for (std::string_view s : echoed->outputs.at(0).strings()) got.emplace_back(s);
  CHECK(got == std::vector<std::string>{"a", "", "ünïcode"});

  oip::inference_request top = simple_request();
  oip::requested_output asked{"OUTPUT0", {}};
  asked.parameters.set("classification", std::int64_t{2});
  top.outputs.push_back(asked);
  const oip::result<oip::inference_response> classes = client.infer("simple", top);
  REQUIRE_MESSAGE(classes.ok(), classes.to_status().message());
  got.clear();
  for (std::string_view s : classes->outputs.at(0).strings()) got.emplace_back(s);
  CHECK(got == std::vector<std::string>{"16:15", "15:14"});

  // sequence_accumulator answers the sequence's running sum.
  std::int32_t total = 0;
  for (std::int32_t step = 0; step < 4; ++step) {
    const std::int32_t value = step + 1;
    oip::inference_request r;
    r.parameters.set("sequence_id", std::int64_t{4242});
    if (step == 0) r.parameters.set("sequence_start", true);
    if (step == 3) r.parameters.set("sequence_end", true);
    r.inputs.push_back(*oip::tensor::from_values<std::int32_t>(
        "INPUT", {1}, std::span<const std::int32_t>(&value, 1)));
    const oip::result<oip::inference_response> out = client.infer("sequence_accumulator", r);
    REQUIRE_MESSAGE(out.ok(), out.to_status().message());
    total += value;
    CHECK(out->outputs.at(0).template at<std::int32_t>(0) == total);
  }
}

TEST_CASE_TEMPLATE("many calls in flight from many threads share a client", T,
                   OIP_CLIENT_TRANSPORTS) {
  oip::client_options options;
  options.max_connections = 3;
  typename T::client client{T::address(shared_server()), options};
  oip::testing::check_many_in_flight(client);
}

TEST_CASE_TEMPLATE("configuration, statistics, logging and trace settings through a client", T,
                   OIP_CLIENT_TRANSPORTS) {
  typename T::client client{T::address(shared_server())};
  check_simple(client.infer("simple", simple_request()));

  const oip::result<std::string> config = client.model_config("simple");
  REQUIRE_MESSAGE(config.ok(), config.to_status().message());
  CHECK(config->find("\"simple\"") != std::string::npos);
  CHECK(config->find("INPUT0") != std::string::npos);

  const oip::result<std::string> stats = client.statistics("simple");
  REQUIRE_MESSAGE(stats.ok(), stats.to_status().message());
  CHECK(stats->find("inference_count") != std::string::npos);
  const oip::result<std::string> all_stats = client.statistics();
  REQUIRE(all_stats.ok());
  CHECK(all_stats->find("sequence_accumulator") != std::string::npos);

  const oip::result<oip::log_settings> logging = client.log_settings();
  REQUIRE_MESSAGE(logging.ok(), logging.to_status().message());
  oip::log_settings_update change;
  change.verbose_level = 1;
  const oip::result<oip::log_settings> changed = client.update_log_settings(change);
  REQUIRE_MESSAGE(changed.ok(), changed.to_status().message());
  CHECK(changed->verbose_level == 1);
  change.verbose_level = logging->verbose_level;
  CHECK(client.update_log_settings(change).ok());

  const oip::result<oip::trace_settings_change> trace = client.trace_settings();
  REQUIRE_MESSAGE(trace.ok(), trace.to_status().message());
  oip::trace_settings_change rate;
  rate.settings.push_back({"trace_rate", std::vector<std::string>{"7"}});
  const oip::result<oip::trace_settings_change> after =
      client.update_trace_settings(rate, "simple");
  REQUIRE_MESSAGE(after.ok(), after.to_status().message());
  bool seen = false;
  for (const auto& [name, values] : after->settings) {
    if (name == "trace_rate") {
      seen = true;
      CHECK((values && values->size() == 1 && values->front() == "7"));
    }
  }
  CHECK(seen);
}

TEST_CASE_TEMPLATE("load and unload through a client, in explicit model control", T,
                   OIP_CLIENT_TRANSPORTS) {
  oip_serve_process server{{"--models", "simple,simple_string", "--model-control-mode", "explicit",
                            "--load-model", "simple"}};
  typename T::client client{T::address(server)};
  CHECK(client.ready("simple"));
  CHECK_FALSE(client.ready("simple_string"));

  const oip::result<std::vector<oip::model_index_entry>> index = client.repository_index();
  REQUIRE_MESSAGE(index.ok(), index.to_status().message());
  CHECK(index->size() == 2);

  REQUIRE(client.load("simple_string").ok());
  CHECK(client.ready("simple_string"));
  const oip::result<std::vector<oip::model_index_entry>> ready = client.repository_index(true);
  REQUIRE(ready.ok());
  CHECK(ready->size() == 2);

  REQUIRE(client.unload("simple").ok());
  CHECK_FALSE(client.ready("simple"));
  const oip::result<oip::inference_response> gone = client.infer("simple", simple_request());
  CHECK_FALSE(gone.ok());

  const oip::status unknown = client.load("no_such_model");
  CHECK_FALSE(unknown.ok());
  CHECK(unknown.received() == T::via);
}

TEST_CASE_TEMPLATE("inputs and outputs in a shared-memory region registered through a client", T,
                   OIP_CLIENT_TRANSPORTS) {
  typename T::client client{T::address(shared_server())};
  oip::testing::shm_object region{
      std::string{"client_"} + (T::via == oip::received_over::http ? "h" : "g"), 256};

  const oip::status registered =
      client.register_system_shared_memory("client_region", region.key(), 0, 256);
  REQUIRE_MESSAGE(registered.ok(), registered.message());
  const oip::result<std::vector<oip::shared_memory_region>> listed =
      client.system_shared_memory_status("client_region");
  REQUIRE_MESSAGE(listed.ok(), listed.to_status().message());
  REQUIRE(listed->size() == 1);
  CHECK(listed->front().byte_size == 256);

  // INPUT0 comes from bytes [0, 64) of the region (at its place, first among the inputs),
  // OUTPUT0 goes to bytes [64, 128); INPUT1 and OUTPUT1 travel in the messages.
  oip::inference_request request = simple_request(3);
  std::vector<std::int32_t> first(16);
  for (std::size_t i = 0; i < 16; ++i) first[i] = request.inputs[0].at<std::int32_t>(i);
  region.put(0, first);
  request.inputs.erase(request.inputs.begin());
  request.shared_memory_inputs.push_back({.position = 0,
                                          .name = "INPUT0",
                                          .type = oip::datatype::int32,
                                          .shape = {1, 16},
                                          .parameters = {},
                                          .place = {"client_region", 0, 64}});
  oip::requested_output placed{"OUTPUT0", {}};
  placed.parameters.set("shared_memory_region", std::string{"client_region"});
  placed.parameters.set("shared_memory_offset", std::int64_t{64});
  placed.parameters.set("shared_memory_byte_size", std::int64_t{64});
  request.outputs.push_back(placed);
  request.outputs.push_back({"OUTPUT1", {}});
  const oip::result<oip::inference_response> response = client.infer("simple", request);
  REQUIRE_MESSAGE(response.ok(), response.to_status().message());
  for (const oip::tensor& t : response->outputs) {
    if (t.name() == "OUTPUT0") CHECK(t.at<std::int32_t>(5) == 3 + 5 + 1);
    if (t.name() == "OUTPUT1") CHECK(t.at<std::int32_t>(5) == 3 + 5 - 1);
  }
  CHECK(region.get<std::int32_t>(64 + 5 * 4, 1).at(0) == 3 + 5 + 1);

#ifdef OIP_TEST_GRPC_CLIENT
  if constexpr (T::via == oip::received_over::grpc) {
    // The same over a stream: each response's outputs read from the region its request named,
    // matched by the request's id.
    region.put(64, std::vector<std::int32_t>(16, 0));
    std::mutex mutex;
    std::vector<oip::result<oip::inference_response>> streamed;
    {
      oip::grpc::client::stream stream =
          client.open_stream([&](oip::result<oip::inference_response> r) {
            const std::lock_guard lock{mutex};
            streamed.push_back(std::move(r));
          });
      request.id = "in-region";
      REQUIRE(stream.send("simple", request).ok());
      REQUIRE(stream.finish().ok());
    }
    REQUIRE(streamed.size() == 1);
    REQUIRE_MESSAGE(streamed[0].ok(), streamed[0].to_status().message());
    for (const oip::tensor& t : streamed[0]->outputs) {
      if (t.name() == "OUTPUT0") CHECK(t.at<std::int32_t>(5) == 3 + 5 + 1);
      if (t.name() == "OUTPUT1") CHECK(t.at<std::int32_t>(5) == 3 + 5 - 1);
    }
    CHECK(region.get<std::int32_t>(64 + 5 * 4, 1).at(0) == 3 + 5 + 1);
  }
#endif

  REQUIRE(client.unregister_system_shared_memory("client_region").ok());
  const oip::result<std::vector<oip::shared_memory_region>> none =
      client.system_shared_memory_status();
  REQUIRE(none.ok());
  CHECK(none->empty());
  // A region that this process cannot map is refused before the server is asked.
  CHECK_FALSE(client.register_system_shared_memory("missing", "/oip_no_such_object", 0, 16).ok());
}

TEST_CASE_TEMPLATE("compression both ways, and headers for a restricted API", T,
                   OIP_CLIENT_TRANSPORTS) {
  oip_serve_process server{{"--models", "simple", "--http-restricted-api",
                            "inference:oip-key=secret", "--grpc-restricted-protocol",
                            "inference:oip-key=secret"}};
  {
    typename T::client client{T::address(server)};
    const oip::result<oip::inference_response> refused = client.infer("simple", simple_request());
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().code() == oip::errc::forbidden);
    CHECK(client.ready());  // health is not restricted
  }
  oip::client_options options;
  const bool http = T::via == oip::received_over::http;
  options.headers.push_back({http ? "oip-key" : "triton-grpc-protocol-oip-key", "secret"});
  options.request_compression = oip::wire_compression::gzip;
  options.response_compression = oip::wire_compression::gzip;
  typename T::client client{T::address(server), options};
  check_simple(client.infer("simple", simple_request(11)), 11);
  check_simple(client.infer("simple", simple_request(12), oip::request_format{}), 12);
  options.request_compression = oip::wire_compression::deflate;
  options.response_compression = oip::wire_compression::deflate;
  typename T::client deflating{T::address(server), options};
  check_simple(deflating.infer("simple", simple_request(13)), 13);
}

TEST_CASE_TEMPLATE("a server that is not there is an error, not a wait", T, OIP_CLIENT_TRANSPORTS) {
  // A port bound and not listening, held for the test: connections are refused, and no other
  // test can take the port meanwhile.
  const oip::testing::loopback_socket held = oip::testing::bind_loopback();
  oip::client_options options;
  options.timeout = std::chrono::milliseconds{2000};
  typename T::client client{held.host_port(), options};
  const auto started = std::chrono::steady_clock::now();
  const oip::result<oip::inference_response> r = client.infer("simple", simple_request());
  REQUIRE_FALSE(r.ok());
  CHECK((r.error().code() == oip::errc::unavailable ||
         r.error().code() == oip::errc::deadline_exceeded));
  CHECK(r.error().received() ==
        (T::via == oip::received_over::grpc ? T::via : oip::received_over::none));
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds{10});
  CHECK_FALSE(client.live());
  close(held.fd);
}

TEST_CASE_TEMPLATE("a client that its own callback lets go of last ends after that callback", T,
                   OIP_CLIENT_TRANSPORTS) {
  // As an owner torn down from its completion does: the callback holds the client's last
  // reference, and drops it or is destroyed with it. The client cannot wait there for the call
  // whose callback runs.
  for (const bool lets_go_itself : {true, false}) {
    CAPTURE(lets_go_itself);
    for (int round = 0; round < 5; ++round) {
      auto client = std::make_shared<typename T::client>(T::address(shared_server()));
      std::promise<void> let_go;
      std::shared_future<void> test_let_go = let_go.get_future().share();
      std::promise<oip::result<oip::inference_response>> got;
      std::future<oip::result<oip::inference_response>> reply = got.get_future();
      client->async_infer("simple", simple_request(),
                          [held = client, test_let_go, lets_go_itself,
                           &got](oip::result<oip::inference_response> r) mutable {
                            test_let_go.wait();
                            if (lets_go_itself) held.reset();  // the last reference
                            got.set_value(std::move(r));
                          });
      client.reset();
      let_go.set_value();
      check_simple(reply.get());
    }
  }
}

#ifdef OIP_TEST_GRPC_CLIENT
TEST_CASE("a decoupled model's responses, one by one, over a gRPC stream") {
  oip::grpc::client client{shared_server().grpc_address()};
  oip::testing::check_repeat_stream(client);
}

TEST_CASE(
    "a stream finished, let go or replaced in its own callback ends without waiting for itself") {
  // Its end cannot come while its callback runs: `finish` there is refused at once, and a stream
  // let go there (destroyed, or assigned another) is cancelled and ends on a thread of its own.
  oip::grpc::client client{shared_server().grpc_address()};
  enum class way : std::uint8_t { finished_then_let_go, let_go, replaced };
  for (const way how : {way::finished_then_let_go, way::let_go, way::replaced}) {
    CAPTURE(static_cast<int>(how));
    for (int round = 0; round < 3; ++round) {
      struct holder {
        std::mutex mutex;
        std::optional<oip::grpc::client::stream> stream;
        int results = 0;
      };
      auto held = std::make_shared<holder>();
      std::promise<std::pair<oip::status, oip::result<oip::inference_response>>> got;
      std::future<std::pair<oip::status, oip::result<oip::inference_response>>> outcome =
          got.get_future();
      {
        const std::lock_guard lock{held->mutex};  // the callback waits until the stream is held
        held->stream.emplace(client.open_stream(
            [held, how, &got, &client](oip::result<oip::inference_response> r) mutable {
              const std::lock_guard inner{held->mutex};
              ++held->results;
              if (!held->stream) return;  // a result after the stream was let go
              oip::status finished;
              if (how == way::finished_then_let_go) finished = held->stream->finish();
              if (how == way::replaced) {
                *held->stream = client.open_stream([](oip::result<oip::inference_response>) {});
              } else {
                held->stream.reset();
              }
              got.set_value({std::move(finished), std::move(r)});
            }));
        REQUIRE(held->stream->send("simple", simple_request()).ok());
        // Sent after the first has been answered, if at all: the stream is let go before.
        REQUIRE(held->stream->send("simple", simple_request(3)).ok());
      }
      REQUIRE(outcome.wait_for(std::chrono::seconds{10}) == std::future_status::ready);
      auto [finished, reply] = outcome.get();
      check_simple(reply);
      if (how == way::finished_then_let_go) {
        CHECK(finished.code() == oip::errc::failed_precondition);
        CHECK(finished.message().find("in its own callback") != std::string::npos);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds{50});
      const std::lock_guard lock{held->mutex};
      CHECK(held->results == 1);  // nothing comes to a callback after its stream was let go
      if (how == way::replaced) {
        REQUIRE(held->stream.has_value());
        CHECK(held->stream->send("simple", simple_request()).ok());
        CHECK(held->stream->finish().ok());
      }
    }
  }
  check_simple(client.infer("simple", simple_request()));  // the client goes on
}

TEST_CASE("headers that gRPC cannot carry are refused on every call, not an abort") {
  for (const oip::http_header& header :
       std::vector<oip::http_header>{{"x bad name", "v"},
                                     {"", "v"},
                                     {":path", "/x"},
                                     {"grpc-timeout", "1S"},
                                     {"x-line", "a\nb"},
                                     {"x-tab", "a\tb"},
                                     {"x-accent", "caf\xc3\xa9"}}) {
    CAPTURE(header.name);
    oip::client_options options;
    options.headers.push_back(header);
    oip::grpc::client client{shared_server().grpc_address(), options};
    const oip::result<oip::inference_response> r = client.infer("simple", simple_request());
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code() == oip::errc::invalid_argument);
    CHECK(r.error().message().find("cannot be sent as gRPC metadata") != std::string::npos);
    CHECK(client.async_infer("simple", simple_request()).get().error().code() ==
          oip::errc::invalid_argument);
    CHECK(client.metadata().error().code() == oip::errc::invalid_argument);
    oip::grpc::client::stream stream =
        client.open_stream([](oip::result<oip::inference_response>) {});
    CHECK(stream.send("simple", simple_request()).code() == oip::errc::invalid_argument);
    CHECK(stream.finish().code() == oip::errc::invalid_argument);
  }
  // Upper case is sent in lower case; a "-bin" name carries any bytes.
  oip::client_options options;
  options.headers = {{"X-Upper", "v"}, {"x-raw-bin", std::string{"\xff\x00\x01", 3}}};
  oip::grpc::client client{shared_server().grpc_address(), options};
  check_simple(client.infer("simple", simple_request(4)), 4);
}

TEST_CASE("a stream's results come with their requests' ids, a failed request's included") {
  oip::grpc::client client{shared_server().grpc_address()};
  std::mutex mutex;
  std::vector<std::pair<std::string, oip::result<oip::inference_response>>> results;
  oip::grpc::client::stream stream =
      client.open_stream([&](std::string_view id, oip::result<oip::inference_response> r) {
        const std::lock_guard lock{mutex};
        results.emplace_back(std::string{id}, std::move(r));
      });
  const auto with_id = [](std::string id, std::int32_t base) {
    oip::inference_request request = simple_request(base);
    request.id = std::move(id);
    return request;
  };
  REQUIRE(stream.send("simple", with_id("first", 1)).ok());
  REQUIRE(stream.send("no_such_model", with_id("second", 2)).ok());
  REQUIRE(stream.send("simple", with_id("third", 3)).ok());
  REQUIRE(stream.finish().ok());
  const std::lock_guard lock{mutex};
  REQUIRE(results.size() == 3);
  CHECK(results[0].first == "first");
  check_simple(results[0].second, 1);
  CHECK(results[1].first == "second");
  REQUIRE_FALSE(results[1].second.ok());
  CHECK(results[1].second.error().code() == oip::errc::internal);  // a stream's error has no code
  CHECK(results[1].second.error().message().find("no_such_model") != std::string::npos);
  CHECK(results[2].first == "third");
  check_simple(results[2].second, 3);
}

TEST_CASE("a stream the server ends with an error tells its callback, and takes no more requests") {
  // Triton's triton_grpc_error mode: the server ends the stream at the first failed request.
  oip::client_options options;
  options.headers.push_back({"triton_grpc_error", "true"});
  oip::grpc::client client{shared_server().grpc_address(), options};
  std::mutex mutex;
  std::condition_variable told;
  std::vector<oip::result<oip::inference_response>> results;
  oip::grpc::client::stream stream =
      client.open_stream([&](oip::result<oip::inference_response> r) {
        const std::lock_guard lock{mutex};
        results.push_back(std::move(r));
        told.notify_all();
      });
  REQUIRE(stream.send("simple", simple_request(5)).ok());
  REQUIRE(stream.send("no_such_model", simple_request()).ok());
  {
    std::unique_lock lock{mutex};
    REQUIRE(told.wait_for(lock, std::chrono::seconds{10}, [&] { return results.size() == 2; }));
    check_simple(results[0], 5);
    REQUIRE_FALSE(results[1].ok());
    CHECK(results[1].error().code() == oip::errc::not_found);
    CHECK(results[1].error().received() == oip::received_over::grpc);
  }
  // The call is over: a request is refused rather than dropped.
  const oip::status late = stream.send("simple", simple_request());
  CHECK(late.code() == oip::errc::unavailable);
  CHECK(stream.finish().code() == oip::errc::not_found);
  const std::lock_guard lock{mutex};
  CHECK(results.size() == 2);
}

TEST_CASE("TLS and keepalive over gRPC, and a client without TLS refused") {
  // A self-signed certificate for 127.0.0.1, made with openssl as Triton's TLS examples do.
  const std::string dir = "/tmp/oip_client_tls_" + std::to_string(getpid());
  const std::string key = dir + "/key.pem";
  const std::string certificate = dir + "/certificate.pem";
  const std::string make = "mkdir -p " + dir +
                           " && openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "
                           "/CN=localhost -addext subjectAltName=IP:127.0.0.1 -keyout " +
                           key + " -out " + certificate + " >/dev/null 2>&1";
  REQUIRE(std::system(make.c_str()) == 0);
  std::ifstream file{certificate};
  const std::string pem{std::istreambuf_iterator<char>{file}, std::istreambuf_iterator<char>{}};
  REQUIRE_FALSE(pem.empty());
  oip_serve_process server{{"--models", "simple", "--grpc-use-ssl", "true", "--grpc-server-cert",
                            certificate, "--grpc-server-key", key,
                            "--grpc-keepalive-permit-without-calls", "true"}};
  oip::client_options options;
  options.tls.enabled = true;
  options.tls.root_certificates = pem;
  options.keepalive_time = std::chrono::milliseconds{10000};
  options.keepalive_without_calls = true;  // the server permits it
  options.timeout = std::chrono::milliseconds{10000};
  oip::grpc::client secure{server.grpc_address(), options};
  check_simple(secure.infer("simple", simple_request(5)), 5);
  CHECK(secure.live());

  oip::client_options plain_options;
  plain_options.timeout = std::chrono::milliseconds{3000};
  oip::grpc::client plain{server.grpc_address(), plain_options};
  const oip::result<oip::inference_response> refused = plain.infer("simple", simple_request());
  CHECK_FALSE(refused.ok());
  CHECK(std::system(("rm -rf " + dir).c_str()) == 0);
}

TEST_CASE("two sequences' requests interleaved on one gRPC stream, answered in order") {
  oip::grpc::client client{shared_server().grpc_address()};
  std::mutex mutex;
  std::vector<std::int32_t> sums;
  oip::grpc::client::stream stream =
      client.open_stream([&](oip::result<oip::inference_response> response) {
        // On a gRPC thread: no REQUIRE, no throwing accessor.
        const std::lock_guard lock{mutex};
        sums.push_back(response.ok() && response->outputs.size() == 1
                           ? response->outputs[0].at<std::int32_t>(0)
                           : -1);
      });
  for (std::int32_t step = 0; step < 4; ++step) {
    for (const std::int64_t id : {std::int64_t{501}, std::int64_t{502}}) {
      const std::int32_t value = id == 501 ? step + 1 : 10 * (step + 1);
      oip::inference_request r;
      r.parameters.set("sequence_id", id);
      if (step == 0) r.parameters.set("sequence_start", true);
      if (step == 3) r.parameters.set("sequence_end", true);
      r.inputs.push_back(*oip::tensor::from_values<std::int32_t>(
          "INPUT", {1}, std::span<const std::int32_t>(&value, 1)));
      REQUIRE(stream.send("sequence_accumulator", r).ok());
    }
  }
  const oip::status ended = stream.finish();
  REQUIRE_MESSAGE(ended.ok(), ended.message());
  CHECK(sums == std::vector<std::int32_t>{1, 10, 3, 30, 6, 60, 10, 100});
  CHECK_FALSE(stream.send("sequence_accumulator", oip::inference_request{}).ok());

  // An error for one request comes on the stream; the stream goes on.
  std::vector<std::string> errors;
  oip::grpc::client::stream second =
      client.open_stream([&](oip::result<oip::inference_response> response) {
        const std::lock_guard lock{mutex};
        errors.push_back(response.ok() ? "ok" : response.error().message());
      });
  REQUIRE(second.send("no_such_model", simple_request()).ok());
  REQUIRE(second.send("simple", simple_request()).ok());
  REQUIRE(second.finish().ok());
  REQUIRE(errors.size() == 2);
  CHECK(errors[0].find("no_such_model") != std::string::npos);
  CHECK(errors[1] == "ok");
}
#endif
