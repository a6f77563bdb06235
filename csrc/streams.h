// Streams and events of `tpu`: the C++ side shared by the DeviceGuardImpl
// (guard.cpp) and the Python bindings (stream_bindings.cpp).
//
// JAX gives no user-visible streams: the work of one device executes in
// submission order.  So every stream of a device -- the default stream, pool
// streams, `torch.Stream(device="tpu")` -- is a label on that one in-order
// queue.  Stream ids are real and distinct (current-stream bookkeeping,
// `with stream:`, equality all behave as on CUDA); ordering between them is
// the device's submission order, which is at least as strong as CUDA's.
//
// Events are implemented in Python (torchtpu/streams.py): recording one
// enqueues a marker computation on the device, which completes after all
// work submitted to that device before it.  The guard reaches them through
// the hooks installed with `_set_event_hooks`.
#pragma once

#include <c10/core/Stream.h>

#include <cstdint>

namespace torchtpu {

// Stream ids: 0 is the default stream.  Others carry their priority (0 or
// negative, as CUDA's) in the low bits.
constexpr int kPriorityBits = 3;
constexpr int kMinPriority = -((1 << kPriorityBits) - 1);  // -7
constexpr int kPoolSize = 32;  // pool streams per priority, as CUDA

c10::StreamId make_stream_id(int64_t serial, int priority);
int stream_priority(c10::StreamId id);

// Current stream of a device for the calling thread (device < 0: current device).
c10::Stream current_stream(c10::DeviceIndex device);
c10::Stream exchange_stream(c10::Stream stream);
c10::Stream new_stream(c10::DeviceIndex device, int priority);
c10::Stream pool_stream(c10::DeviceIndex device, bool high_priority);

// Event hooks (Python).  Each acquires the GIL; safe from any thread.
// Queries return neutral values once the interpreter is finalizing.
uint64_t new_event_id();
void event_record(uint64_t id, c10::DeviceIndex device, c10::StreamId stream, bool timing);
bool event_query(uint64_t id);
void event_synchronize(uint64_t id);
double event_elapsed_ms(uint64_t start, uint64_t end);
void event_destroy(uint64_t id) noexcept;
// Whether all work submitted to `device` so far has completed.
bool device_query(c10::DeviceIndex device);

}  // namespace torchtpu
