// Device bookkeeping for `tpu`: the current device (per thread, as CUDA) and
// the device count, which is learned lazily from Python (JAX) so that
// `import torch` stays cheap.
#pragma once

#include <c10/core/Device.h>

#include <functional>
#include <string>

namespace torchtpu {

constexpr c10::DeviceType kTpu = c10::DeviceType::PrivateUse1;

// Number of devices of the selected JAX platform.  The first call (from any
// thread) asks Python once, with the GIL; it returns 0 if JAX failed to
// start, and `init_error()` then says why.
c10::DeviceIndex device_count() noexcept;
const std::string& init_error();

// Installed by Python at import: returns the device count (starting JAX).
void set_device_count_provider(std::function<int()> provider);
// Installed by Python at import: waits for all queued work on a device.
void set_synchronize_hook(std::function<void(c10::DeviceIndex)> hook);
void synchronize_device(c10::DeviceIndex device);

c10::DeviceIndex current_device();
void set_current_device(c10::DeviceIndex device);
// Throws a clear error unless 0 <= device < device_count().
void check_device_index(c10::DeviceIndex device);

}  // namespace torchtpu
