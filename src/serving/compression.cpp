#include "serving/detail/compression.hpp"

#include "core/detail/reserve_exactly.hpp"
#include "serving/detail/ascii.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include <zlib.h>

namespace oip::detail {

namespace {

constexpr std::size_t zlib_slice = std::size_t{1} << 30U;  // what zlib's 32-bit counts take at once

std::string_view trim(std::string_view s) noexcept {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// zlib's window bits: 15 + 16 reads and writes the gzip wrapper, 15 the zlib one (HTTP deflate).
int window_bits(content_coding coding) noexcept { return coding == content_coding::gzip ? 31 : 15; }

}  // namespace

result<content_coding> parse_content_encoding(std::string_view value) {
  const std::string_view coding = trim(value);
  if (coding.empty() || equals_ignoring_case(coding, "identity")) return content_coding::identity;
  if (equals_ignoring_case(coding, "gzip") || equals_ignoring_case(coding, "x-gzip")) {
    return content_coding::gzip;
  }
  if (equals_ignoring_case(coding, "deflate")) return content_coding::deflate;
  return status{
      errc::unsupported_media_type,
      fmt::format("unsupported Content-Encoding '{}': gzip, deflate or identity", coding)};
}

namespace {

// A qvalue (RFC 9110 12.4.2): 0 to 1 with at most three decimals; anything else is not one.
std::optional<double> parse_qvalue(std::string_view text) {
  if (text.empty() || text.size() > 5 || (text[0] != '0' && text[0] != '1')) return std::nullopt;
  if (text.size() > 1 && text[1] != '.') return std::nullopt;
  double q = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), q);
  if (ec != std::errc{} || end != text.data() + text.size() || q > 1) return std::nullopt;
  return q;
}

}  // namespace

content_coding choose_response_coding(std::string_view accept_encoding) {
  // The q of each coding named (or of `*`, for those not named); -1: not mentioned.
  double gzip = -1;
  double deflate = -1;
  double identity = -1;
  double any = -1;
  while (!accept_encoding.empty()) {
    const std::size_t comma = accept_encoding.find(',');
    std::string_view item = accept_encoding.substr(0, comma);
    accept_encoding = comma == std::string_view::npos ? "" : accept_encoding.substr(comma + 1);
    std::optional<double> q = 1.0;
    std::string_view parameters;
    if (const std::size_t semicolon = item.find(';'); semicolon != std::string_view::npos) {
      parameters = item.substr(semicolon + 1);
      item = item.substr(0, semicolon);
    }
    while (!parameters.empty()) {  // the q among the member's parameters; the others are ignored
      const std::size_t semicolon = parameters.find(';');
      const std::string_view parameter = trim(parameters.substr(0, semicolon));
      parameters = semicolon == std::string_view::npos ? "" : parameters.substr(semicolon + 1);
      if (parameter.size() >= 2 && (parameter[0] == 'q' || parameter[0] == 'Q') &&
          parameter[1] == '=') {
        q = parse_qvalue(parameter.substr(2));
      }
    }
    if (!q) continue;  // a malformed qvalue: the member is dropped
    item = trim(item);
    if (equals_ignoring_case(item, "gzip") || equals_ignoring_case(item, "x-gzip")) gzip = *q;
    if (equals_ignoring_case(item, "deflate")) deflate = *q;
    if (equals_ignoring_case(item, "identity")) identity = *q;
    if (item == "*") any = *q;
  }
  if (gzip < 0) gzip = any;
  if (deflate < 0) deflate = any;
  // Uncompressed is always possible; it is chosen over a coding only when the client ranks it
  // higher, or accepts no coding.
  const double best = std::max(gzip, deflate);
  if (best <= 0 || identity > best) return content_coding::identity;
  return gzip >= deflate ? content_coding::gzip : content_coding::deflate;
}

std::string_view coding_name(content_coding coding) noexcept {
  switch (coding) {
    case content_coding::gzip: return "gzip";
    case content_coding::deflate: return "deflate";
    case content_coding::identity: break;
  }
  return "identity";
}

result<buffer> decompress(const buffer& body, content_coding coding, std::size_t max_size,
                          memory_budget::lease* held) {
  if (coding == content_coding::identity) return body;
  memory_budget::lease unbudgeted;
  memory_budget::lease& budget = held != nullptr ? *held : unbudgeted;
  const std::size_t held_before = budget.bytes();
  const bool budgeted = held != nullptr;
  // The output's buffer, grown to `size`, or as close to it as the budget has room for: near the
  // bound each step still takes at least half of what is free, so the buffer is copied a few
  // times more at most.
  constexpr std::size_t first_size = 4096;
  std::string out;
  const auto grow = [&](std::size_t size) -> status {
    if (budgeted) {
      // With the compressed body, which the transport holds for the same request (with a few
      // bytes of its own, within `slack`): a body that fills the whole budget together with it
      // and needs more could pass no retry.
      constexpr std::size_t slack = 4096;
      if (body.size() + out.size() + slack >= budget.capacity()) {
        return status{errc::payload_too_large,
                      fmt::format("the decompressed request body needs more than the {} bytes "
                                  "that the server holds in flight at most",
                                  budget.capacity())};
      }
      result<std::size_t> room = budget.grow_between(1, size - out.size());
      if (!room) return std::move(room).error();
      size = out.size() + *room;
      reserve_exactly(out, size);
    }
    out.resize(size);
    return {};
  };
  // Grows geometrically up to the limit: memory follows the real output, not a claimed size.
  if (status s = grow(
          std::min<std::size_t>(std::max<std::size_t>(body.size() * 4, first_size), max_size + 1));
      !s.ok()) {
    return s;
  }
  z_stream stream{};
  if (inflateInit2(&stream, window_bits(coding)) != Z_OK) {
    budget.shrink_to(held_before);
    return status{errc::internal, "zlib could not start inflating"};
  }
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(body.data()));
  std::size_t consumed = 0;  // zlib counts in 32 bits: the body goes in in slices
  std::size_t produced = 0;
  int rc = Z_OK;
  bool trailing_data = false;
  for (;;) {
    if (stream.avail_in == 0 && consumed < body.size()) {
      stream.avail_in = static_cast<uInt>(std::min(body.size() - consumed, zlib_slice));
      consumed += stream.avail_in;
    }
    if (produced == out.size()) {
      if (out.size() > max_size) break;
      if (status room = grow(std::min(out.size() * 2, max_size + 1)); !room.ok()) {
        inflateEnd(&stream);
        budget.shrink_to(held_before);
        return room;
      }
    }
    stream.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    stream.avail_out = static_cast<uInt>(std::min(out.size() - produced, zlib_slice));
    const uInt before = stream.avail_out;
    rc = inflate(&stream, Z_NO_FLUSH);
    produced += before - stream.avail_out;
    if (rc == Z_STREAM_END) {
      const bool more = stream.avail_in != 0 || consumed < body.size();
      if (!more) break;
      // A gzip body may hold several members (RFC 1952), one after the other: each is read.
      // After a deflate stream, nothing may follow.
      if (coding != content_coding::gzip || inflateReset(&stream) != Z_OK) {
        trailing_data = true;
        break;
      }
      continue;
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR) break;
    if (rc == Z_BUF_ERROR && stream.avail_in == 0 && consumed == body.size()) break;  // truncated
  }
  inflateEnd(&stream);
  // What is kept is the result alone: the work buffer goes when this returns.
  budget.shrink_to(held_before);
  if (produced > max_size) {
    return status{
        errc::payload_too_large,
        fmt::format("the decompressed request body is above the limit of {} bytes", max_size)};
  }
  if (rc != Z_STREAM_END || trailing_data) {
    return status{
        errc::invalid_argument,
        fmt::format("the request body is not valid {} data{}", coding_name(coding),
                    trailing_data ? ": bytes follow the end of the compressed data" : "")};
  }
  if (budgeted) {
    if (status room = budget.grow(produced + 64); !room.ok()) return room;
  }
  result<mutable_buffer> decoded = mutable_buffer::allocate_for_overwrite(produced, 64);
  if (!decoded) return std::move(decoded).error();
  std::memcpy(decoded->data(), out.data(), produced);
  return buffer{std::move(*decoded)};
}

result<std::string> compress(std::span<const std::string_view> parts, content_coding coding) {
  std::size_t total = 0;
  for (std::string_view part : parts) total += part.size();
  if (coding == content_coding::identity) {
    std::string out;
    out.reserve(total);
    for (std::string_view part : parts) out += part;
    return out;
  }
  z_stream stream{};
  if (deflateInit2(&stream, Z_DEFAULT_COMPRESSION, Z_DEFLATED, window_bits(coding), 8,
                   Z_DEFAULT_STRATEGY) != Z_OK) {
    return status{errc::internal, "zlib could not start deflating"};
  }
  std::string out;
  out.resize(deflateBound(&stream, static_cast<uLong>(total)) + 64);
  // zlib counts in 32 bits: a body of 4 GiB or more goes in and out in slices.
  std::size_t written = 0;
  const auto run = [&](int flush) {
    stream.next_out = reinterpret_cast<Bytef*>(out.data() + written);
    stream.avail_out = static_cast<uInt>(std::min(out.size() - written, zlib_slice));
    const uInt before = stream.avail_out;
    const int rc = deflate(&stream, flush);
    written += before - stream.avail_out;
    return rc;
  };
  int rc = Z_OK;
  for (const std::string_view part : parts) {
    for (std::size_t at = 0; at < part.size() && rc != Z_STREAM_ERROR;) {
      const std::size_t slice = std::min(part.size() - at, zlib_slice);
      stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(part.data() + at));
      stream.avail_in = static_cast<uInt>(slice);
      while (stream.avail_in != 0 && rc != Z_STREAM_ERROR && written < out.size()) {
        rc = run(Z_NO_FLUSH);
      }
      at += slice;
    }
  }
  while (rc != Z_STREAM_END && rc != Z_STREAM_ERROR && written < out.size()) rc = run(Z_FINISH);
  if (rc != Z_STREAM_END) {
    deflateEnd(&stream);
    return status{errc::internal, "zlib failed to compress the response"};
  }
  out.resize(written);
  deflateEnd(&stream);
  return out;
}

}  // namespace oip::detail
