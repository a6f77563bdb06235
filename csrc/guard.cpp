// DeviceGuardImpl for `tpu`: device switching, streams and events.
//
// See streams.h for the model: all streams of a device are labels on the
// device's single in-order queue (JAX executes a device's work in submission
// order); events are marker computations tracked in Python.
#include "device.h"
#include "streams.h"

#include <c10/core/DeviceCapability.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <vector>

namespace torchtpu {

namespace {

// Current stream id per device, per thread (as CUDA).
thread_local std::vector<c10::StreamId> t_current_streams;

c10::DeviceIndex resolve(c10::DeviceIndex device) {
  if (device < 0) {
    device = current_device();
  }
  check_device_index(device);
  return device;
}

c10::StreamId& current_slot(c10::DeviceIndex device) {
  if (t_current_streams.size() <= static_cast<size_t>(device)) {
    t_current_streams.resize(static_cast<size_t>(device) + 1, 0);
  }
  return t_current_streams[device];
}

int clamp_priority(int priority) {
  if (priority > 0) {
    return 0;
  }
  return priority < kMinPriority ? kMinPriority : priority;
}

// Serials 1..kPoolSize are the pool; new streams count up from there.
std::atomic<int64_t> g_next_serial{kPoolSize + 1};
std::atomic<uint32_t> g_pool_cursor[2];

}  // namespace

c10::StreamId make_stream_id(int64_t serial, int priority) {
  return static_cast<c10::StreamId>(
      (serial << kPriorityBits) | static_cast<int64_t>(-clamp_priority(priority)));
}

int stream_priority(c10::StreamId id) {
  return -static_cast<int>(id & ((1 << kPriorityBits) - 1));
}

c10::Stream current_stream(c10::DeviceIndex device) {
  device = resolve(device);
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kTpu, device), current_slot(device));
}

c10::Stream exchange_stream(c10::Stream stream) {
  const auto device = resolve(stream.device_index());
  auto& slot = current_slot(device);
  const c10::Stream previous(c10::Stream::UNSAFE, c10::Device(kTpu, device), slot);
  slot = stream.id();
  return previous;
}

c10::Stream new_stream(c10::DeviceIndex device, int priority) {
  device = resolve(device);
  return c10::Stream(
      c10::Stream::UNSAFE,
      c10::Device(kTpu, device),
      make_stream_id(g_next_serial.fetch_add(1), priority));
}

c10::Stream pool_stream(c10::DeviceIndex device, bool high_priority) {
  device = resolve(device);
  const auto k = g_pool_cursor[high_priority ? 1 : 0].fetch_add(1) % kPoolSize;
  return c10::Stream(
      c10::Stream::UNSAFE,
      c10::Device(kTpu, device),
      make_stream_id(1 + k, high_priority ? -1 : 0));
}

namespace {

uint64_t event_id(void* event) {
  return reinterpret_cast<uintptr_t>(event);
}

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
    return current_stream(device.index());
  }

  c10::Stream getDefaultStream(c10::Device device) const override {
    return c10::Stream(c10::Stream::DEFAULT, c10::Device(kTpu, resolve(device.index())));
  }

  c10::Stream getStreamFromGlobalPool(c10::Device device, bool high_priority) const override {
    return pool_stream(device.index(), high_priority);
  }

  c10::Stream getNewStream(c10::Device device, int priority) const override {
    return new_stream(device.index(), priority);
  }

  c10::Stream exchangeStream(c10::Stream stream) const override {
    return exchange_stream(stream);
  }

  c10::DeviceIndex deviceCount() const noexcept override {
    return device_count();
  }

  c10::DeviceCapability getDeviceCapability(c10::Device) const override {
    // Every dtype tpu tensors can hold and convert between; quantized types
    // have no lowering.
    c10::DeviceCapability cap;
    auto& t = cap.capability_data.supported_scalar_types;
    t.has_QInt8 = false;
    t.has_QUInt8 = false;
    t.has_QInt32 = false;
    t.has_QUInt4x2 = false;
    t.has_QUInt2x4 = false;
    return cap;
  }

  void record(
      void** event,
      const c10::Stream& stream,
      const c10::DeviceIndex device_index,
      const c10::EventFlag flag) const override {
    TORCH_CHECK(
        device_index == -1 || device_index == stream.device_index(),
        "Event device index ",
        int(device_index),
        " does not match recording stream's device index ",
        int(stream.device_index()),
        ".");
    if (*event == nullptr) {
      *event = reinterpret_cast<void*>(static_cast<uintptr_t>(new_event_id()));
    }
    event_record(
        event_id(*event),
        resolve(stream.device_index()),
        stream.id(),
        flag == c10::EventFlag::BACKEND_DEFAULT);
  }

  // A stream waiting for an event needs no device-side wait: the device's
  // queue is in order, and work on another device that consumes the event's
  // results receives them by a transfer, which waits for them.
  void block(void*, const c10::Stream&) const override {}

  bool queryEvent(void* event) const override {
    return event == nullptr || event_query(event_id(event));
  }

  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    if (event != nullptr) {
      event_destroy(event_id(event));
    }
  }

  bool queryStream(const c10::Stream& stream) const override {
    return device_query(resolve(stream.device_index()));
  }

  void synchronizeStream(const c10::Stream& stream) const override {
    synchronize_device(resolve(stream.device_index()));
  }

  void synchronizeEvent(void* event) const override {
    if (event != nullptr) {
      event_synchronize(event_id(event));
    }
  }

  void synchronizeDevice(const c10::DeviceIndex device) const override {
    synchronize_device(device);
  }

  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(
        start != nullptr && end != nullptr,
        "Both events must be recorded before calculating elapsed time.");
    return event_elapsed_ms(event_id(start), event_id(end));
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, TpuGuardImpl);

}  // namespace
}  // namespace torchtpu
