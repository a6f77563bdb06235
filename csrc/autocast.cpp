// Autocast for `tpu`: `torch.autocast("tpu", dtype=torch.bfloat16)` (or
// float16) casts like CUDA autocast does.
//
// PyTorch routes autocast for a PrivateUse1 backend through the
// AutocastPrivateUse1 dispatch key; a backend registers its op lists there.
// We register CUDA's lists -- ATen publishes them as the AT_FORALL_* macros
// in ATen/autocast_mode.h, so they follow PyTorch upgrades:
//   lower precision (the autocast dtype): matmul, mm, bmm, addmm, linear,
//       conv*, baddbmm, einsum, prelu, RNN cells, scaled_dot_product_attention
//   float32: pointwise ops that lose accuracy in low precision (exp, log,
//       pow, ...), layer/group/rms norm, losses, cdist, logsumexp, upsampling
//   float32 unless a dtype is given: softmax, log_softmax, sum, prod, cumsum,
//       cumprod, vector/matrix norms
//   float32 with an appended dtype: norm.Scalar, norm.ScalarOpt_dim
//   widest input dtype: addcdiv, addcmul, atan2, cross, dot, index_put, ...
// and, as CUDA, binary_cross_entropy raises (use the _with_logits form).
// Every other op falls through to the normal kernels.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace torchtpu {
namespace {

// AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE spells its signatures unqualified.
using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

at::Tensor binary_cross_entropy_banned(
    const at::Tensor&,
    const at::Tensor&,
    const std::optional<at::Tensor>&,
    int64_t) {
  TORCH_CHECK(
      false,
      "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
      "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
      "In this case, combine the two layers using "
      "torch.nn.functional.binary_cross_entropy_with_logits\n"
      "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
      "safe to autocast.");
}

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

#define TPU_LOWER_PRECISION(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define TPU_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define TPU_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define TPU_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  AT_FORALL_LOWER_PRECISION_FP(TPU_LOWER_PRECISION)
  AT_FORALL_FP32(TPU_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(TPU_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(TPU_PROMOTE)
  m.impl(
      TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"),
      TORCH_FN(binary_cross_entropy_banned));
}

#undef TPU_LOWER_PRECISION
#undef TPU_FP32
#undef TPU_FP32_SET_OPT_DTYPE
#undef TPU_PROMOTE

}  // namespace
}  // namespace torchtpu
