#pragma once
/// \file
/// Where models run: a CUDA device, or the CPU when none is usable. The probe tells a missing GPU
/// (no device, or no driver at all) from a GPU that is present but unusable (for example a driver
/// older than the CUDA runtime oip was built with), which is a fault to report, not a fallback to
/// hide.

#include <oip/export.hpp>
#include <oip/status.hpp>

#include <string>
#include <string_view>

namespace oip::cuda {

/// What the CUDA runtime says about this machine.
struct probe_result {
  /// Devices that the runtime can use; 0 when there are none or the runtime failed.
  int device_count = 0;
  /// `cudaGetDeviceCount`'s error code: 0 on success, 100 for no device, 35 for a driver older
  /// than the runtime (or none at all: then `driver_version` is 0).
  int error = 0;
  /// The driver's CUDA version (12040 for 12.4); 0 when no driver is installed.
  int driver_version = 0;
  /// The CUDA runtime's version oip was built with.
  int runtime_version = 0;
  /// True when this machine has no GPU to use (no device, or no driver installed): a test skips,
  /// `auto` picks the CPU. False when a device is usable, and when one is present but fails.
  bool absent = false;
  /// One line for a log: what was found, or why nothing can be used.
  std::string message;

  [[nodiscard]] bool usable() const noexcept { return error == 0 && device_count > 0; }
};

/// Asks the CUDA runtime (and driver) what is here. Cheap after the first call.
[[nodiscard]] OIP_EXPORT probe_result probe();

enum class backend : unsigned char { cpu, cuda };

/// The outcome of `select_device`: where to run, and why (for the start-up log).
struct device_selection {
  backend kind = backend::cpu;
  /// The CUDA device's index, when `kind` is `backend::cuda`.
  int index = 0;
  std::string reason;
};

/// Chooses where models run from `choice`: `cpu`; `cuda` (device 0) or `cuda:N`, which fail when
/// that device cannot be used; `auto`, a usable CUDA device if there is one, else the CPU. An
/// unknown choice is `errc::invalid_argument`; a CUDA device that cannot be used is
/// `errc::unavailable` with the runtime's reason.
///
/// Example:
/// \code
///   oip::result<oip::cuda::device_selection> where = oip::cuda::select_device("auto");
///   if (!where) return fail(where.error());
///   log(where->reason);  // "CUDA device 0: NVIDIA H100 ..." or "no CUDA device: ..."
/// \endcode
[[nodiscard]] OIP_EXPORT result<device_selection> select_device(std::string_view choice);

}  // namespace oip::cuda
