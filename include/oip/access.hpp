#pragma once
/// \file
/// Restricted APIs, as Triton's `--http-restricted-api` and `--grpc-restricted-protocol`: the
/// requests of some categories (the model repository, shared memory, ...) must carry a header with
/// an exact value, an administrator's key for instance. Nothing is restricted by default.

#include <oip/export.hpp>
#include <oip/status.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace oip {

/// Triton's categories: which routes and RPCs each covers is in docs/protocol-coverage.md
/// ("Restricted APIs").
enum class api_category : std::uint8_t {
  health,
  metadata,
  inference,
  shared_memory,
  model_config,
  model_repository,
  statistics,
  trace,
  logging,
  /// oip's own: every route of the OpenAI-compatible front end (`/v1/...`, `oip/openai.hpp`).
  openai,
};
inline constexpr std::size_t api_category_count = 10;

/// Triton's names: "health", "metadata", "inference", "shared-memory", "model-config",
/// "model-repository", "statistics", "trace", "logging"; and "openai".
[[nodiscard]] OIP_EXPORT std::string_view to_string(api_category category) noexcept;

/// A header, and its exact value, that the requests of `categories` must carry.
struct api_restriction {
  std::vector<api_category> categories;
  std::string header;
  std::string value;
};

/// Reads Triton's `<category>[,<category>...]:<header>=<value>`; the value is everything after the
/// first `=` and may hold any character. 400 in Triton's words for a missing part or an unknown
/// category. `option` names the command-line option in messages.
[[nodiscard]] OIP_EXPORT result<api_restriction> parse_api_restriction(
    std::string_view text, std::string_view option = "http-restricted-api");

/// The restrictions of one transport: at most one per category.
///
/// Example:
/// \code
///   oip::api_restrictions admin;
///   oip::status s = admin.add({{oip::api_category::model_repository}, "admin-key", "secret"});
///   const oip::api_restriction* needed = admin.of(oip::api_category::model_repository);
/// \endcode
class OIP_EXPORT api_restrictions {
 public:
  /// 400 when one of its categories is restricted already, or named twice (Triton's wording,
  /// with `what`: "api" over HTTP, "protocol" over gRPC), or when the header is empty. The header
  /// is matched as given (over gRPC, Triton's options prefix it with `triton-grpc-protocol-`).
  [[nodiscard]] status add(api_restriction restriction, std::string_view what = "api");
  /// What a request of `category` must carry, or null when the category is open.
  [[nodiscard]] const api_restriction* of(api_category category) const noexcept;
  [[nodiscard]] bool empty() const noexcept { return restrictions_.empty(); }

 private:
  std::vector<api_restriction> restrictions_;
  std::array<std::optional<std::size_t>, api_category_count> index_of_{};  // into restrictions_
};

/// The refusal of a request without the header that `restriction` names, in Triton's words:
/// 403 (gRPC PERMISSION_DENIED; Triton answers UNAVAILABLE there). `what` is "API" over HTTP and
/// "protocol" over gRPC.
[[nodiscard]] OIP_EXPORT status restricted(const api_restriction& restriction,
                                           std::string_view what = "API");

}  // namespace oip
