// Per-device random generator for `tpu`: a (seed, offset) pair.  A random op
// derives its JAX key from both and advances the offset, so manual_seed makes
// runs reproducible and get/set_rng_state round-trips exactly.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>
#include <c10/util/intrusive_ptr.h>

#include <utility>

namespace torchtpu {

// The (seed, offset) pair, shared between generators by graphsafe_set_state
// (as CUDA's generators share their Philox state): AOTAutograd's checkpointed
// random ops run with a generator of their own swapped into the default one,
// and the draws must advance that generator.
struct TpuRngState : c10::intrusive_ptr_target {
  uint64_t seed;
  uint64_t offset = 0;
  explicit TpuRngState(uint64_t seed) : seed(seed) {}
};

class TpuGeneratorImpl final : public c10::GeneratorImpl {
 public:
  explicit TpuGeneratorImpl(c10::DeviceIndex device);

  void set_current_seed(uint64_t seed) override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  void graphsafe_set_state(const c10::intrusive_ptr<c10::GeneratorImpl>& state) override;
  c10::intrusive_ptr<c10::GeneratorImpl> graphsafe_get_state() const override;

  // (seed, offset) for one random op; advances the offset by `increment`.
  std::pair<uint64_t, uint64_t> next(uint64_t increment);

  static c10::DeviceType device_type();

 private:
  TpuGeneratorImpl* clone_impl() const override;

  c10::intrusive_ptr<TpuRngState> state_;
};

const at::Generator& default_generator(c10::DeviceIndex device);
at::Generator new_generator(c10::DeviceIndex device);

}  // namespace torchtpu
