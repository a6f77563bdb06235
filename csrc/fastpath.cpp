// The eager hot path in C++.
//
// Every op that reaches the `tpu` backend enters `tpu_kernel` (registered as
// the PrivateUse1 fallback and as the kernel of each lowered op).  It builds
// the kernel cache key straight from the IValue stack -- each tensor's view
// geometry, dtype, storage slot and box signature; Scalar types; static
// argument values -- and on a hit allocates the outputs, calls the cached
// jitted function on the box arrays and rebinds the written boxes, without
// leaving C++ except for that one call.
//
// Everything else (a miss, CPU tensors, data-dependent ops, fallbacks) goes
// to the Python dispatcher (torchtpu/ops/registration.py::slow_path), which
// returns the kernel it used when the call was a plain lowered kernel; that
// kernel is then cached here under this call's key.  The key covers every
// input of the Python key, so a hit always runs the kernel Python would.
#include "device.h"

#include <ATen/Context.h>
#include <ATen/EmptyTensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/library.h>

#include <pybind11/pybind11.h>

#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "allocator.h"
#include "generator.h"

namespace py = pybind11;

namespace torchtpu {

void drain_boxes();

namespace {

// Argument kinds, as torchtpu/ops/schema.py numbers them.
enum ArgKind : int {
  kTensor = 0,
  kOptTensor = 1,
  kTensorList = 2,
  kOptTensorList = 3,
  kScalar = 4,  // traced: its type is in the key, its value an input
  kScalarList = 5,
  kGenerator = 6,
  kStatic = 7,  // its value is in the key
};

struct OpInfo {
  std::vector<int> kinds;
  std::vector<bool> static_scalar;  // Scalars the lowering bakes in
  // Scalar positions passed traced (they showed too many distinct values);
  // the others are baked into the kernel (see dispatch.MAX_BAKED_VALUES).
  std::vector<bool> dynamic;
  bool fast = true;  // false: always take the Python path (transfer ops...)
  // Views at an offset read at a traced index (ops/row_offsets.py); off
  // for ops whose outputs sit at an input's offset.
  bool trace_offsets = true;
  // The tensor lists a foreach op writes (its in-place `self` or its
  // `out=`).  Foreach ops have no ADInplaceOrView kernel, the one that bumps
  // an in-place op's version counter for autograd's "modified by an inplace
  // operation" check, so the backend bumps them itself, as CUDA's foreach
  // kernels do (CPU's run per-tensor in-place ops, which bump too).
  std::vector<size_t> foreach_written_lists;
};

// A box signature's layout (ops/row_offsets.py::box_layout).
struct BoxLayout {
  bool valid = false;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // contiguous
  c10::ScalarType dtype = c10::ScalarType::Undefined;
};

struct FreshSpec {
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  c10::ScalarType dtype;
};

enum WriteKind : int { kWriteFresh = 0, kWriteSlot = 1 };
enum ReturnKind : int {
  kReturnFresh = 0,
  kReturnArg = 1,
  kReturnNone = 2,
  kReturnFreshList = 3,
  kReturnInt = 4  // a size the op returns (attention's max_q/max_k): refs[0]
};

struct Spec {
  py::object jitted;
  py::object donating;  // variant donating the inputs in `donated`, or None
  std::vector<int> donated;  // positions among the inputs
  py::object checks;  // device-side check table (last output is its code), or None
  std::vector<int> input_slots;
  std::vector<FreshSpec> fresh;
  std::vector<std::pair<int, int>> writes;
  std::vector<py::object> sigs;
  std::vector<std::pair<int, std::vector<int>>> returns;
  bool random = false;
};

using Key = std::vector<int64_t>;

struct KeyHash {
  size_t operator()(const Key& key) const noexcept {
    size_t h = 1469598103934665603ULL;
    for (int64_t v : key) {
      h ^= static_cast<size_t>(v) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    }
    return h;
  }
};

// All of this is touched only with the GIL held.
struct State {
  PyObject* boxes = nullptr;  // torchtpu.runtime.boxes.boxes (dict)
  py::object move_box;  // boxes.move(address, new_address, new_nbytes)
  PyObject* pending_checks = nullptr;  // torchtpu.runtime.checks.pending (list)
  py::object fold_checks;  // checks.maybe_fold
  // TORCHTPU_LAUNCH_BLOCKING: wait for every kernel and report its
  // device-side check failures at once, so errors point at their op.
  py::object launch_blocking;  // None, or a callable(results) that waits
  py::object op_info;  // (name, overload) -> (kinds, static positions, fast)
  py::object slow_path;  // (name, overload, args, kwargs) -> (result, spec)
  // slow_path under torch.compiler.disable, made once dynamo is imported
  // (runtime/outside_dynamo.py says why).
  py::object slow_path_outside_dynamo;
  std::unordered_map<const c10::FunctionSchema*, std::unique_ptr<OpInfo>> ops;
  // Shared: a hit holds its spec while it runs, whatever Python evicts.
  std::unordered_map<Key, std::shared_ptr<Spec>, KeyHash> cache;
  // Interned box signatures (held: their identity is the key) -> their layout.
  std::unordered_map<PyObject*, BoxLayout> box_layouts;
  py::object box_layout_fn;  // row_offsets.box_layout, imported at first use
  int64_t hits = 0;
  int64_t misses = 0;
};

State* state() {
  static auto* s = new State();  // leaked: holds Python objects
  return s;
}

[[noreturn]] void rethrow_python() {
  python_error error;
  error.persist();
  throw std::move(error);
}

// ------------------------------------------------------------------ keys

struct Call {
  Key key;
  std::vector<uintptr_t> addresses;  // slot -> storage address
  std::vector<PyObject*> arrays;  // slot -> box array (borrowed) or null
  std::vector<PyObject*> sigs;  // slot -> box signature (borrowed) or null
  std::vector<py::object> dyn;  // traced non-array inputs, argument order
  int device = -1;
  int requested = -1;  // device= of a factory (no tensor says where)
  std::optional<at::Generator> generator;
  bool fast = true;
};

constexpr int64_t kTagNone = -1;
constexpr int64_t kTagTensor = -2;
constexpr int64_t kTagDouble = -3;
constexpr int64_t kTagInt = -4;
constexpr int64_t kTagBool = -5;
constexpr int64_t kTagList = -6;
constexpr int64_t kTagOther = -7;
constexpr int64_t kTagCpuScalar = -8;

const BoxLayout& box_layout(PyObject* sig) {
  State* s = state();
  auto it = s->box_layouts.find(sig);
  if (it != s->box_layouts.end()) {
    return it->second;
  }
  BoxLayout layout;
  try {
    if (!s->box_layout_fn) {
      s->box_layout_fn = py::module::import("torchtpu.ops.row_offsets").attr("box_layout");
    }
    py::object r = s->box_layout_fn(py::reinterpret_borrow<py::object>(sig));
    if (!r.is_none()) {
      layout.valid = true;
      layout.shape = r[py::int_(0)].cast<std::vector<int64_t>>();
      layout.strides = r[py::int_(1)].cast<std::vector<int64_t>>();
      PyObject* dtype = py::object(r[py::int_(2)]).ptr();
      TORCH_INTERNAL_ASSERT(THPDtype_Check(dtype));
      layout.dtype = reinterpret_cast<THPDtype*>(dtype)->scalar_type;
    }
  } catch (py::error_already_set& e) {
    e.restore();
    rethrow_python();
  }
  Py_INCREF(sig);
  return s->box_layouts.emplace(sig, std::move(layout)).first->second;
}

// The rule of ops/row_offsets.py::traced_index (keep the two identical):
// whether a view is read at a traced index of box dim k, and (k, index,
// residual, span).
struct TracedIndex {
  int64_t dim = 0;
  int64_t index = 0;
  int64_t residual = 0;
  int64_t span = 0;
};

bool traced_index(PyObject* sig, const at::Tensor& t, TracedIndex* out) {
  const int64_t offset = t.unsafeGetTensorImpl()->storage_offset();
  if (offset == 0 || sig == nullptr) {
    return false;
  }
  const BoxLayout& layout = box_layout(sig);
  if (!layout.valid || layout.dtype != t.scalar_type()) {
    return false;
  }
  const auto sizes = t.sizes();
  const auto strides = t.strides();
  for (const int64_t n : sizes) {
    if (n == 0) {
      return false;
    }
  }
  const int64_t ndim = static_cast<int64_t>(layout.shape.size());
  int64_t k = 0;
  while (k < ndim && offset < layout.strides[k]) {
    ++k;
  }
  if (k == ndim) {
    return false;
  }
  const int64_t index = offset / layout.strides[k];
  const int64_t residual = offset % layout.strides[k];
  const int64_t outer = k > 0 ? layout.strides[k - 1] : 0;
  int64_t extent = 1;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) {
      continue;
    }
    if (k > 0 && strides[d] >= outer) {
      if (strides[d] % outer != 0) {
        return false;
      }
    } else {
      extent += (sizes[d] - 1) * strides[d];
    }
  }
  const int64_t span = (residual + extent + layout.strides[k] - 1) / layout.strides[k];
  if (index + span > layout.shape[k]) {
    return false;
  }
  *out = TracedIndex{k, index, residual, span};
  return true;
}

void add_tpu_tensor(Call& call, const at::Tensor& t, bool trace_offsets) {
  auto* impl = t.unsafeGetTensorImpl();
  const int device = t.device().index();
  if (call.device < 0) {
    call.device = device;
  } else if (device != call.device) {
    call.fast = false;  // Python raises PyTorch's device-mismatch error
    return;
  }
  const auto& storage = impl->unsafe_storage();
  check_whole_storage(storage);
  const auto address = reinterpret_cast<uintptr_t>(storage.data());
  size_t slot = 0;
  while (slot < call.addresses.size() && call.addresses[slot] != address) {
    ++slot;
  }
  if (slot == call.addresses.size()) {
    call.addresses.push_back(address);
    PyObject* entry = nullptr;
    if (address != 0) {
      PyObject* py_address = PyLong_FromUnsignedLongLong(address);
      entry = PyDict_GetItem(state()->boxes, py_address);  // borrowed
      Py_DECREF(py_address);
    }
    call.arrays.push_back(entry ? PyTuple_GET_ITEM(entry, 0) : nullptr);
    call.sigs.push_back(entry ? PyTuple_GET_ITEM(entry, 1) : nullptr);
    // The interned signature object's identity stands for (shape, dtype).
    call.key.push_back(
        entry ? reinterpret_cast<int64_t>(PyTuple_GET_ITEM(entry, 1)) : 0);
  } else {
    call.key.push_back(-100 - static_cast<int64_t>(slot));
  }
  call.key.push_back(kTagTensor);
  call.key.push_back(static_cast<int64_t>(slot));
  // dtype, and the lazy conjugate/negative bits (kernels read the logical value)
  call.key.push_back(static_cast<int64_t>(t.scalar_type()) | (impl->is_conj() ? 1 << 16 : 0) |
                     (impl->is_neg() ? 1 << 17 : 0));
  TracedIndex traced;
  if (trace_offsets && traced_index(call.sigs[slot], t, &traced)) {
    call.key.push_back(-1 - traced.residual);  // (negative: a static offset is >= 0)
    call.key.push_back(traced.dim);
    call.key.push_back(traced.span);
    call.dyn.push_back(py::int_(traced.index));
  } else {
    call.key.push_back(impl->storage_offset());
  }
  call.key.push_back(static_cast<int64_t>(storage.nbytes()));
  const auto sizes = impl->sizes();
  const auto strides = impl->strides();
  call.key.push_back(static_cast<int64_t>(sizes.size()));
  call.key.insert(call.key.end(), sizes.begin(), sizes.end());
  call.key.insert(call.key.end(), strides.begin(), strides.end());
}

void add_dynamic_scalar(Call& call, const c10::IValue& v) {
  if (v.isDouble()) {
    call.key.push_back(kTagDouble);
    call.dyn.push_back(py::float_(v.toDouble()));
  } else if (v.isInt()) {
    call.key.push_back(kTagInt);
    call.dyn.push_back(py::int_(v.toInt()));
  } else if (v.isBool()) {
    call.key.push_back(kTagBool);
    call.dyn.push_back(py::bool_(v.toBool()));
  } else if (v.isNone()) {
    call.key.push_back(kTagNone);
  } else {
    call.fast = false;  // complex, symbolic, ...
  }
}

void add_static(Call& call, const c10::IValue& v);

// A Scalar: its value in the key (baked) or its type (traced input).
void add_scalar(Call& call, const c10::IValue& v, bool dynamic) {
  if (dynamic) {
    add_dynamic_scalar(call, v);
  } else if (v.isComplexDouble()) {
    call.fast = false;
  } else {
    add_static(call, v);
  }
}

void add_tensor_arg(Call& call, const c10::IValue& v, bool trace_offsets, bool dynamic = false) {
  if (v.isNone()) {
    call.key.push_back(kTagNone);
    return;
  }
  if (!v.isTensor()) {
    call.fast = false;
    return;
  }
  const at::Tensor& t = v.toTensor();
  if (!t.defined()) {
    call.key.push_back(kTagNone);
  } else if (t.device().type() == kTpu) {
    add_tpu_tensor(call, t, trace_offsets);
  } else if (t.unsafeGetTensorImpl()->is_wrapped_number()) {
    // `x + 2`: Python kernels see the number, so a Scalar.
    add_scalar(call, c10::IValue(t.item()), dynamic);
  } else {
    call.fast = false;  // CPU tensors: Python handles (and checks) them
  }
}

void add_static(Call& call, const c10::IValue& v) {
  if (v.isNone()) {
    call.key.push_back(kTagNone);
  } else if (v.isInt()) {
    call.key.push_back(kTagInt);
    call.key.push_back(v.toInt());
  } else if (v.isBool()) {
    call.key.push_back(kTagBool);
    call.key.push_back(v.toBool());
  } else if (v.isDouble()) {
    const double d = v.toDouble();
    int64_t bits = 0;
    std::memcpy(&bits, &d, sizeof(bits));
    call.key.push_back(kTagDouble);
    call.key.push_back(bits);
  } else if (v.isIntList()) {
    const auto list = v.toIntList();
    call.key.push_back(kTagList);
    call.key.push_back(static_cast<int64_t>(list.size()));
    for (const int64_t x : list) {
      call.key.push_back(x);
    }
  } else if (v.isDevice()) {
    const c10::Device device = v.toDevice();
    call.key.push_back(kTagOther);
    call.key.push_back(static_cast<int64_t>(device.type()));
    call.key.push_back(device.index());
    if (device.type() == kTpu && call.requested < 0) {
      call.requested = device.has_index() ? device.index() : current_device();
    }
  } else if (v.isString()) {
    call.key.push_back(kTagOther);
    call.key.push_back(static_cast<int64_t>(std::hash<std::string>{}(v.toStringRef())));
    // Hash collisions are settled by Python: a string static arg is rare
    // (reduce="sum", approximate="tanh"), keep both in the key.
    call.key.push_back(static_cast<int64_t>(v.toStringRef().size()));
  } else if (v.isList()) {
    const auto list = v.toListRef();
    call.key.push_back(kTagList);
    call.key.push_back(static_cast<int64_t>(list.size()));
    for (const auto& item : list) {
      add_static(call, item);
      if (!call.fast) {
        return;
      }
    }
  } else {
    call.fast = false;
  }
}

// A list argument: its length, then each item.
template <typename AddItem>
void add_list(Call& call, const c10::IValue& v, AddItem add_item) {
  if (!v.isList() && !v.isTensorList() && !v.isDoubleList() && !v.isIntList()) {
    call.fast = false;
    return;
  }
  const auto list = v.toListRef();
  call.key.push_back(kTagList);
  call.key.push_back(static_cast<int64_t>(list.size()));
  for (const auto& item : list) {
    add_item(item);
  }
}

void add_argument(Call& call, const OpInfo& info, size_t i, const c10::IValue& v) {
  switch (info.kinds[i]) {
    case kTensor:
    case kOptTensor:
      add_tensor_arg(call, v, info.trace_offsets, info.dynamic[i]);
      break;
    case kTensorList:
    case kOptTensorList:
      if (v.isNone()) {
        call.key.push_back(kTagNone);
      } else {
        add_list(call, v, [&](const c10::IValue& item) { add_tensor_arg(call, item, info.trace_offsets); });
      }
      break;
    case kScalar:
      if (info.static_scalar[i]) {
        add_static(call, v);
      } else {
        add_scalar(call, v, info.dynamic[i]);
      }
      break;
    case kScalarList:
      add_list(call, v, [&](const c10::IValue& item) { add_dynamic_scalar(call, item); });
      break;
    case kGenerator:
      call.key.push_back(kTagOther);
      if (!v.isNone()) {
        call.generator = v.toGenerator();
      }
      break;
    default:
      add_static(call, v);
  }
}

// Applies the allocator's storage events to the box table (with the GIL):
// a freed storage's box is dropped, then its address is released for reuse;
// a resized storage's bytes move to its new address (in Python, rare).
void drain_boxes_impl() {
  State* s = state();
  std::vector<uintptr_t> released;
  for (const auto& event : drain_storage_events()) {
    PyObject* address = PyLong_FromUnsignedLongLong(event.address);
    if (event.kind == StorageEventKind::kFree) {
      if (PyDict_DelItem(s->boxes, address) != 0) {
        PyErr_Clear();  // never written: no box
      }
      released.push_back(event.address);
    } else {
      try {
        s->move_box(py::reinterpret_borrow<py::object>(address), event.new_address, event.nbytes);
      } catch (py::error_already_set& e) {
        Py_DECREF(address);
        e.restore();
        rethrow_python();
      }
    }
    Py_DECREF(address);
  }
  if (!released.empty()) {
    release_addresses(released);
  }
}

// ------------------------------------------------------- Python bridge

const OpInfo& op_info(const c10::OperatorHandle& op) {
  State* s = state();
  const auto* schema = &op.schema();
  auto it = s->ops.find(schema);
  if (it != s->ops.end()) {
    return *it->second;
  }
  auto info = std::make_unique<OpInfo>();
  try {
    py::tuple result = s->op_info(schema->name(), schema->overload_name());
    for (auto k : result[0]) {
      info->kinds.push_back(k.cast<int>());
    }
    info->static_scalar.assign(info->kinds.size(), false);
    info->dynamic.assign(info->kinds.size(), false);
    for (auto p : result[1]) {
      info->static_scalar.at(p.cast<size_t>()) = true;
    }
    info->fast = result[2].cast<bool>();
  } catch (py::error_already_set& e) {
    e.restore();
    rethrow_python();
  }
  if (schema->name().rfind("aten::_foreach_", 0) == 0) {
    const auto& arguments = schema->arguments();
    for (size_t i = 0; i < arguments.size(); ++i) {
      const auto* alias = arguments[i].alias_info();
      if (alias != nullptr && alias->isWrite() && arguments[i].type()->kind() == c10::TypeKind::ListType) {
        info->foreach_written_lists.push_back(i);
      }
    }
  }
  return *s->ops.emplace(schema, std::move(info)).first->second;
}

py::object to_python(const c10::IValue& v) {
  // Wrapped numbers reach Python kernels as numbers, as in PyTorch's own
  // Python dispatch.
  if (v.isTensor() && v.toTensor().defined() &&
      v.toTensor().unsafeGetTensorImpl()->is_wrapped_number()) {
    return torch::jit::toPyObject(c10::IValue(v.toTensor().item()));
  }
  return torch::jit::toPyObject(v);
}

std::shared_ptr<Spec> spec_from_python(py::handle obj) {
  auto spec = std::make_shared<Spec>();
  py::tuple t = py::reinterpret_borrow<py::tuple>(obj);
  spec->jitted = t[0];
  for (auto s : t[1]) {
    spec->input_slots.push_back(s.cast<int>());
  }
  for (auto f : t[2]) {
    py::tuple ft = py::reinterpret_borrow<py::tuple>(f);
    FreshSpec fresh;
    fresh.sizes = ft[0].cast<std::vector<int64_t>>();
    fresh.strides = ft[1].cast<std::vector<int64_t>>();
    PyObject* dtype = ft[2].ptr();
    TORCH_INTERNAL_ASSERT(THPDtype_Check(dtype));
    fresh.dtype = reinterpret_cast<THPDtype*>(dtype)->scalar_type;
    spec->fresh.push_back(std::move(fresh));
  }
  for (auto w : t[3]) {
    py::tuple wt = py::reinterpret_borrow<py::tuple>(w);
    spec->writes.emplace_back(wt[0].cast<int>(), wt[1].cast<int>());
  }
  for (auto sig : t[4]) {
    spec->sigs.push_back(py::reinterpret_borrow<py::object>(sig));
  }
  for (auto r : t[5]) {
    py::tuple rt = py::reinterpret_borrow<py::tuple>(r);
    spec->returns.emplace_back(rt[0].cast<int>(), rt[1].cast<std::vector<int>>());
  }
  spec->random = t[6].cast<bool>();
  spec->donating = t[7];
  for (auto p : t[8]) {
    spec->donated.push_back(p.cast<int>());
  }
  spec->checks = t[9];
  return spec;
}

// The Python dispatcher, outside dynamo's frame hook once dynamo is loaded:
// a compiled function that graph-breaks runs its eager ops with the hook
// set, and dynamo must not compile our kernels.
py::object& python_slow_path() {
  State* s = state();
  if (!s->slow_path_outside_dynamo) {
    PyObject* modules = PyImport_GetModuleDict();
    if (PyDict_GetItemString(modules, "torch._dynamo") == nullptr) {
      return s->slow_path;
    }
    s->slow_path_outside_dynamo =
        py::module::import("torchtpu.runtime.outside_dynamo").attr("wrap")(s->slow_path);
  }
  return s->slow_path_outside_dynamo;
}

// Runs the op through the Python dispatcher; caches the kernel it used.
void slow_path(
    const c10::OperatorHandle& op,
    torch::jit::Stack* stack,
    Call* call) {
  const auto& schema = op.schema();
  const auto& arguments = schema.arguments();
  const size_t n = arguments.size();
  py::tuple result;
  try {
    std::vector<py::object> positional;
    py::dict kwargs;
    auto args_begin = stack->end() - static_cast<std::ptrdiff_t>(n);
    for (size_t i = 0; i < n; ++i) {
      py::object value = to_python(*(args_begin + i));
      if (arguments[i].kwarg_only()) {
        kwargs[py::str(arguments[i].name())] = value;
      } else {
        positional.push_back(value);
      }
    }
    py::tuple args(positional.size());
    for (size_t i = 0; i < positional.size(); ++i) {
      args[i] = positional[i];
    }
    result = python_slow_path()(schema.name(), schema.overload_name(), args, kwargs);
  } catch (py::error_already_set& e) {
    e.restore();
    rethrow_python();
  }
  torch::jit::drop(*stack, n);
  const auto& returns = schema.returns();
  py::object out = result[0];
  if (returns.size() == 1) {
    if (out.is_none() && returns[0].type()->kind() == c10::TypeKind::TensorType) {
      stack->emplace_back(at::Tensor());
    } else {
      stack->push_back(torch::jit::toIValue(out, returns[0].type()));
    }
  } else if (returns.size() > 1) {
    py::tuple outs = py::reinterpret_borrow<py::tuple>(out);
    for (size_t i = 0; i < returns.size(); ++i) {
      py::object item = outs[i];
      if (item.is_none() && returns[i].type()->kind() == c10::TypeKind::TensorType) {
        stack->emplace_back(at::Tensor());
      } else {
        stack->push_back(torch::jit::toIValue(item, returns[i].type()));
      }
    }
  }
  if (call != nullptr && call->fast && !result[1].is_none()) {
    state()->cache.emplace(std::move(call->key), spec_from_python(result[1]));
  }
}

// ------------------------------------------------------------- the hit

// A new tpu tensor (its storage from our allocator, no box yet).
at::Tensor new_tpu_tensor(c10::IntArrayRef sizes, c10::IntArrayRef strides, c10::ScalarType dtype) {
  return at::detail::empty_strided_generic(
      sizes, strides, get_allocator_base(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), dtype);
}

// boxes[address] = (value, sig)
void bind_box(uintptr_t address, PyObject* value, PyObject* sig) {
  PyObject* entry = PyTuple_Pack(2, value, sig);
  PyObject* py_address = PyLong_FromUnsignedLongLong(address);
  const int rc = PyDict_SetItem(state()->boxes, py_address, entry);
  Py_DECREF(py_address);
  Py_DECREF(entry);
  if (rc != 0) {
    rethrow_python();
  }
}

void run_spec(
    const Spec& spec,
    const c10::OperatorHandle& op,
    torch::jit::Stack* stack,
    Call& call) {
  const c10::Device device(kTpu, static_cast<c10::DeviceIndex>(call.device));
  std::vector<at::Tensor> fresh;
  fresh.reserve(spec.fresh.size());
  {
    c10::DeviceGuard guard(device);
    for (const auto& f : spec.fresh) {
      fresh.push_back(new_tpu_tensor(f.sizes, f.strides, f.dtype));
    }
  }
  const size_t n_in = spec.input_slots.size();
  const size_t n = n_in + call.dyn.size() + (spec.random ? 4 : 0);
  py::tuple args(n);
  size_t k = 0;
  for (int slot : spec.input_slots) {
    PyObject* array = call.arrays[slot];
    Py_INCREF(array);
    PyTuple_SET_ITEM(args.ptr(), k++, array);
  }
  for (auto& d : call.dyn) {
    PyTuple_SET_ITEM(args.ptr(), k++, d.release().ptr());
  }
  if (spec.random) {
    const at::Generator& gen = call.generator.has_value()
        ? *call.generator
        : default_generator(device.index());
    auto* impl = at::check_generator<TpuGeneratorImpl>(gen);
    std::pair<uint64_t, uint64_t> so;
    {
      std::lock_guard<std::mutex> lock(impl->mutex_);
      so = impl->next(1);
    }
    const uint64_t parts[4] = {
        so.first >> 32, so.first & 0xFFFFFFFFULL, so.second >> 32, so.second & 0xFFFFFFFFULL};
    for (uint64_t part : parts) {
      PyTuple_SET_ITEM(args.ptr(), k++, PyLong_FromUnsignedLongLong(part));
    }
  }
  // Donate the old buffers of in-place writes when the box is their only
  // holder (nobody else can observe them being consumed).
  PyObject* fn = spec.jitted.ptr();
  if (!spec.donated.empty()) {
    bool sole = true;
    for (int position : spec.donated) {
      sole = sole && Py_REFCNT(call.arrays[spec.input_slots[position]]) == 2;
    }
    if (sole) {
      fn = spec.donating.ptr();
    }
  }
  PyObject* results = PyObject_Call(fn, args.ptr(), nullptr);
  if (results == nullptr) {
    rethrow_python();
  }
  py::object owned = py::reinterpret_steal<py::object>(results);
  for (size_t i = 0; i < spec.writes.size(); ++i) {
    PyObject* value = PyTuple_GET_ITEM(results, i);
    if (value == Py_None) {
      continue;
    }
    const auto& [kind, ref] = spec.writes[i];
    const uintptr_t address = kind == kWriteFresh
        ? reinterpret_cast<uintptr_t>(fresh[ref].storage().data())
        : call.addresses[ref];
    if (address == 0) {
      continue;
    }
    bind_box(address, value, spec.sigs[i].ptr());
  }
  if (!spec.checks.is_none()) {
    PyObject* code = PyTuple_GET_ITEM(results, spec.writes.size());
    PyObject* item = PyTuple_Pack(2, code, spec.checks.ptr());
    const int rc = PyList_Append(state()->pending_checks, item);
    Py_DECREF(item);
    if (rc != 0) {
      rethrow_python();
    }
    if (PyList_GET_SIZE(state()->pending_checks) >= 128) {
      try {
        state()->fold_checks();
      } catch (py::error_already_set& e) {
        e.restore();
        rethrow_python();
      }
    }
  }
  if (state()->launch_blocking && !state()->launch_blocking.is_none()) {
    try {
      state()->launch_blocking(owned);
    } catch (py::error_already_set& e) {
      e.restore();
      rethrow_python();
    }
  }
  // Returns: fresh outputs, or the (mutated) arguments themselves.
  const size_t n_args = op.schema().arguments().size();
  std::vector<c10::IValue> args_saved(
      stack->end() - static_cast<std::ptrdiff_t>(n_args), stack->end());
  torch::jit::drop(*stack, n_args);
  for (const auto& [kind, refs] : spec.returns) {
    switch (kind) {
      case kReturnFresh:
        stack->emplace_back(fresh[refs[0]]);
        break;
      case kReturnArg:
        stack->push_back(args_saved[refs[0]]);
        break;
      case kReturnFreshList: {
        c10::List<at::Tensor> list;
        for (int r : refs) {
          list.push_back(fresh[r]);
        }
        stack->emplace_back(std::move(list));
        break;
      }
      case kReturnInt:
        stack->emplace_back(static_cast<int64_t>(refs[0]));
        break;
      default:
        stack->emplace_back(at::Tensor());
    }
  }
}

void run_kernel(const c10::OperatorHandle& op, const OpInfo& info, torch::jit::Stack* stack);

void tpu_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  py::gil_scoped_acquire gil;
  State* s = state();
  TORCH_CHECK(s->boxes != nullptr, "torchtpu: runtime not initialised (import torchtpu)");
  drain_boxes();
  const OpInfo& info = op_info(op);
  if (info.foreach_written_lists.empty()) {
    run_kernel(op, info, stack);
    return;
  }
  const size_t n = op.schema().arguments().size();
  std::vector<at::Tensor> bumped;
  for (size_t i : info.foreach_written_lists) {
    for (const at::Tensor& t : (stack->end() - static_cast<std::ptrdiff_t>(n - i))->toTensorVector()) {
      bumped.push_back(t);
    }
  }
  run_kernel(op, info, stack);
  for (const at::Tensor& t : bumped) {  // (after the kernel: a call that raises bumps nothing)
    t.unsafeGetTensorImpl()->bump_version();
  }
}

void run_kernel(const c10::OperatorHandle& op, const OpInfo& info, torch::jit::Stack* stack) {
  State* s = state();
  if (!info.fast) {
    slow_path(op, stack, nullptr);
    return;
  }
  const size_t n = op.schema().arguments().size();
  Call call;
  call.key.reserve(64);
  call.key.push_back(reinterpret_cast<int64_t>(&op.schema()));
  auto args = stack->end() - static_cast<std::ptrdiff_t>(n);
  for (size_t i = 0; i < n && call.fast; ++i) {
    add_argument(call, info, i, *(args + i));
  }
  if (call.device < 0) {
    call.device = call.requested >= 0 ? call.requested : current_device();
  }
  call.key.push_back(-1000 - call.device);  // kernels are compiled for one device
  call.key.push_back(static_cast<int64_t>(at::globalContext().float32MatmulPrecision()));
  call.key.push_back(static_cast<int64_t>(c10::typeMetaToScalarType(c10::get_default_dtype())));
  if (call.fast) {
    auto it = s->cache.find(call.key);
    if (it != s->cache.end()) {
      ++s->hits;
      const std::shared_ptr<Spec> spec = it->second;
      run_spec(*spec, op, stack, call);
      return;
    }
    ++s->misses;
  }
  slow_path(op, stack, &call);
}

std::vector<std::unique_ptr<torch::Library>>& libraries() {
  static auto* libs = new std::vector<std::unique_ptr<torch::Library>>();
  return *libs;
}

}  // namespace

// Called before every op (C++ and Python paths): cheap when nothing happened.
void drain_boxes() {
  if (has_storage_events()) {
    drain_boxes_impl();
  }
}

void init_fastpath(
    py::object boxes,
    py::object move_box,
    py::object op_info_fn,
    py::object slow_path_fn,
    py::object pending_checks,
    py::object fold_checks) {
  State* s = state();
  s->boxes = boxes.release().ptr();
  s->pending_checks = pending_checks.release().ptr();
  s->fold_checks = std::move(fold_checks);
  s->move_box = std::move(move_box);
  s->op_info = std::move(op_info_fn);
  s->slow_path = std::move(slow_path_fn);
  auto lib = std::make_unique<torch::Library>(
      torch::Library::IMPL, "_", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  lib->fallback(torch::CppFunction::makeFromBoxedFunction<&tpu_kernel>());
  libraries().push_back(std::move(lib));
}

void register_kernels(const std::vector<std::string>& names) {
  auto lib = std::make_unique<torch::Library>(
      torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  for (const auto& name : names) {
    lib->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&tpu_kernel>());
  }
  libraries().push_back(std::move(lib));
}

void set_dynamic_scalar(const std::string& name, const std::string& overload, int position) {
  const auto handle = c10::Dispatcher::singleton().findSchema({name, overload});
  TORCH_CHECK(handle.has_value(), "torchtpu: unknown op ", name, ".", overload);
  State* s = state();
  auto it = s->ops.find(&handle->schema());
  if (it != s->ops.end()) {
    it->second->dynamic.at(static_cast<size_t>(position)) = true;
  }
}

void set_static_offsets(const std::string& name, const std::string& overload) {
  const auto handle = c10::Dispatcher::singleton().findSchema({name, overload});
  TORCH_CHECK(handle.has_value(), "torchtpu: unknown op ", name, ".", overload);
  op_info(*handle);  // (made now if C++ has not seen the op: its later keys must agree)
  state()->ops.at(&handle->schema())->trace_offsets = false;
}

void set_launch_blocking(py::object wait) {
  state()->launch_blocking = std::move(wait);
}

// A CPU scalar tensor's value as a Python number: exact for every dtype
// (a float32's value is a double; bool, integers and complex their own kind).
static py::object cpu_scalar_value(const at::Tensor& t) {
  const c10::Scalar value = t.item();
  if (value.isBoolean()) {
    return py::bool_(value.toBool());
  }
  if (value.isComplex()) {
    const auto z = value.toComplexDouble();
    return py::reinterpret_steal<py::object>(PyComplex_FromDoubles(z.real(), z.imag()));
  }
  if (value.isFloatingPoint()) {
    return py::float_(value.toDouble());
  }
  if (t.scalar_type() == at::kUInt64) {
    return py::int_(value.to<uint64_t>());
  }
  return py::int_(value.toLong());
}

// The signature of a compiled graph's call whose arguments are tpu tensors
// on one device and CPU scalars, built as the eager key is (the same facts
// per tensor: geometry, dtype, storage slot, box signature): (key bytes, box
// entry per slot, address per slot, device, traced inputs), or None for
// anything else (a number, a CPU tensor with dims, two devices), which the
// Python path keys.  A CPU scalar (an optimizer's step count) is keyed by
// dtype, its value returned among the traced inputs as a Python number (the
// executable's ScalarPacking gives it its dtype back).
py::object graph_call_key(const py::tuple& args, const py::object& traced_positions) {
  State* s = state();
  TORCH_CHECK(s->boxes != nullptr, "torchtpu: runtime not initialised (import torchtpu)");
  drain_boxes();
  Call call;
  call.key.reserve(16 * args.size());
  const bool any_traced = !traced_positions.is_none();
  for (size_t i = 0; i < args.size(); ++i) {
    const py::handle arg = PyTuple_GET_ITEM(args.ptr(), static_cast<Py_ssize_t>(i));
    if (!THPVariable_Check(arg.ptr())) {
      return py::none();
    }
    const auto& t = THPVariable_Unpack(arg.ptr());
    if (t.defined() && t.device().is_cpu() && t.dim() == 0) {
      call.key.push_back(kTagCpuScalar);
      call.key.push_back(static_cast<int64_t>(t.scalar_type()));
      call.key.push_back(t.unsafeGetTensorImpl()->is_wrapped_number() ? 1 : 0);
      call.dyn.push_back(cpu_scalar_value(t));
      continue;
    }
    if (!t.defined() || t.device().type() != c10::DeviceType::PrivateUse1) {
      return py::none();
    }
    const bool trace = any_traced && PySequence_Contains(traced_positions.ptr(), py::int_(i).ptr()) == 1;
    add_tpu_tensor(call, t, trace);
    if (!call.fast) {
      return py::none();
    }
  }
  if (call.device < 0) {
    return py::none();
  }
  py::list entries(call.addresses.size());
  py::list addresses(call.addresses.size());
  for (size_t slot = 0; slot < call.addresses.size(); ++slot) {
    const auto address = call.addresses[slot];
    py::object py_address = py::reinterpret_steal<py::object>(PyLong_FromUnsignedLongLong(address));
    PyObject* entry = address != 0 ? PyDict_GetItem(s->boxes, py_address.ptr()) : nullptr;
    entries[slot] = entry != nullptr ? py::reinterpret_borrow<py::object>(entry) : py::none();
    addresses[slot] = std::move(py_address);
  }
  py::bytes key(reinterpret_cast<const char*>(call.key.data()), call.key.size() * sizeof(int64_t));
  py::list dyn(call.dyn.size());
  for (size_t k = 0; k < call.dyn.size(); ++k) {
    dyn[k] = std::move(call.dyn[k]);
  }
  return py::make_tuple(std::move(key), std::move(entries), std::move(addresses), call.device, std::move(dyn));
}

// A compiled graph's fresh outputs: one new tpu tensor per (sizes,
// strides, dtype) spec, its storage boxed with results[k] (signature
// sigs[k]) -- what run_spec does for an eager kernel's outputs.
py::list bind_fresh(const py::list& specs, int device_index, const py::tuple& results, const py::list& sigs) {
  const c10::Device device(kTpu, static_cast<c10::DeviceIndex>(device_index));
  c10::DeviceGuard guard(device);
  py::list out(specs.size());
  for (size_t k = 0; k < specs.size(); ++k) {
    const auto spec = specs[k].cast<py::tuple>();
    const auto sizes = spec[0].cast<std::vector<int64_t>>();
    const auto strides = spec[1].cast<std::vector<int64_t>>();
    PyObject* dtype = spec[2].ptr();
    TORCH_CHECK(THPDtype_Check(dtype), "torchtpu: a fresh output's spec needs a torch.dtype");
    at::Tensor t = new_tpu_tensor(sizes, strides, reinterpret_cast<THPDtype*>(dtype)->scalar_type);
    const auto address = reinterpret_cast<uintptr_t>(t.storage().data());
    PyObject* value = PyTuple_GET_ITEM(results.ptr(), k);
    if (address != 0 && value != Py_None) {
      bind_box(address, value, sigs[k].ptr());
    }
    out[k] = py::reinterpret_steal<py::object>(THPVariable_Wrap(std::move(t)));
  }
  return out;
}

std::pair<int64_t, int64_t> fastpath_stats() {
  return {state()->hits, state()->misses};
}

void clear_fastpath_cache() {
  state()->cache.clear();
}

// Drops the cached specs that run any of `executables` (kernels the
// Python kernel cache evicted: ops/kernel_cache.py).
void forget_kernels(const py::list& executables) {
  std::unordered_set<PyObject*> gone;
  for (const auto& executable : executables) {
    gone.insert(executable.ptr());
  }
  auto& cache = state()->cache;
  for (auto it = cache.begin(); it != cache.end();) {
    if (gone.count(it->second->jitted.ptr()) != 0) {
      it = cache.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace torchtpu
