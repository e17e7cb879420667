#pragma once
// Internal: HTTP Content-Encoding and Accept-Encoding with zlib (gzip and deflate).

#include <oip/buffer.hpp>
#include <oip/memory_budget.hpp>
#include <oip/status.hpp>

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace oip::detail {

enum class content_coding { identity, gzip, deflate };

/// The coding named by a Content-Encoding value; 415 for anything but gzip, deflate, identity.
[[nodiscard]] result<content_coding> parse_content_encoding(std::string_view value);

/// The coding to answer with for an Accept-Encoding value: the accepted coding (q > 0, named or
/// covered by `*`) of the highest q, gzip on a tie; identity when none is accepted or the client
/// ranks identity above them.
[[nodiscard]] content_coding choose_response_coding(std::string_view accept_encoding);

[[nodiscard]] std::string_view coding_name(content_coding coding) noexcept;

/// Decompresses `body`; a 400 for corrupt data and a 413 as soon as the output passes
/// `max_size` (a zip bomb never gets further). The result has simdjson's padding after it.
/// With `held`, the output's bytes are taken from its memory budget as they grow (a 503 where
/// they do not fit); it keeps those of the result.
[[nodiscard]] result<buffer> decompress(const buffer& body, content_coding coding,
                                        std::size_t max_size, memory_budget::lease* held = nullptr);

/// Compresses `parts` in order into one body.
[[nodiscard]] result<std::string> compress(std::span<const std::string_view> parts,
                                           content_coding coding);

}  // namespace oip::detail
