#pragma once

/// The sequence extension: correlation ids, the control values a stateful model sees, and the
/// sequence manager that keeps each sequence's requests in order and its state between them.

#include <oip/export.hpp>
#include <oip/model_config.hpp>
#include <oip/parameters.hpp>
#include <oip/status.hpp>

#include <any>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

namespace oip {

/// A correlation id: an unsigned integer or a string (`sequence(string_id)`). As in Triton, the
/// integer 42 and the string "42" are different sequences. 0 and "" mean "no sequence".
class OIP_EXPORT sequence_id {
 public:
  sequence_id() noexcept = default;
  // Implicit, so that an integer id reads as one: `{42, true, false}` for flags.
  // NOLINTNEXTLINE(google-explicit-constructor)
  sequence_id(std::uint64_t number) noexcept : value_{number} {}
  explicit sequence_id(std::string text) noexcept : value_{std::move(text)} {}

  [[nodiscard]] bool is_string() const noexcept { return value_.index() == 1; }
  [[nodiscard]] std::uint64_t number() const noexcept {
    const auto* n = std::get_if<std::uint64_t>(&value_);
    return n != nullptr ? *n : 0;
  }
  [[nodiscard]] std::string_view text() const noexcept {
    const auto* s = std::get_if<std::string>(&value_);
    return s != nullptr ? std::string_view{*s} : std::string_view{};
  }
  /// 0 or "": not a sequence id.
  [[nodiscard]] bool empty() const noexcept { return is_string() ? text().empty() : number() == 0; }
  /// The decimal number or the string itself, as messages show it.
  [[nodiscard]] std::string to_string() const;

  friend bool operator==(const sequence_id&, const sequence_id&) = default;
  /// Integers before strings; orders ids in a map.
  friend bool operator<(const sequence_id& a, const sequence_id& b) noexcept {
    return a.value_ < b.value_;
  }

 private:
  std::variant<std::uint64_t, std::string> value_;
};

/// A request's sequence parameters: `sequence_id`, `sequence_start`, `sequence_end`.
struct sequence_flags {
  sequence_id id;
  bool start = false;
  bool end = false;
};

/// Reads the sequence parameters of a request (absent ones are 0 / false). An id of the wrong
/// type, a negative integer id, a string id longer than `max_string_length` or a flag that is no
/// boolean is a 400.
[[nodiscard]] OIP_EXPORT result<sequence_flags> read_sequence_flags(
    const parameters& request_parameters, std::size_t max_string_length = 128);

/// One request's place in its sequence, as the model sees it: the control values and the state
/// the sequence keeps between its requests (empty on START; the model puts what it likes there).
struct sequence_step {
  sequence_id id;
  bool start = false;
  bool end = false;
  bool ready = true;
  std::any* state = nullptr;
  /// The sequence was cancelled before this request's turn (`sequence_turn::cancel_sequence`):
  /// the request must fail without running; `state` is null.
  bool cancelled = false;
};

/// Why a sequence's state was let go.
enum class sequence_release : std::uint8_t {
  ended,      ///< its END request completed
  restarted,  ///< a START arrived for the same id: the old sequence ends early
  timed_out,  ///< no request for `max_idle`
  shut_down,  ///< the manager was destroyed
  cancelled,  ///< a request of it was cancelled (or timed out) before it ran
};

[[nodiscard]] OIP_EXPORT std::string_view to_string(sequence_release reason) noexcept;

namespace detail {
struct sequence_table;
struct sequence_entry;
struct sequence_reaper;
}  // namespace detail

/// The right to run one request of a sequence: while it is held, no other request of the same
/// sequence runs. Releasing it (or destroying it) lets the next one start.
class OIP_EXPORT sequence_turn {
 public:
  sequence_turn() noexcept = default;
  sequence_turn(std::shared_ptr<detail::sequence_table> table,
                std::shared_ptr<detail::sequence_entry> entry, sequence_step step) noexcept;
  sequence_turn(sequence_turn&&) noexcept;
  sequence_turn& operator=(sequence_turn&&) noexcept;
  sequence_turn(const sequence_turn&) = delete;
  sequence_turn& operator=(const sequence_turn&) = delete;
  ~sequence_turn();

  [[nodiscard]] const sequence_step& step() const noexcept { return step_; }
  [[nodiscard]] sequence_step& step() noexcept { return step_; }
  [[nodiscard]] explicit operator bool() const noexcept { return entry_ != nullptr; }

  /// Ends this request's turn (the END request's turn also releases the state).
  void release() noexcept;

  /// Ends the sequence with this request, which was cancelled (or timed out) before it ran, as
  /// Triton does: the state is released (`cancelled`), the requests queued behind it up to a new
  /// START get turns marked `cancelled`, and a later request without START is refused. Then ends
  /// the turn.
  void cancel_sequence() noexcept;

  /// For a request that will not run (refused before it ran: the server was overloaded or
  /// stopping): ends its turn, leaving the sequence as if the request had never come, so that the
  /// client may send it again; the state is kept, and an END that did not run leaves the sequence
  /// open. False, with the turn still held, where the sequence cannot go on without the request:
  /// a START (its state is gone), a request that others already wait behind (they would miss its
  /// step), a sequence already cancelled, or one whose manager is gone. Answer the request, then
  /// `cancel_sequence()`.
  [[nodiscard]] bool withdraw() noexcept;

 private:
  std::shared_ptr<detail::sequence_table> table_;
  std::shared_ptr<detail::sequence_entry> entry_;
  sequence_step step_;
};

/// Tracks the active sequences of one model: checks each request against the rules (Triton's
/// wording), hands requests of a sequence their turns in arrival order, keeps each sequence's
/// state until END, a restart or the idle timeout, and tells the model when it lets one go.
///
/// Example:
/// \code
///   oip::sequence_manager sequences{"accumulator", {}, [](const oip::sequence_id& id, std::any&,
///                                                        oip::sequence_release why) { ... }};
///   oip::status s = sequences.submit({42, true, false}, [](oip::sequence_turn turn) {
///     auto& sum = *turn.step().state;  // ... run the request, then let the next one go:
///     turn.release();
///   });
/// \endcode
class OIP_EXPORT sequence_manager {
 public:
  using release_callback =
      std::function<void(const sequence_id&, std::any& state, sequence_release reason)>;
  using run_callback = std::function<void(sequence_turn)>;

  sequence_manager(std::string model_name, sequence_config config,
                   release_callback on_release = {});
  sequence_manager(const sequence_manager&) = delete;
  sequence_manager& operator=(const sequence_manager&) = delete;
  /// Releases every sequence still active (`shut_down`): the idle ones at once, the others once
  /// their requests already admitted are done (turns still held stay valid).
  ~sequence_manager();

  /// Admits one request of `batch_size` rows: a 400 for a request that breaks the rules, a 503
  /// above the limits. Otherwise `run` is called with the request's turn once the sequence's
  /// earlier requests have released theirs: at once on this thread when none is pending, else on
  /// the thread that releases the previous turn.
  [[nodiscard]] status submit(const sequence_flags& flags, run_callback run,
                              std::uint64_t batch_size = 1);

  /// Sequences with state held or requests pending.
  [[nodiscard]] std::size_t active() const;

  /// Releases the sequences idle for longer than `max_idle` (`timed_out`); returns how many. A
  /// background thread calls it; hosts and tests may too.
  std::size_t release_idle();

  [[nodiscard]] const sequence_config& config() const noexcept;

 private:
  std::shared_ptr<detail::sequence_table> table_;
  std::shared_ptr<detail::sequence_reaper> reaper_;  // its thread holds it too
};

}  // namespace oip
