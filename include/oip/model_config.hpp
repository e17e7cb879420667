#pragma once
/// \file
/// A model's configuration: what clients see of it (Triton's model configuration, the config
/// route) and the rules that its requests are checked and scheduled by.

#include <oip/metadata.hpp>
#include <oip/parameters.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace oip {

/// The type of correlation id a sequence model accepts (Triton's CORRID control data type).
enum class correlation_id_type : std::uint8_t { any, uint64, string };

/// What a sequence model declares (`model_config::sequence`, used when `sequence_batching` is set).
struct sequence_config {
  /// A sequence with no request for this long is released (Triton's
  /// `max_sequence_idle_microseconds`, 1 s by default).
  std::chrono::microseconds max_idle{1'000'000};
  /// Active sequences per model; a START beyond it is a 503 (gRPC UNAVAILABLE).
  std::size_t max_active = 1024;
  /// Requests of one sequence waiting for their turn; beyond it a 503.
  std::size_t max_waiting_per_sequence = 256;
  /// Requests waiting for their turn, all the model's sequences together (each holds its body);
  /// beyond it a 503.
  std::size_t max_waiting = 4096;
  correlation_id_type id_type = correlation_id_type::any;
  /// The control inputs the model configuration shows (Triton feeds them as tensors; oip hands
  /// their values to the model as a `sequence_step`). Empty: not declared.
  std::string start_input;
  std::string end_input;
  std::string ready_input;
  std::string correlation_input;
};

/// What one priority level of a batch queue does with a request that waits too long, and how
/// many requests it holds: Triton's `ModelQueuePolicy` (`model_config::batching_settings`).
struct queue_policy {
  enum class timeout_action : std::uint8_t {
    /// Answer the request 503 (gRPC UNAVAILABLE), "Request timeout expired".
    reject,
    /// Keep it, behind every request of its level that has not timed out; it still runs.
    delay,
  };
  timeout_action on_timeout = timeout_action::reject;
  /// How long a request may wait in the queue; zero: no limit.
  std::chrono::microseconds default_timeout{0};
  /// Under `delay`, a request's `timeout` parameter shortens `default_timeout` for that request
  /// (never lengthens it, and, as in Triton, does nothing where `default_timeout` is zero); it is
  /// otherwise ignored there. Under `reject` it makes no difference: a request's `timeout` is its
  /// deadline wherever it is, in this server (Triton's batcher heeds it only with this set).
  bool allow_timeout_override = false;
  /// Requests of the level waiting at once; one more is a 503. Zero: only the queue's own bound,
  /// `batching_settings::max_queue_size`.
  std::size_t max_queue_size = 0;

  friend bool operator==(const queue_policy&, const queue_policy&) = default;
};

/// What a model is: the metadata that clients see and the rules that requests are checked against.
///
/// Input and output shapes are given without the batch dimension, as in a Triton model
/// configuration's `dims`; -1 marks a variable dimension. When `max_batch_size` > 0 the model
/// batches: every input and output has a leading batch dimension of 1 to `max_batch_size`, and the
/// metadata route shows it as -1.
struct model_config {
  std::string name;
  std::string platform = "oip";
  std::int64_t max_batch_size = 0;
  std::vector<tensor_metadata> inputs;
  std::vector<tensor_metadata> outputs;
  /// Extra fields of the model metadata object (`properties`).
  oip::parameters properties;
  /// Class labels per output name, for the classification extension.
  std::vector<std::pair<std::string, std::vector<std::string>>> labels;
  /// Dynamic batching (for a model with `max_batch_size` > 0): requests wait in a per-model queue
  /// and are merged along the batch dimension into one execution of up to `max_batch_size` rows,
  /// and the outputs split back, row for row. Also shown by the config route, where perf_analyzer
  /// reads it to choose its mode.
  bool dynamic_batching = false;
  /// The batcher's settings, used when `dynamic_batching` is set.
  struct batching_settings {
    /// How long the oldest queued request may wait for others before its batch runs anyway.
    std::chrono::microseconds max_queue_delay{100};
    /// Requests waiting in the queue; one more is a 503. A bound is always kept: where Triton's 0
    /// means no bound, here it is refused when the model is added.
    std::size_t max_queue_size = 1024;
    /// Batches of this model running at once (Triton's instance count).
    std::size_t instances = 1;
    /// Batch sizes (rows) the model runs best at, as Triton's `preferred_batch_size`: when the
    /// requests at the front of the queue add up to one of them, the largest such batch runs at
    /// once; otherwise the batcher waits up to `max_queue_delay` for a fuller batch. Empty: only
    /// `max_batch_size` makes a batch run before the delay.
    std::vector<std::uint64_t> preferred_batch_sizes = {};
    /// Priority levels, as Triton's `priority_levels`: 0, requests are batched in arrival order;
    /// N, a request whose `priority` parameter is 1 to N waits behind the queued requests of its
    /// level and above only (1 is the highest), and one that gives 0, none or a number above N
    /// is at `default_priority_level`. Batches are formed in that order.
    std::uint64_t priority_levels = 0;
    /// The level of a request that names none: 1 to `priority_levels` where those are set.
    std::uint64_t default_priority_level = 0;
    /// The queue policy of a level without one of its own in `priority_queue_policy` (of the
    /// whole queue, without priority levels), as Triton's `default_queue_policy`.
    queue_policy default_queue_policy = {};
    /// Levels' own policies (Triton's `priority_queue_policy`): each level 1 to
    /// `priority_levels` at most once, in any order.
    std::vector<std::pair<std::uint64_t, queue_policy>> priority_queue_policy = {};
  } batching;
  /// The CUDA devices the model runs on, for Triton's `instance_group` in its configuration
  /// (`KIND_GPU` with these `gpus`; empty: `KIND_CPU`; `count` is `batching.instances`).
  std::vector<int> gpus = {};
  /// The model reads inputs from device memory: an input of a fixed-size datatype that a client
  /// placed in a CUDA shared-memory region on one of `gpus` reaches `execute` in place, a view of
  /// the client's device memory (`tensor::device()`, at the client's offset, which need not be
  /// aligned), with no copy through the host; so does a host's own input in device memory
  /// (`tensor::in_device_memory`) on one of `gpus`. Inputs of a dynamically batched request are
  /// in host memory (the batcher joins them there): a host's own device input to one, or to a
  /// model without this, is a 400. Inputs from regions of a request traced with its tensors are
  /// copied to the host too, so that the trace shows their values (a host's own device input
  /// shows none). An output must be in host memory: one in device memory fails its request with
  /// a 500 (a decoupled model's `send` returns that error).
  bool device_inputs = false;
  /// A stateful model: requests carry `sequence_id`/`sequence_start`/`sequence_end`, run one at a
  /// time per sequence in arrival order, and see their `sequence_step`
  /// (`inference_call::sequence`).
  bool sequence_batching = false;
  /// The sequence rules and limits, used when `sequence_batching` is set.
  sequence_config sequence;
  /// A decoupled model (Triton's `model_transaction_policy { decoupled: true }`): it answers a
  /// request with any number of responses, sent as they are made (`inference_call::send`), then
  /// completes. Its requests come by a stream (gRPC `ModelStreamInfer`, `generate_stream`, or
  /// `generate` when it gives exactly one response); HTTP `/infer` and gRPC `ModelInfer` refuse
  /// them. Not with `dynamic_batching`: a batch's responses could not be told apart.
  bool decoupled = false;
  /// Triton's response cache (`response_cache { enable: true }`): with the server's cache on
  /// (`server_options::response_cache_bytes`), a request the same as one this model instance
  /// answered before, in every input's name, bytes, shape and datatype, the parameters meant for
  /// the model and the outputs asked, is answered with a copy of that response, and the model does
  /// not run. (How a request is scheduled, how its tensors travel and its id do not count.) For
  /// models whose outputs depend on their inputs alone. Not with `sequence_batching` or
  /// `decoupled`. Not cached: requests with inputs in shared memory (the client could change them
  /// under the model) or device memory, with outputs in shared memory, or traced.
  bool response_cache = false;
  /// Run `execute` on the thread that received the request (a transport's I/O thread, or the
  /// host's thread that called the handler) instead of handing it to an executor worker. The
  /// hand-off wakes a sleeping worker: with oip-serve's `simple` it was 31 of the 40 µs that a
  /// request spent in the server (docs/performance.md). For a model whose `execute` returns
  /// within microseconds: a small CPU model, or one that only enqueues work and finishes the call
  /// later from its own thread. A model that blocks holds up every connection of that thread.
  /// Requests of sequences, dynamically batched requests and those of a decoupled model (whose
  /// sends may wait for a slow reader) still go through the executor.
  bool inline_execution = false;

  /// The labels of `output`, empty when it has none.
  [[nodiscard]] const std::vector<std::string>& labels_of(std::string_view output) const noexcept {
    static const std::vector<std::string> none;
    for (const auto& [output_name, list] : labels) {
      if (output_name == output) return list;
    }
    return none;
  }
  [[nodiscard]] const tensor_metadata* find_input(std::string_view input) const noexcept {
    for (const tensor_metadata& t : inputs) {
      if (t.name == input) return &t;
    }
    return nullptr;
  }
  [[nodiscard]] const tensor_metadata* find_output(std::string_view output) const noexcept {
    for (const tensor_metadata& t : outputs) {
      if (t.name == output) return &t;
    }
    return nullptr;
  }
};

}  // namespace oip
