"""Data movement every other family relies on: copy, fill, clone."""

import jax.numpy as jnp
import torch

from ..registry import lower
from .common import astype

aten = torch.ops.aten


@lower(aten.copy.default)
def copy(ctx, dst, src, non_blocking=False):
    return jnp.broadcast_to(astype(src, dst.dtype), dst.shape)


@lower(aten.fill.Scalar, aten.fill.Tensor)
def fill(ctx, self, value):
    return jnp.full(self.shape, astype(value, self.dtype))


@lower(aten.zero.default)
def zero(ctx, self):
    return jnp.zeros_like(self)


@lower(aten.clone.default)
def clone(ctx, self, memory_format=None):
    return self
