// Nested tensors on tpu (torchtpu/ops/nested.py): the two things Python
// cannot do itself -- read a NestedTensorImpl's metadata and build one over
// a tpu buffer.  Everything else (packing, padding, the encoder layer) is
// ordinary tpu tensor ops in Python.
#include <ATen/NestedTensorImpl.h>
#include <torch/extension.h>

namespace py = pybind11;

namespace torchtpu {
namespace {

// (storage as a flat tensor, sizes, strides, storage offsets): component i
// is storage.as_strided(sizes[i], strides[i], offsets[i]).  The metadata
// tensors are CPU int64, as ATen keeps them.
py::tuple nested_parts(const at::Tensor& nested) {
  TORCH_CHECK(nested.is_nested(), "expected a nested tensor");
  const auto* impl = at::native::get_nested_tensor_impl(nested);
  return py::make_tuple(
      impl->get_unsafe_storage_as_tensor(),
      impl->get_nested_sizes(),
      impl->get_nested_strides(),
      impl->get_storage_offsets());
}

// A nested tensor viewing `buffer`'s storage: components need not be
// packed (the encoder keeps them at the rows of a padded batch).
at::Tensor nested_wrap(
    const at::Tensor& buffer,
    const at::Tensor& sizes,
    const at::Tensor& strides,
    const at::Tensor& offsets) {
  TORCH_CHECK(!buffer.is_nested() && buffer.dim() == 1 && buffer.is_contiguous(),
              "nested buffer must be a flat contiguous tensor");
  TORCH_CHECK(sizes.device().is_cpu() && strides.device().is_cpu() && offsets.device().is_cpu(),
              "nested metadata must be CPU tensors");
  return at::detail::make_tensor<at::native::NestedTensorImpl>(
      buffer, sizes.to(at::kLong).contiguous(), strides.to(at::kLong).contiguous(),
      offsets.to(at::kLong).contiguous());
}

}  // namespace

void register_nested_bindings(py::module& m) {
  m.def("_nested_parts", &nested_parts,
        "(storage as a flat tensor, sizes, strides, offsets) of a nested tensor.");
  m.def("_nested_wrap", &nested_wrap,
        "A nested tensor over a flat tpu buffer with these CPU sizes, strides and offsets.");
}

}  // namespace torchtpu
