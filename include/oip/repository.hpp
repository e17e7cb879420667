#pragma once
/// \file
/// The models a server holds, by name and version, safe to change while requests are in flight.

#include <oip/export.hpp>
#include <oip/model.hpp>
#include <oip/parameters.hpp>
#include <oip/statistics.hpp>
#include <oip/status.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace oip {

namespace detail {
struct model_slot;
struct repository_state;
}  // namespace detail

/// A model version held for one request: the model cannot be unloaded from under it. Cheap to
/// move; releasing the last lease of a draining model completes its unload.
class OIP_EXPORT model_lease {
 public:
  model_lease() = default;
  model_lease(std::shared_ptr<detail::repository_state> repository,
              std::shared_ptr<detail::model_slot> slot) noexcept;
  model_lease(model_lease&&) noexcept;
  model_lease& operator=(model_lease&&) noexcept;
  model_lease(const model_lease&) = delete;
  model_lease& operator=(const model_lease&) = delete;
  ~model_lease();

  [[nodiscard]] model& get() const noexcept;
  [[nodiscard]] const std::shared_ptr<model>& shared() const noexcept;
  [[nodiscard]] std::uint64_t version() const noexcept;
  [[nodiscard]] model_statistics& statistics() const noexcept;
  [[nodiscard]] explicit operator bool() const noexcept { return slot_ != nullptr; }

 private:
  void release() noexcept;
  std::shared_ptr<detail::repository_state> repository_;
  std::shared_ptr<detail::model_slot> slot_;
};

/// What the repository extension's load and unload routes call, when the host provides one and
/// allows clients to (`server_options::model_control`).
class OIP_EXPORT model_loader {
 public:
  model_loader() = default;
  model_loader(const model_loader&) = delete;
  model_loader& operator=(const model_loader&) = delete;
  virtual ~model_loader();
  /// Models the host could load, by name (shown by the index as UNAVAILABLE until loaded). It
  /// answers the index and screens every load, so it names models without building any; a load of
  /// a name it does not list is refused before `load` is called.
  [[nodiscard]] virtual std::vector<std::string> available() const = 0;
  /// Builds the model `name`; the repository registers it as version 1.
  [[nodiscard]] virtual result<std::shared_ptr<model>> load(std::string_view name) = 0;
  /// Builds `name` with the parameters of the client's load request (Triton's `config`, a model
  /// configuration in JSON, and `file:<path>` entries, each a string of the file's bytes, decoded
  /// from base64 when they came over HTTP). Called also to reload a model that is loaded. The
  /// default refuses any parameter with a 400, so that a configuration a loader cannot apply is
  /// never ignored, and calls `load(name)` otherwise.
  [[nodiscard]] virtual result<std::shared_ptr<model>> load_with(std::string_view name,
                                                                 const parameters& request);
};

/// The longest model name, in bytes: a file name's limit, as a model repository keeps each model
/// in a directory of its name.
inline constexpr std::size_t max_model_name_bytes = 255;

/// 400 for a name that no model may have: empty, longer than `max_model_name_bytes`, `.` or
/// `..`, or holding `/`, `\`, NUL or another control character (names that could step out of a
/// model repository's directory, as in Triton's CVE-2025-23316). Every route and RPC that names a
/// model is refused in this one wording, which does not repeat the name.
[[nodiscard]] OIP_EXPORT status check_model_name(std::string_view name);

/// A model version as the protocol writes it (a URL segment, a gRPC string field): empty for none
/// (the newest ready version), otherwise a positive integer, or a 400.
[[nodiscard]] OIP_EXPORT result<std::optional<std::uint64_t>> parse_model_version(
    std::string_view text);

/// Models by name and version. Versions are positive integers; without a version a request goes
/// to the highest ready version. Every member is thread-safe.
///
/// Removing a model lets the requests already holding it finish: until the last of them is done
/// the model is draining (new requests get 503), then it is gone (404).
///
/// Example:
/// \code
///   oip::model_repository repository;
///   (void)repository.add(oip::make_model(config, run));        // version 1
///   oip::result<oip::model_lease> m = repository.acquire("simple", std::nullopt);
/// \endcode
///
/// `add`, `replace`, `remove`, `acquire` and `find` refuse a bad name (`check_model_name`) with a
/// 400; `versions` and `wait_removed` find no model of such a name.
class OIP_EXPORT model_repository {
 public:
  model_repository();
  model_repository(const model_repository&) = delete;
  model_repository& operator=(const model_repository&) = delete;
  ~model_repository();

  /// Registers `m` under its configured name; 400 when that version is already there.
  [[nodiscard]] status add(std::shared_ptr<model> m, std::uint64_t version = 1);
  /// Registers `m` in place of the version there, if any (a reload): new requests go to `m` at
  /// once, requests that hold the model it replaces finish on it, and its statistics start again.
  [[nodiscard]] status replace(std::shared_ptr<model> m, std::uint64_t version = 1);
  /// Starts unloading one version, or every version; 404 when there is none.
  [[nodiscard]] status remove(std::string_view name,
                              std::optional<std::uint64_t> version = std::nullopt);
  /// Waits until `name` has no version left (draining included), up to `timeout`.
  [[nodiscard]] bool wait_removed(std::string_view name, std::chrono::milliseconds timeout) const;

  /// The model for one request: 404 unknown model or version, 503 draining or not ready.
  [[nodiscard]] result<model_lease> acquire(std::string_view name,
                                            std::optional<std::uint64_t> version) const;
  /// Like acquire, for metadata and statistics: not-ready and draining versions are returned.
  [[nodiscard]] result<model_lease> find(std::string_view name,
                                         std::optional<std::uint64_t> version) const;
  /// Every version of every model, by name then version.
  [[nodiscard]] std::vector<model_index_entry> index() const;
  /// The versions of `name`, ascending (empty when unknown).
  [[nodiscard]] std::vector<std::uint64_t> versions(std::string_view name) const;
  /// Whether every registered model version is ready (and none is draining).
  [[nodiscard]] bool all_ready() const;

  void set_loader(std::shared_ptr<model_loader> loader);
  [[nodiscard]] std::shared_ptr<model_loader> loader() const;

 private:
  std::shared_ptr<detail::repository_state> state_;
};

/// Triton's refusal (501, gRPC UNIMPLEMENTED) of a repository named by a load, an unload or a gRPC
/// index: a server has one.
[[nodiscard]] OIP_EXPORT status repository_name_refused();

/// Triton's message for a model (and version) that the repository does not hold.
[[nodiscard]] OIP_EXPORT status unknown_model(std::string_view name,
                                              std::optional<std::uint64_t> version);

}  // namespace oip
