// Pinned host memory for `tpu` (what `tensor.pin_memory()` allocates and
// `is_pinned()` recognises).
//
// PJRT transfers from any host buffer, so "pinned" memory here is ordinary,
// 64-byte aligned host memory that this allocator owns and tracks: the
// tracking is what lets `is_pinned()` answer, DataLoader(pin_memory=True)
// work, and `non_blocking=True` copies see a pinned source as on CUDA.
// Registered as the PrivateUse1 host allocator, so
// `torch.accelerator.empty_host_cache()` and host stats reach it too.
#include "device.h"

// The header's cache-line padding warns under GCC's -Winterference-size.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winterference-size"
#include <ATen/core/CachingHostAllocator.h>
#pragma GCC diagnostic pop
#include <c10/util/Exception.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace torchtpu {

namespace {

constexpr size_t kAlignment = 64;

class TpuHostAllocator final : public at::HostAllocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    if (n == 0) {
      return {nullptr, nullptr, &deleter, c10::Device(c10::kCPU)};
    }
    const auto start = std::chrono::steady_clock::now();
    void* ptr = nullptr;
    const size_t rounded = (n + kAlignment - 1) / kAlignment * kAlignment;
    if (posix_memalign(&ptr, kAlignment, rounded) != 0 || ptr == nullptr) {
      TORCH_CHECK_WITH(
          OutOfMemoryError, false, "torchtpu: failed to allocate ", n, " bytes of pinned host memory");
    }
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                        std::chrono::steady_clock::now() - start)
                        .count();
    {
      std::lock_guard<std::mutex> lock(mu_);
      blocks_[reinterpret_cast<uintptr_t>(ptr)] = n;
      stats_.active_requests.increase(1);
      stats_.active_bytes.increase(n);
      stats_.allocations.increase(1);
      stats_.allocated_bytes.increase(n);
      stats_.num_host_alloc += 1;
      stats_.host_alloc_time.increase(us);
    }
    return {ptr, ptr, &deleter, c10::Device(c10::kCPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return &deleter;
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

  // Copies out of pinned memory complete before they return, so nothing
  // needs to hold a block back for a stream.
  bool record_event(void*, void*, c10::Stream) override {
    return true;
  }

  // Blocks are returned to the system when freed; there is no cache.
  void empty_cache() override {}

  at::HostStats get_stats() override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

  void reset_accumulated_stats() override {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.active_requests.reset_accumulated();
    stats_.active_bytes.reset_accumulated();
    stats_.allocations.reset_accumulated();
    stats_.allocated_bytes.reset_accumulated();
    stats_.host_alloc_time.reset_accumulated();
    stats_.host_free_time.reset_accumulated();
    stats_.num_host_alloc = 0;
    stats_.num_host_free = 0;
  }

  void reset_peak_stats() override {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.active_requests.reset_peak();
    stats_.active_bytes.reset_peak();
    stats_.allocations.reset_peak();
    stats_.allocated_bytes.reset_peak();
    stats_.host_alloc_time.reset_peak();
    stats_.host_free_time.reset_peak();
  }

  bool contains(const void* p) const {
    const auto address = reinterpret_cast<uintptr_t>(p);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.upper_bound(address);
    if (it == blocks_.begin()) {
      return false;
    }
    --it;
    return address < it->first + it->second;
  }

  void release(void* ptr) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = blocks_.find(reinterpret_cast<uintptr_t>(ptr));
      TORCH_INTERNAL_ASSERT(it != blocks_.end(), "torchtpu: freeing an unknown pinned block");
      stats_.active_requests.decrease(1);
      stats_.active_bytes.decrease(it->second);
      stats_.allocations.decrease(1);
      stats_.allocated_bytes.decrease(it->second);
      stats_.num_host_free += 1;
      blocks_.erase(it);
    }
    std::free(ptr);
  }

 private:
  static void deleter(void* ptr);

  mutable std::mutex mu_;
  std::map<uintptr_t, size_t> blocks_;  // base address -> requested bytes
  at::HostStats stats_;
};

TpuHostAllocator* host_allocator_instance() {
  static auto* instance = new TpuHostAllocator();  // leaked: outlives all tensors
  return instance;
}

void TpuHostAllocator::deleter(void* ptr) {
  if (ptr != nullptr) {
    host_allocator_instance()->release(ptr);
  }
}

struct Registration {
  Registration() {
    at::setHostAllocator(kTpu, host_allocator_instance());
  }
};
Registration g_registration;

}  // namespace

at::Allocator* host_allocator() {
  return host_allocator_instance();
}

bool is_pinned_host_ptr(const void* ptr) {
  return ptr != nullptr && host_allocator_instance()->contains(ptr);
}

}  // namespace torchtpu
