#pragma once
// Reads an HTTP request's head straight into what the server hands the handler: each header field
// as it is parsed, and what the session checks of them (Host, Transfer-Encoding, Expect) noted on
// the way. Beast's `request_parser` would keep the fields in a container of its own, an allocation
// per field, to be searched and copied out afterwards. A chunked body is gathered here, its growth
// counted against the memory budget; a body of announced length is read by the session itself,
// past the parser (see `session::read_sized_body`).

#include <oip/http_handler.hpp>
#include <oip/memory_budget.hpp>
#include <oip/status.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <boost/beast/http/basic_parser.hpp>

namespace oip::http::detail {

class request_parser final : public boost::beast::http::basic_parser<true> {
 public:
  // A head above `max_header_bytes` or a body above `max_body_bytes` is refused
  // (`error::header_limit`, `error::body_limit`). A chunked body's buffer grows within `held`; a
  // growth the budget refuses, or an allocation the heap refuses, ends the read with
  // `errc::not_enough_memory`, and `refusal()` says why. The callbacks build no message on the
  // way (that could fail for want of memory too, inside Beast's parser).
  request_parser(std::uint32_t max_header_bytes, std::uint64_t max_body_bytes,
                 memory_budget::lease& held);

  // The request line, once read: kept when a later field fails, for the error's wording.
  [[nodiscard]] std::string_view target() const noexcept { return target_; }
  [[nodiscard]] boost::beast::http::verb method() const noexcept { return verb_; }
  [[nodiscard]] int version() const noexcept { return version_; }
  // Whether the connection stays open after the reply, from the header's Connection fields only
  // (RFC 9112, 9.3): not from a trailer, nor from the obsolete Proxy-Connection, which an HTTP/1.0
  // proxy passing it on would leave waiting for a close.
  [[nodiscard]] bool keeps_alive() const noexcept {
    return version_ >= 11 ? !connection_close_ : connection_keep_alive_;
  }

  // The header section (a chunked body's trailer fields are dropped: RFC 9110, 6.5.1, they are
  // not merged into it unless a field allows it, and none the server reads does).
  [[nodiscard]] std::size_t field_count() const noexcept { return fields_.size(); }
  [[nodiscard]] std::size_t host_fields() const noexcept { return host_fields_; }
  [[nodiscard]] bool has_content_length_field() const noexcept { return content_length_field_; }
  [[nodiscard]] bool expects_continue() const noexcept { return expects_continue_; }
  // Transfer-Encoding, all its fields' codings together.
  [[nodiscard]] std::size_t transfer_codings() const noexcept { return transfer_codings_; }
  [[nodiscard]] bool only_chunked_coding() const noexcept { return only_chunked_; }
  [[nodiscard]] std::string_view first_transfer_encoding() const noexcept {
    return first_transfer_encoding_ < fields_.size()
               ? std::string_view{fields_[first_transfer_encoding_].value}
               : std::string_view{};
  }

  // The chunk data read so far (not the chunks' size lines or extensions).
  [[nodiscard]] std::size_t chunked_body_bytes() const noexcept { return body_.size(); }

  // Why the read was refused with `errc::not_enough_memory`: the budget's 503, or out of memory;
  // ok otherwise.
  [[nodiscard]] status refusal() const {
    if (out_of_memory_) {
      return out_of_memory(is_header_done() ? "reading the request body"
                                            : "reading the request's head");
    }
    return over_budget_;
  }

  // What the handler is given; each may be taken once the head (the body: the message) is read.
  [[nodiscard]] std::string take_method() { return std::move(method_); }
  [[nodiscard]] std::string take_target() { return std::move(target_); }
  [[nodiscard]] std::vector<http_header> take_fields() { return std::move(fields_); }
  [[nodiscard]] std::string take_body() { return std::move(body_); }

 private:
  using string_view = boost::beast::string_view;
  using error_code = boost::beast::error_code;

  void on_request_impl(boost::beast::http::verb method, string_view method_str, string_view target,
                       int version, error_code& ec) override;
  void on_response_impl(int /*code*/, string_view /*reason*/, int /*version*/,
                        error_code& /*ec*/) override {}
  void on_field_impl(boost::beast::http::field name, string_view name_string, string_view value,
                     error_code& ec) override;
  void on_header_impl(error_code& /*ec*/) override {}
  void on_body_init_impl(const boost::optional<std::uint64_t>& /*content_length*/,
                         error_code& /*ec*/) override {}
  std::size_t on_body_impl(string_view body, error_code& ec) override;
  void on_chunk_header_impl(std::uint64_t /*size*/, string_view /*extensions*/,
                            error_code& /*ec*/) override {}
  std::size_t on_chunk_body_impl(std::uint64_t /*remain*/, string_view body,
                                 error_code& ec) override;
  void on_finish_impl(error_code& /*ec*/) override {}
  std::size_t append_body(string_view body, error_code& ec);
  void note_transfer_encoding(string_view value);
  void note_connection(string_view value);
  std::size_t refuse_for_memory(error_code& ec);

  memory_budget::lease& held_;
  std::uint64_t max_body_bytes_;
  std::string method_;
  std::string target_;
  boost::beast::http::verb verb_ = boost::beast::http::verb::unknown;
  int version_ = 11;
  std::vector<http_header> fields_;
  std::size_t host_fields_ = 0;
  std::size_t transfer_codings_ = 0;
  static constexpr std::size_t no_field = static_cast<std::size_t>(-1);
  std::size_t first_transfer_encoding_ = no_field;  // an index into fields_
  bool only_chunked_ = true;
  bool content_length_field_ = false;
  bool connection_close_ = false;
  bool connection_keep_alive_ = false;
  bool expect_seen_ = false;
  bool expects_continue_ = false;
  std::string body_;           // a chunked body
  std::size_t body_room_ = 0;  // what body_ may hold before it grows, counted in held_
  status over_budget_;
  bool out_of_memory_ = false;
};

}  // namespace oip::http::detail
