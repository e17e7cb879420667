#include <oip/access.hpp>

#include <algorithm>

#include <fmt/format.h>

namespace oip {

namespace {

constexpr std::array<api_category, api_category_count> every_category = {
    api_category::health,        api_category::metadata,     api_category::inference,
    api_category::shared_memory, api_category::model_config, api_category::model_repository,
    api_category::statistics,    api_category::trace,        api_category::logging,
    api_category::openai};

static_assert(static_cast<std::size_t>(api_category::openai) + 1 == api_category_count);

}  // namespace

std::string_view to_string(api_category category) noexcept {
  switch (category) {
    case api_category::health: return "health";
    case api_category::metadata: return "metadata";
    case api_category::inference: return "inference";
    case api_category::shared_memory: return "shared-memory";
    case api_category::model_config: return "model-config";
    case api_category::model_repository: return "model-repository";
    case api_category::statistics: return "statistics";
    case api_category::trace: return "trace";
    case api_category::logging: return "logging";
    case api_category::openai: return "openai";
  }
  return "unknown";
}

result<api_restriction> parse_api_restriction(std::string_view text, std::string_view option) {
  const std::size_t colon = text.find(':');
  const std::size_t equals = colon == std::string_view::npos ? colon : text.find('=', colon + 1);
  if (equals == std::string_view::npos || colon == 0 || equals == colon + 1 ||
      equals + 1 == text.size()) {
    return status{errc::invalid_argument,
                  fmt::format("--{} option format is '<config name>:<setting>=<value>'. Got {}",
                              option, text.substr(0, 200))};
  }
  api_restriction out;
  out.header = std::string{text.substr(colon + 1, equals - colon - 1)};
  out.value = std::string{text.substr(equals + 1)};
  std::string_view names = text.substr(0, colon);
  while (true) {
    const std::size_t comma = names.find(',');
    const std::string_view name = names.substr(0, comma);
    const auto* found = std::find_if(every_category.begin(), every_category.end(),
                                     [&](api_category c) { return to_string(c) == name; });
    if (found == every_category.end()) {
      return status{errc::invalid_argument,
                    fmt::format("unknown restricted {} '{}'",
                                option == "grpc-restricted-protocol" ? "protocol" : "api",
                                name.substr(0, 64))};
    }
    out.categories.push_back(*found);
    if (comma == std::string_view::npos) break;
    names.remove_prefix(comma + 1);
  }
  return out;
}

status api_restrictions::add(api_restriction restriction, std::string_view what) {
  if (restriction.header.empty()) {
    return status{errc::invalid_argument, "a restriction needs a header to expect"};
  }
  std::array<bool, api_category_count> named{};
  for (const api_category category : restriction.categories) {
    const auto i = static_cast<std::size_t>(category);
    if (named[i] || index_of_[i]) {
      return status{errc::invalid_argument,
                    fmt::format("restricted {} '{}' can not be specified in multiple config groups",
                                what, to_string(category))};
    }
    named[i] = true;
  }
  for (const api_category category : restriction.categories) {
    index_of_[static_cast<std::size_t>(category)] = restrictions_.size();
  }
  restrictions_.push_back(std::move(restriction));
  return status{};
}

const api_restriction* api_restrictions::of(api_category category) const noexcept {
  const std::optional<std::size_t>& index = index_of_[static_cast<std::size_t>(category)];
  return index ? &restrictions_[*index] : nullptr;
}

status restricted(const api_restriction& restriction, std::string_view what) {
  return status{errc::forbidden, fmt::format("This {} is restricted, expecting header '{}'", what,
                                             restriction.header)};
}

}  // namespace oip
