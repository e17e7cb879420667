#pragma once
// oip-serve's command line: Triton's option names and forms (`--name=VALUE` and `--name VALUE`,
// booleans as true, false, 1 or 0), read with Boost.Program_options. A wrong value is an error
// that names the option, never a silent default.

#include <oip/grpc/server.hpp>
#include <oip/http/server.hpp>
#include <oip/inference_service.hpp>
#include <oip/log.hpp>
#include <oip/openai.hpp>
#include <oip/status.hpp>
#include <oip/trace.hpp>

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace oip_serve {

extern const std::string_view usage;

struct options {
  bool help = false;
  oip::http::server_options http;
  oip::grpc::server_options grpc;
  oip::http::server_options metrics{.port = 8002, .io_threads = 1};
  bool allow_http = true;
  bool allow_grpc = true;
  bool allow_metrics = true;
  oip::executor_options executor;
  oip::server_options server;
  std::set<std::string> models;       ///< --models: what the repository may hold (empty: all)
  std::set<std::string> load_models;  ///< --load-model: what explicit mode loads at start-up
  bool load_all = false;              ///< --load-model '*'
  bool dynamic_batching = true;
  bool inline_execution = false;
  std::string device = "auto";
  std::optional<oip::log_level> log_level;
  std::optional<oip::log_format> log_format;
  oip::trace_settings_change trace_flags;  // --trace-level, --trace-rate, ...
  struct {
    bool use_ssl = false;
    bool mutual = false;
    std::string certificate_chain;  // files
    std::string private_key;
    std::string root_certificates;
  } grpc_tls;
  std::vector<std::pair<std::string, int>> grpc_channel_arguments;  // keepalive
  /// --exit-delay-secs: after SIGTERM or SIGINT, how long readiness reports 503 while every
  /// route still answers, before the servers stop accepting (endpoints are removed meanwhile).
  unsigned exit_delay_secs = 0;
  /// --exit-timeout-secs: then how long requests in flight may take before they are cancelled.
  unsigned exit_timeout_secs = 30;
  bool openai = false;                ///< --openai: the OpenAI-compatible front end under /v1
  oip::openai_options openai_access;  ///< its API keys and restricted APIs (no models)
};

/// The options of `argv`; a usage error's message names the option and what was wrong.
[[nodiscard]] oip::result<options> parse_command_line(int argc, const char* const* argv);

}  // namespace oip_serve
