"""Matrix products: mm, bmm, addmm, baddbmm, mv, dot, ... (float32 precision from torch's matmul precision setting).

float32 (and float64) products use `ctx.precision`; bfloat16/float16 products
accumulate in float32 (`preferred_element_type`) and round once to the low
dtype, as torch's CPU and CUDA kernels do.  The `add*` variants combine
`beta * self + alpha * product` in that same accumulation dtype before the
single rounding, and ignore `self` entirely when beta == 0 (NaN/inf in self
do not propagate), as torch documents.
"""

import jax.numpy as jnp
import torch
from jax import lax

from ..registry import lower

aten = torch.ops.aten

_LOW = (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))


def _acc_dtype(dtype):
    """Dtype in which a product of `dtype` operands is accumulated."""
    dtype = jnp.dtype(dtype)
    return jnp.dtype(jnp.float32) if dtype in _LOW else dtype


def _product(ctx, a, b, contract, batch=((), ())):
    """dot_general of a and b, returned in the accumulation dtype."""
    acc = _acc_dtype(a.dtype)
    if b.dtype != a.dtype:  # mixed operands (e.g. mm.dtype); torch requires equal dtypes otherwise
        common = jnp.promote_types(a.dtype, b.dtype)
        a, b = a.astype(common), b.astype(common)
        acc = _acc_dtype(common)
    precision = ctx.precision if jnp.issubdtype(acc, jnp.floating) or jnp.issubdtype(acc, jnp.complexfloating) else None
    return lax.dot_general(a, b, (contract, batch), precision=precision, preferred_element_type=acc)


def _scalar(s, dtype):
    return jnp.asarray(s).astype(dtype)


def _combine(ctx, self, product, beta, alpha):
    """beta * self + alpha * product in the accumulation dtype; beta == 0
    ignores self."""
    acc = product.dtype
    out = product * _scalar(alpha, acc)
    self_term = self.astype(acc) * _scalar(beta, acc)
    # beta == 0 means "ignore self", not "multiply it by zero" (NaN stays out).
    self_term = jnp.where(jnp.asarray(beta) == 0, jnp.zeros((), acc), self_term)
    return out + self_term


@lower(aten.mm)
def mm(ctx, self, mat2, out_dtype=None):
    return _product(ctx, self, mat2, ((1,), (0,)))


@lower(aten.bmm)
def bmm(ctx, self, mat2, out_dtype=None):
    return _product(ctx, self, mat2, ((2,), (1,)), ((0,), (0,)))


@lower(aten.addmm)
def addmm(ctx, self, mat1, mat2, *rest):
    # default: (beta, alpha); dtype overload: (out_dtype, beta, alpha)
    beta, alpha = rest[-2:]
    return _combine(ctx, self, _product(ctx, mat1, mat2, ((1,), (0,))), beta, alpha)


@lower(aten.baddbmm)
def baddbmm(ctx, self, batch1, batch2, *rest):
    beta, alpha = rest[-2:]
    return _combine(ctx, self, _product(ctx, batch1, batch2, ((2,), (1,)), ((0,), (0,))), beta, alpha)


@lower(aten.addbmm)
def addbmm(ctx, self, batch1, batch2, beta=1, alpha=1):
    # sum over the batch of batch1[i] @ batch2[i]: contract batch and inner dims.
    return _combine(ctx, self, _product(ctx, batch1, batch2, ((0, 2), (0, 1))), beta, alpha)


@lower(aten.mv)
def mv(ctx, self, vec):
    return _product(ctx, self, vec, ((1,), (0,)))


@lower(aten.addmv)
def addmv(ctx, self, mat, vec, beta=1, alpha=1):
    return _combine(ctx, self, _product(ctx, mat, vec, ((1,), (0,))), beta, alpha)


@lower(aten.dot)
def dot(ctx, self, tensor):
    return _product(ctx, self, tensor, ((0,), (0,)))


@lower(aten.vdot)
def vdot(ctx, self, other):
    if jnp.issubdtype(self.dtype, jnp.complexfloating):
        self = jnp.conj(self)
    return _product(ctx, self, other, ((0,), (0,)))


@lower(aten._addmm_activation)
def addmm_activation(ctx, self, mat1, mat2, beta=1, alpha=1, use_gelu=False):
    out = _combine(ctx, self, _product(ctx, mat1, mat2, ((1,), (0,))), beta, alpha)
    # torch rounds the addmm result to the output dtype, then applies the
    # activation (in float32 for low dtypes) and rounds again.
    out = out.astype(ctx.out_dtype)
    if use_gelu:
        x = out.astype(_acc_dtype(out.dtype))
        return x * 0.5 * (1.0 + lax.erf(x * 0.7071067811865476))
    return jnp.maximum(out, jnp.zeros((), out.dtype))

