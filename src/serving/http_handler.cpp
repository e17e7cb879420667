#include "core/detail/json_string.hpp"
#include "serving/detail/ascii.hpp"
#include "serving/detail/compression.hpp"
#include "serving/detail/openai_front_end.hpp"
#include "serving/detail/server_sent_events.hpp"

#include <oip/binary.hpp>
#include <oip/generate.hpp>
#include <oip/http_handler.hpp>
#include <oip/json.hpp>
#include <oip/log.hpp>
#include <oip/memory_budget.hpp>
#include <oip/shared_memory.hpp>
#include <oip/version.hpp>

#include <algorithm>
#include <charconv>
#include <condition_variable>
#include <mutex>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace oip {

std::optional<std::string_view> find_header(const std::vector<http_header>& headers,
                                            std::string_view name) noexcept {
  for (const http_header& h : headers) {
    if (detail::equals_ignoring_case(h.name, name)) return std::string_view{h.value};
  }
  return std::nullopt;
}

namespace {

http_response json_reply(int status_code, std::string json) {
  http_response r;
  r.status = status_code;
  r.headers.push_back({"Content-Type", std::string{json_content_type}});
  r.head = std::move(json);
  return r;
}

http_response error_reply(const status& s) { return json_reply(s.http_status(), s.to_json()); }

// --- targets -------------------------------------------------------------------------------------

// Whether the target's path is not "/" followed by segments that are each named: one that does
// not begin with a slash, or has two together, or ends with one.
bool has_empty_segment(std::string_view target) {
  const std::string_view path = target.substr(0, target.find('?'));
  if (path.empty() || path.front() != '/') return true;
  if (path.size() > 1 && path.back() == '/') return true;
  return path.find("//") != std::string_view::npos;
}

// The path's segments, percent-decoded; the query is ignored.
result<std::vector<std::string>> split_path(std::string_view target) {
  target = target.substr(0, target.find('?'));
  std::vector<std::string> segments;
  // One allocation for the vector, where growing it one segment at a time made three for a
  // route such as /v2/models/m/infer. No route has more than eight segments: a target of many
  // slashes reserves no more than that.
  const auto slashes = static_cast<std::size_t>(std::count(target.begin(), target.end(), '/'));
  segments.reserve(std::min<std::size_t>(slashes + 1, 8));
  while (!target.empty()) {
    if (target.front() == '/') {
      target.remove_prefix(1);
      continue;
    }
    const std::size_t end = std::min(target.find('/'), target.size());
    const std::string_view raw = target.substr(0, end);
    target.remove_prefix(end);
    if (raw.find('%') == std::string_view::npos) {
      segments.emplace_back(raw);
      continue;
    }
    std::string segment;
    for (std::size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] != '%') {
        segment += raw[i];
        continue;
      }
      unsigned value = 0;
      if (i + 2 >= raw.size() ||
          std::from_chars(raw.data() + i + 1, raw.data() + i + 3, value, 16).ptr !=
              raw.data() + i + 3) {
        return status{errc::invalid_argument,
                      fmt::format("malformed percent-encoding in the request path at '{}'",
                                  raw.substr(i, 3))};
      }
      segment += static_cast<char>(value);
      i += 2;
    }
    segments.push_back(std::move(segment));
  }
  return segments;
}

}  // namespace

struct http_handler::state : std::enable_shared_from_this<http_handler::state> {
  std::unique_ptr<inference_service> owned;  // when the handler made its own
  inference_service& service;
  const server_options& options;
  http_routes routes;
  std::unique_ptr<detail::openai_front_end> openai;  // when `routes.openai` asks for it

  explicit state(inference_service& shared) : service{shared}, options{shared.options()} {}
  explicit state(std::unique_ptr<inference_service> own)
      : owned{std::move(own)}, service{*owned}, options{service.options()} {}

  // Compresses a successful reply when the client asked for it and it is worth it. As in Triton,
  // only inference replies (and the metrics) are compressed: never an error, and no other route,
  // whose replies Triton's clients read without decompressing them (tritonclient.http.aio turns
  // aiohttp's decompression off while aiohttp sends `Accept-Encoding: gzip, deflate`).
  http_response compressed(http_response reply, detail::content_coding coding) const {
    if (coding == detail::content_coding::identity || !options.compress_responses ||
        reply.status != 200 || reply.body_size() < options.compression_threshold) {
      return reply;
    }
    std::vector<std::string_view> parts{reply.head};
    for (const buffer& b : reply.tail) parts.push_back(b.as_string_view());
    result<std::string> compressed = detail::compress(parts, coding);
    if (!compressed) return reply;  // sent as it is: still a correct reply
    reply.head = std::move(*compressed);
    reply.tail.clear();
    reply.headers.push_back({"Content-Encoding", std::string{detail::coding_name(coding)}});
    return reply;
  }

  // --- routes ----------------------------------------------------------------------------------

  http_response server_metadata_reply() const {
    return json_reply(200, encode(service.metadata()));
  }

  http_response health_reply(bool ready_route) const {
    if (!ready_route) return json_reply(200, encode(server_live{true}));
    const bool ready = service.ready();
    return json_reply(ready ? 200 : 503, encode(server_ready{ready}));
  }

  http_response model_metadata_reply(std::string_view name,
                                     std::optional<std::uint64_t> version) const {
    result<model_metadata> metadata = service.metadata(name, version);
    if (!metadata) return error_reply(metadata.error());
    return json_reply(200, encode(*metadata));
  }

  http_response model_ready_reply(std::string_view name,
                                  std::optional<std::uint64_t> version) const {
    result<bool> ready = service.ready(name, version);
    if (!ready) return error_reply(ready.error());
    return json_reply(*ready ? 200 : 503, encode(model_ready{std::string{name}, *ready}));
  }

  http_response config_reply(std::string_view name, std::optional<std::uint64_t> version) const {
    result<model_config> config = service.configuration(name, version);
    if (!config) return error_reply(config.error());
    return json_reply(200, encode(*config));
  }

  http_response statistics_reply(std::optional<std::string_view> name,
                                 std::optional<std::uint64_t> version) const {
    result<std::vector<statistics_snapshot>> all = service.statistics(name, version);
    if (!all) return error_reply(all.error());
    return json_reply(200, encode(*all));
  }

  // The request's body with its Content-Encoding undone, within the body limit. The decompressed
  // bytes count against the memory budget in `held` (given to the caller, who keeps it while it
  // uses the body; the request's share for an inference): the transport counted the body only as
  // it came.
  result<buffer> plain_body(const http_request& request, memory_budget::lease& held) const {
    result<detail::content_coding> coding =
        detail::parse_content_encoding(request.header("Content-Encoding").value_or(""));
    if (!coding) return std::move(coding).error();
    if (*coding == detail::content_coding::identity) return request.body;
    held = service.memory().open();
    return detail::decompress(request.body, *coding, options.bounds.max_body_bytes, &held);
  }

  http_response repository_index_reply(const http_request& request) const {
    memory_budget::lease held;  // the decompressed body's bytes, while they are read
    result<buffer> body = plain_body(request, held);
    if (!body) return error_reply(body.error());
    result<repository_index_request> filter =
        decode_repository_index_request(body->as_string_view(), options.bounds);
    if (!filter) return error_reply(filter.error());
    std::vector<model_index_entry> index = service.repository_index();
    if (filter->ready) {
      std::erase_if(index, [](const model_index_entry& entry) { return entry.state != "READY"; });
    }
    return json_reply(200, encode(index));
  }

  // The load or unload runs on the service's model-control thread, which calls `done`.
  void load_or_unload(const http_request& request, std::string_view action, std::string name,
                      completion& done) const {
    auto answer = [done = std::move(done)](const status& s) {
      done(s.ok() ? json_reply(200, "{}") : error_reply(s));
    };
    if (status s = service.model_control_allowed(); !s.ok()) return answer(s);
    if (action == "unload") return service.unload(std::move(name), std::move(answer));
    memory_budget::lease held;  // the decompressed body's bytes, while they are read
    result<buffer> body = plain_body(request, held);
    if (!body) return answer(body.error());
    result<parameters> asked =
        decode_repository_load_request(body->as_string_view(), options.bounds);
    if (!asked) return answer(asked.error());
    service.load(std::move(name), std::move(*asked), std::move(answer));
  }

  static http_response trace_reply(const result<trace_settings>& settings) {
    if (!settings) return error_reply(settings.error());
    return json_reply(200, encode(*settings));
  }

  // POST /v2[/models/<m>]/trace/setting: the settings after the change.
  http_response trace_update_reply(const http_request& request,
                                   std::optional<std::string_view> model) {
    memory_budget::lease held;  // the decompressed body's bytes, while they are read
    result<buffer> body = plain_body(request, held);
    if (!body) return error_reply(body.error());
    result<trace_settings_change> change =
        decode_trace_settings_change(body->as_string_view(), options.bounds);
    if (!change) return error_reply(change.error());
    return trace_reply(service.update_tracing(model, *change));
  }

  // POST /v2/logging: the settings after the change.
  http_response logging_reply(const http_request& request) const {
    memory_budget::lease held;  // the decompressed body's bytes, while they are read
    result<buffer> body = plain_body(request, held);
    if (!body) return error_reply(body.error());
    result<log_settings_update> update =
        decode_log_settings_update(body->as_string_view(), options.bounds);
    if (!update) return error_reply(update.error());
    result<log_settings> now = update_log_settings(*update);
    if (!now) return error_reply(now.error());
    return json_reply(200, encode(*now));
  }

  // --- the shared-memory extensions --------------------------------------------------------------

  // POST /v2/(system|cuda)sharedmemory/region/<name>/register: `add` refuses the kind when it is
  // not offered (before the request is read), else the region named, its body decoded, added.
  template <class Registration, class Decode, class Add>
  http_response register_reply(const http_request& request, std::optional<std::string_view> region,
                               std::string_view kind, bool offered, const Decode& decode,
                               const Add& add) const {
    if (!offered) return error_reply(add(Registration{}));
    if (!region) {
      return error_reply(status{
          errc::invalid_argument,
          fmt::format("'region name' is necessary to register {} shared memory region", kind)});
    }
    memory_budget::lease held;  // the decompressed body's bytes, while they are read
    result<buffer> body = plain_body(request, held);
    if (!body) return error_reply(body.error());
    result<Registration> wanted = decode(body->as_string_view(), std::string{*region});
    if (!wanted) return error_reply(wanted.error());
    if (status s = add(std::move(*wanted)); !s.ok()) return error_reply(s);
    return json_reply(200, "");
  }

  // /v2/(system|cuda)sharedmemory[/region/<name>]/(status|register|unregister)
  http_response shared_memory_reply(const http_request& request, bool cuda,
                                    std::optional<std::string_view> region,
                                    std::string_view action) const {
    if (action == "status") {
      if (cuda) {
        result<std::vector<cuda_shared_memory_region>> found =
            service.cuda_shared_memory_status(region);
        if (!found) return error_reply(found.error());
        return json_reply(200, encode(*found));
      }
      result<std::vector<shared_memory_region>> found = service.system_shared_memory_status(region);
      if (!found) return error_reply(found.error());
      return json_reply(200, encode(*found));
    }
    if (action == "unregister") {
      if (status s = cuda ? service.unregister_cuda_shared_memory(region)
                          : service.unregister_system_shared_memory(region);
          !s.ok()) {
        return error_reply(s);
      }
      return json_reply(200, "");
    }
    if (cuda) {
      const shared_memory_registry* regions = service.shared_memory();
      return register_reply<cuda_shared_memory_registration>(
          request, region, "CUDA", regions != nullptr && regions->offers_cuda(),
          [this](std::string_view body, std::string name) {
            return decode_cuda_shared_memory_register(body, std::move(name), options.bounds);
          },
          [this](const cuda_shared_memory_registration& wanted) {
            return service.register_cuda_shared_memory(wanted);
          });
    }
    return register_reply<shared_memory_region>(
        request, region, "system", service.shared_memory() != nullptr,
        [this](std::string_view body, std::string name) {
          return decode_shared_memory_register(body, std::move(name), options.bounds);
        },
        [this](shared_memory_region wanted) {
          return service.register_system_shared_memory(std::move(wanted));
        });
  }

  // --- inference ---------------------------------------------------------------------------------

  // A decoupled model's request on a route that takes one response, which it did not give.
  static status not_one() {
    return status{errc::invalid_argument,
                  "generate expects model to produce exactly 1 response, use generate stream for "
                  "model that generates various number of responses"};
  }

  // An HTTP reply to a request of one response: the transport's part of the lifecycle. `made`
  // turns the request's outcome into the reply, once the request is complete.
  struct one_reply : reply_sink {
    transport_trace* trace = nullptr;
    completion done;
    memory_budget::lease held;  // a decompressed body's bytes, until the request ends
    std::optional<inference_response> response;
    bool admitted = false;
    std::size_t responses = 0;

    void on_admitted() final { admitted = true; }
    // Only a decoupled model gives other than one: `generate` takes it when it gives exactly one.
    void on_response(inference_response r, response_flag /*flag*/) final {
      if (++responses == 1) response = std::move(r);
    }
    void on_complete(const status& outcome) final {
      result<inference_response> answered = !outcome.ok()    ? result<inference_response>{outcome}
                                            : responses != 1 ? result<inference_response>{not_one()}
                                                             : std::move(*response);
      http_response reply;
      try {
        reply = made(std::move(answered));
      } catch (const std::bad_alloc&) {
        reply = error_reply(out_of_memory("writing the response"));
      }
      if (trace != nullptr && trace->sampled) trace->sampled->stamp("INFER_RESPONSE_COMPLETE");
      done(std::move(reply));
    }
    virtual http_response made(result<inference_response> outcome) = 0;
  };

  struct infer_reply final : one_reply {
    std::shared_ptr<const state> handler;
    response_format format;
    detail::content_coding coding{};

    http_response made(result<inference_response> outcome) override {
      if (!outcome) return error_reply(outcome.error());
      return handler->compressed(reply_of(outcome, format), coding);
    }
  };

  void infer(http_request& request, const std::string& name, std::optional<std::uint64_t> version,
             detail::content_coding reply_coding, completion& done, cancellation& cancel) {
    auto sink = std::make_shared<infer_reply>();
    sink->handler = shared_from_this();
    sink->coding = reply_coding;
    sink->trace = request.trace;
    sink->done = std::move(done);
    memory_budget::lease* held = &sink->held;
    service.infer(
        {.model = name, .version = version, .cancel = cancel, .trace = request.trace},
        [&](const model_config& config) -> result<inference_request> {
          if (config.decoupled) {
            // Triton answers 501; a client's mistake is a 4xx here.
            return status{errc::invalid_argument,
                          "HTTP end point doesn't support models with decoupled transaction "
                          "policy"};
          }
          result<buffer> body = plain_body(request, *held);
          if (!body) return std::move(body).error();
          std::optional<std::size_t> header_length;
          if (const auto value = request.header(header_length_field)) {
            result<std::size_t> parsed = parse_header_length(*value, body->size());
            if (!parsed) return std::move(parsed).error();
            header_length = *parsed;
          }
          const bool raw = header_length && *header_length == 0;
          result<inference_request> decoded =
              raw ? decode_raw(*body, config)
                  : decode_request(*body, header_length, options.bounds, name);
          if (!decoded) return decoded;
          result<response_format> format = response_format::from_request(*decoded);
          if (!format) return std::move(format).error();
          format->binary_by_default = format->binary_by_default || raw;
          format->max_json_bytes = options.bounds.json_response_bound(request.body.size());
          sink->format = std::move(*format);
          return decoded;
        },
        sink);
  }

  // A raw binary request (`Inference-Header-Content-Length: 0`): the body is the bytes of the
  // model's one input.
  result<inference_request> decode_raw(const buffer& body, const model_config& config) const {
    if (config.inputs.size() != 1) {
      return status{errc::invalid_argument,
                    fmt::format("a raw binary request needs a model with exactly one input; "
                                "model '{}' has {}",
                                config.name, config.inputs.size())};
    }
    const tensor_metadata& input = config.inputs[0];
    return decode_raw_request(
        body, raw_input_spec{input.name, input.type, input.shape, config.max_batch_size > 0},
        options.bounds);
  }

  // Triton's generate extension: a flat JSON object in and out, for a request of one response.
  struct generate_reply_sink final : one_reply {
    std::size_t max_json_bytes = 0;

    http_response made(result<inference_response> outcome) override {
      result<std::string> json = outcome ? encode_generate_response(*outcome, max_json_bytes)
                                         : result<std::string>{outcome.error()};
      return json ? json_reply(200, std::move(*json)) : error_reply(json.error());
    }
  };

  // `generate_stream`: server-sent events, one per response as the model sends it. The reply
  // starts with the first response; a request that fails before one is answered with one event
  // of its error (a plain error when it was refused before its model), as Triton does.
  struct generate_stream_sink final : reply_sink {
    transport_trace* trace = nullptr;
    completion done;
    cancellation cancel;        // the request's: a response that cannot be encoded stops it
    memory_budget::lease held;  // a decompressed body's bytes, until the request ends
    std::size_t max_json_bytes = 0;
    bool admitted = false;
    bool started = false;
    bool broken = false;  // a response could not be encoded: the stream carries its error
    std::shared_ptr<http_body_stream> body = std::make_shared<http_body_stream>();

    void on_admitted() override { admitted = true; }
    response_backlog* backlog() noexcept override { return &body->backlog(); }

    void on_response(inference_response response, response_flag /*flag*/) override {
      if (broken) return;
      result<std::string> json = encode_generate_response(response, max_json_bytes);
      start();
      body->push(detail::server_sent_event(json ? *json : json.error().to_json()));
      if (!json) {
        // The client learns why its stream ends here; the model is asked to stop, and its next
        // send fails. The body ends with the request (`on_complete`): the connection takes no
        // other request while this one may still hand over its trace.
        broken = true;
        body->backlog().close();
        cancel.cancel();
      }
    }
    void on_complete(const status& outcome) override {
      if (started) {
        if (!outcome.ok() && !broken) body->push(detail::server_sent_event(outcome.to_json()));
        // The trace was handed over just before, on this thread (it was not yet when the stream
        // started); it goes to the transport with the body's end.
        std::shared_ptr<open_trace> sampled =
            trace != nullptr ? std::move(trace->sampled) : nullptr;
        if (sampled) sampled->stamp("INFER_RESPONSE_COMPLETE");
        return body->end(std::move(sampled));
      }
      http_response reply;
      if (!outcome.ok() && !admitted) {
        reply = error_reply(outcome);
      } else {
        reply.status = outcome.ok() ? 200 : outcome.http_status();
        reply.headers.push_back({"Content-Type", std::string{detail::event_stream_content_type}});
        if (!outcome.ok()) reply.head = detail::server_sent_event(outcome.to_json());
      }
      if (trace != nullptr && trace->sampled) trace->sampled->stamp("INFER_RESPONSE_COMPLETE");
      done(std::move(reply));
    }

   private:
    // Sends the reply's head; its body is the events to come.
    void start() {
      if (started) return;
      started = true;
      // No trace stamp here: the request has not ended, so its trace is not handed over yet (it
      // is written to `trace` on another thread when it ends; `on_complete` stamps it).
      done(detail::event_stream_head(body));
    }
  };

  void generate(http_request& request, const std::string& name,
                std::optional<std::uint64_t> version, bool stream, completion& done,
                cancellation& cancel) {
    const std::size_t max_json_bytes = options.bounds.json_response_bound(request.body.size());
    std::shared_ptr<reply_sink> sink;
    memory_budget::lease* held = nullptr;
    if (stream) {
      auto events = std::make_shared<generate_stream_sink>();
      events->body->count_against(service.memory().open());
      events->max_json_bytes = max_json_bytes;
      events->trace = request.trace;
      events->cancel = cancel;
      events->done = std::move(done);
      held = &events->held;
      sink = std::move(events);
    } else {
      auto one = std::make_shared<generate_reply_sink>();
      one->max_json_bytes = max_json_bytes;
      one->trace = request.trace;
      one->done = std::move(done);
      held = &one->held;
      sink = std::move(one);
    }
    service.infer(
        {.model = name, .version = version, .cancel = cancel, .trace = request.trace},
        [&](const model_config& config) -> result<inference_request> {
          result<buffer> body = plain_body(request, *held);
          if (!body) return std::move(body).error();
          return decode_generate_request(*body, config, options.bounds);
        },
        std::move(sink));
  }

  static http_response reply_of(const result<inference_response>& response,
                                const response_format& format) {
    if (!response) return error_reply(response.error());
    result<encoded_body> body = encode_response(*response, format);
    if (!body) return error_reply(body.error());
    http_response reply;
    reply.status = 200;
    reply.headers.push_back({"Content-Type", std::string{body->content_type()}});
    if (body->uses_binary) {
      reply.headers.push_back(
          {std::string{header_length_field}, std::to_string(body->json.size())});
    }
    reply.head = std::move(body->json);
    reply.tail = std::move(body->binary);
    return reply;
  }

  // --- dispatch --------------------------------------------------------------------------------

  void handle(http_request& request, completion& done, cancellation& cancel, bool& replied) {
    const detail::content_coding reply_coding =
        detail::choose_response_coding(request.header("Accept-Encoding").value_or(""));
    const auto reply = [&](http_response r) {
      replied = true;
      done(std::move(r));
    };
    const auto fail = [&](const status& s) {
      log_request_failure(s, fmt::format("{} {}", request.method, request.target));
      reply(error_reply(s));
    };

    const std::string& method = request.method;
    const auto not_found = [&] {
      fail(status{errc::not_found,
                  fmt::format("no route for {} {}", method, request.target.substr(0, 200))});
    };
    // Every route of the protocol is matched whole, as Triton's are: an empty segment
    // (`/v2/models//infer`, where a client's model name was empty, or a trailing slash) names no
    // route. The OpenAI front end's `/v1` routes take them, as OpenAI's own do, and its errors are
    // in OpenAI's object.
    const bool openai_target = openai && detail::openai_front_end::serves(request.target);
    if (!openai_target && has_empty_segment(request.target)) return not_found();
    result<std::vector<std::string>> parsed = split_path(request.target);
    if (!parsed) {
      if (!openai_target) return fail(parsed.error());
      log_request_failure(parsed.error(), fmt::format("{} {}", method, request.target));
      return reply(detail::openai_front_end::error_of(parsed.error()));
    }
    const std::vector<std::string>& path = *parsed;
    const bool get = method == "GET" || method == "HEAD";
    const bool post = method == "POST";
    // RFC 9110: a 405 names the methods the route takes. HEAD goes wherever GET does.
    const auto refuse_method = [&](std::string_view allowed) {
      const status s{errc::method_not_allowed,
                     fmt::format("method {} is not allowed here; use {}", method, allowed)};
      log_request_failure(s, fmt::format("{} {}", method, request.target));
      http_response r = error_reply(s);
      r.headers.push_back({"Allow", allowed == "GET" ? "GET, HEAD" : std::string{allowed}});
      reply(std::move(r));
    };
    if (routes.metrics && path.size() == 1 && path[0] == "metrics") {
      if (!get) return refuse_method("GET");
      http_response r;
      r.headers.push_back({"Content-Type", prometheus_content_type});
      r.head = prometheus_text(service, routes.gauges);
      r.status = 200;
      return reply(compressed(std::move(r), reply_coding));
    }
    if (openai && !path.empty() && path[0] == "v1") {
      const detail::openai_front_end::body_reader body = [&](memory_budget::lease* held) {
        return plain_body(request, *held);
      };
      return openai->handle(request, path, body, done, cancel);
    }
    if (!routes.protocol || path.empty() || path[0] != "v2") return not_found();
    // A restricted route without its header is refused before anything else, the method
    // included (as in Triton).
    const auto refused = [&](api_category category) {
      const api_restriction* needed = options.restricted_http_api.of(category);
      if (needed == nullptr || request.header(needed->header) == needed->value) return false;
      fail(restricted(*needed));
      return true;
    };

    if (path.size() == 1) {
      if (refused(api_category::metadata)) return;
      return get ? reply(server_metadata_reply()) : refuse_method("GET");
    }
    if (path[1] == "health" && path.size() == 3 && (path[2] == "live" || path[2] == "ready")) {
      if (refused(api_category::health)) return;
      return get ? reply(health_reply(path[2] == "ready")) : refuse_method("GET");
    }
    if (path[1] == "repository") {
      if (refused(api_category::model_repository)) return;
      // /v2/repository[/<repository>]/index and .../models/<m>/(load|unload), as Triton routes
      // them: oip has one repository, so a name is ignored by the index and refused by the rest.
      const std::size_t at = path.size() == 4 || path.size() == 6 ? 3 : 2;
      if (path.size() == at + 1 && path[at] == "index") {
        return post ? reply(repository_index_reply(request)) : refuse_method("POST");
      }
      const std::string& action = path.back();
      if (path.size() == at + 3 && path[at] == "models" &&
          (action == "load" || action == "unload")) {
        if (!post) return refuse_method("POST");
        if (at == 3) return fail(repository_name_refused());
        return load_or_unload(request, action, path[at + 1], done);
      }
      return not_found();
    }
    // /v2[/models/<m>]/trace/setting
    const auto trace_route = [&](std::optional<std::string_view> model) {
      if (refused(api_category::trace)) return;
      if (get) return reply(trace_reply(service.tracing(model)));
      if (!post) return refuse_method("GET, HEAD, POST");
      return reply(trace_update_reply(request, model));
    };
    if (path.size() == 3 && path[1] == "trace" && path[2] == "setting") {
      return trace_route(std::nullopt);
    }
    if (path.size() == 5 && path[1] == "models" && path[3] == "trace" && path[4] == "setting") {
      return trace_route(path[2]);
    }
    if (path[1] == "logging" && path.size() == 2) {
      if (refused(api_category::logging)) return;
      if (get) return reply(json_reply(200, encode(current_log_settings())));
      if (!post) return refuse_method("GET, HEAD, POST");
      return reply(logging_reply(request));
    }
    if (path[1] == "systemsharedmemory" || path[1] == "cudasharedmemory") {
      // [/region/<name>]/(status|register|unregister)
      const bool named = path.size() == 5 && path[2] == "region";
      if (!(named || path.size() == 3)) return not_found();
      const std::string& action = path.back();
      if (action != "status" && action != "register" && action != "unregister") {
        return not_found();
      }
      if (refused(api_category::shared_memory)) return;
      if (action == "status" ? !get : !post)
        return refuse_method(action == "status" ? "GET" : "POST");
      const std::optional<std::string_view> region =
          named ? std::optional<std::string_view>{path[3]} : std::nullopt;
      return reply(shared_memory_reply(request, path[1] == "cudasharedmemory", region, action));
    }
    if (path[1] != "models" || path.size() < 3) return not_found();
    if (path.size() == 3 && path[2] == "stats") {
      if (refused(api_category::statistics)) return;
      return get ? reply(statistics_reply(std::nullopt, std::nullopt)) : refuse_method("GET");
    }

    // /v2/models/<m>[/versions/<v>][/ready|/infer|/generate|/generate_stream|/stats|/config]
    const std::string& name = path[2];
    const std::size_t next = path.size() >= 5 && path[3] == "versions" ? 5 : 3;
    if (path.size() > next + 1) return not_found();
    const std::string_view action = path.size() == next ? std::string_view{} : path[next];
    std::optional<api_category> category;
    if (action.empty()) category = api_category::metadata;
    if (action == "ready") category = api_category::health;
    if (action == "config") category = api_category::model_config;
    if (action == "stats") category = api_category::statistics;
    if (action == "infer" || action == "generate" || action == "generate_stream") {
      category = api_category::inference;
    }
    if (!category) return not_found();
    if (refused(*category)) return;
    std::optional<std::uint64_t> version;
    if (next == 5) {  // a path segment is never empty
      result<std::optional<std::uint64_t>> v = parse_model_version(path[4]);
      if (!v) return fail(v.error());
      version = *v;
    }
    switch (*category) {
      case api_category::metadata:
        return get ? reply(model_metadata_reply(name, version)) : refuse_method("GET");
      case api_category::health:
        return get ? reply(model_ready_reply(name, version)) : refuse_method("GET");
      case api_category::model_config:
        return get ? reply(config_reply(name, version)) : refuse_method("GET");
      case api_category::statistics:
        return get ? reply(statistics_reply(name, version)) : refuse_method("GET");
      default:  // api_category::inference
        if (!post) return refuse_method("POST");
        if (action != "infer") {
          return generate(request, name, version, action == "generate_stream", done, cancel);
        }
        return infer(request, name, version, reply_coding, done, cancel);
    }
  }
};

http_handler::http_handler(model_repository& repository, executor& workers, server_options options)
    : state_{std::make_shared<state>(
          std::make_unique<inference_service>(repository, workers, std::move(options)))} {}

http_handler::http_handler(inference_service& service, http_routes routes)
    : state_{std::make_shared<state>(service)} {
  if (routes.openai) {
    state_->openai = std::make_unique<detail::openai_front_end>(service, *routes.openai);
  }
  state_->routes = std::move(routes);
}

http_handler::~http_handler() = default;

const server_options& http_handler::options() const noexcept { return state_->options; }
inference_service& http_handler::service() const noexcept { return state_->service; }

void http_handler::handle(http_request request, completion done, cancellation cancel) {
  // The service answers out of memory in the requests it holds; what is left is this handler's
  // own work, before it replies or hands the request over.
  bool replied = false;
  try {
    state_->handle(request, done, cancel, replied);
  } catch (const std::bad_alloc&) {
    if (!replied && done) done(error_reply(out_of_memory("handling the request")));
  }
}

http_response http_handler::error_reply_for(std::string_view target, const status& error) const {
  if (state_->openai && detail::openai_front_end::serves(target)) {
    return detail::openai_front_end::error_of(error);
  }
  return error_reply(error);
}

http_response http_handler::handle(http_request request) {
  std::mutex mutex;
  std::condition_variable ready;
  std::optional<http_response> reply;
  handle(std::move(request), [&](http_response r) {
    const std::lock_guard lock{mutex};
    reply = std::move(r);
    ready.notify_one();
  });
  std::unique_lock lock{mutex};
  ready.wait(lock, [&] { return reply.has_value(); });
  if (reply->stream) {
    reply->head += reply->stream->read_all();
    reply->stream.reset();
  }
  return std::move(*reply);
}

}  // namespace oip
