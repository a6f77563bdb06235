#include "generator.h"

#include "device.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Utils.h>
#include <ATen/core/GeneratorForPrivateuseone.h>
#include <ATen/EmptyTensor.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <deque>
#include <mutex>
#include <random>

namespace torchtpu {

namespace {

// Same default as CUDA's generators.
constexpr uint64_t kDefaultSeed = 67280421310721ULL;
constexpr size_t kStateBytes = 2 * sizeof(uint64_t);

uint64_t nondeterministic_seed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

}  // namespace

TpuGeneratorImpl::TpuGeneratorImpl(c10::DeviceIndex device)
    : c10::GeneratorImpl(
          c10::Device(kTpu, device),
          c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      seed_(kDefaultSeed) {}

void TpuGeneratorImpl::set_current_seed(uint64_t seed) {
  seed_ = seed;
  offset_ = 0;
}

uint64_t TpuGeneratorImpl::current_seed() const {
  return seed_;
}

uint64_t TpuGeneratorImpl::seed() {
  set_current_seed(nondeterministic_seed());
  return seed_;
}

void TpuGeneratorImpl::set_offset(uint64_t offset) {
  offset_ = offset;
}

uint64_t TpuGeneratorImpl::get_offset() const {
  return offset_;
}

void TpuGeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  TORCH_CHECK(
      new_state.dtype() == caffe2::TypeMeta::Make<uint8_t>() &&
          new_state.device().is_cpu() &&
          static_cast<size_t>(new_state.numel()) == kStateBytes &&
          new_state.is_contiguous(),
      "RNG state for a tpu generator must be a contiguous CPU ByteTensor of ",
      kStateBytes,
      " bytes (as returned by get_rng_state)");
  const auto* bytes = static_cast<const uint8_t*>(new_state.data());
  std::memcpy(&seed_, bytes, sizeof(uint64_t));
  std::memcpy(&offset_, bytes + sizeof(uint64_t), sizeof(uint64_t));
}

c10::intrusive_ptr<c10::TensorImpl> TpuGeneratorImpl::get_state() const {
  auto state = at::detail::empty_cpu(
      {static_cast<int64_t>(kStateBytes)},
      c10::ScalarType::Byte,
      std::nullopt,
      std::nullopt,
      std::nullopt,
      std::nullopt);
  auto* bytes = static_cast<uint8_t*>(state.data_ptr());
  std::memcpy(bytes, &seed_, sizeof(uint64_t));
  std::memcpy(bytes + sizeof(uint64_t), &offset_, sizeof(uint64_t));
  return state.getIntrusivePtr();
}

std::pair<uint64_t, uint64_t> TpuGeneratorImpl::next(uint64_t increment) {
  const uint64_t offset = offset_;
  offset_ += increment;
  return {seed_, offset};
}

c10::DeviceType TpuGeneratorImpl::device_type() {
  return kTpu;
}

TpuGeneratorImpl* TpuGeneratorImpl::clone_impl() const {
  auto* copy = new TpuGeneratorImpl(device().index());
  copy->seed_ = seed_;
  copy->offset_ = offset_;
  return copy;
}

const at::Generator& default_generator(c10::DeviceIndex device) {
  // A deque keeps references stable while it grows.
  static std::mutex mu;
  static auto* generators = new std::deque<at::Generator>();
  if (device < 0) {
    device = current_device();
  }
  check_device_index(device);
  std::lock_guard<std::mutex> lock(mu);
  while (generators->size() <= static_cast<size_t>(device)) {
    generators->push_back(at::make_generator<TpuGeneratorImpl>(
        static_cast<c10::DeviceIndex>(generators->size())));
  }
  return (*generators)[device];
}

at::Generator new_generator(c10::DeviceIndex device) {
  if (device < 0) {
    device = current_device();
  }
  return at::make_generator<TpuGeneratorImpl>(device);
}

}  // namespace torchtpu
