"""scaled_dot_product_attention as one op, forward and backward.

csrc/attention.cpp answers ATen's backend question for `tpu` with
"overrideable", so `F.scaled_dot_product_attention` reaches us as
`_scaled_dot_product_fused_attention_overrideable` (eager and compiled
graphs alike) instead of ATen's math path of separate matmuls and softmax.

Semantics are ATen's: scores = q @ k^T * scale (+ attn_bias; boolean masks
arrive already turned into 0 / -inf by ATen), top-left aligned causal mask,
grouped-query attention when k/v have fewer heads (query head h reads
key/value head h // (Hq / Hkv), as `repeat_interleave` in the math path), and
a query row whose keys are all masked out gives zeros, not NaN.  Scores,
softmax and the row's log-sum-exp are computed in float32 (float64 for
double inputs); the output rounds once to the input dtype, as CPU and CUDA
flash attention do.

The backward is flash attention's: the saved log-sum-exp rebuilds the
probabilities without another max/sum pass, and the gradient of the scores
also gives attn_bias's gradient (a learned bias, e.g. T5's relative
positions), summed over the dims the bias was broadcast along.

Dropout (training) drops probabilities after the softmax, as the math path
does: out = (P * keep / (1 - p)) @ V, the log-sum-exp unchanged.  The keep
mask comes from the device generator through a PRNG key that the forward
returns packed in `philox_seed`, so the backward redraws the same mask.

On TPU and GPU the dropout-free forward runs as a Pallas kernel
(torchtpu/pallas/); the functions here are the XLA reference it is tested
against.
"""

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from ...pallas import attention as pallas_attention
from ...runtime import devices
from ..registry import lower
from ..special import special
from .common import acc_dtype
from .dropout import keep_mask

aten = torch.ops.aten


def _scale(query, scale):
    return 1.0 / np.sqrt(query.shape[-1]) if scale is None else scale


def _group(query, key):
    """How many query heads share one key/value head."""
    return query.shape[-3] // key.shape[-3]


def _repeat_heads(x, group):
    return x if group == 1 else jnp.repeat(x, group, axis=-3)


def _sum_groups(x, group):
    """Gradient of _repeat_heads: sum each group of query heads."""
    if group == 1:
        return x
    shape = x.shape[:-3] + (x.shape[-3] // group, group) + x.shape[-2:]
    return x.reshape(shape).sum(axis=-3)


def _dot(ctx, a, b, contract):
    """Batched over all leading dims, in the accumulation dtype (16-bit
    operands widen to float32 first: their products are exact there)."""
    batch = tuple(range(a.ndim - 2))
    common = jnp.promote_types(a.dtype, b.dtype)
    acc = acc_dtype(common)
    precision = ctx.precision if common == jnp.float32 else lax.Precision.HIGHEST
    return lax.dot_general(a.astype(acc), b.astype(acc), (contract, (batch, batch)), precision=precision)


def _scores(ctx, query, key, attn_bias, is_causal, scale, key_valid):
    """q @ k^T * scale, plus the bias and the causal mask, in float32/64.
    key_valid (dynamic shapes: False for padded keys) masks like the causal
    mask does."""
    acc = acc_dtype(query.dtype)
    # (the scale on q, an (L, D) pass, rather than on the (L, S) scores)
    s = _dot(ctx, query.astype(acc) * jnp.asarray(scale, acc), key, ((query.ndim - 1,), (key.ndim - 1,)))
    if attn_bias is not None:
        s = s + attn_bias.astype(s.dtype)
    if is_causal:
        length, source = s.shape[-2:]
        s = jnp.where(jnp.tril(jnp.ones((length, source), jnp.bool_)), s, -jnp.inf)
    if key_valid is not None:
        s = jnp.where(key_valid, s, -jnp.inf)
    return s


def _zero_where_not(valid, *xs):
    """Padded rows (dynamic shapes) zeroed: they may hold anything, NaN too."""
    if valid is None:
        return xs
    return tuple(jnp.where(valid, x, jnp.zeros((), x.dtype)) for x in xs)


def _finite_or(x, fill):
    return jnp.where(jnp.isfinite(x), x, fill)


def attention_forward(ctx, query, key, value, attn_bias, is_causal, scale, key_valid=None, dropout=None):
    """(output in the input dtype, log-sum-exp per query row in float32/64).
    key_valid: (..., 1, S), False for padded keys (compile/dynamic.py).
    dropout: None or (p, PRNG key) -- see `_dropout_scale`."""
    group = _group(query, key)
    key, value = _repeat_heads(key, group), _repeat_heads(value, group)
    rows = None if key_valid is None else jnp.swapaxes(key_valid, -1, -2)
    key, value = _zero_where_not(rows, key, value)
    s = _scores(ctx, query, key, attn_bias, is_causal, _scale(query, scale), key_valid)
    p, total, row_max = _unnormalized(s)
    if dropout is not None:
        p = p * _dropout_scale(dropout, p.shape, p.dtype)
    out = _dot(ctx, p, value, ((p.ndim - 1,), (value.ndim - 2,)))
    out = out * jnp.where(total > 0, 1.0 / jnp.where(total > 0, total, 1.0), 0.0)
    return out.astype(query.dtype), (jnp.log(total) + row_max)[..., 0]


def _dropout_scale(dropout, shape, dtype):
    """keep / (1 - p) with keep ~ Bernoulli(1 - p), all zeros when p == 1
    (the math path's dropout)."""
    keep, scale = keep_mask(dropout[1], dropout[0], shape)
    return jnp.where(keep, jnp.asarray(scale, dtype), jnp.zeros((), dtype))


def pack_key(key):
    """A PRNG key as the int64 `philox_seed` the fused op returns."""
    hi, lo = (x.astype(jnp.uint64) for x in jax.random.key_data(key))
    return lax.bitcast_convert_type((hi << 32) | lo, jnp.int64)


def unpack_key(seed):
    bits = lax.bitcast_convert_type(jnp.asarray(seed).reshape(()), jnp.uint64)
    data = jnp.stack([(bits >> 32).astype(jnp.uint32), (bits & 0xFFFFFFFF).astype(jnp.uint32)])
    return jax.random.wrap_key_data(data, impl="threefry2x32")


def _unnormalized(s):
    """(exp(s - row max), its row sums, the row max); a fully masked row
    (all -inf) has no max: its sum is 0."""
    row_max = _finite_or(jnp.max(s, axis=-1, keepdims=True), 0.0)
    p = jnp.exp(s - row_max)
    return p, jnp.sum(p, axis=-1, keepdims=True), row_max


def _log_sum_exp(s):
    """Per row, -inf for a fully masked one."""
    _, total, row_max = _unnormalized(s)
    return (jnp.log(total) + row_max)[..., 0]


def _reduce_to(grad, shape):
    """Sum a broadcast result's gradient back to the operand's shape."""
    extra = grad.ndim - len(shape)
    grad = grad.sum(axis=tuple(range(extra))) if extra else grad
    dims = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    return grad.sum(axis=dims, keepdims=True) if dims else grad


def attention_backward(ctx, grad_out, query, key, value, attn_bias, out, lse, is_causal, scale,
                       query_valid=None, key_valid=None, bias_grad=True, dropout=None):
    """(grad_query, grad_key, grad_value, grad_attn_bias or None).
    query_valid: (..., L, 1), key_valid: (..., 1, S), False for padded rows.
    dropout: the forward's (p, PRNG key), which redraws its mask."""
    group = _group(query, key)
    k, v = _repeat_heads(key, group), _repeat_heads(value, group)
    k, v = _zero_where_not(None if key_valid is None else jnp.swapaxes(key_valid, -1, -2), k, v)
    query, grad_out, out = _zero_where_not(query_valid, query, grad_out, out)
    scale = _scale(query, scale)
    s = _scores(ctx, query, k, attn_bias, is_causal, scale, key_valid)
    acc = s.dtype
    if jnp.dtype(lse.dtype) != acc:  # (ATen saves it in float32 even for double inputs: recomputed in double)
        lse = _log_sum_exp(s)
    # exp(s - lse): the softmax rebuilt from the saved log-sum-exp.  A fully
    # masked row has lse = -inf and s = -inf: its probabilities are 0.
    p = jnp.exp(s - jnp.where(jnp.isneginf(lse), jnp.inf, lse)[..., None])
    if query_valid is not None:
        p = jnp.where(query_valid, p, 0.0)
    g = grad_out.astype(acc)
    # With dropout the output read p * d (d = keep / (1 - p)): v's gradient
    # sees the dropped probabilities, p's gradient is d * (g @ v^T); the row
    # term sum_j p_ij d_ij (g @ v^T)_ij is still g . out.
    d = None if dropout is None else _dropout_scale(dropout, p.shape, acc)
    grad_v = _dot(ctx, jnp.swapaxes(p if d is None else p * d, -1, -2), g, ((p.ndim - 1,), (g.ndim - 2,)))
    grad_p = _dot(ctx, g, v, ((g.ndim - 1,), (v.ndim - 1,)))
    if d is not None:
        grad_p = grad_p * d
    row = jnp.sum(g * out.astype(acc), axis=-1, keepdims=True)  # = sum_j p_ij * grad_p_ij
    grad_s = p * (grad_p - row)
    # (the scale on the (L, D) and (S, D) products rather than on grad_s)
    grad_q = _dot(ctx, grad_s, k, ((grad_s.ndim - 1,), (k.ndim - 2,))) * jnp.asarray(scale, acc)
    grad_k = _dot(ctx, jnp.swapaxes(grad_s, -1, -2), query, ((grad_s.ndim - 1,), (query.ndim - 2,))) * jnp.asarray(scale, acc)
    grad_bias = None if attn_bias is None or not bias_grad else _reduce_to(grad_s, attn_bias.shape).astype(attn_bias.dtype)
    return (
        grad_q.astype(query.dtype),
        _sum_groups(grad_k, group).astype(key.dtype),
        _sum_groups(grad_v, group).astype(value.dtype),
        grad_bias,
    )


def _draws_dropout(query, key, value, attn_bias=None, dropout_p=0.0, *args, **kwargs):
    return dropout_p != 0.0


def forward_dropout(ctx, dropout_p):
    """(p, a fresh PRNG key) for a call with dropout, else None."""
    return None if dropout_p == 0.0 else (dropout_p, ctx.rng_key())


@lower(aten._scaled_dot_product_fused_attention_overrideable, random=_draws_dropout)
def fused_attention(ctx, query, key, value, attn_bias=None, dropout_p=0.0, is_causal=False,
                    return_debug_mask=False, scale=None):
    dropout = forward_dropout(ctx, dropout_p)
    kernel = None
    if dropout is None:  # (the Pallas kernel has no dropout)
        kernel = pallas_attention.attention(query, key, value, attn_bias, is_causal, _scale(query, scale),
                                            ctx.precision, devices.platform())
    if kernel is None:
        kernel = attention_forward(ctx, query, key, value, attn_bias, is_causal, scale, dropout=dropout)
    return forward_returns(ctx, query, key, *kernel, dropout)


def forward_returns(ctx, query, key, out, lse, dropout):
    """The fused op's nine returns around (output, log-sum-exp): no
    cumulative sequence lengths, the max lengths, the dropout mask's PRNG
    key packed in philox_seed (0 without dropout; the offset is unused),
    no debug mask."""
    lse = lse.reshape(ctx.out_meta[1].shape)  # (3-d inputs: a batch of 1)
    seed = offset = jnp.zeros((), jnp.int64)
    if dropout is not None:
        seed = pack_key(dropout[1])
    return out, lse, None, None, query.shape[-2], key.shape[-2], seed, offset, None


def backward_dropout(dropout_p, philox_seed):
    """The forward's (p, PRNG key), from what it returned, or None."""
    return None if dropout_p == 0.0 else (dropout_p, unpack_key(philox_seed))


def _has_grad_out(grad_out, *args, **kwargs):
    return grad_out is not None


@special(aten._scaled_dot_product_fused_attention_overrideable_backward.default, generic_when=_has_grad_out)
def fused_attention_backward_without_grad(*args, **kwargs):
    """No gradient reached the output (a custom Function's backward returned
    None for it, gradcheck's undefined-gradient check): undefined gradients,
    as CUDA's attention backwards return."""
    return None, None, None, None


@lower(aten._scaled_dot_product_fused_attention_overrideable_backward)
def fused_attention_backward(ctx, grad_out, query, key, value, attn_bias, grad_input_mask, out, logsumexp,
                             cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed,
                             philox_offset, scale=None):
    lse = logsumexp.reshape(query.shape[:-1])
    grads = attention_backward(ctx, grad_out, query, key, value, attn_bias, out, lse, is_causal, scale,
                               bias_grad=bool(grad_input_mask[3]), dropout=backward_dropout(dropout_p, philox_seed))
    if attn_bias is not None and grads[3] is None:  # (a boolean mask made -inf/0: nobody reads its gradient)
        grads = grads[:3] + (jnp.zeros(attn_bias.shape, attn_bias.dtype),)
    return grads
