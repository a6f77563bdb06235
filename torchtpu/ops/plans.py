"""Read and write plans: a tensor's (sizes, strides, offset, dtype) against its
storage's box array, resolved at trace time into lax ops.

These functions run while a kernel is being traced, so their Python cost is
paid once per cache key; what they emit is fused by XLA with the op itself
(e.g. `x @ w.t()` reads `w` through a transpose, one dot, no copy).

Reads, cheapest first: identity, reshape, slice/transpose/broadcast of the box
(or of a reshape of it), and a gather as the general case.  Writes: a dense
write of the whole storage rebinds the box (zero copy); a strided region is a
dynamic_update_slice (or a strided scatter); anything else a flat scatter.
A dtype differing from the box's (`view(dtype)`) is a bitcast.
"""

import math

import jax.numpy as jnp
import numpy as np
from jax import lax


def contiguous_strides(shape):
    strides = []
    acc = 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(strides))


def is_contiguous(sizes, strides):
    expected = 1
    for n, s in zip(reversed(sizes), reversed(strides)):
        if n != 1 and s != expected:
            return False
        expected *= n
    return True


# ---------------------------------------------------------------- bitcasts


def _bitcast_same_width(x, dtype):
    if x.dtype == dtype:
        return x
    if dtype == jnp.bool_:
        return x != 0
    if x.dtype == jnp.bool_:
        x = x.astype(jnp.uint8)
        if x.dtype == dtype:
            return x
    dtype = jnp.dtype(dtype)
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        # complex64 -> an 8-byte real (complex128 has no 16-byte peer):
        # the (re, im) float pair is the element's bytes.
        return lax.bitcast_convert_type(_to_real_pairs(x), dtype)
    if jnp.issubdtype(dtype, jnp.complexfloating):
        return _from_real_pairs(lax.bitcast_convert_type(x, _complex_part(dtype)))
    return lax.bitcast_convert_type(x, dtype)


def _complex_part(dtype):
    """The float dtype of a complex dtype's real and imaginary parts."""
    return jnp.dtype(jnp.float32 if jnp.dtype(dtype) == jnp.complex64 else jnp.float64)


def _to_real_pairs(x):
    """complex -> (..., 2) of its float parts (the bytes of view_as_real)."""
    return jnp.stack([jnp.real(x), jnp.imag(x)], axis=-1)


def _from_real_pairs(x):
    return lax.complex(x[..., 0], x[..., 1])


def bitcast_box(x, dtype):
    """The box array `x` reinterpreted in units of `dtype` (last dim rescaled)."""
    dtype = jnp.dtype(dtype)
    if x.dtype == dtype:
        return x
    src = x.dtype.itemsize
    dst = dtype.itemsize
    if src == dst:
        return _bitcast_same_width(x, dtype)
    if x.ndim == 0:
        x = x.reshape(1)
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        x = _to_real_pairs(x)
        x = x.reshape(x.shape[:-2] + (x.shape[-2] * 2,))
        return bitcast_box(x, dtype)
    if jnp.issubdtype(dtype, jnp.complexfloating):
        x = _padded_to_multiple(bitcast_box(x, _complex_part(dtype)), 2)
        x = x.reshape(x.shape[:-1] + (x.shape[-1] // 2, 2))
        return _from_real_pairs(x)
    if x.dtype == jnp.bool_:
        x = x.astype(jnp.uint8)
    to_bool = dtype == jnp.bool_
    target = jnp.dtype(jnp.uint8) if to_bool else dtype
    if src > dst:
        y = lax.bitcast_convert_type(x, target)  # (..., last, ratio)
        y = y.reshape(x.shape[:-1] + (x.shape[-1] * (src // dst),))
    else:
        ratio = dst // src
        x = _padded_to_multiple(x, ratio)
        y = lax.bitcast_convert_type(x.reshape(x.shape[:-1] + (x.shape[-1] // ratio, ratio)), target)
    return y != 0 if to_bool else y


def _padded_to_multiple(x, ratio):
    """`x` with a last dim divisible by `ratio`: flattened and zero-padded
    where needed.  A wider view of a storage whose byte size is no multiple
    of the new element (`arange(7.)[:6].view(complex64)`) reads whole units;
    the padding lies past the storage's end, where no view reaches, and
    writes trim it off again (write_view)."""
    if x.shape[-1] % ratio == 0:
        return x
    x = x.reshape(-1)
    if x.size % ratio:
        x = jnp.concatenate([x, jnp.zeros((ratio - x.size % ratio,), x.dtype)])
    return x


# ------------------------------------------------------ strided solutions


class _Solution:
    """A view expressed as a strided slice of the box reshaped to `shape`."""

    __slots__ = ("shape", "starts", "limits", "steps", "counts", "assign")

    def __init__(self, shape, starts, limits, steps, counts, assign):
        self.shape = shape
        self.starts = starts
        self.limits = limits
        self.steps = steps
        self.counts = counts
        self.assign = assign  # view dim -> box dim


def _chain_shape(strides_desc, numel):
    """Shape whose contiguous strides are exactly `strides_desc` (ends in 1)."""
    if not strides_desc or numel % strides_desc[0]:
        return None
    shape = [numel // strides_desc[0]]
    for outer, inner in zip(strides_desc, strides_desc[1:]):
        if outer % inner:
            return None
        shape.append(outer // inner)
    return tuple(shape)


def _candidate_shapes(box_shape, sizes, strides, numel):
    yield tuple(box_shape)
    view_strides = {s for n, s in zip(sizes, strides) if n > 1 and s > 0} | {1}
    desc = sorted(view_strides, reverse=True)
    shape = _chain_shape(desc, numel)
    if shape is not None:
        yield shape
    box_strides = {s for n, s in zip(box_shape, contiguous_strides(box_shape)) if n > 1}
    shape = _chain_shape(sorted(view_strides | box_strides, reverse=True), numel)
    if shape is not None:
        yield shape


def _solve_in(shape, sizes, strides, offset):
    numel = math.prod(shape)
    if offset >= numel:
        return None
    c = contiguous_strides(shape)
    starts = []
    rem = offset
    for cj in c:
        starts.append(rem // cj)
        rem %= cj
    used = [False] * len(shape)
    steps = [1] * len(shape)
    counts = [1] * len(shape)
    assign = {}
    dims = [i for i, (n, s) in enumerate(zip(sizes, strides)) if n > 1 and s > 0]
    for i in sorted(dims, key=lambda d: -strides[d]):
        n, s = sizes[i], strides[i]
        for j, (cj, nj) in enumerate(zip(c, shape)):
            if used[j] or nj == 1 or cj > s or s % cj:
                continue
            step = s // cj
            if starts[j] + (n - 1) * step < nj:
                used[j] = True
                steps[j] = step
                counts[j] = n
                assign[i] = j
                break
        else:
            return None
    limits = [st + (cnt - 1) * stp + 1 for st, cnt, stp in zip(starts, counts, steps)]
    return _Solution(tuple(shape), starts, limits, steps, counts, assign)


def solve(box_shape, sizes, strides, offset):
    numel = math.prod(box_shape)
    for shape in _candidate_shapes(box_shape, sizes, strides, numel):
        sol = _solve_in(shape, sizes, strides, offset)
        if sol is not None:
            return sol
    return None


def _view_order(sol, ndim):
    """View dims that map to box dims, in view order, and their box-order perm."""
    order = [i for i in range(ndim) if i in sol.assign]
    box_dims = sorted(sol.assign[i] for i in order)
    perm = [box_dims.index(sol.assign[i]) for i in order]
    return order, box_dims, perm


def _flat_indices(sizes, strides, offset):
    idx = np.full((), offset, dtype=np.int64)
    for n, s in zip(sizes, strides):
        idx = idx[..., None] + np.arange(n, dtype=np.int64) * s
    return idx


# ------------------------------------------------------------------ reads


def read_view(x, sizes, strides, offset, dtype):
    """The value of a tensor with this geometry, reading box array `x`.

    `x` is None for a storage never written (its bytes read as zeros)."""
    sizes = tuple(sizes)
    dtype = jnp.dtype(dtype)
    if x is None or 0 in sizes:
        return jnp.zeros(sizes, dtype)
    x = bitcast_box(x, dtype)
    box_shape = x.shape
    numel = math.prod(sizes)
    if offset == 0 and numel == x.size and is_contiguous(sizes, strides):
        return x if box_shape == sizes else x.reshape(sizes)
    sol = solve(box_shape, sizes, strides, offset)
    if sol is None:
        flat = x.reshape(-1)
        return flat[_flat_indices(sizes, strides, offset)]
    if sol.shape != box_shape:
        x = x.reshape(sol.shape)
    if list(sol.counts) != list(sol.shape) or any(st != 1 for st in sol.steps):
        x = lax.slice(x, sol.starts, sol.limits, sol.steps)
    order, box_dims, perm = _view_order(sol, len(sizes))
    x = x.reshape([sol.counts[j] for j in box_dims])
    if perm != sorted(perm):
        x = jnp.transpose(x, perm)
    x = x.reshape([sizes[i] if i in sol.assign else 1 for i in range(len(sizes))])
    if x.shape != sizes:
        x = jnp.broadcast_to(x, sizes)
    return x


# ----------------------------------------------------------------- writes


def dense_order(sizes, strides, offset, itemsize, storage_nbytes):
    """If the tensor covers its whole storage densely (any dim order), the
    non-trivial dims in storage order; else None."""
    if offset != 0 or math.prod(sizes) * itemsize != storage_nbytes:
        return None
    dims = sorted((i for i, n in enumerate(sizes) if n != 1), key=lambda d: -strides[d])
    expected = 1
    for d in reversed(dims):
        if strides[d] != expected:
            return None
        expected *= sizes[d]
    return dims


def write_view(x, storage_nbytes, sizes, strides, offset, value):
    """The box array after writing `value` through a tensor of this geometry.

    `x` is the current box array (None if never written).  The result keeps
    x's dtype and shape where the bytes allow: a write through a view of
    another dtype (`z.imag` of a complex `z`) would otherwise leave the box in
    the view's units, and XLA cannot reuse a donated buffer of another type."""
    written = _written_box(x, storage_nbytes, sizes, strides, offset, value)
    if written is not None and written.size * written.dtype.itemsize > storage_nbytes:  # units padded past the end
        written = bitcast_box(written, jnp.uint8).reshape(-1)[:storage_nbytes]
    return written if x is None else _in_units_of(written, x)


def _in_units_of(box, before):
    """`box` bitcast and reshaped to `before`'s dtype and shape (same bytes);
    not into a bool box, which keeps only 0/1 of each byte."""
    if box.dtype == before.dtype and box.size == before.size:
        return box if box.shape == before.shape else box.reshape(before.shape)
    if box.size * box.dtype.itemsize != before.size * before.dtype.itemsize or before.dtype == jnp.bool_:
        return box
    return bitcast_box(box, before.dtype).reshape(before.shape)


def _written_box(x, storage_nbytes, sizes, strides, offset, value):
    sizes = tuple(sizes)
    dtype = value.dtype
    if 0 in sizes:
        return x
    order = dense_order(sizes, strides, offset, dtype.itemsize, storage_nbytes)
    if order is not None:
        # Whole storage: rebind.  Size-1 dims are dropped from the box (on
        # TPU a trailing unit dim would be padded to a full tile).
        v = value.reshape([sizes[i] for i in sorted(order)])
        ranks = sorted(order)
        perm = [ranks.index(d) for d in order]
        return jnp.transpose(v, perm) if perm != sorted(perm) else v
    if dtype == jnp.bool_ and x is not None and x.dtype != jnp.bool_:
        # Bools go in as bytes: a bool box would keep only 0/1 of the
        # other bytes of the storage.
        value, dtype = value.astype(jnp.uint8), jnp.dtype(jnp.uint8)
    if x is None:
        if storage_nbytes % dtype.itemsize:
            x = jnp.zeros((storage_nbytes,), jnp.uint8)
        else:
            x = jnp.zeros((storage_nbytes // dtype.itemsize,), dtype)
    x = bitcast_box(x, dtype)
    box_shape = x.shape
    # A written broadcast dim keeps one element (several writes to one
    # address; torch rejects most of these before we get here).
    if any(s == 0 and n > 1 for n, s in zip(sizes, strides)):
        keep = tuple(slice(0, 1) if (s == 0 and n > 1) else slice(None) for n, s in zip(sizes, strides))
        value = value[keep]
        sizes = value.shape
    sol = solve(box_shape, sizes, strides, offset)
    if sol is None:
        idx = _flat_indices(sizes, strides, offset).reshape(-1)
        return x.reshape(-1).at[idx].set(value.reshape(-1)).reshape(box_shape)
    order, box_dims, perm = _view_order(sol, len(sizes))
    v = value.reshape([sizes[i] for i in order])
    if perm != sorted(perm):
        v = jnp.transpose(v, np.argsort(perm))
    v = v.reshape(sol.counts)
    y = x.reshape(sol.shape) if sol.shape != box_shape else x
    if all(st == 1 for st in sol.steps):
        y = lax.dynamic_update_slice(y, v, sol.starts)
    else:
        region = tuple(slice(a, b, c) for a, b, c in zip(sol.starts, sol.limits, sol.steps))
        y = y.at[region].set(v)
    return y.reshape(box_shape) if sol.shape != box_shape else y
