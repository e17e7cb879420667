// The HTTP client's reply parser (`reply_parser.hpp`).

#include "http/reply_parser.hpp"

#include <cstring>
#include <new>
#include <utility>

#include <boost/beast/http/error.hpp>
#include <boost/system/errc.hpp>

namespace oip::http::detail {

namespace {

// simdjson reads up to 64 bytes past the JSON: a body with this much after it is decoded in place.
constexpr std::size_t body_padding = 64;

// The parser's callbacks run inside Beast's, on the client's I/O thread too: an allocation that
// fails ends the read with this error, never with an exception.
boost::system::error_code out_of_memory() {
  return boost::system::errc::make_error_code(boost::system::errc::not_enough_memory);
}

}  // namespace

reply_parser::reply_parser(std::uint32_t max_header_bytes, std::uint64_t max_body_bytes) {
  header_limit(max_header_bytes);
  body_limit(max_body_bytes);
}

http_reply reply_parser::take() {
  http_reply out = std::move(reply_);
  reply_ = {};
  return out;
}

void reply_parser::on_response_impl(int code, string_view /*reason*/, int /*version*/,
                                    error_code& /*ec*/) {
  reply_.status = code;
  reply_.headers.reserve(8);
}

void reply_parser::on_field_impl(boost::beast::http::field /*name*/, string_view name_string,
                                 string_view value, error_code& ec) {
  try {
    reply_.headers.push_back({std::string{name_string.data(), name_string.size()},
                              std::string{value.data(), value.size()}});
  } catch (const std::bad_alloc&) {
    ec = out_of_memory();
  }
}

void reply_parser::on_body_init_impl(const boost::optional<std::uint64_t>& content_length,
                                     error_code& ec) {
  // The length is within the body limit here: the parser refused a longer one first.
  if (!content_length) return;
  result<mutable_buffer> storage = mutable_buffer::allocate_for_overwrite(
      static_cast<std::size_t>(*content_length), body_padding);
  if (!storage) {
    ec = out_of_memory();
    return;
  }
  sized_ = std::move(*storage);
  has_size_ = true;
}

std::size_t reply_parser::on_body_impl(string_view body, error_code& ec) {
  if (!has_size_) return append_unsized(body, ec);
  if (body.size() > sized_.size() - filled_) {  // the parser keeps to the length; never past it
    ec = boost::beast::http::error::body_limit;
    return 0;
  }
  std::memcpy(sized_.data() + filled_, body.data(), body.size());
  filled_ += body.size();
  return body.size();
}

std::size_t reply_parser::on_chunk_body_impl(std::uint64_t /*remain*/, string_view body,
                                             error_code& ec) {
  return append_unsized(body, ec);
}

std::size_t reply_parser::append_unsized(string_view body, error_code& ec) {
  try {
    unsized_.append(body.data(), body.size());
  } catch (const std::bad_alloc&) {
    ec = out_of_memory();
    return 0;
  }
  return body.size();
}

void reply_parser::on_finish_impl(error_code& ec) {
  try {
    if (has_size_) {
      reply_.body = buffer{std::move(sized_)};
    } else if (!unsized_.empty()) {
      reply_.body = buffer::from_string(std::move(unsized_));
    }
  } catch (const std::bad_alloc&) {
    ec = out_of_memory();
  }
}

}  // namespace oip::http::detail
