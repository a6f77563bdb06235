// DeviceGuardImpl for `tpu`: device switching plus one default stream per
// device.  Work submitted through JAX executes in submission order per
// device, so the default stream is the only stream for now; events are
// markers that are complete once recorded work is, which synchronising the
// device guarantees.
#include "device.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

namespace torchtpu {
namespace {

struct TpuGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override {
    return kTpu;
  }

  c10::Device exchangeDevice(c10::Device device) const override {
    TORCH_INTERNAL_ASSERT(device.type() == kTpu);
    const c10::Device previous = getDevice();
    if (device.index() != previous.index()) {
      setDevice(device);
    }
    return previous;
  }

  c10::Device getDevice() const override {
    return c10::Device(kTpu, current_device());
  }

  void setDevice(c10::Device device) const override {
    TORCH_INTERNAL_ASSERT(device.type() == kTpu);
    check_device_index(device.index());
    set_current_device(device.index());
  }

  void uncheckedSetDevice(c10::Device device) const noexcept override {
    set_current_device(device.index());
  }

  c10::Stream getStream(c10::Device device) const override {
    return c10::Stream(c10::Stream::DEFAULT, device);
  }

  c10::Stream getDefaultStream(c10::Device device) const override {
    return c10::Stream(c10::Stream::DEFAULT, device);
  }

  c10::Stream getStreamFromGlobalPool(c10::Device device, bool) const override {
    return c10::Stream(c10::Stream::DEFAULT, device);
  }

  c10::Stream getNewStream(c10::Device device, int) const override {
    return c10::Stream(c10::Stream::DEFAULT, device);
  }

  c10::Stream exchangeStream(c10::Stream stream) const override {
    return c10::Stream(c10::Stream::DEFAULT, stream.device());
  }

  c10::DeviceIndex deviceCount() const noexcept override {
    return device_count();
  }

  void record(
      void** event,
      const c10::Stream&,
      const c10::DeviceIndex,
      const c10::EventFlag) const override {
    // Any non-null marker: ordering on the single stream is implicit.
    *event = reinterpret_cast<void*>(uintptr_t(1));
  }

  void block(void*, const c10::Stream&) const override {}

  bool queryEvent(void*) const override {
    return true;
  }

  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}

  bool queryStream(const c10::Stream&) const override {
    return true;
  }

  void synchronizeStream(const c10::Stream& stream) const override {
    synchronize_device(stream.device_index());
  }

  void synchronizeEvent(void*) const override {
    synchronize_device(current_device());
  }

  void synchronizeDevice(const c10::DeviceIndex device) const override {
    synchronize_device(device);
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, TpuGuardImpl);

}  // namespace
}  // namespace torchtpu
