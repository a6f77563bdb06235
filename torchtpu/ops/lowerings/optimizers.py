"""The fused optimizer steps (`torch.optim.Adam/AdamW/SGD/Adagrad(fused=True)`):
one kernel updates every parameter, as ATen's fused CUDA/CPU kernels do.

Semantics follow ATen's fused kernels: gradients are unscaled in place by
`grad_scale` (AMP), a nonzero `found_inf` skips the whole step, the math
runs in float32 for low-precision parameters, and the optimizer has already
incremented `state_steps` (device tensors) before the call."""

import math

import jax.numpy as jnp
import torch

from ..registry import lower

aten = torch.ops.aten


def _opmath(x):
    return x.astype(jnp.float32) if jnp.issubdtype(x.dtype, jnp.floating) and x.dtype.itemsize < 4 else x


def _scalar(value):
    """lr and friends: a Python number, a traced scalar or a 1-element tensor."""
    return jnp.reshape(jnp.asarray(value, jnp.float32), ())


def _unscaled(grads, grad_scale):
    if grad_scale is None:
        return list(grads)
    scale = _scalar(grad_scale)
    return [(_opmath(g) / scale).astype(g.dtype) for g in grads]


def _unless_inf(found_inf, new, old):
    """`new` values, or all of `old` when found_inf says the step overflowed."""
    if found_inf is None:
        return new
    skip = _scalar(found_inf) != 0
    return [jnp.where(skip, o, n) for n, o in zip(new, old)]


def _bias_correction(beta, step):
    """1 - beta**step without float32's cancellation (1 - 0.999f is off by
    1.3e-5 relative, and every update with it; ATen's fused kernels do this
    in double): -expm1(step * log(beta)), log(beta) taken in double."""
    if beta == 0:
        return 1.0
    return -jnp.expm1(step * math.log(beta))


def _adam(decoupled):
    def lowering(ctx, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, beta1, beta2,
                 weight_decay, eps, amsgrad, maximize, grad_scale=None, found_inf=None):
        lr = _scalar(lr)
        grads_out = _unscaled(grads, grad_scale)
        new_p, new_m, new_v, new_vmax = [], [], [], []
        for i, (p, g, m, v, step) in enumerate(zip(params, grads_out, exp_avgs, exp_avg_sqs, state_steps)):
            p32, g32, m32, v32 = _opmath(p), _opmath(g), _opmath(m), _opmath(v)
            if maximize:
                g32 = -g32
            if weight_decay != 0:
                if decoupled:
                    p32 = p32 * (1 - lr * weight_decay)
                else:
                    g32 = g32 + weight_decay * p32
            m32 = m32 + (g32 - m32) * (1 - beta1)
            v32 = v32 * beta2 + (1 - beta2) * g32 * g32
            step = _scalar(step)
            bias_correction1 = _bias_correction(beta1, step)
            bias_correction2_sqrt = jnp.sqrt(_bias_correction(beta2, step))
            second = v32
            if amsgrad:
                second = jnp.maximum(_opmath(max_exp_avg_sqs[i]), v32)
                new_vmax.append(second.astype(max_exp_avg_sqs[i].dtype))
            denom = jnp.sqrt(second) / bias_correction2_sqrt + eps
            p32 = p32 - (lr / bias_correction1) * m32 / denom
            new_p.append(p32.astype(p.dtype))
            new_m.append(m32.astype(m.dtype))
            new_v.append(v32.astype(v.dtype))
        return (
            _unless_inf(found_inf, new_p, params),
            _unless_inf(found_inf, grads_out, grads),
            _unless_inf(found_inf, new_m, exp_avgs),
            _unless_inf(found_inf, new_v, exp_avg_sqs),
            _unless_inf(found_inf, new_vmax, list(max_exp_avg_sqs)[: len(new_vmax)]),
        )

    return lowering


_ADAM_STATIC = ("beta1", "beta2", "weight_decay", "eps", "amsgrad", "maximize")



def _no_outputs(*args, **kwargs):
    """Meta kernel of an in-place op that returns nothing (ATen has none for
    _fused_sgd_ and the tensor_lr overloads): its outputs are its mutated arguments, same geometry."""
    return None


def _steps(name):
    """The in-place op (eager) and its functional form (compiled graphs)."""
    inplace, functional = getattr(aten, name + "_"), getattr(aten, name)
    return inplace.default, inplace.tensor_lr, functional.default, functional.tensor_lr


lower(*_steps("_fused_adam"), static=_ADAM_STATIC, traced=("lr",), meta=_no_outputs)(_adam(False))
lower(*_steps("_fused_adamw"), static=_ADAM_STATIC, traced=("lr",), meta=_no_outputs)(_adam(True))


@lower(*_steps("_fused_sgd"), static=("weight_decay", "momentum", "dampening", "nesterov", "maximize", "is_first_step"),
       traced=("lr",), meta=_no_outputs)
def fused_sgd(ctx, params, grads, momentum_buffers, weight_decay, momentum, lr, dampening, nesterov, maximize,
              is_first_step, grad_scale=None, found_inf=None):
    lr = _scalar(lr)
    grads_out = _unscaled(grads, grad_scale)
    new_p, new_buf = [], []
    for i, (p, g) in enumerate(zip(params, grads_out)):
        p32, d = _opmath(p), _opmath(g)
        if maximize:
            d = -d
        if weight_decay != 0:
            d = d + weight_decay * p32
        if momentum != 0:
            buf = d if is_first_step else _opmath(momentum_buffers[i]) * momentum + (1 - dampening) * d
            new_buf.append(buf.astype(momentum_buffers[i].dtype))
            d = d + momentum * buf if nesterov else buf
        new_p.append((p32 - lr * d).astype(p.dtype))
    return (
        _unless_inf(found_inf, new_p, params),
        _unless_inf(found_inf, grads_out, grads),
        _unless_inf(found_inf, new_buf, list(momentum_buffers)[: len(new_buf)]),
    )


def _writes_steps(op):
    """`_fused_adagrad_` (not its tensor_lr overload) declares state_steps
    mutated, and its functional form returns them: unchanged values then."""
    schema = op._schema
    return any(r.name == "state_steps_out" for r in schema.returns) or any(
        a.name == "state_steps" and a.alias_info is not None and a.alias_info.is_write for a in schema.arguments
    )


@lower(*_steps("_fused_adagrad"), static=("lr_decay", "weight_decay", "eps", "maximize"), traced=("lr",),
       meta=_no_outputs)
def fused_adagrad(ctx, params, grads, state_sums, state_steps, lr, lr_decay, weight_decay, eps, maximize,
                  grad_scale=None, found_inf=None):
    lr = _scalar(lr)
    grads_out = _unscaled(grads, grad_scale)
    new_p, new_sum = [], []
    for p, g, s, step in zip(params, grads_out, state_sums, state_steps):
        p32, g32, s32 = _opmath(p), _opmath(g), _opmath(s)
        if maximize:
            g32 = -g32
        if weight_decay != 0:
            g32 = g32 + weight_decay * p32
        clr = lr / (1 + (_scalar(step) - 1) * lr_decay)
        s32 = s32 + g32 * g32
        p32 = p32 - clr * g32 / (jnp.sqrt(s32) + eps)
        new_p.append(p32.astype(p.dtype))
        new_sum.append(s32.astype(s.dtype))
    out = (
        _unless_inf(found_inf, new_p, params),
        _unless_inf(found_inf, grads_out, grads),
        _unless_inf(found_inf, new_sum, state_sums),
    )
    return out + (list(state_steps),) if _writes_steps(ctx.op) else out
