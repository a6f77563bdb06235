// scaled_dot_product_attention on `tpu`: which kernel runs.
//
// ATen's SDPA asks the device's `_fused_sdp_choice_stub` which backend to
// use.  A PrivateUse1 backend that answers "overrideable" gets the whole
// attention as one op, `_scaled_dot_product_fused_attention_overrideable`
// (forward and backward, each with a meta kernel in PyTorch), which we lower
// to XLA (a Pallas kernel on TPU/GPU); compiled graphs keep it whole too.
// Any other answer takes ATen's math path: matmul, softmax, dropout, matmul.
//
// The fused op takes no enable_gqa flag, so calls with 3-d/5-d inputs or
// head counts that only the math path checks and reports take the math
// path.  Dropout is fused (its mask redrawn in the backward from a key the
// forward returns).  `torch.nn.attention.sdpa_kernel` is
// respected: with only MATH enabled the math path runs; enabling FLASH,
// EFFICIENT, CUDNN or OVERRIDEABLE (what CUDA code asks for) allows ours.
#include <ATen/Context.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/native/transformers/sdp_utils_cpp.h>

namespace torchtpu {
namespace {

bool fused_allowed_by_user() {
  const auto& ctx = at::globalContext();
  return ctx.userEnabledOverrideableSDP() || ctx.userEnabledFlashSDP() ||
      ctx.userEnabledMemEfficientSDP() || ctx.userEnabledCuDNNSDP();
}

bool fused_takes(
    const at::Tensor& query,
    const at::Tensor& key,
    const at::Tensor& value,
    const std::optional<at::Tensor>& attn_mask,
    bool enable_gqa) {
  if (query.dim() != 4 || key.dim() != 4 || value.dim() != 4) {
    return false;
  }
  if (query.is_nested() || key.is_nested() || value.is_nested()) {
    return false;
  }
  if (!at::isFloatingType(query.scalar_type()) ||
      key.scalar_type() != query.scalar_type() ||
      value.scalar_type() != query.scalar_type()) {
    return false;
  }
  if (query.sym_size(0) != key.sym_size(0) ||
      key.sym_size(0) != value.sym_size(0) ||
      query.sym_size(3) != key.sym_size(3) ||
      key.sym_size(1) != value.sym_size(1) ||
      key.sym_size(2) != value.sym_size(2)) {
    return false;
  }
  const auto q_heads = query.sym_size(1);
  const auto kv_heads = key.sym_size(1);
  if (q_heads != kv_heads) {
    // Grouped-query attention: fused only when asked for and well formed.
    if (!enable_gqa || kv_heads == 0 || q_heads % kv_heads != 0) {
      return false;
    }
  }
  if (attn_mask.has_value() && attn_mask->defined() && attn_mask->dim() > 4) {
    return false;
  }
  return true;
}

int64_t fused_sdp_choice(
    const at::Tensor& query,
    const at::Tensor& key,
    const at::Tensor& value,
    const std::optional<at::Tensor>& attn_mask,
    double /*dropout_p*/,
    bool /*is_causal*/,
    std::optional<double> /*scale*/,
    bool enable_gqa) {
  if (fused_allowed_by_user() &&
      fused_takes(query, key, value, attn_mask, enable_gqa)) {
    return static_cast<int64_t>(sdp::SDPBackend::overrideable);
  }
  return static_cast<int64_t>(sdp::SDPBackend::math);
}

} // namespace
} // namespace torchtpu

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torchtpu::fused_sdp_choice);
} // namespace at::native
