"""Upsampling (`F.interpolate` modes nearest, nearest-exact, linear, bilinear,
bicubic, trilinear) and its backward.

Every mode is separable: along each spatial dim, output position `o` reads a
few input positions `idx[o, k]` with weights `w[o, k]` (1 tap for nearest,
2 for linear, 4 for cubic).  Both tables depend only on sizes, scales and
align_corners (static), so they are computed in numpy at trace time with
ATen's CPU formulas in its precision (float32; float64 for double inputs), so nearest picks the same
index at rounding boundaries.  The forward gathers the taps and sums them
(in float32 for 16-bit inputs); the backward is that function's VJP
(a scatter-add), so gradients use exactly the forward's taps.
"""

import jax
import jax.numpy as jnp
import numpy as np
import torch

from ..registry import lower
from .common import acc_dtype

aten = torch.ops.aten
F32 = np.float32


def _scale(n_in, n_out, align_corners, scale, R=F32):
    """ATen's area_pixel_compute_scale (in `R`: float32, float64 for double inputs)."""
    if align_corners:
        return R(n_in - 1) / R(n_out - 1) if n_out > 1 else R(0)
    if scale is not None and scale > 0:
        return R(1.0 / scale)
    return R(n_in) / R(n_out)


def _source(n_in, n_out, align_corners, scale, cubic, R):
    """ATen's area_pixel_compute_source_index for every output position."""
    s = _scale(n_in, n_out, align_corners, scale, R)
    dst = np.arange(n_out, dtype=R)
    if align_corners:
        return s * dst
    src = s * (dst + R(0.5)) - R(0.5)
    return src if cubic else np.maximum(src, R(0))


def _nearest(n_in, n_out, scale, exact=False):
    dst = np.arange(n_out, dtype=np.int64)
    if not exact and n_out == n_in:
        idx = dst
    elif not exact and n_out == 2 * n_in:
        idx = dst >> 1
    else:
        s = F32(1.0 / scale) if scale is not None and scale > 0 else F32(n_in) / F32(n_out)
        pos = (dst.astype(F32) + F32(0.5)) * s if exact else dst.astype(F32) * s
        idx = np.minimum(np.floor(pos).astype(np.int64), n_in - 1)
    return idx[:, None], np.ones((n_out, 1), F32)


def _linear(n_in, n_out, align_corners, scale, R):
    if n_in == n_out:
        return np.arange(n_out)[:, None], np.ones((n_out, 1), R)
    src = _source(n_in, n_out, align_corners, scale, False, R)
    i0 = src.astype(np.int64)
    i1 = i0 + (i0 < n_in - 1)
    l1 = np.clip(src - i0.astype(R), R(0), R(1))
    return np.stack([i0, i1], 1), np.stack([R(1) - l1, l1], 1)


def _cubic(n_in, n_out, align_corners, scale, R, A=-0.75):
    src = _source(n_in, n_out, align_corners, scale, True, R)
    i = np.floor(src)
    t = (src - i).astype(R)

    def conv1(x):  # |x| <= 1
        return ((A + 2) * x - (A + 3)) * x * x + 1

    def conv2(x):  # 1 < |x| < 2
        return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A

    w = np.stack([conv2(t + 1), conv1(t), conv1(1 - t), conv2(2 - t)], 1).astype(R)
    idx = np.clip(i.astype(np.int64)[:, None] + np.arange(-1, 3), 0, n_in - 1)
    return idx, w


def _aa_linear(x, R):
    x = np.abs(x)
    return np.where(x < R(1), R(1) - x, R(0)).astype(R)


def _aa_cubic(x, R):
    """Keys' cubic with a = -0.5 (PIL's; plain bicubic uses -0.75)."""
    A = R(-0.5)
    x = np.abs(x)
    near = ((A + R(2)) * x - (A + R(3))) * x * x + R(1)
    far = ((A * x - R(5) * A) * x + R(8) * A) * x - R(4) * A
    return np.where(x < R(1), near, np.where(x < R(2), far, R(0))).astype(R)


def _antialiased(n_in, n_out, align_corners, scale, cubic, R):
    """ATen's antialiased taps (_compute_weights_aa): when downsampling, the
    filter widens by the scale, so every input pixel under an output pixel
    contributes; weights are normalised to sum to 1.  Float32 steps and
    double intermediates as in the C++ (center, support and the filter's
    argument go through double)."""
    s = _scale(n_in, n_out, align_corners, scale, R)
    half_width = 2.0 if cubic else 1.0  # interp_size * 0.5
    support = R(half_width * np.float64(s)) if s >= 1 else R(half_width)
    invscale = R(1.0 / np.float64(s)) if s >= 1 else R(1)
    rows = []
    for i in range(n_out):
        center = R(np.float64(s) * (i + 0.5))
        xmin = max(int(np.float64(center - support) + 0.5), 0)
        xsize = min(int(np.float64(center + support) + 0.5), n_in) - xmin
        offsets = np.arange(xmin, xmin + xsize).astype(R) - center
        arg = ((offsets.astype(np.float64) + 0.5) * np.float64(invscale)).astype(R)
        w = (_aa_cubic if cubic else _aa_linear)(arg, R)
        total = R(0)
        for v in w:  # a running float sum, as the C++ loop
            total = R(total + v)
        rows.append((xmin, w / total if total != 0 else w))
    taps = max(len(w) for _, w in rows)
    idx = np.zeros((n_out, taps), np.int64)
    weights = np.zeros((n_out, taps), R)
    for i, (xmin, w) in enumerate(rows):
        idx[i] = np.minimum(xmin + np.arange(taps), n_in - 1)
        weights[i, : len(w)] = w
    return idx, weights


def _taps(mode, n_in, n_out, align_corners, scale, R):
    """R: the real type of ATen's index arithmetic (its opmath type: float32,
    or float64 for double inputs; nearest always uses float32)."""
    if mode in ("linear-aa", "cubic-aa"):
        return _antialiased(n_in, n_out, align_corners, scale, mode == "cubic-aa", R)
    if mode == "nearest":
        return _nearest(n_in, n_out, scale)
    if mode == "nearest-exact":
        return _nearest(n_in, n_out, scale, exact=True)
    if mode == "linear":
        return _linear(n_in, n_out, align_corners, scale, R)
    return _cubic(n_in, n_out, align_corners, scale, R)


def _resample(x, mode, output_size, align_corners, scales):
    """x (N, C, *spatial) -> (N, C, *output_size)."""
    dt = x.dtype
    m = acc_dtype(dt)
    y = x.astype(m) if mode not in ("nearest", "nearest-exact") else x
    nd = len(output_size)
    dims = list(enumerate(zip(output_size, scales)))
    if mode.endswith("-aa"):
        # ATen's separable order: the last dim first; a dim whose size
        # does not change is left alone.
        dims = [d for d in reversed(dims) if d[1][0] != y.shape[y.ndim - nd + d[0]]]
    for k, (n_out, scale) in dims:
        axis = y.ndim - nd + k
        idx, w = _taps(mode, y.shape[axis], n_out, align_corners, scale, np.float64 if dt == jnp.float64 else F32)
        if idx.shape[1] == 1:
            y = jnp.take(y, jnp.asarray(idx[:, 0]), axis=axis)
            continue
        g = jnp.take(y, jnp.asarray(idx), axis=axis)  # (..., n_out, taps, ...)
        shape = [1] * g.ndim
        shape[axis], shape[axis + 1] = w.shape
        y = jnp.sum(g * jnp.asarray(w, m).reshape(shape), axis=axis + 1)
    return y.astype(dt)


def _forward(mode, nd, align):
    """Lowering of upsample_<mode><nd>d(self, output_size, [align_corners], *scales)."""

    def lowering(ctx, self, output_size, *rest):
        align_corners = rest[0] if align else False
        scales = rest[1:] if align else rest
        scales = (tuple(scales) + (None,) * nd)[:nd]
        return _resample(self, mode, tuple(output_size), align_corners, scales)

    return lowering


def _backward(mode, nd, align):
    """Lowering of the *_backward(grad_output, output_size, input_size, ...): the forward's VJP."""

    def lowering(ctx, grad_output, output_size, input_size, *rest):
        fwd = _forward(mode, nd, align)
        zeros = jnp.zeros(tuple(input_size), grad_output.dtype)
        _, vjp = jax.vjp(lambda x: fwd(ctx, x, output_size, *rest), zeros)
        (g,) = vjp(grad_output)
        return g

    return lowering


UPSAMPLE = {
    # aten name: (mode, spatial dims, takes align_corners)
    "upsample_nearest1d": ("nearest", 1, False),
    "upsample_nearest2d": ("nearest", 2, False),
    "upsample_nearest3d": ("nearest", 3, False),
    "_upsample_nearest_exact1d": ("nearest-exact", 1, False),
    "_upsample_nearest_exact2d": ("nearest-exact", 2, False),
    "_upsample_nearest_exact3d": ("nearest-exact", 3, False),
    "upsample_linear1d": ("linear", 1, True),
    "upsample_bilinear2d": ("linear", 2, True),
    "upsample_trilinear3d": ("linear", 3, True),
    "upsample_bicubic2d": ("cubic", 2, True),
    "_upsample_bilinear2d_aa": ("linear-aa", 2, True),
    "_upsample_bicubic2d_aa": ("cubic-aa", 2, True),
}

def _floating(self, *args, **kwargs):
    """Linear and cubic modes lower floating inputs only: ATen resamples
    uint8 images in 16-bit fixed point (with rounding and clamping), which
    runs on the CPU; other integer dtypes raise there."""
    return self.dtype.is_floating_point


for _name, (_mode, _nd, _align) in UPSAMPLE.items():
    _accepts = None if _mode.startswith("nearest") else _floating
    lower(getattr(aten, _name).default, accepts=_accepts)(_forward(_mode, _nd, _align))
    lower(getattr(aten, _name + "_backward").default)(_backward(_mode, _nd, _align))
