#pragma once
// What the client tests check over either transport, against oip-serve run as a process
// (client_test) or servers in the test's own process (client_transport_test, which the sanitizer
// builds run): Triton's `simple` (INT32 [1,16] sum and difference) and `repeat_int32`.

#include <oip/infer.hpp>
#include <oip/status.hpp>
#include <oip/tensor.hpp>

#include <atomic>
#include <cstdint>
#include <future>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

namespace oip::testing {

inline oip::inference_request simple_request(std::int32_t base = 0) {
  std::vector<std::int32_t> a(16);
  std::vector<std::int32_t> b(16, 1);
  for (std::int32_t i = 0; i < 16; ++i) a[static_cast<std::size_t>(i)] = base + i;
  oip::inference_request request;
  request.inputs.push_back(*oip::tensor::from_values<std::int32_t>("INPUT0", {1, 16}, a));
  request.inputs.push_back(*oip::tensor::from_values<std::int32_t>("INPUT1", {1, 16}, b));
  return request;
}

inline void check_simple(const oip::result<oip::inference_response>& response,
                         std::int32_t base = 0) {
  REQUIRE_MESSAGE(response.ok(), response.to_status().message());
  REQUIRE(response->outputs.size() == 2);
  const oip::tensor* sum = nullptr;
  const oip::tensor* difference = nullptr;
  for (const oip::tensor& t : response->outputs) {
    if (t.name() == "OUTPUT0") sum = &t;
    if (t.name() == "OUTPUT1") difference = &t;
  }
  REQUIRE(sum != nullptr);
  REQUIRE(difference != nullptr);
  CHECK(sum->shape() == oip::shape_type{1, 16});
  for (std::size_t i = 0; i < 16; ++i) {
    CHECK(sum->at<std::int32_t>(i) == base + static_cast<std::int32_t>(i) + 1);
    CHECK(difference->at<std::int32_t>(i) == base + static_cast<std::int32_t>(i) - 1);
  }
}

/// 64 futures in flight, 32 callbacks, then 4 threads making 50 calls each, on one client.
template <class Client>
void check_many_in_flight(Client& client) {
  std::vector<std::future<oip::result<oip::inference_response>>> pending;
  for (std::int32_t i = 0; i < 64; ++i) {
    pending.push_back(client.async_infer("simple", simple_request(i)));
  }
  for (std::int32_t i = 0; i < 64; ++i) check_simple(pending[static_cast<std::size_t>(i)].get(), i);

  std::atomic<int> answered{0};
  std::atomic<int> wrong{0};
  std::promise<void> all_done;
  for (std::int32_t i = 0; i < 32; ++i) {
    client.async_infer("simple", simple_request(i), [&, i](oip::result<oip::inference_response> r) {
      // No REQUIRE or throwing accessor here: this runs on the client's thread.
      if (!r.ok() || r->outputs.size() != 2 ||
          r->outputs[0].template at<std::int32_t>(0) != i + 1) {
        ++wrong;
      }
      if (++answered == 32) all_done.set_value();
    });
  }
  all_done.get_future().get();
  CHECK(wrong.load() == 0);

  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (std::int32_t i = 0; i < 50; ++i) {
        const oip::result<oip::inference_response> r =
            client.infer("simple", simple_request(t * 100 + i));
        if (!r.ok() || r->outputs.size() != 2 ||
            r->outputs[1].template at<std::int32_t>(0) != t * 100 + i - 1) {
          ++failures;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  CHECK(failures.load() == 0);
}

/// A callback that throws ends its own call only: the client's thread goes on (no exception
/// reaches it), and the next call is answered.
template <class Client>
void check_throwing_callback(Client& client) {
  std::promise<void> threw;
  client.async_infer("simple", simple_request(), [&threw](oip::result<oip::inference_response>) {
    threw.set_value();
    throw std::runtime_error{"a caller's bug"};
  });
  threw.get_future().get();
  check_simple(client.async_infer("simple", simple_request()).get());
}

/// repeat_int32's responses one by one over a stream: three, none, and an unknown model.
template <class Client>
void check_repeat_stream(Client& client) {
  oip::inference_request request;
  const std::vector<std::int32_t> values{4, 5, 6};
  const std::vector<std::uint32_t> delays{20, 20, 20};
  const std::uint32_t wait = 0;
  request.inputs.push_back(*oip::tensor::from_values<std::int32_t>("IN", {3}, values));
  request.inputs.push_back(*oip::tensor::from_values<std::uint32_t>("DELAY", {3}, delays));
  request.inputs.push_back(*oip::tensor::from_values<std::uint32_t>(
      "WAIT", {1}, std::span<const std::uint32_t>(&wait, 1)));
  std::vector<std::int32_t> got;
  const oip::status end =
      client.infer_stream("repeat_int32", request, [&](oip::inference_response response) {
        for (const oip::tensor& t : response.outputs) {
          if (t.name() == "OUT") got.push_back(t.at<std::int32_t>(0));
        }
      });
  REQUIRE_MESSAGE(end.ok(), end.message());
  CHECK(got == values);

  oip::inference_request none;
  none.inputs.push_back(
      *oip::tensor::from_values<std::int32_t>("IN", {0}, std::vector<std::int32_t>{}));
  none.inputs.push_back(
      *oip::tensor::from_values<std::uint32_t>("DELAY", {0}, std::vector<std::uint32_t>{}));
  none.inputs.push_back(request.inputs[2]);
  got.clear();
  const oip::status empty =
      client.infer_stream("repeat_int32", none, [&](oip::inference_response) { got.push_back(0); });
  CHECK_MESSAGE(empty.ok(), empty.message());
  CHECK(got.empty());

  const oip::status unknown =
      client.infer_stream("no_such_model", request, [](oip::inference_response) {});
  CHECK_FALSE(unknown.ok());
  CHECK(unknown.message().find("no_such_model") != std::string::npos);
}

}  // namespace oip::testing
