"""The fused inference ops of nn.MultiheadAttention and
nn.TransformerEncoderLayer's fast path (eval mode, no grad): PyTorch takes
that path on any privateuse1 device, so without these every BERT-style
encoder layer in inference ran on the CPU.

Math as ATen's CPU kernels: q, k, v from one packed projection, q scaled by
1/sqrt(head dim) before the product, a softmax over keys whose masked
positions (bool True) are left out -- a row with every key masked gives 0,
not NaN -- then the output projection.  The nested tensors the encoder
builds from a padding mask run through the same kernel: ops/nested.py."""

import math

import jax
import jax.numpy as jnp
import torch

from .. import nested
from ..registry import lower
from ..schema import schema_of
from ..special import special
from .normalization import native_layer_norm

aten = torch.ops.aten


def _linear(x, weight, bias):
    return jnp.matmul(x, weight.T) + bias


def _mask_bias(mask, mask_type, batch, query_len):
    """The mask as (bool keep-out or float add) broadcastable to
    (B, H, L, S), or None."""
    if mask is None:
        return None
    if mask.ndim == 2 and mask_type == 1:  # key padding, (B, S)
        return mask[:, None, None, :]
    if mask.ndim == 2:  # attention mask, (L, S)
        return mask[None, None]
    if mask.ndim == 3:  # (B or 1, L, S)
        return mask[:, None]
    return mask


def _attention(query, key, value, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, mask, mask_type):
    """(output (B, L, E), attention weights (B, H, L, S))."""
    embed = query.shape[-1]
    wq, wk, wv = jnp.split(qkv_weight, 3)
    bq, bk, bv = jnp.split(qkv_bias, 3)
    head = embed // num_heads

    def heads(x, w, b):  # (B, N, E) -> (B, H, N, D)
        y = _linear(x, w, b)
        return y.reshape(y.shape[:-1] + (num_heads, head)).swapaxes(-2, -3)

    q = heads(query, wq, bq) / math.sqrt(head)
    k, v = heads(key, wk, bk), heads(value, wv, bv)
    scores = jnp.matmul(q, k.swapaxes(-1, -2))
    bias = _mask_bias(mask, mask_type, query.shape[0], query.shape[-2])
    keep = None
    if bias is not None and bias.dtype == jnp.bool_:
        keep = jnp.broadcast_to(~bias, scores.shape)
        scores = jnp.where(keep, scores, -jnp.inf)
    elif bias is not None:
        scores = scores + bias
    top = jnp.max(scores, axis=-1, keepdims=True)
    e = jnp.exp(scores - jnp.where(jnp.isfinite(top), top, 0))
    total = jnp.sum(e, axis=-1, keepdims=True)
    weights = jnp.where(total > 0, e / jnp.where(total > 0, total, 1), 0)  # every key masked: 0
    out = jnp.matmul(weights, v)  # (B, H, L, D)
    out = out.swapaxes(-2, -3).reshape(out.shape[:-3] + (out.shape[-2], embed))
    return _linear(out, proj_weight, proj_bias), weights


def _needs_weights(*args, **kwargs):
    return schema_of(aten._native_multi_head_attention.default).normalize(args, kwargs)[10]


@special(aten._native_multi_head_attention.default, generic_when=_needs_weights)
def attention_without_weights(*args, **kwargs):
    """need_weights=False: ATen returns no weights (None), where the meta
    kernel has an empty tensor."""
    from .. import dispatch

    out, _ = dispatch.run(aten._native_multi_head_attention.default, args, kwargs)
    return out, None


@lower(aten._native_multi_head_attention.default)
def native_multi_head_attention(ctx, query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight,
                                proj_bias, mask=None, need_weights=True, average_attn_weights=True, mask_type=None):
    out, weights = _attention(query, key, value, num_head, qkv_weight, qkv_bias, proj_weight, proj_bias, mask,
                              mask_type)
    if not need_weights:
        return out, jnp.zeros(tuple(ctx.out_meta[1].shape), out.dtype)
    return out, jnp.mean(weights, axis=1) if average_attn_weights else weights


def _layer_norm(ctx, x, weight, bias, eps):
    """native_layer_norm's lowering over the last dim (in its accumulation
    dtype: float32 for 16-bit inputs)."""
    return native_layer_norm(ctx, x, (x.shape[-1],), weight, bias, eps)[0]


@lower(aten._transformer_encoder_layer_fwd.default)
def transformer_encoder_layer(ctx, src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
                              use_gelu, norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2,
                              ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2, mask=None, mask_type=None):
    x = _layer_norm(ctx, src, norm_weight_1, norm_bias_1, eps) if norm_first else src
    x = _attention(x, x, x, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, mask, mask_type)[0] + src
    if not norm_first:
        x = _layer_norm(ctx, x, norm_weight_1, norm_bias_1, eps)
    residual = x
    if norm_first:
        x = _layer_norm(ctx, x, norm_weight_2, norm_bias_2, eps)
    hidden = _linear(x, ffn_weight_1, ffn_bias_1)
    hidden = jax.nn.gelu(hidden, approximate=False) if use_gelu else jax.nn.relu(hidden)
    x = _linear(hidden, ffn_weight_2, ffn_bias_2) + residual
    if not norm_first:
        x = _layer_norm(ctx, x, norm_weight_2, norm_bias_2, eps)
    return x.astype(src.dtype)


@special(aten._transformer_encoder_layer_fwd.default)
def transformer_encoder_layer_or_autocast(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
                                          use_gelu, norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2,
                                          norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2,
                                          mask=None, mask_type=None):
    """PyTorch turns the encoder layer's fast path off under CUDA autocast
    only (`torch.is_autocast_enabled()` looks at CUDA), so under tpu autocast
    the fused op arrives here, where one fp32 kernel would ignore autocast.
    Then it runs as the slow path does -- attention, linears and norms as
    separate ops, each autocast -- and otherwise as the fused kernel.
    (Never served from the C++ kernel cache: autocast is not in its key.)"""
    from .. import dispatch

    args = (src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, use_gelu, norm_first, eps,
            norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2,
            ffn_bias_2, mask, mask_type)
    if not torch.is_autocast_enabled("tpu"):
        return dispatch.run(aten._transformer_encoder_layer_fwd.default, args, {})
    F = torch.nn.functional
    shape = (embed_dim,)

    def attention(x):
        return torch._native_multi_head_attention(x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight,
                                                  proj_bias, mask, False, True, mask_type)[0]

    def feed_forward(x):
        hidden = F.linear(x, ffn_weight_1, ffn_bias_1)
        return F.linear(F.gelu(hidden) if use_gelu else F.relu(hidden), ffn_weight_2, ffn_bias_2)

    if norm_first:
        x = src + attention(F.layer_norm(src, shape, norm_weight_1, norm_bias_1, eps))
        return x + feed_forward(F.layer_norm(x, shape, norm_weight_2, norm_bias_2, eps))
    x = F.layer_norm(src + attention(src), shape, norm_weight_1, norm_bias_1, eps)
    return F.layer_norm(x + feed_forward(x), shape, norm_weight_2, norm_bias_2, eps)


@special(aten._nested_tensor_from_mask.default)
def nested_tensor_from_mask(t, mask, mask_check=True):
    # (nn.TransformerEncoder's packing of its padded batch: see ops/nested.py)
    return nested.nested_tensor_from_mask(t, mask, mask_check)


@special(aten._nested_tensor_from_mask_left_aligned.default)
def nested_tensor_from_mask_left_aligned(t, mask):
    return nested.nested_tensor_from_mask_left_aligned(t, mask)
