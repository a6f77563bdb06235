"""Shape ops that produce new data: cat, flip, roll, tril/triu, pad, repeat, ..."""

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from ..registry import lower
from .indexing import wrap_dim

aten = torch.ops.aten


# ---------------------------------------------------------- cat / stack


def _skipped_in_cat(x):
    """ATen's legacy rule: 1-D empty tensors are ignored by cat."""
    return x.ndim == 1 and x.shape[0] == 0


@lower(aten.cat.default)
def cat(ctx, tensors, dim=0):
    dtype = ctx.out_dtype
    arrays = [t for t in tensors if not _skipped_in_cat(t)]
    if not arrays:
        return jnp.zeros(ctx.out_shape, dtype)
    dim = wrap_dim(dim, arrays[0].ndim)
    return jnp.concatenate([a.astype(dtype) for a in arrays], axis=dim)


@lower(aten.stack.default)
def stack(ctx, tensors, dim=0):
    dtype = ctx.out_dtype
    dim = wrap_dim(dim, tensors[0].ndim + 1)
    return jnp.stack([a.astype(dtype) for a in tensors], axis=dim)


# ----------------------------------------------------------- flip / roll


@lower(aten.flip.default)
def flip(ctx, self, dims):
    if self.ndim == 0 or not dims:
        return self
    axes = tuple(sorted({wrap_dim(d, self.ndim) for d in dims}))
    return jnp.flip(self, axis=axes)


@lower(aten.roll.default)
def roll(ctx, self, shifts, dims=()):
    if self.size == 0:
        return self
    if not dims:
        if len(shifts) != 1:
            raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims: 0")
        return jnp.roll(self.reshape(-1), shifts[0]).reshape(self.shape)
    if len(shifts) != len(dims):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)}")
    axes = tuple(wrap_dim(d, self.ndim) for d in dims)
    return jnp.roll(self, tuple(shifts), axis=axes)


# --------------------------------------------------------- tril / triu


@lower(aten.tril.default)
def tril(ctx, self, diagonal=0):
    return jnp.tril(self, diagonal)


@lower(aten.triu.default)
def triu(ctx, self, diagonal=0):
    return jnp.triu(self, diagonal)


# -------------------------------------------------------------- padding


@lower(aten.constant_pad_nd.default)
def constant_pad_nd(ctx, self, pad, value=0):
    """pad = (last_lo, last_hi, prev_lo, prev_hi, ...); negative pads crop."""
    n = len(pad) // 2
    # Pad pair i applies to dim ndim-1-i.
    config = [(0, 0, 0)] * self.ndim
    for i in range(n):
        config[self.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1], 0)
    fill = jnp.asarray(value).astype(self.dtype)
    return lax.pad(self, fill, config)


def _pad_widths(ndim, padding):
    k = len(padding) // 2
    widths = [(0, 0)] * ndim
    for i in range(k):
        widths[ndim - 1 - i] = (padding[2 * i], padding[2 * i + 1])
    return widths


def _check_reflect(shape, padding, k):
    for i in range(k):
        size = shape[len(shape) - 1 - i]
        lo, hi = padding[2 * i], padding[2 * i + 1]
        if lo >= size or hi >= size:
            raise RuntimeError(
                f"Argument #4: Padding size should be less than the corresponding input dimension, "
                f"but got: padding ({lo}, {hi}) at dimension {len(shape) - 1 - i} of input {list(shape)}"
            )


def _pad_mode(x, padding, mode):
    """Reflection / replication padding (negative pads crop first)."""
    widths = _pad_widths(x.ndim, padding)
    if mode == "edge":
        # ATen's index map: output j reads clamp(j - lo, 0, size - 1), which
        # also covers a crop that leaves nothing but the edge to replicate.
        for d, (lo, hi) in enumerate(widths):
            if lo or hi:
                idx = np.clip(np.arange(x.shape[d] + lo + hi) - lo, 0, x.shape[d] - 1)
                x = jnp.take(x, jnp.asarray(idx), axis=d)
        return x
    # Negative pads crop.
    crop = tuple(slice(-lo if lo < 0 else 0, x.shape[d] + hi if hi < 0 else x.shape[d]) for d, (lo, hi) in enumerate(widths))
    x = x[crop]
    widths = [(max(lo, 0), max(hi, 0)) for lo, hi in widths]
    return jnp.pad(x, widths, mode=mode)


def _padder(mode, k):
    def forward(ctx, self, padding):
        if mode == "reflect":
            _check_reflect(self.shape, padding, k)
        return _pad_mode(self, padding, mode)

    def backward(ctx, grad_output, self, padding):
        _, vjp = jax.vjp(lambda x: _pad_mode(x, padding, mode), self.astype(grad_output.dtype))
        (grad,) = vjp(grad_output)
        return grad

    return forward, backward


for _k in (1, 2, 3):
    for _mode, _name in (("reflect", "reflection"), ("edge", "replication")):
        _fwd, _bwd = _padder(_mode, _k)
        lower(getattr(aten, f"{_name}_pad{_k}d").default)(_fwd)
        lower(getattr(aten, f"{_name}_pad{_k}d_backward").default)(_bwd)


# -------------------------------------------------------------- repeat


@lower(aten.repeat.default)
def repeat(ctx, self, repeats):
    extra = len(repeats) - self.ndim
    if extra < 0:
        raise RuntimeError(
            "Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor"
        )
    x = self.reshape((1,) * extra + self.shape)
    return jnp.tile(x, tuple(repeats))


# ------------------------------------------------ diagonals and scatters


def _diag_coords(n_rows, n_cols, offset):
    """Row/column indices of diagonal `offset` of an (n_rows, n_cols) matrix."""
    if offset >= 0:
        length = max(min(n_rows, n_cols - offset), 0)
        rows = np.arange(length)
        cols = rows + offset
    else:
        length = max(min(n_rows + offset, n_cols), 0)
        cols = np.arange(length)
        rows = cols - offset
    return rows, cols


@lower(aten.diag_embed.default)
def diag_embed(ctx, self, offset=0, dim1=-2, dim2=-1):
    ndim = self.ndim + 1
    dim1 = wrap_dim(dim1, ndim)
    dim2 = wrap_dim(dim2, ndim)
    if dim1 == dim2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    n = self.shape[-1] + abs(offset)
    rows, cols = _diag_coords(n, n, offset)
    out = jnp.zeros(self.shape[:-1] + (n, n), self.dtype)
    out = out.at[..., rows, cols].set(self)
    return jnp.moveaxis(out, (-2, -1), (dim1, dim2))


@lower(aten.diagonal_scatter.default)
def diagonal_scatter(ctx, self, src, offset=0, dim1=0, dim2=1):
    dim1 = wrap_dim(dim1, self.ndim)
    dim2 = wrap_dim(dim2, self.ndim)
    y = jnp.moveaxis(self, (dim1, dim2), (-2, -1))
    rows, cols = _diag_coords(y.shape[-2], y.shape[-1], offset)
    y = y.at[..., rows, cols].set(src.astype(self.dtype))
    return jnp.moveaxis(y, (-2, -1), (dim1, dim2))


@lower(aten.select_scatter.default)
def select_scatter(ctx, self, src, dim, index):
    dim = wrap_dim(dim, self.ndim)
    size = self.shape[dim]
    if not -size <= index < size:
        raise IndexError(f"select_scatter(): index {index} out of range for tensor of size {list(self.shape)} at dimension {dim}")
    index = index % size
    return self.at[(slice(None),) * dim + (index,)].set(src.astype(self.dtype))


def _slice_bounds(size, start, end, step):
    start = 0 if start is None else start
    end = size if end is None else end
    if start < 0:
        start += size
    if end < 0:
        end += size
    start = min(max(start, 0), size)
    end = min(max(end, start), size)
    return start, end, step


@lower(aten.slice_scatter.default)
def slice_scatter(ctx, self, src, dim=0, start=None, end=None, step=1):
    dim = wrap_dim(dim, self.ndim)
    start, end, step = _slice_bounds(self.shape[dim], start, end, step)
    if start >= end:
        return self
    src = src.astype(self.dtype)
    if step == 1:
        # (not a scatter: XLA:CPU aborted the process on a scatter covering
        # all of self followed by reverse + cumsum -- cumsum's backward)
        return lax.dynamic_update_slice_in_dim(self, src, start, axis=dim)
    return _strided_set(self, src, dim, start, end, step)


def _strided_set(self, src, dim, start, end, step):
    """self with src at start, start + step, ... (< end) along dim, as a
    select instead of a scatter: XLA:CPU fused a scatter's in-place update
    with an update computed from self through a reversal (`x[::2, 1:].add_(
    x[::2, 1:].flip(0))` in a compiled graph read rows it had already
    written)."""
    n, count = self.shape[dim], src.shape[dim]
    spread = jnp.repeat(src, step, axis=dim)  # src[j] at j * step .. j * step + step - 1
    widths = [(0, 0)] * self.ndim
    widths[dim] = (start, max(0, n - start - count * step))
    spread = lax.slice_in_dim(jnp.pad(spread, widths), 0, n, axis=dim)
    i = lax.broadcasted_iota(jnp.int32, self.shape, dim)
    chosen = (i >= start) & (i < end) & ((i - start) % step == 0)
    return jnp.where(chosen, spread, self)


def _positions(sizes, strides, offset):
    """Storage position of each element of the view (sizes, strides, offset)."""
    pos = np.full(tuple(sizes), offset, np.int64)
    for d, (n, s) in enumerate(zip(sizes, strides)):
        shape = [1] * len(sizes)
        shape[d] = n
        pos = pos + (np.arange(n, dtype=np.int64) * s).reshape(shape)
    return pos


def _clone_layout(meta, sizes):
    """(strides, offset) of ATen's clone_preserve_strides(self): self's own
    storage layout, unless a zero stride overlaps elements (then a row-major
    clone at offset 0)."""
    if isinstance(meta, torch.Tensor) and not any(n > 1 and s == 0 for n, s in zip(meta.shape, meta.stride())):
        return tuple(meta.stride()), meta.storage_offset()
    return tuple(int(np.prod(sizes[d + 1:], dtype=np.int64)) for d in range(len(sizes))), 0


@lower(aten.as_strided_scatter.default)
def as_strided_scatter(ctx, self, src, size, stride, storage_offset=None):
    """self cloned with its storage layout, then src written through
    as_strided(size, stride, storage_offset) of the clone: the window's
    positions are absolute in that storage (offset None: self's), and the
    result shows the clone's elements at self's positions."""
    strides, base = _clone_layout(ctx.meta_args[0], tuple(self.shape))
    own = _positions(self.shape, strides, base).reshape(-1)
    written = _positions(size, stride, base if storage_offset is None else storage_offset).reshape(-1)
    extent = int(max(own.max(initial=-1), written.max(initial=-1))) + 1
    memory = jnp.zeros((extent,), self.dtype).at[own].set(self.reshape(-1))
    memory = memory.at[written].set(src.reshape(-1).astype(self.dtype))
    return memory[own].reshape(self.shape)


@lower(aten.unfold_backward.default)
def unfold_backward(ctx, grad_in, input_sizes, dim, size, step):
    """Sum each window's gradient back into the positions it was cut from."""
    ndim = len(input_sizes)
    dim = wrap_dim(dim, ndim)
    length = input_sizes[dim] if ndim else 1
    if ndim == 0:
        return grad_in.reshape(())
    windows = (length - size) // step + 1
    # ATen broadcasts the gradient against the unfolded shape (istft's
    # decomposition passes a batch of 1 for every batch)
    unfolded = tuple(input_sizes[:dim]) + (windows,) + tuple(input_sizes[dim + 1:]) + (size,)
    g = jnp.moveaxis(jnp.broadcast_to(grad_in, unfolded), dim, -2)  # (..., windows, size)
    pos = (np.arange(windows)[:, None] * step + np.arange(size)[None, :]).reshape(-1)
    g = g.reshape(g.shape[:-2] + (windows * size,))
    out = jnp.zeros(g.shape[:-1] + (length,), grad_in.dtype).at[..., pos].add(g)
    return jnp.moveaxis(out, -1, dim)
