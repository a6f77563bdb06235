// A compiled optimizer step's host-side scalars (compile/host_updates.py):
// one step count per parameter, each a CPU 0-d tensor.  Updating them with
// ATen's CPU kernels costs a dispatch per tensor per op (~3-8 us each, a
// foreach op included: CPU has no fused foreach kernels), so the update runs
// on one vector instead: gathered here, computed by one ATen op, scattered
// back here -- plain memory copies, each write bumping the tensor's version
// as copy_ would.
#include <torch/extension.h>

#include <cstring>

namespace py = pybind11;

namespace torchtpu {
namespace {

void check_scalar(const at::Tensor& t, at::ScalarType dtype, const char* what) {
  TORCH_CHECK(t.defined() && t.device().is_cpu() && t.dim() == 0 && t.scalar_type() == dtype && !t.is_conj() &&
                  !t.is_neg(),
              "torchtpu: ", what, " must be CPU 0-d tensors of one dtype without lazy conj/neg bits");
}

// The values of `scalars` (CPU 0-d tensors of one dtype) as one 1-d tensor.
at::Tensor gather_cpu_scalars(const std::vector<at::Tensor>& scalars) {
  TORCH_CHECK(!scalars.empty(), "torchtpu: no scalars to gather");
  const auto dtype = scalars[0].scalar_type();
  at::Tensor out = at::empty({static_cast<int64_t>(scalars.size())}, at::TensorOptions().dtype(dtype));
  const auto size = out.element_size();
  auto* dst = static_cast<char*>(out.mutable_data_ptr());
  for (size_t k = 0; k < scalars.size(); ++k) {
    check_scalar(scalars[k], dtype, "gathered scalars");
    std::memcpy(dst + k * size, scalars[k].const_data_ptr(), size);
  }
  return out;
}

// Writes values[k] into scalars[k], as scalars[k].copy_(values[k]) would
// (same dtype: the caller casts).
void scatter_cpu_scalars(const std::vector<at::Tensor>& scalars, const at::Tensor& values) {
  TORCH_CHECK(values.device().is_cpu() && values.dim() == 1 && values.is_contiguous() &&
                  values.size(0) == static_cast<int64_t>(scalars.size()),
              "torchtpu: scattered values must be a contiguous CPU vector, one per scalar");
  const auto size = values.element_size();
  const auto* src = static_cast<const char*>(values.const_data_ptr());
  for (size_t k = 0; k < scalars.size(); ++k) {
    const auto& t = scalars[k];
    check_scalar(t, values.scalar_type(), "scattered scalars");
    TORCH_CHECK(!t.requires_grad(), "torchtpu: a host-updated scalar requires grad");
    std::memcpy(t.mutable_data_ptr(), src + k * size, size);
    t.unsafeGetTensorImpl()->bump_version();
  }
}

}  // namespace

void register_host_scalar_bindings(py::module& m) {
  m.def("_gather_cpu_scalars", &gather_cpu_scalars,
        "The values of CPU 0-d tensors of one dtype as one 1-d tensor.");
  m.def("_scatter_cpu_scalars", &scatter_cpu_scalars,
        "Writes a CPU vector's values into CPU 0-d tensors of its dtype, as copy_ would.");
}

}  // namespace torchtpu
