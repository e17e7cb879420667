// oip-serve: the reference server. Serves the reference models over HTTP and gRPC (one service
// under both, so a sequence may go on over either) until SIGINT or SIGTERM, then reports not ready
// for --exit-delay-secs, finishes the requests in flight within --exit-timeout-secs and exits.

#include "command_line.hpp"
#include "device_models.hpp"
#include "reference_models.hpp"

#include <oip/access.hpp>
#include <oip/grpc/server.hpp>
#include <oip/http/server.hpp>
#include <oip/log.hpp>
#include <oip/trace.hpp>
#include <oip/version.hpp>

#include <algorithm>
#include <any>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
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
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

namespace {

using oip_serve::options;

sem_t stop_requested;  // posted by the SIGINT and SIGTERM handler
volatile std::sig_atomic_t stop_signal = 0;

// Waits until `limit` has passed or another SIGINT or SIGTERM comes, whichever is first. On the
// monotonic clock: a container's clock may be stepped at start-up.
void wait_for_signal(std::chrono::seconds limit) {
  timespec deadline{};
  clock_gettime(CLOCK_MONOTONIC, &deadline);
  deadline.tv_sec += static_cast<time_t>(limit.count());
  while (sem_clockwait(&stop_requested, CLOCK_MONOTONIC, &deadline) != 0 && errno == EINTR) {
  }
}

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// A model as it is, with the settings of the command line in its configuration
// (--inline-execution, --cache-config).
class reconfigured final : public oip::model {
 public:
  reconfigured(std::shared_ptr<oip::model> wrapped, oip::model_config config)
      : model_{std::move(wrapped)}, config_{std::move(config)} {}
  [[nodiscard]] const oip::model_config& config() const noexcept override { return config_; }
  [[nodiscard]] bool ready() const noexcept override { return model_->ready(); }
  void execute(oip::inference_call call) override { model_->execute(std::move(call)); }
  void release_sequence(const oip::sequence_id& id, std::any& state,
                        oip::sequence_release reason) override {
    model_->release_sequence(id, state, reason);
  }

 private:
  std::shared_ptr<oip::model> model_;
  oip::model_config config_;
};

// A model as the command line sets it.
// - With `inline_execution`, a microsecond model runs on the thread that received its request:
//   one on the CPU that is neither stateful nor batched (the others would go to the executor
//   anyway), but not the classifier (a 2048x1000 dense layer, hundreds of microseconds).
// - With a response cache, every model whose responses depend on its request alone (not the
//   sequence and decoupled ones) uses it.
std::shared_ptr<oip::model> as_configured(std::shared_ptr<oip::model> m, const options& o) {
  const oip::model_config& c = m->config();
  oip::model_config config = c;
  config.inline_execution =
      c.inline_execution ||
      (o.inline_execution && c.gpus.empty() && !c.sequence_batching &&
       !(c.dynamic_batching && c.max_batch_size > 0) && c.name != "classifier");
  config.response_cache = c.response_cache || (o.server.response_cache_bytes > 0 &&
                                               !c.sequence_batching && !c.decoupled);
  if (config.inline_execution == c.inline_execution && config.response_cache == c.response_cache) {
    return m;
  }
  return std::make_shared<reconfigured>(std::move(m), std::move(config));
}

// The reference models of `names`, placed on `device`.
oip_serve::placement place_reference_models(const std::set<std::string>& names, const options& o,
                                            bool& failed) {
  std::vector<std::shared_ptr<oip::model>> chosen;
  for (const std::string& name : names) {
    if (std::shared_ptr<oip::model> m = oip_serve::reference_model(name, o.dynamic_batching)) {
      chosen.push_back(std::move(m));
    }
  }
  oip_serve::placement placed = oip_serve::place_models(std::move(chosen), o.device, failed);
  for (std::shared_ptr<oip::model>& m : placed.models) {
    m = as_configured(std::move(m), o);
  }
  return placed;
}

// The repository extension's load route (--model-control-mode explicit): a fresh instance of one
// reference model of --models, placed as the server's models are. It lists the names without
// building a model, and builds only the one a load names.
class reference_loader final : public oip::model_loader {
 public:
  reference_loader(const options& o, const std::set<std::string>& names)
      : options_{o}, names_{names.begin(), names.end()} {}

  [[nodiscard]] std::vector<std::string> available() const override { return names_; }

  [[nodiscard]] oip::result<std::shared_ptr<oip::model>> load(std::string_view name) override {
    bool failed = false;
    oip_serve::placement placed =
        place_reference_models(std::set<std::string>{std::string{name}}, options_, failed);
    if (failed) return oip::status{oip::errc::unavailable, placed.where};
    if (placed.models.empty()) {
      return oip::status{oip::errc::not_found,
                         "oip-serve has no reference model '" + std::string{name} + "'"};
    }
    return std::move(placed.models.front());
  }

 private:
  options options_;
  std::vector<std::string> names_;
};

// The host's trace settings: the file, then the other --trace-* flags read as Triton's trace
// setting values (the same checks and messages as a client's change).
oip::result<oip::trace_settings> trace_settings_from(const options& o) {
  if (const std::string& file = o.server.trace.file; !file.empty()) {
    // The server creates the file at the first trace and never writes over one that exists:
    // said now, not as traces dropped later.
    struct stat existing {};
    if (::lstat(file.c_str(), &existing) == 0) {
      return oip::status{oip::errc::invalid_argument,
                         "--trace-file " + file +
                             ": the file exists, and oip-serve writes only files it creates "
                             "(remove it, or name another)"};
    }
    const std::filesystem::path parent = std::filesystem::path{file}.parent_path();
    const std::string directory = parent.empty() ? std::string{"."} : parent.string();
    if (::access(directory.c_str(), W_OK | X_OK) != 0) {
      return oip::status{oip::errc::invalid_argument, "--trace-file " + file +
                                                          ": cannot create files in " + directory +
                                                          ": " + std::strerror(errno)};
    }
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

// The OpenAI front end over the text reference models that the repository holds: text_stream
// streams (the names of the generate extension), text_upper answers once (its own names, and
// max_tokens as an input), text_embed makes embeddings.
oip::openai_options openai_front_end(const std::set<std::string>& held,
                                     oip::openai_options access) {
  using kind = oip::openai_model::kind;
  if (held.contains("text_stream")) {
    access.models.push_back({.id = "text_stream", .model = "text_stream"});
  }
  if (held.contains("text_upper")) {
    oip::openai_model upper{.id = "text_upper", .model = "text_upper"};
    upper.prompt_input = "prompt";
    upper.text_output = "completion";
    upper.field_inputs = {{"max_tokens", "max_tokens", std::int64_t{16}}};
    access.models.push_back(std::move(upper));
  }
  if (held.contains("text_embed")) {
    oip::openai_model embed{.id = "text_embed", .model = "text_embed"};
    embed.serves = kind::embedding;
    embed.prompt_input = "text";
    access.models.push_back(std::move(embed));
  }
  return access;
}

}  // namespace

int main(int argc, char** argv) {
  oip::result<options> parsed = oip_serve::parse_command_line(argc, argv);
  if (!parsed) {
    std::cerr << "oip-serve: " << parsed.error().message() << " (see --help)\n";
    return 2;
  }
  options& o = *parsed;
  if (o.help) {
    std::cout << oip_serve::usage;
    return 0;
  }
  if (o.log_level) oip::set_log_level(*o.log_level);
  if (o.log_format) {
    oip::log_settings settings = oip::current_log_settings();
    settings.format = *o.log_format;
    oip::set_log_settings(settings);
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

  // Every name given must be a reference model's.
  const std::vector<std::string> known = oip_serve::reference_model_names();
  for (const std::set<std::string>* names : {&o.models, &o.load_models}) {
    for (const std::string& name : *names) {
      if (std::find(known.begin(), known.end(), name) == known.end()) {
        std::cerr << "oip-serve: unknown model '" << name << "'\n";
        return 2;
      }
      if (!o.models.empty() && !o.models.contains(name)) {
        std::cerr << "oip-serve: --load-model " << name << " is not among --models\n";
        return 2;
      }
    }
  }
  // The repository holds the models of --models (every one by default). In none mode they are
  // loaded at start-up; in explicit mode those of --load-model are.
  const std::set<std::string> held =
      o.models.empty() ? std::set<std::string>{known.begin(), known.end()} : o.models;
  const bool explicit_mode = o.server.model_control == oip::model_control_mode::explicit_loading;
  const std::set<std::string>& starting = explicit_mode && !o.load_all ? o.load_models : held;
  oip::model_repository repository;
  std::string loaded;
  bool failed = false;
  oip_serve::placement placed = place_reference_models(starting, o, failed);
  if (failed) {
    std::cerr << "oip-serve: --device " << o.device << ": " << placed.where << "\n";
    return 2;
  }
  std::cout << "oip-serve: models run on " << placed.where << std::endl;
  for (std::shared_ptr<oip::model>& m : placed.models) {
    const std::string name = m->config().name;
    if (oip::status s = repository.add(std::move(m)); !s.ok()) {
      std::cerr << "oip-serve: " << s.message() << "\n";
      return 1;
    }
    loaded += (loaded.empty() ? "" : ",") + name;
  }
  if (explicit_mode) repository.set_loader(std::make_shared<reference_loader>(o, held));

  oip::executor workers{o.executor};
  oip::server_options server_options = o.server;
  // CUDA regions as well as system ones, where the models run on a GPU.
  if (server_options.shared_memory) server_options.device_memory = placed.device_memory;
  oip::inference_service service{repository, workers, std::move(server_options)};
  if (o.allow_grpc) {
    if (const oip::status tls = grpc_security(o); !tls.ok()) {
      std::cerr << "oip-serve: " << tls.message() << "\n";
      return 2;
    }
  }
  oip::http_routes routes;
  if (o.openai) routes.openai = openai_front_end(held, o.openai_access);
  oip::http_handler handler{service, std::move(routes)};
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
  service.begin_shutdown();
  if (o.exit_delay_secs > 0) {
    std::cout << "oip-serve: signal " << stop_signal << ", not ready; stopping in "
              << o.exit_delay_secs << " s" << std::endl;
    wait_for_signal(std::chrono::seconds{o.exit_delay_secs});
  }
  std::cout << "oip-serve: signal " << stop_signal << ", finishing requests in flight (at most "
            << o.exit_timeout_secs << " s)" << std::endl;
  // Both protocol servers stop accepting at once and drain side by side, so the timeout bounds
  // the whole drain; the metrics go on answering until they are done.
  const std::chrono::seconds grace{o.exit_timeout_secs};
  std::thread grpc_drain{[&grpc, grace] { grpc.stop(grace); }};
  http.stop(grace);
  grpc_drain.join();
  metrics.stop(std::chrono::seconds{1});
  std::cout << "oip-serve: stopped" << std::endl;
  return 0;
}
