// Tensors in a few lines: build one from values, view a slice of a body without copying, read
// elements at any alignment, convert FP32 to FP16, and handle errors without exceptions.

#include <oip/float16.hpp>
#include <oip/tensor.hpp>

#include <cstdio>
#include <string>
#include <vector>

int main() {
  const std::vector<float> values{1.0F, 2.5F, -3.25F, 65504.0F};
  std::vector<oip::half> halves(values.size());
  if (oip::status s = oip::convert(std::span<const float>(values), std::span<oip::half>(halves));
      !s.ok()) {
    std::fprintf(stderr, "%s\n", s.to_json().c_str());
    return 1;
  }
  oip::result<oip::tensor> output = oip::tensor::from_values<oip::half>("OUTPUT0", {2, 2}, halves);
  if (!output) {
    std::fprintf(stderr, "%s\n", output.error().to_json().c_str());
    return 1;
  }
  std::printf("%s %s %s:", output->name().c_str(), std::string(to_string(output->type())).c_str(),
              oip::to_string(output->shape()).c_str());
  for (std::size_t i = 0; i < output->element_count(); ++i) {
    std::printf(" %g", static_cast<double>(oip::to_float(output->at<oip::half>(i))));
  }
  std::printf("\n");

  // A request body holds a JSON header followed by tensor bytes; the tensor is a view into it.
  std::string body = R"({"inputs":[]})";
  const std::size_t header_length = body.size();
  body.append(std::string("\x01\x00\x00\x00\x02\x00\x00\x00", 8));
  const oip::buffer shared_body = oip::buffer::from_string(std::move(body));
  oip::result<oip::buffer> bytes = shared_body.slice(header_length, 8);
  oip::result<oip::tensor> input =
      oip::tensor::make("INPUT0", oip::datatype::int32, {1, 2}, *bytes);
  if (!input) return 1;
  std::printf("INPUT0 = [%d, %d], zero-copy: %s\n", input->at<std::int32_t>(0),
              input->at<std::int32_t>(1),
              input->data().shares_storage_with(shared_body) ? "yes" : "no");

  // Mistakes are values with an HTTP status and a message, never exceptions.
  oip::result<oip::tensor> wrong =
      oip::tensor::make("INPUT1", oip::datatype::int32, {1, 3}, *bytes);
  std::printf("%d %s\n", wrong.error().http_status(), wrong.error().to_json().c_str());
  return 0;
}
