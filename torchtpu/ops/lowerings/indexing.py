"""Indexing and scatter families: index_select, gather, scatter, index, index_put, masked_fill, ...

Out-of-range indices.  XLA never faults: a gather clamps or fills, a scatter
drops.  PyTorch raises instead, so each lowering range-checks its indices
with a device-side check (`ctx.check_index`): the error, with CPU's type and
message, is raised at the next synchronization, as CUDA reports its
device-side asserts -- no eager op waits for it.  The out-of-range elements
themselves read as a fill value (NaN for floating types, the dtype's minimum
for integers) and out-of-range scatter elements are dropped, never clamped.
"""

import jax
import jax.numpy as jnp
import torch
from jax import lax

from .. import scalar_overflow
from ..registry import lower
from ..schema import schema_of
from ..special import special

aten = torch.ops.aten

# ------------------------------------------------------------ helpers


def wrap_dim(dim, ndim):
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})")
    return dim % n


def _fill_value(dtype):
    dtype = jnp.dtype(dtype)
    if jnp.issubdtype(dtype, jnp.inexact):
        return jnp.nan
    if dtype == jnp.bool_:
        return True
    return jnp.iinfo(dtype).min


def _no_negative(index, size):
    """Map negative indices out of range (for ops where torch rejects them)."""
    return jnp.where(index < 0, size, index)


def _as_1d(x):
    return x.reshape(1) if x.ndim == 0 else x


def _scatter_coords(index, dim):
    """Full coordinates for scatter/gather: iota everywhere but `dim`."""
    coords = []
    for d in range(index.ndim):
        if d == dim:
            coords.append(index)
        else:
            coords.append(lax.broadcasted_iota(jnp.int64, index.shape, d))
    return tuple(coords)


def _lowest(dtype):
    dtype = jnp.dtype(dtype)
    if dtype == jnp.bool_:
        return False
    if jnp.issubdtype(dtype, jnp.inexact):
        return -jnp.inf
    return jnp.iinfo(dtype).min


def _highest(dtype):
    dtype = jnp.dtype(dtype)
    if dtype == jnp.bool_:
        return True
    if jnp.issubdtype(dtype, jnp.inexact):
        return jnp.inf
    return jnp.iinfo(dtype).max


# -------------------------------------------------------- bounds checks


def _bounds_message(dim, size, prefix=""):
    return f"{prefix}index {{value}} is out of bounds for dimension {dim} with size {size}"


# Overloads taking a 0-dim `value` tensor, which may live on the CPU (as on
# CUDA).  ATen's meta functions reject a CPU tensor next to meta ones, so such
# a call runs as the Scalar overload with the host value (no device sync).
_SCALAR_TWINS = {
    aten.masked_fill.Tensor: aten.masked_fill.Scalar,
    aten.masked_fill_.Tensor: aten.masked_fill_.Scalar,
    aten.masked_fill.Tensor_out: aten.masked_fill.Scalar_out,
    aten.index_fill.int_Tensor: aten.index_fill.int_Scalar,
    aten.index_fill_.int_Tensor: aten.index_fill_.int_Scalar,
    aten.index_fill.int_Tensor_out: aten.index_fill.int_Scalar_out,
}
_VALUE_POSITION = {"masked_fill": 2, "index_fill": 3}


def run_lowered(op, values):
    """dispatch.run with the host-scalar rewrite above."""
    from .. import dispatch

    twin = _SCALAR_TWINS.get(op)
    if twin is not None:
        pos = _VALUE_POSITION[op._schema.name.split("::")[1].rstrip("_")]
        value = values[pos]
        if isinstance(value, torch.Tensor) and value.device != values[0].device:
            if value.dim() != 0:
                raise RuntimeError(
                    f"{op._schema.name.split('::')[1]} only supports a 0-dimensional value tensor, "
                    f"but got tensor with {value.dim()} dimension(s)."
                )
            values = list(values)
            values[pos] = value.item()
            op = twin
            if values[0].device.type != "tpu":  # (a CPU self: ATen's own kernel)
                return op(*values)
    return dispatch.run(op, values, {})


def has_host_tensor(args, kwargs=None):
    """Whether any tensor argument (or list element) lives on the CPU."""
    for v in list(args) + list((kwargs or {}).values()):
        if isinstance(v, torch.Tensor):
            if v.device.type == "cpu":
                return True
        elif isinstance(v, (list, tuple)):
            if any(isinstance(t, torch.Tensor) and t.device.type == "cpu" for t in v):
                return True
    return False


def plain_call(*args, **kwargs):
    """generic_when: every tensor on the device makes an ordinary kernel call
    (cacheable by the C++ path); host tensors go through `run_lowered`."""
    return not has_host_tensor(args, kwargs)


def _host_tensors_allowed(*ops):
    """Calls of these ops with host tensors (0-dim values, as CUDA allows)
    run through `run_lowered`; all others are plain kernel calls."""
    for op in ops:
        special(op, generic_when=plain_call)(
            lambda *args, _op=op, **kwargs: run_lowered(_op, schema_of(_op).normalize(args, kwargs))
        )


def _all_overloads(*packets):
    return [getattr(p, name) for p in packets for name in p.overloads()]


# ------------------------------------------------------- index_select


@lower(aten.index_select.default)
def index_select(ctx, self, dim, index):
    dim = wrap_dim(dim, self.ndim)
    x = _as_1d(self)
    ctx.check_index(index, x.shape[dim], "index out of range in self", IndexError, negative_ok=False)
    idx = _no_negative(index.reshape(-1), x.shape[dim])
    out = jnp.take(x, idx, axis=dim, mode="fill", fill_value=_fill_value(x.dtype))
    return out.reshape(ctx.out_shape)


# -------------------------------------------------------------- gather


@lower(aten.gather.default)
def gather(ctx, self, dim, index, sparse_grad=False):
    dim = wrap_dim(dim, self.ndim)
    x = _as_1d(self)
    idx = _as_1d(index)
    if idx.size == 0:
        return jnp.zeros(ctx.out_shape, self.dtype)
    _check_along(ctx, x, dim, idx)
    # Only the leading index.shape[d] entries of the other dims take part.
    x = x[tuple(slice(0, idx.shape[d]) if d != dim else slice(None) for d in range(x.ndim))]
    idx = _no_negative(idx, x.shape[dim])
    out = jnp.take_along_axis(x, idx, axis=dim, mode="fill", fill_value=_fill_value(x.dtype))
    return out.reshape(ctx.out_shape)


def _check_along(ctx, self, dim, index, error=RuntimeError, prefix="", negative_ok=False):
    """Range check of the indices of a gather/scatter-like op along `dim`."""
    dim = wrap_dim(dim, self.ndim)
    size = self.shape[dim] if self.ndim else 1
    ctx.check_index(index, size, _bounds_message(dim, size, prefix), error, negative_ok=negative_ok)


# ------------------------------------------------------------- scatter


# bool sums are logical or, products logical and (as ATen's scatter_add)
_BOOL_REDUCE = {"sum": "amax", "prod": "amin"}


def _scatter(self, dim, index, src, reduce=None, include_self=True):
    """Generic scatter(-reduce) of src[:index.shape] into self along dim.
    reduce: None (set), sum, prod, mean, amax, amin."""
    shape = self.shape
    x = _as_1d(self)
    dim = wrap_dim(dim, x.ndim)
    idx = _as_1d(index)
    if idx.size == 0:
        return self
    if jnp.ndim(src) == 0:
        vals = jnp.broadcast_to(jnp.asarray(src).astype(x.dtype), idx.shape)
    else:
        src = _as_1d(src)
        vals = src[tuple(slice(0, n) for n in idx.shape)].astype(x.dtype)
    idx = _no_negative(idx, x.shape[dim])
    coords = _scatter_coords(idx, dim)
    if x.dtype == jnp.bool_ and reduce in _BOOL_REDUCE:
        reduce = _BOOL_REDUCE[reduce]
    if reduce is None:
        return x.at[coords].set(vals, mode="drop").reshape(shape)
    if not include_self:
        touched = jnp.zeros(x.shape, jnp.bool_).at[coords].set(True, mode="drop")
        identity = {
            "sum": 0,
            "mean": 0,
            "prod": 1,
            "amax": _lowest(x.dtype),
            "amin": _highest(x.dtype),
        }[reduce]
        x = jnp.where(touched, jnp.asarray(identity).astype(x.dtype), x)
    at = x.at[coords]
    if reduce in ("sum", "mean"):
        out = at.add(vals, mode="drop")
    elif reduce == "prod":
        out = at.multiply(vals, mode="drop")
    elif reduce == "amax":
        out = at.max(vals, mode="drop")
    elif reduce == "amin":
        out = at.min(vals, mode="drop")
    else:
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce}")
    if reduce == "mean":
        count = jnp.zeros(x.shape, jnp.int64).at[coords].add(1, mode="drop")
        if include_self:
            count = count + 1
        count = jnp.maximum(count, 1)
        if jnp.issubdtype(x.dtype, jnp.inexact):
            out = (out / count.astype(out.dtype)).astype(x.dtype)
        else:
            out = jnp.floor_divide(out, count.astype(out.dtype))
    return out.reshape(shape)


_LEGACY_REDUCE = {"add": "sum", "multiply": "prod"}


def _legacy_reduce(reduce):
    if reduce not in _LEGACY_REDUCE:
        raise RuntimeError(f"reduce argument must be either add or multiply, got {reduce}")
    return _LEGACY_REDUCE[reduce]


@lower(aten.scatter.src)
def scatter_src(ctx, self, dim, index, src):
    _check_along(ctx, self, dim, index)
    return _scatter(self, dim, index, src)


@lower(aten.scatter.value)
def scatter_value(ctx, self, dim, index, value):
    _check_along(ctx, self, dim, index)
    return _scatter(self, dim, index, value)


@lower(aten.scatter.reduce)
def scatter_reduce_legacy(ctx, self, dim, index, src, reduce):
    _check_along(ctx, self, dim, index)
    return _scatter(self, dim, index, src, _legacy_reduce(reduce))


@lower(aten.scatter.value_reduce)
def scatter_value_reduce(ctx, self, dim, index, value, reduce):
    _check_along(ctx, self, dim, index)
    return _scatter(self, dim, index, value, _legacy_reduce(reduce))


@lower(aten.scatter_add.default)
def scatter_add(ctx, self, dim, index, src):
    _check_along(ctx, self, dim, index)
    return _scatter(self, dim, index, src, "sum")


@lower(aten.scatter_reduce.two)
def scatter_reduce(ctx, self, dim, index, src, reduce, include_self=True):
    _check_along(ctx, self, dim, index)
    return _scatter(self, dim, index, src, reduce, include_self)




# ------------------------------------------- index_add / copy / fill / reduce


def _along(index, dim, source_shape):
    """index (1-D) broadcast to source's shape along dim (for _scatter)."""
    shape = [1] * len(source_shape)
    shape[dim] = -1
    return jnp.broadcast_to(index.reshape(shape), source_shape)


def _check_source_shape(self, dim, source):
    """The CPU kernels' check of index_add/index_reduce (meta kernels skip
    it): source has self's rank and sizes but along `dim` (a 0-dim tensor
    matches only a 0-dim one)."""
    same = jnp.ndim(source) == self.ndim and all(
        a == b for d, (a, b) in enumerate(zip(self.shape, jnp.shape(source))) if d != dim)
    if not same:
        raise RuntimeError("source tensor shape must match self tensor shape, excluding the specified dimension. "
                           f"Got self.shape = {list(self.shape)} source.shape = {list(jnp.shape(source))}")


@lower(aten.index_add.default)
def index_add(ctx, self, dim, index, source, alpha=1):
    source = jnp.asarray(source).astype(self.dtype)
    if self.dtype == jnp.bool_:
        scaled = jnp.logical_and(source, jnp.asarray(alpha).astype(jnp.bool_))
    else:
        scaled = source * jnp.asarray(alpha).astype(self.dtype)
    dim = wrap_dim(dim, self.ndim)
    _check_source_shape(self, dim, source)
    x = _as_1d(self)
    _check_along(ctx, x, dim, index)
    index = index.reshape(-1)
    src = _as_1d(scaled)
    full = _along(index, dim, src.shape)
    if self.dtype == jnp.bool_:
        out = x.at[_scatter_coords(_no_negative(full, x.shape[dim]), dim)].max(src, mode="drop")
        return out.reshape(self.shape)
    return _scatter(x, dim, full, src, "sum").reshape(self.shape)


@lower(aten.index_copy.default)
def index_copy(ctx, self, dim, index, source):
    dim = wrap_dim(dim, self.ndim)
    x = _as_1d(self)
    _check_along(ctx, x, dim, index, IndexError, "index_copy_(): ")
    full = _along(index.reshape(-1), dim, _as_1d(source).shape)
    return _scatter(x, dim, full, _as_1d(source)).reshape(self.shape)


@lower(aten.index_fill.int_Scalar, aten.index_fill.int_Tensor)
def index_fill(ctx, self, dim, index, value):
    dim = wrap_dim(dim, self.ndim)
    x = _as_1d(self)
    _check_along(ctx, x, dim, index, IndexError, negative_ok=True)
    index = index.reshape(-1)
    size = x.shape[dim]
    index = jnp.where(index < 0, index + size, index)
    hit = jnp.zeros((size,), jnp.bool_).at[index].set(True, mode="drop")
    shape = [1] * x.ndim
    shape[dim] = size
    out = jnp.where(hit.reshape(shape), jnp.asarray(value).astype(x.dtype), x)
    return out.reshape(self.shape)


@lower(aten.index_reduce.default)
def index_reduce(ctx, self, dim, index, source, reduce, include_self=True):
    dim = wrap_dim(dim, self.ndim)
    _check_source_shape(self, dim, source)
    x = _as_1d(self)
    _check_along(ctx, x, dim, index, IndexError)
    full = _along(index.reshape(-1), dim, _as_1d(source).shape)
    return _scatter(x, dim, full, _as_1d(source), reduce, include_self).reshape(self.shape)


_host_tensors_allowed(*_all_overloads(aten.index_fill, aten.index_fill_))


# --------------------------------------------------------- take / put


@lower(aten.take.default)
def take(ctx, self, index):
    flat = self.reshape(-1)
    _check_flat(ctx, flat, index)
    idx = jnp.where(index < 0, index + flat.shape[0], index)
    return jnp.take(flat, idx, mode="fill", fill_value=_fill_value(flat.dtype)).reshape(index.shape)


@lower(aten.put.default)
def put(ctx, self, index, source, accumulate=False):
    flat = self.reshape(-1)
    _check_flat(ctx, flat, index)
    idx = index.reshape(-1)
    idx = jnp.where(idx < 0, idx + flat.shape[0], idx)
    vals = source.reshape(-1).astype(flat.dtype)
    at = flat.at[idx]
    out = _accumulate(at, vals) if accumulate else at.set(vals, mode="drop")
    return out.reshape(self.shape)


def _accumulate(at, values):
    """`at.add` -- for bool a logical or, as ATen's accumulating bool add."""
    return at.max(values, mode="drop") if values.dtype == jnp.bool_ else at.add(values, mode="drop")


def _check_flat(ctx, flat, index):
    n = flat.shape[0]
    message = f"out of range: tried to access index {{value}} on a tensor of {n} elements."
    ctx.check_index(index, n, message, IndexError)


# --------------------------------------------- advanced indexing (long)


def index_tuple(indices):
    return tuple(slice(None) if i is None else i for i in indices)


def _integer_indices(self, indices):
    """A boolean mask's result has a data-dependent shape: eager mode turns it
    into integer indices first (data_dependent.py); a compiled graph with one
    (a mask assignment's backward) runs op by op."""
    return not any(i is not None and i.dtype in (torch.bool, torch.uint8) for i in indices)


@lower(aten.index.Tensor, aten._unsafe_index.Tensor, accepts=_integer_indices)
def index(ctx, self, indices):
    """Advanced indexing with integer index tensors."""
    if ctx.op is not aten._unsafe_index.Tensor:
        check_advanced_indices(ctx, self, indices)
    x = self
    out = x.at[index_tuple(indices)].get(mode="fill", fill_value=_fill_value(x.dtype))
    return out.reshape(ctx.out_shape)


@lower(aten.index_put.default, aten._index_put_impl.default, aten._unsafe_index_put.default)
def index_put(ctx, self, indices, values, accumulate=False, unsafe=False):
    if any(i is not None and i.dtype in (jnp.bool_, jnp.uint8) for i in indices):
        return _masked_put(ctx, self, indices, values, accumulate)
    if ctx.op is not aten._unsafe_index_put.default:
        check_advanced_indices(ctx, self, indices)
    at = self.at[index_tuple(indices)]
    values = jnp.asarray(values).astype(self.dtype)
    _check_broadcasts(values.shape, jax.eval_shape(lambda x: x[index_tuple(indices)], self).shape)
    if accumulate:
        return _accumulate(at, values)
    return at.set(values, mode="drop")


def _check_broadcasts(value_shape, result_shape):
    """ATen's error for values that do not broadcast to the indexed elements
    (JAX would raise its own ValueError); leading 1s of the values are
    dropped first, as ATen does."""
    extra = max(len(value_shape) - len(result_shape), 0)
    trailing = tuple(value_shape[extra:])
    aligned = (1,) * (len(result_shape) - len(trailing)) + trailing
    if any(n != 1 for n in value_shape[:extra]) or any(v not in (1, r) for v, r in zip(aligned, result_shape)):
        raise RuntimeError(f"shape mismatch: value tensor of shape [{', '.join(map(str, value_shape))}] cannot be "
                           f"broadcast to indexing result of shape [{', '.join(map(str, result_shape))}]")


def _masked_put(ctx, self, indices, values, accumulate):
    """`x[mask] = v` inside a compiled graph (eager calls turned the mask
    into indices first, data_dependent.py): the selected elements, in order,
    take v's rows -- or all of v when it does not depend on how many the
    mask selects."""
    mask = indices[0]
    rest = tuple(self.shape[mask.ndim:])
    values = jnp.asarray(values).astype(self.dtype)
    if len(indices) != 1 or tuple(mask.shape) != tuple(self.shape[: mask.ndim]) or values.ndim > len(rest) + 1:
        raise NotImplementedError("torchtpu: this boolean mask indexing has a data-dependent shape")
    mask = mask.astype(jnp.bool_)
    if values.ndim == len(rest) + 1 and values.shape[0] != 1:
        # one row of v per selected element (the graph was traced for this count)
        count = jnp.sum(mask)
        shown = "".join(f", {n}" for n in rest)
        ctx.check(count == values.shape[0], f"shape mismatch: value tensor of shape {list(values.shape)} cannot be "
                  f"broadcast to indexing result of shape [{{value}}{shown}]", value=count)
        order = jnp.clip(jnp.cumsum(mask.reshape(-1)) - 1, 0, values.shape[0] - 1)
        values = jnp.broadcast_to(values, (values.shape[0],) + rest)[order].reshape(mask.shape + rest)
    elif values.ndim == len(rest) + 1:
        values = values.reshape(values.shape[1:])
    where = mask.reshape(mask.shape + (1,) * len(rest))
    if accumulate:
        added = jnp.where(where, values, jnp.zeros((), self.dtype))
        return jnp.maximum(self, added) if self.dtype == jnp.bool_ else self + added  # (_accumulate, scatter-free)
    return jnp.where(where, values, self)


def check_advanced_indices(ctx, self, indices):
    """Range checks of integer index tensors against the dims they index."""
    for d, idx in enumerate(indices):
        if idx is not None:
            size = self.shape[d] if d < self.ndim else 1
            if size == 0 and idx.size:  # (every index is out of range: ATen's own message, at the call)
                raise IndexError("index is out of bounds for dimension with size 0")
            ctx.check_index(idx, size, _bounds_message(d, size), IndexError)


# ------------------------------------------------------------ masks


@lower(aten.masked_fill.Scalar)
def masked_fill(ctx, self, mask, value):
    dtype = ctx.out_dtype
    return jnp.where(mask, jnp.asarray(value).astype(dtype), self.astype(dtype))


@lower(aten.masked_fill.Tensor)
def masked_fill_tensor(ctx, self, mask, value):
    """ATen reads a device value tensor as a Scalar (`item()`) and converts
    it with an overflow check, as for a Scalar value (scalar_overflow.py)."""
    result_dtype = ctx.out_meta[0].dtype
    if result_dtype in scalar_overflow.CPP_NAMES:
        scalar_overflow.device_check(ctx, value, result_dtype)
    return masked_fill(ctx, self, mask, value)


for _op in (aten.masked_fill.Tensor, aten.masked_fill_.Tensor, aten.masked_fill.Tensor_out):
    special(_op, generic_when=lambda *args, **kwargs: not has_host_tensor(args, kwargs) and _value_at_home(args[0], args[2]))(
        lambda *args, _op=_op, **kwargs: run_lowered(_op, schema_of(_op).normalize(args, kwargs))
    )


# ------------------------------------------ a 0-dim value on another device
#
# ATen takes a 0-dim value tensor on another device than self, CUDA included:
# fill_ and masked_fill_ read it with item() (index_put_ moves it to self's
# device: data_dependent.py).  Such a call reaches us when either side is on
# tpu (a CPU tensor filled from a tpu scalar, a value on tpu:1).


def _value_at_home(self, value):
    """Whether `value` is not a 0-dim tensor on another device than self."""
    return not (isinstance(value, torch.Tensor) and value.dim() == 0 and value.device != self.device)


for _op, _twin in ((aten.fill_.Tensor, aten.fill_.Scalar), (aten.fill.Tensor, aten.fill.Scalar)):
    special(_op, generic_when=lambda self, value: _value_at_home(self, value))(
        lambda self, value, _twin=_twin: _twin(self, value.item())  # (on self's device)
    )


@lower(aten.masked_scatter.default)
def masked_scatter(ctx, self, mask, source):
    """Positions where mask is set take source's elements in order."""
    shape = ctx.out_shape
    mask = jnp.broadcast_to(mask, shape).reshape(-1)
    x = jnp.broadcast_to(self, shape).reshape(-1)
    src = source.reshape(-1).astype(x.dtype)
    pos = jnp.cumsum(mask.astype(jnp.int64)) - 1
    # (a device-side check, as CUDA's: the count of set mask elements is a value)
    ctx.check(jnp.sum(mask, dtype=jnp.int64) <= src.shape[0], "Number of elements of source < number of ones in mask")
    if src.shape[0] == 0:
        picked = jnp.zeros_like(x)
    else:
        picked = jnp.take(src, jnp.clip(pos, 0, src.shape[0] - 1))
    return jnp.where(mask, picked, x).reshape(shape)
