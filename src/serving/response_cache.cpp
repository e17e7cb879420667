// Triton's response cache: the key a request is found by, and the entries' bounded map.

#include "serving/detail/response_cache.hpp"

#include "serving/detail/parameter_roles.hpp"

#include <oip/buffer.hpp>
#include <oip/tensor.hpp>

#include <array>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace oip::detail {

namespace {

// Appends to a key; every variable-length part goes with its length first, so that no two
// different requests write the same bytes.
class key_writer {
 public:
  explicit key_writer(std::string& out) : out_{out} {}

  void number(std::uint64_t value) {
    std::array<char, sizeof value> raw{};
    std::memcpy(raw.data(), &value, sizeof value);
    out_.append(raw.data(), raw.size());
  }
  void text(std::string_view value) {
    number(value.size());
    out_.append(value);
  }
  void bytes(const buffer& data) {
    number(data.size());
    if (!data.empty()) out_.append(reinterpret_cast<const char*>(data.data()), data.size());
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
  std::string& out_;
};

std::size_t size_of(const inference_response& response, std::size_t key_bytes) {
  // The bytes held, and a little for the strings and the containers around them.
  std::size_t bytes = key_bytes + 256;
  for (const tensor& t : response.outputs) bytes += t.data().size() + t.name().size() + 64;
  return bytes;
}

}  // namespace

std::string response_cache_key(std::string_view model, std::uint64_t version,
                               const inference_request& request) {
  std::size_t reserve = 64 + model.size();
  for (const tensor& input : request.inputs) {
    if (!input.in_host_memory()) return {};
    reserve += input.data().size() + input.name().size() + 16 * (input.shape().size() + 4);
  }
  std::string key;
  key.reserve(reserve);
  key_writer out{key};
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
  return key;
}

std::optional<inference_response> response_cache::find(const std::string& key) {
  const std::lock_guard lock{mutex_};
  const auto found = entries_.find(key);
  if (found == entries_.end()) return std::nullopt;
  recency_.splice(recency_.begin(), recency_, found->second.recency);
  return found->second.response;
}

void response_cache::insert(std::string key, const inference_response& response) {
  const std::size_t bytes = size_of(response, key.size());
  if (bytes > capacity_) return;
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
  if (entries_.contains(key)) return;  // another request of the same put it there first
  recency_.push_front(nullptr);
  std::unordered_map<std::string, entry>::iterator at;
  try {
    at = entries_.try_emplace(std::move(key)).first;
  } catch (...) {
    recency_.pop_front();
    throw;
  }
  at->second.response = std::move(kept);
  at->second.bytes = bytes;
  at->second.recency = recency_.begin();
  recency_.front() = &at->first;
  used_ += bytes;
  while (used_ > capacity_) {
    const auto oldest = entries_.find(*recency_.back());
    used_ -= oldest->second.bytes;
    recency_.pop_back();
    entries_.erase(oldest);
  }
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
