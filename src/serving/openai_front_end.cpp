// The OpenAI-compatible front end (`detail/openai_front_end.hpp`): access checks, routes, the
// host's mapping of each OpenAI model onto an oip model, and the reply sinks that turn a model's
// responses into completions, stream chunks and embeddings.

#include "serving/detail/openai_front_end.hpp"

#include "codecs/detail/openai_json.hpp"
#include "serving/detail/ascii.hpp"
#include "serving/detail/server_sent_events.hpp"
#include "serving/detail/stop_strings.hpp"

#include <oip/float16.hpp>
#include <oip/log.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <mutex>
#include <optional>
#include <random>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <fmt/format.h>

namespace oip {

std::string default_chat_template(const std::vector<chat_message>& chat) {
  std::string prompt;
  for (const chat_message& message : chat) {
    prompt += message.role;
    prompt += ": ";
    prompt += message.content;
    prompt += '\n';
  }
  prompt += "assistant:";
  return prompt;
}

namespace detail {

namespace {

using completion = openai_front_end::completion;

http_response json_reply(int code, std::string json) {
  http_response r;
  r.status = code;
  r.headers.push_back({"Content-Type", "application/json"});
  r.head = std::move(json);
  return r;
}

http_response error_reply(const status& error, std::string_view code = {}) {
  return json_reply(error.http_status(), openai_error_json(error, code));
}

std::int64_t seconds_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string new_id(std::string_view prefix) {
  thread_local std::mt19937_64 random{std::random_device{}()};
  return fmt::format("{}{:016x}", prefix, random());
}

// Compares a key sent with one the host gave, in time that depends on the host's key alone.
bool same_key(std::string_view expected, std::string_view given) {
  unsigned difference = expected.size() == given.size() ? 0U : 1U;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const char other = i < given.size() ? given[i] : '\0';
    difference |= static_cast<unsigned char>(expected[i]) ^ static_cast<unsigned char>(other);
  }
  return difference == 0;
}

std::optional<std::int64_t> integer_of(const parameter_value* value) {
  if (value == nullptr) return std::nullopt;
  if (const auto* i = std::get_if<std::int64_t>(value)) return *i;
  if (const auto* u = std::get_if<std::uint64_t>(value)) {
    return static_cast<std::int64_t>(std::min<std::uint64_t>(*u, INT64_MAX));
  }
  return std::nullopt;
}

// The length of `text`'s first `n` bytes without a UTF-8 character cut at their end: a chunk
// never ends inside a character (the JSON writer would turn its halves into U+FFFD).
std::size_t whole_characters(std::string_view text, std::size_t n) {
  std::size_t start = n;
  while (start > 0 && n - start < 3 &&
         (static_cast<unsigned char>(text[start - 1]) & 0xC0U) == 0x80U) {
    --start;
  }
  if (start == 0) return n;
  const auto lead = static_cast<unsigned char>(text[start - 1]);
  const std::size_t needed = lead >= 0xF0U ? 4 : lead >= 0xE0U ? 3 : lead >= 0xC0U ? 2 : 1;
  return n - (start - 1) < needed ? start - 1 : n;
}

// --- the request a mapping makes -----------------------------------------------------------------

status mapping_fault(const openai_model& m, std::string message) {
  return status{errc::internal, fmt::format("the OpenAI model '{}' is mapped onto model '{}', {}",
                                            m.id, m.model, message)};
}

// The shape of an input that takes one value: its dimensions with the variable ones 1, and the
// batch dimension first when the model batches.
result<shape_type> one_value_shape(const openai_model& m, const model_config& config,
                                   const tensor_metadata& input) {
  shape_type shape;
  if (config.max_batch_size > 0) shape.push_back(1);
  for (const std::int64_t dim : input.shape) {
    if (dim != 1 && dim != -1) {
      return mapping_fault(m, fmt::format("whose input '{}' takes more than one value ({})",
                                          input.name, to_string(input.shape)));
    }
    shape.push_back(1);
  }
  return shape;
}

const tensor_metadata* input_named(const model_config& config, std::string_view name) {
  for (const tensor_metadata& input : config.inputs) {
    if (input.name == name) return &input;
  }
  return nullptr;
}

template <class T>
result<tensor> one_value(const std::string& name, shape_type shape, T value) {
  return tensor::from_values<T>(name, std::move(shape), std::span<const T>{&value, 1});
}

template <class T>
result<tensor> integer_value(const std::string& name, shape_type shape, const parameter_value& v,
                             std::string_view field) {
  const auto refused = [&] {
    return status{errc::invalid_argument,
                  fmt::format("'{}' must be an integer from {} to {} for this model", field,
                              std::numeric_limits<T>::min(), std::numeric_limits<T>::max())};
  };
  if (const auto* i = std::get_if<std::int64_t>(&v); i != nullptr && std::in_range<T>(*i)) {
    return one_value<T>(name, std::move(shape), static_cast<T>(*i));
  }
  if (const auto* u = std::get_if<std::uint64_t>(&v); u != nullptr && std::in_range<T>(*u)) {
    return one_value<T>(name, std::move(shape), static_cast<T>(*u));
  }
  return refused();
}

// A request field sent to an input: one value of the input's datatype.
result<tensor> field_value(const openai_model& m, const tensor_metadata& input, shape_type shape,
                           const parameter_value& v, std::string_view field) {
  std::optional<double> number;
  if (const auto* d = std::get_if<double>(&v)) number = *d;
  if (const auto* i = std::get_if<std::int64_t>(&v)) number = static_cast<double>(*i);
  if (const auto* u = std::get_if<std::uint64_t>(&v)) number = static_cast<double>(*u);
  const auto wrong = [&](std::string_view expected) {
    return status{errc::invalid_argument,
                  fmt::format("'{}' must be {} for this model", field, expected)};
  };
  switch (input.type) {
    case datatype::int8: return integer_value<std::int8_t>(input.name, shape, v, field);
    case datatype::int16: return integer_value<std::int16_t>(input.name, shape, v, field);
    case datatype::int32: return integer_value<std::int32_t>(input.name, shape, v, field);
    case datatype::int64: return integer_value<std::int64_t>(input.name, shape, v, field);
    case datatype::uint8: return integer_value<std::uint8_t>(input.name, shape, v, field);
    case datatype::uint16: return integer_value<std::uint16_t>(input.name, shape, v, field);
    case datatype::uint32: return integer_value<std::uint32_t>(input.name, shape, v, field);
    case datatype::uint64: return integer_value<std::uint64_t>(input.name, shape, v, field);
    case datatype::fp32:
      if (!number || std::abs(*number) > std::numeric_limits<float>::max()) {
        return wrong("a number within FP32's range");
      }
      return one_value<float>(input.name, std::move(shape), static_cast<float>(*number));
    case datatype::fp64:
      if (!number) return wrong("a number");
      return one_value<double>(input.name, std::move(shape), *number);
    case datatype::boolean:
      if (const auto* b = std::get_if<bool>(&v)) return one_value<bool>(input.name, shape, *b);
      return wrong("a boolean");
    case datatype::bytes:
      if (const auto* s = std::get_if<std::string>(&v)) {
        const std::string_view text = *s;
        return tensor::from_strings(input.name, std::move(shape), std::span{&text, 1});
      }
      return wrong("a string");
    default: break;
  }
  return mapping_fault(m, fmt::format("whose input '{}' is {}, which a request field cannot fill",
                                      input.name, to_string(input.type)));
}

// The inference request for one text: the text in the prompt input, the fields that the mapping
// sends to inputs there, the other fields as parameters.
result<inference_request> request_for(const openai_model& m, const model_config& config,
                                      std::string_view text, parameters fields) {
  const tensor_metadata* prompt = input_named(config, m.prompt_input);
  if (prompt == nullptr || prompt->type != datatype::bytes) {
    return mapping_fault(m, fmt::format("which has no BYTES input '{}'", m.prompt_input));
  }
  inference_request request;
  result<shape_type> shape = one_value_shape(m, config, *prompt);
  if (!shape) return std::move(shape).error();
  result<tensor> prompt_tensor =
      tensor::from_strings(prompt->name, std::move(*shape), std::span{&text, 1});
  if (!prompt_tensor) return std::move(prompt_tensor).error();
  request.inputs.push_back(std::move(*prompt_tensor));
  for (const openai_field_input& sent : m.field_inputs) {
    const parameter_value* value = fields.find(sent.field);
    if (value == nullptr && sent.otherwise) value = &*sent.otherwise;
    if (value == nullptr) continue;
    const tensor_metadata* input = input_named(config, sent.input);
    if (input == nullptr) {
      return mapping_fault(m,
                           fmt::format("which has no input '{}' for '{}'", sent.input, sent.field));
    }
    result<shape_type> one = one_value_shape(m, config, *input);
    if (!one) return std::move(one).error();
    result<tensor> filled = field_value(m, *input, std::move(*one), *value, sent.field);
    if (!filled) return std::move(filled).error();
    request.inputs.push_back(std::move(*filled));
    fields.erase(sent.field);
  }
  request.parameters = std::move(fields);
  return request;
}

// --- completions and chats -----------------------------------------------------------------------

// One completion's replies: a stream of chunks, or one object once the model is done. The text
// is cut before the first stop string, and the model is then called off.
struct text_reply final : reply_sink {
  openai_completion_head head;
  std::string model_name;  // what `head.model` views
  std::string text_output;
  bool stream = false;
  bool include_usage = false;
  stop_strings stops;
  std::size_t max_text_bytes = 0;
  cancellation cancel;
  completion done;
  memory_budget::lease held;
  std::shared_ptr<http_body_stream> body = std::make_shared<http_body_stream>();

  bool admitted = false;
  bool started = false;
  bool stopped = false;           // a stop string was met: later responses are dropped
  std::optional<status> failure;  // the reply could not go on (the model's output was wrong)
  std::string pending;            // text not yet released
  std::string text;               // what a reply that is not streamed holds so far
  std::optional<openai_usage> usage;
  std::string finish_reason;

  void on_admitted() override { admitted = true; }
  response_backlog* backlog() noexcept override { return stream ? &body->backlog() : nullptr; }

  void on_response(inference_response response, response_flag /*flag*/) override {
    if (stopped || failure) return;
    if (std::optional<std::int64_t> n = integer_of(response.parameters.find("prompt_tokens"))) {
      if (!usage) usage.emplace();
      usage->prompt_tokens = *n;
    }
    if (std::optional<std::int64_t> n = integer_of(response.parameters.find("completion_tokens"))) {
      if (!usage) usage.emplace();
      usage->completion_tokens = *n;
    }
    if (const auto* reason = response.parameters.get<std::string>("finish_reason")) {
      finish_reason = *reason;
    }
    result<std::string> got = text_of(response);
    if (!got) return fail(got.error());
    pending += *got;
    if (!stream && text.size() + pending.size() > max_text_bytes) {
      return fail(status{errc::invalid_argument,
                         fmt::format("the completion passed {} bytes; ask for fewer tokens, or "
                                     "for a stream",
                                     max_text_bytes)});
    }
    release(false);
  }

  void on_complete(const status& outcome) override {
    if (failure) {
      // A stream carries the failure already, and has ended.
      if (!started) done(error_reply(*failure));
      return;
    }
    if (!outcome.ok() && !stopped) {
      if (!started) return done(error_reply(outcome));
      return end_with(outcome);
    }
    if (!stopped) release(true);
    // (A conditional of a literal and a std::string would be a temporary string to view.)
    std::string_view reason = finish_reason;
    if (reason.empty()) reason = "stop";
    if (!stream) {
      return done(json_reply(200, encode_openai_completion(head, text, reason, usage)));
    }
    start();
    body->push(detail::server_sent_event(
        encode_openai_chunk(head, {.text = {}, .first = false, .finish_reason = reason})));
    if (include_usage) {
      body->push(detail::server_sent_event(
          encode_openai_usage_chunk(head, usage.value_or(openai_usage{}))));
    }
    body->push("data: [DONE]\n\n");
    body->end();
  }

 private:
  result<std::string> text_of(const inference_response& response) const {
    for (const tensor& output : response.outputs) {
      if (output.name() != text_output) continue;
      if (output.type() != datatype::bytes) {
        return status{errc::internal,
                      fmt::format("model '{}' gave output '{}' as {}, not BYTES",
                                  response.model_name, text_output, to_string(output.type()))};
      }
      std::string out;
      for (const std::string_view element : output.strings()) out += element;
      return out;
    }
    if (response.outputs.empty()) return std::string{};  // a response that only ends the stream
    return status{errc::internal,
                  fmt::format("model '{}' gave no output '{}'", response.model_name, text_output)};
  }

  // The reply cannot go on: the model is called off, and the client learns why (in the stream,
  // or in the reply that `on_complete` makes).
  void fail(const status& why) {
    failure = why;
    cancel.cancel();
    body->backlog().close();
    if (started) end_with(why);
  }

  void end_with(const status& why) {
    body->push(detail::server_sent_event(openai_error_json(why)));
    body->push("data: [DONE]\n\n");
    body->end();
  }

  // Releases what `pending` holds up to the first stop string (then ends, and calls the model
  // off) or, while the text goes on, all but a tail that could begin a stop string or ends inside
  // a character.
  void release(bool at_end) {
    const stop_strings::found met = stops.search(pending);
    if (met.cut != std::string::npos) {
      emit(std::string_view{pending}.substr(0, met.cut));
      pending.clear();
      finish_reason = "stop";
      stopped = true;
      cancel.finish_early();
      return;
    }
    std::size_t n = pending.size();
    if (!at_end) n = whole_characters(pending, n - met.open_tail);
    emit(std::string_view{pending}.substr(0, n));
    pending.erase(0, n);
  }

  void emit(std::string_view piece) {
    if (!stream) {
      text += piece;
      return;
    }
    if (piece.empty()) return;
    start();
    body->push(detail::server_sent_event(
        encode_openai_chunk(head, {.text = piece, .first = false, .finish_reason = {}})));
  }

  // The reply's head; its body is the chunks to come, a chat's first one carrying the role.
  void start() {
    if (started) return;
    started = true;
    http_response reply = detail::event_stream_head(body);
    if (head.route == openai_route::chat) {
      body->push(detail::server_sent_event(
          encode_openai_chunk(head, {.text = {}, .first = true, .finish_reason = {}})));
    }
    done(std::move(reply));
  }
};

// --- embeddings ------------------------------------------------------------------------------

// The vectors of one embeddings request: one inference per text, a few at a time, the reply once
// all are done (or the first failure).
struct embedding_batch : std::enable_shared_from_this<embedding_batch> {
  static constexpr std::size_t in_flight_at_most = 4;

  inference_service* service = nullptr;
  std::optional<openai_model> mapping;  // a copy: the batch may outlive the front end
  std::vector<std::string> texts;
  parameters fields;
  bool base64 = false;
  cancellation cancel;
  completion done;
  memory_budget::lease held;  // a decompressed body's bytes, until the request ends

  std::mutex mutex;
  std::vector<std::vector<float>> vectors;
  std::int64_t prompt_tokens = 0;
  std::size_t next = 0;
  std::size_t in_flight = 0;
  bool pumping = false;
  bool answered = false;
  std::optional<status> failed;

  // Starts inferences while there is room. A model that answers on the calling thread completes
  // one inside `service->infer`; its completion finds the pump running and leaves the next start
  // to this loop, so that no stack grows with the texts.
  void pump() {
    std::unique_lock lock{mutex};
    if (pumping) return;
    pumping = true;
    while (next < texts.size() && in_flight < in_flight_at_most && !failed) {
      const std::size_t index = next++;
      ++in_flight;
      lock.unlock();
      start(index);
      lock.lock();
    }
    pumping = false;
    if (take_answer()) {
      lock.unlock();
      answer();
    }
  }

  void start(std::size_t index);

  void complete(std::size_t index, result<std::pair<std::vector<float>, std::int64_t>> got) {
    bool reply_now = false;
    {
      const std::lock_guard lock{mutex};
      --in_flight;
      if (got) {
        vectors[index] = std::move(got->first);
        prompt_tokens += got->second;
      } else if (!failed) {
        failed = got.error();
        cancel.cancel();  // the others in flight end too
      }
      reply_now = take_answer();
      // A running pump starts the next itself; after a failure none starts.
      if (!reply_now && (pumping || failed)) return;
    }
    if (reply_now) return answer();
    pump();
  }

  // With the lock held: whether every inference has ended and none will start, so that the
  // reply goes now (once).
  bool take_answer() {
    const bool over = (failed || next == texts.size()) && in_flight == 0 && !pumping;
    if (!over || answered) return false;
    answered = true;
    return true;
  }

  void answer() {
    if (failed) return done(error_reply(*failed));
    result<std::string> json =
        encode_openai_embeddings(mapping->id, vectors, base64, prompt_tokens);
    done(json ? json_reply(200, std::move(*json)) : error_reply(json.error()));
  }
};

result<std::vector<float>> vector_of(const inference_response& response, const std::string& name) {
  for (const tensor& output : response.outputs) {
    if (output.name() != name) continue;
    std::vector<float> v(output.element_count());
    for (std::size_t i = 0; i < v.size(); ++i) {
      switch (output.type()) {
        case datatype::fp32: v[i] = output.at<float>(i); break;
        case datatype::fp64: v[i] = static_cast<float>(output.at<double>(i)); break;
        case datatype::fp16: v[i] = to_float(output.at<half>(i)); break;
        case datatype::bf16: v[i] = to_float(output.at<bfloat16>(i)); break;
        default:
          return status{errc::internal,
                        fmt::format("model '{}' gave output '{}' as {}, not floating point",
                                    response.model_name, name, to_string(output.type()))};
      }
    }
    return v;
  }
  return status{errc::internal,
                fmt::format("model '{}' gave no output '{}'", response.model_name, name)};
}

void embedding_batch::start(std::size_t index) {
  auto self = shared_from_this();
  auto sink = reply_to([self, index](result<inference_response> response) {
    if (!response) return self->complete(index, std::move(response).error());
    result<std::vector<float>> v = vector_of(*response, self->mapping->embedding_output);
    if (!v) return self->complete(index, std::move(v).error());
    const std::int64_t tokens = integer_of(response->parameters.find("prompt_tokens")).value_or(0);
    self->complete(index, std::pair{std::move(*v), tokens});
  });
  service->infer(
      {.model = mapping->model, .version = mapping->version, .cancel = cancel},
      [&](const model_config& config) {
        return request_for(*mapping, config, texts[index], fields);
      },
      std::move(sink));
}

// A request answered before it reaches a model: logged as the service logs those it refuses.
void refuse_request(const http_request& request, const status& why, std::string_view code,
                    completion& done) {
  log_request_failure(why, fmt::format("{} {}", request.method, request.target.substr(0, 200)));
  done(error_reply(why, code));
}

}  // namespace

// --- routes
// ----------------------------------------------------------------------------------------

struct openai_front_end::state {
  inference_service& service;
  openai_options options;
  std::int64_t created = seconds_now();

  const openai_model* find(std::string_view id) const {
    for (const openai_model& m : options.models) {
      if (m.id == id) return &m;
    }
    return nullptr;
  }

  status authenticated(const http_request& request) const {
    const api_restriction* needed = service.options().restricted_http_api.of(api_category::openai);
    if (needed != nullptr && request.header(needed->header) != needed->value) {
      return restricted(*needed);
    }
    if (options.api_keys.empty()) return {};
    const std::optional<std::string_view> given = request.header("Authorization");
    constexpr std::string_view scheme = "Bearer ";
    if (!given || given->size() < scheme.size() ||
        !equals_ignoring_case(given->substr(0, scheme.size()), scheme)) {
      return status{
          errc::unauthenticated,
          "You didn't provide an API key. You need to provide your API key in an "
          "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."};
    }
    const std::string_view key = given->substr(scheme.size());
    bool found = false;
    for (const std::string& k : options.api_keys) found = same_key(k, key) || found;
    if (!found) return status{errc::unauthenticated, "Incorrect API key provided."};
    return {};
  }

  status allowed(const http_request& request, api_category category) const {
    const api_restriction* needed = options.restrictions.of(category);
    if (needed == nullptr || request.header(needed->header) == needed->value) return {};
    return restricted(*needed);
  }

  http_response model_reply(std::string_view id) const {
    const openai_model* m = find(id);
    if (m == nullptr) {
      return error_reply(
          status{errc::not_found, fmt::format("The model '{}' does not exist", id.substr(0, 200))},
          "model_not_found");
    }
    return json_reply(200, encode_openai_model({m->id, m->owned_by, created}));
  }

  http_response model_list_reply() const {
    std::vector<openai_model_entry> entries;
    entries.reserve(options.models.size());
    for (const openai_model& m : options.models) entries.push_back({m.id, m.owned_by, created});
    return json_reply(200, encode_openai_model_list(entries));
  }

  void infer(const http_request& request, openai_route route, const body_reader& read_body,
             completion& done, const cancellation& cancel) const {
    const auto refuse = [&](const status& why, std::string_view code = {}) {
      refuse_request(request, why, code, done);
    };
    auto sink = std::make_shared<text_reply>();
    sink->body->count_against(service.memory().open());
    memory_budget::lease held;  // a decompressed body's bytes, until the request ends
    result<buffer> body = read_body(&held);
    if (!body) return refuse(body.error());
    result<openai_request> asked =
        decode_openai_request(*body, route, service.options().bounds, options.max_embedding_inputs);
    if (!asked) return refuse(asked.error());
    const openai_model* m = find(asked->model);
    const bool fits = m != nullptr && (m->serves == openai_model::kind::embedding) ==
                                          (route == openai_route::embeddings);
    if (!fits) {
      return refuse(status{errc::not_found,
                           m == nullptr ? fmt::format("The model '{}' does not exist",
                                                      asked->model.substr(0, 200))
                           : route == openai_route::embeddings
                               ? fmt::format("The model '{}' does not make embeddings", m->id)
                               : fmt::format("The model '{}' makes embeddings, not text", m->id)},
                    "model_not_found");
    }
    if (route == openai_route::embeddings) {
      return embed(*m, std::move(*asked), std::move(held), done, cancel);
    }
    sink->held = std::move(held);

    std::string prompt = std::move(asked->prompt);
    if (route == openai_route::chat) {
      result<std::string> made = m->chat
                                     ? m->chat(asked->messages)
                                     : result<std::string>{default_chat_template(asked->messages)};
      if (!made) return refuse(made.error());
      prompt = std::move(*made);
    }
    sink->model_name = m->id;
    sink->head = {route, new_id(route == openai_route::chat ? "chatcmpl-" : "cmpl-"), seconds_now(),
                  sink->model_name};
    sink->text_output = m->text_output;
    sink->stream = asked->stream;
    sink->include_usage = asked->include_usage;
    sink->stops = stop_strings{std::move(asked->stop)};
    sink->max_text_bytes = service.options().bounds.json_response_bound(request.body.size());
    sink->cancel = cancel;
    sink->done = std::move(done);
    service.infer(
        {.model = m->model, .version = m->version, .cancel = cancel},
        [&](const model_config& config) {
          return request_for(*m, config, prompt, std::move(asked->sampling));
        },
        std::move(sink));
  }

  void embed(const openai_model& m, openai_request asked, memory_budget::lease held,
             completion& done, const cancellation& cancel) const {
    auto batch = std::make_shared<embedding_batch>();
    batch->held = std::move(held);
    batch->service = &service;
    batch->mapping = m;
    batch->texts = std::move(asked.texts);
    batch->fields = std::move(asked.sampling);
    batch->base64 = asked.base64;
    batch->cancel = cancel;
    batch->done = std::move(done);
    batch->vectors.resize(batch->texts.size());
    batch->pump();
  }
};

http_response openai_front_end::error_of(const status& error) { return detail::error_reply(error); }

bool openai_front_end::serves(std::string_view target) noexcept {
  target = target.substr(0, target.find('?'));
  return target == "/v1" || target.starts_with("/v1/");
}

openai_front_end::openai_front_end(inference_service& service, openai_options options)
    : state_{std::make_shared<const state>(state{service, std::move(options)})} {}

void openai_front_end::handle(const http_request& request, std::span<const std::string> path,
                              const body_reader& body, completion& done,
                              const cancellation& cancel) const {
  const state& s = *state_;
  const auto fail = [&](const status& why, std::string_view code = {}) {
    refuse_request(request, why, code, done);
  };
  if (status ok = s.authenticated(request); !ok.ok()) {
    return fail(ok, ok.code() == errc::unauthenticated ? "invalid_api_key" : "");
  }
  const bool get = request.method == "GET" || request.method == "HEAD";
  const bool post = request.method == "POST";
  const auto wrong_method = [&](std::string_view allowed) {
    http_response r = error_reply(
        status{errc::method_not_allowed,
               fmt::format("method {} is not allowed here; use {}", request.method, allowed)});
    r.headers.push_back({"Allow", std::string{allowed}});
    done(std::move(r));
  };
  if (path.size() >= 2 && path[1] == "models") {
    if (status ok = s.allowed(request, api_category::model_repository); !ok.ok()) return fail(ok);
    if (!get) return wrong_method("GET, HEAD");
    if (path.size() == 2) return done(s.model_list_reply());
    // An id may hold slashes ("org/model"), as Hugging Face's names do.
    std::string id = path[2];
    for (std::size_t i = 3; i < path.size(); ++i) id += "/" + path[i];
    return done(s.model_reply(id));
  }
  std::optional<openai_route> route;
  if (path.size() == 2 && path[1] == "completions") route = openai_route::completions;
  if (path.size() == 2 && path[1] == "embeddings") route = openai_route::embeddings;
  if (path.size() == 3 && path[1] == "chat" && path[2] == "completions") route = openai_route::chat;
  if (!route) {
    return fail(status{errc::not_found, fmt::format("no route for {} {}", request.method,
                                                    request.target.substr(0, 200))});
  }
  if (status ok = s.allowed(request, api_category::inference); !ok.ok()) return fail(ok);
  if (!post) return wrong_method("POST");
  s.infer(request, *route, body, done, cancel);
}

}  // namespace detail
}  // namespace oip
