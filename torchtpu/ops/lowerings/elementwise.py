"""Pointwise ops with torch's type promotion."""

import jax.numpy as jnp
import torch

from ..registry import lower

aten = torch.ops.aten


def _binary(fn):
    def lowering(ctx, a, b, *rest):
        dtype = ctx.result_type(0, 1)
        return fn(jnp.asarray(a).astype(dtype), jnp.asarray(b).astype(dtype), *rest)

    return lowering


@lower(aten.add.Tensor, aten.add.Scalar)
def add(ctx, a, b, alpha=1):
    dtype = ctx.out_dtype
    a = jnp.asarray(a).astype(dtype)
    b = jnp.asarray(b).astype(dtype)
    return a + b * jnp.asarray(alpha).astype(dtype)


@lower(aten.copy.default)
def copy(ctx, dst, src, non_blocking=False):
    return jnp.broadcast_to(src.astype(dst.dtype), dst.shape)


@lower(aten.fill.Scalar, aten.fill.Tensor)
def fill(ctx, self, value):
    return jnp.full(self.shape, jnp.asarray(value).astype(self.dtype))
