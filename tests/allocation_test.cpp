// The decoders' memory is bounded by the body: no input makes decode_request hold more than
// k x body size + a constant at any moment (docs/architecture.md states k and the constant). A
// counting global allocator tracks the live bytes of the decoding thread, simdjson's parser
// buffers included (each case runs on a fresh thread, so its parsers start empty), and the peak.

#include <oip/json.hpp>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <thread>

#include <doctest/doctest.h>

#include <malloc.h>

namespace {
thread_local bool counting = false;
thread_local std::size_t live = 0;
thread_local std::size_t peak = 0;

void* counted_allocation(std::size_t size, std::size_t alignment) {
  void* p = nullptr;
  if (alignment <= alignof(std::max_align_t)) {
    p = std::malloc(size == 0 ? 1 : size);
  } else {
    p = std::aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment);
  }
  if (counting && p != nullptr) {
    live += malloc_usable_size(p);
    peak = std::max(peak, live);
  }
  return p;
}

void counted_free(void* p) {
  if (counting && p != nullptr) live -= std::min(live, malloc_usable_size(p));
  std::free(p);
}
}  // namespace

void* operator new(std::size_t size) {
  if (void* p = counted_allocation(size, 0)) return p;
  throw std::bad_alloc{};
}
void* operator new[](std::size_t size) { return operator new(size); }
void* operator new(std::size_t size, std::align_val_t a) {
  if (void* p = counted_allocation(size, static_cast<std::size_t>(a))) return p;
  throw std::bad_alloc{};
}
void* operator new[](std::size_t size, std::align_val_t a) { return operator new(size, a); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  return counted_allocation(size, 0);
}
void* operator new(std::size_t size, std::align_val_t a, const std::nothrow_t&) noexcept {
  return counted_allocation(size, static_cast<std::size_t>(a));
}
void operator delete(void* p) noexcept { counted_free(p); }
void operator delete[](void* p) noexcept { counted_free(p); }
void operator delete(void* p, std::size_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::size_t) noexcept { counted_free(p); }
void operator delete(void* p, std::align_val_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { counted_free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { counted_free(p); }

namespace {

// The documented bound (docs/architecture.md, "Memory bounds").
constexpr std::size_t bound_factor = 32;
constexpr std::size_t bound_constant = 64 * 1024;

std::size_t bytes_to_decode(const std::string& json, const std::string& binary = {}) {
  const oip::buffer body = oip::buffer::from_string(json + binary);
  const std::optional<std::size_t> header =
      binary.empty() ? std::nullopt : std::optional<std::size_t>{json.size()};
  std::size_t total = 0;
  std::thread worker([&] {
    counting = true;
    {
      oip::result<oip::inference_request> r = oip::decode_request(body, header);
      (void)r;
    }
    counting = false;
    total = peak;
  });
  worker.join();
  return total;
}

std::string repeat(const std::string& item, std::size_t n, const std::string& separator = ",") {
  std::string out;
  for (std::size_t i = 0; i < n; ++i) {
    if (i != 0) out += separator;
    out += item;
  }
  return out;
}

void check_bounded(const std::string& title, const std::string& json,
                   const std::string& binary = {}) {
  CAPTURE(title);
  const std::size_t body = json.size() + binary.size();
  const std::size_t used = bytes_to_decode(json, binary);
  CAPTURE(body);
  CAPTURE(used);
  MESSAGE(title, ": ", body, " body bytes, ", used, " at peak (",
          static_cast<double>(used) / static_cast<double>(body), "x)");
  CHECK(used <= bound_factor * body + bound_constant);
}

}  // namespace

TEST_CASE("decoding allocates at most k x body + constant, whatever the body says") {
  constexpr std::size_t n = 200'000;
  check_bounded("INT64 data, 2 bytes per element",
                R"({"inputs":[{"name":"x","datatype":"INT64","shape":[)" + std::to_string(n) +
                    R"(],"data":[)" + repeat("1", n) + "]}]}");
  check_bounded("FP64 data, nested", R"({"inputs":[{"name":"x","datatype":"FP64","shape":[)" +
                                         std::to_string(n) + R"(],"data":[)" + repeat("[1]", n) +
                                         "]}]}");
  check_bounded("FP64 data before its datatype", R"({"inputs":[{"data":[)" + repeat("1", n) +
                                                     R"(],"name":"x","datatype":"FP64","shape":[)" +
                                                     std::to_string(n) + "]}]}");
  check_bounded("BYTES data, empty strings",
                R"({"inputs":[{"name":"x","datatype":"BYTES","shape":[)" + std::to_string(n) +
                    R"(],"data":[)" + repeat(R"("")", n) + "]}]}");
  check_bounded("many tiny inputs",
                R"({"inputs":[)" +
                    repeat(R"({"name":"","datatype":"BOOL","shape":[0],"data":[]})", 20'000) +
                    "]}");
  check_bounded("many distinct tiny inputs", [] {
    std::string inputs;
    for (int i = 0; i < 20'000; ++i) {
      if (i != 0) inputs += ",";
      inputs +=
          R"({"name":")" + std::to_string(i) + R"(","datatype":"BOOL","shape":[0],"data":[]})";
    }
    return R"({"inputs":[)" + inputs + "]}";
  }());
  check_bounded(
      "many parameters", R"({"parameters":{)" + [] {
        std::string p;
        for (int i = 0; i < 20'000; ++i) p += (i ? "," : "") + ("\"" + std::to_string(i) + "\":1");
        return p;
      }() + R"(},"inputs":[]})");
  check_bounded("deep unknown value",
                R"({"inputs":[],"x":)" + std::string(99, '[') + std::string(99, ']') + "}");
  check_bounded(
      "huge claimed shape, few elements",
      R"({"inputs":[{"name":"x","datatype":"FP64","shape":[100000000000],"data":[1,2,3]}]})");
  check_bounded(
      "huge claimed shape, binary",
      R"({"inputs":[{"name":"x","datatype":"UINT8","shape":[1000000000],"parameters":{"binary_data_size":4}}]})",
      "abcd");
  check_bounded(
      "large binary input",
      R"({"inputs":[{"name":"x","datatype":"UINT8","shape":[1000000],"parameters":{"binary_data_size":1000000}}]})",
      std::string(1'000'000, 'x'));
  check_bounded(
      "many requested outputs", R"({"inputs":[],"outputs":[)" + [] {
        std::string o;
        for (int i = 0; i < 5'000; ++i)
          o += (i ? "," : "") + (R"({"name":")" + std::to_string(i) + "\"}");
        return o;
      }() + "]}");
}
