// JSON encoding of the protocol's objects other than inference bodies: metadata, health, model
// configuration, statistics, and the extensions' requests and replies.

#include "codecs/detail/json_out.hpp"
#include "codecs/detail/sequence_controls.hpp"

#include <oip/json.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace oip {

using detail::json_out;
using detail::member;
using detail::write_parameters;
using detail::write_shape;

namespace {
// A JSON array of `items`, each written by `write_item(out, item)`.
template <class T, class Write>
void write_array(json_out& out, const std::vector<T>& items, Write write_item) {
  out.raw('[');
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i != 0) out.raw(',');
    write_item(out, items[i]);
  }
  out.raw(']');
}

void write_string_array(json_out& out, std::string_view key,
                        const std::vector<std::string>& items) {
  out.key(key);
  write_array(out, items, [](json_out& o, const std::string& item) { o.string(item); });
}

void write_tensor_metadata(json_out& out, std::string_view key,
                           const std::vector<tensor_metadata>& tensors) {
  out.key(key);
  write_array(out, tensors, [](json_out& o, const tensor_metadata& t) {
    o.raw('{');
    o.key<"name">();
    o.string(t.name);
    o.raw(',');
    o.key<"datatype">();
    o.string(to_string(t.type));
    o.raw(',');
    write_shape(o, t.shape);
    write_parameters(o, t.parameters, member::after_another);
    o.raw('}');
  });
}
}  // namespace

std::string encode(const server_metadata& metadata) {
  std::string text;
  json_out out{text};
  out.raw('{');
  out.key<"name">();
  out.string(metadata.name);
  out.raw(',');
  out.key<"version">();
  out.string(metadata.version);
  out.raw(',');
  write_string_array(out, "extensions", metadata.extensions);
  out.raw('}');
  return text;
}

std::string encode(const model_metadata& metadata) {
  std::string text;
  json_out out{text};
  out.raw('{');
  out.key<"name">();
  out.string(metadata.name);
  if (!metadata.versions.empty()) {
    out.raw(',');
    write_string_array(out, "versions", metadata.versions);
  }
  out.raw(',');
  out.key<"platform">();
  out.string(metadata.platform);
  out.raw(',');
  write_tensor_metadata(out, "inputs", metadata.inputs);
  out.raw(',');
  write_tensor_metadata(out, "outputs", metadata.outputs);
  write_parameters(out, metadata.properties, member::after_another, {}, "properties");
  out.raw('}');
  return text;
}

std::string encode(const server_live& live) {
  return live.live ? R"({"live":true})" : R"({"live":false})";
}

std::string encode(const server_ready& ready) {
  return ready.ready ? R"({"ready":true})" : R"({"ready":false})";
}

std::string encode(const repository_index_request& request) {
  return request.ready ? R"({"ready":true})" : "{}";
}

namespace {
// Standard base64 with its padding (Triton's form of a file's content in a model load).
std::string to_base64(std::string_view bytes) {
  static constexpr std::string_view alphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    const std::size_t left = std::min<std::size_t>(bytes.size() - i, 3);
    std::uint32_t bits = 0;
    for (std::size_t j = 0; j < 3; ++j) {
      bits = bits << 8U | (j < left ? static_cast<unsigned char>(bytes[i + j]) : 0U);
    }
    for (std::size_t j = 0; j < 4; ++j) {
      out.push_back(j <= left ? alphabet[bits >> (18U - 6U * j) & 0x3FU] : '=');
    }
  }
  return out;
}
}  // namespace

result<std::string> encode_repository_load_request(const parameters& request) {
  // A file's content travels in base64 over HTTP, where the server decodes it back to bytes.
  parameters sent;
  for (const auto& [name, value] : request) {
    if (!name.starts_with("file:")) {
      sent.set(name, value);
      continue;
    }
    const auto* bytes = std::get_if<std::string>(&value);
    if (bytes == nullptr) {
      return status{errc::invalid_argument,
                    fmt::format("parameter '{}' of a model load request must be the file's "
                                "content, a string of bytes",
                                name)};
    }
    sent.set(name, to_base64(*bytes));
  }
  std::string text;
  json_out out{text};
  out.raw('{');
  write_parameters(out, sent, member::first);
  out.raw('}');
  return text;
}

std::string encode_shared_memory_register(const shared_memory_region& region) {
  std::string text;
  json_out out{text};
  out.raw('{');
  out.key<"key">();
  out.string(region.key);
  out.raw(fmt::format(R"(,"offset":{},"byte_size":{}}})", region.offset, region.byte_size));
  return text;
}

std::string encode(const std::vector<cuda_shared_memory_region>& regions) {
  std::string text;
  json_out out{text};
  write_array(out, regions, [](json_out& o, const cuda_shared_memory_region& region) {
    o.raw('{');
    o.key<"name">();
    o.string(region.name);
    o.raw(fmt::format(R"(,"device_id":{},"byte_size":{}}})", region.device_id, region.byte_size));
  });
  return text;
}

std::string encode(const std::vector<shared_memory_region>& regions) {
  std::string text;
  json_out out{text};
  write_array(out, regions, [](json_out& o, const shared_memory_region& region) {
    o.raw('{');
    o.key<"name">();
    o.string(region.name);
    o.raw(',');
    o.key<"key">();
    o.string(region.key);
    o.raw(fmt::format(R"(,"offset":{},"byte_size":{}}})", region.offset, region.byte_size));
  });
  return text;
}

std::string encode(const log_settings& settings) {
  return fmt::format(
      R"({{"log_file":"","log_info":{},"log_warning":{},"log_error":{},"log_verbose_level":{},)"
      R"("log_format":"{}"}})",
      settings.info, settings.warning, settings.error, settings.verbose_level,
      to_string(settings.format));
}

std::string encode(const log_settings_update& update) {
  std::string text;
  json_out out{text};
  out.raw('{');
  const auto separate = [&] {
    if (text.size() > 1) out.raw(',');
  };
  if (update.file) {
    separate();
    out.raw(R"("log_file":)");
    out.string(*update.file);
  }
  const auto level = [&](std::string_view key, const std::optional<bool>& on) {
    if (!on) return;
    separate();
    out.raw(fmt::format(R"("{}":{})", key, *on));
  };
  level("log_info", update.info);
  level("log_warning", update.warning);
  level("log_error", update.error);
  if (update.verbose_level) {
    separate();
    out.raw(fmt::format(R"("log_verbose_level":{})", *update.verbose_level));
  }
  if (update.format) {
    separate();
    out.raw(fmt::format(R"("log_format":"{}")", to_string(*update.format)));
  }
  out.raw('}');
  return text;
}

std::string encode(const trace_settings& settings) {
  std::string text = fmt::format(
      R"({{"trace_level":["{}"],"trace_rate":"{}","trace_count":"{}","log_frequency":"{}",)"
      R"("trace_file":)",
      fmt::join(level_names(settings.level), R"(",")"), settings.rate, settings.count,
      settings.log_frequency);
  json_out out{text};
  out.string(settings.file);
  out.raw(R"(,"trace_mode":"triton"})");
  return text;
}

std::string encode(const model_ready& ready) {
  std::string text;
  json_out out{text};
  out.raw('{');
  out.key<"name">();
  out.string(ready.name);
  out.raw(ready.ready ? ",\"ready\":true}" : ",\"ready\":false}");
  return text;
}

// --- model configuration, statistics, the repository index
// ----------------------------------------

namespace {

std::string quoted(std::string_view text) {
  std::string out;
  detail::append_json_string(out, text);
  return out;
}

std::string encode_model_config(const model_config& config) {
  const auto tensors = [](const std::vector<tensor_metadata>& list) {
    std::string out = "[";
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (i != 0) out += ',';
      out += fmt::format(R"({{"name":{},"data_type":"{}","dims":[{}]}})", quoted(list[i].name),
                         config_name(list[i].type), fmt::join(list[i].shape, ","));
    }
    return out + "]";
  };
  std::string out = fmt::format(
      R"({{"name":{},"platform":{},"backend":{},"max_batch_size":{},"input":{},"output":{},)"
      R"("version_policy":{{"latest":{{"num_versions":1}}}},)"
      R"("instance_group":[{{"name":{},"kind":"{}","count":{},"gpus":[{}]}}],)"
      R"("model_transaction_policy":{{"decoupled":{}}},"response_cache":{{"enable":{}}})",
      quoted(config.name), quoted(config.platform), quoted(config.platform), config.max_batch_size,
      tensors(config.inputs), tensors(config.outputs), quoted(config.name),
      config.gpus.empty() ? "KIND_CPU" : "KIND_GPU", config.batching.instances,
      fmt::join(config.gpus, ","), config.decoupled, config.response_cache);
  // Triton's config has one scheduler: sequence batching wins over dynamic batching.
  if (config.sequence_batching) {
    std::string controls;
    for (const detail::sequence_control& c : detail::sequence_controls(config.sequence)) {
      if (!controls.empty()) controls += ',';
      controls += fmt::format(
          R"({{"name":{},"control":[{{"kind":"{}","int32_false_true":[{}],"fp32_false_true":[],)"
          R"("bool_false_true":[],"data_type":"{}"}}]}})",
          quoted(c.name), c.kind, c.is_correlation ? "" : "0,1",
          c.is_correlation ? detail::correlation_data_type(config.sequence) : "TYPE_INVALID");
    }
    out += fmt::format(
        R"(,"sequence_batching":{{"max_sequence_idle_microseconds":{},"control_input":[{}],)"
        R"("state":[],"iterative_sequence":false}})",
        config.sequence.max_idle.count(), controls);
  } else if (config.dynamic_batching) {
    // Triton's ModelQueuePolicy; the map's keys are strings, as protobuf's JSON writes them.
    const auto policy = [](const queue_policy& p) {
      return fmt::format(
          R"({{"timeout_action":"{}","default_timeout_microseconds":{},)"
          R"("allow_timeout_override":{},"max_queue_size":{}}})",
          p.on_timeout == queue_policy::timeout_action::delay ? "DELAY" : "REJECT",
          p.default_timeout.count(), p.allow_timeout_override,
          // As Triton's field holds it, and the gRPC route shows it.
          std::min<std::size_t>(p.max_queue_size, std::numeric_limits<std::uint32_t>::max()));
    };
    std::string levels;
    for (const auto& [level, p] : config.batching.priority_queue_policy) {
      if (!levels.empty()) levels += ',';
      levels += fmt::format(R"("{}":{})", level, policy(p));
    }
    out += fmt::format(
        R"(,"dynamic_batching":{{"preferred_batch_size":[{}],"max_queue_delay_microseconds":{},)"
        R"("preserve_ordering":false,"priority_levels":{},"default_priority_level":{},)"
        R"("default_queue_policy":{},"priority_queue_policy":{{{}}}}})",
        fmt::join(config.batching.preferred_batch_sizes, ","),
        config.batching.max_queue_delay.count(), config.batching.priority_levels,
        config.batching.default_priority_level, policy(config.batching.default_queue_policy),
        levels);
  }
  return out + "}";
}

std::string encode_model_statistics(const statistics_snapshot& s) {
  const auto duration = [](const statistics_snapshot::duration& d) {
    return fmt::format(R"({{"count":{},"ns":{}}})", d.count, d.ns);
  };
  std::string batches;
  for (const auto& [size, took] : s.batches) {
    batches += fmt::format(
        R"({}{{"batch_size":{},"compute_input":{},"compute_infer":{},"compute_output":{}}})",
        batches.empty() ? "" : ",", size, duration({took.count, took.compute_input_ns}),
        duration({took.count, took.compute_infer_ns}),
        duration({took.count, took.compute_output_ns}));
  }
  std::string responses;
  for (const auto& [index, at] : s.responses) {
    responses +=
        fmt::format(R"({}"{}":{{"compute_infer":{},"compute_output":{},"success":{},"fail":{},)"
                    R"("empty_response":{},"cancel":{}}})",
                    responses.empty() ? "" : ",", index, duration(at.compute_infer),
                    duration(at.compute_output), duration(at.success), duration(at.fail),
                    duration(at.empty_response), duration(at.cancel));
  }
  return fmt::format(
      R"({{"name":{},"version":"{}","last_inference":{},"inference_count":{},)"
      R"("execution_count":{},"inference_stats":{{"success":{},"fail":{},"queue":{},)"
      R"("compute_input":{},"compute_infer":{},"compute_output":{},)"
      R"("cache_hit":{},"cache_miss":{}}},"batch_stats":[{}],)"
      R"("response_stats":{{{}}}}})",
      quoted(s.name), s.version, s.last_inference_ms, s.inference_count, s.execution_count,
      duration(s.success), duration(s.fail), duration(s.queue), duration(s.compute_input),
      duration(s.compute_infer), duration(s.compute_output), duration(s.cache_hit),
      duration(s.cache_miss), batches, responses);
}

}  // namespace

std::string encode(const model_config& config) { return encode_model_config(config); }

std::string encode(const std::vector<statistics_snapshot>& statistics) {
  std::string out = R"({"model_stats":[)";
  for (std::size_t i = 0; i < statistics.size(); ++i) {
    if (i != 0) out += ',';
    out += encode_model_statistics(statistics[i]);
  }
  return out + "]}";
}

std::string encode(const trace_settings_change& change) {
  std::string out = "{";
  for (const auto& [name, values] : change.settings) {
    if (out.size() > 1) out += ',';
    out += quoted(name);
    out += ':';
    if (!values) {
      out += "null";
    } else if (name == "trace_level") {
      out += '[';
      for (std::size_t i = 0; i < values->size(); ++i) {
        if (i != 0) out += ',';
        out += quoted((*values)[i]);
      }
      out += ']';
    } else {
      out += quoted(values->empty() ? std::string_view{} : std::string_view{values->front()});
    }
  }
  return out + "}";
}

std::string encode(const std::vector<model_index_entry>& index) {
  std::string out = "[";
  for (const model_index_entry& entry : index) {
    if (out.size() > 1) out += ',';
    if (entry.version == 0) {  // one the loader could load
      out += fmt::format(R"({{"name":{},"state":{},"reason":{}}})", quoted(entry.name),
                         quoted(entry.state), quoted(entry.reason));
    } else {
      out +=
          fmt::format(R"({{"name":{},"version":"{}","state":{},"reason":{}}})", quoted(entry.name),
                      entry.version, quoted(entry.state), quoted(entry.reason));
    }
  }
  return out + "]";
}

}  // namespace oip
