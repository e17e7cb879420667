#pragma once
/// \file
/// Triton's shared-memory extensions: regions of POSIX shared memory (`shm_open`), and of a GPU's
/// memory (CUDA), that a client on the same host registers by name, so that tensors pass through
/// them instead of the request and response bodies.

#include <oip/buffer.hpp>
#include <oip/datatype.hpp>
#include <oip/device_memory.hpp>
#include <oip/export.hpp>
#include <oip/infer.hpp>
#include <oip/limits.hpp>
#include <oip/metadata.hpp>
#include <oip/parameters.hpp>
#include <oip/status.hpp>
#include <oip/tensor.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace oip {

/// A requested output that goes to a region.
struct shared_memory_output {
  std::string name;
  shared_memory_reference place;
};

/// The request's outputs that go to shared memory, their references taken out of their
/// parameters. 400 for a malformed reference, or one on an output that also asks for
/// `classification` or `binary_data: true` (as Triton).
[[nodiscard]] OIP_EXPORT result<std::vector<shared_memory_output>> take_shared_memory_outputs(
    inference_request& request);

/// The two kinds of region, which share one name space (as in Triton).
enum class shared_memory_kind : std::uint8_t { system, cuda };

/// An output's place in a region, looked up when the request arrives (as Triton does): the bytes
/// stay mapped (a CUDA region open) while it is held, even if the region is unregistered
/// meanwhile.
struct shared_memory_destination {
  std::string output;
  /// In a system region: the mapped bytes.
  std::span<std::byte> room;
  std::shared_ptr<const void> mapping;
  /// The region's object, open while `mapping` is held, and where `room` ends in it: checked
  /// again before the output is written, since the client may shrink the object meanwhile.
  int object = -1;
  std::uint64_t object_end = 0;
  /// In a CUDA region instead: `device_bytes` of device memory at `device_room` on `device`,
  /// written through `device_access` (kept alive by `mapping`).
  void* device_room = nullptr;
  std::uint64_t device_bytes = 0;
  int device = -1;
  device_memory_access* device_access = nullptr;
};

/// Copies each output of `response` that a destination names into it (to the device for a CUDA
/// region); an output the response lacks is skipped. 400 when an output is larger than its room.
[[nodiscard]] OIP_EXPORT status write_outputs(const std::vector<shared_memory_destination>& places,
                                              const inference_response& response);

class shared_memory_registry;

/// The bytes of input `name` (of `type` and `shape`) at `place`: a view for a fixed-size datatype,
/// whose byte size must be the shape's (Triton's wording, naming `model_name` when given); a copy
/// for BYTES, whose length prefixes must not change once checked, and for a CUDA region (413
/// above `bounds.max_body_bytes` for either, as a request body would be). 400 when `regions` is
/// null (the server does not offer the extension); otherwise errors as
/// `shared_memory_registry::bytes`.
[[nodiscard]] OIP_EXPORT result<buffer> shared_memory_input(const shared_memory_registry* regions,
                                                            const shared_memory_reference& place,
                                                            std::string_view name, datatype type,
                                                            const shape_type& shape,
                                                            const limits& bounds,
                                                            std::string_view model_name = {});

/// Reads each input that `request` left in `shared_memory_inputs` (as the decoders leave them)
/// from its region, with `shared_memory_input`, and puts its tensor at its position among the
/// inputs; `model_name` names the model in messages. An input of a fixed-size datatype in a CUDA
/// region on one of `in_place_devices` is not copied: its tensor spans the device memory
/// (`tensor::in_device_memory`). The server's step before validation.
[[nodiscard]] OIP_EXPORT status read_shared_memory_inputs(
    inference_request& request, const shared_memory_registry* regions, const limits& bounds,
    std::string_view model_name = {}, std::span<const int> in_place_devices = {});

/// The client side of outputs in shared memory: the outputs that a request asks for in shared
/// memory, and the client's own mappings of their regions (registered in `regions` under the
/// names that the request uses). A server writes such an output to its region and answers with
/// its name, datatype and shape only; `decode_response` (JSON or gRPC), given this, reads its data
/// from the region.
///
/// Example:
/// \code
///   oip::shared_memory_registry mine;  // the client's mapping of the region it registered
///   if (oip::status s = mine.register_region("out", "/my_key", 0, 4096); !s.ok()) return s;
///   auto places = oip::shared_memory_outputs::of(request, mine);
///   if (!places) return places.error();
///   oip::result<oip::inference_response> r = oip::decode_response(body, length, {}, &*places);
/// \endcode
struct OIP_EXPORT shared_memory_outputs final : shared_memory_output_source {
  shared_memory_outputs(const shared_memory_registry* mapped,
                        std::vector<shared_memory_output> placed)
      : regions{mapped}, outputs{std::move(placed)} {}

  const shared_memory_registry* regions = nullptr;
  std::vector<shared_memory_output> outputs;

  /// The outputs of `request` that name a region, read from their parameters (which stay as they
  /// are) with the checks and errors of `take_shared_memory_outputs`.
  [[nodiscard]] static result<shared_memory_outputs> of(const inference_request& request,
                                                        const shared_memory_registry& regions);

  [[nodiscard]] const shared_memory_reference* find(std::string_view name) const noexcept override;
  /// Through `shared_memory_output_data`.
  [[nodiscard]] result<buffer> read(const shared_memory_reference& place, std::string_view name,
                                    datatype type, const shape_type& shape,
                                    const limits& bounds) const override;
};

/// The data of output `name` (of `type` and `shape`) that a server wrote at `place`, read through
/// the client's mapping in `regions`: a view of the bytes that the datatype and shape take, which
/// must fit in the room; for BYTES, a copy of the elements that the shape counts (the region may
/// change under the client). 400 when they do not fit or BYTES data is malformed, 413 for BYTES
/// data above `bounds.max_body_bytes`; otherwise errors as `shared_memory_registry::bytes`.
[[nodiscard]] OIP_EXPORT result<buffer> shared_memory_output_data(
    const shared_memory_registry& regions, const shared_memory_reference& place,
    std::string_view name, datatype type, const shape_type& shape, const limits& bounds);

/// Where the request's outputs that go to shared memory are to be written, looked up in
/// `regions` when the request arrives; their references are taken out of their parameters. 400
/// for a malformed reference, or when `regions` is null (the server does not offer the
/// extension); then as `shared_memory_registry::destinations`.
[[nodiscard]] OIP_EXPORT result<std::vector<shared_memory_destination>> shared_memory_destinations(
    inference_request& request, const shared_memory_registry* regions);

/// The regions registered with one server. Each is mapped once, at registration; a tensor read
/// from a region is a view that keeps the mapping alive, so unregistering a region while a request
/// uses it is safe (the mapping goes when the request is done). Thread-safe.
///
/// CUDA regions, where the registry has a `device_memory_access`: each is opened once, at
/// registration (`cudaIpcOpenMemHandle`), and closed once it is unregistered and no request that
/// placed an input or output there is still running. An input read from one is copied to host
/// memory (one copy), unless the model reads device memory on the region's device
/// (`model_config::device_inputs`; not for BYTES, a dynamically batched request, or a request
/// traced with its tensors) and the runtime confirmed at registration that the client's memory
/// holds the whole region (`device_memory_access::extent`; a region past its end is refused
/// then): the model reads it in place. An output is copied to the device after the model has run.
///
/// The bytes stay the client's: fixed-size inputs are views that the client could still change
/// while the model reads them (its own race, as in Triton), and BYTES inputs are copied, since
/// their length prefixes must not change once checked. Each use checks that the object still
/// holds the range (a client that shrank it after registering gets a 400, where Triton's server
/// would fault with SIGBUS); one that shrinks it between that check and the read, or while a
/// model reads a view, still faults the server: offer the extension only to trusted clients.
///
/// Example:
/// \code
///   oip::shared_memory_registry regions;
///   oip::status s = regions.register_region("input0", "/input0_data", 0, 64);
///   oip::result<oip::buffer> bytes = regions.bytes("input0", 0, 64);  // a view, no copy
/// \endcode
class OIP_EXPORT shared_memory_registry {
 public:
  /// What the registered regions may take together: past either, a registration is refused (400,
  /// gRPC FAILED_PRECONDITION) until others are unregistered.
  struct bounds {
    std::size_t max_regions = std::numeric_limits<std::size_t>::max();
    std::uint64_t max_mapped_bytes = std::numeric_limits<std::uint64_t>::max();
  };

  shared_memory_registry();
  /// With `device_memory`, CUDA regions are offered too (their bytes count in `caps` as well).
  explicit shared_memory_registry(bounds caps,
                                  std::shared_ptr<device_memory_access> device_memory = nullptr);
  shared_memory_registry(const shared_memory_registry&) = delete;
  shared_memory_registry& operator=(const shared_memory_registry&) = delete;
  ~shared_memory_registry();

  /// Maps `byte_size` bytes at `offset` of the object `key`. 400 when the name is taken, the
  /// object cannot be opened, it is smaller than `offset + byte_size`, or the region would pass
  /// the registry's `bounds`.
  [[nodiscard]] status register_region(std::string name, std::string key, std::uint64_t offset,
                                       std::uint64_t byte_size);
  /// Whether CUDA regions are offered.
  [[nodiscard]] bool offers_cuda() const noexcept;
  /// Opens the device memory that `handle` (a `cudaIpcMemHandle_t`'s bytes) exports on device
  /// `device_id` as region `name` of `byte_size` bytes. 501 when CUDA regions are not offered;
  /// 400 when the name is taken (by a region of either kind), the handle cannot be opened, or the
  /// region would pass the registry's `bounds`.
  [[nodiscard]] status register_cuda_region(std::string name, std::span<const std::byte> handle,
                                            std::int64_t device_id, std::uint64_t byte_size);
  /// The region of `kind` named so; an unknown name, or a region of the other kind, is not an
  /// error (as in Triton).
  void unregister(std::string_view name, shared_memory_kind kind = shared_memory_kind::system);
  /// Every region of `kind`.
  void unregister_all(shared_memory_kind kind = shared_memory_kind::system);

  /// Every system region (no name) in name order, or the one named (404 when unknown or a CUDA
  /// region, in Triton's words).
  [[nodiscard]] result<std::vector<shared_memory_region>> regions(
      std::optional<std::string_view> name = std::nullopt) const;
  /// The same for CUDA regions.
  [[nodiscard]] result<std::vector<cuda_shared_memory_region>> cuda_regions(
      std::optional<std::string_view> name = std::nullopt) const;

  /// The bytes [offset, offset + byte_size) of region `name` (offsets within the region), as a
  /// buffer that keeps the mapping alive (for a CUDA region, a copy in host memory, 413 above
  /// `host_copy_limit` bytes). 404 for an unknown region, 400 when the range is not inside it or
  /// its object no longer holds it (shrunk since it was registered).
  [[nodiscard]] result<buffer> bytes(
      std::string_view name, std::uint64_t offset, std::uint64_t byte_size,
      std::uint64_t host_copy_limit = std::numeric_limits<std::uint64_t>::max()) const;

  /// Bytes of a region, and where they are.
  struct placed_bytes {
    buffer bytes;
    /// The CUDA device whose memory `bytes` spans (only the device may read it); -1: host memory.
    int device = -1;
  };
  /// As `bytes`, except that the bytes of a CUDA region on one of `devices`, whose extent the
  /// runtime confirmed at registration, are not copied: they are a view of the device memory,
  /// which keeps the region open while it is held.
  [[nodiscard]] result<placed_bytes> bytes_in_place(
      std::string_view name, std::uint64_t offset, std::uint64_t byte_size,
      std::span<const int> devices,
      std::uint64_t host_copy_limit = std::numeric_limits<std::uint64_t>::max()) const;

  /// Where each output goes, checked now: 404 for an unknown region, 400 when a range is not
  /// inside its region.
  [[nodiscard]] result<std::vector<shared_memory_destination>> destinations(
      const std::vector<shared_memory_output>& outputs) const;

 private:
  struct state;
  std::unique_ptr<state> state_;
};

}  // namespace oip
