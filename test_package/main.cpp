#include <oip/oip.hpp>  // the umbrella header, installed with the library

#include <cstdio>
#include <vector>

int main() {
  const std::vector<float> values{1.0F, 2.0F, 3.0F, 4.0F};
  oip::result<oip::tensor> t = oip::tensor::from_values<float>("INPUT0", {2, 2}, values);
  if (!t || t->at<float>(3) != 4.0F) return 1;
  std::vector<oip::half> h(values.size());
  if (!oip::convert(std::span<const float>(values), std::span<oip::half>(h)).ok()) return 1;
  if (h[0].bits != 0x3C00) return 1;
  const oip::status s{oip::errc::not_found, "Request for unknown model: 'x' is not found"};
  std::printf("oip %s: %s (HTTP %d)\n", oip::version_string, s.to_json().c_str(), s.http_status());
  return s.http_status() == 404 ? 0 : 1;
}
