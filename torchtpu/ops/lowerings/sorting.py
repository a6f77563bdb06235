"""Sorting, top-k and scans (cumsum, cumprod, ...).

Everything sorts with one stable primitive (`_sort_last`), so indices of
equal elements come out in a fixed, torch-compatible order: ascending sorts
keep equal elements in input order, descending sorts too (torch's stable
descending sort), and NaN is larger than every number (last ascending, first
descending).  Index arithmetic runs in int32 (native on TPU); the dispatcher
casts indices to int64 as ATen declares them.
"""

import jax.numpy as jnp
import torch
from jax import lax

from ..registry import lower
from .common import acc_dtype, astype
from .reductions import reject, require_nonempty

# Out variants with a CompositeExplicitAutograd kernel are named in the
# decorators so that the lowering, not that kernel, runs on tpu.

aten = torch.ops.aten





def _has_nan(dtype):
    return jnp.issubdtype(dtype, jnp.inexact)


def _isnan(x):
    return jnp.isnan(x) if _has_nan(x.dtype) else jnp.zeros(x.shape, jnp.bool_)


def _index_dtype(n):
    return jnp.int32 if n < 2**31 - 1 else jnp.int64


# ------------------------------------------------------------------ layout helpers


def _to_last(x, dim):
    """x with `dim` moved last (0-d tensors become shape (1,)); and the axis."""
    ndim = x.ndim
    if ndim == 0:
        return x.reshape(1), 0
    axis = dim % ndim
    return jnp.moveaxis(x, axis, -1), axis


def _from_last(y, axis, ndim):
    """Inverse of _to_last for a result that keeps the sorted axis."""
    if ndim == 0:
        return y.reshape(())
    return jnp.moveaxis(y, -1, axis)


def _from_reduced(y, axis, ndim, keepdim):
    """Inverse of _to_last for a result with the last axis reduced away."""
    if ndim == 0:
        return y.reshape(())
    return jnp.expand_dims(y, axis) if keepdim else y


def _sort_last(x, descending=False):
    """Stable sort along the last axis: (values, indices)."""
    n = x.shape[-1]
    last = x.ndim - 1
    iota = lax.broadcasted_iota(_index_dtype(n), x.shape, last)
    if not descending:
        values, indices = lax.sort((x, iota), dimension=last, is_stable=True, num_keys=1)
        return values, indices
    # Ascending by (value, -index), then reversed: descending values with
    # NaN first and equal values still in input order.
    values, neg = lax.sort((x, -iota), dimension=last, is_stable=True, num_keys=2)
    return jnp.flip(values, last), -jnp.flip(neg, last)


def _gather_last(arrays, pos):
    """Pick position `pos` (shape = batch + (1,)) along the last axis."""
    return tuple(jnp.take_along_axis(a, pos, axis=-1)[..., 0] for a in arrays)


# ------------------------------------------------------------------ sort / topk


def _sort(self, dim, descending):
    reject("sort", self.dtype, ("complex",), RuntimeError)
    x, axis = _to_last(self, dim)
    values, indices = _sort_last(x, descending)
    return _from_last(values, axis, self.ndim), _from_last(indices, axis, self.ndim)


@lower(aten.sort.default, aten.sort.values)
def sort(ctx, self, dim=-1, descending=False):
    return _sort(self, dim, descending)


@lower(aten.sort.stable)
def sort_stable(ctx, self, stable=None, dim=-1, descending=False):
    # One algorithm for both: an unstable sort may return any order of
    # equal elements, the stable order is one of them (and matches the CPU).
    return _sort(self, dim, descending)


@lower(aten.topk.default)
def topk(ctx, self, k, dim=-1, largest=True, sorted=True):
    # Ties come out in input order (the CPU's order for ties depends on its
    # partial-sort internals); sorted=False may return any order, sorted is one.
    reject("topk", self.dtype, ("bool", "complex"), RuntimeError)
    if self.ndim == 0:  # ATen returns the scalar itself, for k = 0 too
        return self, jnp.zeros((), jnp.int64)
    x, axis = _to_last(self, dim)
    values, indices = _sort_last(x, descending=largest)
    values, indices = values[..., :k], indices[..., :k]
    return _from_last(values, axis, self.ndim), _from_last(indices, axis, self.ndim)


# ------------------------------------------------------------------ order statistics


@lower(aten.kthvalue.default)
def kthvalue(ctx, self, k, dim=-1, keepdim=False):
    if self.ndim == 0:  # (ATen copies a 0-dim input before its dtype dispatch: bool too)
        return self, jnp.zeros((), jnp.int64)
    _order_statistic("kthvalue", self, dim)
    x, axis = _to_last(self, dim)
    values, indices = _sort_last(x)
    v, i = values[..., k - 1], indices[..., k - 1]
    return _from_reduced(v, axis, self.ndim, keepdim), _from_reduced(i, axis, self.ndim, keepdim)


def _order_statistic(op_name, self, dim):
    """ATen's checks for kthvalue/median/nanmedian (no bool or complex; a
    non-empty dim when reducing along one)."""
    reject(op_name, self.dtype, ("bool", "complex"))
    if dim is not None and self.ndim:
        require_nonempty(op_name, self.shape, (dim % self.ndim,))


def _median_last(x, ignore_nan):
    """Lower median along the last axis: (value, index).

    median: NaN if the row has one (index of its first NaN), as ATen does.
    nanmedian: the lower median of the non-NaN values (a NaN if all are)."""
    n = x.shape[-1]
    values, indices = _sort_last(x)
    num_nan = jnp.sum(_isnan(x), axis=-1, keepdims=True, dtype=indices.dtype)
    if ignore_nan:
        pos = jnp.maximum(n - num_nan - 1, 0) // 2
    else:
        # Sorted NaNs sit last, in input order: the first one is at n - num_nan.
        pos = jnp.where(num_nan > 0, n - num_nan, (n - 1) // 2)
    return _gather_last((values, indices), pos)


def _median_all(ctx, self, ignore_nan):
    _order_statistic("median", self, None)
    x = self.reshape(-1)
    if x.size == 0:
        return jnp.full((), jnp.nan).astype(ctx.out_dtype)
    return _median_last(x, ignore_nan)[0]


def _median_dim(self, dim, keepdim, ignore_nan):
    _order_statistic("median", self, dim)
    x, axis = _to_last(self, dim)
    v, i = _median_last(x, ignore_nan)
    return _from_reduced(v, axis, self.ndim, keepdim), _from_reduced(i, axis, self.ndim, keepdim)


@lower(aten.median.default, aten.median.out)
def median(ctx, self):
    return _median_all(ctx, self, False)


@lower(aten.nanmedian.default, aten.nanmedian.out)
def nanmedian(ctx, self):
    return _median_all(ctx, self, True)


@lower(aten.median.dim)
def median_dim(ctx, self, dim, keepdim=False):
    return _median_dim(self, dim, keepdim, False)


@lower(aten.nanmedian.dim)
def nanmedian_dim(ctx, self, dim, keepdim=False):
    return _median_dim(self, dim, keepdim, True)


@lower(aten.mode.default, aten.mode.values)
def mode(ctx, self, dim=-1, keepdim=False):
    """Most frequent value along dim; among equally frequent values the
    smallest, with the index of its last occurrence (ATen's CPU kernel:
    sorted runs, first strictly longest run, index of the run's last element).
    Each NaN counts as a value of its own (NaN != NaN)."""
    reject("mode", self.dtype, ("complex",))
    if self.ndim:
        require_nonempty("mode", self.shape, (dim % self.ndim,))
    x, axis = _to_last(self, dim)
    n = x.shape[-1]
    values, indices = _sort_last(x)
    pos = lax.broadcasted_iota(indices.dtype, values.shape, values.ndim - 1)
    differs = values[..., 1:] != values[..., :-1]
    true = jnp.ones(values.shape[:-1] + (1,), jnp.bool_)
    run_start = jnp.concatenate([true, differs], axis=-1)
    run_end = jnp.concatenate([differs, true], axis=-1)
    start = lax.cummax(jnp.where(run_start, pos, 0), axis=values.ndim - 1)
    count = jnp.where(run_end, pos - start + 1, 0)
    best = jnp.argmax(count, axis=-1, keepdims=True) if n > 0 else jnp.zeros(count.shape[:-1] + (1,), jnp.int32)
    v, i = _gather_last((values, indices), best)
    return _from_reduced(v, axis, self.ndim, keepdim), _from_reduced(i, axis, self.ndim, keepdim)


# ------------------------------------------------------------------ scans


def _scan(self, dim, dtype, fn):
    """Apply a cumulative `fn(x, axis)` in the accumulation dtype of `dtype`."""
    x = self.reshape(1) if self.ndim == 0 else self
    axis = dim % max(self.ndim, 1)
    x = astype(x, dtype).astype(acc_dtype(dtype))  # (as c10 casts: -2.0 to uint8 is 254)
    return fn(x, axis).astype(dtype).reshape(self.shape)


@lower(aten.cumsum.default)
def cumsum(ctx, self, dim, dtype=None):
    return _scan(self, dim, ctx.out_dtype, lambda x, axis: jnp.cumsum(x, axis=axis))


@lower(aten.cumprod.default)
def cumprod(ctx, self, dim, dtype=None):
    return _scan(self, dim, ctx.out_dtype, lambda x, axis: jnp.cumprod(x, axis=axis))


@lower(aten.logcumsumexp.default, aten.logcumsumexp.out, aten._logcumsumexp.default)
def logcumsumexp(ctx, self, dim):
    reject("logcumsumexp", self.dtype, ("bool", "int"))
    if jnp.issubdtype(self.dtype, jnp.complexfloating):
        return _scan(self, dim, ctx.out_dtype, lambda x, axis: lax.associative_scan(_log_add_exp_complex, x, axis=axis))
    return _scan(self, dim, ctx.out_dtype, lambda x, axis: lax.cumlogsumexp(x, axis=axis))


def _log_add_exp_complex(a, b):
    """log(exp(a) + exp(b)) as ATen's _log_add_exp_helper for complex: the
    larger real part factored out, NaN real parts infectious, two -inf real
    parts giving the first, two +inf ones computed directly (lax's
    cumlogsumexp gave NaN for any infinite real part)."""
    big = jnp.where(a.real >= b.real, a, b)
    small = jnp.where(a.real >= b.real, b, a)
    result = big + jnp.log1p(jnp.exp(small - big))
    both_inf = jnp.isinf(a.real) & (a.real == b.real)
    result = jnp.where(both_inf & (a.real < 0), a, jnp.where(both_inf, jnp.log(jnp.exp(a) + jnp.exp(b)), result))
    nan = jnp.asarray(complex(jnp.nan, jnp.nan), a.dtype)
    return jnp.where(jnp.isnan(a.real) | jnp.isnan(b.real), nan, result)


def _cum_extreme(self, dim, largest):
    """cummax/cummin: (values, indices), ATen's rule: a later element takes
    over when it is >= (<=) the running value or is NaN, and nothing but a
    later NaN takes over from a NaN.

    The running value is a plain cummax/cummin (NaN-propagating).  Its index
    is the last position j <= i where x[j] equals the running value at j:
    that is the last occurrence of the current extreme (or the last NaN)."""
    x = self.reshape(1) if self.ndim == 0 else self
    axis = dim % max(self.ndim, 1)
    if x.size == 0 or self.ndim == 0:  # (ATen answers these before its dtype dispatch)
        return self, jnp.zeros(self.shape, jnp.int32)
    reject("cummax" if largest else "cummin", self.dtype, ("complex",))
    work = x.astype(jnp.uint8) if x.dtype == jnp.bool_ else x
    values = (lax.cummax if largest else lax.cummin)(work, axis=axis)
    hit = (work == values) | (_isnan(work) & _isnan(values))
    iota = lax.broadcasted_iota(_index_dtype(x.shape[axis]), x.shape, axis)
    indices = lax.cummax(jnp.where(hit, iota, jnp.zeros((), iota.dtype)), axis=axis)
    return values.astype(self.dtype).reshape(self.shape), indices.reshape(self.shape)


@lower(aten.cummax.default, aten.cummax.out)
def cummax(ctx, self, dim):
    return _cum_extreme(self, dim, True)


@lower(aten.cummin.default, aten.cummin.out)
def cummin(ctx, self, dim):
    return _cum_extreme(self, dim, False)


@lower(aten._cummax_helper.default)
def cummax_helper(ctx, self, values, indices, dim):
    return _cum_extreme(self, dim, True)


@lower(aten._cummin_helper.default)
def cummin_helper(ctx, self, values, indices, dim):
    return _cum_extreme(self, dim, False)


# -------------------------------------------------------------- searchsorted


def _binary_search(rows, values, side):
    """ATen's binary search (cus_lower_bound/cus_upper_bound), per row of
    `rows` (r, n) for the values (r, m): the probe `mid = start + (end -
    start) / 2` moves right while !(rows[mid] >= v) (left) or
    !(rows[mid] > v) (right).  Raw comparisons, so a NaN sends every probe
    right, as on the CPU (jnp.searchsorted orders NaN last instead).  At most
    n.bit_length() halvings; a finished search stays put."""
    n = rows.shape[-1]
    it = _index_dtype(n + 1)
    start = jnp.zeros(values.shape, it)
    end = jnp.full(values.shape, n, it)

    def halve(_, bounds):
        start, end = bounds
        mid = start + (end - start) // 2
        probe = jnp.take_along_axis(rows, jnp.minimum(mid, n - 1), axis=-1)
        right = ~(probe >= values) if side == "left" else ~(probe > values)
        active = start < end
        return jnp.where(active & right, mid + 1, start), jnp.where(active & ~right, mid, end)

    return lax.fori_loop(0, n.bit_length(), halve, (start, end))[0]


@lower(aten.bucketize.Tensor, aten.bucketize.Scalar)
def bucketize(ctx, x, boundaries, out_int32=False, right=False):
    """right=False: boundaries[i-1] < x <= boundaries[i].  (Eager mode used
    PyTorch's decomposition, which returns zeros of x's dtype, not int64, for
    empty boundaries.)"""
    if boundaries.ndim != 1:
        raise RuntimeError(f"boundaries tensor must be 1 dimension, but got dim({boundaries.ndim})")
    dt = ctx.result_type(0, 1)
    if boundaries.size == 0 or x.size == 0:
        return jnp.zeros(x.shape, ctx.out_dtype)
    values = astype(x, dt)
    idx = _binary_search(astype(boundaries, dt)[None], values.reshape(1, -1), "right" if right else "left")
    return idx.reshape(values.shape).astype(ctx.out_dtype)


@lower(aten.searchsorted.Tensor, aten.searchsorted.Scalar)
def searchsorted(ctx, sorted_sequence, self, out_int32=False, right=False, side=None, sorter=None):
    """Per row of the sorted sequence (1-d: one row for every value).  Both
    are compared in torch's result type: a Scalar or 0-dim value takes the
    sequence's dtype (-1 in a uint8 sequence is 255), as in ATen."""
    side = "right" if right or side == "right" else "left"
    dt = ctx.result_type(0, 1)
    seq = astype(sorted_sequence, dt)
    values = astype(self, dt)
    if sorter is not None:
        if seq.ndim:
            ctx.check_index(sorter, seq.shape[-1], "torch.searchsorted(): sorter index out of range",
                            RuntimeError, negative_ok=False)
        seq = jnp.take_along_axis(seq, sorter.astype(jnp.int64), axis=-1)
    out_dtype = jnp.int32 if out_int32 else jnp.int64
    if seq.ndim == 0 and values.ndim == 0:
        raise RuntimeError("torch.searchsorted(): input value can be a scalar only when boundaries tensor dimension "
                           f"is 1, but we got boundaries tensor dim(0) and input value's dim(0) numel({values.size})")
    if seq.ndim == 0:
        raise RuntimeError("torch.searchsorted(): boundaries tensor should have positive dimension, but got 0 "
                           "dimension")
    if seq.size == 0 or values.size == 0:  # (no boundaries: every value goes before them all)
        return jnp.zeros(values.shape, out_dtype)
    rows = seq.reshape(-1, seq.shape[-1])
    idx = _binary_search(rows, values.reshape(rows.shape[0], -1), side)
    return idx.reshape(values.shape).astype(out_dtype)
