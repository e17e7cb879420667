#pragma once
// Reads an HTTP reply straight into an `oip::http_reply`: each header as it is parsed, and a body
// of announced length into one buffer of that size, with room after it for the JSON parser's
// padding so that the reply's JSON is read where it lies. Beast's `response_parser` would keep
// the headers in a container of its own and the body in a string, both copied out afterwards.

#include <oip/buffer.hpp>
#include <oip/http_client_protocol.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

#include <boost/beast/http/basic_parser.hpp>

namespace oip::http::detail {

class reply_parser final : public boost::beast::http::basic_parser<false> {
 public:
  // Replies whose header takes more than `max_header_bytes` or whose body more than
  // `max_body_bytes` are refused (`error::header_limit`, `error::body_limit`); a reply there is
  // no memory for ends the read with `errc::not_enough_memory`.
  reply_parser(std::uint32_t max_header_bytes, std::uint64_t max_body_bytes);

  // The reply, once `is_done()`.
  [[nodiscard]] http_reply take();
  // Whether the reply read is an interim one (1xx, but not 101 Switching Protocols): a `100
  // Continue` or `103 Early Hints` that the final reply follows on the same connection.
  [[nodiscard]] bool interim() const noexcept {
    return reply_.status >= 100 && reply_.status < 200 && reply_.status != 101;
  }

 private:
  using string_view = boost::beast::string_view;
  using error_code = boost::beast::error_code;

  void on_request_impl(boost::beast::http::verb /*method*/, string_view /*method_str*/,
                       string_view /*target*/, int /*version*/, error_code& /*ec*/) override {}
  void on_response_impl(int code, string_view reason, int version, error_code& ec) override;
  void on_field_impl(boost::beast::http::field name, string_view name_string, string_view value,
                     error_code& ec) override;
  void on_header_impl(error_code& /*ec*/) override {}
  void on_body_init_impl(const boost::optional<std::uint64_t>& content_length,
                         error_code& ec) override;
  std::size_t on_body_impl(string_view body, error_code& ec) override;
  void on_chunk_header_impl(std::uint64_t /*size*/, string_view /*extensions*/,
                            error_code& /*ec*/) override {}
  std::size_t on_chunk_body_impl(std::uint64_t remain, string_view body, error_code& ec) override;
  void on_finish_impl(error_code& ec) override;
  std::size_t append_unsized(string_view body, error_code& ec);

  http_reply reply_;
  mutable_buffer sized_;  // a body of announced length
  std::size_t filled_ = 0;
  std::string unsized_;  // a chunked body, or one that ends with the connection
  bool has_size_ = false;
};

}  // namespace oip::http::detail
