// Python bindings of torchtpu._C: the narrow interface between the C++
// runtime and the Python side (box table, dispatcher, device module).
#include "allocator.h"
#include "device.h"
#include "generator.h"

#include <torch/csrc/Generator.h>
#include <torch/extension.h>

#include <pybind11/functional.h>
#include <pybind11/stl.h>

namespace py = pybind11;

namespace torchtpu {

void register_hooks();
void drain_boxes();
void register_memory_bindings(py::module& m);  // memory_bindings.cpp
void register_stream_bindings(py::module& m);  // stream_bindings.cpp
void register_nested_bindings(py::module& m);  // nested_bindings.cpp
void register_host_scalar_bindings(py::module& m);  // host_scalars.cpp
void init_fastpath(
    py::object boxes,
    py::object move_box,
    py::object op_info,
    py::object slow_path,
    py::object pending_checks,
    py::object fold_checks);
void register_kernels(const std::vector<std::string>& names);
std::pair<int64_t, int64_t> fastpath_stats();
void set_dynamic_scalar(const std::string& name, const std::string& overload, int position);
void set_launch_blocking(py::object wait);
void clear_fastpath_cache();
void forget_kernels(const py::list& executables);
py::object graph_call_key(const py::tuple& args, const py::object& traced_positions);
void set_static_offsets(const std::string& name, const std::string& overload);
py::list bind_fresh(const py::list& specs, int device, const py::tuple& results, const py::list& sigs);

namespace {

py::tuple int_tuple(c10::IntArrayRef values) {
  py::tuple out(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    out[i] = py::int_(values[i]);
  }
  return out;
}

TpuGeneratorImpl* unpack_generator(py::handle generator, int device) {
  if (generator.is_none()) {
    return at::check_generator<TpuGeneratorImpl>(
        default_generator(static_cast<c10::DeviceIndex>(device)));
  }
  TORCH_CHECK(
      THPGenerator_Check(generator.ptr()), "expected a torch.Generator");
  auto& gen = reinterpret_cast<THPGenerator*>(generator.ptr())->cdata;
  return at::check_generator<TpuGeneratorImpl>(gen);
}

}  // namespace
}  // namespace torchtpu

PYBIND11_MODULE(_C, m) {
  using namespace torchtpu;
  m.doc() = "torchtpu C++ runtime: allocator, guard, hooks, generator";

  m.def(
      "_register_runtime",
      [](std::function<int()> count_provider,
         std::function<void(int)> synchronize_hook) {
        set_device_count_provider(std::move(count_provider));
        set_synchronize_hook([hook = std::move(synchronize_hook)](
                                 c10::DeviceIndex device) { hook(device); });
        register_hooks();
      },
      "Install the Python device-count provider and synchronize hook.");

  m.def(
      "_init_fastpath",
      &init_fastpath,
      "Install the C++ eager entry point as the PrivateUse1 fallback: "
      "(box dict, move_box(address, new_address, nbytes), op_info(name, overload) -> (kinds, static "
      "positions, fast), slow_path(name, overload, args, kwargs) -> "
      "(result, kernel spec or None), pending device-side checks (list), "
      "fold them ()).");
  m.def(
      "_register_kernels",
      &register_kernels,
      "Make the C++ entry point the PrivateUse1 kernel of these aten ops "
      "(so a lowering wins over a CompositeExplicitAutograd kernel).");
  m.def("_fastpath_stats", &fastpath_stats, "(hits, misses) of the C++ kernel cache");
  m.def(
      "_set_launch_blocking",
      &set_launch_blocking,
      "None, or a callable(kernel results) run after every kernel (it waits "
      "for them and reports their device-side check failures).");
  m.def(
      "_set_dynamic_scalar",
      &set_dynamic_scalar,
      "From now on pass this Scalar argument of the op traced, not baked in.");
  m.def(
      "_set_static_offsets",
      &set_static_offsets,
      "From now on key this op's views by their storage offsets (no traced "
      "rows: ops/row_offsets.py).");
  m.def("_clear_fastpath_cache", &clear_fastpath_cache);
  m.def(
      "_forget_kernels",
      &forget_kernels,
      "Drop the C++ cache's entries that run any of these executables "
      "(kernels the Python kernel cache evicted).");
  m.def(
      "_graph_call_key",
      &graph_call_key,
      py::arg("args"),
      py::arg("traced_positions") = py::none(),
      "A compiled graph's call of tpu tensors keyed in C++ (fastpath.cpp), "
      "the arguments at positions in `traced_positions` read at a traced index: "
      "(key bytes, box entries, addresses, device, traced indices) or None.");
  m.def(
      "_bind_fresh",
      &bind_fresh,
      "A compiled graph's fresh outputs: new tpu tensors for (sizes, strides, "
      "dtype) specs, each boxed with its result (fastpath.cpp).");

  m.def("_device_count", []() { return int(device_count()); });
  m.def("_init_error", []() { return init_error(); });
  m.def("_current_device", []() { return int(current_device()); });
  m.def("_set_device", [](int device) {
    check_device_index(static_cast<c10::DeviceIndex>(device));
    set_current_device(static_cast<c10::DeviceIndex>(device));
  });

  m.def(
      "_drain_boxes",
      &drain_boxes,
      "Apply the allocator's storage events to the box table: drop the boxes "
      "of freed storages (then release their addresses), move resized ones.");

  m.def(
      "_tensor_info",
      [](const at::Tensor& t) {
        const auto& storage = t.storage();
        check_whole_storage(storage);
        return py::make_tuple(
            reinterpret_cast<uintptr_t>(storage.data()),
            storage.nbytes(),
            int_tuple(t.sizes()),
            int_tuple(t.strides()),
            t.storage_offset(),
            int(t.device().index()));
      },
      "(storage address, storage nbytes, sizes, strides, storage offset, "
      "device index) of a tpu tensor, in one call.");

  m.def(
      "_is_wrapped_number",
      [](const at::Tensor& t) {
        return t.unsafeGetTensorImpl()->is_wrapped_number();
      },
      "Whether a CPU scalar tensor came from a Python number (it then "
      "promotes like a scalar, not like a 0-dim tensor).");

  m.def(
      "_next_rng",
      [](py::handle generator, int device, uint64_t increment) {
        auto* gen = unpack_generator(generator, device);
        std::lock_guard<std::mutex> lock(gen->mutex_);
        return gen->next(increment);
      },
      "(seed, offset) for one random op from a generator (None: the "
      "device's default); advances the offset.");

  m.def(
      "_default_generator",
      [](int device) {
        return py::reinterpret_steal<py::object>(
            THPGenerator_initDefaultGenerator(
                default_generator(static_cast<c10::DeviceIndex>(device))));
      },
      "The default torch.Generator of tpu:device.");

  register_memory_bindings(m);
  register_stream_bindings(m);
  register_nested_bindings(m);
  register_host_scalar_bindings(m);
}
