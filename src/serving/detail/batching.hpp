#pragma once
// Internal: dynamic batching. A model's batch queue merges compatible requests along the batch
// dimension into one execution, and its outputs are split back, row for row
// (tests/batching_test.cpp).

#include "serving/detail/pending_inference.hpp"

#include <oip/infer.hpp>
#include <oip/model.hpp>
#include <oip/parameters.hpp>
#include <oip/status.hpp>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace oip::detail {

// A request waiting in a model's batch queue.
struct batch_item {
  std::shared_ptr<pending_inference> pending;
  std::shared_ptr<inference_request> request;
};

// The requests' inputs concatenated along the batch dimension (one copy of their bytes).
result<inference_request> merge(const std::vector<batch_item>& items);

// A batch's outputs split back, row for row, into one model_output per request (views, not
// copies). Every output must have the batch's rows first.
result<std::vector<model_output>> split(model_output&& batch, const std::vector<batch_item>& items,
                                        std::string_view model_name);

// A request's priority level among its model's (`model_config::batching_settings`): 0 where the
// model has none; else its `priority` parameter where that is 1 to `priority_levels`, and
// `default_priority_level` for any other value or none.
[[nodiscard]] std::uint64_t priority_level(const model_config& config, const parameters& request);

// The queue policy of a priority level of the model's batch queue: the level's own where
// `priority_queue_policy` gives one, else `default_queue_policy`.
[[nodiscard]] const queue_policy& queue_policy_of(const model_config::batching_settings& settings,
                                                  std::uint64_t level);

// One model's batch queue, in order of priority level, then arrival; within a level, the
// requests that waited past their queue policy's timeout and were delayed come last, in the order
// they were delayed. A thread forms batches: the
// longest run of compatible requests at the front of the queue, up to `max_batch_size` rows,
// once an instance is free and either the batch is full, the next request cannot join it, or
// its oldest request has waited `max_queue_delay`. Requests cancelled while they wait (their
// timeout passed, their client gone), and those past their policy's timeout where it rejects
// them, leave the queue before a batch is formed. `run` takes each
// batch and must call `finished` once it completed. The thread holds the queue, so the queue
// outlives its `batcher` handle for as long as the thread still runs.
class batch_queue {
 public:
  using run_function =
      std::function<void(const std::shared_ptr<batch_queue>&, std::vector<batch_item>)>;
  // Answers a request the queue lets go unrun: `why`, or its cancellation where it was cancelled.
  using fail_function = std::function<void(const batch_item&, const status&)>;

  batch_queue(const model_config& config, run_function run, fail_function fail);

  status enqueue(batch_item item);
  void finished();
  // Stops forming batches and answers what still waits.
  void stop();
  // The batching thread's body; `self` is this queue.
  void loop(const std::shared_ptr<batch_queue>& self);

 private:
  using clock = std::chrono::steady_clock;
  // A request in the queue.
  struct waiting {
    batch_item item;
    queue_policy::timeout_action on_timeout = queue_policy::timeout_action::reject;
    clock::time_point times_out = clock::time_point::max();  // by its queue policy
    bool delayed = false;
  };
  // A request that leaves the queue unrun, and the status it is refused with.
  struct leaving {
    batch_item item;
    status (*why)() = nullptr;
  };
  // The batch the front of the queue makes now.
  struct candidate {
    std::size_t count = 0;     // requests
    bool can_grow = false;     // whether more requests could still join it
    clock::time_point oldest;  // its oldest request's arrival in the queue
  };
  // The largest prefix whose rows make a preferred batch size runs at once.
  [[nodiscard]] candidate next_batch() const;
  // Moves the requests past their timeout under a policy that delays them behind the rest of
  // their level (no allocation).
  void delay_timed_out(clock::time_point now);
  // Why a request leaves the queue now, or null where it stays.
  [[nodiscard]] static status (*leaves_because(const waiting& w, clock::time_point now))();
  // Takes the requests that leave out of the queue (none where it throws).
  [[nodiscard]] std::vector<leaving> take_leaving(clock::time_point now);
  // The earliest moment a queued request's deadline or queue timeout passes (`time_point::max()`
  // for none).
  [[nodiscard]] clock::time_point earliest_deadline() const;
  // `fail_` for a request the queue lets go, with the status `why` makes. The thread goes on if
  // even that fails for want of memory.
  void refuse(const batch_item& item, status (*why)()) noexcept;

  const std::string model_name_;
  const std::uint64_t max_rows_;
  model_config::batching_settings settings_;
  const run_function run_;
  const fail_function fail_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<waiting> queue_;
  std::size_t running_ = 0;
  bool stopping_ = false;
};

// A batch queue and its thread: destroying it stops the queue and waits for the thread (or lets
// it finish on its own when the last owner is that very thread).
class batcher {
 public:
  explicit batcher(std::shared_ptr<batch_queue> queue);
  batcher(const batcher&) = delete;
  batcher& operator=(const batcher&) = delete;
  ~batcher();
  [[nodiscard]] status enqueue(batch_item item) { return queue_->enqueue(std::move(item)); }

 private:
  std::shared_ptr<batch_queue> queue_;
  std::thread thread_;
};

}  // namespace oip::detail
