// The caching allocator of the `tpu` device.
//
// Device memory is owned by JAX (each storage's bytes live in a jax.Array held
// by the Python box table).  This allocator hands out *addresses*: unique,
// never-dereferenceable numbers that identify a storage and key its box.  They
// come from a PROT_NONE reservation, so a stray host read faults instead of
// returning garbage.
//
// On top of the addresses it runs CUDA's caching-allocator policy, with CUDA's
// arithmetic: sizes are rounded (512 bytes), small requests (<= 1 MiB) are
// carved out of 2 MiB segments, large ones out of 20 MiB segments (or their
// own segment, rounded to 2 MiB, from 10 MiB up); freed blocks are cached,
// merged with free neighbours and reused; `empty_cache()` releases whole free
// segments.  Its statistics (`DeviceStats`) are CUDA's, key for key, and an
// allocation that would take the reserved bytes past the device's capacity
// times the per-process memory fraction raises c10::OutOfMemoryError
// (torch.OutOfMemoryError) after one flush-and-retry, as CUDA does.
//
// Frees are deferred: a storage deleter may run on any thread without the GIL,
// so it only records a "free" event (the block becomes "active, pending free",
// CUDA's state for blocks still in use by another stream).  Python drains the
// events at safe points, drops the boxes, and then releases the addresses: only
// then does the block return to its pool.  An address is therefore never
// handed out while a stale box for it may still exist.
//
// Nothing on the allocation or free paths calls Python (the optional stack
// capture of `_record_memory_history` aside, exactly as in CUDA's allocator).
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Device.h>
#include <c10/core/Storage.h>

#include <cstdint>
#include <memory>
#include <utility>
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

// Python has dropped the boxes of these addresses: their blocks may be reused.
void release_addresses(const std::vector<uintptr_t>& addresses);

// Grows or shrinks a tpu storage in place (storage.resize_ / tensor.resize_).
// The storage gets a fresh address; a kMove event tells Python to carry the
// bytes that survive the resize over to the new box.
void resize_storage_bytes(c10::StorageImpl* storage, size_t new_nbytes);

// Device that owns a synthetic address, or -1.
c10::DeviceIndex device_of_address(const void* ptr);

// Raises unless the storage is one this allocator made or shares one whole
// (from_dlpack of a whole tensor): a storage starting inside another would
// read an empty box and write a separate one (the box table is keyed by
// storage start address).
void check_whole_storage(const c10::Storage& storage);

// ------------------------------------------------------------ memory API
// (bindings in memory_bindings.cpp; torch.tpu.memory_* in torchtpu/memory.py)

using c10::CachingDeviceAllocator::DeviceStats;

// A copy of CUDA's statistics for one device (num_oom_rejections included).
DeviceStats device_stats(c10::DeviceIndex device);

// The four numbers read most often, without copying every statistic.
struct MemoryCounters {
  int64_t allocated;
  int64_t peak_allocated;
  int64_t reserved;
  int64_t peak_reserved;
};
MemoryCounters memory_counters(c10::DeviceIndex device);

void reset_peak_stats(c10::DeviceIndex device);
void reset_accumulated_stats(c10::DeviceIndex device);

// Releases every cached segment that holds no live block (all devices).
void empty_cache();

// The allocator's limit on one device is capacity * fraction.  The capacity
// is the device's memory as the platform reports it (pushed from Python when
// JAX starts); where the platform reports none (JAX on the CPU) it stands in
// as the host's physical RAM.  `device` -1 sets every device.
void set_memory_fraction(double fraction, c10::DeviceIndex device);
double memory_fraction(c10::DeviceIndex device);
void set_device_capacity(c10::DeviceIndex device, size_t bytes);  // 0: default
size_t device_capacity(c10::DeviceIndex device);
size_t host_physical_memory();

// (free, total) bytes: the platform's physical numbers where it reports them,
// else (capacity - reserved, capacity).  What torch.accelerator.get_memory_info
// and torch.tpu.mem_get_info return.
std::pair<size_t, size_t> memory_info(c10::DeviceIndex device);

// Hooks installed by the Python bindings.  `before_empty_cache` runs (outside
// the allocator's lock) at the start of every empty_cache; `physical_info`
// fills (bytes in use, limit) and returns true where the platform reports
// them.  Neither is ever called on an allocation or free path.
using PhysicalInfoFn = bool (*)(c10::DeviceIndex, size_t* used, size_t* total);
void set_memory_hooks(void (*before_empty_cache)(), PhysicalInfoFn physical_info);

// ---------------------------------------------------- history / snapshots

enum class TraceAction : int {
  kAlloc = 0,
  kFreeRequested,
  kFreeCompleted,
  kSegmentAlloc,
  kSegmentFree,
  kSnapshot,
  kOom,
  kNumActions,
};

struct TraceRecord {
  TraceAction action;
  c10::DeviceIndex device;
  uintptr_t addr;  // for kOom: the device's free bytes, as in CUDA
  size_t size;
  int64_t time_us;
  std::shared_ptr<c10::GatheredContext> context;
};

struct HistoryConfig {
  bool enabled = false;
  // Captures the current stack (Python and optionally C++); null: none.
  c10::CachingDeviceAllocator::CreateContextFn gather = nullptr;
  size_t max_entries = 1;
  c10::CachingDeviceAllocator::RecordContext when =
      c10::CachingDeviceAllocator::RecordContext::NEVER;
  bool clear = false;
  uint32_t skip_mask = 0;  // bit (1 << TraceAction) set: not recorded
};
void record_history(const HistoryConfig& config);

struct AllocatorSnapshot {
  std::vector<c10::CachingDeviceAllocator::SegmentInfo> segments;
  std::vector<std::vector<TraceRecord>> device_traces;  // indexed by device
};
AllocatorSnapshot snapshot(bool include_traces);

// Benchmarks: nanoseconds per allocate + free + release of `nbytes` through
// the allocator's own paths (lock, pool search, split/merge, statistics),
// without the storage event queue that Python drains.
double benchmark_roundtrip_ns(size_t nbytes, int64_t iterations);

}  // namespace torchtpu
