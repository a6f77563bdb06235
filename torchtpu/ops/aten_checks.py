"""Checks ATen's CPU/CUDA kernels make that PyTorch's meta kernels skip (or
get wrong), so a bad call on tpu raises what it raises on CPU.  They run when
a kernel is built: the cache key fixes everything they look at (shapes,
strides, offsets, which arguments share a storage), so a cache hit needs no
check."""

import warnings

import torch

from .dtype_names import c10_name, cpp_name, kernel_not_implemented, unsafe_cast_error
from .written_checks import check_written_dtypes


def before_meta(sch, values, padded=False):
    """Checks whose absence makes the meta kernel itself fail differently.
    `padded`: the values' sizes are a dynamic graph's padded buckets, which
    need not fit each other as the true sizes do (dynamo's tracing checked
    those): the checks relating sizes are skipped."""
    check = _BEFORE_META.get(sch.op._schema.name)
    if check is not None and not (padded and check in _RELATING_SIZES):
        check(sch, values)
    pinned = sch.name_to_index.get("pin_memory")
    if pinned is not None and values[pinned]:
        # (a factory making a tpu tensor: CUDA's empty raises this for zeros, ones, full, ... alike)
        raise RuntimeError("Only dense CPU tensors can be pinned")
    if torch.Tag.pointwise in sch.op.tags:
        _broadcast_operands(sch, values, padded)
        check_written_dtypes(sch, values)


def _broadcast_operands(sch, values, padded=False):
    """TensorIterator's shape inference over the inputs (and in-place self),
    with ATen's message for sizes that do not broadcast -- the reference
    kernels word it "Attempting to broadcast a dimension ..."."""
    operands = [v for v, argument in zip(values, sch.op._schema.arguments)
                if isinstance(v, torch.Tensor) and not argument.is_out]
    if sch.op._schema.name in ("aten::masked_fill", "aten::masked_fill_"):
        operands.reverse()  # (ATen expands the mask against self)
    shape = None
    for t in operands:
        shape = tuple(t.shape) if shape is None else _infer_size(shape, tuple(t.shape))
    if shape is not None and sch.op._schema.name not in _RESHAPES_SELF and not padded:
        _written_fits(sch, values, shape)


def _written_fits(sch, values, shape):
    # ATen's message for a broadcast past `self` of an in-place op (the meta
    # kernels of add_, mul_, ... print torch.Size; see in_place_meta)
    for p in _read_and_written(sch, values):
        if tuple(values[p].shape) != shape:
            raise output_broadcast_error(values[p].shape, shape)


def _infer_size(a, b):
    ndim = max(len(a), len(b))
    result = []
    for i in reversed(range(ndim)):  # (ATen reports the last mismatching dim)
        size_a = a[len(a) - ndim + i] if len(a) - ndim + i >= 0 else 1
        size_b = b[len(b) - ndim + i] if len(b) - ndim + i >= 0 else 1
        if size_a != size_b and size_a != 1 and size_b != 1:
            raise RuntimeError(f"The size of tensor a ({size_a}) must match the size of tensor b ({size_b}) at "
                               f"non-singleton dimension {i}")
        result.append(size_b if size_a == 1 else size_a)
    return tuple(reversed(result))


def output_broadcast_error(shape, broadcast):
    """ATen's error for a written tensor the operands broadcast past."""
    return RuntimeError(f"output with shape {list(shape)} doesn't match the broadcast shape {list(broadcast)}")


def in_place_meta(sch, values, meta_values, call_meta):
    """Run the meta kernel; an in-place op whose other operand broadcasts
    past `self` raises ATen's error.  PyTorch's reference meta kernels of
    many in-place ops (clamp_min_, remainder_, pow_, bitwise ops, shifts,
    comparisons, ...) are out= wrappers that resize `self` with a deprecation
    warning, so on tpu `v.clamp_min_(ones(3, 1))` grew the view v and wrote
    past it into its base."""
    written = [] if sch.op._schema.name in _RESHAPES_SELF else _read_and_written(sch, values)
    if not written:
        return call_meta()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="An output with one or more elements was resized")
        result = call_meta()
    for p in written:
        real, meta = values[p], meta_values[p]
        if tuple(meta.shape) != tuple(real.shape):
            raise output_broadcast_error(real.shape, meta.shape)
    return result


def _read_and_written(sch, values):
    """Written tensors that are also read: `self` of an in-place op, and an
    out= tensor passed as an input too (`mul_out(x, x, y)`, which ATen's own
    composites such as ldexp_ call) -- TensorIterator never resizes those."""
    found = []
    for p in sch.mutated:
        real = values[p]
        if not isinstance(real, torch.Tensor):
            continue
        if not sch.op._schema.arguments[p].is_out or any(
            v is real for q, v in enumerate(values) if q != p and q not in sch.mutated
        ):
            found.append(p)
    return found


_SHIFTS = {"aten::__lshift__", "aten::__rshift__", "aten::bitwise_left_shift", "aten::bitwise_right_shift"}

# in-place ops whose purpose is to change self's shape
_RESHAPES_SELF = {
    "aten::resize_", "aten::resize_as_", "aten::set_", "aten::as_strided_", "aten::t_", "aten::transpose_",
    "aten::squeeze_", "aten::unsqueeze_", "aten::swapdims_", "aten::swapaxes_", "aten::_resize_output_",
}  # fmt: skip


def meta_arguments(sch, meta_values):
    """The arguments as the meta kernel needs them: PyTorch's reference for
    linalg_vector_norm checks a negative dim against the shape unwrapped
    (an inf norm over dim -1 of a (0, 3) tensor raised "dimension -1 is
    empty"); the dims wrapped mean the same."""
    if sch.op._schema.name == "aten::linalg_vector_norm":
        t, dim = meta_values[0], meta_values[sch.names.index("dim")]
        if isinstance(dim, (list, tuple)) and t.dim() > 0:
            meta_values = list(meta_values)
            meta_values[sch.names.index("dim")] = [d % t.dim() for d in dim]
    if sch.op._schema.name in _SHIFTS and not sch.mutated:
        # ATen promotes a bool operand next to an integer one (`bool_mask << 1`
        # is int64); PyTorch's meta kernel rejects any bool operand
        tensors = [v for v in meta_values[:2] if isinstance(v, torch.Tensor)]
        if any(t.dtype == torch.bool for t in tensors) and not all(
            (v.dtype == torch.bool) if isinstance(v, torch.Tensor) else isinstance(v, bool) for v in meta_values[:2]
        ):
            common = torch.result_type(*meta_values[:2])
            meta_values = [v.to(common) if isinstance(v, torch.Tensor) and v.dtype == torch.bool else v
                           for v in meta_values]
    if sch.op._schema.name == "aten::nansum" and meta_values[1] is not None and len(meta_values[1]) == 0:
        # ATen's kernel reduces every dim for dim=() (as sum does); its meta
        # kernel reduced none (nansum and nanmean raised; found by a fuzzer)
        meta_values = list(meta_values)
        meta_values[1] = None
    return meta_values


def _cat_zero_dim(sch, values):
    # the meta kernel indexes the missing dim (IndexError); ATen names it
    for i, t in enumerate(values[0]):
        if isinstance(t, torch.Tensor) and t.dim() == 0:
            raise RuntimeError(f"zero-dimensional tensor (at position {i}) cannot be concatenated")


def _matrix_product_shapes(sch, values):
    """ATen's shape messages for the matrix products (the reference kernels
    word them "a and b must have same reduction dim"); then _same_dtype."""
    name = sch.op._schema.name[len("aten::"):].rstrip("_")
    first = 1 if name in ("addmm", "addmv", "baddbmm", "addbmm", "addr") else 0
    a, b = values[first], values[first + 1]
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if name in ("mm", "addmm") and a.dim() == 2 and b.dim() == 2 and a.shape[1] != b.shape[0]:
            raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({a.shape[0]}x{a.shape[1]} and "
                               f"{b.shape[0]}x{b.shape[1]})")
        if (name in ("bmm", "baddbmm") and a.dim() == 3 and b.dim() == 3
                and (b.shape[0], b.shape[1]) != (a.shape[0], a.shape[2])):
            raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: [{a.shape[0]}, "
                               f"{a.shape[2]}] but got: [{b.shape[0]}, {b.shape[1]}].")
        if name == "mv" and a.dim() == 2 and b.dim() == 1 and a.shape[1] != b.shape[0]:
            raise RuntimeError(f"size mismatch, got input ({a.shape[0]}), mat ({a.shape[0]}x{a.shape[1]}), "
                               f"vec ({b.shape[0]})")
        if name == "dot" and a.dim() == 1 and b.dim() == 1 and a.numel() != b.numel():
            raise RuntimeError(f"inconsistent tensor size, expected tensor [{a.numel()}] and src [{b.numel()}] to "
                               f"have the same number of elements, but got {a.numel()} and {b.numel()} elements "
                               f"respectively")
    _same_dtype(sch, values)


def _same_dtype(sch, values):
    # matrix products do not promote (meta kernels of mm/mv/addmm accept mixes)
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    if len({t.dtype for t in tensors}) > 1:
        names = ", ".join(c10_name(t.dtype) for t in tensors)
        raise RuntimeError(f"{sch.op._schema.name[6:]}: expected all tensors to have the same dtype, but got {names}")


def _alpha_check(sch, values):
    # ATen's alpha_check for add/sub (their meta kernels skip it)
    if "alpha" not in sch.names:
        return
    alpha = values[sch.names.index("alpha")]
    dtype = torch.result_type(values[0], values[1])
    if isinstance(alpha, bool) and dtype != torch.bool:
        raise RuntimeError("Boolean alpha only supported for Boolean results.")
    if not (dtype.is_floating_point or dtype.is_complex) and isinstance(alpha, float):
        raise RuntimeError("For integral input tensors, argument alpha must not be a floating point number.")


def _floating_kernel(kernel_name):
    # ATen's kernel has no integer version; the meta (a _refs function)
    # raises a ValueError about the Scalar instead
    def check(sch, values):
        t = values[0]
        if isinstance(t, torch.Tensor) and not (t.dtype.is_floating_point or t.dtype.is_complex):
            raise kernel_not_implemented(kernel_name, t.dtype)

    return check


def _real_floating_kernel(kernel_name):
    # a binary kernel of real floating types only, run in the promoted dtype:
    # nextafter(long, float) computes in float; (long, long) and complex raise
    def check(sch, values):
        dtype = torch.result_type(*values[:2])
        if not dtype.is_floating_point:
            raise kernel_not_implemented(kernel_name, dtype)

    return check


def _same_source_dtype(message):
    """index_add_/index_copy_/put_: ATen requires source's dtype to be self's
    (the meta kernels cast silently); `message` formats (self, source)."""

    def check(sch, values):
        self, source = values[0], values[sch.names.index("source")]
        if isinstance(source, torch.Tensor) and source.dtype != self.dtype:
            raise RuntimeError(message.format(c10_name(self.dtype), c10_name(source.dtype)))

    return check


_index_add_source_dtype = _same_source_dtype("index_add_(): self ({}) and source ({}) must have the same scalar type")
_put_source_dtype = _same_source_dtype(
    "put_(): self and source expected to have the same dtype, but got self.dtype = {} and source.dtype = {}")


def _put_checks(sch, values):
    # (the meta kernel broadcasts a source of another size)
    _put_source_dtype(sch, values)
    index, source = values[sch.names.index("index")], values[sch.names.index("source")]
    if index.numel() != source.numel():
        raise IndexError(f"put_(): Expected source and index to have the same number of elements, but got "
                         f"source.numel() = {source.numel()}, index.numel() = {index.numel()}")


def _kernel_lacking(kernel_name, lacks):
    # ATen's kernel has no version for the result dtypes `lacks` picks (the
    # meta kernel accepts them, or raises a RuntimeError of its own); a
    # tensor written in place or as out= refuses the result's dtype first
    def check(sch, values):
        dtype = torch.result_type(*values[:2])
        if not lacks(dtype):
            return
        for p in sch.mutated:
            if isinstance(values[p], torch.Tensor) and not torch.can_cast(dtype, values[p].dtype):
                raise unsafe_cast_error(dtype, values[p].dtype)
        raise kernel_not_implemented(kernel_name, dtype)

    return check


def _real_kernel(kernel_name):
    return _kernel_lacking(kernel_name, lambda dtype: dtype.is_complex)


def _integer_kernel(kernel_name):
    # (shifts)
    return _kernel_lacking(kernel_name, lambda dtype: dtype.is_floating_point or dtype.is_complex or dtype == torch.bool)


def _no_bool_addcmul(sch, values):
    # ATen's addcmul has no bool kernel (three bool tensors: a bool result)
    if all(isinstance(values[sch.names.index(n)], torch.Tensor) and values[sch.names.index(n)].dtype == torch.bool
           for n in ("self", "tensor1", "tensor2")):
        raise kernel_not_implemented("addcmul_cpu_out", torch.bool)


def _no_negative_integer_power(sch, values):
    # ATen checks a Scalar exponent on the host (a traced one: the lowering's device-side check)
    self, exponent = values[0], values[1]
    if (isinstance(self, torch.Tensor) and type(exponent) is int and exponent < 0
            and not (self.dtype.is_floating_point or self.dtype.is_complex)):
        raise RuntimeError("Integers to negative integer powers are not allowed.")


def _dim_in_range(sch, values):
    """The `dim` argument wrapped as ATen wraps it (the meta kernels of these
    ops wrap it modulo the rank without checking)."""
    t, dim = values[0], values[sch.names.index("dim")]
    rank = max(t.dim(), 1)
    if not -rank <= dim < rank:
        name = sch.op._schema.name.split("::")[-1]
        if t.dim() == 0 and name in ("cummax", "cummin"):
            raise IndexError(f"{name}(): Expected reduction dim -1 or 0 for scalar but got {dim}")
        raise IndexError(f"Dimension out of range (expected to be in range of [{-rank}, {rank - 1}], but got {dim})")


def _is_empty_along(t, dim):
    """Whether `t` has no elements along `dim` (a 0-d tensor has one; a
    symbolic size is never 0: dynamo specializes 0 and 1)."""
    if t.dim() == 0 or not -t.dim() <= dim < t.dim():
        return False  # (an out-of-range dim is the meta kernel's error)
    size = t.shape[dim]
    return type(size) is int and size == 0


def _nonempty_reduction(sch, values):
    """Reductions without an identity (amax, argmax, kthvalue, aminmax) over
    no elements raise ATen's errors: the meta kernels raise others (JAX's
    "reducing over zero-size dimension") or none."""
    t, name = values[0], sch.op._schema.name.split("::")[-1].rstrip("_")
    if name in ("argmax", "argmin") and t.dtype == torch.bool:  # (ATen checks this before the size)
        raise RuntimeError(f"{name}(): does not support bool input")
    if name in ("amax", "amin"):
        dims = values[sch.names.index("dim")]
        if not dims and t.numel() == 0:
            raise RuntimeError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0. "
                               "Specify the reduction dim with the 'dim' argument.")
        empty = [d for d in dims if _is_empty_along(t, d)]
        if empty:  # (the dim as given)
            raise IndexError(f"{name}(): Expected reduction dim {empty[0]} to have non-zero size.")
        return
    dim = values[sch.names.index("dim")]
    if dim is None:
        if t.numel() == 0:
            if name == "aminmax":
                raise RuntimeError("aminmax(): cannot compute aminmax over an empty dimension as the operation "
                                   "has no identity.")
            raise IndexError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0.")
    elif _is_empty_along(t, dim):
        label = "aminmax:" if name == "aminmax" else f"{name}():"
        raise IndexError(f"{label} Expected reduction dim {dim % t.dim()} to have non-zero size.")


def _topk_k_in_range(sch, values):
    t, k, dim = values[0], values[1], values[2]
    size = t.shape[dim] if t.dim() and -t.dim() <= dim < t.dim() else 1
    if type(k) is int and type(size) is int and not 0 <= k <= size:
        raise RuntimeError("selected index k out of range")


def _no_complex(error):
    """ATen has no complex kernel for these (the meta kernels accept one:
    relu of -3-1j gave 0j): `error(dtype)` is raised for a complex input."""
    def check(sch, values):
        arguments = sch.op._schema.arguments
        for v, argument in zip(values, arguments):
            # (a complex out= of real inputs is fine: the result is cast into it)
            if isinstance(v, torch.Tensor) and v.is_complex() and not argument.is_out:
                raise error(v.dtype)

    return check


def _complex_kernel_missing(kernel_name):
    return _no_complex(lambda dtype: kernel_not_implemented(kernel_name, dtype))


def _complex_unsupported(message, error=NotImplementedError):
    return _no_complex(lambda dtype: error(message))


_no_complex_clamp = _complex_unsupported("clamp is not supported for complex types")


def _clamp_bounds(sch, values):
    name = sch.op._schema.name.rstrip("_")
    if name == "aten::clamp" and values[1] is None and values[2] is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    _no_complex_clamp(sch, values)
    if name != "aten::relu":
        _clamp_scalar_bounds(name, values[0], values[1:3] if name == "aten::clamp" else values[1:2])


def _clamp_scalar_bounds(name, self, bounds):
    """ATen's rules for a clamp's Python-number bounds, which the meta
    kernels promote like tensors: a floating self converts them to its
    dtype (a complex one must have no imaginary part), other dtypes refuse
    complex ones, and bool has no kernel for bool bounds."""
    numbers = [b for b in bounds if b is not None and not isinstance(b, torch.Tensor)]
    if any(isinstance(b, complex) for b in numbers):
        if name != "aten::clamp" or not self.dtype.is_floating_point:
            raise NotImplementedError("clamp is not supported for complex types")
        if any(isinstance(b, complex) and b.imag != 0 for b in numbers):
            raise RuntimeError("value cannot be converted to type double without overflow")
    if numbers and self.dtype == torch.bool and all(isinstance(b, bool) for b in numbers):
        if name == "aten::clamp":
            name = "aten::clamp_min" if bounds[1] is None else "aten::clamp_max" if bounds[0] is None else name
        raise kernel_not_implemented(f"{name[len('aten::'):]}_scalar_cpu", self.dtype)


def _same_scalar_type(sch, values):
    # linalg_cross and cdist do not promote (the meta kernels do)
    a, b = values[0], values[1]
    if a.dtype != b.dtype:
        raise RuntimeError(f"expected scalar type {c10_name(a.dtype)} but found {c10_name(b.dtype)}")


def _index_select_index(sch, values):
    # ATen's index_select checks the index's rank, then its dtype (the
    # lowering's gather takes any integer or bool index)
    index = values[sch.names.index("index")]
    if index.dim() > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    if index.dtype not in (torch.int32, torch.int64):
        raise RuntimeError("index_select(): Expected dtype int32 or int64 for index")


def _index_add_checks(sch, values):
    """index_add_'s index checks come before its source dtype check
    (index_select's backward runs index_add_ too)."""
    index = values[sch.names.index("index")]
    if index.dim() > 1:
        raise IndexError(f"index_add_(): Index is supposed to be a vector, but got dim: {index.dim()} with type: "
                         f"{c10_name(index.dtype)} and size: {list(index.shape)}")
    if index.dtype not in (torch.int32, torch.int64):
        raise RuntimeError(f"index_add_(): Expected dtype int32/int64 for index but got: {c10_name(index.dtype)}")
    _index_add_source_dtype(sch, values)


def _int64_index(sch, values):
    if values[sch.names.index("index")].dtype != torch.int64:
        raise IndexError("index_fill_(): Expected dtype int64 for index.")


def _no_integer_addcdiv(sch, values):
    t1, t2 = values[sch.names.index("tensor1")], values[sch.names.index("tensor2")]
    if not (t1.dtype.is_floating_point or t1.dtype.is_complex or t2.dtype.is_floating_point or t2.dtype.is_complex):
        raise RuntimeError(
            "Integer division with addcdiv is no longer supported, and in a future  release addcdiv will perform a "
            "true division of tensor1 and tensor2. The historic addcdiv behavior can be implemented as (input + "
            "value * torch.trunc(tensor1 / tensor2)).to(input.dtype) for integer inputs and as (input + value * "
            "tensor1 / tensor2) for float inputs. The future addcdiv behavior is just the latter implementation: "
            "(input + value * tensor1 / tensor2), for all dtypes.")


def _index_shapes_broadcast(sch, values):
    # ATen's IndexError (the meta kernel raises a RuntimeError of its own);
    # bool masks count by their number of true elements, unknown here
    indices = [t for t in values[sch.names.index("indices")] if t is not None]
    if any(t.dtype in (torch.bool, torch.uint8) for t in indices):
        return
    try:
        torch.broadcast_shapes(*(t.shape for t in indices))
    except RuntimeError:
        shapes = ", ".join(str(list(t.shape)) for t in indices)
        raise IndexError(
            f"shape mismatch: indexing tensors could not be broadcast together with shapes {shapes}") from None


def _boolean_mask(sch, values):
    # ATen's first check in masked_fill_ (the lowering would take any dtype)
    mask = values[sch.names.index("mask")]
    if mask.dtype != torch.bool:
        name = cpp_name(mask.dtype)
        raise RuntimeError(f"masked_fill_ only supports boolean masks, but got mask with dtype {name}")


def _degrees_of_freedom(sch, values):
    # ATen's warning when the correction leaves no degree of freedom (the
    # result is NaN or inf): `torch.var(one_element)`
    t, dim, correction = values[0], values[sch.names.index("dim")], values[sch.names.index("correction")]
    if not isinstance(correction, (int, float, type(None))):
        return
    dims = range(t.dim()) if dim is None or len(dim) == 0 else [d % max(t.dim(), 1) for d in dim]
    n = 1
    for d in dims:
        n *= t.shape[d] if t.dim() else 1
    if type(n) is int and n - (1 if correction is None else correction) <= 0:
        name = sch.op._schema.name.split("::")[-1]
        warnings.warn(f"{name}(): degrees of freedom is <= 0. Correction should be strictly less than the reduction "
                      "factor (input numel divided by output numel).", UserWarning, stacklevel=2)


def _trace_dtype(sch, values):
    # ATen's trace kernel has no bool or wide unsigned version
    if values[0].dtype in (torch.bool, torch.uint16, torch.uint32, torch.uint64):
        raise kernel_not_implemented("trace", values[0].dtype)


def _multinomial_rank(sch, values):
    # ATen checks the rank first; the meta kernel words it differently
    if not 0 < values[0].dim() <= 2:
        raise RuntimeError("prob_dist must be 1 or 2 dim")


def _nll_checks(sch, values):
    """ATen's checks of nll_loss_forward, in its order (the meta kernel, a
    decomposition, asserts some with AssertionError, others fail in gather
    or not at all)."""
    self, target, weight = values[0], values[1], values[sch.names.index("weight")]
    if not 0 < self.dim() <= 2:
        raise RuntimeError("input tensor should be 1D or 2D")
    if target.dim() > 1:
        raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
    _nll_target_dtype(target)
    if self.dim() == 1 and target.dim() == 1 and target.shape[0] != 1:
        raise ValueError(f"For 1D input, 1D target must have size 1, but got target size: {target.shape[0]}")
    if self.dim() == 2 and target.dim() == 0:
        raise IndexError("Dimension specified as 0 but tensor has no dimensions")  # (target.size(0))
    if self.dim() == 2 and self.shape[0] != target.shape[0]:
        raise RuntimeError(f"size mismatch (got input: {list(self.shape)}, target: {list(target.shape)})")
    classes = self.shape[-1]
    if weight is not None and (weight.dim() != 1 or weight.numel() != classes):
        raise RuntimeError(f"weight tensor should be defined either for all {classes} classes or no classes but "
                           f"got weight tensor of shape: {list(weight.shape)}")
    _nll_kernel_dtypes("nll_loss_out_frame", self, weight)


def _nll2d_checks(sch, values):
    # nll_loss2d_forward's, in ATen's order (a 2-d weight of C elements is fine)
    self, target, weight = values[0], values[1], values[sch.names.index("weight")]
    if self.dim() != 4:
        raise RuntimeError(f"only batches of spatial inputs supported (4D tensors), but got input of dimension: "
                           f"{self.dim()}")
    if target.dim() != 3:
        raise RuntimeError(f"only batches of spatial targets supported (3D tensors) but got targets of dimension: "
                           f"{target.dim()}")
    _nll_target_dtype(target)
    if (self.shape[0], self.shape[2], self.shape[3]) != tuple(target.shape):
        # (sic: ATen's message has no closing parenthesis)
        raise RuntimeError(f"size mismatch (got input: {list(self.shape)} , target: {list(target.shape)}")
    if weight is not None and weight.numel() != self.shape[1]:
        raise RuntimeError("weight tensor should be defined either for all or no classes")
    _nll_kernel_dtypes("nll_loss2d_forward_out_frame", self, weight)
    if target.dtype != torch.int64:  # (the 2-d kernel reads a uint8 target as int64)
        raise RuntimeError(f"expected scalar type Long but found {c10_name(target.dtype)}")


def _nll_backward_sizes(sch, values):
    # ATen's backward compares the sizes even for one sample's (1,) target,
    # which its forward takes
    self, target = values[1], values[2]
    if self.dim() == 1 and target.dim() == 1 and target.shape[0] != self.shape[0]:
        raise RuntimeError(f"size mismatch (got input: {list(self.shape)}, target: {list(target.shape)})")


def _nll_target_dtype(target):
    if target.dtype not in (torch.int64, torch.uint8):
        raise RuntimeError(f"expected target dtype to be Long or Byte, but got {c10_name(target.dtype)}")


def _nll_kernel_dtypes(kernel_name, self, weight):
    # ATen's kernels: floating inputs only, a weight of the input's dtype
    if not self.dtype.is_floating_point:
        raise kernel_not_implemented(kernel_name, self.dtype)
    if weight is not None and weight.dtype != self.dtype:
        raise RuntimeError(f"expected scalar type {c10_name(self.dtype)} but found {c10_name(weight.dtype)}")


def _attention_mask(sch, values):
    """ATen's math path adds the mask to the (..., L, S) scores in place, so
    a mask must broadcast to them (JAX raised a ValueError); a mask of fewer
    than 2 dims fails ATen's size(-2) first, and a mask that does not fit
    sends a causal call down the math path, which refuses the pair."""
    query, key, mask = values[0], values[1], values[sch.names.index("attn_bias")]
    if mask is None:
        return
    if mask.dim() == 0:
        raise IndexError("Dimension specified as -2 but tensor has no dimensions")
    if mask.dim() == 1:
        raise IndexError("Dimension out of range (expected to be in range of [-1, 0], but got -2)")
    scores = tuple(query.shape[:-1]) + (key.shape[-2],)
    try:
        shape = _infer_size(scores, tuple(mask.shape))
        if shape != scores:
            raise output_broadcast_error(scores, shape)
    except RuntimeError:
        if values[sch.names.index("is_causal")]:
            raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be set when "
                               "is_causal=True") from None
        raise


def _upsample_sizes(sch, values):
    """ATen's upsample_{1,2,3}d_common_check: the meta kernels fail on an
    empty size otherwise (nearest: a TypeError; linear: ZeroDivisionError)."""
    self, output_size = values[0], values[1]
    if output_size is None:
        return  # (the .vec overloads: scale factors)
    input_size = tuple(self.shape[-len(output_size):])
    if all(n > 0 for n in input_size + tuple(output_size)):
        return
    names = "DHW"[-len(output_size):]

    def sizes(ns):
        return ", ".join(f"{name}: {n}" for name, n in zip(names, ns))

    joint = " and output" if len(output_size) == 1 else " output"  # (1d's message says "and")
    raise RuntimeError(f"Input and output sizes should be greater than 0, but got input ({sizes(input_size)}){joint} "
                       f"({sizes(output_size)})")


def _nearest_upsample_checks(sch, values):
    """Nearest upsampling has no complex kernel in ATen (named after the
    kernel CPU reaches: 2d runs its channels-last one)."""
    _upsample_sizes(sch, values)
    self = values[0]
    if self.is_complex():
        kernel = "upsample_nearest2d_channels_last" if self.dim() == 4 else "compute_indices_weights_nearest"
        raise kernel_not_implemented(kernel, self.dtype)


def _rounding_division_kernels(sch, values):
    # ATen has no complex or bool floor/trunc division kernel (the meta
    # kernels raise their own error, or accept it)
    if sch.op._schema.name.startswith("aten::floor_divide"):
        mode = "floor"
    else:
        mode = values[sch.names.index("rounding_mode")] if "rounding_mode" in sch.names else None
    dtype = torch.result_type(values[0], values[1]) if mode is not None else None
    if dtype is not None and (dtype.is_complex or dtype == torch.bool):
        raise kernel_not_implemented(f"div_{mode}_cpu", dtype)


_UPSAMPLES = ("upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d", "_upsample_nearest_exact1d",
              "_upsample_nearest_exact2d", "_upsample_nearest_exact3d", "upsample_linear1d", "upsample_bilinear2d",
              "upsample_trilinear3d", "upsample_bicubic2d", "_upsample_bilinear2d_aa", "_upsample_bicubic2d_aa")


def _grid_sampler_checks(sch, values):
    """ATen's check_grid_sampler_common and the 2d/3d kernels' checks (the
    meta kernel asserts, unpacks or computes)."""
    x, grid = values[0], values[1]
    sizes = f"input with sizes {list(x.shape)} and grid with sizes {list(grid.shape)}"
    if x.dim() > 0 and grid.dim() > 0 and x.shape[0] != grid.shape[0]:
        raise RuntimeError(f"grid_sampler(): expected grid and input to have same batch size, but got {sizes}")
    if grid.dim() > 0 and grid.shape[-1] != x.dim() - 2:
        raise RuntimeError(f"grid_sampler(): expected grid to have size {x.dim() - 2} in last dimension, but got "
                           f"grid with sizes {list(grid.shape)}")
    for i in range(2, x.dim()):
        if x.shape[i] == 0:
            raise RuntimeError(f"grid_sampler(): expected input to have non-empty spatial dimensions, but input has "
                               f"sizes {list(x.shape)} with dimension {i} being empty")
    rank = 4 if sch.op._schema.name == "aten::grid_sampler_2d" else 5
    if x.dim() != rank or grid.dim() != rank:
        raise RuntimeError(f"grid_sampler(): expected {rank}D input and grid with same number of dimensions, but got "
                           f"{sizes}")
    if x.dtype != grid.dtype:
        raise RuntimeError(f"expected scalar type {c10_name(x.dtype)} but found {c10_name(grid.dtype)}")


def _pad_kernel(kernel_name):
    # ATen's reflection/replication pad kernels have no bool version (the
    # meta kernels take bool, or name the dtype as torch.bool)
    def check(sch, values):
        if values[0].dtype == torch.bool:
            raise kernel_not_implemented(kernel_name, torch.bool)

    return check


def _frexp_outs(sch, values):
    # ATen's frexp_out checks (the meta kernel casts into any outs)
    if not sch.mutated or not values[0].dtype.is_floating_point:
        return  # (no outs; or the meta kernel says the dtype is wrong, as ATen does)
    self, mantissa, exponent = values[0], values[1], values[2]
    if mantissa.dtype != self.dtype:
        raise RuntimeError(f"torch.frexp() expects mantissa to have dtype {cpp_name(self.dtype)} but got "
                           f"{cpp_name(mantissa.dtype)}")
    if exponent.dtype != torch.int32:
        raise RuntimeError(f"torch.frexp() expects exponent to have int dtype but got {cpp_name(exponent.dtype)}")


# before_meta checks comparing sizes across arguments (skipped when padded)
_RELATING_SIZES = {_attention_mask, _index_shapes_broadcast}


def _overloads(*names):
    """Each op name with its in-place form."""
    return [n for name in names for n in (f"aten::{name}", f"aten::{name}_")]


_BEFORE_META = {
    "aten::cat": _cat_zero_dim,
    **dict.fromkeys(_overloads("index_add"), _index_add_checks),
    "aten::index_select": _index_select_index,
    **dict.fromkeys(_overloads("index_copy"), _same_source_dtype(
        "index_copy_(): self and source expected to have the same dtype, but got (self) {} and (source) {}")),
    **dict.fromkeys(_overloads("put"), _put_checks),
    **{f"aten::{name}": _complex_unsupported(f"{name} not implemented for complex tensors.", RuntimeError)
       for name in ("maximum", "minimum", "fmax", "fmin")},
    **dict.fromkeys(_overloads("atan2"), _real_kernel("atan2_cpu")),
    **dict.fromkeys(_overloads("xlogy"), _real_kernel("xlogy_cpu")),
    "aten::special_xlog1py": _real_kernel("xlog1py_cpu"),
    **dict.fromkeys(_overloads("addcmul"), _no_bool_addcmul),
    **dict.fromkeys(_overloads("pow"), _no_negative_integer_power),
    **dict.fromkeys(("aten::leaky_relu", "aten::leaky_relu_"), _floating_kernel("leaky_relu_cpu")),
    **dict.fromkeys(("aten::add", "aten::add_", "aten::sub", "aten::sub_"), _alpha_check),
    **dict.fromkeys(_overloads("clamp", "clamp_min", "clamp_max", "relu"), _clamp_bounds),
    **dict.fromkeys(_overloads("round"), _complex_kernel_missing("round_vml_cpu")),
    **dict.fromkeys(_overloads("heaviside"), _complex_unsupported(
        "heaviside is not yet implemented for complex tensors.", RuntimeError)),
    **dict.fromkeys(_overloads("hypot"), _complex_kernel_missing("hypot_cpu")),
    **dict.fromkeys(("aten::_softmax", "aten::_log_softmax", "aten::sort", "aten::cummax", "aten::cummin"),
                    _dim_in_range),
    **dict.fromkeys(("aten::amax", "aten::amin", "aten::argmax", "aten::argmin", "aten::kthvalue", "aten::aminmax"),
                    _nonempty_reduction),
    "aten::topk": _topk_k_in_range,
    "aten::_scaled_dot_product_fused_attention_overrideable": _attention_mask,
    "aten::multinomial": _multinomial_rank,
    **{f"aten::{name}": _nearest_upsample_checks if "nearest" in name else _upsample_sizes for name in _UPSAMPLES},
    **dict.fromkeys(_overloads("floor_divide") + _overloads("div"), _rounding_division_kernels),
    **dict.fromkeys(("aten::__lshift__", "aten::__ilshift__", *_overloads("bitwise_left_shift")),
                    _integer_kernel("lshift_cpu")),
    **dict.fromkeys(("aten::__rshift__", "aten::__irshift__", *_overloads("bitwise_right_shift")),
                    _integer_kernel("rshift_cpu")),
    **dict.fromkeys(("aten::grid_sampler_2d", "aten::grid_sampler_3d"), _grid_sampler_checks),
    **{f"aten::{kind}_pad{n}d": _pad_kernel(f"{kind}_pad{n}d") for kind in ("reflection", "replication")
       for n in (1, 2, 3)},
    "aten::frexp": _frexp_outs,
    "aten::nll_loss_forward": _nll_checks,
    "aten::nll_loss2d_forward": _nll2d_checks,
    "aten::nll_loss_backward": _nll_backward_sizes,
    "aten::trace": _trace_dtype,
    **dict.fromkeys(("aten::var", "aten::std", "aten::var_mean", "aten::std_mean"), _degrees_of_freedom),
    **dict.fromkeys(("aten::index", "aten::index_put", "aten::index_put_", "aten::_index_put_impl",
                     "aten::_index_put_impl_"), _index_shapes_broadcast),
    **dict.fromkeys(("aten::masked_fill", "aten::masked_fill_"), _boolean_mask),
    **dict.fromkeys(("aten::linalg_cross", "aten::_cdist_forward", "aten::_euclidean_dist"), _same_scalar_type),
    **dict.fromkeys(_overloads("index_fill"), _int64_index),
    **dict.fromkeys(_overloads("addcdiv"), _no_integer_addcdiv),
    **dict.fromkeys(_overloads("frac"), _floating_kernel("frac_cpu")),
    **dict.fromkeys(_overloads("nextafter"), _real_floating_kernel("nextafter_cpu")),
    "aten::signbit": _complex_unsupported("signbit is not implemented for complex tensors."),
    # (randn and randn_like of an integer dtype run as empty + normal_)
    "aten::normal_": _floating_kernel("normal_kernel_cpu"),
    **dict.fromkeys(
        ("aten::mm", "aten::addmm", "aten::addmm_", "aten::mv", "aten::addmv", "aten::addmv_", "aten::addbmm",
         "aten::addbmm_", "aten::baddbmm", "aten::baddbmm_", "aten::addr", "aten::addr_", "aten::bmm", "aten::dot"),
        _matrix_product_shapes,
    ),
}  # fmt: skip
