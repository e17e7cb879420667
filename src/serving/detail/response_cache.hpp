#pragma once
// Internal: Triton's response cache. Responses of models with `model_config::response_cache`,
// keyed by everything of the request that the model sees, in a byte-bounded least-recently-used
// map (tests/response_cache_test.cpp).

#include <oip/infer.hpp>

#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace oip::detail {

// What identifies a request to the cache: the model and version, then every input's name,
// datatype, shape, parameters and bytes, the request's parameters, and the outputs asked with
// their parameters, each length-prefixed, so that two requests share a key exactly when the model
// would see the same; the parameters that are the server's (`parameter_roles.hpp`: how a request
// is scheduled, how its tensors travel) are left out, and so is the request's id. Empty where the
// request cannot be cached (an input in device memory).
[[nodiscard]] std::string response_cache_key(std::string_view model, std::uint64_t version,
                                             const inference_request& request);

class response_cache {
 public:
  explicit response_cache(std::size_t capacity_bytes) : capacity_{capacity_bytes} {}

  // A copy of the response cached under `key`, whose outputs share the cache's bytes, now the
  // most recently used; none where there is none.
  [[nodiscard]] std::optional<inference_response> find(const std::string& key);
  // Keeps a copy of `response` (its outputs' bytes copied: they may be views of a request's body
  // or of a client's shared memory) under `key`, dropping the least recently used entries until
  // it fits. A response larger than the whole cache is not kept. Throws `std::bad_alloc` where
  // the copy cannot be made; the cache is then as it was.
  void insert(std::string key, const inference_response& response);

  [[nodiscard]] std::size_t bytes() const;
  [[nodiscard]] std::size_t entries() const;

 private:
  struct entry {
    inference_response response;
    std::size_t bytes = 0;
    std::list<const std::string*>::iterator recency;
  };
  const std::size_t capacity_;
  mutable std::mutex mutex_;
  std::size_t used_ = 0;
  std::list<const std::string*> recency_;  // the entries' keys, the most recently used first
  std::unordered_map<std::string, entry> entries_;
};

}  // namespace oip::detail
