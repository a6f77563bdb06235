"""Pooling: max/avg (with indices and backward), adaptive.

All pooling ops work on the last `nd` dims (1, 2 or 3) of a batched or
unbatched input.  Window geometry is static, so it is computed with numpy at
trace time: window positions, padding masks, divisors, initial indices.

Max pooling scans each window in torch's order (row-major over the kernel)
and keeps a candidate when `value > best or isnan(value)`, starting from
-inf at the window's first in-bounds position; that reproduces torch's
values *and* indices (first maximum wins; NaN propagates, last NaN wins).
Indices are flat positions within each input plane (D*H*W).  The backward
ops scatter-add grad_output at those indices.
"""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from ..registry import lower
from .common import acc_dtype
from .reductions import reject

aten = torch.ops.aten





def _tuple(v, nd):
    v = (v,) if isinstance(v, int) else tuple(v)
    return v * nd if len(v) == 1 else v


def _lowest(dtype):
    dtype = jnp.dtype(dtype)
    if jnp.issubdtype(dtype, jnp.floating):
        return jnp.array(-jnp.inf, dtype)
    if dtype == jnp.bool_:
        return jnp.array(False)
    return jnp.array(jnp.iinfo(dtype).min, dtype)


def _plane_strides(spatial):
    """Row-major strides of a D*H*W plane."""
    strides = []
    acc = 1
    for size in reversed(spatial):
        strides.append(acc)
        acc *= size
    return tuple(reversed(strides))


def _outer_sum(arrays):
    """sum_i arrays[i] broadcast along its own axis: an nd grid."""
    nd = len(arrays)
    total = 0
    for i, a in enumerate(arrays):
        shape = [1] * nd
        shape[i] = -1
        total = total + np.asarray(a).reshape(shape)
    return total


def _outer_and(arrays):
    nd = len(arrays)
    total = True
    for i, a in enumerate(arrays):
        shape = [1] * nd
        shape[i] = -1
        total = total & np.asarray(a).reshape(shape)
    return total


def _select_max(candidates, init_index, dtype):
    """Scan (values, valid, index) candidates in window order, as torch does."""
    best = None
    best_index = None
    floating = jnp.issubdtype(dtype, jnp.floating)
    for values, valid, index in candidates:
        if best is None:
            best = jnp.broadcast_to(_lowest(dtype), values.shape)
            best_index = jnp.broadcast_to(jnp.asarray(init_index, jnp.int64), values.shape)
        take = values > best
        if floating:
            take = take | jnp.isnan(values)
        if not np.all(valid):
            take = take & jnp.asarray(valid)
        best = jnp.where(take, values, best)
        best_index = jnp.where(take, jnp.asarray(index, jnp.int64), best_index)
    return best, best_index


def _scatter_to_plane(grad_output, indices, input_shape, nd):
    """grad_input: grad_output added at `indices` (flat per plane)."""
    acc = acc_dtype(grad_output.dtype)
    lead = input_shape[: len(input_shape) - nd]
    plane = int(np.prod(input_shape[len(input_shape) - nd :], dtype=np.int64))
    batch = int(np.prod(lead, dtype=np.int64))
    n_out = int(np.prod(grad_output.shape[len(lead):], dtype=np.int64))  # (not -1: an empty batch)
    g = grad_output.astype(acc).reshape(batch, n_out)
    idx = indices.reshape(batch, n_out)
    rows = jnp.arange(batch)[:, None]
    out = jnp.zeros((batch, plane), acc).at[rows, idx].add(g, mode="drop")
    return out.reshape(input_shape)


# ------------------------------------------------------------------ max pool


def _max_pool(x, kernel_size, stride, padding, dilation, out_spatial, nd):
    k = _tuple(kernel_size, nd)
    s = _tuple(stride, nd) if stride else k
    p = _tuple(padding, nd)
    d = _tuple(dilation, nd)
    spatial = x.shape[x.ndim - nd :]
    lead = x.ndim - nd
    # Pad enough that every window position can be sliced; the padding is
    # masked out, so its value does not matter.
    pads = []
    for L, o, kk, ss, pp, dd in zip(spatial, out_spatial, k, s, p, d):
        hi = max(0, (o - 1) * ss + (kk - 1) * dd + 1 - (L + pp))
        pads.append((pp, hi))
    xp = jnp.pad(x, [(0, 0)] * lead + pads)
    plane_strides = _plane_strides(spatial)

    # First in-bounds position of each window (torch's initial index).
    starts = []
    for L, o, ss, pp, dd in zip(spatial, out_spatial, s, p, d):
        st = np.arange(o) * ss - pp
        st = np.where(st < 0, st + ((-st + dd - 1) // dd) * dd, st)
        starts.append(st)
    init_index = _outer_sum([st * ps for st, ps in zip(starts, plane_strides)])

    def candidates():
        for offset in itertools.product(*[range(kk) for kk in k]):
            positions = [np.arange(o) * ss - pp + off * dd for o, ss, pp, dd, off in zip(out_spatial, s, p, d, offset)]
            valid = _outer_and([(pos >= 0) & (pos < L) for pos, L in zip(positions, spatial)])
            index = _outer_sum([pos * ps for pos, ps in zip(positions, plane_strides)])
            slices = [slice(None)] * lead
            for o, ss, dd, off in zip(out_spatial, s, d, offset):
                start = off * dd
                slices.append(slice(start, start + (o - 1) * ss + 1, ss))
            yield xp[tuple(slices)], valid, index

    return _select_max(candidates(), init_index, x.dtype)


@lower(aten.max_pool2d_with_indices)
def max_pool2d_with_indices(ctx, self, kernel_size, stride=(), padding=(0,), dilation=(1,), ceil_mode=False):
    return _max_pool(self, kernel_size, stride, padding, dilation, ctx.out_shape[-2:], 2)


@lower(aten.max_pool3d_with_indices)
def max_pool3d_with_indices(ctx, self, kernel_size, stride=(), padding=(0,), dilation=(1,), ceil_mode=False):
    return _max_pool(self, kernel_size, stride, padding, dilation, ctx.out_shape[-3:], 3)


@lower(aten.max_pool2d_with_indices_backward)
def max_pool2d_with_indices_backward(ctx, grad_output, self, *geometry_and_indices):
    # (kernel_size, stride, padding, dilation, ceil_mode, indices): the indices say it all
    return _scatter_to_plane(grad_output, geometry_and_indices[-1], self.shape, 2)


@lower(aten.max_pool3d_with_indices_backward)
def max_pool3d_with_indices_backward(ctx, grad_output, self, *geometry_and_indices):
    return _scatter_to_plane(grad_output, geometry_and_indices[-1], self.shape, 3)


# ------------------------------------------------------------------ avg pool


def _avg_geometry(spatial, out_spatial, k, s, p, count_include_pad, divisor_override):
    """Padding for the window sums and the static divisor grid."""
    pads = []
    include, exclude = [], []
    for L, o, kk, ss, pp in zip(spatial, out_spatial, k, s, p):
        hi = max(0, (o - 1) * ss + kk - (L + pp))
        pads.append((pp, hi))
        start = np.arange(o) * ss - pp
        end = np.minimum(start + kk, L + pp)
        include.append(end - start)
        exclude.append(np.minimum(end, L) - np.maximum(start, 0))
    if divisor_override:
        divisor = np.full(tuple(out_spatial), divisor_override, np.int64)
    else:
        sizes = include if count_include_pad else exclude
        divisor = np.ones(tuple(out_spatial), np.int64)
        for i, sz in enumerate(sizes):
            shape = [1] * len(sizes)
            shape[i] = -1
            divisor = divisor * sz.reshape(shape)
    return pads, divisor


def _window_sum(x, k, s, pads):
    lead = x.ndim - len(k)
    return lax.reduce_window(
        x,
        np.zeros((), x.dtype),  # a concrete 0: lets JAX see a differentiable window sum
        lax.add,
        window_dimensions=(1,) * lead + tuple(k),
        window_strides=(1,) * lead + tuple(s),
        padding=((0, 0),) * lead + tuple(pads),
    )


def _avg_args(kernel_size, stride, padding, nd):
    k = _tuple(kernel_size, nd)
    s = _tuple(stride, nd) if stride else k
    p = _tuple(padding, nd)
    return k, s, p


def _avg_pool(ctx, x, kernel_size, stride, padding, count_include_pad, divisor_override, nd):
    k, s, p = _avg_args(kernel_size, stride, padding, nd)
    out_spatial = ctx.out_shape[-nd:]
    pads, divisor = _avg_geometry(x.shape[-nd:], out_spatial, k, s, p, count_include_pad, divisor_override)
    acc = acc_dtype(x.dtype)
    total = _window_sum(x.astype(acc), k, s, pads)
    divisor = jnp.broadcast_to(jnp.asarray(divisor, acc), total.shape)
    if jnp.issubdtype(acc, jnp.integer):
        return lax.div(total, divisor)  # truncates, as torch's integer kernels do
    return total / divisor


def _avg_pool_backward(grad_output, x, kernel_size, stride, padding, count_include_pad, divisor_override, nd):
    k, s, p = _avg_args(kernel_size, stride, padding, nd)
    out_spatial = grad_output.shape[-nd:]
    pads, divisor = _avg_geometry(x.shape[-nd:], out_spatial, k, s, p, count_include_pad, divisor_override)
    acc = acc_dtype(grad_output.dtype)
    g = grad_output.astype(acc) / jnp.asarray(divisor, acc)
    _, vjp = jax.vjp(lambda v: _window_sum(v, k, s, pads), jnp.zeros(x.shape, acc))
    return vjp(g)[0]


@lower(aten.avg_pool2d)
def avg_pool2d(
    ctx, self, kernel_size, stride=(), padding=(0,), ceil_mode=False, count_include_pad=True, divisor_override=None
):
    return _avg_pool(ctx, self, kernel_size, stride, padding, count_include_pad, divisor_override, 2)


@lower(aten.avg_pool3d)
def avg_pool3d(
    ctx, self, kernel_size, stride=(), padding=(0,), ceil_mode=False, count_include_pad=True, divisor_override=None
):
    return _avg_pool(ctx, self, kernel_size, stride, padding, count_include_pad, divisor_override, 3)


@lower(aten.avg_pool2d_backward)
def avg_pool2d_backward(
    ctx, grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override
):
    return _avg_pool_backward(grad_output, self, kernel_size, stride, padding, count_include_pad, divisor_override, 2)


@lower(aten.avg_pool3d_backward)
def avg_pool3d_backward(
    ctx, grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override
):
    return _avg_pool_backward(grad_output, self, kernel_size, stride, padding, count_include_pad, divisor_override, 3)


# ------------------------------------------------------------- adaptive pool


def _adaptive_windows(L, O):
    """torch's adaptive windows: [floor(i*L/O), ceil((i+1)*L/O))."""
    i = np.arange(O)
    start = (i * L) // O
    end = ((i + 1) * L + O - 1) // O
    return start, end


def _membership(L, O):
    """(O, L) 0/1 matrix: which inputs each adaptive window covers."""
    start, end = _adaptive_windows(L, O)
    pos = np.arange(L)
    return ((pos[None, :] >= start[:, None]) & (pos[None, :] < end[:, None])).astype(np.float32), end - start


def _contract_spatial(x, matrices, nd):
    """Apply one (O_i, L_i) matrix along each of the last nd dims."""
    lead = x.ndim - nd
    for i, m in enumerate(matrices):
        axis = lead + i
        # 0/1 matrices at HIGHEST precision: exact products, float32 sums
        summed = jnp.tensordot(x, jnp.asarray(m, x.dtype), axes=((axis,), (1,)), precision=lax.Precision.HIGHEST)
        x = jnp.moveaxis(summed, -1, axis)
    return x


def _check_nonempty(name, x, nd):
    """ATen's check on the spatial dims (the meta kernel skips it for the
    average pools; an empty window would divide by zero)."""
    for dim in range(x.ndim - nd, x.ndim):
        if x.shape[dim] == 0:
            raise RuntimeError(
                f"{name}(): Expected input to have non-zero size for non-batch dimensions, but input has sizes "
                f"{list(x.shape)} with dimension {dim} being empty"
            )


def _adaptive_avg(ctx, x, nd):
    out_spatial = ctx.out_shape[-nd:]
    acc = acc_dtype(x.dtype)
    mats, counts = zip(*[_membership(L, O) for L, O in zip(x.shape[-nd:], out_spatial)])
    total = _contract_spatial(x.astype(acc), mats, nd)
    return total / jnp.asarray(_outer_prod(counts), acc)


def _adaptive_avg_backward(grad_output, x, nd):
    out_spatial = grad_output.shape[-nd:]
    acc = acc_dtype(grad_output.dtype)
    mats, counts = zip(*[_membership(L, O) for L, O in zip(x.shape[-nd:], out_spatial)])
    g = grad_output.astype(acc) / jnp.asarray(_outer_prod(counts), acc)
    return _contract_spatial(g, [m.T for m in mats], nd)


def _outer_prod(arrays):
    nd = len(arrays)
    total = np.ones((1,) * nd, np.int64)
    for i, a in enumerate(arrays):
        shape = [1] * nd
        shape[i] = -1
        total = total * np.asarray(a).reshape(shape)
    return total


# ATen's adaptive pooling kernels are floating-point only (the CPU and
# CUDA ones alike): integer inputs raise rather than overflow a sum.
_NOT_FLOAT = ("int", "bool")


@lower(aten._adaptive_avg_pool2d)
def adaptive_avg_pool2d(ctx, self, output_size):
    reject("adaptive_avg_pool2d", self.dtype, _NOT_FLOAT)
    _check_nonempty("adaptive_avg_pool2d", self, 2)
    return _adaptive_avg(ctx, self, 2)


@lower(aten._adaptive_avg_pool3d)
def adaptive_avg_pool3d(ctx, self, output_size):
    reject("adaptive_avg_pool3d_cpu", self.dtype, _NOT_FLOAT)
    _check_nonempty("adaptive_avg_pool3d", self, 3)
    return _adaptive_avg(ctx, self, 3)


@lower(aten._adaptive_avg_pool2d_backward)
def adaptive_avg_pool2d_backward(ctx, grad_output, self):
    return _adaptive_avg_backward(grad_output, self, 2)


@lower(aten._adaptive_avg_pool3d_backward)
def adaptive_avg_pool3d_backward(ctx, grad_output, self):
    return _adaptive_avg_backward(grad_output, self, 3)


def _adaptive_max(ctx, x, nd):
    out_spatial = ctx.out_shape[-nd:]
    spatial = x.shape[-nd:]
    lead = x.ndim - nd
    if 0 in out_spatial:  # no windows to scan: empty values and indices
        return jnp.zeros(ctx.out_shape, x.dtype), jnp.zeros(ctx.out_shape, jnp.int64)
    windows = [_adaptive_windows(L, O) for L, O in zip(spatial, out_spatial)]
    widths = [int(np.max(end - start)) for start, end in windows]
    plane_strides = _plane_strides(spatial)
    init_index = _outer_sum([start * ps for (start, _), ps in zip(windows, plane_strides)])

    def candidates():
        for offset in itertools.product(*[range(w) for w in widths]):
            positions = [start + off for (start, _), off in zip(windows, offset)]
            valid = _outer_and([pos < end for pos, (_, end) in zip(positions, windows)])
            index = _outer_sum([pos * ps for pos, ps in zip(positions, plane_strides)])
            values = x
            for i, (pos, L) in enumerate(zip(positions, spatial)):
                values = jnp.take(values, jnp.asarray(np.minimum(pos, L - 1)), axis=lead + i)
            yield values, valid, index

    return _select_max(candidates(), init_index, x.dtype)


@lower(aten.adaptive_max_pool2d)
def adaptive_max_pool2d(ctx, self, output_size):
    reject("adaptive_max_pool2d", self.dtype, _NOT_FLOAT)
    return _adaptive_max(ctx, self, 2)


@lower(aten.adaptive_max_pool3d)
def adaptive_max_pool3d(ctx, self, output_size):
    reject("adaptive_max_pool3d_cpu", self.dtype, _NOT_FLOAT)
    return _adaptive_max(ctx, self, 3)


@lower(aten.adaptive_max_pool2d_backward)
def adaptive_max_pool2d_backward(ctx, grad_output, self, indices):
    return _scatter_to_plane(grad_output, indices, self.shape, 2)


@lower(aten.adaptive_max_pool3d_backward)
def adaptive_max_pool3d_backward(ctx, grad_output, self, indices):
    return _scatter_to_plane(grad_output, indices, self.shape, 3)


# ------------------------------------------------------ fractional max pooling


def _fractional_starts(u, n_in, n_out, k):
    """ATen's generate_intervals for every plane: window starts (..., n_out)
    from the plane's sample u in [0, 1), in the input dtype as ATen."""
    if n_out == 0:
        return jnp.zeros(u.shape + (0,), jnp.int64)
    alpha = (jnp.asarray(n_in - k, u.dtype) / jnp.asarray(max(n_out - 1, 1), u.dtype)).astype(u.dtype)
    i = jnp.arange(n_out - 1, dtype=u.dtype)
    starts = ((i + u[..., None]) * alpha).astype(jnp.int64) - (u * alpha).astype(jnp.int64)[..., None]
    last = jnp.full(u.shape + (1,), n_in - k, jnp.int64)
    return jnp.concatenate([starts, last], axis=-1)


def _fractional_max_pool(x, kernel_size, output_size, samples):
    """x (..., C, *spatial), samples (N or 1, C, nd): (values, indices into
    each plane's flattened spatial dims), first maximum of each window."""
    nd = len(kernel_size)
    spatial = x.shape[-nd:]
    planes = x.reshape(-1, math.prod(spatial))
    u = samples.reshape(-1, nd)
    order = (1, 0) if nd == 2 else (0, 1, 2)  # ATen's sample order: 2-d (w, h); 3-d (t, h, w)
    strides = [math.prod(spatial[d + 1:]) for d in range(nd)]
    flat = 0
    for d in range(nd):
        starts = _fractional_starts(u[:, order[d]], spatial[d], output_size[d], kernel_size[d])  # (P, out_d)
        pos = starts[:, :, None] + jnp.arange(kernel_size[d])  # (P, out_d, k_d)
        shape = [pos.shape[0]] + [1] * (2 * nd)
        shape[1 + d], shape[1 + nd + d] = output_size[d], kernel_size[d]
        flat = flat + pos.reshape(shape) * strides[d]
    flat = flat.reshape(flat.shape[0], math.prod(output_size), -1)  # (P, out, window)
    vals = planes[jnp.arange(planes.shape[0])[:, None, None], flat]
    best = jnp.argmax(vals, axis=-1)
    out = jnp.take_along_axis(vals, best[..., None], axis=-1)[..., 0]
    idx = jnp.take_along_axis(flat, best[..., None], axis=-1)[..., 0]
    out_shape = x.shape[:-nd] + tuple(output_size)
    return out.reshape(out_shape), idx.reshape(out_shape).astype(jnp.int64)


def _fractional_forward(ctx, self, kernel_size, output_size, random_samples):
    return _fractional_max_pool(self, tuple(kernel_size), tuple(output_size), random_samples)


def _fractional_backward(ctx, grad_output, self, kernel_size, output_size, indices):
    nd = len(kernel_size)
    planes = math.prod(self.shape[:-nd])
    g = grad_output.reshape(planes, -1)
    idx = indices.reshape(planes, -1)
    grad = jnp.zeros((planes, math.prod(self.shape[-nd:])), grad_output.dtype)
    grad = grad.at[jnp.arange(planes)[:, None], idx].add(g)
    return grad.reshape(self.shape)


def _grad_like_self(grad_output, self, *args, **kwargs):
    return torch.empty_like(self, memory_format=torch.contiguous_format)


for _nd in (2, 3):
    lower(getattr(aten, f"fractional_max_pool{_nd}d").default)(_fractional_forward)
    lower(getattr(aten, f"fractional_max_pool{_nd}d_backward").default, meta=_grad_like_self)(_fractional_backward)


# ------------------------------------------------------------ max unpooling


def _max_unpool(ctx, x, indices, output_size):
    """Scatter each plane's values to their flat positions in an
    output_size plane of zeros.  An index outside the plane is a
    device-side error with the CPU's message (PyTorch's decomposition uses
    an unchecked index_put, which would drop it silently)."""
    nd = len(output_size)
    planes = math.prod(x.shape[:-nd])
    plane = math.prod(output_size)
    index = indices.reshape(planes, -1)
    volume = "x".join(str(s) for s in output_size)
    message = "Found an invalid max index: {value} (output volumes are of size " + volume + ")"
    ctx.check_index(index, plane, message, RuntimeError, negative_ok=False)
    out = jnp.zeros((planes, plane), x.dtype)
    out = out.at[jnp.arange(planes)[:, None], index].set(x.reshape(planes, -1), mode="drop")
    return out.reshape(ctx.out_shape)


@lower(aten.max_unpool2d)
def max_unpool2d(ctx, x, indices, output_size):
    return _max_unpool(ctx, x, indices, output_size)


@lower(aten.max_unpool3d)
def max_unpool3d(ctx, x, indices, output_size, stride, padding):
    return _max_unpool(ctx, x, indices, output_size)
