"""Indexing and scatter families: index_select, gather, scatter, index, index_put, masked_fill, ...

Out-of-range indices.  XLA never faults: a gather clamps or fills, a scatter
drops.  PyTorch raises instead, so eager calls go through `special` handlers
that check the index range first (an IndexError/RuntimeError with CPU's
message) and then run the lowering.  The check costs one small reduction and
a device->host sync per call (index tensors that are on the host are checked
there for free); `set_index_checks(False)` or TORCHTPU_INDEX_CHECKS=0 skips
it.  Unchecked (and under torch.compile), an out-of-range gather yields the
fill value (NaN for floating types, the dtype's minimum for integers) and an
out-of-range scatter element is dropped: never a silently clamped value.
"""

import os

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

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

_checks_enabled = os.environ.get("TORCHTPU_INDEX_CHECKS", "1").strip().lower() not in ("0", "false", "off", "no")


def set_index_checks(enabled: bool) -> None:
    """Turn the eager index range checks (one device->host sync each) on or off."""
    global _checks_enabled
    enabled = bool(enabled)
    if enabled and not _checks_enabled:
        # Kernels cached by the C++ entry point while checks were off would
        # keep serving calls without them.
        from ... import _C

        _C._clear_fastpath_cache()
    _checks_enabled = enabled


def index_checks_enabled() -> bool:
    return _checks_enabled


@jax.jit
def _minmax_kernel(arrays):
    return jnp.stack([jnp.stack([jnp.min(a), jnp.max(a)]).astype(jnp.int64) for a in arrays])


def index_ranges(tensors):
    """[(min, max)] of each integer tensor (tpu or cpu; empty -> None), with
    at most one device->host sync for all of them together."""
    from ..transfer import materialize

    result = [None] * len(tensors)
    device_items = []
    for i, t in enumerate(tensors):
        if t is None or t.numel() == 0:
            continue
        if t.device.type == "tpu":
            device_items.append((i, materialize(t)))
        else:
            result[i] = (int(t.min()), int(t.max()))
    if device_items:
        values = np.asarray(_minmax_kernel([a for _, a in device_items]))
        for (i, _), (lo, hi) in zip(device_items, values):
            result[i] = (int(lo), int(hi))
    return result


def check_bounds(items):
    """items: [(index tensor, size, negatives allowed, make_error(value))]."""
    items = [it for it in items if it[0] is not None and it[0].numel() > 0]
    if not _checks_enabled:  # host index tensors are still checked: it is free
        items = [it for it in items if it[0].device.type == "cpu"]
    if not items:
        return
    ranges = index_ranges([it[0] for it in items])
    for (t, size, negative_ok, make_error), r in zip(items, ranges):
        if r is None:
            continue
        lo, hi = r
        low_limit = -size if negative_ok else 0
        if lo < low_limit:
            raise make_error(lo)
        if hi >= size:
            raise make_error(hi)


def _dim_error(dim, size, kind=IndexError, prefix=""):
    return lambda v: kind(f"{prefix}index {v} is out of bounds for dimension {dim} with size {size}")


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
        if isinstance(value, torch.Tensor) and value.device.type == "cpu":
            if value.dim() != 0:
                raise RuntimeError(
                    f"{op._schema.name.split('::')[1]} only supports a 0-dimensional value tensor, "
                    f"but got tensor with {value.dim()} dimension(s)."
                )
            values = list(values)
            values[pos] = value.item()
            op = twin
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


def unchecked_plain_call(*args, **kwargs):
    """generic_when for checked ops: with checks off and every tensor on the
    device, a call is an ordinary kernel call (cacheable by the C++ path)."""
    return not _checks_enabled and not has_host_tensor(args, kwargs)


def _checked(*ops):
    """Eager handler: validate indices with `spec(values)`, then run the lowering."""

    def deco(spec):
        def make(op):
            sch = schema_of(op)

            def handler(*args, **kwargs):
                values = sch.normalize(args, kwargs)
                check_bounds(spec(*values[: len(sch.lowering_positions)]))
                return run_lowered(op, values)

            return handler

        for op in ops:
            special(op, generic_when=unchecked_plain_call)(make(op))
        return spec

    return deco


def _size(t, dim):
    return t.shape[dim] if t.dim() > 0 else 1


def _all_overloads(*packets):
    return [getattr(p, name) for p in packets for name in p.overloads()]


# ------------------------------------------------------- index_select


@lower(aten.index_select.default)
def index_select(ctx, self, dim, index):
    dim = wrap_dim(dim, self.ndim)
    x = _as_1d(self)
    idx = _no_negative(index.reshape(-1), x.shape[dim])
    out = jnp.take(x, idx, axis=dim, mode="fill", fill_value=_fill_value(x.dtype))
    return out.reshape(ctx.out_shape)


@_checked(aten.index_select.default, aten.index_select.out)
def _index_select_spec(self, dim, index):
    dim = wrap_dim(dim, self.dim())
    return [(index, _size(self, dim), False, lambda v: IndexError("index out of range in self"))]


# -------------------------------------------------------------- gather


@lower(aten.gather.default)
def gather(ctx, self, dim, index, sparse_grad=False):
    dim = wrap_dim(dim, self.ndim)
    x = _as_1d(self)
    idx = _as_1d(index)
    if idx.size == 0:
        return jnp.zeros(ctx.out_shape, self.dtype)
    # Only the leading index.shape[d] entries of the other dims take part.
    x = x[tuple(slice(0, idx.shape[d]) if d != dim else slice(None) for d in range(x.ndim))]
    idx = _no_negative(idx, x.shape[dim])
    out = jnp.take_along_axis(x, idx, axis=dim, mode="fill", fill_value=_fill_value(x.dtype))
    return out.reshape(ctx.out_shape)


def _scatter_like_spec(self, dim, index, *rest):
    dim = wrap_dim(dim, self.dim())
    return [(index, _size(self, dim), False, _dim_error(dim, _size(self, dim), RuntimeError))]


_checked(aten.gather.default, aten.gather.out)(_scatter_like_spec)


# ------------------------------------------------------------- scatter


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
    return _scatter(self, dim, index, src)


@lower(aten.scatter.value)
def scatter_value(ctx, self, dim, index, value):
    return _scatter(self, dim, index, value)


@lower(aten.scatter.reduce)
def scatter_reduce_legacy(ctx, self, dim, index, src, reduce):
    return _scatter(self, dim, index, src, _legacy_reduce(reduce))


@lower(aten.scatter.value_reduce)
def scatter_value_reduce(ctx, self, dim, index, value, reduce):
    return _scatter(self, dim, index, value, _legacy_reduce(reduce))


@lower(aten.scatter_add.default)
def scatter_add(ctx, self, dim, index, src):
    return _scatter(self, dim, index, src, "sum")


@lower(aten.scatter_reduce.two)
def scatter_reduce(ctx, self, dim, index, src, reduce, include_self=True):
    return _scatter(self, dim, index, src, reduce, include_self)


_checked(*_all_overloads(aten.scatter, aten.scatter_, aten.scatter_add, aten.scatter_reduce))(_scatter_like_spec)
_checked(aten.scatter_add_.default, aten.scatter_reduce_.two)(_scatter_like_spec)


# ------------------------------------------- index_add / copy / fill / reduce


def _along(index, dim, source_shape):
    """index (1-D) broadcast to source's shape along dim (for _scatter)."""
    shape = [1] * len(source_shape)
    shape[dim] = -1
    return jnp.broadcast_to(index.reshape(shape), source_shape)


@lower(aten.index_add.default)
def index_add(ctx, self, dim, index, source, alpha=1):
    source = jnp.asarray(source).astype(self.dtype)
    if self.dtype == jnp.bool_:
        scaled = jnp.logical_and(source, jnp.asarray(alpha).astype(jnp.bool_))
    else:
        scaled = source * jnp.asarray(alpha).astype(self.dtype)
    dim = wrap_dim(dim, self.ndim)
    x = _as_1d(self)
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
    full = _along(index.reshape(-1), dim, _as_1d(source).shape)
    return _scatter(x, dim, full, _as_1d(source)).reshape(self.shape)


@lower(aten.index_fill.int_Scalar, aten.index_fill.int_Tensor)
def index_fill(ctx, self, dim, index, value):
    dim = wrap_dim(dim, self.ndim)
    x = _as_1d(self)
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
    x = _as_1d(self)
    full = _along(index.reshape(-1), dim, _as_1d(source).shape)
    return _scatter(x, dim, full, _as_1d(source), reduce, include_self).reshape(self.shape)


def _index_dim_spec(kind, prefix=""):
    def spec(self, dim, index, *rest):
        dim = wrap_dim(dim, self.dim())
        size = _size(self, dim)
        return [(index, size, False, _dim_error(dim, size, kind, prefix))]

    return spec


_checked(*_all_overloads(aten.index_add, aten.index_add_))(_index_dim_spec(RuntimeError))
_checked(*_all_overloads(aten.index_copy, aten.index_copy_))(_index_dim_spec(IndexError, "index_copy_(): "))
_checked(*_all_overloads(aten.index_reduce, aten.index_reduce_))(_index_dim_spec(IndexError))


@_checked(*_all_overloads(aten.index_fill, aten.index_fill_))
def _index_fill_spec(self, dim, index, value):
    dim = wrap_dim(dim, self.dim())
    size = _size(self, dim)
    return [(index, size, True, _dim_error(dim, size))]


# --------------------------------------------------------- take / put


@lower(aten.take.default)
def take(ctx, self, index):
    flat = self.reshape(-1)
    idx = jnp.where(index < 0, index + flat.shape[0], index)
    return jnp.take(flat, idx, mode="fill", fill_value=_fill_value(flat.dtype)).reshape(index.shape)


@lower(aten.put.default)
def put(ctx, self, index, source, accumulate=False):
    flat = self.reshape(-1)
    idx = index.reshape(-1)
    idx = jnp.where(idx < 0, idx + flat.shape[0], idx)
    vals = source.reshape(-1).astype(flat.dtype)
    at = flat.at[idx]
    out = at.add(vals, mode="drop") if accumulate else at.set(vals, mode="drop")
    return out.reshape(self.shape)


def _flat_spec(self, index, *rest):
    n = self.numel()
    return [(index, n, True, lambda v: IndexError(f"out of range: tried to access index {v} on a tensor of {n} elements."))]


_checked(*_all_overloads(aten.take, aten.put, aten.put_))(_flat_spec)


# --------------------------------------------- advanced indexing (long)


def index_tuple(indices):
    return tuple(slice(None) if i is None else i for i in indices)


@lower(aten.index.Tensor, aten._unsafe_index.Tensor)
def index(ctx, self, indices):
    """Advanced indexing with integer index tensors (boolean masks were turned
    into integer indices by the eager handler in data_dependent.py)."""
    for i in indices:
        if i is not None and i.dtype in (jnp.bool_, jnp.uint8):
            raise NotImplementedError("torchtpu: boolean mask indices have a data-dependent shape")
    x = self
    out = x.at[index_tuple(indices)].get(mode="fill", fill_value=_fill_value(x.dtype))
    return out.reshape(ctx.out_shape)


@lower(aten.index_put.default, aten._index_put_impl.default, aten._unsafe_index_put.default)
def index_put(ctx, self, indices, values, accumulate=False, unsafe=False):
    for i in indices:
        if i is not None and i.dtype in (jnp.bool_, jnp.uint8):
            raise NotImplementedError("torchtpu: boolean mask indices have a data-dependent shape")
    at = self.at[index_tuple(indices)]
    values = jnp.asarray(values).astype(self.dtype)
    if accumulate:
        return at.add(values, mode="drop")
    return at.set(values, mode="drop")


def advanced_index_spec(self, indices):
    """Range checks of integer index tensors against the dims they index."""
    items = []
    for d, idx in enumerate(indices):
        if idx is None:
            continue
        size = self.shape[d] if d < self.dim() else 1
        items.append((idx, size, True, _dim_error(d, size)))
    return items


# ------------------------------------------------------------ masks


@lower(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def masked_fill(ctx, self, mask, value):
    dtype = ctx.out_dtype
    return jnp.where(mask, jnp.asarray(value).astype(dtype), self.astype(dtype))


for _op in (aten.masked_fill.Tensor, aten.masked_fill_.Tensor, aten.masked_fill.Tensor_out):
    special(_op, generic_when=lambda *args, **kwargs: not has_host_tensor(args, kwargs))(
        lambda *args, _op=_op, **kwargs: run_lowered(_op, schema_of(_op).normalize(args, kwargs))
    )


@lower(aten.masked_scatter.default)
def masked_scatter(ctx, self, mask, source):
    """Positions where mask is set take source's elements in order."""
    shape = ctx.out_shape
    mask = jnp.broadcast_to(mask, shape).reshape(-1)
    x = jnp.broadcast_to(self, shape).reshape(-1)
    src = source.reshape(-1).astype(x.dtype)
    pos = jnp.cumsum(mask.astype(jnp.int64)) - 1
    if src.shape[0] == 0:
        picked = jnp.zeros_like(x)
    else:
        picked = jnp.take(src, jnp.clip(pos, 0, src.shape[0] - 1))
    return jnp.where(mask, picked, x).reshape(shape)
