// The HTTP client's calls: each made by `http_client_protocol` and sent by the transport
// (`client_transport.hpp`).

#include "core/detail/end_elsewhere.hpp"
#include "core/detail/future_of.hpp"
#include "http/client_transport.hpp"

#include <oip/http/client.hpp>
#include <oip/shared_memory.hpp>

#include <new>
#include <utility>

namespace oip::http {

client::client(std::string host_port, client_options options)
    : state_{std::make_shared<detail::client_state>(std::move(host_port), std::move(options))} {}

namespace {

void stop_quietly(detail::client_state& state) noexcept {
  try {
    state.stop();
  } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor must not throw (a failed join)
  }
}

}  // namespace

client::~client() {
  if (state_->on_io_thread()) {
    // Ended by one of its own callbacks: the I/O thread cannot wait for itself to end. A thread
    // of its own stops the client once the callback has returned, and lets go of it.
    if (oip::detail::end_elsewhere([state = state_] { stop_quietly(*state); })) return;
    // No thread: `stop` says so and ends the process.
  }
  stop_quietly(*state_);
}

const http_client_protocol& client::protocol() const noexcept { return state_->protocol(); }

result<http_reply> client::send(const http_call& call) {
  if (status checked = detail::check_call(call); !checked.ok()) return checked;
  return state_->call_here(call);
}

void client::async_send(http_call call, reply_callback done) {
  if (status checked = detail::check_call(call); !checked.ok()) {
    return state_->post_error(std::move(checked), std::move(done));
  }
  state_->start(std::move(call), std::move(done));
}

namespace {

// An inference call, and the outputs of its request that go to regions of this client.
struct prepared_infer {
  http_call call;
  std::shared_ptr<shared_memory_outputs> placed;
};

result<prepared_infer> prepare_infer(detail::client_state& state, std::string_view model,
                                     const inference_request& request, const request_format& format,
                                     std::optional<std::uint64_t> version) {
  result<http_call> call = state.protocol().infer(model, request, format, version);
  if (!call) return std::move(call).error();
  prepared_infer out{std::move(*call), nullptr};
  if (state.has_regions() && !request.outputs.empty()) {
    result<shared_memory_outputs> asked = shared_memory_outputs::of(request, state.regions());
    if (!asked) return std::move(asked).error();
    if (!asked->outputs.empty()) {
      out.placed = std::make_shared<shared_memory_outputs>(std::move(*asked));
    }
  }
  return out;
}

}  // namespace

void client::async_infer(std::string_view model, const inference_request& request,
                         infer_callback done, const request_format& format,
                         std::optional<std::uint64_t> version) {
  result<prepared_infer> prepared = prepare_infer(*state_, model, request, format, version);
  if (!prepared) return state_->post_error(std::move(prepared).error(), std::move(done));
  state_->start(std::move(prepared->call), [state = state_, placed = std::move(prepared->placed),
                                            done = std::move(done)](result<http_reply> reply) {
    if (!reply) return done(std::move(reply).error());
    // The callback is called whatever happens: an exception here would end the call without it.
    done([&]() -> result<inference_response> {
      try {
        return state->protocol().read_infer(std::move(*reply), placed.get());
      } catch (const std::bad_alloc&) {
        return status{errc::unavailable, "no memory on this client for the reply's tensors"};
      }
    }());
  });
}

std::future<result<inference_response>> client::async_infer(std::string_view model,
                                                            const inference_request& request,
                                                            const request_format& format,
                                                            std::optional<std::uint64_t> version) {
  return future_of<result<inference_response>>(
      [&](infer_callback done) { async_infer(model, request, std::move(done), format, version); });
}

result<inference_response> client::infer(std::string_view model, const inference_request& request,
                                         const request_format& format,
                                         std::optional<std::uint64_t> version) {
  result<prepared_infer> prepared = prepare_infer(*state_, model, request, format, version);
  if (!prepared) return std::move(prepared).error();
  result<http_reply> reply = state_->call_here(prepared->call);
  if (!reply) return std::move(reply).error();
  return state_->protocol().read_infer(std::move(*reply), prepared->placed.get());
}

namespace {

// A call whose reply one of the protocol's readers reads.
template <class Read>
auto call_and_read(detail::client_state& state, result<http_call> call, Read&& read)
    -> decltype(read(http_reply{})) {
  if (!call) return std::move(call).error();
  result<http_reply> reply = state.call_here(*call);
  if (!reply) return std::move(reply).error();
  return read(std::move(*reply));
}

}  // namespace

result<server_metadata> client::metadata() {
  return call_and_read(*state_, protocol().server_metadata(), [this](http_reply r) {
    return protocol().read_server_metadata(std::move(r));
  });
}

result<model_metadata> client::metadata(std::string_view model,
                                        std::optional<std::uint64_t> version) {
  return call_and_read(*state_, protocol().model_metadata(model, version), [this](http_reply r) {
    return protocol().read_model_metadata(std::move(r));
  });
}

namespace {
bool health(detail::client_state& state, const http_call& call) {
  result<http_reply> reply = state.call_here(call);
  return reply && http_client_protocol::read_health(*reply);
}
}  // namespace

bool client::live() { return health(*state_, protocol().live()); }

bool client::ready() { return health(*state_, protocol().ready()); }

bool client::ready(std::string_view model, std::optional<std::uint64_t> version) {
  return health(*state_, protocol().model_ready(model, version));
}

result<std::string> client::model_config(std::string_view model,
                                         std::optional<std::uint64_t> version) {
  return call_and_read(*state_, protocol().model_config(model, version),
                       [this](http_reply r) { return protocol().read_text(std::move(r)); });
}

result<std::string> client::statistics(std::string_view model,
                                       std::optional<std::uint64_t> version) {
  return call_and_read(*state_, protocol().statistics(model, version),
                       [this](http_reply r) { return protocol().read_text(std::move(r)); });
}

result<std::vector<model_index_entry>> client::repository_index(bool ready_only) {
  return call_and_read(*state_, protocol().repository_index(ready_only), [this](http_reply r) {
    return protocol().read_repository_index(std::move(r));
  });
}

namespace {
status outcome_of(detail::client_state& state, result<http_call> call) {
  if (!call) return std::move(call).error();
  result<http_reply> reply = state.call_here(*call);
  if (!reply) return std::move(reply).error();
  return state.protocol().read_outcome(std::move(*reply));
}
}  // namespace

status client::load(std::string_view model, const parameters& settings) {
  return outcome_of(*state_, protocol().load(model, settings));
}

status client::unload(std::string_view model) {
  return outcome_of(*state_, protocol().unload(model));
}

result<log_settings> client::log_settings() {
  return call_and_read(*state_, protocol().log_settings(),
                       [this](http_reply r) { return protocol().read_log_settings(std::move(r)); });
}

result<log_settings> client::update_log_settings(const log_settings_update& change) {
  return call_and_read(*state_, protocol().update_log_settings(change),
                       [this](http_reply r) { return protocol().read_log_settings(std::move(r)); });
}

result<trace_settings_change> client::trace_settings(std::string_view model) {
  return call_and_read(*state_, protocol().trace_settings(model), [this](http_reply r) {
    return protocol().read_trace_settings(std::move(r));
  });
}

result<trace_settings_change> client::update_trace_settings(const trace_settings_change& change,
                                                            std::string_view model) {
  return call_and_read(
      *state_, protocol().update_trace_settings(change, model),
      [this](http_reply r) { return protocol().read_trace_settings(std::move(r)); });
}

status client::register_system_shared_memory(const std::string& name, const std::string& key,
                                             std::uint64_t offset, std::uint64_t byte_size) {
  // Mapped here first: a region this process cannot map is refused before the server is asked.
  if (status mapped = state_->regions().register_region(name, key, offset, byte_size);
      !mapped.ok()) {
    return mapped;
  }
  const shared_memory_region region{name, key, offset, byte_size};
  status registered = outcome_of(*state_, protocol().register_shared_memory(region));
  if (!registered.ok()) {
    state_->regions().unregister(name);
    return registered;
  }
  state_->note_region();
  return registered;
}

status client::unregister_system_shared_memory(std::string_view name) {
  status s = outcome_of(*state_, protocol().unregister_shared_memory(name));
  if (s.ok()) {
    if (name.empty()) {
      state_->regions().unregister_all();
    } else {
      state_->regions().unregister(name);
    }
  }
  return s;
}

result<std::vector<shared_memory_region>> client::system_shared_memory_status(
    std::string_view name) {
  return call_and_read(*state_, protocol().shared_memory_status(name), [this](http_reply r) {
    return protocol().read_shared_memory_status(std::move(r));
  });
}

}  // namespace oip::http
