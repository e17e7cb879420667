// Triton's response cache: the key a request is found by, and the entries' bounded map.

#include "serving/detail/response_cache.hpp"

#include "serving/detail/parameter_roles.hpp"

#include <oip/buffer.hpp>
#include <oip/tensor.hpp>

#include <array>
#include <cstring>
#include <functional>
#include <new>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace oip::detail {

namespace {

// Writes a key, or, with no string to write to, counts its bytes: every variable-length part
// goes with its length first, so that no two different requests write the same bytes.
class key_writer {
 public:
  explicit key_writer(std::string* out) : out_{out} {}
  [[nodiscard]] std::size_t length() const noexcept { return length_; }

  void number(std::uint64_t value) {
    std::array<char, sizeof value> raw{};
    std::memcpy(raw.data(), &value, sizeof value);
    append(raw.data(), raw.size());
  }
  void text(std::string_view value) {
    number(value.size());
    append(value.data(), value.size());
  }
  void bytes(const buffer& data) {
    number(data.size());
    append(reinterpret_cast<const char*>(data.data()), data.size());
  }
  void params(const parameters& given, bool (*skipped)(std::string_view) noexcept) {
    for (const auto& [name, value] : given) {
      if (skipped(name)) continue;
      text(name);
      number(value.index());
      std::visit(
          [this](const auto& v) {
            using type = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<type, std::string>) {
              text(v);
            } else {
              std::uint64_t raw = 0;
              std::memcpy(&raw, &v, sizeof v);
              number(raw);
            }
          },
          value);
    }
    number(~std::uint64_t{0});  // the end of the list
  }

 private:
  void append(const char* data, std::size_t size) {
    length_ += size;
    if (out_ != nullptr && size > 0) out_->append(data, size);
  }
  std::string* out_;
  std::size_t length_ = 0;
};

void write_key(key_writer& out, std::string_view model, std::uint64_t version,
               const inference_request& request) {
  out.text(model);
  out.number(version);
  out.number(request.inputs.size());
  for (const tensor& input : request.inputs) {
    out.text(input.name());
    out.number(static_cast<std::uint64_t>(input.type()));
    out.number(input.shape().size());
    for (const std::int64_t d : input.shape()) out.number(static_cast<std::uint64_t>(d));
    out.params(input.parameters(), transport_parameter);
    out.bytes(input.data());
  }
  out.params(request.parameters, server_parameter);
  out.number(request.outputs.size());
  for (const requested_output& asked : request.outputs) {
    out.text(asked.name);
    out.params(asked.parameters, transport_parameter);
  }
}

std::size_t size_of(const parameters& given) {
  std::size_t bytes = 0;
  for (const auto& [name, value] : given) {
    bytes += name.size() + 48;
    if (const auto* text = std::get_if<std::string>(&value)) bytes += text->size();
  }
  return bytes;
}

// The bytes an entry holds, with something for each allocation around them.
std::size_t size_of(const inference_response& response, const cache_key& key) {
  std::size_t bytes = key.bytes.capacity() + size_of(response.parameters) + 256;
  for (const tensor& t : response.outputs) {
    bytes +=
        t.data().size() + t.name().size() + 8 * t.shape().size() + size_of(t.parameters()) + 128;
  }
  return bytes;
}

bool same_owner(const std::weak_ptr<model>& a, const std::shared_ptr<model>& b) noexcept {
  return !a.owner_before(b) && !b.owner_before(a);
}

}  // namespace

std::optional<std::size_t> cache_key_length(std::string_view model, std::uint64_t version,
                                            const inference_request& request) {
  for (const tensor& input : request.inputs) {
    if (!input.in_host_memory()) return std::nullopt;
  }
  key_writer counting{nullptr};
  write_key(counting, model, version, request);
  return counting.length();
}

cache_key make_cache_key(std::string_view model, std::uint64_t version,
                         const inference_request& request, std::size_t length) {
  cache_key key;
  key.bytes.reserve(length);
  key_writer out{&key.bytes};
  write_key(out, model, version, request);
  key.hash = std::hash<std::string_view>{}(key.bytes);
  return key;
}

std::optional<inference_response> response_cache::find(const cache_key& key,
                                                       const std::shared_ptr<model>& instance) {
  const std::lock_guard lock{mutex_};
  const auto found = entries_.find(key);
  if (found == entries_.end()) return std::nullopt;
  if (!same_owner(found->second.made_by, instance)) {
    erase(found);
    return std::nullopt;
  }
  recency_.splice(recency_.begin(), recency_, found->second.recency);
  return found->second.response;
}

bool response_cache::insert(cache_key key, const inference_response& response,
                            const std::shared_ptr<model>& instance) {
  const std::size_t bytes = size_of(response, key);
  if (bytes > capacity_) return false;
  // The copy is made before the lock is taken, and before anything in the cache changes.
  inference_response kept;
  kept.model_name = response.model_name;
  kept.model_version = response.model_version;
  kept.parameters = response.parameters;
  kept.outputs.reserve(response.outputs.size());
  for (const tensor& t : response.outputs) {
    result<mutable_buffer> copy = mutable_buffer::allocate_for_overwrite(t.data().size());
    if (!copy) throw std::bad_alloc{};
    if (!t.data().empty()) std::memcpy(copy->data(), t.data().data(), t.data().size());
    result<tensor> made = tensor::make(t.name(), t.type(), t.shape(), std::move(*copy));
    if (!made) throw std::bad_alloc{};  // the shape and bytes are those of a made tensor
    made->parameters() = t.parameters();
    kept.outputs.push_back(std::move(*made));
  }
  const std::lock_guard lock{mutex_};
  if (const auto found = entries_.find(key); found != entries_.end()) {
    if (same_owner(found->second.made_by, instance)) return false;  // another request's, alike
    erase(found);  // a model replaced since made it
  }
  recency_.push_front(nullptr);
  map::iterator at;
  try {
    at = entries_.try_emplace(std::move(key)).first;
  } catch (...) {
    recency_.pop_front();
    throw;
  }
  at->second.response = std::move(kept);
  at->second.made_by = instance;
  at->second.bytes = bytes;
  at->second.recency = recency_.begin();
  recency_.front() = &at->first;
  used_ += bytes;
  while (used_ > capacity_) erase(entries_.find(*recency_.back()));
  return true;
}

void response_cache::erase(map::iterator at) noexcept {
  used_ -= at->second.bytes;
  recency_.erase(at->second.recency);
  entries_.erase(at);
}

std::size_t response_cache::bytes() const {
  const std::lock_guard lock{mutex_};
  return used_;
}

std::size_t response_cache::entries() const {
  const std::lock_guard lock{mutex_};
  return entries_.size();
}

}  // namespace oip::detail
