// The HTTP server's request parser (`request_parser.hpp`).

#include "http/request_parser.hpp"

#include "core/detail/reserve_exactly.hpp"

#include <algorithm>
#include <new>
#include <utility>

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/rfc7230.hpp>
#include <boost/system/errc.hpp>

namespace oip::http::detail {

namespace {

namespace bhttp = boost::beast::http;

// A chunked body has no announced length: its buffer grows from this, doubling, up to the body
// limit, each step counted in the budget before it is allocated.
constexpr std::size_t first_body_room = std::size_t{64} << 10U;

// The parser's callbacks run inside Beast's, on an I/O thread: a refusal ends the read with this
// error, never with an exception.
boost::system::error_code not_enough_memory() {
  return boost::system::errc::make_error_code(boost::system::errc::not_enough_memory);
}

}  // namespace

request_parser::request_parser(std::uint32_t max_header_bytes, std::uint64_t max_body_bytes,
                               memory_budget::lease& held)
    : held_{held}, max_body_bytes_{max_body_bytes} {
  header_limit(max_header_bytes);
  body_limit(max_body_bytes);
}

namespace {

// The origin form of a target (RFC 9112, 3.2): a server must accept the absolute form
// (`http://host:8000/v2/health/ready`), which a proxy sends, and route it by its path.
boost::beast::string_view origin_form(boost::beast::string_view target) {
  const auto scheme = [&](std::string_view name) {
    return target.size() > name.size() &&
           std::equal(name.begin(), name.end(), target.begin(), [](char a, char b) {
             return a == (b >= 'A' && b <= 'Z' ? static_cast<char>(b - 'A' + 'a') : b);
           });
  };
  std::size_t authority = 0;
  if (scheme("http://")) authority = 7;
  if (scheme("https://")) authority = 8;
  if (authority == 0) return target;
  const std::size_t path = target.find_first_of("/?", authority);
  if (path == boost::beast::string_view::npos) return "/";
  if (target[path] == '?') return "/";  // a query with no path: the root's
  return target.substr(path);
}

}  // namespace

void request_parser::on_request_impl(bhttp::verb method, string_view method_str, string_view target,
                                     int version, error_code& ec) {
  try {
    method_.assign(method_str.data(), method_str.size());
    target = origin_form(target);
    target_.assign(target.data(), target.size());
    fields_.reserve(8);
  } catch (const std::bad_alloc&) {
    refuse_for_memory(ec);
    return;
  }
  verb_ = method;
  version_ = version;
}

void request_parser::on_field_impl(bhttp::field name, string_view name_string, string_view value,
                                   error_code& ec) {
  if (is_header_done()) return;  // a trailer field: dropped
  switch (name) {
    case bhttp::field::connection: note_connection(value); break;
    case bhttp::field::host: ++host_fields_; break;
    case bhttp::field::content_length: content_length_field_ = true; break;
    case bhttp::field::transfer_encoding:
      if (first_transfer_encoding_ == no_field) first_transfer_encoding_ = fields_.size();
      note_transfer_encoding(value);
      break;
    case bhttp::field::expect:
      if (!expect_seen_) {  // the first Expect field is the one read
        expect_seen_ = true;
        expects_continue_ = boost::beast::iequals(value, "100-continue");
      }
      break;
    default: break;
  }
  try {
    fields_.push_back({std::string{name_string.data(), name_string.size()},
                       std::string{value.data(), value.size()}});
  } catch (const std::bad_alloc&) {
    refuse_for_memory(ec);
  }
}

void request_parser::note_connection(string_view value) {
  for (const auto& option : bhttp::token_list{value}) {
    if (boost::beast::iequals(option, "close")) connection_close_ = true;
    if (boost::beast::iequals(option, "keep-alive")) connection_keep_alive_ = true;
  }
}

std::size_t request_parser::refuse_for_memory(error_code& ec) {
  out_of_memory_ = true;
  ec = not_enough_memory();
  return 0;
}

void request_parser::note_transfer_encoding(string_view value) {
  for (const auto& coding : bhttp::token_list{value}) {
    ++transfer_codings_;
    only_chunked_ = only_chunked_ && boost::beast::iequals(coding, "chunked");
  }
}

// A body of announced length is read by the session, past the parser (the header is read with
// `async_read_header`, which stops there): one here would be a misuse, refused rather than kept
// where the session never looks.
std::size_t request_parser::on_body_impl(string_view /*body*/, error_code& ec) {
  ec = bhttp::error::unexpected_body;
  return 0;
}

std::size_t request_parser::on_chunk_body_impl(std::uint64_t /*remain*/, string_view body,
                                               error_code& ec) {
  return append_body(body, ec);
}

std::size_t request_parser::append_body(string_view body, error_code& ec) {
  const std::size_t needed = body_.size() + body.size();
  if (needed > body_room_) {
    const auto limit = static_cast<std::size_t>(max_body_bytes_);
    if (needed > limit) {  // the parser keeps to the limit; never past it
      ec = bhttp::error::body_limit;
      return 0;
    }
    const std::size_t doubled = body_room_ > limit / 2 ? limit : body_room_ * 2;
    const std::size_t room = std::min(std::max({needed, doubled, first_body_room}), limit);
    try {
      // Near the bound each step still takes at least half of what the budget has free, so the
      // body is copied a few times more at most, not once for every few bytes.
      result<std::size_t> grown = held_.grow_between(needed - body_room_, room - body_room_);
      if (!grown) {
        over_budget_ = std::move(grown).error();
        ec = not_enough_memory();
        return 0;
      }
      body_room_ += *grown;
      oip::detail::reserve_exactly(body_, body_room_);
    } catch (const std::bad_alloc&) {
      return refuse_for_memory(ec);
    }
    // The string may round a small capacity up: what it holds is what counts.
    if (body_.capacity() > body_room_) {
      held_.add(body_.capacity() - body_room_);
      body_room_ = body_.capacity();
    }
  }
  body_.append(body.data(), body.size());
  return body.size();
}

}  // namespace oip::http::detail
