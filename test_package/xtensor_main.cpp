#include <oip/xtensor.hpp>

#include <cstdio>

int main() {
  const xt::xarray<double> a = {{1.0, 2.0}, {3.0, 4.0}};
  oip::result<oip::tensor> t = oip::from_xtensor("OUTPUT0", a);
  if (!t) return 1;
  oip::result<oip::xtensor_view<double>> view = oip::as_xtensor<double>(*t);
  if (!view || view->copied || view->array(1, 1) != 4.0) return 1;
  std::printf("oip::xtensor: %s viewed without a copy\n", t->name().c_str());
  return 0;
}
