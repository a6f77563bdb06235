"""batch_norm, layer_norm, group_norm and their backward ops, and weight_norm's
backward.

Statistics are computed in float32 for bfloat16/float16 inputs (torch's
accumulation type), two-pass (mean, then the mean of squared deviations).
Outputs follow torch's CPU kernels: `save_mean`/`save_invstd` hold the batch
mean and 1/sqrt(biased var + eps); running statistics are updated as
`(1 - momentum) * running + momentum * batch` with the *unbiased* variance.

`native_batch_norm` updates running_mean/running_var in place although its
schema does not say so; it is handled by re-dispatching to
`_native_batch_norm_legit` (whose schema declares the mutation, and whose
functional variant is lowered here), so the update lands in the tpu tensors.
"""

import jax.numpy as jnp
import torch

from ..registry import lower
from .common import acc_dtype
from ..schema import schema_of
from ..special import special

aten = torch.ops.aten





def _channel_shape(x):
    """Shape that broadcasts a per-channel (dim 1) vector against x."""
    return (1, -1) + (1,) * (x.ndim - 2)


def _reduce_axes(x):
    return (0,) + tuple(range(2, x.ndim))


def _rsqrt(v):
    return 1.0 / jnp.sqrt(v)


# ---------------------------------------------------------------- batch norm


def _batch_stats(x, valid=None):
    """Per-channel mean and biased variance, and the count they are over.
    `valid` (broadcastable to x): which samples are real -- padded ones
    (torch.compile dynamic=True, see compile/dynamic.py) are left out."""
    axes = _reduce_axes(x)
    if valid is None:
        mean = jnp.mean(x, axis=axes)
        var = jnp.mean(jnp.square(x - mean.reshape(_channel_shape(x))), axis=axes)
        return mean, var, x.size // x.shape[1]
    valid = jnp.broadcast_to(valid, x.shape)
    n = jnp.sum(valid, axis=axes).astype(x.dtype)
    mean = jnp.sum(jnp.where(valid, x, 0), axis=axes) / n
    var = jnp.sum(jnp.where(valid, jnp.square(x - mean.reshape(_channel_shape(x))), 0), axis=axes) / n
    return mean, var, n


def _bn_apply(x, mean, invstd, weight, bias, acc):
    shape = _channel_shape(x)
    out = (x - mean.reshape(shape)) * invstd.reshape(shape)
    if weight is not None:
        out = out * weight.astype(acc).reshape(shape)
    if bias is not None:
        out = out + bias.astype(acc).reshape(shape)
    return out


def batch_norm_train(input, weight, bias, eps, valid=None):
    acc = acc_dtype(input.dtype)
    x = input.astype(acc)
    mean, var, n = _batch_stats(x, valid)
    invstd = _rsqrt(var + eps)
    return _bn_apply(x, mean, invstd, weight, bias, acc), mean, invstd, var, n


def _bn_eval(input, weight, bias, running_mean, running_var, eps):
    """Eval-mode output and (save_mean, save_invstd).  ATen's meta kernels (the
    shapes this backend must produce) follow CUDA here: the saved statistics
    are running_mean and 1/sqrt(running_var + eps), shape (C,).  (Only the CPU
    kernel returns empty tensors instead.)"""
    acc = acc_dtype(input.dtype)
    x = input.astype(acc)
    mean = running_mean.astype(acc)
    invstd = _rsqrt(running_var.astype(acc) + eps)
    return _bn_apply(x, mean, invstd, weight, bias, acc), mean, invstd


@lower(aten._native_batch_norm_legit_functional, traced=("momentum",))  # momentum=None: 1/steps
def native_batch_norm_legit_functional(ctx, input, weight, bias, running_mean, running_var, training, momentum, eps):
    return batch_norm_functional(input, weight, bias, running_mean, running_var, training, momentum, eps)


def batch_norm_functional(input, weight, bias, running_mean, running_var, training, momentum, eps, valid=None):
    """(out, save_mean, save_invstd, new running_mean, new running_var); the
    statistics over the `valid` samples only, when given."""
    if not training:
        out, mean, invstd = _bn_eval(input, weight, bias, running_mean, running_var, eps)
        return out, mean, invstd, running_mean, running_var
    out, mean, invstd, var, n = batch_norm_train(input, weight, bias, eps, valid)
    if valid is None:
        unbiased = var * (n / (n - 1)) if n > 1 else var * jnp.inf
    else:
        unbiased = jnp.where(n > 1, var * (n / jnp.maximum(n - 1, 1)), var * jnp.inf)
    acc = mean.dtype
    new_mean = running_mean.astype(acc) * (1 - momentum) + mean * momentum
    new_var = running_var.astype(acc) * (1 - momentum) + unbiased * momentum
    return out, mean, invstd, new_mean, new_var


@lower(aten._native_batch_norm_legit.no_stats)
def native_batch_norm_legit_no_stats(ctx, input, weight, bias, training, momentum, eps):
    out, mean, invstd, _, _ = batch_norm_train(input, weight, bias, eps)
    return out, mean, invstd


@lower(aten._native_batch_norm_legit_no_training)
def native_batch_norm_legit_no_training(ctx, input, weight, bias, running_mean, running_var, momentum, eps):
    return _bn_eval(input, weight, bias, running_mean, running_var, eps)


@special(aten.native_batch_norm.default)
def native_batch_norm(*args, **kwargs):
    """native_batch_norm writes the running stats in place without saying so
    in its schema: run it as _native_batch_norm_legit, which does say so."""
    values = schema_of(aten.native_batch_norm.default).normalize(args, kwargs)
    input, weight, bias, running_mean, running_var, training, momentum, eps = values
    if running_mean is None and running_var is None:
        return aten._native_batch_norm_legit.no_stats(input, weight, bias, training, momentum, eps)
    if not training:
        return aten._native_batch_norm_legit_no_training(input, weight, bias, running_mean, running_var, momentum, eps)
    # Only one of the running stats given: update that one, discard the other.
    channels = input.shape[1]
    if running_mean is None:
        running_mean = torch.zeros(channels, dtype=running_var.dtype, device=input.device)
    if running_var is None:
        running_var = torch.ones(channels, dtype=running_mean.dtype, device=input.device)
    return aten._native_batch_norm_legit(input, weight, bias, running_mean, running_var, training, momentum, eps)


@lower(aten.native_batch_norm_backward)
def native_batch_norm_backward(
    ctx, grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train, eps, output_mask
):
    return batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train,
                               eps, output_mask)


def batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train, eps,
                        output_mask, valid=None):
    """The gradients; padded samples (`valid` false) count for nothing."""
    acc = acc_dtype(input.dtype)
    x = input.astype(acc)
    g = grad_out.astype(acc)
    shape = _channel_shape(x)
    axes = _reduce_axes(x)
    if valid is not None:
        valid = jnp.broadcast_to(valid, x.shape)
        x, g = jnp.where(valid, x, 0), jnp.where(valid, g, 0)
    if train:
        mean, invstd = save_mean.astype(acc), save_invstd.astype(acc)
    else:
        mean = running_mean.astype(acc)
        invstd = _rsqrt(running_var.astype(acc) + eps)
    w = jnp.ones_like(invstd) if weight is None else weight.astype(acc)
    centered = x - mean.reshape(shape)
    grad_sum = jnp.sum(g, axis=axes)
    dot = jnp.sum(g * centered, axis=axes)
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        scale = (invstd * w).reshape(shape)
        if train:
            n = input.size // input.shape[1] if valid is None else jnp.sum(valid, axis=axes).astype(acc)
            k = (dot * invstd * invstd / n).reshape(shape)
            grad_input = (g - (grad_sum / n).reshape(shape) - centered * k) * scale
        else:
            grad_input = g * scale
    if output_mask[1]:
        grad_weight = dot * invstd
    if output_mask[2]:
        grad_bias = grad_sum
    return grad_input, grad_weight, grad_bias


# ---------------------------------------------------------------- layer norm


@lower(aten.native_layer_norm)
def native_layer_norm(ctx, input, normalized_shape, weight, bias, eps):
    acc = acc_dtype(input.dtype)
    x = input.astype(acc)
    axes = tuple(range(input.ndim - len(normalized_shape), input.ndim))
    mean = jnp.mean(x, axis=axes, keepdims=True)
    centered = x - mean
    var = jnp.mean(jnp.square(centered), axis=axes, keepdims=True)
    rstd = _rsqrt(var + eps)
    out = centered * rstd
    if weight is not None:
        out = out * weight.astype(acc)
    if bias is not None:
        out = out + bias.astype(acc)
    return out, mean, rstd


@lower(aten.native_layer_norm_backward)
def native_layer_norm_backward(ctx, grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask):
    acc = acc_dtype(input.dtype)
    x = input.astype(acc)
    g = grad_out.astype(acc)
    k = len(normalized_shape)
    axes = tuple(range(input.ndim - k, input.ndim))
    batch_axes = tuple(range(input.ndim - k))
    mean, rstd = mean.astype(acc), rstd.astype(acc)
    xhat = (x - mean) * rstd
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        gw = g if weight is None else g * weight.astype(acc)
        m1 = jnp.mean(gw, axis=axes, keepdims=True)
        m2 = jnp.mean(gw * xhat, axis=axes, keepdims=True)
        grad_input = (gw - m1 - xhat * m2) * rstd
    if output_mask[1]:
        grad_weight = jnp.sum(g * xhat, axis=batch_axes)
    if output_mask[2]:
        grad_bias = jnp.sum(g, axis=batch_axes)
    return grad_input, grad_weight, grad_bias


# ---------------------------------------------------------------- group norm


@lower(aten.native_group_norm)
def native_group_norm(ctx, input, weight, bias, N, C, HxW, group, eps):
    acc = acc_dtype(input.dtype)
    x = input.astype(acc).reshape(N, group, (C // group) * HxW)
    mean = jnp.mean(x, axis=2)
    centered = x - mean[:, :, None]
    var = jnp.mean(jnp.square(centered), axis=2)
    rstd = _rsqrt(var + eps)
    out = (centered * rstd[:, :, None]).reshape(N, C, HxW)
    if weight is not None:
        out = out * weight.astype(acc)[None, :, None]
    if bias is not None:
        out = out + bias.astype(acc)[None, :, None]
    return out.reshape(input.shape), mean, rstd


@lower(aten.native_group_norm_backward)
def native_group_norm_backward(ctx, grad_out, input, mean, rstd, weight, N, C, HxW, group, output_mask):
    acc = acc_dtype(input.dtype)
    d = C // group
    x = input.astype(acc).reshape(N, group, d, HxW)
    g = grad_out.astype(acc).reshape(N, group, d, HxW)
    mean = mean.astype(acc).reshape(N, group, 1, 1)
    rstd = rstd.astype(acc).reshape(N, group, 1, 1)
    xhat = (x - mean) * rstd
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        gw = g if weight is None else g * weight.astype(acc).reshape(1, group, d, 1)
        m1 = jnp.mean(gw, axis=(2, 3), keepdims=True)
        m2 = jnp.mean(gw * xhat, axis=(2, 3), keepdims=True)
        grad_input = ((gw - m1 - xhat * m2) * rstd).reshape(input.shape)
    if output_mask[1]:
        grad_weight = jnp.sum(g * xhat, axis=(0, 3)).reshape(C)
    if output_mask[2]:
        grad_bias = jnp.sum(g, axis=(0, 3)).reshape(C)
    return grad_input, grad_weight, grad_bias


@lower(aten._weight_norm_interface_backward)
def weight_norm_interface_backward(ctx, grad_w, saved_v, saved_g, saved_norms, dim):
    """Backward of w = v * (g / ||v||) (the norm over every dim but `dim`, 0 or
    the last; -1: over the whole tensor).  saved_g and saved_norms have g's
    shape (size 1 except along `dim`); saved_norms may be float32 for half
    v/g.  Accumulates in float32 for low-precision inputs, like ATen."""
    if saved_v.size == 0:  # ATen: grad_g zeroed (the sums are empty, the norms 0)
        return jnp.zeros(saved_v.shape, saved_v.dtype), jnp.zeros(saved_g.shape, saved_g.dtype)
    acc = acc_dtype(saved_v.dtype)
    v = saved_v.astype(acc)
    axes = tuple(range(v.ndim)) if dim == -1 else tuple(i for i in range(v.ndim) if i != dim)
    per_dim_sum = jnp.sum(grad_w.astype(acc) * v, axis=axes, keepdims=True)
    norm = saved_norms.astype(acc).reshape(per_dim_sum.shape)
    g = saved_g.astype(acc).reshape(per_dim_sum.shape)
    grad_g = per_dim_sum / norm
    a = g / norm
    b = a * grad_g / norm
    grad_v = a * grad_w.astype(acc) - b * v
    return grad_v.astype(saved_v.dtype), grad_g.reshape(saved_g.shape).astype(saved_g.dtype)
