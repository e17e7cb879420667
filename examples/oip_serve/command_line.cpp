#include "command_line.hpp"

#include <oip/access.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string_view>

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <grpcpp/grpcpp.h>

namespace oip_serve {

const std::string_view usage = R"(Usage: oip-serve [options]

Serves oip's reference models (Triton's example models: simple, simple_int8, simple_<type> for
the other numeric types, simple_string, simple_identity, identity_<type>, classifier,
simple_sequence, simple_dyna_sequence, simple_string_dyna_sequence, sequence_accumulator) over
the Open Inference Protocol, on HTTP and gRPC.

Every option is written --name=VALUE or --name VALUE, as Triton's are; B is true, on or 1, or
false, off or 0, in any case, as Triton reads them.
A value that is not one the option takes is an error (exit code 2).

  --http-port N          HTTP port (default 8000; 0 picks a free one)
  --grpc-port N          gRPC port (default 8001; 0 picks a free one)
  --metrics-port N       Prometheus metrics port, GET /metrics (default 8002; 0 picks a free one)
  --address A            address to listen on (default 0.0.0.0); --http-address,
                         --grpc-address and --metrics-address set one server's (the metrics
                         follow --http-address unless given their own, as in Triton)
  --allow-http B, --allow-grpc B, --allow-metrics B
                         run that server (default true), as Triton's options
  --allow-gpu-metrics B, --allow-cpu-metrics B, --metrics-interval-ms N
                         accepted for Triton's command lines, with no effect: oip-serve has no
                         GPU or CPU utilisation metrics, and reads every figure at each scrape
  --threads N            model worker threads (default: hardware threads)
  --io-threads N         HTTP I/O threads (default 2)
  --inline-below-us N    run a model whose calls have lately taken under N microseconds on
                         the thread that received the request, not a worker (default 10; 0:
                         never): no worker to wake (oip::server_options::inline_below)
  --inline-execution B   always run simple*, identity_*, simple_string and simple_identity, when
                         on the CPU, on the thread that received the request (default false:
                         as --inline-below-us decides) (oip::model_config::inline_execution)
  --queue N              requests waiting for a worker before 503 (default 1024)
  --max-connections N    open HTTP connections; one more is answered 503 (default 1024)
  --http-body-timeout-ms N, --http-body-min-rate N
                         an HTTP body's read or a reply's write may take N ms (default 60000),
                         and a second more for each --http-body-min-rate bytes it has moved
                         (default 65536; 0: the timeout alone), so that a client that trickles
                         its bytes is cut off while a large tensor over a slow link is not
  --max-body-bytes N     largest HTTP body or gRPC message (default 268435456)
  --max-inflight-bytes N bytes of requests and replies the server holds at once, over every
                         connection; a request that would pass it is answered 503 before its
                         body is read (default 0: half the machine's physical memory)
  --max-response-bytes N largest JSON reply (default 0: 1 MiB, or 64 times the request's bytes
                         on the wire if more); a larger one is refused with a 400 that asks
                         for binary_data_output (oip::limits::max_response_bytes)
  --server-name NAME     name reported by server metadata (default oip)
  --log-level L          error (server faults only), warning (default: also one line per
                         client error), info, or verbose (also one line per successful request)
  --log-format F         default (glog's E1125 02:50:31.123456 prefix) or ISO8601; clients can
                         change both through Triton's logging extension (/v2/logging)
  --http-restricted-api CATEGORIES:KEY=VALUE
                         HTTP requests of these API categories (comma-separated: health,
                         metadata, inference, shared-memory, model-config, model-repository,
                         statistics, trace, logging) must carry header KEY: VALUE, or get a 403;
                         repeat for other groups (as Triton's option)
  --grpc-restricted-protocol CATEGORIES:KEY=VALUE
                         the same for gRPC calls, with metadata triton-grpc-protocol-KEY
  --openai B             serve the OpenAI-compatible front end under /v1 on the HTTP port
                         (default false): text_stream and text_upper as text models,
                         text_embed for embeddings; its category for --http-restricted-api is
                         openai
  --openai-api-key KEY   a key that OpenAI clients must send (Authorization: Bearer KEY), or
                         get a 401; repeat for more (default: none asked)
  --openai-restricted-api CATEGORIES KEY VALUE
                         as Triton's option: /v1 requests of these categories (inference,
                         model-repository) must carry header KEY: VALUE, or get a 403
  --grpc-use-ssl B       gRPC over TLS (default false), with
  --grpc-server-cert PATH, --grpc-server-key PATH
                         the server's certificate chain and private key (PEM), and
  --grpc-root-cert PATH  the certificates that clients' certificates must chain to, with
  --grpc-use-ssl-mutual B
                         true: clients must present a certificate (mutual TLS)
  --grpc-keepalive-time MS, --grpc-keepalive-timeout MS,
  --grpc-keepalive-permit-without-calls B, --grpc-http2-max-pings-without-data N,
  --grpc-http2-min-recv-ping-interval-without-data MS, --grpc-http2-max-ping-strikes N
                         gRPC keepalive, as Triton's options of these names (gRPC's defaults)
  --reuse-grpc-port B    let other processes listen on the gRPC port too (default false)
  --trace-file PATH      where traced requests go (Triton's trace extension). Clients can change
                         every trace setting but this one, so with a file given any client can
                         have every request traced: give one only where clients are trusted
  --trace-level L        OFF (default), TIMESTAMPS or TENSORS (the inputs and outputs of each
                         traced request); given twice, TIMESTAMPS and TENSORS together
  --trace-rate N         trace one request in N (default 1000)
  --trace-count N        stop after N traces (default -1: no limit)
  --trace-log-frequency N
                         every N traces to a file of their own, PATH.0, PATH.1, ... (default 0:
                         all to PATH, one JSON array completed at exit)
  --models A,B,...       the models the repository holds (default: all)
  --model-control-mode M none (default): the models of --models are loaded at start-up and
                         clients' loads and unloads are refused with a 400; explicit: clients
                         load and unload them (Triton's repository extension), and only those
                         of --load-model are loaded at start-up. A load builds a model, so
                         allow it only where clients are trusted with that
  --load-model NAME      in explicit mode, a model to load at start-up (repeat for more; '*'
                         loads every model of --models)
  --no-dynamic-batching  run the classifier's requests one by one (for comparisons)
  --cache-config local,size=N
                         Triton's response cache, of N bytes: a request that a model answered
                         before is answered again without running it, for every model whose
                         responses depend on the request alone (all but the sequence and
                         decoupled ones) (default: none)
  --allow-shared-memory B
                         offer Triton's system shared-memory extension, and its CUDA one where
                         models run on a GPU (default false: a client could then map any
                         shared-memory object this process can open, so allow it only where
                         every client is trusted)
  --device D             auto, cpu, cuda or cuda:N (default auto: a usable CUDA device, else
                         the CPU); simple*, identity_*, sequence_accumulator and classifier run
                         on a CUDA device, the others on the CPU
  --exit-delay-secs N    on SIGTERM or SIGINT, report not ready (/v2/health/ready 503, gRPC
                         ServerReady false, grpc.health.v1 NOT_SERVING) for N seconds while
                         answering every request as before, so that load balancers and
                         Kubernetes take the server out of rotation first (default 0); a second
                         signal ends the delay
  --exit-timeout-secs N  then stop accepting and give requests in flight N seconds to finish
                         before they are cancelled, and exit 0 (default 30, as Triton's option)
  --help                 this text
)";

namespace {

namespace po = boost::program_options;
using oip::errc;
using oip::status;

status usage_error(std::string message) {
  return status{errc::invalid_argument, std::move(message)};
}

// Triton's gRPC keepalive options and the channel arguments they set.
constexpr std::pair<const char*, const char*> keepalive_options[] = {
    {"grpc-keepalive-time", GRPC_ARG_KEEPALIVE_TIME_MS},
    {"grpc-keepalive-timeout", GRPC_ARG_KEEPALIVE_TIMEOUT_MS},
    {"grpc-http2-max-pings-without-data", GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA},
    {"grpc-http2-min-recv-ping-interval-without-data",
     GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS},
    {"grpc-http2-max-ping-strikes", GRPC_ARG_HTTP2_MAX_PING_STRIKES},
};

std::string lowercase(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

// Reads the options' values from what Program_options collected, each checked as it is read.
class reader {
 public:
  explicit reader(const po::variables_map& values) : values_{values} {}

  [[nodiscard]] const std::string* text(const char* name) const {
    const auto found = values_.find(name);
    return found == values_.end() ? nullptr : &found->second.as<std::string>();
  }
  [[nodiscard]] std::vector<std::string> all(const char* name) const {
    const auto found = values_.find(name);
    return found == values_.end() ? std::vector<std::string>{}
                                  : found->second.as<std::vector<std::string>>();
  }

  // Each of these leaves `out` alone when the option is absent, and records the first error.
  void string(const char* name, std::string& out) {
    if (const std::string* value = text(name)) out = *value;
  }
  // As Triton reads them: true, on or 1, false, off or 0, in any case.
  void boolean(const char* name, bool& out) {
    const std::string* value = text(name);
    if (value == nullptr) return;
    const std::string word = lowercase(*value);
    if (word == "true" || word == "on" || word == "1") {
      out = true;
    } else if (word == "false" || word == "off" || word == "0") {
      out = false;
    } else {
      fail(fmt::format("--{} takes true, false, on, off, 1 or 0, not '{}'", name, *value));
    }
  }
  template <class Number>
  void number(const char* name, Number& out, std::uint64_t least,
              std::uint64_t most = std::numeric_limits<Number>::max()) {
    const std::string* value = text(name);
    if (value == nullptr) return;
    std::uint64_t n = 0;
    const char* end = value->data() + value->size();
    const auto [stop, ec] = std::from_chars(value->data(), end, n);
    if (ec != std::errc{} || stop != end || value->empty() || n < least || n > most) {
      fail(fmt::format("--{} takes a whole number from {} to {}, not '{}'", name, least, most,
                       *value));
      return;
    }
    out = static_cast<Number>(n);
  }
  void fail(std::string message) {
    if (error_.ok()) error_ = usage_error(std::move(message));
  }
  void check(status s) {
    if (!s.ok() && error_.ok()) error_ = std::move(s);
  }
  [[nodiscard]] const status& error() const noexcept { return error_; }

 private:
  const po::variables_map& values_;
  status error_;
};

po::options_description known_options() {
  po::options_description known;
  auto add = known.add_options();
  add("help", po::bool_switch());
  add("no-dynamic-batching", po::bool_switch());
  for (const char* single : {"http-port",
                             "grpc-port",
                             "metrics-port",
                             "address",
                             "http-address",
                             "grpc-address",
                             "metrics-address",
                             "allow-http",
                             "allow-grpc",
                             "allow-metrics",
                             "allow-gpu-metrics",
                             "allow-cpu-metrics",
                             "metrics-interval-ms",
                             "threads",
                             "io-threads",
                             "inline-execution",
                             "inline-below-us",
                             "queue",
                             "max-connections",
                             "http-body-timeout-ms",
                             "http-body-min-rate",
                             "max-body-bytes",
                             "max-inflight-bytes",
                             "max-response-bytes",
                             "server-name",
                             "log-level",
                             "log-format",
                             "grpc-use-ssl",
                             "grpc-use-ssl-mutual",
                             "grpc-server-cert",
                             "grpc-server-key",
                             "grpc-root-cert",
                             "grpc-keepalive-permit-without-calls",
                             "reuse-grpc-port",
                             "trace-file",
                             "trace-rate",
                             "trace-count",
                             "trace-log-frequency",
                             "models",
                             "model-control-mode",
                             "allow-shared-memory",
                             "cache-config",
                             "device",
                             "exit-delay-secs",
                             "exit-timeout-secs",
                             "openai"}) {
    add(single, po::value<std::string>());
  }
  for (const auto& [name, argument] : keepalive_options) add(name, po::value<std::string>());
  for (const char* repeated : {"http-restricted-api", "grpc-restricted-protocol", "trace-level",
                               "load-model", "openai-api-key"}) {
    add(repeated, po::value<std::vector<std::string>>()->composing());
  }
  // Triton's form: three words per group.
  add("openai-restricted-api", po::value<std::vector<std::string>>()->multitoken()->composing());
  return known;
}

void read_servers(reader& in, options& o) {
  in.number("http-port", o.http.port, 0);
  in.number("grpc-port", o.grpc.port, 0);
  in.number("metrics-port", o.metrics.port, 0);
  // The most specific address wins; the metrics follow the HTTP server's, as in Triton.
  in.string("address", o.http.address);
  o.grpc.address = o.metrics.address = o.http.address;
  in.string("http-address", o.http.address);
  o.metrics.address = o.http.address;
  in.string("grpc-address", o.grpc.address);
  in.string("metrics-address", o.metrics.address);
  in.boolean("allow-http", o.allow_http);
  in.boolean("allow-grpc", o.allow_grpc);
  in.boolean("allow-metrics", o.allow_metrics);
  // Accepted for Triton's command lines, and checked, with nothing to set (see the usage).
  bool unused_switch = false;
  std::uint64_t unused_interval = 0;
  in.boolean("allow-gpu-metrics", unused_switch);
  in.boolean("allow-cpu-metrics", unused_switch);
  in.number("metrics-interval-ms", unused_interval, 0);
  in.number("threads", o.executor.threads, 0);
  in.number("io-threads", o.http.io_threads, 1);
  in.number("queue", o.executor.queue_capacity, 1);
  in.number("max-connections", o.http.max_connections, 1);
  std::uint64_t body_timeout_ms = static_cast<std::uint64_t>(o.http.body_timeout.count());
  in.number("http-body-timeout-ms", body_timeout_ms, 1, 86'400'000);
  o.http.body_timeout = std::chrono::milliseconds{body_timeout_ms};
  in.number("http-body-min-rate", o.http.body_min_bytes_per_second, 0);
  in.number("max-body-bytes", o.server.bounds.max_body_bytes, 1);
  in.number("max-inflight-bytes", o.server.bounds.max_inflight_bytes, 0);
  in.number("max-response-bytes", o.server.bounds.max_response_bytes, 0);
  std::uint64_t inline_below_us = static_cast<std::uint64_t>(o.server.inline_below.count());
  in.number("inline-below-us", inline_below_us, 0, 1'000'000);
  o.server.inline_below = std::chrono::microseconds{inline_below_us};
  in.string("server-name", o.server.name);
  in.boolean("allow-shared-memory", o.server.shared_memory);
  if (const std::string* given = in.text("cache-config")) {
    // Triton's form, for its one cache kept in the server's memory.
    constexpr std::string_view local = "local,size=";
    std::uint64_t bytes = 0;
    const std::string_view rest =
        std::string_view{*given}.substr(given->starts_with(local) ? local.size() : given->size());
    const auto [end, error] = std::from_chars(rest.data(), rest.data() + rest.size(), bytes);
    if (!given->starts_with(local) || rest.empty() || error != std::errc{} ||
        end != rest.data() + rest.size()) {
      in.fail(
          fmt::format("--cache-config takes local,size=BYTES (the cache in this server's "
                      "memory), not '{}'",
                      *given));
    } else {
      o.server.response_cache_bytes = static_cast<std::size_t>(bytes);
    }
  }
}

void read_grpc(reader& in, options& o) {
  in.boolean("grpc-use-ssl", o.grpc_tls.use_ssl);
  in.boolean("grpc-use-ssl-mutual", o.grpc_tls.mutual);
  in.string("grpc-server-cert", o.grpc_tls.certificate_chain);
  in.string("grpc-server-key", o.grpc_tls.private_key);
  in.string("grpc-root-cert", o.grpc_tls.root_certificates);
  in.boolean("reuse-grpc-port", o.grpc.reuse_port);
  for (const auto& [name, argument] : keepalive_options) {
    int value = 0;
    if (in.text(name) == nullptr) continue;
    in.number(name, value, 0);
    o.grpc_channel_arguments.emplace_back(argument, value);
  }
  if (in.text("grpc-keepalive-permit-without-calls") != nullptr) {
    bool permit = false;
    in.boolean("grpc-keepalive-permit-without-calls", permit);
    o.grpc_channel_arguments.emplace_back(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, int{permit});
  }
  for (const char* flag : {"http-restricted-api", "grpc-restricted-protocol"}) {
    const bool grpc = std::string_view{flag} == "grpc-restricted-protocol";
    for (const std::string& value : in.all(flag)) {
      oip::result<oip::api_restriction> restriction = oip::parse_api_restriction(value, flag);
      if (!restriction) {
        in.check(restriction.error());
        continue;
      }
      if (grpc) {
        restriction->header = "triton-grpc-protocol-" + restriction->header;  // Triton's prefix
        in.check(o.grpc.restricted_protocol.add(std::move(*restriction), "protocol"));
      } else {
        in.check(o.server.restricted_http_api.add(std::move(*restriction)));
      }
    }
  }
}

void read_openai(reader& in, options& o) {
  in.boolean("openai", o.openai);
  o.openai_access.api_keys = in.all("openai-api-key");
  if (std::find(o.openai_access.api_keys.begin(), o.openai_access.api_keys.end(), "") !=
      o.openai_access.api_keys.end()) {
    in.fail("--openai-api-key takes a key, not an empty string");
  }
  const std::vector<std::string> words = in.all("openai-restricted-api");
  if (words.size() % 3 != 0) {
    in.fail("--openai-restricted-api takes three values each time: CATEGORIES KEY VALUE");
    return;
  }
  for (std::size_t i = 0; i < words.size(); i += 3) {
    oip::result<oip::api_restriction> restriction = oip::parse_api_restriction(
        fmt::format("{}:{}={}", words[i], words[i + 1], words[i + 2]), "openai-restricted-api");
    if (!restriction) {
      in.check(restriction.error());
      continue;
    }
    for (const oip::api_category category : restriction->categories) {
      if (category != oip::api_category::inference &&
          category != oip::api_category::model_repository) {
        in.fail(fmt::format(
            "--openai-restricted-api takes the categories inference and model-repository, not "
            "'{}'",
            oip::to_string(category)));
      }
    }
    in.check(o.openai_access.restrictions.add(std::move(*restriction)));
  }
  if (!o.openai && (!o.openai_access.api_keys.empty() || !words.empty())) {
    in.fail("--openai-api-key and --openai-restricted-api need --openai true");
  }
}

void read_models(reader& in, options& o) {
  if (const std::string* list = in.text("models")) {
    std::stringstream names{*list};
    for (std::string name; std::getline(names, name, ',');) {
      if (!name.empty()) o.models.insert(name);
    }
  }
  if (const std::string* given = in.text("model-control-mode")) {
    const std::string mode = lowercase(*given);  // as Triton reads it
    if (mode == "none") {
      o.server.model_control = oip::model_control_mode::none;
    } else if (mode == "explicit") {
      o.server.model_control = oip::model_control_mode::explicit_loading;
    } else {
      in.fail(
          fmt::format("--model-control-mode takes none or explicit, not '{}' (oip-serve "
                      "has no model repository to poll)",
                      *given));
    }
  }
  for (const std::string& name : in.all("load-model")) {
    if (name == "*") {
      o.load_all = true;
    } else {
      o.load_models.insert(name);
    }
  }
  if ((o.load_all || !o.load_models.empty()) &&
      o.server.model_control != oip::model_control_mode::explicit_loading) {
    in.fail(
        "--load-model needs --model-control-mode explicit (in none mode every model of "
        "--models is loaded)");
  }
  in.string("device", o.device);
  in.number("exit-delay-secs", o.exit_delay_secs, 0, 86'400);
  in.number("exit-timeout-secs", o.exit_timeout_secs, 0, 86'400);
  in.boolean("inline-execution", o.inline_execution);
}

void read_logs_and_traces(reader& in, options& o) {
  if (const std::string* level = in.text("log-level")) {
    oip::result<oip::log_level> parsed = oip::parse_log_level(*level);
    if (parsed) o.log_level = *parsed;
    in.check(parsed.to_status());
  }
  if (const std::string* format = in.text("log-format")) {
    oip::result<oip::log_format> parsed = oip::parse_log_format(*format);
    if (parsed) o.log_format = *parsed;
    in.check(parsed.to_status());
  }
  in.string("trace-file", o.server.trace.file);
  // Read as a client's change would be, once the file is known: the same checks and messages.
  // --trace-level may be repeated, as in Triton: TIMESTAMPS and TENSORS together.
  if (std::vector<std::string> levels = in.all("trace-level"); !levels.empty()) {
    o.trace_flags.settings.emplace_back("trace_level", std::move(levels));
  }
  for (const auto& [flag, setting] :
       {std::pair{"trace-rate", "trace_rate"}, std::pair{"trace-count", "trace_count"},
        std::pair{"trace-log-frequency", "log_frequency"}}) {
    if (const std::string* value = in.text(flag)) {
      o.trace_flags.settings.emplace_back(setting, std::vector<std::string>{*value});
    }
  }
}

}  // namespace

oip::result<options> parse_command_line(int argc, const char* const* argv) {
  po::variables_map values;
  try {
    // Long options only, whole names only (no prefixes), and no short options, so that a value
    // such as --trace-count -1 is read as a value.
    const int style = po::command_line_style::allow_long |
                      po::command_line_style::long_allow_adjacent |
                      po::command_line_style::long_allow_next;
    const po::options_description known = known_options();  // `parsed` points into it
    const po::parsed_options parsed =
        po::command_line_parser(argc, argv).options(known).style(style).run();
    for (const po::option& given : parsed.options) {
      if (given.position_key != -1) {
        return usage_error(fmt::format("unexpected argument '{}': every option starts with --",
                                       given.value.empty() ? "" : given.value.front()));
      }
    }
    po::store(parsed, values);
  } catch (const po::error& e) {
    return usage_error(e.what());
  }
  options o;
  o.help = values["help"].as<bool>();
  o.dynamic_batching = !values["no-dynamic-batching"].as<bool>();
  reader in{values};
  read_servers(in, o);
  read_grpc(in, o);
  read_models(in, o);
  read_logs_and_traces(in, o);
  read_openai(in, o);
  if (!in.error().ok()) return in.error();
  return o;
}

}  // namespace oip_serve
