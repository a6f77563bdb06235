"""Factory ops: arange, full, eye, linspace, scalar_tensor, ...

Most `*_like`/`zeros`/`ones`/`full` factories are CompositeExplicit in ATen and
reach the backend as `empty` + `fill_`, which already runs on the device; the
lowerings here are for the factories whose values are computed.
"""

import jax
import jax.numpy as jnp
import jax.scipy.special as jsp
import numpy as np
import torch
from jax import lax

from ..registry import lower
from .common import acc_dtype, astype

aten = torch.ops.aten


def _is_float(dtype):
    return jnp.issubdtype(dtype, jnp.inexact)


def _acc_dtype(dtype):
    """The type ATen's CPU kernels compute factories in (acc_type<T, false>)."""
    if jnp.issubdtype(dtype, jnp.complexfloating):
        return jnp.complex128
    if _is_float(dtype):
        return jnp.float64
    return jnp.int64


def _iota(n, dtype):
    return lax.iota(dtype, n)


# arange's length depends on the values of start/end/step, so they are part of
# the kernel key (a traced Scalar would reuse a kernel of the wrong length).
@lower(aten.arange.default, static=("end",))
@lower(aten.arange.out, static=("end",))
def arange_end(ctx, end, *rest):
    return _arange(ctx, 0, 1)


# torch.range (deprecated; end inclusive) has arange's values; its meta
# kernel gives the inclusive length.
@lower(aten.arange.start, static=("start", "end"))
@lower(aten.range.default, static=("start", "end"))
def arange_start(ctx, start, end, *rest):
    return _arange(ctx, start, 1)


@lower(aten.arange.start_step, static=("start", "end", "step"))
@lower(aten.arange.start_out, static=("start", "end", "step"))
@lower(aten.range.step, static=("start", "end", "step"))
@lower(aten.range.out, static=("start", "end", "step"))
def arange_start_step(ctx, start, end, step=1, *rest):
    return _arange(ctx, start, step)


def _arange(ctx, start, step):
    dtype = ctx.out_dtype
    (n,) = ctx.out_shape
    acc = _acc_dtype(dtype)
    if not _is_float(acc):
        # ATen converts start/step to the integer accumulation type first
        # (a traced start -- a symbolic size under dynamic=True -- is one).
        start, step = (v if isinstance(v, jax.Array) else int(v) for v in (start, step))
    idx = _iota(n, acc)
    return (jnp.asarray(start, acc) + jnp.asarray(step, acc) * idx).astype(dtype)


@lower(aten.linspace.default)
@lower(aten.linspace.out)
def linspace(ctx, start, end, steps, *rest):
    return _linspace(ctx.out_dtype, start, end, steps)


def _linspace(dtype, start, end, steps):
    """ATen's linspace kernel: the first half counts up from start, the second
    half down from end (symmetric rounding).  Floating outputs compute in their
    own type (bf16/f16 through float32), integer outputs with a double step and
    truncation."""
    if steps == 0:
        return jnp.zeros((0,), dtype)
    if _is_float(dtype):
        compute = dtype if jnp.dtype(dtype).itemsize >= 4 else jnp.float32
        s = jnp.asarray(start).astype(dtype).astype(compute)
        e = jnp.asarray(end).astype(dtype).astype(compute)
    else:
        compute = jnp.float64
        s = jnp.asarray(start).astype(jnp.int64).astype(compute)
        e = jnp.asarray(end).astype(jnp.int64).astype(compute)
    if steps == 1:
        return jnp.reshape(s, (1,)).astype(dtype)
    idx = _iota(steps, compute)
    # A true division, as ATen's: XLA turns a division by a constant into a
    # multiplication by its reciprocal (1 ulp off when start/end are traced).
    step = (e - s) / lax.optimization_barrier(jnp.asarray(steps - 1, compute))
    up = s + step * idx
    down = e - step * (steps - 1 - idx)
    val = jnp.where(idx < steps // 2, up, down)
    if not _is_float(dtype):
        val = jnp.trunc(val)
    return val.astype(dtype)


@lower(aten.logspace.default)
@lower(aten.logspace.out)
def logspace(ctx, start, end, steps, base=10.0, *rest):
    """pow(base, exponent) in double, as ATen's CPU kernel: start and end
    rounded to the output type, the exponents in double, from both ends as
    in linspace (the step rounded to a 16-bit output type put 10**4 at 9856)."""
    dtype = ctx.out_dtype
    if steps == 0:
        return jnp.zeros((0,), dtype)
    s = jnp.asarray(start).astype(jnp.float64)
    if steps == 1:
        return jnp.reshape(jnp.power(jnp.float64(base), s), (1,)).astype(dtype)
    e = jnp.asarray(end).astype(jnp.float64)
    if not jnp.issubdtype(dtype, jnp.complexfloating):
        s, e = (astype(v, dtype).astype(jnp.float64) for v in (s, e))
    # Exponents as divisions, not sums of step * i: XLA:CPU fuses those
    # products into FMAs, whose 10 - 0.02 * 500 is -2e-16 where ATen's loop
    # gets 0 (10**0 came out 0.9999..., 0 as an integer).  A true division
    # (see linspace) keeps grid points exact.
    span = e - s
    n = lax.optimization_barrier(jnp.asarray(steps - 1, jnp.float64))
    idx = _iota(steps, jnp.float64)
    exps = jnp.where(idx < steps // 2, s + span * idx / n, e - span * (steps - 1 - idx) / n)
    val = jnp.power(jnp.float64(base), exps)
    if not _is_float(dtype):
        val = jnp.trunc(val)
    return val.astype(dtype)


@lower(aten.eye.default)
@lower(aten.eye.out)
def eye(ctx, n, *rest):
    return jnp.eye(n, n, dtype=ctx.out_dtype)


@lower(aten.eye.m)
@lower(aten.eye.m_out)
def eye_m(ctx, n, m, *rest):
    return jnp.eye(n, m, dtype=ctx.out_dtype)


@lower(aten.scalar_tensor.default)
@lower(aten.scalar_tensor.out)
def scalar_tensor(ctx, s, *rest):
    return jnp.asarray(s).astype(ctx.out_dtype)


@lower(aten.full.default)
@lower(aten.full.out)
def full(ctx, size, fill_value, *rest):
    return jnp.full(tuple(size), jnp.asarray(fill_value).astype(ctx.out_dtype))


@lower(aten.zeros.default)
@lower(aten.zeros.out)
# Autograd's zero gradients (sgn, angle, ... of real inputs).  CUDA returns a
# storage-less ZeroTensor; a dense zeros is the same value, and every tpu
# kernel can read it (no ZeroTensor special cases in the lowerings).
@lower(aten._efficientzerotensor.default)
def zeros(ctx, size, *rest):
    return jnp.zeros(tuple(size), ctx.out_dtype)


@lower(aten.ones.default)
@lower(aten.ones.out)
def ones(ctx, size, *rest):
    return jnp.ones(tuple(size), ctx.out_dtype)


def _tri_indices(row, col, offset, lower_part):
    """Host-computed (row, col) coordinates of the lower/upper triangle, in
    row-major order (the sizes are static, so this is a constant)."""
    r, c = np.meshgrid(np.arange(row), np.arange(col), indexing="ij")
    mask = (c - r <= offset) if lower_part else (c - r >= offset)
    return np.stack([r[mask], c[mask]])


@lower(aten.tril_indices.default)
@lower(aten.tril_indices.out)
def tril_indices(ctx, row, col, offset=0, *rest):
    return jnp.asarray(_tri_indices(row, col, offset, True)).astype(ctx.out_dtype)


@lower(aten.triu_indices.default)
@lower(aten.triu_indices.out)
def triu_indices(ctx, row, col, offset=0, *rest):
    return jnp.asarray(_tri_indices(row, col, offset, False)).astype(ctx.out_dtype)


# ------------------------------------------------------------- kaiser window

def _kaiser_window(dtype, window_length, periodic=True, beta=12.0):
    """ATen's kaiser_window: arange in the output dtype, then per element (in
    opmath) i0(beta * sqrt(|1 - ((a - alpha) / alpha)^2|)) / i0(beta) with
    alpha = (L - 1) / 2, L one longer when periodic (and the last dropped)."""
    if window_length == 0:
        return jnp.zeros((0,), dtype)
    if window_length == 1:
        return jnp.ones((1,), dtype)
    length = window_length + 1 if periodic else window_length
    op = acc_dtype(dtype)
    a = _iota(length, jnp.float64 if op == jnp.float64 else jnp.float32).astype(dtype).astype(op)
    # Divisions by traced values, as ATen's (XLA would turn a division by a
    # constant into a multiplication by its reciprocal, 1 ulp off).
    alpha, b = lax.optimization_barrier((jnp.asarray((length - 1) / 2.0, op), jnp.asarray(beta, op)))
    t = (a - alpha) / alpha
    w = jsp.i0(b * jnp.sqrt(jnp.abs(1 - t * t))) / jsp.i0(b)
    return w[:window_length].astype(dtype)


@lower(aten.kaiser_window.default)
@lower(aten.kaiser_window.out)
def kaiser_window(ctx, window_length, *rest):
    return _kaiser_window(ctx.out_dtype, window_length)


@lower(aten.kaiser_window.periodic)
@lower(aten.kaiser_window.periodic_out)
def kaiser_window_periodic(ctx, window_length, periodic, *rest):
    return _kaiser_window(ctx.out_dtype, window_length, periodic)


@lower(aten.kaiser_window.beta)
@lower(aten.kaiser_window.beta_out)
def kaiser_window_beta(ctx, window_length, periodic, beta, *rest):
    return _kaiser_window(ctx.out_dtype, window_length, periodic, beta)
