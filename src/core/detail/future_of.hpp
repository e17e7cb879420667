#pragma once
// A future of the one result that a call taking a callback gives: both network clients offer
// their asynchronous calls both ways.

#include <future>
#include <memory>
#include <utility>

namespace oip {

// `start` makes the call with the callback it is given.
template <class T, class Start>
std::future<T> future_of(Start&& start) {
  auto promise = std::make_shared<std::promise<T>>();
  std::future<T> future = promise->get_future();
  std::forward<Start>(start)([promise](T value) { promise->set_value(std::move(value)); });
  return future;
}

}  // namespace oip
