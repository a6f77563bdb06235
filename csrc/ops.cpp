// Metadata-only aten kernels for `tpu`.  Sizes, strides and storage offsets
// live in ATen, so these are ATen's own view/creation logic over the
// synthetic allocator; no data moves here.  Everything that touches data is
// implemented in Python (torchtpu/ops).
#include "allocator.h"
#include "device.h"

#include <ATen/EmptyTensor.h>
#include <ATen/TensorUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/is_set_to_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

namespace torchtpu {
namespace {

const c10::DispatchKeySet kTpuKeys(c10::DispatchKey::PrivateUse1);

c10::DeviceIndex target_device(std::optional<c10::Device> device) {
  const c10::DeviceIndex index =
      device.has_value() && device->has_index() ? device->index()
                                                : current_device();
  check_device_index(index);
  return index;
}

void check_factory_options(std::optional<c10::Layout> layout, std::optional<bool> pin_memory) {
  TORCH_CHECK(!pin_memory.value_or(false), "Only dense CPU tensors can be pinned");
  TORCH_CHECK(
      layout.value_or(c10::kStrided) == c10::kStrided,
      "torchtpu supports only strided tensors, got layout ",
      layout.value_or(c10::kStrided));
}

// torch.use_deterministic_algorithms(True) with fill_uninitialized_memory:
// new tensors read NaN (or the integer maximum), as on CPU and CUDA.
at::Tensor filled_if_deterministic(at::Tensor& result) {
  auto& context = at::globalContext();
  if (C10_UNLIKELY(context.deterministicAlgorithms() && context.deterministicFillUninitializedMemory())) {
    at::native::fill_empty_deterministic_(result);
  }
  return result;
}

at::Tensor empty_memory_format(
    c10::IntArrayRef size,
    std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout,
    std::optional<c10::Device> device,
    std::optional<bool> pin_memory,
    std::optional<c10::MemoryFormat> memory_format) {
  check_factory_options(layout, pin_memory);
  c10::DeviceGuard guard(c10::Device(kTpu, target_device(device)));
  at::Tensor result = at::detail::empty_generic(
      size,
      get_allocator_base(),
      kTpuKeys,
      c10::dtype_or_default(dtype),
      memory_format);
  return filled_if_deterministic(result);
}

at::Tensor empty_strided(
    c10::IntArrayRef size,
    c10::IntArrayRef stride,
    std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout,
    std::optional<c10::Device> device,
    std::optional<bool> pin_memory) {
  check_factory_options(layout, pin_memory);
  c10::DeviceGuard guard(c10::Device(kTpu, target_device(device)));
  at::Tensor result = at::detail::empty_strided_generic(
      size, stride, get_allocator_base(), kTpuKeys, c10::dtype_or_default(dtype));
  return filled_if_deterministic(result);
}

at::Tensor as_strided(
    const at::Tensor& self,
    c10::IntArrayRef size,
    c10::IntArrayRef stride,
    std::optional<int64_t> storage_offset) {
  return at::native::as_strided_tensorimpl(self, size, stride, storage_offset);
}

at::Tensor view(const at::Tensor& self, c10::IntArrayRef size) {
  return at::native::view(self, size);
}

at::Tensor reshape_alias(
    const at::Tensor& self,
    c10::IntArrayRef size,
    c10::IntArrayRef stride) {
  return at::native::_reshape_alias(self, size, stride);
}

// Grows the storage when the new geometry needs more bytes than it has.
void maybe_resize_storage(c10::TensorImpl* self, size_t new_nbytes) {
  if (self->numel() == 0) {
    return;
  }
  const c10::Storage& storage = self->unsafe_storage();
  TORCH_INTERNAL_ASSERT(storage, "tpu tensors always have a storage");
  if (new_nbytes > storage.nbytes()) {
    resize_storage_bytes(storage.unsafeGetStorageImpl(), new_nbytes);
  }
}

void resize_impl(
    c10::TensorImpl* self,
    c10::IntArrayRef size,
    at::OptionalIntArrayRef stride) {
  if (self->sizes() == size && (!stride || self->strides() == stride.value())) {
    return;
  }
  const auto itemsize = self->dtype().itemsize();
  const auto offset = self->storage_offset();
  size_t nbytes = 0;
  if (stride) {
    self->set_sizes_and_strides(size, *stride);
    nbytes = at::detail::computeStorageNbytes(size, *stride, itemsize, offset);
  } else {
    self->set_sizes_contiguous(size);
    nbytes = at::detail::computeStorageNbytesContiguous(size, itemsize, offset);
  }
  maybe_resize_storage(self, nbytes);
}

const at::Tensor& resize_(
    const at::Tensor& self,
    c10::IntArrayRef size,
    std::optional<c10::MemoryFormat> memory_format) {
  c10::DeviceGuard guard(self.device());
  auto* impl = self.unsafeGetTensorImpl();
  resize_impl(impl, size, std::nullopt);
  if (memory_format.has_value()) {
    const auto format = *memory_format;
    TORCH_CHECK(
        format != c10::MemoryFormat::Preserve,
        "Unsupported memory format",
        format);
    impl->empty_tensor_restride(format);
  }
  return self;
}

at::Tensor& set_storage_offset_(
    at::Tensor& self,
    c10::Storage storage,
    int64_t storage_offset,
    c10::IntArrayRef size,
    c10::IntArrayRef stride) {
  at::native::checkSetStorage(self, storage, storage_offset, size, stride);
  self.unsafeGetTensorImpl()->set_storage_offset(storage_offset);
  at::OptionalIntArrayRef stride_opt =
      stride.data() != nullptr ? at::OptionalIntArrayRef(stride) : std::nullopt;
  resize_impl(self.unsafeGetTensorImpl(), size, stride_opt);
  return self;
}

at::Tensor& set_storage_(at::Tensor& self, c10::Storage storage) {
  const int64_t numel =
      static_cast<int64_t>(storage.nbytes() / self.dtype().itemsize());
  return set_storage_offset_(self, std::move(storage), 0, {numel}, {});
}

at::Tensor& set_tensor_(at::Tensor& self, const at::Tensor& source) {
  if (self.unsafeGetTensorImpl() == source.unsafeGetTensorImpl()) {
    return self;
  }
  return set_storage_offset_(
      self,
      source.storage(),
      source.storage_offset(),
      source.sizes(),
      source.strides());
}

at::Tensor& set_empty_(at::Tensor& self) {
  c10::Storage storage(
      c10::Storage::use_byte_size_t(), 0, get_allocator_base(), true);
  return set_storage_offset_(self, std::move(storage), 0, {0}, {});
}

// `param.data = t` and `module.to("tpu")` swap TensorImpls in place only if
// the types are shallow-copy compatible; c10 lists CPU/CUDA/... as dense
// backends but not PrivateUse1.  Without this, `model.to("tpu")` would give
// tied parameters (a GPT's embedding and output head) separate copies.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense_here = [](const at::Tensor& t) {
    return t.layout() == c10::kStrided && (t.is_cpu() || t.device().type() == kTpu);
  };
  return (dense_here(self) && dense_here(from)) ||
      self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", has_compatible_shallow_copy_type);
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("as_strided", as_strided);
  m.impl("view", view);
  m.impl("_reshape_alias", reshape_alias);
  m.impl("resize_", resize_);
  m.impl("set_.source_Storage_storage_offset", set_storage_offset_);
  m.impl("set_.source_Storage", set_storage_);
  m.impl("set_.source_Tensor", set_tensor_);
  m.impl("set_", set_empty_);
  // ATen's own (CPU's and CUDA's): compares storages and geometry.  Run on
  // CPU copies, as the fallback would, it saw two storages and said False.
  m.impl("is_set_to", TORCH_FN(at::native::is_set_to));
}

}  // namespace
}  // namespace torchtpu
