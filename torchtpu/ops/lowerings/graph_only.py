"""Lowerings for compiled graphs only (registry.lower_view): ops that eager
mode runs as metadata kernels or composites.

Views: in eager mode a view must alias its base, so views are ATen's
metadata kernels and never reach a lowering.  In an AOTAutograd graph
(functional) a view is just a function of its input's value; XLA turns
these into free layout changes or fuses them into their consumers.

Factories and conversions: eager runs `full_like` & co. as `empty` +
`fill_`, and `_to_copy` as `empty` + `copy_`; graphs keep them whole."""

import jax.numpy as jnp
import torch
import torch._inductor.inductor_prims  # noqa: F401  (defines prims.fma, which decompositions emit)
from jax import lax

from .. import plans
from . import elementwise
from .common import astype
from ..registry import lower_view

aten = torch.ops.aten


def _dim(d, ndim):
    n = max(ndim, 1)
    return d % n


@lower_view(aten.alias, aten.detach, aten.lift_fresh, aten.lift_fresh_copy, aten.alias_copy, aten.detach_copy)
def identity(ctx, x, *rest):
    return x


@lower_view(aten.t, aten.t_copy)
def t(ctx, x):
    return x.T if x.ndim == 2 else x


@lower_view(aten.transpose, aten.transpose_copy)
def transpose(ctx, x, dim0, dim1):
    if x.ndim < 2:
        return x
    return jnp.swapaxes(x, _dim(dim0, x.ndim), _dim(dim1, x.ndim))


@lower_view(aten.permute, aten.permute_copy)
def permute(ctx, x, dims):
    return jnp.transpose(x, [_dim(d, x.ndim) for d in dims]) if x.ndim else x


@lower_view(
    aten.view.default,
    aten._unsafe_view,
    aten.reshape,
    aten._reshape_alias,
    aten.view_copy.default,
    aten.unsqueeze,
    aten.unsqueeze_copy,
    aten.squeeze,
    aten.squeeze_copy,
    aten.flatten.using_ints,
    aten.unflatten,
)
def reshape(ctx, x, *rest):
    return x.reshape(ctx.out_shape)


@lower_view(aten.expand, aten.expand_copy)
def expand(ctx, x, size, implicit=False):
    return jnp.broadcast_to(x, ctx.out_shape)


@lower_view(aten.slice.Tensor, aten.slice_copy.Tensor)
def slice_(ctx, x, dim=0, start=None, end=None, step=1):
    dim = _dim(dim, x.ndim)
    n = x.shape[dim]
    length = ctx.out_shape[dim]
    start = 0 if start is None else start
    start = min(max(start + n if start < 0 else start, 0), n)
    if length == 0:
        return jnp.zeros(ctx.out_shape, x.dtype)
    return lax.slice_in_dim(x, start, start + (length - 1) * step + 1, step, axis=dim)


@lower_view(aten.narrow, aten.narrow_copy)
def narrow(ctx, x, dim, start, length):
    dim = _dim(dim, x.ndim)
    start = start + x.shape[dim] if start < 0 else start
    return lax.slice_in_dim(x, start, start + length, 1, axis=dim)


@lower_view(aten.select.int, aten.select_copy.int)
def select(ctx, x, dim, index):
    dim = _dim(dim, x.ndim)
    index = index + x.shape[dim] if index < 0 else index
    return lax.index_in_dim(x, index, axis=dim, keepdims=False)


@lower_view(aten.diagonal, aten.diagonal_copy)
def diagonal(ctx, x, offset=0, dim1=0, dim2=1):
    return jnp.diagonal(x, offset, _dim(dim1, x.ndim), _dim(dim2, x.ndim))


@lower_view(aten.unfold, aten.unfold_copy)
def unfold(ctx, x, dimension, size, step):
    if x.ndim == 0:
        return x.reshape(ctx.out_shape)
    dim = _dim(dimension, x.ndim)
    windows = ctx.out_shape[dim]
    idx = jnp.arange(windows)[:, None] * step + jnp.arange(size)[None, :]
    moved = jnp.moveaxis(x, dim, -1)
    out = jnp.take(moved, idx, axis=-1)  # (..., windows, size)
    return jnp.moveaxis(out, -2, dim)


@lower_view(aten.split.Tensor, aten.split_with_sizes, aten.split_copy.Tensor, aten.split_with_sizes_copy, aten.unbind,
            aten.unbind_copy, aten.chunk, aten.tensor_split.sections, aten.tensor_split.indices)
def split(ctx, x, *rest):
    """Pieces along one dim, in order; their shapes come from ATen."""
    ndim = x.ndim
    if ctx.op in (aten.unbind.int, aten.unbind_copy.int):  # pieces lose the dim
        dim = _dim(rest[0] if rest else 0, ndim)
        return [lax.index_in_dim(x, i, axis=dim, keepdims=False) for i in range(x.shape[dim])]
    dim = _dim(rest[1] if len(rest) > 1 else 0, ndim)  # (every other overload: x, sizes or sections, dim)
    pieces, start = [], 0
    for shape in (tuple(m.shape) for m in ctx.out_meta):
        length = shape[dim]
        pieces.append(lax.slice_in_dim(x, start, start + length, 1, axis=dim))
        start += length
    return pieces


def _as_strided_within_value(x, size, stride, storage_offset=None):
    """Whether the view reads only `x`'s own elements, laid out contiguously:
    all a graph has of it.  Others (a non-contiguous value, or elements of
    the tensor it is a view of) run op by op, on the real storage."""
    if not x.is_contiguous():
        return False
    if any(n == 0 for n in size):
        return True
    start = (storage_offset if storage_offset is not None else x.storage_offset()) - x.storage_offset()
    last = start + sum((n - 1) * abs(s) for n, s in zip(size, stride))
    return bool(start >= 0 and last < x.numel())


@lower_view(aten.as_strided, aten.as_strided_copy, accepts=_as_strided_within_value)
def as_strided(ctx, x, size, stride, storage_offset=None):
    base = ctx.meta_args[0]
    offset = (storage_offset if storage_offset is not None else base.storage_offset()) - base.storage_offset()
    return plans.read_view(x.reshape(-1), tuple(size), tuple(stride), offset, x.dtype)


@lower_view(aten.view.dtype, aten.view_copy.dtype, aten.view_as_real, aten.view_as_complex)
def view_dtype(ctx, x, *rest):
    return plans.bitcast_box(x, ctx.out_dtype).reshape(ctx.out_shape)


# ------------------------------------------------------------ conversions


@lower_view(aten._to_copy, torch.ops.prims.convert_element_type)
def to_copy(ctx, x, *rest):
    """`.to(dtype)`, `.float()`, autocast's casts (eager runs `_to_copy` as
    empty + copy_; decompositions under dynamic shapes emit the prim).  A
    move to another device is not lowered (graph.py)."""
    return astype(x, ctx.out_dtype)


@lower_view(aten.true_divide)
def true_divide(ctx, self, other):
    """div under its old name (eager decomposes it; decompositions under
    dynamic shapes emit it)."""
    return elementwise.div(ctx, self, other)


@lower_view(torch.ops.prims.fma)
def fma(ctx, a, b, c):
    """a * b + c (addcmul's decomposition for complex tensors emits it)."""
    return (a * b + c).astype(ctx.out_dtype)


# ------------------------------------------------------------ factories


@lower_view(aten.full_like, aten.new_full)
def full_like(ctx, x, *rest):
    value = rest[0] if ctx.op._schema.name.endswith("full_like") else rest[1]
    return jnp.full(ctx.out_shape, jnp.asarray(value).astype(ctx.out_dtype))


@lower_view(aten.zeros_like, aten.new_zeros, aten.empty_like, aten.new_empty, aten.new_empty_strided,
            aten.empty.memory_format, aten.empty_strided)
def zeros_like(ctx, *args, **kwargs):
    # (empty: unspecified contents; zeros are as good as any and fold away)
    return jnp.zeros(ctx.out_shape, ctx.out_dtype)


@lower_view(aten.ones_like, aten.new_ones)
def ones_like(ctx, *args, **kwargs):
    return jnp.ones(ctx.out_shape, ctx.out_dtype)


# ------------------------------------------------- composites of eager mode


@lower_view(aten._conj)
def conj(ctx, x):
    """As a value, the conjugate (eager sets the conj bit; complex RoPE's
    backward has it)."""
    return jnp.conj(x)


@lower_view(aten._neg_view)
def neg_view(ctx, x):
    """As a value, the negation (eager sets the negative bit: `z.conj().imag`)."""
    return -x


@lower_view(aten.complex)
def complex_(ctx, real, imag):
    dtype = ctx.out_dtype
    part = jnp.float64 if dtype == jnp.complex128 else jnp.float32
    real, imag = jnp.broadcast_arrays(real.astype(part), imag.astype(part))  # (lax.complex does not broadcast)
    return lax.complex(real, imag).astype(dtype)


@lower_view(aten.polar)
def polar(ctx, abs_, angle):
    return complex_(ctx, abs_ * jnp.cos(angle), abs_ * jnp.sin(angle))
