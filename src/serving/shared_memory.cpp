#include <oip/log.hpp>
#include <oip/shared_memory.hpp>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <utility>
#include <variant>

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace oip {

namespace {

// One region's mapping; unmapped when the registry and every tensor viewing it let go of it.
struct mapping {
  void* base = MAP_FAILED;
  std::size_t length = 0;
  std::byte* data = nullptr;  // the region's first byte (mmap's offset is page-aligned)
  // The object, kept open so that each use can check it was not shrunk: a read past its end
  // would be a SIGBUS, not an error.
  int fd = -1;
  std::uint64_t object_offset = 0;  // of `data` in the object

  mapping() = default;
  mapping(const mapping&) = delete;
  mapping& operator=(const mapping&) = delete;
  ~mapping() {
    if (base != MAP_FAILED) munmap(base, length);
    if (fd >= 0) close(fd);
  }

  // Where [offset, offset + size) of the region ends in the object (no overflow: the region's
  // range was checked at registration, and this one against the region).
  [[nodiscard]] std::uint64_t end_of(std::uint64_t offset, std::uint64_t size) const noexcept {
    return object_offset + offset + size;
  }
};

// 400 when the object `fd` of `region` no longer reaches byte `end`.
status check_backed(int fd, std::string_view region, std::uint64_t end) {
  struct stat now {};
  if (fstat(fd, &now) != 0) {
    return status{errc::invalid_argument,
                  fmt::format("{} cannot be checked: {}", region, std::strerror(errno))};
  }
  const auto object_size = static_cast<std::uint64_t>(now.st_size);
  if (end <= object_size) return {};
  return status{errc::invalid_argument,
                fmt::format("{} is no longer backed: its object is now {} bytes, and the range "
                            "asked for ends at byte {}",
                            region, object_size, end)};
}

// A CUDA region opened in this process; closed when the registry and every request using it let
// go of it.
struct device_region {
  std::shared_ptr<device_memory_access> access;
  std::byte* base = nullptr;
  int device = 0;
  // Whether the runtime confirmed that the client's memory holds the whole region: only then may
  // a kernel read it in place (a read past the memory faults the device, where a copy fails).
  bool bounded = false;

  device_region() = default;
  device_region(const device_region&) = delete;
  device_region& operator=(const device_region&) = delete;
  ~device_region() {
    if (base != nullptr) access->close(base, device);
  }
};

// A system region (`map`) or a CUDA one (`device`).
struct registered {
  shared_memory_region info;
  std::shared_ptr<mapping> map;
  std::shared_ptr<device_region> device;
};

std::string_view kind_name(shared_memory_kind kind) {
  return kind == shared_memory_kind::cuda ? "CUDA" : "system";
}

result<std::shared_ptr<mapping>> map_region(const shared_memory_region& region) {
  const auto cannot = [&](std::string_view why) {
    return status{
        errc::invalid_argument,
        fmt::format("failed to register shared memory region '{}': {}", region.name, why)};
  };
  // A POSIX shared-memory name: one optional leading '/', then a file name (no '/', no NUL, not
  // "." or ".."). Checked here rather than left to the C library, which would cut a key at a NUL.
  const std::string_view object_name =
      std::string_view{region.key}.substr(region.key.starts_with('/') ? 1 : 0);
  if (object_name.empty() || object_name.size() > NAME_MAX || object_name == "." ||
      object_name == ".." ||
      object_name.find_first_of(std::string_view{"/\0", 2}) != std::string_view::npos) {
    return cannot(
        fmt::format("'{}' is not a shared memory object name (a name of at most {} "
                    "characters, without '/' after the first)",
                    region.key.substr(0, 300), NAME_MAX));
  }
  if (region.byte_size == 0) return cannot("byte_size must be at least 1");
  if (region.offset > UINT64_MAX - region.byte_size) return cannot("offset + byte_size overflows");
  auto map = std::make_shared<mapping>();  // first: it closes the descriptor, whatever follows
  const int fd = shm_open(region.key.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) {
    return status{errc::invalid_argument,
                  fmt::format("Unable to open shared memory region: '{}' ({})", region.key,
                              std::strerror(errno))};
  }
  map->fd = fd;
  struct stat file {};
  const bool sized = fstat(fd, &file) == 0;
  const auto object_size = sized ? static_cast<std::uint64_t>(file.st_size) : 0;
  if (!sized || region.offset + region.byte_size > object_size) {
    return cannot(
        fmt::format("invalid args: offset {} + byte_size {} is past the end of '{}' ({} "
                    "bytes)",
                    region.offset, region.byte_size, region.key, object_size));
  }
  // The range's pages get their memory now (allocated, not written: the data stays as it is). An
  // object made with ftruncate alone is sparse, and a page of it is allocated when it is first
  // touched: on a full tmpfs (a container's 64 MB /dev/shm) that touch, the server's, would be a
  // SIGBUS that ends the server. So a region is registered only if all of it can be held.
  int reserved = 0;
  do {
    reserved = fallocate(fd, 0, static_cast<off_t>(region.offset),
                         static_cast<off_t>(region.byte_size)) == 0
                   ? 0
                   : errno;
  } while (reserved == EINTR);
  // A filesystem without fallocate, or a sandbox that forbids it: no reservation, as before.
  const bool unsupported = reserved == EOPNOTSUPP || reserved == ENOSYS || reserved == EPERM;
  if (reserved != 0 && !unsupported) {
    return cannot(
        fmt::format("the memory of its {} bytes cannot be reserved in '{}' ({}): "
                    "/dev/shm may be too small",
                    region.byte_size, region.key, std::strerror(reserved)));
  }
  const auto page = static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
  const std::uint64_t start = region.offset / page * page;
  map->object_offset = region.offset;
  map->length = static_cast<std::size_t>(region.offset - start + region.byte_size);
  map->base =
      mmap(nullptr, map->length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(start));
  const int map_error = errno;
  if (map->base == MAP_FAILED) {
    return cannot(fmt::format("unable to process address space ({})", std::strerror(map_error)));
  }
  map->data = static_cast<std::byte*>(map->base) + (region.offset - start);
  return map;
}

status bytes_above_limit(std::size_t size, const shared_memory_reference& place,
                         const limits& bounds) {
  return status{errc::payload_too_large,
                fmt::format("BYTES data of {} bytes in shared memory region '{}' is above the "
                            "limit of {} bytes",
                            size, place.region, bounds.max_body_bytes)};
}

}  // namespace

result<std::vector<shared_memory_output>> take_shared_memory_outputs(inference_request& request) {
  std::vector<shared_memory_output> out;
  for (requested_output& output : request.outputs) {
    result<std::optional<shared_memory_reference>> place =
        take_shared_memory_reference(output.parameters, "output", output.name);
    if (!place) return std::move(place).error();
    if (!*place) continue;
    if (output.parameters.contains(parameter_names::classification)) {
      return status{errc::invalid_argument,
                    fmt::format("Output can't set both 'shared_memory_region' and "
                                "'classification' (output '{}')",
                                output.name)};
    }
    if (const parameter_value* binary = output.parameters.find(parameter_names::binary_data)) {
      if (const bool* flag = std::get_if<bool>(binary); flag != nullptr && *flag) {
        return status{errc::invalid_argument,
                      fmt::format("Output can't set both 'shared_memory_region' and "
                                  "'binary_data' (output '{}')",
                                  output.name)};
      }
    }
    out.push_back({output.name, std::move(**place)});
  }
  return out;
}

// Where a checked range of a region is: in a system region's mapping, or in a CUDA region's
// device memory.
struct located {
  std::shared_ptr<mapping> map;
  std::byte* at = nullptr;
  std::shared_ptr<device_region> device;
  std::byte* device_at = nullptr;
};

struct shared_memory_registry::state {
  bounds caps;
  std::shared_ptr<device_memory_access> device_memory;  // null: no CUDA regions
  mutable std::mutex mutex;
  std::map<std::string, registered, std::less<>> regions;
  std::uint64_t mapped_bytes = 0;  // of every region together

  // The range [offset, offset + byte_size) of region `name`, checked.
  result<located> locate(std::string_view name, std::uint64_t offset,
                         std::uint64_t byte_size) const {
    const std::lock_guard lock{mutex};
    const auto found = regions.find(name);
    if (found == regions.end()) {
      return status{errc::not_found,
                    fmt::format("Unable to find shared memory region: '{}'", name)};
    }
    const shared_memory_region& info = found->second.info;
    if (offset >= info.byte_size && !(offset == 0 && byte_size == 0)) {
      return status{errc::invalid_argument,
                    fmt::format("Invalid offset for shared memory region: '{}' (offset {}, the "
                                "region has {} bytes)",
                                name, offset, info.byte_size)};
    }
    if (byte_size > info.byte_size - offset) {
      return status{errc::invalid_argument,
                    fmt::format("Invalid offset + byte size for shared memory region: '{}' "
                                "(offset {} + byte_size {}, the region has {} bytes)",
                                name, offset, byte_size, info.byte_size)};
    }
    if (const std::shared_ptr<device_region>& device = found->second.device) {
      return located{{}, nullptr, device, device->base + offset};
    }
    const std::shared_ptr<mapping>& map = found->second.map;
    if (status held = check_backed(map->fd, fmt::format("shared memory region '{}'", name),
                                   map->end_of(offset, byte_size));
        !held.ok()) {
      return held;
    }
    return located{map, map->data + offset, {}, nullptr};
  }

  // Whether a region `name` of `byte_size` bytes may be added now; the caller holds the mutex.
  [[nodiscard]] status admissible(const std::string& name, std::uint64_t byte_size) const {
    if (regions.count(name) != 0) {
      return status{errc::already_exists,
                    fmt::format("shared memory region '{}' already in manager", name)};
    }
    if (regions.size() >= caps.max_regions) {
      return status{errc::failed_precondition,
                    fmt::format("failed to register shared memory region '{}': the server holds "
                                "its limit of {} regions; unregister one first",
                                name, caps.max_regions)};
    }
    if (byte_size > caps.max_mapped_bytes - std::min(mapped_bytes, caps.max_mapped_bytes)) {
      return status{errc::failed_precondition,
                    fmt::format("failed to register shared memory region '{}': its {} bytes would "
                                "take the regions past their limit of {} bytes mapped",
                                name, byte_size, caps.max_mapped_bytes)};
    }
    return {};
  }

  // Adds a region that `admissible` allowed before it was opened, if it still does.
  status add(registered region) {
    const std::lock_guard lock{mutex};
    if (status s = admissible(region.info.name, region.info.byte_size); !s.ok()) return s;
    mapped_bytes += region.info.byte_size;
    std::string key_name = region.info.name;
    regions.emplace(std::move(key_name), std::move(region));
    return {};
  }

  // 404 in Triton's words when `name` is not a region of `kind`.
  [[nodiscard]] status find_kind(std::string_view name, shared_memory_kind kind,
                                 const registered** out) const {
    const auto found = regions.find(name);
    if (found == regions.end()) {
      return status{errc::not_found,
                    fmt::format("Unable to find {} shared memory region: '{}'",
                                kind == shared_memory_kind::cuda ? "cuda" : "system", name)};
    }
    const shared_memory_kind is =
        found->second.device ? shared_memory_kind::cuda : shared_memory_kind::system;
    if (is != kind) {
      return status{errc::not_found,
                    fmt::format("The region named '{}' is registered as {} shared memory, not {} "
                                "shared memory",
                                name, kind_name(is), kind_name(kind))};
    }
    *out = &found->second;
    return {};
  }
};

shared_memory_registry::shared_memory_registry() : state_{std::make_unique<state>()} {}
shared_memory_registry::shared_memory_registry(bounds caps,
                                               std::shared_ptr<device_memory_access> device_memory)
    : state_{std::make_unique<state>()} {
  state_->caps = caps;
  state_->device_memory = std::move(device_memory);
}

bool shared_memory_registry::offers_cuda() const noexcept {
  return state_->device_memory != nullptr;
}
shared_memory_registry::~shared_memory_registry() = default;

status shared_memory_registry::register_region(std::string name, std::string key,
                                               std::uint64_t offset, std::uint64_t byte_size) {
  if (name.empty()) {
    return status{errc::invalid_argument,
                  "'region name' is necessary to register system shared memory region"};
  }
  // Checked before mapping and again after (another thread may have registered meanwhile).
  {
    const std::lock_guard lock{state_->mutex};
    if (status s = state_->admissible(name, byte_size); !s.ok()) return s;
  }
  shared_memory_region info{std::move(name), std::move(key), offset, byte_size};
  result<std::shared_ptr<mapping>> map = map_region(info);
  if (!map) return std::move(map).error();
  return state_->add({std::move(info), std::move(*map), {}});
}

status shared_memory_registry::register_cuda_region(std::string name,
                                                    std::span<const std::byte> handle,
                                                    std::int64_t device_id,
                                                    std::uint64_t byte_size) {
  if (!state_->device_memory) {
    return status{errc::not_implemented,
                  "this server does not offer the CUDA shared-memory extension"};
  }
  if (name.empty()) {
    return status{errc::invalid_argument,
                  "'region name' is necessary to register CUDA shared memory region"};
  }
  const auto cannot = [&](std::string_view why) {
    return status{errc::invalid_argument,
                  fmt::format("failed to register CUDA shared memory region '{}': {}", name, why)};
  };
  if (byte_size == 0) return cannot("byte_size must be at least 1");
  if (device_id < 0 || device_id > std::numeric_limits<int>::max()) {
    return cannot(fmt::format("no CUDA device {}", device_id));
  }
  {
    const std::lock_guard lock{state_->mutex};
    if (status s = state_->admissible(name, byte_size); !s.ok()) return s;
  }
  const int device = static_cast<int>(device_id);
  result<void*> opened = state_->device_memory->open(handle, device);
  if (!opened) return cannot(opened.error().message());
  auto region = std::make_shared<device_region>();
  region->access = state_->device_memory;
  region->base = static_cast<std::byte*>(*opened);
  region->device = device;
  // On a refusal here the region closes as `region` goes.
  if (const std::optional<std::uint64_t> held = region->access->extent(region->base, device)) {
    if (byte_size > *held) {
      return cannot(
          fmt::format("byte_size {} is past the end of the {} bytes of device memory "
                      "that the handle exports",
                      byte_size, *held));
    }
    region->bounded = true;
  } else if (log_enabled(log_level::warning)) {
    log(log_level::warning,
        fmt::format("CUDA shared memory region '{}': the GPU runtime does not tell how far the "
                    "client's memory reaches, so its inputs are copied to the host",
                    name));
  }
  shared_memory_region info{std::move(name), {}, 0, byte_size};
  return state_->add({std::move(info), {}, std::move(region)});
}

void shared_memory_registry::unregister(std::string_view name, shared_memory_kind kind) {
  registered gone;  // unmapped or closed once the lock is released
  const std::lock_guard lock{state_->mutex};
  const auto found = state_->regions.find(name);
  if (found == state_->regions.end()) return;
  if ((found->second.device != nullptr) != (kind == shared_memory_kind::cuda)) return;
  state_->mapped_bytes -= found->second.info.byte_size;
  gone = std::move(found->second);
  state_->regions.erase(found);
}

void shared_memory_registry::unregister_all(shared_memory_kind kind) {
  std::vector<registered> gone;  // unmapped or closed once the lock is released
  const std::lock_guard lock{state_->mutex};
  for (auto at = state_->regions.begin(); at != state_->regions.end();) {
    if ((at->second.device != nullptr) == (kind == shared_memory_kind::cuda)) {
      state_->mapped_bytes -= at->second.info.byte_size;
      gone.push_back(std::move(at->second));
      at = state_->regions.erase(at);
    } else {
      ++at;
    }
  }
}

result<std::vector<shared_memory_region>> shared_memory_registry::regions(
    std::optional<std::string_view> name) const {
  const std::lock_guard lock{state_->mutex};
  std::vector<shared_memory_region> out;
  if (name) {
    const registered* found = nullptr;
    if (status s = state_->find_kind(*name, shared_memory_kind::system, &found); !s.ok()) return s;
    out.push_back(found->info);
    return out;
  }
  for (const auto& [region_name, region] : state_->regions) {
    if (!region.device) out.push_back(region.info);
  }
  return out;
}

result<std::vector<cuda_shared_memory_region>> shared_memory_registry::cuda_regions(
    std::optional<std::string_view> name) const {
  const std::lock_guard lock{state_->mutex};
  const auto listed = [](const registered& region) {
    return cuda_shared_memory_region{region.info.name, region.device->device,
                                     region.info.byte_size};
  };
  std::vector<cuda_shared_memory_region> out;
  if (name) {
    const registered* found = nullptr;
    if (status s = state_->find_kind(*name, shared_memory_kind::cuda, &found); !s.ok()) return s;
    out.push_back(listed(*found));
    return out;
  }
  for (const auto& [region_name, region] : state_->regions) {
    if (region.device) out.push_back(listed(region));
  }
  return out;
}

result<buffer> shared_memory_registry::bytes(std::string_view name, std::uint64_t offset,
                                             std::uint64_t byte_size,
                                             std::uint64_t host_copy_limit) const {
  result<placed_bytes> placed = bytes_in_place(name, offset, byte_size, {}, host_copy_limit);
  if (!placed) return std::move(placed).error();
  return std::move(placed->bytes);
}

result<shared_memory_registry::placed_bytes> shared_memory_registry::bytes_in_place(
    std::string_view name, std::uint64_t offset, std::uint64_t byte_size,
    std::span<const int> devices, std::uint64_t host_copy_limit) const {
  result<located> place = state_->locate(name, offset, byte_size);
  if (!place) return std::move(place).error();
  const auto size = static_cast<std::size_t>(byte_size);
  if (!place->device) return placed_bytes{buffer::view({place->at, size}, std::move(place->map))};
  const int device = place->device->device;
  if (place->device->bounded &&
      std::find(devices.begin(), devices.end(), device) != devices.end()) {
    std::byte* at = place->device_at;
    return placed_bytes{buffer::view({at, size}, std::move(place->device)), device};
  }
  if (byte_size > host_copy_limit) {
    return status{errc::payload_too_large,
                  fmt::format("{} bytes of CUDA shared memory region '{}' are above the limit "
                              "of {} bytes copied to the host",
                              byte_size, name, host_copy_limit)};
  }
  result<mutable_buffer> copy = mutable_buffer::allocate_for_overwrite(size);
  if (!copy) return std::move(copy).error();
  if (size != 0) {
    if (status s =
            place->device->access->copy_to_host({copy->data(), size}, place->device_at, device);
        !s.ok()) {
      return s;
    }
  }
  return placed_bytes{buffer{std::move(*copy)}};
}

namespace {

// shared_memory_input, where the bytes of a fixed-size input in a CUDA region on one of
// `in_place_devices` stay in device memory.
result<shared_memory_registry::placed_bytes> input_bytes(
    const shared_memory_registry* regions, const shared_memory_reference& place,
    std::string_view name, datatype type, const shape_type& shape, const limits& bounds,
    std::string_view model_name, std::span<const int> in_place_devices) {
  if (regions == nullptr) {
    return status{errc::invalid_argument,
                  fmt::format("input '{}' names shared memory region '{}', but this server does "
                              "not offer the shared-memory extension",
                              name, place.region)};
  }
  if (!is_bytes(type)) {
    // Fails only where a host's element limit lets the byte size pass 2^64.
    const result<std::uint64_t> expected = byte_size(type, shape);
    if (!expected) {
      return status{errc::invalid_argument,
                    fmt::format("unable to parse 'shape' for input '{}': {}", name,
                                expected.error().message())};
    }
    if (place.byte_size != *expected) {
      return status{
          errc::invalid_argument,
          fmt::format(
              "input byte size mismatch for input '{}'{}. Expected {}, got {}", name,
              model_name.empty() ? std::string{} : fmt::format(" for model '{}'", model_name),
              *expected, place.byte_size)};
    }
    return regions->bytes_in_place(place.region, place.offset, place.byte_size, in_place_devices,
                                   bounds.max_body_bytes);
  }
  result<buffer> view =
      regions->bytes(place.region, place.offset, place.byte_size, bounds.max_body_bytes);
  if (!view) return std::move(view).error();
  if (view->size() > bounds.max_body_bytes) {
    return bytes_above_limit(view->size(), place, bounds);
  }
  result<buffer> copy = buffer::copy_of(view->bytes());
  if (!copy) return std::move(copy).error();
  return shared_memory_registry::placed_bytes{std::move(*copy)};
}

}  // namespace

result<buffer> shared_memory_input(const shared_memory_registry* regions,
                                   const shared_memory_reference& place, std::string_view name,
                                   datatype type, const shape_type& shape, const limits& bounds,
                                   std::string_view model_name) {
  result<shared_memory_registry::placed_bytes> placed =
      input_bytes(regions, place, name, type, shape, bounds, model_name, {});
  if (!placed) return std::move(placed).error();
  return std::move(placed->bytes);
}

status read_shared_memory_inputs(inference_request& request, const shared_memory_registry* regions,
                                 const limits& bounds, std::string_view model_name,
                                 std::span<const int> in_place_devices) {
  for (input_in_shared_memory& input : request.shared_memory_inputs) {
    result<shared_memory_registry::placed_bytes> placed =
        input_bytes(regions, input.place, input.name, input.type, input.shape, bounds, model_name,
                    in_place_devices);
    if (!placed) return std::move(placed).error();
    result<tensor> made =
        placed->device < 0
            ? tensor::make(std::move(input.name), input.type, std::move(input.shape),
                           std::move(placed->bytes))
            : tensor::in_device_memory(std::move(input.name), input.type, std::move(input.shape),
                                       std::move(placed->bytes), placed->device);
    if (!made) {
      // Only BYTES data can be malformed here (the byte size of the others was checked).
      return status{made.error().code(),
                    model_name.empty()
                        ? made.error().message()
                        : fmt::format("{} for model '{}'", made.error().message(), model_name)};
    }
    made->parameters() = std::move(input.parameters);
    const std::size_t at = std::min(input.position, request.inputs.size());
    request.inputs.insert(request.inputs.begin() + static_cast<std::ptrdiff_t>(at),
                          std::move(*made));
  }
  request.shared_memory_inputs.clear();
  return {};
}

result<shared_memory_outputs> shared_memory_outputs::of(const inference_request& request,
                                                        const shared_memory_registry& regions) {
  inference_request asked;  // a copy of the requested outputs, whose references are taken
  asked.outputs = request.outputs;
  result<std::vector<shared_memory_output>> outputs = take_shared_memory_outputs(asked);
  if (!outputs) return std::move(outputs).error();
  return shared_memory_outputs{&regions, std::move(*outputs)};
}

result<buffer> shared_memory_outputs::read(const shared_memory_reference& place,
                                           std::string_view name, datatype type,
                                           const shape_type& shape, const limits& bounds) const {
  return shared_memory_output_data(*regions, place, name, type, shape, bounds);
}

const shared_memory_reference* shared_memory_outputs::find(std::string_view name) const noexcept {
  for (const shared_memory_output& output : outputs) {
    if (output.name == name) return &output.place;
  }
  return nullptr;
}

result<buffer> shared_memory_output_data(const shared_memory_registry& regions,
                                         const shared_memory_reference& place,
                                         std::string_view name, datatype type,
                                         const shape_type& shape, const limits& bounds) {
  result<buffer> room = regions.bytes(place.region, place.offset, place.byte_size);
  if (!room) return room;
  const result<std::uint64_t> count = element_count(shape);
  if (!count) {
    return status{errc::invalid_argument, fmt::format("unable to parse 'shape' for output '{}': {}",
                                                      name, count.error().message())};
  }
  if (!is_bytes(type)) {
    const result<std::uint64_t> needed = byte_size(type, shape);
    if (!needed || *needed > room->size()) {
      return status{errc::invalid_argument,
                    fmt::format("output '{}' of shape {} does not fit in the {} bytes asked for "
                                "in shared memory region '{}'",
                                name, to_string(shape), room->size(), place.region)};
    }
    return room->slice(0, static_cast<std::size_t>(*needed));
  }
  const std::string what =
      fmt::format("output '{}' in shared memory region '{}'", name, place.region);
  const result<std::size_t> extent = bytes_elements_extent(room->bytes(), *count, what);
  if (!extent) return extent.error();
  if (*extent > bounds.max_body_bytes) return bytes_above_limit(*extent, place, bounds);
  result<buffer> copy = buffer::copy_of(room->bytes().first(*extent));
  if (!copy) return copy;
  // What the walk measured may have changed before the copy: the copy is what the tensor holds.
  if (status s = validate_bytes_elements(copy->bytes(), *count, what); !s.ok()) return s;
  return copy;
}

result<std::vector<shared_memory_destination>> shared_memory_registry::destinations(
    const std::vector<shared_memory_output>& outputs) const {
  std::vector<shared_memory_destination> out;
  out.reserve(outputs.size());
  for (const shared_memory_output& output : outputs) {
    result<located> place =
        state_->locate(output.place.region, output.place.offset, output.place.byte_size);
    if (!place) return std::move(place).error();
    if (place->device) {
      shared_memory_destination to_device;
      to_device.output = output.name;
      to_device.device_room = place->device_at;
      to_device.device_bytes = output.place.byte_size;
      to_device.device = place->device->device;
      to_device.device_access = place->device->access.get();
      to_device.mapping = std::move(place->device);
      out.push_back(std::move(to_device));
      continue;
    }
    const int object = place->map->fd;
    const std::uint64_t end = place->map->end_of(output.place.offset, output.place.byte_size);
    out.push_back({output.name,
                   {place->at, static_cast<std::size_t>(output.place.byte_size)},
                   std::move(place->map),
                   object,
                   end});
  }
  return out;
}

result<std::vector<shared_memory_destination>> shared_memory_destinations(
    inference_request& request, const shared_memory_registry* regions) {
  result<std::vector<shared_memory_output>> outputs = take_shared_memory_outputs(request);
  if (!outputs) return std::move(outputs).error();
  if (outputs->empty()) return std::vector<shared_memory_destination>{};
  if (regions == nullptr) {
    return status{errc::invalid_argument,
                  fmt::format("output '{}' names shared memory region '{}', but this server does "
                              "not offer the shared-memory extension",
                              outputs->front().name, outputs->front().place.region)};
  }
  return regions->destinations(*outputs);
}

status write_outputs(const std::vector<shared_memory_destination>& places,
                     const inference_response& response) {
  for (const shared_memory_destination& place : places) {
    for (const tensor& t : response.outputs) {
      if (t.name() != place.output) continue;
      const std::span<const std::byte> data = t.data().bytes();
      const std::uint64_t room =
          place.device_access != nullptr ? place.device_bytes : place.room.size();
      if (data.size() > room) {
        return status{errc::invalid_argument,
                      fmt::format("shared memory size specified with the request for output '{}' "
                                  "({} bytes) should be at least {} bytes to hold the results",
                                  place.output, room, data.size())};
      }
      if (place.device_access != nullptr) {
        if (data.empty()) break;
        if (status s = place.device_access->copy_to_device(place.device_room, data, place.device);
            !s.ok()) {
          return s;
        }
        break;
      }
      if (place.object >= 0) {
        if (status held = check_backed(
                place.object, fmt::format("the shared memory region of output '{}'", place.output),
                place.object_end);
            !held.ok()) {
          return held;
        }
      }
      // memmove: an identity model's output may be a view of an input in the same region.
      if (!data.empty()) std::memmove(place.room.data(), data.data(), data.size());
      break;
    }
  }
  return {};
}

}  // namespace oip
