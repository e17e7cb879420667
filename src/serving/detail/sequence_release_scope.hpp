#pragma once
// Marks the thread while a model's `release_sequence` runs. A host's wait for a model change made
// from there could wait on itself: an unload or reload of the same model lets go of the model's
// sequences on the model-control thread, and that waits for the thread that runs the release
// (the sequence manager's reaper). Such a wait is refused instead (`model_control`).

namespace oip::detail {

/// Whether the calling thread is running a model's `release_sequence`.
[[nodiscard]] bool in_sequence_release() noexcept;

class sequence_release_scope {
 public:
  sequence_release_scope() noexcept;
  sequence_release_scope(const sequence_release_scope&) = delete;
  sequence_release_scope& operator=(const sequence_release_scope&) = delete;
  ~sequence_release_scope();

 private:
  bool outer_;  // a release made from within another (nested managers) leaves the mark as it was
};

}  // namespace oip::detail
