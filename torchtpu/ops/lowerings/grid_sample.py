"""`F.grid_sample` (aten.grid_sampler_2d / grid_sampler_3d) and its backward.

The input is (N, C, *spatial) and the grid (N, *out, nd), where grid[..., 0]
indexes the last spatial dim (x = W), grid[..., 1] the one before, etc.  Along
each spatial dim a grid coordinate becomes a few taps (index, weight, valid):
1 for nearest, 2 for bilinear, 4 for bicubic; the output sums, over every
combination of taps, the gathered input times the product of the weights
(bicubic: summed along x first, then y, as ATen does).
Coordinates follow ATen's formulas (GridSampler.h), including where its
gradients are zero (clipped borders), so the backward can simply be the
forward's VJP.  16-bit inputs are computed in their own dtype, like the CPU
kernels (see _forward).
"""

import functools
import itertools
import math

import jax
import jax.numpy as jnp
import torch

from ..registry import lower

aten = torch.ops.aten

BILINEAR, NEAREST, BICUBIC = 0, 1, 2
ZEROS, BORDER, REFLECTION = 0, 1, 2


def _unnormalize(coord, size, align_corners):
    """[-1, 1] -> pixel coordinates (corner pixels' centres or their outer edges)."""
    if align_corners:
        return ((coord + 1) / 2) * (size - 1)
    return ((coord + 1) * size - 1) / 2


def _clip(x, size):
    # A where, not jnp.clip: ATen's gradient is 0 *at* the borders too, and
    # its vectorized kernel clamps NaN to 0.
    hi = size - 1
    return jnp.where(x > 0, jnp.where(x < hi, x, jnp.full_like(x, hi)), jnp.zeros_like(x))


def _reflect(x, twice_low, twice_high):
    """Reflect x into [low, high] (ATen's reflect_coordinates)."""
    if twice_low == twice_high:
        return jnp.zeros_like(x)
    lo = twice_low / 2
    span = (twice_high - twice_low) / 2
    x = x - lo
    # A where, not jnp.abs: ATen's gradient at exactly `lo` is +1, abs's is 0.
    x = jnp.where(x < 0, -x, x)
    extra = jnp.fmod(x, span)
    even = jnp.mod(jnp.floor(x / span), 2) == 0
    return jnp.where(even, extra + lo, span - extra + lo)


def _pad(x, size, padding_mode, align_corners):
    """ATen's compute_coordinates: apply the padding mode to a pixel coordinate."""
    if padding_mode == BORDER:
        return _clip(x, size)
    if padding_mode == REFLECTION:
        twice = (0, 2 * (size - 1)) if align_corners else (-1, 2 * size - 1)
        return _clip(_reflect(x, *twice), size)
    return x


def _cubic_weights(t, A=-0.75):
    """ATen's get_cubic_upsample_coefficients for the taps at -1, 0, 1, 2."""

    def near(x):  # |x| <= 1
        return ((A + 2) * x - (A + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _axis_taps(coord, size, mode, padding_mode, align_corners):
    """One spatial dim: [(index, weight or None, in-bounds mask)] for each tap."""
    x = _unnormalize(coord, size, align_corners)

    def tap(i, w):
        return i.astype(jnp.int32), w, (i >= 0) & (i <= size - 1)

    if mode == BICUBIC:
        # The padding applies to each (integer) tap, not to the coordinate.
        x0 = jnp.floor(x)
        ws = _cubic_weights(x - x0)
        taps = [jax.lax.stop_gradient(_pad(x0 + k, size, padding_mode, align_corners)) for k in (-1, 0, 1, 2)]
        return [tap(jnp.trunc(i), w) for i, w in zip(taps, ws)]
    x = _pad(x, size, padding_mode, align_corners)
    if mode == NEAREST:
        return [tap(jnp.round(x), None)]  # round half to even, like nearbyint
    x0 = jnp.floor(x)
    x1 = x0 + 1
    return [tap(x0, x1 - x), tap(x1, x - x0)]


def _sample(x, grid, mode, padding_mode, align_corners):
    """x (N, C, *spatial), grid (N, *out, nd) -> (N, C, *out), all in x's dtype."""
    n, c, *spatial = x.shape
    nd = len(spatial)
    out = grid.shape[1:-1]
    points = math.prod(out)
    # Spatial dim k is indexed by grid[..., nd - 1 - k]; coordinates flattened to (N, P).
    axes = [
        _axis_taps(grid[..., nd - 1 - k].reshape(n, points), spatial[k], mode, padding_mode, align_corners)
        for k in range(nd)
    ]
    flat = x.reshape(n, c, math.prod(spatial))
    strides = [math.prod(spatial[k + 1 :]) for k in range(nd)]
    zero = jnp.zeros((), x.dtype)

    def gather(combo):
        idx = sum(i * s for (i, _, _), s in zip(combo, strides))
        valid = functools.reduce(jnp.logical_and, [m for _, _, m in combo])
        v = jnp.take_along_axis(flat, idx[:, None, :], axis=2, mode="clip")
        # A where, not a multiply by the mask: ATen skips out-of-bounds taps (no 0 * inf).
        return jnp.where(valid[:, None, :], v, zero)

    if mode == BICUBIC:
        # Separable, as ATen sums it: along x (the last dim) first, then outwards.
        def nested(k, prefix):
            if k == nd:
                return gather(prefix)
            terms = [t[1][:, None, :] * nested(k + 1, prefix + (t,)) for t in axes[k]]
            return functools.reduce(jnp.add, terms)

        total = nested(0, ())
    else:
        # Taps in ATen's order (x fastest: nw, ne, sw, se, ...), each value times
        # the product of its weights (x's first, as ATen multiplies them).
        total = None
        for combo in itertools.product(*axes):
            v = gather(combo)
            weights = [w for _, w, _ in reversed(combo) if w is not None]
            if weights:
                v = v * functools.reduce(jnp.multiply, weights)[:, None, :]
            total = v if total is None else total + v
    return total.reshape((n, c) + tuple(out))


def _forward(ctx, input, grid, interpolation_mode, padding_mode, align_corners):
    # In the input's own dtype, with no float32 opmath: ATen's CPU kernels
    # compute bf16/fp16 in scalar_t (every step rounded, grid coordinates
    # included), and matching them matters more here than the extra precision.
    return _sample(input, grid.astype(input.dtype), interpolation_mode, padding_mode, align_corners)


def _backward(ctx, grad_output, input, grid, interpolation_mode, padding_mode, align_corners, output_mask):
    """(grad_input, grad_grid): the VJP of the forward.  Like ATen, grad_input is
    None unless output_mask[0], while grad_grid is always returned (ATen's
    kernels compute it whatever output_mask[1] says)."""
    # Like the forward (and ATen's CPU backward), in the input's dtype.
    dt = input.dtype
    x, g, gy = input, grid.astype(dt), grad_output.astype(dt)

    def fwd(x, g):
        return _sample(x, g, interpolation_mode, padding_mode, align_corners)

    if output_mask[0]:
        _, vjp = jax.vjp(fwd, x, g)
        gx, gg = vjp(gy)
        return gx, gg.astype(grid.dtype)
    # The input is then a constant: no scatter-add into a grad_input.
    _, vjp = jax.vjp(lambda g: fwd(x, g), g)
    (gg,) = vjp(gy)
    return None, gg.astype(grid.dtype)


lower(aten.grid_sampler_2d, aten.grid_sampler_3d)(_forward)
lower(aten.grid_sampler_2d_backward, aten.grid_sampler_3d_backward)(_backward)
