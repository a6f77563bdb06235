#include "allocator.h"

#include "device.h"

#include <c10/util/Exception.h>
#include <c10/util/irange.h>

#include <sys/mman.h>

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace torchtpu {

namespace {

// Addresses are 512-byte aligned, like CUDA's smallest block.
constexpr size_t kAlignment = 512;
// Synthetic address space per device: far beyond any device's memory.
constexpr size_t kDeviceSpan = size_t(1) << 40;
constexpr size_t kMaxDevices = 128;

size_t round_size(size_t nbytes) {
  return (nbytes + kAlignment - 1) / kAlignment * kAlignment;
}

struct Block {
  uintptr_t address;
  size_t size;  // rounded
  size_t requested;
  c10::DeviceIndex device;
};

struct DeviceState {
  uintptr_t base = 0;
  uintptr_t bump = 0;
  // size -> addresses whose boxes are gone and which may be handed out again.
  std::multimap<size_t, uintptr_t> released;
  // address -> block freed by torch but whose box may still exist.
  std::unordered_map<uintptr_t, Block> pending;
  c10::CachingAllocator::Stat allocated_bytes;
  c10::CachingAllocator::Stat requested_bytes;
  c10::CachingAllocator::Stat reserved_bytes;
  c10::CachingAllocator::Stat allocations;
  size_t pending_bytes = 0;
};

void free_block(void* ctx);

}  // namespace

class SyntheticAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    const c10::DeviceIndex device = current_device();
    const c10::Device dev(kTpu, device);
    if (nbytes == 0) {
      return c10::DataPtr(nullptr, dev);
    }
    const size_t size = round_size(nbytes);
    std::lock_guard<std::mutex> lock(mu_);
    DeviceState& state = state_for(device);
    uintptr_t address = take_released(state, size);
    if (address == 0) {
      TORCH_CHECK(
          state.bump + size <= state.base + kDeviceSpan,
          "torchtpu: synthetic address space of tpu:",
          int(device),
          " exhausted while allocating ",
          nbytes,
          " bytes");
      address = state.bump;
      state.bump += size;
      state.reserved_bytes.increase(size);
    }
    state.allocated_bytes.increase(size);
    state.requested_bytes.increase(nbytes);
    state.allocations.increase(1);
    auto* block = new Block{address, size, nbytes, device};
    return c10::DataPtr(
        reinterpret_cast<void*>(address), block, &free_block, dev);
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

  bool initialized() override {
    return true;
  }

  void emptyCache(c10::MempoolId_t) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& state : states_) {
      if (!state) {
        continue;
      }
      for (const auto& [size, address] : state->released) {
        (void)address;
        state->reserved_bytes.decrease(size);
      }
      state->released.clear();
    }
  }

  void recordStream(const c10::DataPtr&, c10::Stream) override {}

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(
      c10::DeviceIndex device) override {
    std::lock_guard<std::mutex> lock(mu_);
    c10::CachingDeviceAllocator::DeviceStats stats;
    const auto agg = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    DeviceState& state = state_for(device);
    stats.allocated_bytes[agg] = state.allocated_bytes;
    stats.requested_bytes[agg] = state.requested_bytes;
    stats.reserved_bytes[agg] = state.reserved_bytes;
    stats.allocation[agg] = state.allocations;
    stats.active_bytes[agg] = state.allocated_bytes;
    stats.active[agg] = state.allocations;
    return stats;
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    for_each_stat(device, [](c10::CachingAllocator::Stat& stat) { stat.reset_accumulated(); });
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    for_each_stat(device, [](c10::CachingAllocator::Stat& stat) { stat.reset_peak(); });
  }

  // Called from storage deleters, on any thread, possibly without the GIL.
  void on_free(Block* block) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      DeviceState& state = state_for(block->device);
      state.allocated_bytes.decrease(block->size);
      state.requested_bytes.decrease(block->requested);
      state.allocations.decrease(1);
      state.pending_bytes += block->size;
      state.pending.emplace(block->address, *block);
    }
    push_event(
        {StorageEventKind::kFree, block->address, 0, block->size,
         block->device});
    delete block;
  }

  void release(const std::vector<uintptr_t>& addresses) {
    std::lock_guard<std::mutex> lock(mu_);
    for (uintptr_t address : addresses) {
      for (auto& state : states_) {
        if (!state) {
          continue;
        }
        auto it = state->pending.find(address);
        if (it != state->pending.end()) {
          state->pending_bytes -= it->second.size;
          state->released.emplace(it->second.size, address);
          state->pending.erase(it);
          break;
        }
      }
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
    const auto address = reinterpret_cast<uintptr_t>(ptr);
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto i : c10::irange(kMaxDevices)) {
      const auto& state = states_[i];
      if (state && address >= state->base &&
          address < state->base + kDeviceSpan) {
        return static_cast<c10::DeviceIndex>(i);
      }
    }
    return -1;
  }

  BasicStats stats(c10::DeviceIndex device) {
    std::lock_guard<std::mutex> lock(mu_);
    DeviceState& state = state_for(device);
    return BasicStats{
        state.allocated_bytes.current,
        state.allocated_bytes.peak,
        state.reserved_bytes.current,
        state.reserved_bytes.peak,
        state.allocations.current,
        state.allocations.peak,
        static_cast<int64_t>(state.pending_bytes)};
  }

 private:
  template <typename Fn>
  void for_each_stat(c10::DeviceIndex device, Fn fn) {
    std::lock_guard<std::mutex> lock(mu_);
    DeviceState& state = state_for(device);
    for (auto* stat : {&state.allocated_bytes, &state.requested_bytes, &state.reserved_bytes, &state.allocations}) {
      fn(*stat);
    }
  }

  DeviceState& state_for(c10::DeviceIndex device) {
    TORCH_CHECK(
        device >= 0 && static_cast<size_t>(device) < kMaxDevices,
        "torchtpu: invalid device index ",
        int(device));
    auto& state = states_[device];
    if (!state) {
      void* base = mmap(
          nullptr,
          kDeviceSpan,
          PROT_NONE,
          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
          -1,
          0);
      TORCH_CHECK(
          base != MAP_FAILED,
          "torchtpu: could not reserve synthetic address space for tpu:",
          int(device));
      state = std::make_unique<DeviceState>();
      state->base = reinterpret_cast<uintptr_t>(base);
      state->bump = state->base;
    }
    return *state;
  }

  static uintptr_t take_released(DeviceState& state, size_t size) {
    auto it = state.released.find(size);
    if (it == state.released.end()) {
      return 0;
    }
    const uintptr_t address = it->second;
    state.released.erase(it);
    return address;
  }

  std::mutex mu_;
  std::array<std::unique_ptr<DeviceState>, kMaxDevices> states_;
  std::mutex events_mu_;
  std::vector<StorageEvent> events_;
  std::atomic<bool> has_events_{false};
};

namespace {

void free_block(void* ctx) {
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
    new_data = storage->allocator()->allocate(new_nbytes);
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

BasicStats basic_stats(c10::DeviceIndex device) {
  return get_allocator()->stats(device);
}

// Registered for PrivateUse1 at load time; torch.accelerator.memory_* and
// storage allocation go through it.
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, get_allocator())

}  // namespace torchtpu
