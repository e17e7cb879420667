#pragma once
// Internal: Triton's response cache. Responses of models with `model_config::response_cache`,
// keyed by everything of the request that the model sees, in a byte-bounded least-recently-used
// map (tests/response_cache_test.cpp).

#include <oip/infer.hpp>
#include <oip/model.hpp>

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace oip::detail {

// What identifies a request to the cache, and its hash (made before the cache's lock is taken).
struct cache_key {
  std::string bytes;
  std::size_t hash = 0;
  [[nodiscard]] bool empty() const noexcept { return bytes.empty(); }
  friend bool operator==(const cache_key& a, const cache_key& b) noexcept {
    return a.hash == b.hash && a.bytes == b.bytes;
  }
};

// The key of a request: the model and version, then every input's name, datatype, shape,
// parameters and bytes, the request's parameters, and the outputs asked with their parameters,
// each length-prefixed, so that two requests share a key only when the model would see the same.
// Left out are the parameters that are the server's (`parameter_roles.hpp`: how a request is
// scheduled, how its tensors travel) and the request's id. `length` is `cache_key_length`'s.
[[nodiscard]] cache_key make_cache_key(std::string_view model, std::uint64_t version,
                                       const inference_request& request, std::size_t length);

// The bytes of the request's key, counted without making it; none where the request cannot be
// cached.
[[nodiscard]] std::optional<std::size_t> cache_key_length(std::string_view model,
                                                          std::uint64_t version,
                                                          const inference_request& request);

class response_cache {
 public:
  explicit response_cache(std::size_t capacity_bytes) : capacity_{capacity_bytes} {}

  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }

  // A copy of the response that `instance` gave under `key`, whose outputs share the cache's
  // bytes, now the most recently used; none where there is none. An entry made by another model
  // of the same name and version (one replaced or reloaded since) is dropped, never answered.
  [[nodiscard]] std::optional<inference_response> find(const cache_key& key,
                                                       const std::shared_ptr<model>& instance);
  // Keeps a copy of `response` (its outputs' bytes copied: they may be views of a request's body
  // or of a client's shared memory) under `key`, dropping the least recently used entries until
  // it fits. Whether it was kept: not where the entry is larger than the whole cache, or another
  // request put the same there first. Throws `std::bad_alloc` where the copy cannot be made; the
  // cache is then as it was.
  bool insert(cache_key key, const inference_response& response,
              const std::shared_ptr<model>& instance);

  [[nodiscard]] std::size_t bytes() const;
  [[nodiscard]] std::size_t entries() const;

 private:
  struct key_hash {
    std::size_t operator()(const cache_key& key) const noexcept { return key.hash; }
  };
  struct entry {
    inference_response response;
    std::weak_ptr<model> made_by;  // compared by owner: a model that died is never taken for one
    std::size_t bytes = 0;
    std::list<const cache_key*>::iterator recency;
  };
  using map = std::unordered_map<cache_key, entry, key_hash>;
  void erase(map::iterator at) noexcept;

  const std::size_t capacity_;
  mutable std::mutex mutex_;
  std::size_t used_ = 0;
  std::list<const cache_key*> recency_;  // the entries' keys, the most recently used first
  map entries_;
};

}  // namespace oip::detail
