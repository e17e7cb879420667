#pragma once
/// \file
/// Metadata, health and status objects of the protocol: server metadata, model metadata, readiness
/// and liveness, the repository index, and the registered shared-memory regions.

#include <oip/datatype.hpp>
#include <oip/parameters.hpp>
#include <oip/tensor.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace oip {

/// `$metadata_server_response`.
struct server_metadata {
  std::string name;
  std::string version;
  std::vector<std::string> extensions;

  friend bool operator==(const server_metadata&, const server_metadata&) = default;
};

/// `$metadata_tensor`: a model's input or output. -1 marks a variable dimension.
struct tensor_metadata {
  std::string name;
  datatype type = datatype::fp32;
  shape_type shape;
  /// Extra properties a server reports with the tensor (none by default); sent as "parameters".
  oip::parameters parameters;

  friend bool operator==(const tensor_metadata&, const tensor_metadata&) = default;
};

/// `$metadata_model_response`.
struct model_metadata {
  std::string name;
  /// Versions that may be requested explicitly; empty: not reported.
  std::vector<std::string> versions;
  std::string platform;
  std::vector<tensor_metadata> inputs;
  std::vector<tensor_metadata> outputs;
  /// Extra model properties (none by default); sent as "properties" when not empty.
  oip::parameters properties;

  friend bool operator==(const model_metadata&, const model_metadata&) = default;
};

/// `$live_server_response` ({"live": ...}).
struct server_live {
  bool live = false;
  friend bool operator==(const server_live&, const server_live&) = default;
};

/// `$ready_server_response` ({"ready": ...}; the spec's example writes "live" by mistake).
struct server_ready {
  bool ready = false;
  friend bool operator==(const server_ready&, const server_ready&) = default;
};

/// The body of Triton's `POST /v2/repository/index`: with `ready`, only the models that are ready
/// are listed. An empty body asks for every model.
struct repository_index_request {
  bool ready = false;
  friend bool operator==(const repository_index_request&,
                         const repository_index_request&) = default;
};

/// `$ready_model_response`.
struct model_ready {
  std::string name;
  bool ready = false;
  friend bool operator==(const model_ready&, const model_ready&) = default;
};

/// One row of the repository index (Triton's `POST /v2/repository/index`).
struct model_index_entry {
  std::string name;
  std::uint64_t version = 0;
  std::string state;  ///< READY, UNAVAILABLE (not ready) or UNLOADING (draining)
  std::string reason;
};

/// A registered region, as the status routes report it.
struct shared_memory_region {
  std::string name;
  std::string key;  ///< the shared-memory object's name, as passed to `shm_open`
  std::uint64_t offset = 0;
  std::uint64_t byte_size = 0;

  friend bool operator==(const shared_memory_region&, const shared_memory_region&) = default;
};

/// A CUDA shared-memory region, as Triton's status routes list one.
struct cuda_shared_memory_region {
  std::string name;
  std::int64_t device_id = 0;
  std::uint64_t byte_size = 0;

  friend bool operator==(const cuda_shared_memory_region&,
                         const cuda_shared_memory_region&) = default;
};

/// A request to register a CUDA region: the client's `cudaIpcMemHandle_t` (its raw bytes), the
/// device it is on and its size.
struct cuda_shared_memory_registration {
  std::string name;
  std::string raw_handle;
  std::int64_t device_id = 0;
  std::uint64_t byte_size = 0;
};

}  // namespace oip
