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
      state_(c10::make_intrusive<TpuRngState>(kDefaultSeed)) {}

void TpuGeneratorImpl::set_current_seed(uint64_t seed) {
  state_->seed = seed;
  state_->offset = 0;
}

uint64_t TpuGeneratorImpl::current_seed() const {
  return state_->seed;
}

uint64_t TpuGeneratorImpl::seed() {
  set_current_seed(nondeterministic_seed());
  return state_->seed;
}

void TpuGeneratorImpl::set_offset(uint64_t offset) {
  state_->offset = offset;
}

uint64_t TpuGeneratorImpl::get_offset() const {
  return state_->offset;
}

void TpuGeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  // A wrong kind of tensor is a TypeError, as for the CPU and CUDA
  // generators (at::detail::check_rng_state); a wrong size a RuntimeError.
  TORCH_CHECK_TYPE(
      new_state.dtype() == caffe2::TypeMeta::Make<uint8_t>() && new_state.device().is_cpu() &&
          new_state.layout() == c10::kStrided,
      "RNG state must be a torch.ByteTensor");
  TORCH_CHECK(
      static_cast<size_t>(new_state.numel()) == kStateBytes && new_state.is_contiguous(),
      "RNG state for a tpu generator must be a contiguous CPU ByteTensor of ",
      kStateBytes,
      " bytes (as returned by get_rng_state)");
  const auto* bytes = static_cast<const uint8_t*>(new_state.data());
  std::memcpy(&state_->seed, bytes, sizeof(uint64_t));
  std::memcpy(&state_->offset, bytes + sizeof(uint64_t), sizeof(uint64_t));
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
  std::memcpy(bytes, &state_->seed, sizeof(uint64_t));
  std::memcpy(bytes + sizeof(uint64_t), &state_->offset, sizeof(uint64_t));
  return state.getIntrusivePtr();
}

void TpuGeneratorImpl::graphsafe_set_state(const c10::intrusive_ptr<c10::GeneratorImpl>& state) {
  auto* other = dynamic_cast<TpuGeneratorImpl*>(state.get());
  TORCH_CHECK(other != nullptr, "graphsafe_set_state of a tpu generator needs another tpu generator's state");
  state_ = other->state_;
}

c10::intrusive_ptr<c10::GeneratorImpl> TpuGeneratorImpl::graphsafe_get_state() const {
  auto view = c10::make_intrusive<TpuGeneratorImpl>(device().index());
  view->state_ = state_;  // shares, not copies: draws through either advance both
  return view;
}

std::pair<uint64_t, uint64_t> TpuGeneratorImpl::next(uint64_t increment) {
  const uint64_t offset = state_->offset;
  state_->offset += increment;
  return {state_->seed, offset};
}

c10::DeviceType TpuGeneratorImpl::device_type() {
  return kTpu;
}

TpuGeneratorImpl* TpuGeneratorImpl::clone_impl() const {
  auto* copy = new TpuGeneratorImpl(device().index());
  copy->state_ = c10::make_intrusive<TpuRngState>(state_->seed);
  copy->state_->offset = state_->offset;
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
  check_device_index(device);  // (torch.Generator("tpu:9") with 4 devices: CUDA raises too)
  return at::make_generator<TpuGeneratorImpl>(device);
}

}  // namespace torchtpu
