#pragma once
/// \file
/// Errors without exceptions: `oip::status`, `oip::result<T>` and the one table that maps an error
/// code to an HTTP status and a gRPC code.

#include <oip/export.hpp>

#include <cassert>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

namespace oip {

/// What went wrong, in the protocol's terms. Each code maps to exactly one HTTP status and one
/// gRPC code (see `http_status` and `grpc_status`).
enum class errc : std::uint8_t {
  ok = 0,
  invalid_argument,         ///< 400: the client sent something malformed or inconsistent
  not_found,                ///< 404: unknown model, version or route
  method_not_allowed,       ///< 405
  length_required,          ///< 411: a body without a length
  payload_too_large,        ///< 413: a body or tensor above the host's limits
  uri_too_long,             ///< 414
  unsupported_media_type,   ///< 415: e.g. an unsupported Content-Encoding
  header_fields_too_large,  ///< 431
  internal,                 ///< 500: a fault of the server or the model, never of the client
  not_implemented,          ///< 501
  unavailable,              ///< 503: overloaded, draining or not ready
  forbidden,                ///< 403: a restricted API without its header (`oip/access.hpp`)
  /// 400, gRPC FAILED_PRECONDITION: a request the server's settings do not allow (a model load
  /// where model control is off); not a 503, which would invite retries that cannot succeed
  failed_precondition,
  /// 504, gRPC DEADLINE_EXCEEDED: a client's deadline passed before the reply came
  deadline_exceeded,
  /// 401, gRPC UNAUTHENTICATED: a request without the credentials asked for (an API key)
  unauthenticated,
  /// 400, gRPC ALREADY_EXISTS: a name already taken (a shared-memory region), as Triton answers
  already_exists,
};

/// The canonical gRPC status codes (the numbers are those of grpc::StatusCode).
enum class grpc_code : std::uint8_t {
  ok = 0,
  cancelled = 1,
  unknown = 2,
  invalid_argument = 3,
  deadline_exceeded = 4,
  not_found = 5,
  already_exists = 6,
  permission_denied = 7,
  resource_exhausted = 8,
  failed_precondition = 9,
  aborted = 10,
  out_of_range = 11,
  unimplemented = 12,
  internal = 13,
  unavailable = 14,
  data_loss = 15,
  unauthenticated = 16,
};

namespace detail {
struct errc_mapping {
  errc code;
  int http_status;
  grpc_code grpc;
  std::string_view name;
};

// The one table. Indexed by the numeric value of errc.
inline constexpr errc_mapping errc_table[] = {
    {errc::ok, 200, grpc_code::ok, "ok"},
    {errc::invalid_argument, 400, grpc_code::invalid_argument, "invalid_argument"},
    {errc::not_found, 404, grpc_code::not_found, "not_found"},
    {errc::method_not_allowed, 405, grpc_code::unimplemented, "method_not_allowed"},
    {errc::length_required, 411, grpc_code::invalid_argument, "length_required"},
    {errc::payload_too_large, 413, grpc_code::resource_exhausted, "payload_too_large"},
    {errc::uri_too_long, 414, grpc_code::invalid_argument, "uri_too_long"},
    {errc::unsupported_media_type, 415, grpc_code::invalid_argument, "unsupported_media_type"},
    {errc::header_fields_too_large, 431, grpc_code::resource_exhausted, "header_fields_too_large"},
    {errc::internal, 500, grpc_code::internal, "internal"},
    {errc::not_implemented, 501, grpc_code::unimplemented, "not_implemented"},
    {errc::unavailable, 503, grpc_code::unavailable, "unavailable"},
    {errc::forbidden, 403, grpc_code::permission_denied, "forbidden"},
    {errc::failed_precondition, 400, grpc_code::failed_precondition, "failed_precondition"},
    {errc::deadline_exceeded, 504, grpc_code::deadline_exceeded, "deadline_exceeded"},
    {errc::unauthenticated, 401, grpc_code::unauthenticated, "unauthenticated"},
    {errc::already_exists, 400, grpc_code::already_exists, "already_exists"},
};
}  // namespace detail

/// The HTTP status for an error code, e.g. 400 for `errc::invalid_argument`.
[[nodiscard]] constexpr int http_status(errc code) noexcept {
  return detail::errc_table[static_cast<std::size_t>(code)].http_status;
}

/// The gRPC status code for an error code, e.g. `grpc_code::invalid_argument` for 400.
[[nodiscard]] constexpr grpc_code grpc_status(errc code) noexcept {
  return detail::errc_table[static_cast<std::size_t>(code)].grpc;
}

/// The enumerator's name, e.g. "payload_too_large".
[[nodiscard]] constexpr std::string_view to_string(errc code) noexcept {
  return detail::errc_table[static_cast<std::size_t>(code)].name;
}

/// Where a client's error came from: a server's reply over HTTP or gRPC, whose status code the
/// error keeps as it was received (`status::received`), or nowhere (made here).
enum class received_over : std::uint8_t { none, http, grpc };

/// Success, or an error code with a message in Triton's wording.
///
/// Example:
/// \code
///   oip::status s{oip::errc::not_found, "Request for unknown model: 'x' is not found"};
///   s.http_status();  // 404
///   s.to_json();      // {"error":"Request for unknown model: 'x' is not found"}
/// \endcode
class [[nodiscard]] status {
 public:
  status() noexcept = default;
  status(errc code, std::string message) noexcept : code_{code}, message_{std::move(message)} {}

  [[nodiscard]] bool ok() const noexcept { return code_ == errc::ok; }
  [[nodiscard]] errc code() const noexcept { return code_; }
  [[nodiscard]] const std::string& message() const noexcept { return message_; }
  [[nodiscard]] int http_status() const noexcept { return oip::http_status(code_); }
  [[nodiscard]] grpc_code grpc_status() const noexcept { return oip::grpc_status(code_); }

  /// The protocol's error object, `{"error":"<message>"}`, always valid JSON (invalid UTF-8 in the
  /// message is replaced by U+FFFD).
  [[nodiscard]] OIP_EXPORT std::string to_json() const;

  /// A client's error from a server's reply keeps the reply's own code, which `code()` maps onto
  /// the nearest `errc` (an HTTP 429, a gRPC ABORTED have none of their own): an HTTP status, or a
  /// gRPC code's number. `received()` says which, or `none` for an error made on this side.
  [[nodiscard]] status received_as(received_over via, int code) && noexcept {
    received_ = via;
    received_code_ = code;
    return std::move(*this);
  }
  [[nodiscard]] received_over received() const noexcept { return received_; }
  /// The HTTP status or gRPC code as received; 0 when `received()` is `none`.
  [[nodiscard]] int received_code() const noexcept { return received_code_; }

  friend bool operator==(const status&, const status&) = default;

 private:
  errc code_ = errc::ok;
  received_over received_ = received_over::none;
  int received_code_ = 0;
  std::string message_;
};

/// A value of type T, or the status that explains why there is none.
///
/// Example:
/// \code
///   oip::result<std::uint64_t> n = oip::element_count(shape);
///   if (!n) return n.error();
///   use(*n);
/// \endcode
template <class T>
class [[nodiscard]] result {
  static_assert(!std::is_same_v<std::remove_cv_t<T>, status>, "use oip::status for no value");
  static_assert(!std::is_reference_v<T>, "result holds values");

 public:
  // NOLINTBEGIN(google-explicit-constructor): implicit conversions are the point of result.
  result(const T& value) : storage_{std::in_place_index<0>, value} {}
  result(T&& value) noexcept(std::is_nothrow_move_constructible_v<T>)
      : storage_{std::in_place_index<0>, std::move(value)} {}
  result(status error) : storage_{std::in_place_index<1>, std::move(error)} {
    // An ok status carries no value; keep the invariant "error() is never ok" in every build.
    if (std::get_if<1>(&storage_)->ok()) {
      storage_.template emplace<1>(errc::internal,
                                   "result built from an ok status without a value");
    }
  }
  result(errc code, std::string message) noexcept : result{status{code, std::move(message)}} {}
  // NOLINTEND(google-explicit-constructor)

  [[nodiscard]] bool ok() const noexcept { return storage_.index() == 0; }
  [[nodiscard]] explicit operator bool() const noexcept { return ok(); }

  [[nodiscard]] T& value() & noexcept { return checked_value(); }
  [[nodiscard]] const T& value() const& noexcept { return checked_value(); }
  [[nodiscard]] T&& value() && noexcept { return std::move(checked_value()); }
  [[nodiscard]] T& operator*() & noexcept { return checked_value(); }
  [[nodiscard]] const T& operator*() const& noexcept { return checked_value(); }
  [[nodiscard]] T&& operator*() && noexcept { return std::move(checked_value()); }
  [[nodiscard]] T* operator->() noexcept { return &checked_value(); }
  [[nodiscard]] const T* operator->() const noexcept { return &checked_value(); }

  /// The error; only valid when `!ok()`.
  [[nodiscard]] const status& error() const& noexcept {
    assert(!ok());
    return *std::get_if<1>(&storage_);
  }
  [[nodiscard]] status&& error() && noexcept {
    assert(!ok());
    return std::move(*std::get_if<1>(&storage_));
  }

  /// `status{}` when a value is held, the error otherwise.
  [[nodiscard]] status to_status() const { return ok() ? status{} : error(); }

 private:
  T& checked_value() noexcept {
    assert(ok());
    return *std::get_if<0>(&storage_);
  }
  const T& checked_value() const noexcept {
    assert(ok());
    return *std::get_if<0>(&storage_);
  }

  std::variant<T, status> storage_;
};

/// The answer to a request that met `std::bad_alloc`: a 503, since the server goes on and the
/// request may pass later, whatever the transport. `what` says where ("reading the request body").
/// Never throws: without memory for the message, the message is "out of memory".
[[nodiscard]] OIP_EXPORT status out_of_memory(std::string_view what) noexcept;

}  // namespace oip
