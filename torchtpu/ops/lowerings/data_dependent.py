"""Ops whose output shape depends on the data (nonzero, masked_select, unique, boolean indexing): they synchronise, as on CUDA.

Each handler reads the input's value (`materialize`), syncs once for the
output size, and computes the result in a kernel whose output size is static:
either a power-of-two bucket (nonzero, masked_select, bincount,
repeat_interleave: one compilation per bucket, not per count) or the input's
own size (unique*: the sort is O(n) anyway).  The exact-size result is a view
of the padded one, so no further kernel (and no compilation) is needed.

Boolean-mask indexing (`x[mask]`, `x[mask] = v`) turns masks into integer
indices with nonzero and then runs the ordinary integer lowering;
`x[mask] = scalar` runs as masked_fill_ without any sync.
"""

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import torch

from ..dtype_names import c10_name, cpp_name, kernel_not_implemented
from ..registry import lower
from ..schema import schema_of
from ..special import special
from . import indexing

aten = torch.ops.aten


def _bucket(n, cap):
    """Smallest power of two >= n, at most cap (n <= cap)."""
    b = 1
    while b < n:
        b <<= 1
    return max(min(b, cap), n)


def _wrap(array, dtype, device, count=None):
    from ..transfer import wrap

    t = wrap(array, dtype, device)
    return t if count is None or count == t.shape[0] else t[:count]


def _materialize(t):
    from ..transfer import materialize

    return materialize(t)


def _to_out(out, result, dtype_error):
    """Write a data-dependent result to out=; these ATen kernels never cast
    (`dtype_error(result dtype, out dtype)` is their message)."""
    if out.dtype != result.dtype:
        raise RuntimeError(dtype_error(result.dtype, out.dtype))
    out.resize_(result.shape)
    out.copy_(result)
    return out


def _device_of(*tensors):
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.device.type == "tpu":
            return t.device
    return torch.device("tpu", torch.tpu.current_device())


def _same_device(t, device, name):
    """CPU operands: scalars move, anything else is a device mismatch."""
    if t.device == device:
        return t
    if t.device.type == "cpu" and t.dim() == 0:
        return t.to(device)
    raise RuntimeError(
        f"Expected all tensors to be on the same device, but found at least two devices, {device} and "
        f"{t.device}! (when checking argument {name})"
    )


# ----------------------------------------------------------- nonzero


@jax.jit
def _count_nonzero(x):
    return jnp.count_nonzero(x)


@functools.partial(jax.jit, static_argnums=1)
def _nonzero_kernel(x, size):
    return jnp.stack(jnp.nonzero(x, size=size, fill_value=0), axis=1).astype(jnp.int64)


def nonzero_tensor(self):
    """nonzero of a tpu tensor: a (count, ndim) int64 tpu tensor."""
    device = self.device.index
    x = _materialize(self)
    if self.dim() == 0:
        count = int(np.asarray(x) != 0)
        return torch.zeros((count, 0), dtype=torch.long, device=self.device)
    count = int(_count_nonzero(x))
    if count == 0:
        return torch.empty((0, self.dim()), dtype=torch.long, device=self.device)
    size = _bucket(count, x.size)
    return _wrap(_nonzero_kernel(x, size), torch.long, device, count)


@special(aten.nonzero.default)
def nonzero(self):
    return nonzero_tensor(self)


@special(aten.nonzero.out)
def nonzero_out(self, *, out):
    return _to_out(out, nonzero_tensor(self),
                   lambda want, got: f"nonzero: Expected out tensor to have scalar type {c10_name(want)} but got "
                                     f"scalar type{c10_name(got)}")


@lower(aten.nonzero_static.default, aten.nonzero_static.out)
def nonzero_static(ctx, self, size, fill_value=-1):
    if self.ndim == 0 or self.size == 0:  # (JAX fills an empty input's rows with 0)
        return jnp.full((size, self.ndim), fill_value, jnp.int64)
    return jnp.stack(jnp.nonzero(self, size=size, fill_value=fill_value), axis=1).astype(jnp.int64)


# ------------------------------------------------------ masked_select


@functools.partial(jax.jit, static_argnums=(2, 3))
def _masked_select_kernel(x, mask, shape, size):
    x = jnp.broadcast_to(x, shape).reshape(-1)
    mask = jnp.broadcast_to(mask, shape).reshape(-1)
    (idx,) = jnp.nonzero(mask, size=size, fill_value=0)
    return x[idx]


@jax.jit
def _count_mask(mask, x):
    return jnp.count_nonzero(jnp.broadcast_to(mask, jnp.broadcast_shapes(mask.shape, x.shape)))


def masked_select_tensor(self, mask):
    if mask.dtype != torch.bool:
        raise RuntimeError("masked_select: expected BoolTensor for mask")
    device = _device_of(self, mask)
    self = _same_device(self, device, "self")
    mask = _same_device(mask, device, "mask")
    shape = tuple(torch.broadcast_shapes(self.shape, mask.shape))
    x = _materialize(self)
    m = _materialize(mask)
    count = int(_count_mask(m, x))
    if count == 0:
        return torch.empty((0,), dtype=self.dtype, device=device)
    size = _bucket(count, int(np.prod(shape)))
    return _wrap(_masked_select_kernel(x, m, shape, size), self.dtype, device.index, count)


@special(aten.masked_select.default)
def masked_select(self, mask):
    return masked_select_tensor(self, mask)


@special(aten.masked_select.out)
def masked_select_out(self, mask, *, out):
    return _to_out(out, masked_select_tensor(self, mask),
                   lambda want, got: "masked_select(): self and result must have the same scalar type")


# -------------------------------------------------- boolean indexing

_MASK_DTYPES = (torch.bool, torch.uint8)
_INDEX_DTYPES = (torch.int64, torch.int32)


def _mask_error(mask, self, j, d):
    return IndexError(
        f"The shape of the mask {list(mask.shape)} at index {j} does not match the shape of the "
        f"indexed tensor {list(self.shape)} at index {d}"
    )


def _check_mask(mask, self, d):
    if d + mask.dim() > self.dim():
        raise IndexError(f"too many indices for tensor of dimension {self.dim()}")
    for j in range(mask.dim()):
        if mask.shape[j] != self.shape[d + j]:
            raise _mask_error(mask, self, j, d + j)


def _warn_uint8(idx):
    if idx.dtype == torch.uint8:
        warnings.warn(
            "indexing with dtype torch.uint8 is now deprecated, please use a dtype torch.bool instead.",
            UserWarning,
            stacklevel=4,
        )


def _prepare_indices(self, indices):
    """Indices for the integer lowering: masks -> nonzero columns, host index
    tensors -> device (the lowering range-checks them on the device).
    Returns a list or None if the call needs the CPU (a 0-dim mask)."""
    device = self.device
    out = []
    d = 0
    for idx in indices:
        if idx is None:
            out.append(None)
            d += 1
            continue
        if idx.dtype in _MASK_DTYPES:
            if idx.dim() == 0:
                return None
            _warn_uint8(idx)
            _check_mask(idx, self, d)
            mask = idx if idx.dtype == torch.bool else idx.bool()
            if mask.device.type == "cpu":
                coords = mask.nonzero().to(device)  # host mask: no device sync
            else:
                coords = nonzero_tensor(mask)
            out.extend(coords.select(1, j) for j in range(idx.dim()))
            d += idx.dim()
            continue
        if idx.dtype not in _INDEX_DTYPES:
            raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
        if idx.device != device and idx.dim() > 0:
            idx = idx.to(device)
        out.append(idx)
        d += 1
    if d > self.dim():
        raise IndexError(f"too many indices for tensor of dimension {self.dim()}")
    return out


def _index_handler(op):
    sch = schema_of(op)

    def handler(*args, **kwargs):
        from .. import dispatch, fallback

        values = sch.normalize(args, kwargs)
        self, indices = values[0], values[1]
        new = _prepare_indices(self, list(indices))
        if new is None:
            return fallback.run_on_cpu(op, args, kwargs)
        values[1] = new
        return dispatch.run(op, values, {})

    return handler


def _plain_indices(put=False):
    """generic_when: integer indices on the device (for puts, with matching
    dtypes, which ATen's meta kernel does not check) make an ordinary kernel
    call."""

    def predicate(*args, **kwargs):
        indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
        # masks, and index dtypes ATen rejects (the handler raises its IndexError)
        if any(i is not None and i.dtype not in _INDEX_DTYPES for i in indices):
            return False
        if put:
            values = args[2] if len(args) > 2 else kwargs.get("values")
            if values.dtype != args[0].dtype or values.device != args[0].device:
                return False
        return not indexing.has_host_tensor(args, kwargs)

    return predicate


for _op in (aten.index.Tensor, aten.index.Tensor_out):
    special(_op, generic_when=_plain_indices())(_index_handler(_op))
special(aten._unsafe_index.Tensor, generic_when=_plain_indices())(_index_handler(aten._unsafe_index.Tensor))


def _masked_fill_fast_path(op, self, indices, values, accumulate):
    """`x[..., mask, ...] = scalar` as masked_fill (no sync); None if it does not apply."""
    if accumulate or values.numel() != 1 or values.dtype != self.dtype:
        return None
    present = [i for i, idx in enumerate(indices) if idx is not None]
    if len(present) != 1:
        return None
    d = present[0]
    mask = indices[d]
    if mask.dtype not in _MASK_DTYPES or mask.dim() == 0:
        return None
    if values.dim() > self.dim() - mask.dim() + 1:
        return None  # let the general path raise ATen's shape-mismatch error
    _warn_uint8(mask)
    _check_mask(mask, self, d)
    mask = mask.to(self.device) if mask.device != self.device else mask
    if mask.dtype != torch.bool:
        mask = mask.bool()
    mask = mask.reshape((1,) * d + tuple(mask.shape) + (1,) * (self.dim() - d - mask.dim()))
    value = values.reshape(())  # (on self's device: the handler moved it)
    inplace = op._schema.name.endswith("_")
    return self.masked_fill_(mask, value) if inplace else self.masked_fill(mask, value)


def _index_put_handler(op):
    sch = schema_of(op)
    is_out = any(a.is_out for a in op._schema.arguments)

    def handler(*args, **kwargs):
        from .. import dispatch, fallback

        values = sch.normalize(args, kwargs)
        self, indices, vals = values[0], list(values[1]), values[2]
        accumulate = values[3] if len(values) > 3 else False
        if vals.device != self.device:
            # ATen moves a 0-dim value to self's device (`cpu_losses[idx] = loss`)
            if vals.dim() != 0:
                raise dispatch.device_mismatch(self.device, vals.device)
            vals = values[2] = vals.to(self.device)
            if self.device.type != "tpu":
                return op(*values)
        if vals.dtype != self.dtype:
            raise RuntimeError(
                f"Index put requires the source and destination dtypes match, got "
                f"{_type_name(self.dtype)} for the destination and {_type_name(vals.dtype)} for the source."
            )
        if not is_out:
            done = _masked_fill_fast_path(op, self, indices, vals, accumulate)
            if done is not None:
                return done
        new = _prepare_indices(self, indices)
        if new is None:
            return fallback.run_on_cpu(op, args, kwargs)
        values[1] = new
        return dispatch.run(op, values, {})

    return handler


def _type_name(dtype):
    return {
        torch.float32: "Float",
        torch.float64: "Double",
        torch.float16: "Half",
        torch.bfloat16: "BFloat16",
        torch.int64: "Long",
        torch.int32: "Int",
        torch.int16: "Short",
        torch.int8: "Char",
        torch.uint8: "Byte",
        torch.bool: "Bool",
    }.get(dtype, str(dtype))


for _op in (
    aten.index_put.default,
    aten.index_put.out,
    aten.index_put_.default,
    aten._index_put_impl.default,
    aten._index_put_impl.out,
    aten._index_put_impl_.default,
):
    special(_op, generic_when=_plain_indices(put=True))(_index_put_handler(_op))
special(aten._unsafe_index_put.default, generic_when=_plain_indices(put=True))(
    _index_put_handler(aten._unsafe_index_put.default)
)


# ------------------------------------------------------------ unique


@functools.partial(jax.jit, static_argnums=1)
def _unique_flat_kernel(x, consecutive):
    """Sorted (or consecutive) unique of the flattened x, padded to x.size."""
    flat = x.reshape(-1)
    n = flat.shape[0]
    if consecutive:
        perm = jnp.arange(n)
        s = flat
    else:
        perm = jnp.argsort(flat, stable=True)
        s = flat[perm]
    new = jnp.concatenate([jnp.ones((1,), jnp.bool_), s[1:] != s[:-1]])
    count = jnp.count_nonzero(new)
    group = jnp.cumsum(new.astype(jnp.int64)) - 1
    (starts,) = jnp.nonzero(new, size=n, fill_value=n)
    values = s[jnp.minimum(starts, n - 1)]
    inverse = jnp.zeros((n,), jnp.int64).at[perm].set(group).reshape(x.shape)
    counts = jnp.concatenate([starts[1:], jnp.array([n])]) - starts
    counts = jnp.where(starts < n, counts, 0)
    return count, values, inverse, counts


def _rows_differ(a, b):
    return jnp.any(a != b, axis=tuple(range(1, a.ndim))) if a.ndim > 1 else a != b


@functools.partial(jax.jit, static_argnums=(1, 2))
def _unique_dim_kernel(x, dim, consecutive):
    """Unique slices along dim (lexicographic order), padded to x.shape[dim]."""
    moved = jnp.moveaxis(x, dim, 0)
    n = moved.shape[0]
    rows = moved.reshape(n, -1)
    if consecutive or rows.shape[1] == 0:
        perm = jnp.arange(n)
    else:
        keys = rows if rows.dtype != jnp.bool_ else rows.astype(jnp.uint8)
        # lax.sort compares the operands lexicographically (first column first).
        operands = [keys[:, j] for j in range(keys.shape[1])] + [jnp.arange(n)]
        perm = jax.lax.sort(operands, num_keys=keys.shape[1], is_stable=True)[-1]
    s = rows[perm]
    new = jnp.concatenate([jnp.ones((1,), jnp.bool_), _rows_differ(s[1:], s[:-1])])
    count = jnp.count_nonzero(new)
    group = jnp.cumsum(new.astype(jnp.int64)) - 1
    (starts,) = jnp.nonzero(new, size=n, fill_value=n)
    values = moved[perm][jnp.minimum(starts, n - 1)]
    values = jnp.moveaxis(values, 0, dim)
    inverse = jnp.zeros((n,), jnp.int64).at[perm].set(group)
    counts = jnp.concatenate([starts[1:], jnp.array([n])]) - starts
    counts = jnp.where(starts < n, counts, 0)
    return count, values, inverse, counts


def _empty_long(device, shape=(0,)):
    return torch.empty(shape, dtype=torch.long, device=device)


def _no_complex_unique(kernel_name, self):
    # ATen's unique kernels have no complex version (no ordering)
    if self.is_complex():
        raise kernel_not_implemented(kernel_name, self.dtype)


def _unique_flat(self, consecutive, return_inverse, return_counts):
    _no_complex_unique("unique", self)
    device = self.device
    if self.numel() == 0:
        inverse = _empty_long(device, self.shape) if return_inverse else _empty_long(device)
        return torch.empty((0,), dtype=self.dtype, device=device), inverse, _empty_long(device)
    count, values, inverse, counts = _unique_flat_kernel(_materialize(self), consecutive)
    count = int(count)
    idx = device.index
    out_values = _wrap(values, self.dtype, idx, count)
    out_inverse = _wrap(inverse, torch.long, idx) if return_inverse else _empty_long(device)
    out_counts = _wrap(counts, torch.long, idx, count) if return_counts else _empty_long(device)
    return out_values, out_inverse, out_counts


def _unique_along(self, dim, consecutive):
    _no_complex_unique("unique_dim", self)
    device = self.device
    dim = indexing.wrap_dim(dim, self.dim())
    if self.dim() == 0:
        raise IndexError("unique_dim: dim out of range for a 0-dim tensor")
    n = self.shape[dim]
    if self.numel() == 0:
        return torch.empty(self.shape, dtype=self.dtype, device=device), _empty_long(device, (n,)), _empty_long(device)
    count, values, inverse, counts = _unique_dim_kernel(_materialize(self), dim, consecutive)
    count = int(count)
    idx = device.index
    out_values = _wrap(values, self.dtype, idx)
    out_values = out_values.narrow(dim, 0, count) if count != n else out_values
    return out_values, _wrap(inverse, torch.long, idx), _wrap(counts, torch.long, idx, count)


@special(aten._unique2.default)
def unique2(self, sorted=True, return_inverse=False, return_counts=False):
    # Like CUDA, the result is always sorted.
    return _unique_flat(self, False, return_inverse, return_counts)


@special(aten.unique_dim.default)
def unique_dim(self, dim, sorted=True, return_inverse=False, return_counts=False):
    return _unique_along(self, dim, False)


@special(aten.unique_consecutive.default)
def unique_consecutive(self, return_inverse=False, return_counts=False, dim=None):
    if dim is None:
        return _unique_flat(self, True, return_inverse, return_counts)
    return _unique_along(self, dim, True)


# ---------------------------------------------------------- bincount


@jax.jit
def _bincount_stats(x):
    return jnp.stack([jnp.min(x), jnp.max(x)]).astype(jnp.int64)


@functools.partial(jax.jit, static_argnums=2)
def _bincount_kernel(x, weights, size):
    if weights is None:
        return jnp.zeros((size,), jnp.int64).at[x].add(1, mode="drop")
    dtype = jnp.float32 if weights.dtype == jnp.float32 else jnp.float64
    return jnp.zeros((size,), dtype).at[x].add(weights.astype(dtype), mode="drop")


def _bincount_dtype(weights):
    if weights is None:
        return torch.long
    return torch.float32 if weights.dtype == torch.float32 else torch.float64


@special(aten.bincount.default)
def bincount(self, weights=None, minlength=0):
    if self.dtype.is_floating_point or self.dtype.is_complex or self.dtype == torch.bool:
        raise kernel_not_implemented("bincount_cpu", self.dtype)  # (ATen's integral-type dispatch)
    if self.dim() != 1:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    if weights is not None and (weights.dim() != 1 or weights.shape[0] != self.shape[0]):
        raise RuntimeError("weights should be 1-d and have the same length as input")
    device = self.device
    if self.numel() == 0:  # int64 whatever the weights, as ATen
        return torch.zeros((minlength,), dtype=torch.int64, device=device)
    dtype = _bincount_dtype(weights)
    x = _materialize(self)
    lo, hi = (int(v) for v in np.asarray(_bincount_stats(x)))
    if lo < 0:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    length = max(hi + 1, minlength)
    size = _bucket(length, 1 << 62)
    w = None if weights is None else _materialize(_same_device(weights, device, "weights"))
    return _wrap(_bincount_kernel(x, w, size), dtype, device.index, length)


# ------------------------------------------------ repeat_interleave


@jax.jit
def _repeats_stats(r):
    return jnp.stack([jnp.sum(r), jnp.min(r)]).astype(jnp.int64)


@functools.partial(jax.jit, static_argnums=1)
def _repeat_interleave_kernel(repeats, size):
    n = repeats.shape[0]
    return jnp.repeat(jnp.arange(n, dtype=jnp.int64), repeats, total_repeat_length=size)


def repeat_interleave_tensor(repeats, output_size=None):
    if repeats.dim() > 1:
        raise RuntimeError("repeat_interleave only accept 1D vector as repeat")
    if repeats.dtype not in (torch.int64, torch.int32):
        raise RuntimeError("repeats has to be Long or Int tensor")
    repeats = repeats.reshape(-1)
    device = repeats.device
    if repeats.numel() == 0:
        return torch.empty((0,), dtype=repeats.dtype, device=device)
    r = _materialize(repeats)
    if output_size is None:
        total, low = (int(v) for v in np.asarray(_repeats_stats(r)))
        if low < 0:
            raise RuntimeError("repeats can not be negative")
        size = _bucket(total, 1 << 62)
    else:
        total = size = int(output_size)
    if total == 0:
        return torch.empty((0,), dtype=repeats.dtype, device=device)
    out = _repeat_interleave_kernel(r, size).astype(jnp.dtype(r.dtype))
    return _wrap(out, repeats.dtype, device.index, total)


@special(aten.repeat_interleave.Tensor)
def repeat_interleave(repeats, output_size=None):
    return repeat_interleave_tensor(repeats, output_size)


@special(aten.repeat_interleave.Tensor_out)
def repeat_interleave_out(repeats, *, output_size=None, out):
    return _to_out(out, repeat_interleave_tensor(repeats, output_size),
                   lambda want, got: f"Expected out tensor to have dtype {cpp_name(want)}, but got "
                                     f"{cpp_name(got)} instead")


# ------------------------------------------------------------ equal


@special(aten.equal.default)
def equal(self, other):
    """A Python bool: synchronises (as on CUDA)."""
    if self.shape != other.shape:
        return False
    if self.device != other.device:
        raise RuntimeError(
            f"Expected all tensors to be on the same device, but found at least two devices, {self.device} and "
            f"{other.device}!"
        )
    return bool(torch.eq(self, other).all().item())
