// PrivateUse1 hooks: how generic PyTorch code (torch.accelerator, generators,
// storage resizing, pin_memory checks) learns about the `tpu` device.
#include "allocator.h"
#include "device.h"
#include "generator.h"

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/util/Exception.h>

namespace torchtpu {

at::Allocator* host_allocator();                 // host_allocator.cpp
bool is_pinned_host_ptr(const void* ptr);        // host_allocator.cpp

namespace {

struct TpuHooks final : public at::PrivateUse1HooksInterface {
  void init() const override {
    (void)device_count();
  }

  bool isBuilt() const override {
    return true;
  }

  bool isAvailable() const override {
    return device_count() > 0;
  }

  bool hasPrimaryContext(c10::DeviceIndex device) const override {
    return device >= 0 && device < device_count();
  }

  c10::DeviceIndex deviceCount() const override {
    return device_count();
  }

  void setCurrentDevice(c10::DeviceIndex device) const override {
    check_device_index(device);
    set_current_device(device);
  }

  c10::DeviceIndex getCurrentDevice() const override {
    return current_device();
  }

  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    const auto previous = current_device();
    setCurrentDevice(device);
    return previous;
  }

  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    if (device < 0 || device >= device_count()) {
      return current_device();
    }
    return exchangeDevice(device);
  }

  const at::Generator& getDefaultGenerator(
      c10::DeviceIndex device) const override {
    return default_generator(device);
  }

  at::Generator getNewGenerator(c10::DeviceIndex device) const override {
    return new_generator(device);
  }

  at::Device getDeviceFromPtr(void* data) const override {
    const auto device = device_of_address(data);
    TORCH_CHECK(device >= 0, "torchtpu: pointer is not a tpu address");
    return at::Device(kTpu, device);
  }

  bool isPinnedPtr(const void* data) const override {
    return is_pinned_host_ptr(data);
  }

  at::Allocator* getPinnedMemoryAllocator() const override {
    return host_allocator();
  }

  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize)
      const override {
    resize_storage_bytes(storage.unsafeGetStorageImpl(), newsize);
  }
};

}  // namespace

void register_hooks() {
  static bool registered = false;
  if (!registered) {
    at::RegisterPrivateUse1HooksInterface(new TpuHooks());
    registered = true;
  }
}

}  // namespace torchtpu
