#include "device.h"

#include <c10/util/Exception.h>

#include <pybind11/pybind11.h>

#include <atomic>

namespace py = pybind11;

namespace torchtpu {

namespace {

std::atomic<int> g_device_count{-1};
std::string g_init_error;
// Leaked: they hold Python callables and must not be destroyed after the
// interpreter is gone.
auto* g_count_provider = new std::function<int()>();
auto* g_synchronize_hook = new std::function<void(c10::DeviceIndex)>();

thread_local c10::DeviceIndex t_current_device = 0;

}  // namespace

void set_device_count_provider(std::function<int()> provider) {
  *g_count_provider = std::move(provider);
}

void set_synchronize_hook(std::function<void(c10::DeviceIndex)> hook) {
  *g_synchronize_hook = std::move(hook);
}

c10::DeviceIndex device_count() noexcept {
  int count = g_device_count.load(std::memory_order_acquire);
  if (count >= 0) {
    return static_cast<c10::DeviceIndex>(count);
  }
  if (!*g_count_provider || !Py_IsInitialized()) {
    return 0;  // not initialised yet: ask again later
  }
  // No C++ mutex here: the provider may release the GIL while JAX starts, and
  // a mutex held across that would deadlock with a thread waiting for the
  // GIL.  The Python provider serialises itself and is idempotent.
  try {
    py::gil_scoped_acquire gil;
    count = (*g_count_provider)();
  } catch (const std::exception& e) {
    py::gil_scoped_acquire gil;
    g_init_error = e.what();
    count = 0;
  }
  g_device_count.store(count, std::memory_order_release);
  return static_cast<c10::DeviceIndex>(count);
}

const std::string& init_error() {
  return g_init_error;
}

void synchronize_device(c10::DeviceIndex device) {
  if (!*g_synchronize_hook || !Py_IsInitialized()) {
    return;
  }
  py::gil_scoped_acquire gil;
  (*g_synchronize_hook)(device);
}

c10::DeviceIndex current_device() {
  return t_current_device;
}

void set_current_device(c10::DeviceIndex device) {
  t_current_device = device;
}

void check_device_index(c10::DeviceIndex device) {
  const auto count = device_count();
  if (device >= 0 && device < count) {
    return;
  }
  if (count == 0) {
    TORCH_CHECK(
        false,
        "torchtpu: no tpu device is available",
        init_error().empty() ? std::string() : ": " + init_error());
  }
  TORCH_CHECK(
      false,
      "Invalid device ordinal tpu:",
      int(device),
      " (torchtpu sees ",
      int(count),
      " device",
      count == 1 ? "" : "s",
      "; set TORCHTPU_NUM_DEVICES on the CPU platform for more)");
}

}  // namespace torchtpu
