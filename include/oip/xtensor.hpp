#pragma once
/// \file
/// xtensor interop (the `oip::xtensor` component): view a numeric tensor as an xtensor expression
/// and build a tensor from one.

#include <oip/buffer.hpp>
#include <oip/datatype.hpp>
#include <oip/model.hpp>
#include <oip/status.hpp>
#include <oip/tensor.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <xtensor/xadapt.hpp>
#include <xtensor/xarray.hpp>

namespace oip {

/// The xtensor expression type over a tensor's elements: a row-major, read-only adaptor.
template <class T>
using xtensor_adaptor =
    decltype(xt::adapt(std::declval<const T*>(), std::size_t{}, xt::no_ownership(),
                       std::declval<std::vector<std::size_t>>()));

/// A tensor seen through xtensor, and whether getting there copied the bytes. The view holds the
/// bytes' owner, so it stays valid after the tensor is gone; copies of the view share the bytes.
template <class T>
struct xtensor_view {
  buffer owner;
  xtensor_adaptor<T> array;
  /// False: `array` reads the tensor's own bytes. True: they were copied once, because they were
  /// not aligned for T (binary inputs arrive at offsets the client chose), or because a BOOL
  /// tensor held bytes other than 0 and 1 (each non-zero byte becomes true).
  bool copied;
};

namespace detail {
template <class T>
xtensor_adaptor<T> adapt_elements(const buffer& bytes, const std::vector<std::size_t>& shape) {
  return xt::adapt(static_cast<const T*>(reinterpret_cast<const T*>(bytes.data())),
                   bytes.size() / sizeof(T), xt::no_ownership(), shape);
}
}  // namespace detail

/// Views a fixed-size tensor as an xtensor array of T without copying when its bytes are aligned
/// for T, with one copy otherwise. T must be the tensor's element type.
///
/// Example:
/// \code
///   oip::result<oip::xtensor_view<float>> x = oip::as_xtensor<float>(input);
///   if (!x) return x.error();
///   float total = xt::sum(x->array)();
/// \endcode
template <class T>
[[nodiscard]] result<xtensor_view<T>> as_xtensor(const tensor& t) {
  static_assert(has_datatype<T>, "T must be one of the protocol's element types");
  if (t.type() != datatype_of<T>) {
    return status{errc::invalid_argument, "tensor '" + t.name() + "' has datatype " +
                                              std::string{to_string(t.type())} + ", not " +
                                              std::string{to_string(datatype_of<T>)}};
  }
  const std::vector<std::size_t> shape(t.shape().begin(), t.shape().end());
  const buffer& bytes = t.data();
  bool must_copy = !bytes.is_aligned(alignof(T));
  if constexpr (std::is_same_v<T, bool>) {
    const auto* raw = reinterpret_cast<const std::uint8_t*>(bytes.data());
    must_copy = !std::all_of(raw, raw + bytes.size(), [](std::uint8_t b) { return b <= 1; });
  }
  if (!must_copy) {
    return xtensor_view<T>{bytes, detail::adapt_elements<T>(bytes, shape), false};
  }
  result<mutable_buffer> copy = mutable_buffer::allocate_for_overwrite(bytes.size());
  if (!copy) return std::move(copy).error();
  if constexpr (std::is_same_v<T, bool>) {
    for (std::size_t i = 0; i < bytes.size(); ++i) {
      copy->data()[i] = static_cast<std::byte>(bytes.data()[i] != std::byte{0});
    }
  } else if (!bytes.empty()) {
    std::memcpy(copy->data(), bytes.data(), bytes.size());
  }
  buffer owner{std::move(*copy)};
  auto array = detail::adapt_elements<T>(owner, shape);
  return xtensor_view<T>{std::move(owner), std::move(array), true};
}

/// A tensor named `name` holding the elements of an xtensor expression, evaluated once, row-major,
/// straight into the tensor's buffer.
///
/// Example:
/// \code
///   xt::xarray<float> a = {{1.f, 2.f}, {3.f, 4.f}};
///   oip::result<oip::tensor> t = oip::from_xtensor("OUTPUT0", a * 2.f);
/// \endcode
template <class E>
[[nodiscard]] result<tensor> from_xtensor(std::string name, const xt::xexpression<E>& expression) {
  using value_type = typename E::value_type;
  static_assert(has_datatype<value_type>, "the expression's elements must be a protocol type");
  const E& e = expression.derived_cast();
  shape_type shape(e.shape().begin(), e.shape().end());
  result<std::uint64_t> bytes = byte_size(datatype_of<value_type>, shape);
  if (!bytes) return std::move(bytes).error();
  result<mutable_buffer> storage = mutable_buffer::allocate_for_overwrite(*bytes);
  if (!storage) return std::move(storage).error();
  const std::vector<std::size_t> xshape(e.shape().begin(), e.shape().end());
  auto target = xt::adapt(reinterpret_cast<value_type*>(storage->data()), e.size(),
                          xt::no_ownership(), xshape);
  target = e;
  return tensor::make(std::move(name), datatype_of<value_type>, std::move(shape),
                      buffer{std::move(*storage)});
}

/// A CPU model written with xtensor in a few lines: `run` receives the inputs as xtensor views of
/// element type T, in the order of the model's configured inputs (the request's order may
/// differ), and returns the model's output.
///
/// Example:
/// \code
///   auto add = oip::make_xtensor_model<float>(config, [](const auto& in)
///                                                   -> oip::result<oip::model_output> {
///     oip::result<oip::tensor> sum = oip::from_xtensor("SUM", in[0].array + in[1].array);
///     if (!sum) return std::move(sum).error();
///     return oip::model_output{{std::move(*sum)}, {}};
///   });
/// \endcode
template <class T, class Run>
[[nodiscard]] std::shared_ptr<model> make_xtensor_model(model_config config, Run run) {
  std::vector<std::string> order;
  for (const tensor_metadata& input : config.inputs) order.push_back(input.name);
  return make_model(std::move(config),
                    [order = std::move(order), run = std::move(run)](
                        const inference_request& request) -> result<model_output> {
                      std::vector<xtensor_view<T>> inputs;
                      inputs.reserve(order.size());
                      for (const std::string& name : order) {
                        const auto input =
                            std::find_if(request.inputs.begin(), request.inputs.end(),
                                         [&](const tensor& t) { return t.name() == name; });
                        if (input == request.inputs.end()) {
                          return status{errc::invalid_argument, "missing input '" + name + "'"};
                        }
                        result<xtensor_view<T>> view = as_xtensor<T>(*input);
                        if (!view) return std::move(view).error();
                        inputs.push_back(std::move(*view));
                      }
                      return run(inputs);
                    });
}

}  // namespace oip
