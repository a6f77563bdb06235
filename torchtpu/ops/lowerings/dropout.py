"""native_dropout and its backward.

Training: mask ~ Bernoulli(1 - p) from the device generator (ctx.rng_key()),
output = input * mask * (1 / (1 - p)) (scale 0 when p == 1), computed as
torch does (a multiplication, so NaN inputs stay NaN even where dropped).
`train=False` returns the input and an all-True mask; `train=None` means
training, as in ATen.
"""

import jax
import jax.numpy as jnp
import torch

from ..registry import lower
from .common import acc_dtype

aten = torch.ops.aten



def _scaled(x, mask, scale):
    dtype = jnp.dtype(x.dtype)
    acc = acc_dtype(dtype)
    return ((x * mask.astype(dtype)).astype(acc) * scale).astype(dtype)


def keep_mask(key, p, shape):
    """(keep ~ Bernoulli(1 - p) of `shape`, the scale 1 / (1 - p) of kept
    values, 0 when p == 1).  Also fused attention's dropout."""
    keep = 1.0 - p
    return jax.random.bernoulli(key, keep, shape), (0.0 if keep == 0 else 1.0 / keep)


@lower(aten.native_dropout, random=True)
def native_dropout(ctx, input, p, train):
    if train is False:
        return input, jnp.ones(input.shape, jnp.bool_)
    mask, scale = keep_mask(ctx.rng_key(), p, input.shape)
    return _scaled(input, mask, scale), mask


@lower(aten.native_dropout_backward)
def native_dropout_backward(ctx, grad_output, mask, scale):
    return _scaled(grad_output, mask, scale)
