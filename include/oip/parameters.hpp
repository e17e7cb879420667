#pragma once
/// \file
/// Protocol parameters: an ordered map from names to string, int64, uint64, double or bool values,
/// as they appear on requests, responses and tensors.

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace oip {

/// One parameter value. The JSON type of the value is kept: an integer stays an integer (int64, or
/// uint64 above INT64_MAX), 1.5 stays a double.
using parameter_value = std::variant<bool, std::int64_t, std::uint64_t, double, std::string>;

/// Named parameter values in insertion order, names unique.
///
/// Example:
/// \code
///   oip::parameters p;
///   p.set("sequence_id", std::int64_t{42});
///   if (const auto* id = p.get<std::int64_t>("sequence_id")) use(*id);
/// \endcode
class parameters {
 public:
  using entry = std::pair<std::string, parameter_value>;

  /// The value named `name`, or nullptr.
  [[nodiscard]] const parameter_value* find(std::string_view name) const noexcept {
    for (const entry& e : entries_) {
      if (e.first == name) return &e.second;
    }
    return nullptr;
  }

  /// The value named `name` if it holds a T, or nullptr.
  template <class T>
  [[nodiscard]] const T* get(std::string_view name) const noexcept {
    const parameter_value* value = find(name);
    return value != nullptr ? std::get_if<T>(value) : nullptr;
  }

  [[nodiscard]] bool contains(std::string_view name) const noexcept {
    return find(name) != nullptr;
  }

  /// Adds `name` unless it is present; returns whether it was added (a decoder rejects duplicates).
  bool try_add(std::string name, parameter_value value) {
    if (contains(name)) return false;
    entries_.emplace_back(std::move(name), std::move(value));
    return true;
  }

  /// Adds `name` or replaces its value, keeping its position.
  void set(std::string name, parameter_value value) {
    for (entry& e : entries_) {
      if (e.first == name) {
        e.second = std::move(value);
        return;
      }
    }
    entries_.emplace_back(std::move(name), std::move(value));
  }

  /// Adds `name` without looking for it: for decoders that have already refused duplicates
  /// (keeps decoding linear in the number of parameters).
  void append_unchecked(std::string name, parameter_value value) {
    entries_.emplace_back(std::move(name), std::move(value));
  }

  /// Removes `name`; returns whether it was present.
  bool erase(std::string_view name) noexcept {
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->first == name) {
        entries_.erase(it);
        return true;
      }
    }
    return false;
  }

  [[nodiscard]] std::size_t size() const noexcept { return entries_.size(); }
  [[nodiscard]] bool empty() const noexcept { return entries_.empty(); }
  [[nodiscard]] auto begin() const noexcept { return entries_.begin(); }
  [[nodiscard]] auto end() const noexcept { return entries_.end(); }

  friend bool operator==(const parameters&, const parameters&) = default;

 private:
  std::vector<entry> entries_;
};

}  // namespace oip
