"""Loss functions (nll, mse, bce, ...) and their backward ops.

`reduction` is ATen's int: 0 none, 1 mean, 2 sum.  Pointwise losses are
computed in float32 for bfloat16/float16 (torch's opmath), rounded to the
input dtype element by element (torch materialises the unreduced loss in
the input dtype before reducing it), then reduced in float32.
"""

import jax
import jax.numpy as jnp
import torch

from ..dtype_names import c10_name, found_dtype_error, kernel_not_implemented
from ..registry import lower
from .common import acc_dtype

aten = torch.ops.aten

NONE, MEAN, SUM = 0, 1, 2




def _reduce(loss, reduction, dtype):
    """torch's apply_loss_reduction on a loss materialised in `dtype`."""
    loss = loss.astype(dtype)
    if reduction == NONE:
        return loss
    acc = acc_dtype(dtype)
    if reduction == MEAN:
        return jnp.mean(loss.astype(acc))
    if reduction == SUM:
        return jnp.sum(loss.astype(acc))
    return loss  # (any other value: unreduced, as ATen's apply_loss_reduction)


def _norm(reduction, numel):
    # (an empty input's gradient is empty whatever the factor)
    return 1.0 / max(numel, 1) if reduction == MEAN else 1.0


def _floating_kernel(ctx, kernel, integers=False):
    """ATen's loss kernels take floating types only (some backward kernels
    integers too); the meta kernels take integers and complex."""
    dtype = ctx.out_meta[0].dtype
    if dtype.is_complex or not (dtype.is_floating_point or integers):
        raise kernel_not_implemented(kernel, dtype)


def _same_dtypes(ctx, *indices):
    """TensorIterator's check of ops built without type promotion."""
    dtypes = [ctx.meta_args[i].dtype for i in indices]
    for dtype in dtypes[1:]:
        if dtype != dtypes[0]:
            raise found_dtype_error(dtype, dtypes[0])


def _operands(ctx, *xs):
    """Inputs upcast to the op's compute dtype and broadcast together."""
    dtype = ctx.result_type(*range(len(xs)))
    acc = acc_dtype(dtype)
    xs = jnp.broadcast_arrays(*[x.astype(acc) for x in xs])
    return dtype, acc, xs


# ----------------------------------------------------------------- nll loss


def _labels(self, target):
    """The target as ATen's kernels read it: int64 (a uint8 target's labels
    compare with ignore_index as int64), one sample's (1,) target as its
    one label."""
    target = target.astype(jnp.int64)
    return target.reshape(()) if self.ndim == 1 else target


def _class_weights(weight, safe, acc):
    # (nll_loss2d takes a weight of any shape with C elements)
    return weight.reshape(-1).astype(acc)[safe]


def _nll_pick(self, target, weight, ignore_index):
    """Per-element (loss, weight) of nll_loss, class dim 1 (or 0 for 1-d input)."""
    acc = acc_dtype(self.dtype)
    x = self.astype(acc)
    valid = target != ignore_index
    safe = jnp.where(valid, target, 0)
    if x.ndim == 1:
        picked = x[safe]
    else:
        picked = jnp.squeeze(jnp.take_along_axis(x, jnp.expand_dims(safe, 1), axis=1), 1)
    w = jnp.ones_like(picked) if weight is None else _class_weights(weight, safe, acc)
    w = jnp.where(valid, w, jnp.zeros((), acc))
    loss = jnp.where(valid, -picked * w, jnp.zeros((), acc))
    return loss, w


def _check_targets(ctx, self, target, ignore_index):
    """Class labels outside [0, C) raise at the next sync (device-side check)."""
    classes = self.shape[0] if self.ndim == 1 else self.shape[1]
    bad = ((target != ignore_index) & ((target < 0) | (target >= classes))).reshape(-1)
    if bad.size:
        first = target.reshape(-1)[jnp.argmax(bad)]
        ctx.check(~jnp.any(bad), "Target {value} is out of bounds.", IndexError, value=first)


def _nll_forward(ctx, self, target, weight, reduction, ignore_index):
    target = _labels(self, target)
    _check_targets(ctx, self, target, ignore_index)
    loss, w = _nll_pick(self, target, weight, ignore_index)
    if self.ndim == 1:
        # A single sample: total_weight is its weight for every reduction.
        total = w
        out = loss / total if reduction == MEAN else loss
        return out, total
    if reduction == NONE:
        return loss, jnp.zeros((), loss.dtype)
    total = jnp.sum(w)
    out = jnp.sum(loss)
    if reduction == MEAN:
        out = out / total
    return out, total


def _nll_backward(ctx, grad_output, self, target, weight, reduction, ignore_index, total_weight):
    acc = acc_dtype(self.dtype)
    target = _labels(self, target)
    valid = target != ignore_index
    safe = jnp.where(valid, target, 0)
    w = jnp.ones(target.shape, acc) if weight is None else _class_weights(weight, safe, acc)
    g = grad_output.astype(acc)
    value = -w * g
    if reduction == MEAN:
        value = value / total_weight.astype(acc)
    value = jnp.where(valid, value, jnp.zeros((), acc))
    classes = self.shape[1] if self.ndim > 1 else self.shape[0]
    if self.ndim == 1:
        hot = jnp.arange(classes) == safe
        return jnp.where(hot, value, jnp.zeros((), acc))
    cls_shape = (1, classes) + (1,) * (self.ndim - 2)
    hot = jnp.arange(classes).reshape(cls_shape) == jnp.expand_dims(safe, 1)
    return jnp.where(hot, jnp.expand_dims(value, 1), jnp.zeros((), acc))


@lower(aten.nll_loss_forward, aten.nll_loss2d_forward)
def nll_loss_forward(ctx, self, target, weight, reduction, ignore_index):
    return _nll_forward(ctx, self, target, weight, reduction, ignore_index)


@lower(aten.nll_loss_backward, aten.nll_loss2d_backward)
def nll_loss_backward(ctx, grad_output, self, target, weight, reduction, ignore_index, total_weight):
    return _nll_backward(ctx, grad_output, self, target, weight, reduction, ignore_index, total_weight)


# ------------------------------------------------------------ pointwise losses


@lower(aten.mse_loss)
def mse_loss(ctx, self, target, reduction=MEAN):
    _floating_kernel(ctx, "mse_cpu")
    dtype, _, (x, y) = _operands(ctx, self, target)
    d = x - y
    return _reduce(d * d, reduction, dtype)


@lower(aten.mse_loss_backward)
def mse_loss_backward(ctx, grad_output, self, target, reduction):
    _floating_kernel(ctx, "mse_backward_cpu_out", integers=True)
    dtype, _, (g, x, y) = _operands(ctx, grad_output, self, target)
    return 2.0 * _norm(reduction, x.size) * (x - y) * g


@lower(aten.smooth_l1_loss)
def smooth_l1_loss(ctx, self, target, reduction=MEAN, beta=1.0):
    _floating_kernel(ctx, "smooth_l1_cpu")
    # (ATen's check; the meta kernel does not make it)
    if not beta >= 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    dtype, _, (x, y) = _operands(ctx, self, target)
    z = jnp.abs(x - y)
    if beta == 0:
        return _reduce(z, reduction, dtype)
    loss = jnp.where(z < beta, 0.5 * z * z / beta, z - 0.5 * beta)
    return _reduce(loss, reduction, dtype)


@lower(aten.smooth_l1_loss_backward)
def smooth_l1_loss_backward(ctx, grad_output, self, target, reduction, beta):
    _floating_kernel(ctx, "smooth_l1_backward_cpu_out", integers=True)
    dtype, _, (g, x, y) = _operands(ctx, grad_output, self, target)
    norm = _norm(reduction, x.size)
    d = x - y
    inner = d * g / beta if beta != 0 else jnp.zeros_like(d)
    return norm * jnp.where(d <= -beta, -g, jnp.where(d >= beta, g, inner))


@lower(aten.huber_loss)
def huber_loss(ctx, self, target, reduction=MEAN, delta=1.0):
    _floating_kernel(ctx, "huber_cpu")
    dtype, _, (x, y) = _operands(ctx, self, target)
    z = jnp.abs(x - y)
    loss = jnp.where(z < delta, 0.5 * z * z, delta * (z - 0.5 * delta))
    return _reduce(loss, reduction, dtype)


@lower(aten.huber_loss_backward)
def huber_loss_backward(ctx, grad_output, self, target, reduction, delta):
    _floating_kernel(ctx, "huber_backward_cpu_out")
    dtype, _, (g, x, y) = _operands(ctx, grad_output, self, target)
    norm = _norm(reduction, x.size)
    d = x - y
    return norm * jnp.where(d <= -delta, -g * delta, jnp.where(d >= delta, g * delta, d * g))


@lower(aten.binary_cross_entropy)
def binary_cross_entropy(ctx, self, target, weight=None, reduction=MEAN):
    _floating_kernel(ctx, "binary_cross_entropy")
    _same_dtypes(ctx, 0, 1)
    dtype = ctx.out_dtype
    acc = acc_dtype(dtype)
    x, t = self.astype(acc), target.astype(acc)
    # (ATen's range checks; device-side here, as CUDA's asserts)
    ctx.check((x >= 0) & (x <= 1), "all elements of input should be between 0 and 1")
    ctx.check((t >= 0) & (t <= 1), "all elements of target should be between 0 and 1")
    log_x = jnp.maximum(jnp.log(x), -100.0)
    log_1mx = jnp.maximum(jnp.log(1.0 - x), -100.0)
    loss = ((t - 1.0) * log_1mx - t * log_x).astype(dtype)
    if weight is not None:
        loss = (loss.astype(acc) * weight.astype(acc)).astype(dtype)
    return _reduce(loss, reduction, dtype)


@lower(aten.binary_cross_entropy_backward)
def binary_cross_entropy_backward(ctx, grad_output, self, target, weight=None, reduction=MEAN):
    _floating_kernel(ctx, "binary_cross_entropy_backward")
    _same_dtypes(ctx, 0, 1, 2)
    acc = acc_dtype(ctx.out_dtype)
    g, x, t = grad_output.astype(acc), self.astype(acc), target.astype(acc)
    grad = g * (x - t) / jnp.maximum((1.0 - x) * x, 1e-12)
    if weight is not None:
        grad = grad * weight.astype(acc)
    return grad * _norm(reduction, x.size)


@lower(aten.binary_cross_entropy_with_logits)
def binary_cross_entropy_with_logits(ctx, self, target, weight=None, pos_weight=None, reduction=MEAN):
    _floating_kernel(ctx, "log_sigmoid_cpu")
    dtype = ctx.result_type(0, 1)
    acc = acc_dtype(dtype)
    x, t = self.astype(acc), target.astype(acc)
    log_sig = jax.nn.log_sigmoid(x)
    if pos_weight is not None:
        log_sig = log_sig * ((pos_weight.astype(acc) - 1.0) * t + 1.0)
    loss = (1.0 - t) * x - log_sig
    if weight is not None:
        loss = loss * weight.astype(acc)
    return _reduce(loss, reduction, dtype)


# ------------------------------------------------------------ margin losses
# The backward ops are the VJPs of the forward functions (hinges use
# `where(z > 0, ...)`, so the gradient at the kink is 0, as ATen's).


def _as_frames(x):
    """(N, C) view of a 0-d, 1-d or 2-d input."""
    return x.reshape(1, -1) if x.ndim < 2 else x


def _multi_margin(x, target, p, margin, weight, reduction):
    dtype = x.dtype
    acc = acc_dtype(dtype)
    xs = _as_frames(x).astype(acc)
    t = target.reshape(-1)
    picked = jnp.take_along_axis(xs, t[:, None], axis=1)
    z = margin - picked + xs
    h = jnp.where(z > 0, z if p == 1 else z * z, jnp.zeros((), acc))
    if weight is not None:
        h = h * weight.astype(acc)[t][:, None]
    h = jnp.where(jnp.arange(xs.shape[1]) == t[:, None], jnp.zeros((), acc), h)
    per_frame = jnp.sum(h, axis=1) / xs.shape[1]
    if reduction == NONE:
        return per_frame.astype(dtype).reshape(target.shape if x.ndim > 1 else ())
    return (jnp.mean(per_frame) if reduction == MEAN else jnp.sum(per_frame)).astype(dtype)


def _check_multi_margin_args(ctx, self, target, weight):
    if weight is not None and weight.dtype != self.dtype:
        raise RuntimeError(f"expected scalar type {c10_name(self.dtype)} but found {c10_name(weight.dtype)}")
    classes = self.shape[-1] if self.ndim else 1
    ctx.check((target >= 0) & (target < classes), "target out of range")


@lower(aten.multi_margin_loss, static=("p",))
def multi_margin_loss(ctx, self, target, p=1, margin=1, weight=None, reduction=MEAN):
    _check_multi_margin_args(ctx, self, target, weight)
    return _multi_margin(self, target, p, jnp.asarray(margin), weight, reduction).reshape(ctx.out_shape)


def _like_self(grad_output, self, *args, **kwargs):
    """Meta for backward ops ATen has no meta kernel for: a gradient of `self`."""
    return torch.empty_like(self, memory_format=torch.contiguous_format)


@lower(aten.multi_margin_loss_backward, static=("p",), meta=_like_self)
def multi_margin_loss_backward(ctx, grad_output, self, target, p, margin, weight=None, reduction=MEAN):
    _check_multi_margin_args(ctx, self, target, weight)
    out, vjp = jax.vjp(lambda x: _multi_margin(x, target, p, jnp.asarray(margin), weight, reduction), self)
    return vjp(grad_output.astype(out.dtype).reshape(out.shape))[0]


def _multilabel_targets(target, classes):
    """(valid (N, C) mask of the target slots before the first -1, is_target (N, C))."""
    t = target.reshape(-1, classes)
    valid = jnp.cumprod((t >= 0).astype(jnp.int32), axis=1).astype(bool)
    hot = (jnp.where(valid, t, -1)[:, :, None] == jnp.arange(classes)).any(axis=1)
    return t, valid, hot


def _check_multilabel_target(ctx, self, target, arg):
    """ATen checks every slot, those after the first -1 too."""
    classes = self.shape[-1] if self.ndim else 1
    ctx.check((target >= -1) & (target < classes), f"argument #{arg} 'target' is out of range")


def _multilabel_margin(x, target, reduction):
    dtype = x.dtype
    acc = acc_dtype(dtype)
    xs = _as_frames(x).astype(acc)
    classes = xs.shape[1]
    t, valid, hot = _multilabel_targets(target, classes)
    picked = jnp.take_along_axis(xs, jnp.where(valid, t, 0), axis=1)  # (N, slots)
    z = 1 - picked[:, :, None] + xs[:, None, :]
    keep = valid[:, :, None] & ~hot[:, None, :] & (z > 0)
    per_frame = jnp.sum(jnp.where(keep, z, jnp.zeros((), acc)), axis=(1, 2)) / classes
    if reduction == NONE:
        out = per_frame.astype(dtype).reshape(x.shape[:1] if x.ndim > 1 else ())
    else:
        out = (jnp.mean(per_frame) if reduction == MEAN else jnp.sum(per_frame)).astype(dtype)
    return out, hot.reshape(x.shape).astype(dtype)


@lower(aten.multilabel_margin_loss_forward)
def multilabel_margin_loss_forward(ctx, self, target, reduction):
    _check_multilabel_target(ctx, self, target, 2)
    out, is_target = _multilabel_margin(self, target, reduction)
    return out.reshape(ctx.out_shape), is_target


@lower(aten.multilabel_margin_loss_backward, meta=_like_self)
def multilabel_margin_loss_backward(ctx, grad_output, self, target, reduction, is_target):
    _check_multilabel_target(ctx, self, target, 3)
    out, vjp = jax.vjp(lambda x: _multilabel_margin(x, target, reduction)[0], self)
    return vjp(grad_output.astype(out.dtype).reshape(out.shape))[0]
