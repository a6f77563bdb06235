"""Histograms: `histogram` (a bin count or bin edges) and the three parts
`histogramdd` is built from (`_histogramdd_bin_edges`, `_from_bin_cts`,
`_from_bin_tensors`).  `histc` lives with the reductions.

ATen's rules (Histogram.cpp, HistogramKernel.cpp), followed here:
- only float32 and float64 inputs; the input is read as N points of D
  coordinates (its last dim; `histogram` flattens to D = 1);
- a bin count's outer edges are `range` or the data's min/max per
  dimension ([0, 1] for no data), widened by 0.5 each way when equal, and
  must be finite; the edges between are `linspace` in the input dtype;
- a point's bin is upper_bound(edges, x) - 1, the last edge inclusive; a
  point outside [first edge, last edge] (or NaN) in any dimension counts
  nowhere;
- `density` divides by the total, then by each dimension's bin widths.

Shapes never depend on the data, so all of it runs on the device; the one
data-dependent error (a non-finite data range) is a device-side check."""

import builtins  # `range` is an argument name of these ops

import jax.numpy as jnp
import numpy as np
import torch

from ..registry import lower
from .creation import _linspace
from .reductions import _TORCH_NAMES

aten = torch.ops.aten


# ---------------------------------------------------------------- checks
# (in the meta functions: ATen has no meta kernels for these ops, and the
# checks need only shapes, dtypes and the static arguments)


def _check_input(x, weight, dims):
    if x.dtype not in (torch.float32, torch.float64):
        name = _TORCH_NAMES.get(str(x.dtype).split(".")[-1], str(x.dtype))
        raise NotImplementedError(f"\"histogramdd\" not implemented for '{name}'")
    if weight is None:
        return
    if weight.dtype != x.dtype:
        raise RuntimeError(
            "torch.histogramdd: if weight tensor is provided, input tensor and weight tensor should have the "
            f"same dtype, but got input({x.dtype}), and weight({weight.dtype})"
        )
    if tuple(weight.shape) != tuple(dims[:-1]):
        raise RuntimeError(
            "torch.histogramdd: if weight tensor is provided it should have the same shape as the input tensor "
            f"excluding its innermost dimension, but got input with shape {list(dims)} and weight with shape "
            f"{list(weight.shape)}"
        )


def _check_bin_counts(bins, D):
    if len(bins) != D:
        raise RuntimeError("histogramdd: The size of bins must be equal to the innermost dimension of the input.")
    for d, b in enumerate(bins):
        if b <= 0:
            raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {b} for dimension {d}")


def _static_range(range, D):
    """(lows, highs) from `range`, ATen's checks and widening, or None."""
    if range is None:
        return None
    if len(range) != 2 * D:
        raise RuntimeError(
            f"torch.histogramdd: for a {D}-dimensional histogram range should have {2 * D} elements, but got "
            f"{len(range)}"
        )
    lows, highs = list(range[0::2]), list(range[1::2])
    for d in builtins.range(D):
        lo, hi = lows[d], highs[d]
        if not (np.isfinite(lo) and np.isfinite(hi)):
            raise RuntimeError(f"torch.histogramdd: dimension {d}'s range [{_num(lo)}, {_num(hi)}] is not finite")
        if lo > hi:
            raise RuntimeError(
                f"torch.histogramdd: min should not exceed max, but got min {_num(lo)} max {_num(hi)} for dimension {d}"
            )
        if lo == hi:
            lows[d], highs[d] = lo - 0.5, hi + 0.5
    return lows, highs


def _num(v):
    return int(v) if float(v).is_integer() else v


def _points(x):
    """The input as (N, D) points: `histogramdd` reads the last dim as D."""
    if x.ndim < 2:
        raise RuntimeError("torch.histogramdd: input tensor should have at least 2 dimensions")
    return x.shape[-1]


# ---------------------------------------------------------------- the math


def _outer_edges(ctx, points, range):
    """Per dimension, the first and last edge (traced, input dtype)."""
    D = points.shape[1]
    dtype = points.dtype
    given = _static_range(range, D)
    if given is not None:
        return [jnp.asarray(v, dtype) for v in given[0]], [jnp.asarray(v, dtype) for v in given[1]]
    if points.shape[0] == 0:
        return [jnp.zeros((), dtype)] * D, [jnp.ones((), dtype)] * D
    lows, highs = jnp.min(points, axis=0), jnp.max(points, axis=0)
    finite = jnp.isfinite(lows) & jnp.isfinite(highs)
    ctx.check(finite, "torch.histogramdd: dimension {value}'s range is not finite", value=jnp.argmin(finite))
    equal = lows == highs
    lows, highs = jnp.where(equal, lows - 0.5, lows), jnp.where(equal, highs + 0.5, highs)
    return [lows[d] for d in builtins.range(D)], [highs[d] for d in builtins.range(D)]


def _edges_from_counts(ctx, points, bins, range):
    lows, highs = _outer_edges(ctx, points, range)
    return [_linspace(points.dtype, lo, hi, b + 1) for lo, hi, b in zip(lows, highs, bins)]


def _bin_of(x, edges):
    """Each coordinate's bin along one dimension, and whether it counts."""
    last = edges.shape[0] - 1
    pos = jnp.searchsorted(edges, x, side="right") - 1
    pos = jnp.where(pos == last, last - 1, pos)
    inside = (x >= edges[0]) & (x <= edges[last])
    return jnp.clip(pos, 0, max(last - 1, 0)), inside


def _histogram(points, edges, weight, density):
    """The D-dimensional histogram of (N, D) points over per-dim edges."""
    shape = tuple(e.shape[0] - 1 for e in edges)
    flat = jnp.zeros((), jnp.int64)
    counts = jnp.ones(points.shape[:1], bool)
    for d, e in enumerate(edges):
        pos, inside = _bin_of(points[:, d], e)
        flat = flat * shape[d] + pos
        counts = counts & inside
    ones = jnp.ones(points.shape[:1], points.dtype) if weight is None else weight.reshape(-1)
    values = jnp.where(counts, ones, jnp.zeros((), points.dtype))
    hist = jnp.zeros((int(np.prod(shape)),), points.dtype).at[flat].add(values).reshape(shape)
    if density:
        hist = hist / jnp.sum(hist)
        for d, e in enumerate(edges):
            widths = (e[1:] - e[:-1]).reshape([-1 if k == d else 1 for k in builtins.range(len(shape))])
            hist = hist / widths
    return hist


# ---------------------------------------------------------------- metas


def _out_or_new(out, like, shape):
    if out is None:
        return like.new_empty(shape)
    return out.resize_(shape)


def _histogram_meta(self, bins=100, *, range=None, weight=None, density=False, hist=None, bin_edges=None):
    _check_input(self.reshape(-1, 1), None if weight is None else weight.reshape(-1), (self.numel(), 1))
    if isinstance(bins, torch.Tensor):
        count = bins.numel() - 1
        if bins.dtype != self.dtype:
            raise RuntimeError(
                "torch.histogramdd: input tensor and bins tensors should have the same dtype, but got input "
                f"with dtype {self.dtype} and bins for dimension 0 with dtype {bins.dtype}"
            )
    else:
        count = bins
        _static_range(range, 1)
    _check_bin_counts([count], 1)
    return _out_or_new(hist, self, (count,)), _out_or_new(bin_edges, self, (count + 1,))


def _check_dd_counts(self, bins, range, weight):
    """histogramdd's checks for a bin count per dimension."""
    D = _points(self)
    _check_input(self, weight, self.shape)
    _check_bin_counts(bins, D)
    _static_range(range, D)


def _bin_edges_meta(self, bins, *, range=None, weight=None, density=False, out=None):
    _check_dd_counts(self, bins, range, weight)
    return [self.new_empty((b + 1,)) for b in bins] if out is None else [o.resize_((b + 1,)) for o, b in zip(out, bins)]


def _from_counts_meta(self, bins, *, range=None, weight=None, density=False, out=None):
    _check_dd_counts(self, bins, range, weight)
    return _out_or_new(out, self, tuple(bins))


def _from_tensors_meta(self, bins, *, weight=None, density=False, out=None):
    D = _points(self)
    _check_input(self, weight, self.shape)
    _check_bin_counts([b.numel() - 1 for b in bins], D)
    return _out_or_new(out, self, tuple(b.numel() - 1 for b in bins))


# ---------------------------------------------------------------- lowerings


@lower(aten.histogram.bin_ct, aten.histogram.bin_ct_out, meta=_histogram_meta)
def histogram_bin_ct(ctx, self, bins=100, range=None, weight=None, density=False):
    points = self.reshape(-1, 1)
    (edges,) = _edges_from_counts(ctx, points, [bins], range)
    return _histogram(points, [edges], weight, density), edges


@lower(aten.histogram.bins_tensor, aten.histogram.bins_tensor_out, meta=_histogram_meta)
def histogram_bins_tensor(ctx, self, bins, weight=None, density=False):
    points = self.reshape(-1, 1)
    return _histogram(points, [bins], weight, density), bins


@lower(aten._histogramdd_bin_edges, meta=_bin_edges_meta)
def histogramdd_bin_edges(ctx, self, bins, range=None, weight=None, density=False):
    return _edges_from_counts(ctx, self.reshape(-1, self.shape[-1]), bins, range)


@lower(aten._histogramdd_from_bin_cts, meta=_from_counts_meta)
def histogramdd_from_bin_cts(ctx, self, bins, range=None, weight=None, density=False):
    points = self.reshape(-1, self.shape[-1])
    return _histogram(points, _edges_from_counts(ctx, points, bins, range), weight, density)


@lower(aten._histogramdd_from_bin_tensors, meta=_from_tensors_meta)
def histogramdd_from_bin_tensors(ctx, self, bins, weight=None, density=False):
    return _histogram(self.reshape(-1, self.shape[-1]), list(bins), weight, density)
