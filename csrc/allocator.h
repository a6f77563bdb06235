// Synthetic device allocator for the `tpu` device.
//
// Device memory is owned by JAX (each storage's bytes live in a jax.Array held
// by the Python box table).  This allocator only hands out *addresses*: unique,
// never-dereferenceable numbers that identify a storage and key its box.  They
// come from a PROT_NONE reservation, so a stray host read faults instead of
// returning garbage.
//
// Frees are deferred: a storage deleter may run on any thread without the GIL,
// so it only records a "free" event.  Python drains the events at safe points,
// drops the boxes, and then releases the addresses back for reuse.  An address
// is therefore never handed out while a stale box for it may still exist.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Device.h>
#include <c10/core/Storage.h>

#include <cstdint>
#include <vector>

namespace torchtpu {

enum class StorageEventKind : int {
  kFree = 0,  // the storage at `address` died; drop its box
  kMove = 1,  // a storage was re-allocated from `address` to `new_address`
              // of `nbytes` bytes (storage resize); the bytes both sizes
              // share carry over
};

struct StorageEvent {
  StorageEventKind kind;
  uintptr_t address;
  uintptr_t new_address;
  size_t nbytes;
  c10::DeviceIndex device;
};

class SyntheticAllocator;

// The process-wide allocator instance (never destroyed: deleters may run
// during static destruction).
SyntheticAllocator* get_allocator();
c10::Allocator* get_allocator_base();

// Events recorded since the last drain, in order.  Cheap when empty.
bool has_storage_events();
std::vector<StorageEvent> drain_storage_events();

// Python has dropped the boxes of these addresses: they may be reused.
void release_addresses(const std::vector<uintptr_t>& addresses);

// Grows or shrinks a tpu storage in place (storage.resize_ / tensor.resize_).
// The storage gets a fresh address; a kMove event tells Python to carry the
// bytes that survive the resize over to the new box.
void resize_storage_bytes(c10::StorageImpl* storage, size_t new_nbytes);

// Device that owns a synthetic address, or -1.
c10::DeviceIndex device_of_address(const void* ptr);

struct BasicStats {
  int64_t allocated_bytes;
  int64_t peak_allocated_bytes;
  int64_t reserved_bytes;
  int64_t peak_reserved_bytes;
  int64_t allocations;
  int64_t peak_allocations;
  int64_t pending_free_bytes;
};
BasicStats basic_stats(c10::DeviceIndex device);

}  // namespace torchtpu
