#include "allocator.h"

#include "device.h"

#include <c10/util/Exception.h>
#include <c10/util/irange.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <iomanip>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <unordered_map>

namespace torchtpu {

namespace {

using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatArray;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::RecordContext;

// CUDA's caching-allocator constants (c10/cuda/CUDACachingAllocator.cpp).
constexpr size_t kMinBlockSize = 512;  // every size is rounded to this
constexpr size_t kSmallSize = 1 << 20;  // largest "small" request
constexpr size_t kSmallBuffer = 2 << 20;  // segment size of the small pool
constexpr size_t kLargeBuffer = 20 << 20;  // segment size for 1-10 MiB requests
constexpr size_t kMinLargeAlloc = 10 << 20;  // from here: own segment
constexpr size_t kRoundLarge = 2 << 20;  // ... rounded to 2 MiB

// Synthetic address space per device: far beyond any device's memory.
constexpr size_t kDeviceSpan = size_t(1) << 40;
constexpr size_t kMaxDevices = 128;

constexpr size_t kAgg = static_cast<size_t>(StatType::AGGREGATE);
constexpr size_t kSmallPool = static_cast<size_t>(StatType::SMALL_POOL);
constexpr size_t kLargePool = static_cast<size_t>(StatType::LARGE_POOL);

size_t round_size(size_t nbytes) {
  if (nbytes < kMinBlockSize) {
    return kMinBlockSize;
  }
  return kMinBlockSize * ((nbytes + kMinBlockSize - 1) / kMinBlockSize);
}

size_t segment_size_for(size_t size) {
  if (size <= kSmallSize) {
    return kSmallBuffer;
  }
  if (size < kMinLargeAlloc) {
    return kLargeBuffer;
  }
  return kRoundLarge * ((size + kRoundLarge - 1) / kRoundLarge);
}

std::string format_size(uint64_t size) {
  std::ostringstream os;
  os.precision(2);
  os << std::fixed;
  if (size <= 1024) {
    os << size << " bytes";
  } else if (size <= 1048576) {
    os << (static_cast<double>(size) / 1024.0) << " KiB";
  } else if (size <= 1073741824ULL) {
    os << (static_cast<double>(size) / 1048576.0) << " MiB";
  } else {
    os << (static_cast<double>(size) / 1073741824.0) << " GiB";
  }
  return os.str();
}

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct BlockPool;

// A range of one segment: allocated (a live storage), pending (its storage
// died but its box may still exist) or free (in its pool, reusable).
struct Block {
  c10::DeviceIndex device;
  BlockPool* pool;
  uintptr_t address;
  size_t size;  // rounded
  size_t requested = 0;  // what the storage asked for
  bool allocated = false;
  bool pending = false;
  Block* prev = nullptr;  // neighbours within the segment
  Block* next = nullptr;
  std::shared_ptr<c10::GatheredContext> context;

  Block(c10::DeviceIndex device, BlockPool* pool, uintptr_t address, size_t size)
      : device(device), pool(pool), address(address), size(size) {}

  bool is_split() const {
    return prev != nullptr || next != nullptr;
  }
  bool is_free() const {
    return !allocated && !pending;
  }
};

struct BySize {
  bool operator()(const Block* a, const Block* b) const {
    if (a->size != b->size) {
      return a->size < b->size;
    }
    return a->address < b->address;
  }
};

struct BlockPool {
  explicit BlockPool(bool small) : small(small) {}
  std::set<Block*, BySize> blocks;  // free blocks only
  const bool small;
  size_t stat_index() const {
    return small ? kSmallPool : kLargePool;
  }
};

struct Segment {
  size_t size;
  Block* head;  // the block at the segment's address; stable (merges keep
                // the lower block, splits keep the allocated one in front)
  bool small;
  std::shared_ptr<c10::GatheredContext> context;
};

struct DeviceState {
  c10::DeviceIndex device = 0;
  uintptr_t base = 0;
  uintptr_t bump = 0;
  // Address ranges of released segments, reused for new segments.
  std::map<uintptr_t, size_t> free_ranges;
  BlockPool small_pool{true};
  BlockPool large_pool{false};
  std::map<uintptr_t, Segment> segments;
  // address -> block whose storage died and whose box may still exist.
  std::unordered_map<uintptr_t, Block*> pending;
  DeviceStats stats;
  size_t capacity = 0;  // 0: the allocator's default capacity
  double fraction = 1.0;
  std::vector<TraceRecord> trace;
  size_t trace_next = 0;
};

template <typename Fn>
void for_pool_stats(size_t pool_index, Fn fn) {
  fn(kAgg);
  fn(pool_index);
}

void free_block_deleter(void* ctx);

// Applies `fn` to every per-pool statistic (all/small/large of each array).
template <typename Fn>
void for_each_pool_stat(DeviceStats& s, Fn fn) {
  for (StatArray* array :
       {&s.allocation, &s.segment, &s.active, &s.inactive_split, &s.allocated_bytes, &s.reserved_bytes,
        &s.active_bytes, &s.inactive_split_bytes, &s.requested_bytes}) {
    for (auto& stat : *array) {
      fn(stat);
    }
  }
}

}  // namespace

class SyntheticAllocator final : public c10::DeviceAllocator {
 public:
  SyntheticAllocator() {
    default_capacity_ = host_physical_memory();
  }

  // ----------------------------------------------------- c10::Allocator

  c10::DataPtr allocate(size_t nbytes) override {
    const c10::DeviceIndex device = current_device();
    const c10::Device dev(kTpu, device);
    if (nbytes == 0) {
      return c10::DataPtr(nullptr, dev);
    }
    auto context = maybe_gather(RecordContext::STATE);
    Block* block = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      block = malloc_locked(state_for(device), nbytes, context, lock);
    }
    return c10::DataPtr(
        reinterpret_cast<void*>(block->address), block, &free_block_deleter, dev);
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return nullptr;
  }

  void copy_data(void*, const void*, std::size_t) const override {
    TORCH_CHECK(
        false,
        "torchtpu: tpu memory is not host-addressable; copy tensors with "
        ".to()/.copy_() instead of raw storage copies");
  }

  // ----------------------------------------------- c10::DeviceAllocator

  bool initialized() override {
    return true;
  }

  void emptyCache(c10::MempoolId_t) override {
    if (auto hook = before_empty_cache_.load(std::memory_order_acquire)) {
      hook();
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& state : states_) {
      if (state) {
        release_cached_blocks(*state);
      }
    }
  }

  // Device buffers are JAX arrays: JAX orders their uses across streams, and
  // a block is reused only after its box (its array) was dropped.
  void recordStream(const c10::DataPtr&, c10::Stream) override {}

  DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    std::lock_guard<std::mutex> lock(mu_);
    return state_for(device).stats;
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    std::lock_guard<std::mutex> lock(mu_);
    DeviceStats& s = state_for(device).stats;
    for_each_pool_stat(s, [](Stat& st) { st.reset_accumulated(); });
    s.num_alloc_retries = 0;
    s.num_ooms = 0;
    s.num_sync_all_streams = 0;
    s.num_device_alloc = 0;
    s.num_device_free = 0;
    s.num_oom_rejections = 0;
    s.oversize_allocations.reset_accumulated();
    s.oversize_segments.reset_accumulated();
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    std::lock_guard<std::mutex> lock(mu_);
    DeviceStats& s = state_for(device).stats;
    for_each_pool_stat(s, [](Stat& st) { st.reset_peak(); });
    s.oversize_allocations.reset_peak();
    s.oversize_segments.reset_peak();
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    size_t used = 0;
    size_t total = 0;
    auto physical = physical_info_.load(std::memory_order_acquire);
    if (physical != nullptr && physical(device, &used, &total)) {
      return {total > used ? total - used : 0, total};
    }
    std::lock_guard<std::mutex> lock(mu_);
    DeviceState& state = state_for(device);
    total = capacity_of(state);
    const auto reserved = static_cast<size_t>(state.stats.reserved_bytes[kAgg].current);
    return {total > reserved ? total - reserved : 0, total};
  }

  // ------------------------------------------------------- free path

  // Storage deleter: any thread, maybe without the GIL.  The block stays
  // active (pending) until Python has dropped its box.
  void on_free(Block* block) {
    auto context = maybe_gather(RecordContext::ALL);
    StorageEvent event{StorageEventKind::kFree, block->address, 0, block->size, block->device};
    {
      std::lock_guard<std::mutex> lock(mu_);
      DeviceState& state = state_for(block->device);
      mark_freed(state, block, context);
      state.pending.emplace(block->address, block);
    }
    push_event(event);
  }

  void release(const std::vector<uintptr_t>& addresses) {
    auto context = maybe_gather(RecordContext::ALL);
    std::lock_guard<std::mutex> lock(mu_);
    for (uintptr_t address : addresses) {
      const c10::DeviceIndex device = device_of_locked(address);
      if (device < 0) {
        continue;
      }
      DeviceState& state = *states_[device];
      auto it = state.pending.find(address);
      if (it == state.pending.end()) {
        continue;
      }
      Block* block = it->second;
      state.pending.erase(it);
      free_block(state, block, context);
    }
  }

  void push_event(const StorageEvent& event) {
    std::lock_guard<std::mutex> lock(events_mu_);
    events_.push_back(event);
    has_events_.store(true, std::memory_order_release);
  }

  bool has_events() const {
    return has_events_.load(std::memory_order_acquire);
  }

  std::vector<StorageEvent> drain() {
    std::vector<StorageEvent> out;
    std::lock_guard<std::mutex> lock(events_mu_);
    out.swap(events_);
    has_events_.store(false, std::memory_order_release);
    return out;
  }

  c10::DeviceIndex device_of(const void* ptr) {
    std::lock_guard<std::mutex> lock(mu_);
    return device_of_locked(reinterpret_cast<uintptr_t>(ptr));
  }

  // Whether `address` is where a live allocation begins.
  bool is_allocation_start(uintptr_t address) {
    std::lock_guard<std::mutex> lock(mu_);
    const c10::DeviceIndex device = device_of_locked(address);
    if (device < 0) {
      return false;
    }
    const auto& segments = states_[device]->segments;
    auto it = segments.upper_bound(address);
    if (it == segments.begin()) {
      return false;
    }
    --it;
    for (const Block* b = it->second.head; b != nullptr && b->address <= address; b = b->next) {
      if (b->address == address) {
        return b->allocated;
      }
    }
    return false;
  }

  // --------------------------------------------------- memory API

  MemoryCounters counters(c10::DeviceIndex device) {
    std::lock_guard<std::mutex> lock(mu_);
    const DeviceStats& s = state_for(device).stats;
    return MemoryCounters{
        s.allocated_bytes[kAgg].current,
        s.allocated_bytes[kAgg].peak,
        s.reserved_bytes[kAgg].current,
        s.reserved_bytes[kAgg].peak};
  }

  void set_fraction(double fraction, c10::DeviceIndex device) {
    TORCH_CHECK(
        fraction >= 0.0 && fraction <= 1.0,
        "invalid fraction: ",
        fraction,
        ". Please set within [0, 1].");
    std::lock_guard<std::mutex> lock(mu_);
    state_for(device).fraction = fraction;
  }

  double fraction(c10::DeviceIndex device) {
    std::lock_guard<std::mutex> lock(mu_);
    return state_for(device).fraction;
  }

  void set_capacity(c10::DeviceIndex device, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    if (device < 0) {
      default_capacity_ = bytes != 0 ? bytes : host_physical_memory();
      for (auto& state : states_) {
        if (state) {
          state->capacity = 0;
        }
      }
      return;
    }
    state_for(device).capacity = bytes;
  }

  size_t capacity(c10::DeviceIndex device) {
    std::lock_guard<std::mutex> lock(mu_);
    return capacity_of(state_for(device));
  }

  void set_hooks(void (*before_empty_cache)(), PhysicalInfoFn physical_info) {
    before_empty_cache_.store(before_empty_cache, std::memory_order_release);
    physical_info_.store(physical_info, std::memory_order_release);
  }

  void set_history(const HistoryConfig& config) {
    std::lock_guard<std::mutex> lock(mu_);
    record_history_ = config.enabled;
    max_entries_ = std::max<size_t>(1, config.max_entries);
    skip_mask_ = config.skip_mask;
    gather_.store(config.enabled ? config.gather : nullptr, std::memory_order_release);
    record_context_.store(
        config.enabled ? static_cast<int>(config.when) : static_cast<int>(RecordContext::NEVER),
        std::memory_order_release);
    for (auto& state : states_) {
      if (!state) {
        continue;
      }
      auto& trace = state->trace;
      // Oldest entry first again, so that the ring can grow or shrink.
      std::rotate(trace.begin(), trace.begin() + static_cast<std::ptrdiff_t>(state->trace_next), trace.end());
      state->trace_next = 0;
      if (config.clear) {
        trace.clear();
      } else if (trace.size() > max_entries_) {
        trace.erase(trace.begin(), trace.end() - static_cast<std::ptrdiff_t>(max_entries_));
      }
    }
  }

  AllocatorSnapshot take_snapshot(bool include_traces) {
    AllocatorSnapshot out;
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& state_ptr : states_) {
      if (!state_ptr) {
        continue;
      }
      DeviceState& state = *state_ptr;
      int64_t total_active = 0;
      for (const auto& [address, segment] : state.segments) {
        c10::CachingDeviceAllocator::SegmentInfo info;
        info.device = state.device;
        info.address = address;
        info.is_large = !segment.small;
        info.is_expandable = false;
        info.context_when_allocated = segment.context;
        for (Block* b = segment.head; b != nullptr; b = b->next) {
          c10::CachingDeviceAllocator::BlockInfo block;
          block.size = b->size;
          block.requested_size = b->is_free() ? 0 : b->requested;
          block.allocated = b->allocated;
          block.active = !b->is_free();
          block.context_when_allocated = b->is_free() ? nullptr : b->context;
          info.total_size += b->size;
          if (block.allocated) {
            info.allocated_size += b->size;
          }
          if (block.active) {
            info.active_size += b->size;
            info.requested_size += block.requested_size;
          }
          info.blocks.push_back(std::move(block));
        }
        total_active += static_cast<int64_t>(info.active_size);
        out.segments.push_back(std::move(info));
      }
      record_trace(state, TraceAction::kSnapshot, 0, static_cast<size_t>(total_active), nullptr);
    }
    if (include_traces) {
      for (auto& state_ptr : states_) {
        if (!state_ptr) {
          continue;
        }
        DeviceState& state = *state_ptr;
        auto& dest = out.device_traces;
        if (dest.size() <= static_cast<size_t>(state.device)) {
          dest.resize(state.device + 1);
        }
        // Oldest first: the ring's next slot holds the oldest entry.
        const size_t n = state.trace.size();
        for (size_t i = 0; i < n; ++i) {
          dest[state.device].push_back(state.trace[(state.trace_next + i) % n]);
        }
      }
    }
    return out;
  }

  double bench(size_t nbytes, int64_t iterations) {
    const c10::DeviceIndex device = current_device();
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < iterations; ++i) {
      Block* block = nullptr;
      {
        std::unique_lock<std::mutex> lock(mu_);
        block = malloc_locked(state_for(device), nbytes, nullptr, lock);
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        DeviceState& state = state_for(device);
        mark_freed(state, block, nullptr);
        state.pending.emplace(block->address, block);
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        DeviceState& state = state_for(device);
        auto it = state.pending.find(block->address);
        state.pending.erase(it);
        free_block(state, block, nullptr);
      }
    }
    const auto t1 = std::chrono::steady_clock::now();
    return std::chrono::duration<double, std::nano>(t1 - t0).count() /
        static_cast<double>(std::max<int64_t>(1, iterations));
  }

 private:
  // --------------------------------------------------------- malloc

  Block* malloc_locked(
      DeviceState& state,
      size_t nbytes,
      const std::shared_ptr<c10::GatheredContext>& context,
      std::unique_lock<std::mutex>& lock) {
    const size_t size = round_size(nbytes);
    BlockPool& pool = size <= kSmallSize ? state.small_pool : state.large_pool;
    const size_t alloc_size = segment_size_for(size);
    Block* block = take_free_block(pool, size);
    if (block == nullptr) {
      block = new_segment(state, pool, alloc_size, false, context);
      if (block == nullptr && release_cached_blocks(state)) {
        block = new_segment(state, pool, alloc_size, true, context);
      }
      if (block == nullptr) {
        raise_oom(state, alloc_size, lock);
      }
    }
    return use_block(state, pool, block, size, nbytes, context);
  }

  static Block* take_free_block(BlockPool& pool, size_t size) {
    Block key(0, nullptr, 0, size);
    auto it = pool.blocks.lower_bound(&key);
    if (it == pool.blocks.end()) {
      return nullptr;
    }
    Block* block = *it;
    pool.blocks.erase(it);
    return block;
  }

  static bool should_split(const BlockPool& pool, const Block* block, size_t size) {
    const size_t remaining = block->size - size;
    return pool.small ? remaining >= kMinBlockSize : remaining > kSmallSize;
  }

  // CUDA's alloc_found_block: split off what the request does not need and
  // account for it.  `block` is out of the pool (or a fresh segment).
  Block* use_block(
      DeviceState& state,
      BlockPool& pool,
      Block* block,
      size_t size,
      size_t requested,
      const std::shared_ptr<c10::GatheredContext>& context) {
    DeviceStats& s = state.stats;
    const size_t pi = pool.stat_index();
    const bool already_split = block->is_split();
    if (should_split(pool, block, size)) {
      auto* rest = new Block(state.device, &pool, block->address + size, block->size - size);
      rest->prev = block;
      rest->next = block->next;
      if (rest->next != nullptr) {
        rest->next->prev = rest;
      }
      block->next = rest;
      block->size = size;
      pool.blocks.insert(rest);
      if (already_split) {
        // An inactive split block shrinks by `size`.
        for_pool_stats(pi, [&](size_t i) { s.inactive_split_bytes[i].decrease(size); });
      } else {
        // A whole segment becomes split: its rest is a new inactive split block.
        for_pool_stats(pi, [&](size_t i) {
          s.inactive_split_bytes[i].increase(rest->size);
          s.inactive_split[i].increase(1);
        });
      }
    } else if (already_split) {
      // An inactive split block becomes active whole.
      for_pool_stats(pi, [&](size_t i) {
        s.inactive_split_bytes[i].decrease(block->size);
        s.inactive_split[i].decrease(1);
      });
    }
    block->allocated = true;
    block->requested = requested;
    block->context = context;
    for_pool_stats(pi, [&](size_t i) {
      s.allocation[i].increase(1);
      s.allocated_bytes[i].increase(block->size);
      s.active[i].increase(1);
      s.active_bytes[i].increase(block->size);
      s.requested_bytes[i].increase(requested);
    });
    record_trace(state, TraceAction::kAlloc, block->address, block->size, context);
    return block;
  }

  // CUDA's alloc_block: a new segment, within capacity * fraction.
  Block* new_segment(
      DeviceState& state,
      BlockPool& pool,
      size_t size,
      bool is_retry,
      const std::shared_ptr<c10::GatheredContext>& context) {
    DeviceStats& s = state.stats;
    if (is_retry) {
      s.num_alloc_retries += 1;
    }
    const auto reserved = static_cast<size_t>(s.reserved_bytes[kAgg].current);
    if (reserved + size > allowed_bytes(state)) {
      return nullptr;
    }
    const uintptr_t address = take_range(state, size);
    if (address == 0) {
      return nullptr;
    }
    auto* block = new Block(state.device, &pool, address, size);
    state.segments.emplace(address, Segment{size, block, pool.small, context});
    for_pool_stats(pool.stat_index(), [&](size_t i) {
      s.segment[i].increase(1);
      s.reserved_bytes[i].increase(size);
    });
    s.num_device_alloc += 1;
    record_trace(state, TraceAction::kSegmentAlloc, address, size, context);
    return block;
  }

  // Returns every whole free segment.  True: CUDA's release_cached_blocks
  // always reports success (the retry then decides).
  bool release_cached_blocks(DeviceState& state) {
    for (BlockPool* pool : {&state.small_pool, &state.large_pool}) {
      for (auto it = pool->blocks.begin(); it != pool->blocks.end();) {
        Block* block = *it;
        if (block->is_split()) {
          ++it;
          continue;
        }
        it = pool->blocks.erase(it);
        release_segment(state, *pool, block);
      }
    }
    return true;
  }

  void release_segment(DeviceState& state, BlockPool& pool, Block* block) {
    DeviceStats& s = state.stats;
    for_pool_stats(pool.stat_index(), [&](size_t i) {
      s.segment[i].decrease(1);
      s.reserved_bytes[i].decrease(block->size);
    });
    s.num_device_free += 1;
    record_trace(state, TraceAction::kSegmentFree, block->address, block->size, nullptr);
    state.segments.erase(block->address);
    give_back_range(state, block->address, block->size);
    delete block;
  }

  [[noreturn]] void raise_oom(
      DeviceState& state,
      size_t alloc_size,
      std::unique_lock<std::mutex>& lock) {
    DeviceStats& s = state.stats;
    s.num_ooms += 1;
    const size_t capacity = capacity_of(state);
    const auto reserved = static_cast<size_t>(s.reserved_bytes[kAgg].current);
    const auto allocated = static_cast<size_t>(s.allocated_bytes[kAgg].current);
    const size_t device_free = capacity > reserved ? capacity - reserved : 0;
    record_trace(state, TraceAction::kOom, device_free, alloc_size, nullptr);
    std::ostringstream msg;
    msg << "TPU out of memory. Tried to allocate " << format_size(alloc_size) << ". TPU "
        << int(state.device) << " has a total capacity of " << format_size(capacity)
        << " of which " << format_size(device_free) << " is free. ";
    if (state.fraction < 1.0) {
      msg << "This process has " << format_size(reserved) << " memory in use; "
          << format_size(allowed_bytes(state))
          << " allowed (torch.tpu.set_per_process_memory_fraction("
          << state.fraction << ")). ";
    }
    msg << "Of the allocated memory " << format_size(allocated)
        << " is allocated by PyTorch, and " << format_size(reserved - allocated)
        << " is reserved by PyTorch but unallocated. If reserved but unallocated memory "
           "is large, torch.tpu.empty_cache() returns it (and "
           "torch.tpu.memory_summary() shows where it is); a smaller batch, or "
           "torch.tpu.set_per_process_memory_fraction() if a fraction is set, makes room.";
    const std::string text = msg.str();
    lock.unlock();
    TORCH_CHECK_WITH(OutOfMemoryError, false, text);
  }

  // --------------------------------------------------------- free

  // CUDA's free(): no longer allocated, still active until released.
  void mark_freed(
      DeviceState& state,
      Block* block,
      const std::shared_ptr<c10::GatheredContext>& context) {
    DeviceStats& s = state.stats;
    block->allocated = false;
    block->pending = true;
    for_pool_stats(block->pool->stat_index(), [&](size_t i) {
      s.allocation[i].decrease(1);
      s.allocated_bytes[i].decrease(block->size);
    });
    record_trace(state, TraceAction::kFreeRequested, block->address, block->size, context);
  }

  // CUDA's free_block(): merge with free neighbours, back into the pool.
  void free_block(
      DeviceState& state,
      Block* block,
      const std::shared_ptr<c10::GatheredContext>& context) {
    DeviceStats& s = state.stats;
    BlockPool& pool = *block->pool;
    const size_t original_size = block->size;
    const size_t requested = block->requested;
    record_trace(state, TraceAction::kFreeCompleted, block->address, original_size, context);
    block->pending = false;
    block->requested = 0;
    block->context.reset();
    int64_t net_blocks = 0;
    int64_t net_bytes = 0;
    Block* next = block->next;
    if (next != nullptr && next->is_free()) {
      pool.blocks.erase(next);
      block->size += next->size;
      block->next = next->next;
      if (block->next != nullptr) {
        block->next->prev = block;
      }
      net_blocks -= 1;
      net_bytes -= static_cast<int64_t>(next->size);
      delete next;
    }
    Block* prev = block->prev;
    if (prev != nullptr && prev->is_free()) {
      pool.blocks.erase(prev);
      net_blocks -= 1;
      net_bytes -= static_cast<int64_t>(prev->size);
      prev->size += block->size;
      prev->next = block->next;
      if (prev->next != nullptr) {
        prev->next->prev = prev;
      }
      delete block;
      block = prev;
    }
    pool.blocks.insert(block);
    if (block->is_split()) {
      net_blocks += 1;
      net_bytes += static_cast<int64_t>(block->size);
    }
    for_pool_stats(pool.stat_index(), [&](size_t i) {
      if (net_blocks > 0) {
        s.inactive_split[i].increase(static_cast<size_t>(net_blocks));
      } else if (net_blocks < 0) {
        s.inactive_split[i].decrease(static_cast<size_t>(-net_blocks));
      }
      if (net_bytes > 0) {
        s.inactive_split_bytes[i].increase(static_cast<size_t>(net_bytes));
      } else if (net_bytes < 0) {
        s.inactive_split_bytes[i].decrease(static_cast<size_t>(-net_bytes));
      }
      s.active[i].decrease(1);
      s.active_bytes[i].decrease(original_size);
      s.requested_bytes[i].decrease(requested);
    });
  }

  // ------------------------------------------------- address ranges

  uintptr_t take_range(DeviceState& state, size_t size) {
    for (auto it = state.free_ranges.begin(); it != state.free_ranges.end(); ++it) {
      if (it->second >= size) {
        const uintptr_t address = it->first;
        const size_t rest = it->second - size;
        state.free_ranges.erase(it);
        if (rest > 0) {
          state.free_ranges.emplace(address + size, rest);
        }
        return address;
      }
    }
    if (state.bump + size > state.base + kDeviceSpan) {
      return 0;
    }
    const uintptr_t address = state.bump;
    state.bump += size;
    return address;
  }

  void give_back_range(DeviceState& state, uintptr_t address, size_t size) {
    auto next = state.free_ranges.lower_bound(address);
    if (next != state.free_ranges.end() && address + size == next->first) {
      size += next->second;
      next = state.free_ranges.erase(next);
    }
    if (next != state.free_ranges.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == address) {
        address = prev->first;
        size += prev->second;
        state.free_ranges.erase(prev);
      }
    }
    if (address + size == state.bump) {
      state.bump = address;
      return;
    }
    state.free_ranges.emplace(address, size);
  }

  // --------------------------------------------------------- misc

  size_t capacity_of(const DeviceState& state) const {
    return state.capacity != 0 ? state.capacity : default_capacity_;
  }

  size_t allowed_bytes(const DeviceState& state) const {
    return static_cast<size_t>(static_cast<double>(capacity_of(state)) * state.fraction);
  }

  std::shared_ptr<c10::GatheredContext> maybe_gather(RecordContext level) {
    if (record_context_.load(std::memory_order_acquire) < static_cast<int>(level)) {
      return nullptr;
    }
    auto gather = gather_.load(std::memory_order_acquire);
    return gather != nullptr ? gather() : nullptr;
  }

  void record_trace(
      DeviceState& state,
      TraceAction action,
      uintptr_t addr,
      size_t size,
      const std::shared_ptr<c10::GatheredContext>& context) {
    if (!record_history_ || (skip_mask_ & (1u << static_cast<int>(action))) != 0) {
      return;
    }
    const bool keep_context =
        record_context_.load(std::memory_order_relaxed) >= static_cast<int>(RecordContext::ALLOC);
    TraceRecord record{
        action, state.device, addr, size, now_us(), keep_context ? context : nullptr};
    if (state.trace.size() < max_entries_) {
      state.trace.push_back(std::move(record));
      state.trace_next = 0;
      return;
    }
    state.trace[state.trace_next] = std::move(record);
    state.trace_next = (state.trace_next + 1) % max_entries_;
  }

  c10::DeviceIndex device_of_locked(uintptr_t address) const {
    for (const auto i : c10::irange(kMaxDevices)) {
      const auto& state = states_[i];
      if (state && address >= state->base && address < state->base + kDeviceSpan) {
        return static_cast<c10::DeviceIndex>(i);
      }
    }
    return -1;
  }

  DeviceState& state_for(c10::DeviceIndex device) {
    TORCH_CHECK(
        device >= 0 && static_cast<size_t>(device) < kMaxDevices,
        "torchtpu: invalid device index ",
        int(device));
    auto& state = states_[device];
    if (!state) {
      void* base = mmap(
          nullptr, kDeviceSpan, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      TORCH_CHECK(
          base != MAP_FAILED,
          "torchtpu: could not reserve synthetic address space for tpu:",
          int(device));
      state = std::make_unique<DeviceState>();
      state->device = device;
      state->base = reinterpret_cast<uintptr_t>(base);
      state->bump = state->base;
      state->stats.max_split_size = -1;  // CUDA's default: no limit (SIZE_MAX)
    }
    return *state;
  }

  std::mutex mu_;
  std::array<std::unique_ptr<DeviceState>, kMaxDevices> states_;
  size_t default_capacity_ = 0;

  // History (written under mu_, read by maybe_gather without it).
  bool record_history_ = false;
  size_t max_entries_ = 1;
  uint32_t skip_mask_ = 0;
  std::atomic<int> record_context_{static_cast<int>(RecordContext::NEVER)};
  std::atomic<c10::CachingDeviceAllocator::CreateContextFn> gather_{nullptr};

  std::atomic<void (*)()> before_empty_cache_{nullptr};
  std::atomic<PhysicalInfoFn> physical_info_{nullptr};

  std::mutex events_mu_;
  std::vector<StorageEvent> events_;
  std::atomic<bool> has_events_{false};
};

namespace {

void free_block_deleter(void* ctx) {
  get_allocator()->on_free(static_cast<Block*>(ctx));
}

}  // namespace

SyntheticAllocator* get_allocator() {
  // Leaked on purpose: storages may be freed during static destruction.
  static auto* allocator = new SyntheticAllocator();
  return allocator;
}

c10::Allocator* get_allocator_base() {
  return get_allocator();
}

bool has_storage_events() {
  return get_allocator()->has_events();
}

std::vector<StorageEvent> drain_storage_events() {
  return get_allocator()->drain();
}

void release_addresses(const std::vector<uintptr_t>& addresses) {
  get_allocator()->release(addresses);
}

void resize_storage_bytes(c10::StorageImpl* storage, size_t new_nbytes) {
  TORCH_CHECK(
      storage->resizable(), "Trying to resize storage that is not resizable");
  const size_t old_nbytes = storage->nbytes();
  const auto old_address = reinterpret_cast<uintptr_t>(storage->data());
  const c10::DeviceIndex device = storage->device().index();
  c10::DataPtr new_data;
  {
    const c10::DeviceIndex previous = current_device();
    set_current_device(device);
    try {
      new_data = storage->allocator()->allocate(new_nbytes);
    } catch (...) {
      set_current_device(previous);
      throw;
    }
    set_current_device(previous);
  }
  const auto new_address = reinterpret_cast<uintptr_t>(new_data.get());
  const size_t carried = std::min(old_nbytes, new_nbytes);
  // The move must precede the old block's free event, which fires when the
  // old DataPtr is released by set_data_ptr_noswap below.
  if (old_address != 0 && new_address != 0 && carried > 0) {
    get_allocator()->push_event(
        {StorageEventKind::kMove, old_address, new_address, new_nbytes,
         device});
  }
  storage->set_data_ptr_noswap(std::move(new_data));
  storage->set_nbytes(new_nbytes);
}

c10::DeviceIndex device_of_address(const void* ptr) {
  return get_allocator()->device_of(ptr);
}

void check_whole_storage(const c10::Storage& storage) {
  const c10::DataPtr& data = storage.data_ptr();
  if (data.get() == nullptr || data.get_deleter() == &free_block_deleter) {
    return;  // (the common case: allocated here)
  }
  TORCH_CHECK(
      get_allocator()->is_allocation_start(reinterpret_cast<uintptr_t>(data.get())),
      "torchtpu: this tpu tensor's storage begins inside another tpu storage (an UntypedStorage "
      "slice, or torch.from_dlpack of a view at an offset); a tpu storage can only be shared "
      "whole. Take a view of the tensor instead (t[2:], t.as_strided(...)), or clone() it.");
}

DeviceStats device_stats(c10::DeviceIndex device) {
  return get_allocator()->getDeviceStats(device);
}

MemoryCounters memory_counters(c10::DeviceIndex device) {
  return get_allocator()->counters(device);
}

void reset_peak_stats(c10::DeviceIndex device) {
  get_allocator()->resetPeakStats(device);
}

void reset_accumulated_stats(c10::DeviceIndex device) {
  get_allocator()->resetAccumulatedStats(device);
}

void empty_cache() {
  get_allocator()->emptyCache({0, 0});
}

void set_memory_fraction(double fraction, c10::DeviceIndex device) {
  get_allocator()->set_fraction(fraction, device);
}

double memory_fraction(c10::DeviceIndex device) {
  return get_allocator()->fraction(device);
}

void set_device_capacity(c10::DeviceIndex device, size_t bytes) {
  get_allocator()->set_capacity(device, bytes);
}

size_t device_capacity(c10::DeviceIndex device) {
  return get_allocator()->capacity(device);
}

size_t host_physical_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) {
    return size_t(16) << 30;  // unknown: 16 GiB
  }
  return static_cast<size_t>(pages) * static_cast<size_t>(page_size);
}

std::pair<size_t, size_t> memory_info(c10::DeviceIndex device) {
  return get_allocator()->getMemoryInfo(device);
}

void set_memory_hooks(void (*before_empty_cache)(), PhysicalInfoFn physical_info) {
  get_allocator()->set_hooks(before_empty_cache, physical_info);
}

void record_history(const HistoryConfig& config) {
  get_allocator()->set_history(config);
}

AllocatorSnapshot snapshot(bool include_traces) {
  return get_allocator()->take_snapshot(include_traces);
}

double benchmark_roundtrip_ns(size_t nbytes, int64_t iterations) {
  TORCH_CHECK(nbytes > 0, "benchmark_roundtrip_ns: nbytes must be positive");
  return get_allocator()->bench(nbytes, iterations);
}

// Registered for PrivateUse1 at load time; torch.accelerator.memory_* and
// storage allocation go through it.
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, get_allocator())

}  // namespace torchtpu
