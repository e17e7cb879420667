// Dynamic batching: a model's queue forms batches on a thread of its own; the service runs them
// (inference_service.cpp) and this file merges their inputs and splits their outputs back.

#include "serving/detail/batching.hpp"

#include "serving/detail/parameter_roles.hpp"
#include "serving/detail/validation.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iterator>
#include <new>

#include <fmt/format.h>

namespace oip::detail {

namespace {

using parameter_filter = bool (*)(std::string_view);

// Whether two sets of parameters say the same to the model: every one but those `skipped`.
bool same_for_the_model(const parameters& a, const parameters& b, parameter_filter skipped) {
  const auto model_side = [skipped](const parameters& p) {
    return std::count_if(p.begin(), p.end(),
                         [skipped](const parameters::entry& e) { return !skipped(e.first); });
  };
  if (model_side(a) != model_side(b)) return false;
  return std::all_of(a.begin(), a.end(), [&](const parameters::entry& e) {
    if (skipped(e.first)) return true;
    const parameter_value* other = b.find(e.first);
    return other != nullptr && *other == e.second;
  });
}

// The parameters of a merged request or tensor: the model's, as every request of the batch gave
// them.
parameters model_side_of(const parameters& given, parameter_filter skipped) {
  parameters out;
  for (const auto& [name, value] : given) {
    if (!skipped(name)) out.append_unchecked(name, value);
  }
  return out;
}

// Whether two requests ask the model for the same outputs: the same names, in any order, each
// with the same parameters for the model (`classification` among them: a model on a GPU answers
// it there). How an output is sent back is the transport's business and keeps no requests apart.
bool same_outputs_asked(const std::vector<requested_output>& a,
                        const std::vector<requested_output>& b) {
  if (a.size() != b.size()) return false;
  return std::all_of(a.begin(), a.end(), [&](const requested_output& x) {
    return std::any_of(b.begin(), b.end(), [&](const requested_output& y) {
      return y.name == x.name &&
             same_for_the_model(x.parameters, y.parameters, transport_parameter);
    });
  });
}

// Whether two requests can run as one batch: the same inputs in the same order (names, datatypes,
// dimensions past the batch dimension, parameters for the model), the same parameters for the
// model and the same outputs asked of the model (it sees the batch's).
bool batchable_together(const inference_request& a, const inference_request& b) {
  if (a.inputs.size() != b.inputs.size() ||
      !same_for_the_model(a.parameters, b.parameters, server_parameter) ||
      !same_outputs_asked(a.outputs, b.outputs)) {
    return false;
  }
  for (std::size_t i = 0; i < a.inputs.size(); ++i) {
    const tensor& x = a.inputs[i];
    const tensor& y = b.inputs[i];
    if (x.name() != y.name() || x.type() != y.type() || x.shape().size() != y.shape().size() ||
        !std::equal(x.shape().begin() + 1, x.shape().end(), y.shape().begin() + 1) ||
        !same_for_the_model(x.parameters(), y.parameters(), transport_parameter)) {
      return false;
    }
  }
  return true;
}

// Where each row of a tensor starts in its bytes, plus the end: fixed-size rows by arithmetic,
// BYTES rows by walking the elements' length prefixes.
std::vector<std::size_t> row_offsets(const tensor& t, std::uint64_t rows) {
  std::vector<std::size_t> offsets(rows + 1, 0);
  if (rows == 0) return offsets;
  const std::uint64_t per_row = t.element_count() / rows;
  if (t.type() != datatype::bytes) {
    const std::size_t row_bytes = per_row * element_size(t.type());
    for (std::uint64_t r = 0; r <= rows; ++r) offsets[r] = r * row_bytes;
    return offsets;
  }
  std::size_t at = 0;
  std::uint64_t element = 0;
  for (std::string_view value : t.strings()) {
    at += 4 + value.size();
    if (++element % per_row == 0) offsets[element / per_row] = at;
  }
  return offsets;
}

// Splits `t`, an output of a batch of `total` rows, into each request's rows, appended to the
// request's `into` (its outputs, or the classes that the model ranked).
status split_rows(const tensor& t, const std::vector<batch_item>& items, std::uint64_t total,
                  std::string_view model_name, std::vector<model_output>& parts,
                  std::vector<tensor> model_output::*into) {
  if (t.shape().empty() || t.shape()[0] != static_cast<std::int64_t>(total)) {
    return status{errc::internal,
                  fmt::format("model '{}' returned output '{}' of shape {} for a batch of {} "
                              "rows",
                              model_name, t.name(), to_string(t.shape()), total)};
  }
  if (status s = check_in_host_memory(model_name, t); !s.ok()) return s;
  const std::vector<std::size_t> offsets = row_offsets(t, total);
  std::uint64_t row = 0;
  for (std::size_t j = 0; j < items.size(); ++j) {
    const std::uint64_t rows = items[j].pending->batch;
    const std::size_t begin = offsets[row];
    result<buffer> slice = t.data().slice(begin, offsets[row + rows] - begin);
    if (!slice) return std::move(slice).error();
    shape_type shape = t.shape();
    shape[0] = static_cast<std::int64_t>(rows);
    result<tensor> part = tensor::make(t.name(), t.type(), std::move(shape), std::move(*slice));
    if (!part) return std::move(part).error();
    part->parameters() = t.parameters();
    (parts[j].*into).push_back(std::move(*part));
    row += rows;
  }
  return {};
}

}  // namespace

std::uint64_t priority_level(const model_config& config, const parameters& request) {
  const std::uint64_t levels = config.batching.priority_levels;
  if (levels == 0) return 0;
  std::uint64_t asked = 0;  // a negative priority was refused before the request got here
  if (const auto* given = request.get<std::uint64_t>("priority")) asked = *given;
  if (const auto* given = request.get<std::int64_t>("priority"); given != nullptr && *given > 0)
    asked = static_cast<std::uint64_t>(*given);
  return asked == 0 || asked > levels ? config.batching.default_priority_level : asked;
}

const queue_policy& queue_policy_of(const model_config::batching_settings& settings,
                                    std::uint64_t level) {
  for (const auto& [policy_level, policy] : settings.priority_queue_policy) {
    if (policy_level == level) return policy;
  }
  return settings.default_queue_policy;
}

result<inference_request> merge(const std::vector<batch_item>& items) {
  inference_request merged;
  merged.parameters = model_side_of(items.front().request->parameters, server_parameter);
  merged.outputs = items.front().request->outputs;
  for (requested_output& output : merged.outputs)
    output.parameters = model_side_of(output.parameters, transport_parameter);
  const std::vector<tensor>& first = items.front().request->inputs;
  for (std::size_t i = 0; i < first.size(); ++i) {
    std::size_t bytes = 0;
    std::int64_t rows = 0;
    for (const batch_item& item : items) {
      bytes += item.request->inputs[i].data().size();
      rows += item.request->inputs[i].shape()[0];
    }
    result<mutable_buffer> joined = mutable_buffer::allocate_for_overwrite(bytes);
    if (!joined) return std::move(joined).error();
    std::size_t at = 0;
    for (const batch_item& item : items) {
      const buffer& part = item.request->inputs[i].data();
      if (!part.empty()) std::memcpy(joined->data() + at, part.data(), part.size());
      at += part.size();
    }
    shape_type shape = first[i].shape();
    shape[0] = rows;
    result<tensor> input =
        tensor::make(first[i].name(), first[i].type(), std::move(shape), std::move(*joined));
    if (!input) return std::move(input).error();
    input->parameters() = model_side_of(first[i].parameters(), transport_parameter);
    merged.inputs.push_back(std::move(*input));
  }
  return merged;
}

result<std::vector<model_output>> split(model_output&& batch, const std::vector<batch_item>& items,
                                        std::string_view model_name) {
  std::uint64_t total = 0;
  for (const batch_item& item : items) total += item.pending->batch;
  std::vector<model_output> parts(items.size());
  for (model_output& part : parts) part.parameters = batch.parameters;
  const auto split_each = [&](const std::vector<tensor>& batched,
                              std::vector<tensor> model_output::*into) -> status {
    for (const tensor& t : batched) {
      if (status s = split_rows(t, items, total, model_name, parts, into); !s.ok()) return s;
    }
    return {};
  };
  if (status s = split_each(batch.outputs, &model_output::outputs); !s.ok()) return s;
  if (status s = split_each(batch.classified, &model_output::classified); !s.ok()) return s;
  return parts;
}

batch_queue::batch_queue(const model_config& config, run_function run, fail_function fail)
    : model_name_{config.name},
      max_rows_{static_cast<std::uint64_t>(config.max_batch_size)},
      settings_{config.batching},
      run_{std::move(run)},
      fail_{std::move(fail)} {
  settings_.instances = std::max<std::size_t>(settings_.instances, 1);
  // A delay of about a year stands for any longer one ("wait for a full batch"): the deadline,
  // a request's arrival plus the delay, must stay within the clock's range.
  constexpr std::chrono::microseconds about_a_year = std::chrono::hours{24 * 366};
  settings_.max_queue_delay = std::min(settings_.max_queue_delay, about_a_year);
  // The same for a queue timeout: it stands for any longer one.
  settings_.default_queue_policy.default_timeout =
      std::min(settings_.default_queue_policy.default_timeout, about_a_year);
  for (auto& [level, policy] : settings_.priority_queue_policy) {
    policy.default_timeout = std::min(policy.default_timeout, about_a_year);
  }
}

status batch_queue::enqueue(batch_item item) {
  {
    const std::lock_guard lock{mutex_};
    if (stopping_) {
      return status{errc::unavailable,
                    fmt::format("model '{}' is no longer taking requests", model_name_)};
    }
    // Triton's words lead: its clients look for them.
    if (queue_.size() >= settings_.max_queue_size) {
      return status{errc::unavailable,
                    fmt::format("Exceeds maximum queue size: the batch queue of model '{}' is "
                                "full ({} requests waiting)",
                                model_name_, queue_.size())};
    }
    const std::uint64_t level = item.pending->priority_level;
    const queue_policy& policy = queue_policy_of(settings_, level);
    if (policy.max_queue_size > 0) {
      const auto at_level = static_cast<std::size_t>(std::count_if(
          queue_.begin(), queue_.end(),
          [level](const waiting& w) { return w.item.pending->priority_level == level; }));
      if (at_level >= policy.max_queue_size) {
        return status{errc::unavailable,
                      fmt::format("Exceeds maximum queue size: the batch queue of model '{}' is "
                                  "full at priority level {} ({} requests waiting)",
                                  model_name_, level, at_level)};
      }
    }
    waiting entry{.item = std::move(item), .on_timeout = policy.on_timeout};
    std::chrono::microseconds timeout = policy.default_timeout;
    const auto* asked = policy.allow_timeout_override && timeout.count() > 0
                            ? entry.item.request->parameters.get<std::int64_t>("timeout")
                            : nullptr;
    if (asked != nullptr && *asked > 0 && std::chrono::microseconds{*asked} < timeout) {
      timeout = std::chrono::microseconds{*asked};
    }
    if (timeout.count() > 0) entry.times_out = entry.item.pending->queued + timeout;
    // Behind the requests of its level and above, ahead of those below and of its level's
    // delayed ones.
    auto at = queue_.end();
    while (at != queue_.begin() &&
           (std::prev(at)->item.pending->priority_level > level ||
            (std::prev(at)->item.pending->priority_level == level && std::prev(at)->delayed))) {
      --at;
    }
    queue_.insert(at, std::move(entry));
  }
  wake_.notify_one();
  return {};
}

void batch_queue::finished() {
  {
    const std::lock_guard lock{mutex_};
    --running_;
  }
  wake_.notify_one();
}

void batch_queue::stop() {
  std::deque<waiting> left;
  {
    const std::lock_guard lock{mutex_};
    stopping_ = true;
    left.swap(queue_);
  }
  wake_.notify_all();
  for (const waiting& w : left) {
    fail_(w.item,
          status{errc::unavailable,
                 fmt::format("model '{}' stopped batching before the request ran", model_name_)});
  }
}

void batch_queue::loop(const std::shared_ptr<batch_queue>& self) {
  std::unique_lock lock{mutex_};
  while (!stopping_) {
    if (queue_.empty()) {
      wake_.wait(lock);
      continue;
    }
    const clock::time_point now = clock::now();
    delay_timed_out(now);
    std::vector<leaving> left;
    try {
      left = take_leaving(now);
    } catch (const std::bad_alloc&) {
      // No memory for the list (nothing was taken): one at a time, which needs none, or the
      // deadlines below, already past, would wake this thread at once for ever.
      const auto first = std::find_if(queue_.begin(), queue_.end(), [now](const waiting& w) {
        return leaves_because(w, now) != nullptr;
      });
      if (first != queue_.end()) {
        status (*const why)() = leaves_because(*first, now);
        const batch_item one = std::move(first->item);
        queue_.erase(first);
        lock.unlock();
        refuse(one, why);
        lock.lock();
        continue;
      }
    }
    if (!left.empty()) {
      lock.unlock();
      for (const leaving& one : left) refuse(one.item, one.why);
      left.clear();
      lock.lock();
      continue;
    }
    // Woken by a request's deadline too, so that it is answered then, not when a batch forms
    // (within a day: a wait to the clock's far end is one some C++ libraries get wrong).
    const clock::time_point next_deadline =
        std::min(earliest_deadline(), clock::now() + std::chrono::hours{24});
    if (running_ >= settings_.instances) {
      wake_.wait_until(lock, next_deadline);
      continue;
    }
    const auto [count, can_grow, oldest] = next_batch();
    const clock::time_point deadline = oldest + settings_.max_queue_delay;
    if (can_grow && clock::now() < deadline) {
      wake_.wait_until(lock, std::min(deadline, next_deadline));
      continue;
    }
    std::vector<batch_item> batch;
    try {
      batch.reserve(count);
    } catch (const std::bad_alloc&) {
      // No memory to form the batch (this thread must not end on it): its first request is
      // refused, and the queue goes on.
      const batch_item first = std::move(queue_.front().item);
      queue_.pop_front();
      lock.unlock();
      refuse(first, [] { return out_of_memory("forming the batch"); });
      lock.lock();
      continue;
    }
    const auto end = queue_.begin() + static_cast<std::ptrdiff_t>(count);
    for (auto it = queue_.begin(); it != end; ++it) batch.push_back(std::move(it->item));
    queue_.erase(queue_.begin(), end);
    ++running_;
    lock.unlock();
    run_(self, std::move(batch));
    lock.lock();
  }
}

void batch_queue::delay_timed_out(clock::time_point now) {
  std::size_t i = 0;
  while (i < queue_.size()) {
    waiting& w = queue_[i];
    if (w.on_timeout != queue_policy::timeout_action::delay || w.times_out > now) {
      ++i;
      continue;
    }
    w.delayed = true;
    w.times_out = clock::time_point::max();
    // To the end of its level: behind its level's delayed ones, which were delayed before it.
    const std::uint64_t level = w.item.pending->priority_level;
    const auto from = queue_.begin() + static_cast<std::ptrdiff_t>(i);
    const auto level_end = std::find_if(from, queue_.end(), [level](const waiting& other) {
      return other.item.pending->priority_level > level;
    });
    std::rotate(from, from + 1, level_end);
    // The request now at `i` came after it: it is looked at next.
    if (from + 1 == level_end) ++i;
  }
}

status (*batch_queue::leaves_because(const waiting& w, clock::time_point now))() {
  // The service answers a cancelled one as cancelled by its client or its timeout.
  if (w.item.pending->cancel.cancelled()) {
    return [] { return status{errc::unavailable, "the request was cancelled"}; };
  }
  if (w.on_timeout == queue_policy::timeout_action::reject && w.times_out <= now) {
    return [] { return status{errc::unavailable, "Request timeout expired"}; };  // Triton's
  }
  return nullptr;
}

std::vector<batch_queue::leaving> batch_queue::take_leaving(clock::time_point now) {
  std::vector<leaving> left;
  if (std::none_of(queue_.begin(), queue_.end(),
                   [now](const waiting& w) { return leaves_because(w, now) != nullptr; })) {
    return left;
  }
  // Each request's state is read once more and kept (a deadline may pass meanwhile), and every
  // allocation is made before a request moves, so that a failed one leaves the queue as it was.
  std::vector<status (*)()> why(queue_.size());
  std::size_t count = 0;
  for (std::size_t i = 0; i < queue_.size(); ++i) {
    why[i] = leaves_because(queue_[i], now);
    count += why[i] != nullptr ? 1 : 0;
  }
  if (count == 0) return left;
  left.reserve(count);
  std::size_t kept = 0;  // the rest keep their order
  for (std::size_t i = 0; i < queue_.size(); ++i) {
    if (why[i] != nullptr) {
      left.push_back({std::move(queue_[i].item), why[i]});
    } else {
      if (kept != i) queue_[kept] = std::move(queue_[i]);
      ++kept;
    }
  }
  queue_.erase(queue_.begin() + static_cast<std::ptrdiff_t>(kept), queue_.end());
  return left;
}

batch_queue::clock::time_point batch_queue::earliest_deadline() const {
  clock::time_point earliest = clock::time_point::max();
  for (const waiting& w : queue_) {
    earliest = std::min(earliest, w.times_out);
    if (const auto deadline = w.item.pending->cancel.deadline()) {
      earliest = std::min(earliest, *deadline);
    }
  }
  return earliest;
}

void batch_queue::refuse(const batch_item& item, status (*why)()) noexcept {
  try {
    fail_(item, why());
  } catch (const std::bad_alloc&) {
    // Not even the refusal could be sent: the request is left to its client's deadline or
    // disconnect, and the queue goes on.
  }
}

batch_queue::candidate batch_queue::next_batch() const {
  std::uint64_t rows = 0;
  std::size_t count = 0;
  const batch_item& front = queue_.front().item;
  clock::time_point oldest = front.pending->queued;
  std::size_t preferred = 0;  // requests in the largest prefix of a preferred size
  const auto is_preferred = [&](std::uint64_t n) {
    return std::find(settings_.preferred_batch_sizes.begin(), settings_.preferred_batch_sizes.end(),
                     n) != settings_.preferred_batch_sizes.end();
  };
  bool can_grow = true;
  for (const waiting& w : queue_) {
    const batch_item& item = w.item;
    // One instance may serve two versions of a model: their requests are not one batch.
    if ((count > 0 && (item.pending->lease.version() != front.pending->lease.version() ||
                       !batchable_together(*front.request, *item.request))) ||
        rows + item.pending->batch > max_rows_) {
      can_grow = false;
      break;
    }
    rows += item.pending->batch;
    ++count;
    oldest = std::min(oldest, item.pending->queued);
    if (is_preferred(rows)) preferred = count;
  }
  if (preferred > 0) return {preferred, false, oldest};
  return {count, can_grow && rows < max_rows_, oldest};
}

batcher::batcher(std::shared_ptr<batch_queue> queue)
    : queue_{std::move(queue)}, thread_{[queue = queue_] { queue->loop(queue); }} {}

batcher::~batcher() {
  queue_->stop();
  if (thread_.get_id() == std::this_thread::get_id()) {
    thread_.detach();  // the thread holds the queue and ends once this returns
  } else {
    thread_.join();
  }
}

}  // namespace oip::detail
