// Embedding oip in a host's own HTTP stack (cpp-httplib here) through the endpoint handler alone.
// Usage: httplib_server [port]            serve the `doubler` model until killed
//        httplib_server --self-test       serve on a free port, infer once over HTTP, exit

#include <oip/http_handler.hpp>
#include <oip/json.hpp>

#include <iostream>
#include <string>
#include <thread>

#include <httplib.h>

namespace {

// y = 2x over FP32 vectors of any length.
std::shared_ptr<oip::model> make_doubler() {
  oip::model_config config;
  config.name = "doubler";
  config.inputs = {{"x", oip::datatype::fp32, {-1}, {}}};
  config.outputs = {{"y", oip::datatype::fp32, {-1}, {}}};
  return oip::make_model(
      config, [](const oip::inference_request& r) -> oip::result<oip::model_output> {
        const oip::tensor& x = r.inputs[0];
        std::vector<float> y(x.element_count());
        for (std::size_t i = 0; i < y.size(); ++i) y[i] = 2 * x.at<float>(i);
        oip::result<oip::tensor> out =
            oip::tensor::from_values<float>("y", x.shape(), std::span<const float>(y));
        if (!out) return std::move(out).error();
        return oip::model_output{{std::move(*out)}, {}};
      });
}

// httplib request in, oip request through the handler, httplib response out.
void serve_with_oip(oip::http_handler& handler, const httplib::Request& in,
                    httplib::Response& out) {
  oip::http_request request;
  request.method = in.method;
  request.target = in.path;
  for (const auto& [name, value] : in.headers) {
    // httplib has already decoded the body and encodes replies itself.
    if (name == "Content-Encoding" || name == "Accept-Encoding") continue;
    request.headers.push_back({name, value});
  }
  request.body = oip::buffer::from_string(in.body);
  const oip::http_response reply = handler.handle(std::move(request));
  out.status = reply.status;
  std::string content_type = "application/json";
  for (const oip::http_header& h : reply.headers) {
    if (h.name == "Content-Type") {
      content_type = h.value;
    } else {
      out.set_header(h.name.c_str(), h.value);
    }
  }
  out.set_content(reply.body(), content_type.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  oip::model_repository models;
  if (!models.add(make_doubler()).ok()) return 1;
  oip::executor workers;
  oip::http_handler handler{models, workers};

  httplib::Server server;
  const auto route = [&](const httplib::Request& in, httplib::Response& out) {
    serve_with_oip(handler, in, out);
  };
  server.Get("/v2.*", route);
  server.Post("/v2.*", route);

  const bool self_test = argc > 1 && std::string{argv[1]} == "--self-test";
  if (!self_test) {
    const int port = argc > 1 ? std::stoi(argv[1]) : 8000;
    std::cout << "serving on :" << port << "\n";
    return server.listen("0.0.0.0", port) ? 0 : 1;
  }

  const int port = server.bind_to_any_port("127.0.0.1");
  std::thread listener{[&] { server.listen_after_bind(); }};
  while (!server.is_running()) std::this_thread::yield();
  httplib::Client client{"127.0.0.1", port};
  const auto reply =
      client.Post("/v2/models/doubler/infer",
                  R"({"inputs":[{"name":"x","shape":[3],"datatype":"FP32","data":[1.5,2,-4]}]})",
                  "application/json");
  server.stop();
  listener.join();
  if (!reply || reply->status != 200) return 1;
  std::cout << reply->body << "\n";  // {"model_name":"doubler",...,"data":[3,4,-8]}]}
  return 0;
}
