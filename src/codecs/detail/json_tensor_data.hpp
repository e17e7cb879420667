#pragma once
// Internal: decoding a tensor's JSON `data` into its buffer, and taking its `binary_data_size`,
// for both readers of an inference body (the general one and the usual request's).

#include "codecs/detail/json_read.hpp"

#include <oip/buffer.hpp>
#include <oip/datatype.hpp>
#include <oip/parameters.hpp>
#include <oip/shape.hpp>
#include <oip/status.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace oip::detail {

struct tensor_context {
  const document_context* doc;
  std::string_view role;  // "input" or "output"
  std::string_view name;
  datatype type;
};

// Decodes `data` into `out`, a new buffer of `expected` elements of t.type.
status decode_data(const tensor_context& t, od::value data, std::size_t depth,
                   const shape_type& shape, std::uint64_t expected, std::size_t json_size,
                   buffer& out);

// Moves a tensor's `binary_data_size` parameter, if any, out of its parameters into `size`.
status take_binary_data_size(parameters& params, std::string_view role, std::string_view name,
                             std::optional<std::int64_t>& size);

}  // namespace oip::detail
