"""Activation functions and their backward ops.

Formulas follow torch's CPU kernels (bfloat16/float16 computed in float32 and
rounded once); Scalar parameters arrive traced, so changing e.g. a slope does
not compile a new kernel."""

import math

import jax
import jax.numpy as jnp
import torch
from jax import lax

from ..registry import lower
from .elementwise import cast, clamp_values, nan_max, not_implemented, opmath

aten = torch.ops.aten


def _prep(ctx, *xs, positions=None):
    """Result dtype, and the inputs in its opmath dtype."""
    dt = ctx.result_type(*(positions if positions is not None else range(len(xs))))
    m = opmath(dt)
    return dt, [None if x is None else cast(x, m) for x in xs]


def _check_floating(ctx, kernel_name):
    """ATen's kernels for these have no integer versions."""
    dt = ctx.result_type(0)
    if not jnp.issubdtype(dt, jnp.inexact):
        raise not_implemented(kernel_name, dt)


def _sigmoid(x):
    return 1 / (1 + jnp.exp(-x))


# ------------------------------------------------------------ relu family


@lower(aten.relu.default)
def relu(ctx, self):
    if self.dtype == jnp.bool_:
        raise RuntimeError("Boolean inputs not supported for relu")
    dt, (x,) = _prep(ctx, self)
    return nan_max(x, jnp.zeros_like(x)).astype(dt)  # NaN stays NaN, as clamp_min(x, 0)


@lower(aten.hardtanh.default)
def hardtanh(ctx, self, min_val=-1, max_val=1):
    dt, (x,) = _prep(ctx, self)
    return clamp_values(x, cast(min_val, x.dtype), cast(max_val, x.dtype)).astype(dt)


@lower(aten.hardtanh_backward.default)
def hardtanh_backward(ctx, grad_output, self, min_val, max_val):
    dt, (g, x) = _prep(ctx, grad_output, self)
    lo, hi = cast(min_val, x.dtype), cast(max_val, x.dtype)
    return jnp.where((x <= lo) | (x >= hi), jnp.zeros_like(g), g).astype(dt)


@lower(aten.leaky_relu.default)
def leaky_relu(ctx, self, negative_slope=0.01):
    dt, (x,) = _prep(ctx, self)
    return jnp.where(x > 0, x, x * cast(negative_slope, x.dtype)).astype(dt)


@lower(aten.leaky_relu_backward.default)
def leaky_relu_backward(ctx, grad_output, self, negative_slope, self_is_result):
    dt, (g, x) = _prep(ctx, grad_output, self)
    return jnp.where(x > 0, g, g * cast(negative_slope, g.dtype)).astype(dt)


@lower(aten.threshold.default)
def threshold(ctx, self, threshold, value):
    dt, (x,) = _prep(ctx, self)
    return jnp.where(x <= cast(threshold, x.dtype), cast(value, x.dtype), x).astype(dt)


@lower(aten.threshold_backward.default)
def threshold_backward(ctx, grad_output, self, threshold):
    dt, (g, x) = _prep(ctx, grad_output, self)
    return jnp.where(x <= cast(threshold, x.dtype), jnp.zeros_like(g), g).astype(dt)


@lower(aten._prelu_kernel.default)
def prelu_kernel(ctx, self, weight):
    dt, (x, w) = _prep(ctx, self, weight)
    return jnp.where(x > 0, x, w * x).astype(dt)


@lower(aten._prelu_kernel_backward.default)
def prelu_kernel_backward(ctx, grad_output, self, weight):
    _, (g, x, w) = _prep(ctx, grad_output, self, weight)
    positive = x > 0
    grad_input = jnp.where(positive, g, w * g)
    grad_weight = jnp.where(positive, jnp.zeros_like(g), x * g)
    return grad_input.astype(ctx.out_dtype_of(0)), grad_weight.astype(ctx.out_dtype_of(1))


@lower(aten.hardshrink.default)
def hardshrink(ctx, self, lambd=0.5):
    dt, (x,) = _prep(ctx, self)
    lam = cast(lambd, x.dtype)
    return jnp.where((x >= -lam) & (x <= lam), jnp.zeros_like(x), x).astype(dt)


@lower(aten.hardshrink_backward.default, aten.softshrink_backward.default)
def shrink_backward(ctx, grad_out, self, lambd):
    dt, (g, x) = _prep(ctx, grad_out, self)
    lam = cast(lambd, x.dtype)
    return jnp.where((x >= -lam) & (x <= lam), jnp.zeros_like(g), g).astype(dt)


@lower(aten.softshrink.default)
def softshrink(ctx, self, lambd=0.5):
    dt, (x,) = _prep(ctx, self)
    lam = cast(lambd, x.dtype)
    return jnp.where(x > lam, x - lam, jnp.where(x < -lam, x + lam, x * 0)).astype(dt)  # NaN stays NaN


@lower(aten.rrelu_with_noise.default, aten.rrelu_with_noise_functional.default, random=True)
def rrelu_with_noise(ctx, self, noise, lower=0.125, upper=1 / 3, training=False, generator=None):
    """Returns (output, new noise).  Training draws a slope in [lower, upper)
    for each non-positive input (the noise records the slope, 1 elsewhere);
    evaluation is leaky_relu with the mean slope and leaves the noise alone."""
    dt, (x,) = _prep(ctx, self)
    lo, hi = cast(lower, x.dtype), cast(upper, x.dtype)
    if not training:
        return jnp.where(x > 0, x, x * ((lo + hi) / 2)).astype(dt), noise
    r = jax.random.uniform(ctx.rng_key(), x.shape, x.dtype, lo, hi)
    slope = jnp.where(x <= 0, r, jnp.ones_like(x))
    return (x * slope).astype(dt), slope.astype(noise.dtype)


@lower(aten.rrelu_with_noise_backward.default)
def rrelu_with_noise_backward(ctx, grad_output, self, noise, lower, upper, training, self_is_result):
    dt, (g, x, n) = _prep(ctx, grad_output, self, noise)
    lo, hi = cast(lower, x.dtype), cast(upper, x.dtype)
    mean_slope = jnp.where(x > 0, g, g * ((lo + hi) / 2))
    if training:
        return jnp.where(hi - lo > 1e-6, g * n, mean_slope).astype(dt)
    return mean_slope.astype(dt)


# ------------------------------------------------------------------ elu


@lower(aten.elu.default)
def elu(ctx, self, alpha=1, scale=1, input_scale=1):
    dt, (x,) = _prep(ctx, self)
    neg_coef = cast(alpha, x.dtype) * cast(scale, x.dtype)
    pos_coef = cast(scale, x.dtype)
    in_coef = cast(input_scale, x.dtype)
    return jnp.where(x <= 0, jnp.expm1(x * in_coef) * neg_coef, x * pos_coef).astype(dt)


@lower(aten.elu_backward.default)
def elu_backward(ctx, grad_output, alpha, scale, input_scale, is_result, self_or_result):
    dt, (g, y) = _prep(ctx, grad_output, self_or_result, positions=(0, 5))
    neg_coef = cast(alpha, y.dtype) * cast(scale, y.dtype)
    pos_coef = cast(scale, y.dtype)
    in_coef = cast(input_scale, y.dtype)
    if is_result:
        neg = g * in_coef * (y + neg_coef)
    else:
        neg = g * in_coef * neg_coef * jnp.exp(y * in_coef)
    return jnp.where(y <= 0, neg, g * pos_coef).astype(dt)


# ------------------------------------------------------- smooth activations

_SQRT1_2 = 1 / math.sqrt(2)
_GELU_PDF = 2 / math.sqrt(math.pi) * _SQRT1_2 * 0.5  # 1/sqrt(2*pi)
_GELU_BETA = math.sqrt(2) * 2 / math.sqrt(math.pi) * 0.5  # sqrt(2/pi)
_GELU_KAPPA = 0.044715


@lower(aten.gelu.default)
def gelu(ctx, self, approximate="none"):
    _check_floating(ctx, "GeluKernelImpl")
    dt, (x,) = _prep(ctx, self)
    if approximate == "tanh":
        inner = _GELU_BETA * (x + _GELU_KAPPA * x * x * x)
        return (0.5 * x * (1 + jnp.tanh(inner))).astype(dt)
    return (x * 0.5 * (1 + lax.erf(x * _SQRT1_2))).astype(dt)


@lower(aten.gelu_backward.default)
def gelu_backward(ctx, grad_output, self, approximate="none"):
    dt, (g, x) = _prep(ctx, grad_output, self)
    if approximate == "tanh":
        x_sq = x * x
        inner = _GELU_BETA * (x + _GELU_KAPPA * x_sq * x)
        t = jnp.tanh(inner)
        left = 0.5 * x
        right = 1 + t
        left_derivative = 0.5 * right
        right_derivative = left * (1 - t * t) * _GELU_BETA * (1 + 3 * _GELU_KAPPA * x_sq)
        return (g * (left_derivative + right_derivative)).astype(dt)
    cdf = 0.5 * (1 + lax.erf(x * _SQRT1_2))
    pdf = jnp.exp(-0.5 * x * x) * _GELU_PDF
    return (g * (cdf + x * pdf)).astype(dt)


@lower(aten.silu.default)
def silu(ctx, self):
    dt, (x,) = _prep(ctx, self)
    return (x / (1 + jnp.exp(-x))).astype(dt)


@lower(aten.silu_backward.default)
def silu_backward(ctx, grad_output, self):
    dt, (g, x) = _prep(ctx, grad_output, self)
    s = _sigmoid(x)
    return (g * s * (1 + x * (1 - s))).astype(dt)


@lower(aten.mish.default)
def mish(ctx, self):
    dt, (x,) = _prep(ctx, self)
    return (x * jnp.tanh(jnp.log1p(jnp.exp(x)))).astype(dt)


@lower(aten.mish_backward.default)
def mish_backward(ctx, grad_output, self):
    dt, (g, x) = _prep(ctx, grad_output, self)
    s = _sigmoid(x)
    t = jnp.tanh(jnp.log1p(jnp.exp(x)))
    return (g * (t + x * s * (1 - t * t))).astype(dt)


@lower(aten.sigmoid_backward.default)
def sigmoid_backward(ctx, grad_output, output):
    dt, (g, y) = _prep(ctx, grad_output, output)
    return (g * (1 - y) * y).astype(dt)


@lower(aten.tanh_backward.default)
def tanh_backward(ctx, grad_output, output):
    dt, (g, y) = _prep(ctx, grad_output, output)
    return (g * (1 - y * y)).astype(dt)


@lower(aten.softplus.default)
def softplus(ctx, self, beta=1, threshold=20):
    dt, (x,) = _prep(ctx, self)
    b = cast(beta, x.dtype)
    xb = x * b
    return jnp.where(xb > cast(threshold, x.dtype), x, jnp.log1p(jnp.exp(xb)) / b).astype(dt)


@lower(aten.softplus_backward.default)
def softplus_backward(ctx, grad_output, self, beta, threshold):
    dt, (g, x) = _prep(ctx, grad_output, self)
    xb = x * cast(beta, x.dtype)
    z = jnp.exp(xb)
    return jnp.where(xb > cast(threshold, x.dtype), g, g * z / (z + 1)).astype(dt)


@lower(aten.hardswish.default)
def hardswish(ctx, self):
    dt, (x,) = _prep(ctx, self)
    return (x * jnp.minimum(jnp.maximum(x + 3, 0), 6) / 6).astype(dt)


@lower(aten.hardswish_backward.default)
def hardswish_backward(ctx, grad_output, self):
    dt, (g, x) = _prep(ctx, grad_output, self)
    mid = g * (x / 3 + 0.5)
    return jnp.where(x <= -3, jnp.zeros_like(g), jnp.where(x < 3, mid, g)).astype(dt)


@lower(aten.hardsigmoid.default)
def hardsigmoid(ctx, self):
    dt, (x,) = _prep(ctx, self)
    return (jnp.minimum(jnp.maximum(x + 3, 0), 6) / 6).astype(dt)


@lower(aten.hardsigmoid_backward.default)
def hardsigmoid_backward(ctx, grad_output, self):
    dt, (g, x) = _prep(ctx, grad_output, self)
    return jnp.where((x > -3) & (x < 3), g / 6, jnp.zeros_like(g)).astype(dt)


@lower(aten.log_sigmoid_forward.default)
def log_sigmoid_forward(ctx, self):
    dt, (x,) = _prep(ctx, self)
    z = jnp.exp(-jnp.abs(x))
    out = jnp.minimum(x, 0) - jnp.log1p(z)
    buffer = z if ctx.out_meta[1].shape == ctx.out_meta[0].shape else jnp.zeros(ctx.out_meta[1].shape, z.dtype)
    return out.astype(dt), buffer.astype(ctx.out_dtype_of(1))


@lower(aten.log_sigmoid_backward.default)
def log_sigmoid_backward(ctx, grad_output, self, buffer):
    dt, (g, x) = _prep(ctx, grad_output, self)
    negative = x < 0
    z = jnp.exp(-jnp.abs(x))
    max_deriv = jnp.where(negative, 1.0, 0.0).astype(x.dtype)
    sign = jnp.where(negative, 1.0, -1.0).astype(x.dtype)
    return (g * (max_deriv - sign * (z / (1 + z)))).astype(dt)


# ---------------------------------------------------------------------- glu


@lower(aten.glu.default)
def glu(ctx, self, dim=-1):
    dt, (x,) = _prep(ctx, self)
    a, b = jnp.split(x, 2, axis=dim)
    return (a * _sigmoid(b)).astype(dt)


@lower(aten.glu_backward.default)
def glu_backward(ctx, grad_output, self, dim):
    dt, (g, x) = _prep(ctx, grad_output, self)
    a, b = jnp.split(x, 2, axis=dim)
    s = _sigmoid(b)
    grad_a = g * s
    grad_b = g * a * s * (1 - s)
    return jnp.concatenate([grad_a, grad_b], axis=dim).astype(dt)
