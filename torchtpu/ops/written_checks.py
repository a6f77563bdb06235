"""Checks on what an op writes that ATen's CPU/CUDA kernels make and
PyTorch's meta kernels skip: overlap (a written tensor with repeated
addresses, or sharing memory with an input) and the out= dtype (a safe cast
for pointwise ops, the exact result dtype where the kernel requires it).
Like aten_checks.py's, they run when a kernel is built."""

import torch

from .dtype_names import c10_name, cpp_name, unsafe_cast_error
from .meta_fixes import meta_kernel
from .registry import _functional_candidates


def _copies_onto_itself(sch, values):
    """ATen's copy_ returns at once when source and destination are the same
    elements (same storage, offset, strides, sizes, dtype): no overlap check,
    even for an expanded tensor."""
    if sch.op._schema.name != "aten::copy_":
        return False
    dst, src = values[0], values[1]
    return (
        isinstance(src, torch.Tensor) and src.device == dst.device and src.dtype == dst.dtype
        and src.untyped_storage().data_ptr() == dst.untyped_storage().data_ptr()
        and (src.storage_offset(), src.stride(), src.shape) == (dst.storage_offset(), dst.stride(), dst.shape)
        and (src.is_conj(), src.is_neg()) == (dst.is_conj(), dst.is_neg())
    )


def after_meta(sch, values, meta_values):
    if not _copies_onto_itself(sch, values):
        _check_internal_overlap(sch, values)
        _check_overlap(sch, values)
    _check_safe_cast_to_output(sch, meta_values)
    _check_exact_out_dtype(sch, meta_values)


# Ops whose CPU/CUDA kernels accept a written tensor with repeated addresses.
_OVERLAP_OK = {"aten::fill_", "aten::zero_", "aten::index_put_", "aten::_index_put_impl_", "aten::masked_fill_", "aten::index_fill_"}


def _check_internal_overlap(sch, values):
    """ATen's assert_no_internal_overlap for written tensors (meta kernels skip
    it): an expanded (stride-0) dim in a tensor an op writes is an error."""
    if sch.op._schema.name in _OVERLAP_OK:
        return
    for position in sch.mutated:
        value = values[position]
        for t in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(t, torch.Tensor) and t.numel() and any(s == 0 and n > 1 for n, s in zip(t.shape, t.stride())):
                raise RuntimeError(
                    "unsupported operation: more than one element of the written-to tensor refers to a "
                    "single memory location. Please clone() the tensor before performing the operation."
                )


# Non-pointwise kernels with ATen's overlap asserts between out= (or self,
# written in place) and inputs: any shared element (cat, index_select,
# gather, index_put_'s values and indices), or a partial overlap only (the
# scans, as TensorIterator ops)
_OUT_NO_OVERLAP = {
    "aten::cat", "aten::stack", "aten::index_select", "aten::gather", "aten::take", "aten::index_put_",
    "aten::_index_put_impl_", "aten::index_add", "aten::index_add_", "aten::index_copy", "aten::index_copy_",
    "aten::scatter", "aten::scatter_", "aten::scatter_add", "aten::scatter_add_", "aten::put", "aten::put_",
}  # fmt: skip
_OUT_NO_PARTIAL_OVERLAP = {
    "aten::cumsum", "aten::cumprod", "aten::logcumsumexp", "aten::copy_",
    # TensorIterator kernels without ATen's pointwise tag
    "aten::where", "aten::floor_divide", "aten::floor_divide_", "aten::gelu", "aten::gelu_", "aten::hardtanh",
    "aten::hardtanh_", "aten::leaky_relu", "aten::leaky_relu_", "aten::elu", "aten::elu_", "aten::softplus",
    "aten::mish", "aten::mish_", "aten::hardswish", "aten::hardswish_", "aten::hardsigmoid", "aten::hardsigmoid_",
    "aten::hardshrink", "aten::softshrink", "aten::gelu_backward", "aten::hardtanh_backward", "aten::elu_backward",
    "aten::softplus_backward", "aten::leaky_relu_backward", "aten::hardsigmoid_backward",
    "aten::hardswish_backward", "aten::hardshrink_backward", "aten::softshrink_backward",
}  # fmt: skip


def _check_overlap(sch, values):
    """ATen's assert_no_partial_overlap (TensorIterator ops: pointwise ops,
    copy_, the scans) or assert_no_overlap (cat, stack, the gathers and scatters)
    between what an op writes and what it reads, skipped by meta kernels:
    reading memory being written, other than the very elements written
    (same range, same strides) for the former, is an error on CPU/CUDA.
    Runs when a kernel is built: the key fixes storage sharing and geometry."""
    name = sch.op._schema.name
    if name in _OUT_NO_OVERLAP:
        bad = ("full", "partial")
    elif name in _OUT_NO_PARTIAL_OVERLAP or torch.Tag.pointwise in sch.op.tags:
        bad = ("partial",)
    else:
        return
    written = [values[p] for p in sch.mutated if isinstance(values[p], torch.Tensor)]
    read = [t for p, v in enumerate(values) if p not in sch.mutated
            for t in (v if isinstance(v, (list, tuple)) else (v,))
            if isinstance(t, torch.Tensor) and t.device.type == "tpu"]
    if any(_overlap_status(w, r) in bad for w in written for r in read):
        raise RuntimeError(
            "unsupported operation: some elements of the input tensor and the written-to tensor refer to "
            "a single memory location. Please clone() the tensor before performing the operation."
        )


def _overlap_status(a, b):
    """ATen's get_overlap_status for two tensors: "full", "partial", None (no
    overlap) or "unknown" (a layout with gaps or repeats: not checked)."""
    if a.numel() == 0 or b.numel() == 0:
        return None
    if not (non_overlapping_and_dense(a) and non_overlapping_and_dense(b)):
        return "unknown"
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return None
    a_begin, b_begin = a.data_ptr(), b.data_ptr()
    a_end, b_end = a_begin + a.numel() * a.element_size(), b_begin + b.numel() * b.element_size()
    if (a_begin, a_end) == (b_begin, b_end):
        return "full" if a.stride() == b.stride() else "partial"
    return "partial" if a_begin < b_end and b_begin < a_end else None


def non_overlapping_and_dense(t):
    expected = 1
    for stride, size in sorted((st, n) for n, st in zip(t.shape, t.stride()) if n != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def _check_safe_cast_to_output(sch, meta_values):
    """TensorIterator's enforce_safe_casting_to_output for pointwise ops:
    `int_tensor.mul_(0.5)` or `torch.sin(ints, out=ints)` must raise, where
    the meta kernels quietly write the int result.  The functional op's
    result dtype (run on meta tensors) must cast safely to each written
    tensor's dtype."""
    if torch.Tag.pointwise not in sch.op.tags or not sch.mutated:
        return
    results = functional_meta_result(sch, meta_values)
    written = [meta_values[p] for p in sch.mutated]
    for r, w in zip(results, written):
        if isinstance(r, torch.Tensor) and isinstance(w, torch.Tensor) and not torch.can_cast(r.dtype, w.dtype):
            raise unsafe_cast_error(r.dtype, w.dtype)


def check_written_dtypes(sch, values):
    """TensorIterator's dtype checks of what an op writes, after its shape
    checks: the meta kernels' out= wrappers refuse an unsafe cast first, in
    their own words ("Attempting to cast ...": nextafter_, clamp(out=))."""
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    if not sch.mutated or any(type(n) is not int for t in tensors for n in t.shape):
        return  # (symbolic sizes: a compiled graph, checked by dynamo's tracing)
    metas = _on_meta(values)
    _check_exact_out_dtype(sch, metas)  # (ops built with one dtype say so first)
    _check_safe_cast_to_output(sch, metas)


# Out= ops whose CPU/CUDA kernels require the out's dtype to be the result's
# (meta kernels cast silently), with ATen's message for each: {want}/{got}
# are ATen's dtype names (Float), {want_cpp}/{got_cpp} C++'s (float).
_COPIED_OUT = "Expected out tensor to have dtype {want_cpp}, but got {got_cpp} instead"  # autogenerated out=
_ITERATOR_OUT = "Found dtype {got} but expected {want}"  # TensorIterator ops built with one dtype
_SCAN_OUT = "expected scalar_type {want} but found {got}"
_MEDIAN_OUT = ("Expected tensor for 'values' to have the same type as tensor for argument #2 'self'; but type "
               "torch.{got}Tensor does not equal torch.{want}Tensor (while checking arguments for median)")
_EXACT_OUT_DTYPE = {
    **{f"aten::{name}": _COPIED_OUT for name in (
        "sort", "tril", "triu", "aminmax", "linalg_cross", "diag", "isin", "linalg_lu_solve", "_softmax",
        "_log_softmax", "avg_pool3d", "slice_scatter", "index_copy", "index_add", "renorm", "scatter_reduce",
        "_linalg_eigh", "linalg_solve", "_linalg_solve_ex")},
    **{f"aten::{name}": _ITERATOR_OUT for name in (
        "round", "neg", "bitwise_not", "conj_physical", "softshrink", "hardshrink", "gelu", "softplus")},
    # (an overload's own entry: the Tensor-bound clamps cast into any out=)
    **{f"aten::{name}.out": _ITERATOR_OUT for name in ("clamp", "clamp_min", "clamp_max")},
    **{f"aten::{name}": _SCAN_OUT for name in ("cummax", "cummin", "logcumsumexp")},
    **{f"aten::{name}": _MEDIAN_OUT for name in ("median", "nanmedian")},
    "aten::all": "all only supports bool tensor for result, got: {got}",
    "aten::any": "any only supports bool tensor for result, got: {got}",
    "aten::mode": "expected scalar type '{want}' but got '{got}' for values output",
    "aten::kthvalue": "output values must be of same type as input",
    **dict.fromkeys(("aten::amax", "aten::amin"), "Expected the dtype for input and out to match, but got {want} "
                    "for input's dtype and {got} for out's dtype."),
    "aten::index_select": "index_select(): self and result must have the same scalar type",
    "aten::nan_to_num": "nan_to_num: dtype of out: {got} should be same as input: {want}",
    "aten::take": "take(): self and out expected to have the same dtype, but got self.dtype = {want} and "
                  "out.dtype = {got}",
    "aten::heaviside": "heaviside is not yet implemented for tensors with different dtypes.",
    "aten::log_sigmoid_forward": "expected scalar type {want} but found {got}",
    "aten::linalg_solve_triangular": "expected scalar type {want} but found {got}",
    "aten::multinomial": "multinomial expects Long tensor out, got: {got}",
    **dict.fromkeys(("aten::searchsorted", "aten::bucketize"), "torch.searchsorted(): output tensor's dtype is wrong, "
                    "it can only be Int(int32) or Long(int64) depending on whether out_int32 flag is True, but we "
                    "got output tensor's dtype {got} and out_int32 flag is {out_int32}"),
    "aten::histc": "torch.histogram: input tensor and hist tensor should have the same dtype, but got input "
                   "{want_cpp} and hist {got_cpp}",
    "aten::ormqr": "torch.ormqr: Expected input and result to have the same dtype, but input has dtype{want} and "
                   "result has dtype {got}",
}  # fmt: skip


def _exact_out_message(sch):
    schema = sch.op._schema
    return _EXACT_OUT_DTYPE.get(f"{schema.name}.{schema.overload_name}", _EXACT_OUT_DTYPE.get(schema.name))


def _check_exact_out_dtype(sch, meta_values):
    message = _exact_out_message(sch)
    if message is None:
        return
    outs = [p for p in sch.mutated if sch.op._schema.arguments[p].is_out]
    if not outs:
        return
    for p, r in zip(outs, functional_meta_result(sch, meta_values)):
        w = meta_values[p]
        if isinstance(r, torch.Tensor) and isinstance(w, torch.Tensor) and r.dtype != w.dtype:
            out_int32 = r.dtype == torch.int32
            raise RuntimeError(message.format(want=c10_name(r.dtype), got=c10_name(w.dtype), out_int32=out_int32,
                                              want_cpp=cpp_name(r.dtype),
                                              got_cpp=cpp_name(w.dtype)))


def check_exact_out_dtype_unlowered(sch, values):
    """_check_exact_out_dtype for an op that runs decomposed (no kernel of
    ours, no meta arguments yet): the decompositions' out= wrappers cast."""
    if _exact_out_message(sch) is None or not any(sch.op._schema.arguments[p].is_out for p in sch.mutated):
        return
    _check_exact_out_dtype(sch, _on_meta(values))


def _on_meta(values):
    def on_meta(v):
        if isinstance(v, (list, tuple)):
            return type(v)(on_meta(x) for x in v)
        if isinstance(v, torch.Tensor):
            return torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="meta")
        return v

    return [on_meta(v) for v in values]


def functional_meta_result(sch, meta_values):
    """The outputs (a tuple) the functional variant of a mutating or out= op
    gives for these meta arguments; () if there is none or it refuses them."""
    functional = next(iter(_functional_candidates(sch.op)), None)
    if functional is None:
        return ()
    args, kwargs = sch.split(meta_values)
    for p in sch.mutated:
        if sch.op._schema.arguments[p].is_out:
            kwargs.pop(sch.names[p], None)
    try:
        result = meta_kernel(functional)(*args, **kwargs)  # (ours where PyTorch's describes ATen's wrong)
    except Exception:  # the functional overload may not take these arguments
        return ()
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)
