// oip-serve: the reference server. Serves the reference models over HTTP and gRPC (one service
// under both, so a sequence may go on over either) until SIGINT or SIGTERM, then finishes the
// requests in flight and exits.

#include "device_models.hpp"
#include "reference_models.hpp"

#include <oip/access.hpp>
#include <oip/grpc/server.hpp>
#include <oip/http/server.hpp>
#include <oip/log.hpp>
#include <oip/trace.hpp>
#include <oip/version.hpp>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/server_credentials.h>

#include <semaphore.h>

namespace {

sem_t stop_requested;  // posted by the SIGINT and SIGTERM handler
volatile std::sig_atomic_t stop_signal = 0;

constexpr std::string_view usage = R"(Usage: oip-serve [options]

Serves oip's reference models (Triton's example models: simple, simple_int8, simple_<type> for
the other numeric types, simple_string, simple_identity, identity_<type>, classifier,
simple_sequence, simple_dyna_sequence, simple_string_dyna_sequence, sequence_accumulator) over
the Open Inference Protocol, on HTTP and gRPC.

  --http-port N          HTTP port (default 8000; 0 picks a free one)
  --grpc-port N          gRPC port (default 8001; 0 picks a free one)
  --metrics-port N       Prometheus metrics port, GET /metrics (default 8002; 0 picks a free one)
  --address A            address to listen on (default 0.0.0.0); --http-address,
                         --grpc-address and --metrics-address set one server's (the metrics
                         follow --http-address unless given their own, as in Triton)
  --allow-http B, --allow-grpc B, --allow-metrics B
                         run that server (true or false, default true), as Triton's options
  --allow-gpu-metrics B, --allow-cpu-metrics B, --metrics-interval-ms N
                         accepted for Triton's command lines, with no effect: oip-serve has no
                         GPU or CPU utilisation metrics, and reads every figure at each scrape
  --threads N            model worker threads (default: hardware threads)
  --io-threads N         HTTP I/O threads (default 2)
  --inline-execution B   run simple*, identity_*, simple_string and simple_identity, when on
                         the CPU, on the thread that received the request, not a worker (true
                         or false, default false): no worker to wake, lower latency for these
                         microsecond models (oip::model_config::inline_execution)
  --queue N              requests waiting for a worker before 503 (default 1024)
  --max-connections N    open HTTP connections; one more is answered 503 (default 1024)
  --max-body-bytes N     largest HTTP body or gRPC message (default 268435456)
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
  --grpc-use-ssl B       gRPC over TLS (true or false, default false), with
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
  --models A,B,...       models to load (default: all)
  --no-dynamic-batching  run the classifier's requests one by one (for comparisons)
  --allow-shared-memory  offer Triton's system shared-memory extension (off by default: a client
                         could then map any shared-memory object this process can open, so
                         allow it only where every client is trusted)
  --device D             auto, cpu, cuda or cuda:N (default auto: a usable CUDA device, else
                         the CPU); simple*, identity_*, sequence_accumulator and classifier run
                         on a CUDA device, the others on the CPU
  --help                 this text

Each option may also be written --name=VALUE, as Triton's are.
)";

struct options {
  oip::http::server_options http;
  oip::grpc::server_options grpc;
  oip::http::server_options metrics{.port = 8002, .io_threads = 1};
  bool allow_http = true;
  bool allow_grpc = true;
  bool allow_metrics = true;
  bool metrics_address_given = false;  // else the metrics follow --http-address
  oip::executor_options executor;
  oip::server_options server;
  std::set<std::string> models;
  bool dynamic_batching = true;
  bool inline_execution = false;
  std::string device = "auto";
  oip::trace_settings_change trace_flags;  // --trace-level, --trace-rate, ...
  struct {
    bool use_ssl = false;
    bool mutual = false;
    std::string certificate_chain;  // files
    std::string private_key;
    std::string root_certificates;
  } grpc_tls;
  std::vector<std::pair<std::string, int>> grpc_channel_arguments;  // keepalive
};

// Triton's gRPC keepalive options and the channel arguments they set.
constexpr std::pair<std::string_view, const char*> keepalive_options[] = {
    {"--grpc-keepalive-time", GRPC_ARG_KEEPALIVE_TIME_MS},
    {"--grpc-keepalive-timeout", GRPC_ARG_KEEPALIVE_TIMEOUT_MS},
    {"--grpc-keepalive-permit-without-calls", GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS},
    {"--grpc-http2-max-pings-without-data", GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA},
    {"--grpc-http2-min-recv-ping-interval-without-data",
     GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS},
    {"--grpc-http2-max-ping-strikes", GRPC_ARG_HTTP2_MAX_PING_STRIKES},
};

std::optional<bool> parse_bool(std::string_view text) {
  if (text == "true" || text == "1") return true;
  if (text == "false" || text == "0") return false;
  return std::nullopt;
}

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// --inline-execution: a model as it is, run on the thread that received its request.
class run_inline final : public oip::model {
 public:
  explicit run_inline(std::shared_ptr<oip::model> wrapped)
      : model_{std::move(wrapped)}, config_{model_->config()} {
    config_.inline_execution = true;
  }
  [[nodiscard]] const oip::model_config& config() const noexcept override { return config_; }
  [[nodiscard]] bool ready() const noexcept override { return model_->ready(); }
  void execute(oip::inference_call call) override { model_->execute(std::move(call)); }

 private:
  std::shared_ptr<oip::model> model_;
  oip::model_config config_;
};

// The reference models on `device`; with `inline_execution`, the microsecond ones run inline:
// those on the CPU that are neither stateful nor batched (the others would go to the executor
// anyway), but not the classifier (a 2048x1000 dense layer, hundreds of microseconds).
oip_serve::placement place_reference_models(bool dynamic_batching, const std::string& device,
                                            bool inline_execution, bool& failed) {
  oip_serve::placement placed =
      oip_serve::place_models(oip_serve::reference_models(dynamic_batching), device, failed);
  if (!inline_execution) return placed;
  for (std::shared_ptr<oip::model>& m : placed.models) {
    const oip::model_config& c = m->config();
    if (c.gpus.empty() && !c.sequence_batching && !(c.dynamic_batching && c.max_batch_size > 0) &&
        c.name != "classifier") {
      m = std::make_shared<run_inline>(std::move(m));
    }
  }
  return placed;
}

// The repository extension's load route: a fresh instance of a reference model, placed as the
// server's models were (so an unloaded model can be loaded again).
class reference_loader final : public oip::model_loader {
 public:
  reference_loader(bool dynamic_batching, std::string device, bool inline_execution)
      : dynamic_batching_{dynamic_batching},
        device_{std::move(device)},
        inline_execution_{inline_execution} {}

  [[nodiscard]] std::vector<std::string> available() const override {
    std::vector<std::string> names;
    for (const auto& m : oip_serve::reference_models(dynamic_batching_)) {
      names.push_back(m->config().name);
    }
    return names;
  }

  [[nodiscard]] oip::result<std::shared_ptr<oip::model>> load(std::string_view name) override {
    bool failed = false;
    oip_serve::placement placed =
        place_reference_models(dynamic_batching_, device_, inline_execution_, failed);
    if (failed) return oip::status{oip::errc::unavailable, placed.where};
    for (std::shared_ptr<oip::model>& m : placed.models) {
      if (m->config().name == name) return std::move(m);
    }
    return oip::status{oip::errc::not_found,
                       "oip-serve has no reference model '" + std::string{name} + "'"};
  }

 private:
  bool dynamic_batching_;
  std::string device_;
  bool inline_execution_;
};

bool parse_number(const char* text, std::size_t& out) {
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (end == text || *end != '\0') return false;
  out = static_cast<std::size_t>(value);
  return true;
}

// 0 on success, else the exit code (2 for a usage error, 0 after --help).
int parse(int argc, char** argv, options& o, bool& help) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view argument = argv[i];
    // --name=VALUE, as Triton's options are written, or --name VALUE.
    const std::size_t equals = argument.find('=');
    const std::string_view flag = argument.substr(0, equals);
    if (flag == "--help" || flag == "-h") {
      help = true;
      return 0;
    }
    if (flag == "--no-dynamic-batching") {
      o.dynamic_batching = false;
      continue;
    }
    if (flag == "--allow-shared-memory") {
      o.server.shared_memory = true;
      continue;
    }
    if (equals == std::string_view::npos && i + 1 >= argc) {
      std::cerr << "oip-serve: " << flag << " needs a value (see --help)\n";
      return 2;
    }
    const char* value = equals != std::string_view::npos ? argv[i] + equals + 1 : argv[++i];
    std::size_t n = 0;
    const bool numeric = parse_number(value, n);
    const std::optional<bool> boolean = parse_bool(value);
    const auto keepalive = std::find_if(std::begin(keepalive_options), std::end(keepalive_options),
                                        [&](const auto& option) { return option.first == flag; });
    if (flag == "--http-port" && numeric && n < 65536) {
      o.http.port = static_cast<std::uint16_t>(n);
    } else if (flag == "--grpc-port" && numeric && n < 65536) {
      o.grpc.port = static_cast<std::uint16_t>(n);
    } else if (flag == "--metrics-port" && numeric && n < 65536) {
      o.metrics.port = static_cast<std::uint16_t>(n);
    } else if (flag == "--address") {
      o.http.address = value;
      o.grpc.address = value;
      o.metrics.address = value;
    } else if (flag == "--http-address") {
      o.http.address = value;
      if (!o.metrics_address_given) o.metrics.address = value;  // as Triton's metrics do
    } else if (flag == "--grpc-address") {
      o.grpc.address = value;
    } else if (flag == "--metrics-address") {
      o.metrics.address = value;
      o.metrics_address_given = true;
    } else if (flag == "--allow-http" && boolean) {
      o.allow_http = *boolean;
    } else if (flag == "--allow-grpc" && boolean) {
      o.allow_grpc = *boolean;
    } else if (flag == "--allow-metrics" && boolean) {
      o.allow_metrics = *boolean;
    } else if ((flag == "--allow-gpu-metrics" || flag == "--allow-cpu-metrics") && boolean) {
      // Nothing to turn on or off: see the usage text.
    } else if (flag == "--metrics-interval-ms" && numeric) {
      // Nothing polls: every figure is read at each scrape.
    } else if (flag == "--inline-execution" && boolean) {
      o.inline_execution = *boolean;
    } else if (flag == "--threads" && numeric) {
      o.executor.threads = n;
    } else if (flag == "--io-threads" && numeric && n > 0) {
      o.http.io_threads = n;
    } else if (flag == "--max-connections" && numeric && n > 0) {
      o.http.max_connections = n;
    } else if (flag == "--queue" && numeric && n > 0) {
      o.executor.queue_capacity = n;
    } else if (flag == "--max-body-bytes" && numeric && n > 0) {
      o.server.bounds.max_body_bytes = n;
    } else if (flag == "--log-level") {
      const oip::result<oip::log_level> level = oip::parse_log_level(value);
      if (!level) {
        std::cerr << "oip-serve: " << level.error().message() << "\n";
        return 2;
      }
      oip::set_log_level(*level);
    } else if (flag == "--log-format") {
      const oip::result<oip::log_format> format = oip::parse_log_format(value);
      if (!format) {
        std::cerr << "oip-serve: " << format.error().message() << "\n";
        return 2;
      }
      oip::log_settings settings = oip::current_log_settings();
      settings.format = *format;
      oip::set_log_settings(settings);
    } else if (flag == "--device") {
      o.device = value;
    } else if (flag == "--http-restricted-api" || flag == "--grpc-restricted-protocol") {
      const bool grpc = flag == "--grpc-restricted-protocol";
      oip::result<oip::api_restriction> restriction =
          oip::parse_api_restriction(value, flag.substr(2));
      oip::status added = restriction.to_status();
      if (added.ok() && grpc) {
        restriction->header = "triton-grpc-protocol-" + restriction->header;  // Triton's prefix
        added = o.grpc.restricted_protocol.add(std::move(*restriction), "protocol");
      } else if (added.ok()) {
        added = o.server.restricted_http_api.add(std::move(*restriction));
      }
      if (!added.ok()) {
        std::cerr << "oip-serve: " << added.message() << "\n";
        return 2;
      }
    } else if (flag == "--trace-file") {
      o.server.trace.file = value;
    } else if (flag == "--trace-level" || flag == "--trace-rate" || flag == "--trace-count" ||
               flag == "--trace-log-frequency") {
      // Read as a client's change would be, once the file is known (see trace_settings_from).
      std::string name{flag == "--trace-log-frequency" ? "log_frequency" : flag.substr(2)};
      std::replace(name.begin(), name.end(), '-', '_');
      auto& settings = o.trace_flags.settings;
      // --trace-level may be repeated, as in Triton: TIMESTAMPS and TENSORS together.
      const auto levels = std::find_if(settings.begin(), settings.end(), [](const auto& setting) {
        return setting.first == "trace_level";
      });
      if (name == "trace_level" && levels != settings.end()) {
        levels->second->push_back(value);
      } else {
        settings.emplace_back(std::move(name), std::vector<std::string>{value});
      }
    } else if (flag == "--grpc-use-ssl" && boolean) {
      o.grpc_tls.use_ssl = *boolean;
    } else if (flag == "--grpc-use-ssl-mutual" && boolean) {
      o.grpc_tls.mutual = *boolean;
    } else if (flag == "--grpc-server-cert") {
      o.grpc_tls.certificate_chain = value;
    } else if (flag == "--grpc-server-key") {
      o.grpc_tls.private_key = value;
    } else if (flag == "--grpc-root-cert") {
      o.grpc_tls.root_certificates = value;
    } else if (flag == "--reuse-grpc-port" && boolean) {
      o.grpc.reuse_port = *boolean;
    } else if (keepalive != std::end(keepalive_options) && (numeric || boolean) &&
               n <= static_cast<std::size_t>(std::numeric_limits<int>::max())) {
      o.grpc_channel_arguments.emplace_back(keepalive->second,
                                            numeric ? static_cast<int>(n) : int{*boolean});
    } else if (flag == "--server-name") {
      o.server.name = value;
    } else if (flag == "--models") {
      std::stringstream list{value};
      for (std::string name; std::getline(list, name, ',');) {
        if (!name.empty()) o.models.insert(name);
      }
    } else {
      std::cerr << "oip-serve: bad option " << flag << " " << value << " (see --help)\n";
      return 2;
    }
  }
  return 0;
}

// The host's trace settings: the file, then the other --trace-* flags read as Triton's trace
// setting values (the same checks and messages as a client's change).
oip::result<oip::trace_settings> trace_settings_from(const options& o) {
  if (const std::string& file = o.server.trace.file; !file.empty()) {
    std::FILE* probe = std::fopen(file.c_str(), "a");  // the first trace truncates it
    if (probe == nullptr) {
      return oip::status{oip::errc::invalid_argument,
                         "--trace-file " + file + ": " + std::strerror(errno)};
    }
    std::fclose(probe);
  }
  oip::tracer reader{o.server.trace};
  return reader.update(std::nullopt, o.trace_flags);
}

// gRPC's TLS credentials (from the certificate files) and keepalive arguments, as Triton's
// options set them.
oip::status grpc_security(options& o) {
  const auto& tls = o.grpc_tls;
  if (tls.use_ssl) {
    const std::optional<std::string> chain = read_file(tls.certificate_chain);
    const std::optional<std::string> key = read_file(tls.private_key);
    if (!chain || !key) {
      return oip::status{oip::errc::invalid_argument,
                         "--grpc-use-ssl needs --grpc-server-cert and --grpc-server-key files "
                         "that can be read"};
    }
    std::optional<std::string> roots;
    if (!tls.root_certificates.empty() || tls.mutual) {
      roots = read_file(tls.root_certificates);
      if (!roots) {
        return oip::status{oip::errc::invalid_argument,
                           "--grpc-root-cert " + tls.root_certificates + " cannot be read"};
      }
    }
    grpc::SslServerCredentialsOptions ssl{
        tls.mutual ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                   : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE};
    ssl.pem_root_certs = roots.value_or("");
    ssl.pem_key_cert_pairs.push_back({*key, *chain});
    o.grpc.credentials = grpc::SslServerCredentials(ssl);
  } else if (tls.mutual) {
    return oip::status{oip::errc::invalid_argument,
                       "--grpc-use-ssl-mutual needs --grpc-use-ssl true"};
  }
  if (!o.grpc_channel_arguments.empty()) {
    o.grpc.configure = [arguments = o.grpc_channel_arguments](grpc::ServerBuilder& builder) {
      for (const auto& [name, value] : arguments) builder.AddChannelArgument(name, value);
    };
  }
  return oip::status{};
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  bool help = false;
  if (const int code = parse(argc, argv, o, help); code != 0) return code;
  if (help) {
    std::cout << usage;
    return 0;
  }
  if (const oip::result<oip::trace_settings> trace = trace_settings_from(o); trace) {
    o.server.trace = *trace;
  } else {
    std::cerr << "oip-serve: " << trace.error().message() << "\n";
    return 2;
  }

  // SIGINT and SIGTERM stop the servers gracefully whichever thread they hit: threads started
  // before main (OpenBLAS's pool) do not block them, so blocking them here and waiting for them
  // with sigwait would let one of those threads take the signal and die of it.
  struct sigaction stop_action {};
  stop_action.sa_handler = [](int signal_number) {
    const int saved_errno = errno;
    stop_signal = signal_number;
    sem_post(&stop_requested);
    errno = saved_errno;
  };
  stop_action.sa_flags = SA_RESTART;
  sigemptyset(&stop_action.sa_mask);
  sem_init(&stop_requested, 0, 0);
  sigaction(SIGINT, &stop_action, nullptr);
  sigaction(SIGTERM, &stop_action, nullptr);

  oip::model_repository repository;
  std::string loaded;
  bool failed = false;
  oip_serve::placement placed =
      place_reference_models(o.dynamic_batching, o.device, o.inline_execution, failed);
  if (failed) {
    std::cerr << "oip-serve: --device " << o.device << ": " << placed.where << "\n";
    return 2;
  }
  std::cout << "oip-serve: models run on " << placed.where << std::endl;
  std::set<std::string> not_found = o.models;
  for (std::shared_ptr<oip::model>& m : placed.models) {
    const std::string name = m->config().name;
    if (!o.models.empty() && !o.models.contains(name)) continue;
    if (oip::status s = repository.add(std::move(m)); !s.ok()) {
      std::cerr << "oip-serve: " << s.message() << "\n";
      return 1;
    }
    not_found.erase(name);
    loaded += (loaded.empty() ? "" : ",") + name;
  }
  if (!not_found.empty()) {
    std::cerr << "oip-serve: unknown model '" << *not_found.begin() << "'\n";
    return 2;
  }

  repository.set_loader(
      std::make_shared<reference_loader>(o.dynamic_batching, o.device, o.inline_execution));

  oip::executor workers{o.executor};
  oip::inference_service service{repository, workers, o.server};
  if (o.allow_grpc) {
    if (const oip::status tls = grpc_security(o); !tls.ok()) {
      std::cerr << "oip-serve: " << tls.message() << "\n";
      return 2;
    }
  }
  oip::http_handler handler{service};
  oip::http::server http{handler, o.http};
  oip::grpc::server grpc{service, o.grpc};
  oip::http_handler metrics_handler{
      service, {.protocol = false, .metrics = true, .gauges = std::move(placed.gauges)}};
  oip::http::server metrics{metrics_handler, o.metrics};
  // Each server that runs: where it listens ("HTTP on 0.0.0.0:8000"), or "HTTP off".
  std::string listening;
  const auto start = [&](std::string_view what, bool allowed, const std::string& address,
                         auto& server) {
    if (!listening.empty()) listening += ", ";
    if (!allowed) {
      listening += std::string{what} + " off";
      return true;
    }
    const oip::result<std::uint16_t> port = server.start();
    if (!port) {
      std::cerr << "oip-serve: " << port.error().message() << "\n";
      return false;
    }
    listening += fmt::format("{} on {}:{}", what, address, *port);
    return true;
  };
  if (!start("HTTP", o.allow_http, o.http.address, http) ||
      !start("gRPC", o.allow_grpc, o.grpc.address, grpc) ||
      !start("metrics", o.allow_metrics, o.metrics.address, metrics)) {
    return 1;
  }
  std::cout << "oip-serve " << oip::version_string << ": " << listening << ", " << workers.threads()
            << " workers, models " << loaded << std::endl;

  while (sem_wait(&stop_requested) != 0 && errno == EINTR) {
  }
  std::cout << "oip-serve: signal " << stop_signal << ", finishing requests in flight" << std::endl;
  grpc.stop();
  http.stop();
  metrics.stop();
  return 0;
}
