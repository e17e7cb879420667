// A reply body written as it is made: the parts between the handler, which pushes them as a
// model's responses come, and the transport, which writes one at a time.

#include <oip/http_handler.hpp>

#include <algorithm>
#include <condition_variable>
#include <utility>

namespace oip {

void http_body_stream::next(part_ready ready) {
  std::optional<std::string> part;
  {
    const std::lock_guard lock{mutex_};
    if (part_out_) {
      part_out_ = false;
      backlog_.written();
    }
    if (parts_.empty() && !ended_ && !abandoned_) {
      waiting_ = std::move(ready);
      return;
    }
    if (!parts_.empty() && !abandoned_) {
      part = std::move(parts_.front());
      parts_.pop_front();
      part_out_ = true;
      waiting_bytes_.shrink_to(waiting_bytes_.bytes() -
                               std::min(waiting_bytes_.bytes(), part->size()));
    }
  }
  ready(std::move(part));
}

void http_body_stream::abandon() noexcept {
  part_ready waiting;
  {
    const std::lock_guard lock{mutex_};
    abandoned_ = true;
    parts_.clear();
    waiting_bytes_.release();
    waiting = std::move(waiting_);
  }
  backlog_.close();
  if (waiting) waiting(std::nullopt);
}

void http_body_stream::push(std::string part) {
  part_ready waiting;
  {
    const std::lock_guard lock{mutex_};
    if (abandoned_ || ended_) return;
    backlog_.add();
    if (!waiting_) {
      waiting_bytes_.add(part.size());
      parts_.push_back(std::move(part));
      return;
    }
    waiting = std::move(waiting_);
    part_out_ = true;
  }
  waiting(std::move(part));
}

std::shared_ptr<open_trace> http_body_stream::take_trace() {
  const std::lock_guard lock{mutex_};
  return std::move(sampled_);
}

void http_body_stream::count_against(memory_budget::lease waiting) {
  const std::lock_guard lock{mutex_};
  waiting.add(waiting_bytes_.bytes());
  waiting_bytes_ = std::move(waiting);
}

void http_body_stream::end(std::shared_ptr<open_trace> sampled) {
  part_ready waiting;
  {
    const std::lock_guard lock{mutex_};
    ended_ = true;
    sampled_ = std::move(sampled);
    waiting = std::move(waiting_);
  }
  if (waiting) waiting(std::nullopt);
}

std::string http_body_stream::read_all() {
  struct slot {
    std::mutex mutex;
    std::condition_variable filled;
    bool ready = false;
    std::optional<std::string> part;
  };
  slot taken;
  std::string body;
  for (;;) {
    {
      const std::lock_guard lock{taken.mutex};
      taken.ready = false;
    }
    next([&taken](std::optional<std::string> part) {
      const std::lock_guard lock{taken.mutex};
      taken.part = std::move(part);
      taken.ready = true;
      taken.filled.notify_one();
    });
    std::unique_lock lock{taken.mutex};
    taken.filled.wait(lock, [&] { return taken.ready; });
    if (!taken.part) return body;
    body += *taken.part;
  }
}

}  // namespace oip
