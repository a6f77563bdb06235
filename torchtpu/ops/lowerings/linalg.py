"""Matrix products: mm, bmm, addmm, baddbmm, mv, dot, ... (float32 precision from torch's matmul precision setting),
plus the ops built directly on them: the fused LSTM/GRU cells (nn.LSTM, nn.GRU on a non-CPU device) and
p-norm distances (cdist, pdist).

float32 (and float64) products use `ctx.precision`; bfloat16/float16 products
accumulate in float32 (`preferred_element_type`) and round once to the low
dtype, as torch's CPU and CUDA kernels do.  The `add*` variants combine
`beta * self + alpha * product` in that same accumulation dtype before the
single rounding, and ignore `self` entirely when beta == 0 (NaN/inf in self
do not propagate), as torch documents.
"""

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from ...runtime import devices
from ...runtime.dtypes import to_jax
from .. import dispatch
from ..registry import lower
from .common import acc_dtype
from .linalg_decomp import _to_out
from .reductions import reject
from ..schema import schema_of
from ..special import special
from ..transfer import materialize, wrap

aten = torch.ops.aten





def _product(ctx, a, b, contract, batch=((), ())):
    """dot_general of a and b, returned in the accumulation dtype."""
    # ATen has no bool products (CPU and CUDA both raise), though XLA would compute one.
    reject(ctx.op._schema.name.split("::")[-1], a.dtype, ("bool",))
    acc = acc_dtype(a.dtype)
    if b.dtype != a.dtype:  # mixed operands (e.g. mm.dtype); torch requires equal dtypes otherwise
        common = jnp.promote_types(a.dtype, b.dtype)
        a, b = a.astype(common), b.astype(common)
        acc = acc_dtype(common)
    precision = ctx.precision if jnp.issubdtype(acc, jnp.floating) or jnp.issubdtype(acc, jnp.complexfloating) else None
    if acc != a.dtype and jnp.issubdtype(acc, jnp.floating) and devices.platform() == "cpu":
        # XLA:CPU's dot runtime rejects some bf16 x bf16 -> f32 dots (in
        # backward graphs under dynamic=True); f32 operands give the same
        # result: a product of two 16-bit floats is exact in f32.
        a, b = a.astype(acc), b.astype(acc)
    return lax.dot_general(a, b, (contract, batch), precision=precision, preferred_element_type=acc)


def _scalar(s, dtype):
    return jnp.asarray(s).astype(dtype)


def _combine(ctx, self, product, beta, alpha, blas=False):
    """beta * self + alpha * product in the accumulation dtype; beta == 0
    ignores self.  `blas`: alpha == 0 ignores the product, as BLAS gemm/gemv
    (ATen's addmm, addmv, addbmm; its baddbmm and addr multiply by 0)."""
    acc = product.dtype
    out = product * _scalar(alpha, acc)
    if blas:
        out = jnp.where(jnp.asarray(alpha) == 0, jnp.zeros((), acc), out)
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
    return _combine(ctx, self, _product(ctx, mat1, mat2, ((1,), (0,))), beta, alpha, blas=True)


@lower(aten.baddbmm)
def baddbmm(ctx, self, batch1, batch2, *rest):
    beta, alpha = rest[-2:]
    return _combine(ctx, self, _product(ctx, batch1, batch2, ((2,), (1,)), ((0,), (0,))), beta, alpha)


@lower(aten.addbmm)
def addbmm(ctx, self, batch1, batch2, beta=1, alpha=1):
    # sum over the batch of batch1[i] @ batch2[i]: contract batch and inner dims.
    return _combine(ctx, self, _product(ctx, batch1, batch2, ((0, 2), (0, 1))), beta, alpha, blas=True)


@lower(aten.mv)
def mv(ctx, self, vec):
    return _product(ctx, self, vec, ((1,), (0,)))


@lower(aten.addmv)
def addmv(ctx, self, mat, vec, beta=1, alpha=1):
    return _combine(ctx, self, _product(ctx, mat, vec, ((1,), (0,))), beta, alpha, blas=True)


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
    out = _combine(ctx, self, _product(ctx, mat1, mat2, ((1,), (0,))), beta, alpha, blas=True)
    # torch rounds the addmm result to the output dtype, then applies the
    # activation (in float32 for low dtypes) and rounds again.
    out = out.astype(ctx.out_dtype)
    if use_gelu:
        x = out.astype(acc_dtype(out.dtype))
        return x * 0.5 * (1.0 + lax.erf(x * 0.7071067811865476))
    return jnp.maximum(out, jnp.zeros((), out.dtype))



# ------------------------------------------------------------ recurrent cells
#
# On a non-CPU device nn.LSTM / nn.GRU run their gate math as the fused cell
# ops (CUDA's kernels, no CPU kernel): the two gate matmuls are ordinary
# addmm/mm; these ops take the resulting gate pre-activations.  Gate order is
# PyTorch's (LSTM: i, f, g, o; GRU: r, z, n); the workspace layouts are
# CUDA's (LSTM: the activated gates; GRU: r, z, n, hidden n-gate + its bias,
# hx), computed in float32 and stored in the input dtype as CUDA does.


def _gate_sum(a, b, bias_a, bias_b, acc):
    out = a.astype(acc) + b.astype(acc)
    if bias_a is not None:
        out = out + bias_a.astype(acc)
    if bias_b is not None:
        out = out + bias_b.astype(acc)
    return out


def _lstm_cell(input_gates, hidden_gates, cx, input_bias, hidden_bias):
    acc = acc_dtype(input_gates.dtype)
    gates = _gate_sum(input_gates, hidden_gates, input_bias, hidden_bias, acc)
    i, f, g, o = jnp.split(gates, 4, axis=1)
    i, f, g, o = jax.nn.sigmoid(i), jax.nn.sigmoid(f), jnp.tanh(g), jax.nn.sigmoid(o)
    cy = f * cx.astype(acc) + i * g
    hy = o * jnp.tanh(cy)
    return hy, cy, jnp.concatenate([i, f, g, o], axis=1)


@lower(aten._thnn_fused_lstm_cell)
def thnn_fused_lstm_cell(ctx, input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    return _lstm_cell(input_gates, hidden_gates, cx, input_bias, hidden_bias)


@special(
    aten._thnn_fused_lstm_cell.default,
    generic_when=lambda *args, **kwargs: _lstm_has_bias(args, kwargs),
)
def thnn_fused_lstm_cell_no_bias(*args, **kwargs):
    """Without biases ATen's meta kernel fails: pass zero biases instead."""
    values = schema_of(aten._thnn_fused_lstm_cell.default).normalize(args, kwargs)
    input_gates = values[0]
    zeros = torch.zeros(input_gates.shape[1], dtype=input_gates.dtype, device=input_gates.device)
    values[3] = zeros if values[3] is None else values[3]
    values[4] = zeros if values[4] is None else values[4]
    return dispatch.run(aten._thnn_fused_lstm_cell.default, values, {})


def _lstm_has_bias(args, kwargs):
    values = schema_of(aten._thnn_fused_lstm_cell.default).normalize(args, kwargs)
    return values[3] is not None and values[4] is not None


@lower(aten._thnn_fused_lstm_cell_backward_impl)
def thnn_fused_lstm_cell_backward_impl(ctx, grad_hy, grad_cy, cx, cy, workspace, has_bias):
    acc = acc_dtype(workspace.dtype)
    i, f, g, o = jnp.split(workspace.astype(acc), 4, axis=1)
    cx, cy = cx.astype(acc), cy.astype(acc)
    gh = jnp.zeros_like(cy) if grad_hy is None else grad_hy.astype(acc)
    gc = jnp.zeros_like(cy) if grad_cy is None else grad_cy.astype(acc)
    tanh_cy = jnp.tanh(cy)
    grad_o = gh * tanh_cy * o * (1 - o)
    grad_c = gh * o * (1 - tanh_cy * tanh_cy) + gc
    grad_i = grad_c * g * i * (1 - i)
    grad_f = grad_c * cx * f * (1 - f)
    grad_g = grad_c * i * (1 - g * g)
    grad_gates = jnp.concatenate([grad_i, grad_f, grad_g, grad_o], axis=1)
    grad_cx = grad_c * f
    grad_bias = jnp.sum(grad_gates, axis=0) if has_bias else None
    return grad_gates, grad_cx, grad_bias


def _gru_cell(input_gates, hidden_gates, hx, input_bias, hidden_bias):
    acc = acc_dtype(input_gates.dtype)
    h = hx.shape[1]
    ig = input_gates.astype(acc) + (0 if input_bias is None else input_bias.astype(acc))
    hg = hidden_gates.astype(acc) + (0 if hidden_bias is None else hidden_bias.astype(acc))
    r = jax.nn.sigmoid(ig[:, :h] + hg[:, :h])
    z = jax.nn.sigmoid(ig[:, h : 2 * h] + hg[:, h : 2 * h])
    hn = hg[:, 2 * h :]
    n = jnp.tanh(ig[:, 2 * h :] + r * hn)
    hx = hx.astype(acc)
    hy = n + z * (hx - n)
    return hy, jnp.concatenate([r, z, n, hn, hx], axis=1)


def _gru_cell_backward(grad_hy, workspace, has_bias):
    acc = acc_dtype(workspace.dtype)
    r, z, n, hn, hx = jnp.split(workspace.astype(acc), 5, axis=1)
    g = grad_hy.astype(acc)
    grad_z = (hx - n) * g * z * (1 - z)
    grad_hx = g * z
    grad_n = g * (1 - z) * (1 - n * n)
    grad_hn = grad_n * r
    grad_r = grad_n * hn * r * (1 - r)
    grad_input_gates = jnp.concatenate([grad_r, grad_z, grad_n], axis=1)
    grad_hidden_gates = jnp.concatenate([grad_r, grad_z, grad_hn], axis=1)
    if has_bias:
        return grad_input_gates, grad_hidden_gates, grad_hx, grad_input_gates.sum(0), grad_hidden_gates.sum(0)
    return grad_input_gates, grad_hidden_gates, grad_hx


@lower(aten._thnn_fused_gru_cell)
def thnn_fused_gru_cell_lowering(ctx, input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    """Graphs only (eager calls go to the handler below): dynamo's node
    metadata sizes the outputs."""
    return _gru_cell(input_gates, hidden_gates, hx, input_bias, hidden_bias)


@lower(aten._thnn_fused_gru_cell_backward)
def thnn_fused_gru_cell_backward_lowering(ctx, grad_hy, workspace, has_bias):
    """Graphs only, as above.  Without biases the bias gradients are empty,
    as the eager handler returns them."""
    results = _gru_cell_backward(grad_hy, workspace, has_bias)
    if not has_bias:
        empty = jnp.zeros((0,), results[0].dtype)
        results = (*results, empty, empty)
    return results


# The GRU cell ops have no meta kernels, so the generic eager path cannot
# size their outputs: they run as one jitted JAX function on the
# materialised arguments.
_gru_forward = jax.jit(_gru_cell)
_gru_backward = jax.jit(_gru_cell_backward, static_argnums=2)


@special(aten._thnn_fused_gru_cell.default)
def thnn_fused_gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    args = [None if t is None else materialize(t) for t in (input_gates, hidden_gates, hx, input_bias, hidden_bias)]
    hy, workspace = _gru_forward(*args)
    device = input_gates.device.index
    return wrap(hy.astype(args[0].dtype), input_gates.dtype, device), wrap(
        workspace.astype(args[0].dtype), input_gates.dtype, device
    )


@special(aten._thnn_fused_gru_cell_backward.default)
def thnn_fused_gru_cell_backward(grad_hy, workspace, has_bias):
    results = _gru_backward(materialize(grad_hy), materialize(workspace), bool(has_bias))
    device = grad_hy.device.index
    dtype = grad_hy.dtype
    outs = [wrap(r.astype(to_jax(dtype)), dtype, device) for r in results]
    if not has_bias:
        outs += [torch.empty(0, dtype=dtype, device=grad_hy.device)] * 2
    return tuple(outs)


# The out= overloads: ATen's composite (the op, then resize and copy into the
# outs) -- which the lowerings above would otherwise take over, without the
# meta kernels the generic path needs.


def _into(outs, results):
    return tuple(_to_out(out, result) for out, result in zip(outs, results))


@special(aten._thnn_fused_gru_cell.out)
def thnn_fused_gru_cell_out(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None, *, out0, out1):
    return _into((out0, out1), thnn_fused_gru_cell(input_gates, hidden_gates, hx, input_bias, hidden_bias))


@special(aten._thnn_fused_gru_cell_backward.out)
def thnn_fused_gru_cell_backward_out(grad_hy, workspace, has_bias, *, out0, out1, out2, out3, out4):
    return _into((out0, out1, out2, out3, out4), thnn_fused_gru_cell_backward(grad_hy, workspace, has_bias))


# ------------------------------------------------------------------ distances
#
# _cdist_forward / _pdist_forward compute p-norm distances directly (the
# matmul-based Euclidean path, `_euclidean_dist`, is a composite of mm).
# Gradients follow torch's formulas, including 0 where a distance is 0.


def _pnorm(diff, p, acc, inf_skips_nan=False):
    """The p-norm of the last dim, NaN as ATen's distance kernels see it:
    counted as NaN for p = 0; for p = inf skipped by cdist's running max
    (`inf_skips_nan`: std::max(agg, nan) keeps agg) and kept by pdist's."""
    a = jnp.abs(diff)
    if p == 0:
        return jnp.sum(jnp.where(jnp.isnan(a), a, (a != 0).astype(acc)), axis=-1)
    if p == float("inf") and inf_skips_nan:
        return jnp.max(jnp.where(jnp.isnan(a), 0, a), axis=-1, initial=0)
    if p == 1:
        return jnp.sum(a, axis=-1)
    if p == 2:
        return jnp.sqrt(jnp.sum(a * a, axis=-1))
    if p == float("inf"):
        return jnp.max(a, axis=-1)
    return jnp.sum(a**p, axis=-1) ** (1.0 / p)


def _pairwise_diff(x1, x2):
    return x1[..., :, None, :] - x2[..., None, :, :]


def _dist_grad(grad, diff, dist, p, acc):
    """d(sum grad * dist)/d(x1) for dist = ||x1_i - x2_j||_p, summed over j."""
    g = grad[..., None]
    d = dist[..., None]
    zero = jnp.zeros((), acc)
    if p == 0:
        terms = jnp.zeros_like(diff)
    elif p == 1:
        terms = jnp.sign(diff) * g
    elif p == 2:
        terms = jnp.where(d == 0, zero, diff * g / jnp.where(d == 0, 1, d))
    elif p == float("inf"):
        terms = jnp.sign(diff) * (jnp.abs(diff) == d) * g
    elif p < 1:
        safe = jnp.where(d == 0, 1, d)
        terms = jnp.sign(diff) * jnp.abs(diff) ** (p - 1) * g / safe ** (p - 1)
        terms = jnp.where((d == 0) | (diff == 0), zero, terms)
    elif p < 2:
        safe = jnp.where(d == 0, 1, d)
        terms = jnp.where(d == 0, zero, jnp.sign(diff) * jnp.abs(diff) ** (p - 1) * g / safe ** (p - 1))
    else:
        safe = jnp.where(d == 0, 1, d)
        terms = jnp.where(d == 0, zero, diff * jnp.abs(diff) ** (p - 2) * g / safe ** (p - 1))
    return jnp.sum(terms, axis=-2)


@lower(aten._cdist_forward)
def cdist_forward(ctx, x1, x2, p, compute_mode=None):
    acc = acc_dtype(ctx.out_dtype)
    return _pnorm(_pairwise_diff(x1.astype(acc), x2.astype(acc)), p, acc, inf_skips_nan=True)


@lower(aten._cdist_backward)
def cdist_backward(ctx, grad, x1, x2, p, cdist):
    acc = acc_dtype(ctx.out_dtype)
    diff = _pairwise_diff(x1.astype(acc), x2.astype(acc))
    # Batch dims stay broadcast, as torch returns them (autograd sums them).
    return _dist_grad(grad.astype(acc), diff, cdist.astype(acc), p, acc)


def _upper_pairs(n):
    return np.triu_indices(n, 1)


@lower(aten._pdist_forward)
def pdist_forward(ctx, self, p=2.0):
    acc = acc_dtype(ctx.out_dtype)
    x = self.astype(acc)
    i, j = _upper_pairs(self.shape[0])
    return _pnorm(x[i] - x[j], p, acc)


@lower(aten._pdist_backward)
def pdist_backward(ctx, grad, self, p, pdist):
    acc = acc_dtype(ctx.out_dtype)
    x = self.astype(acc)
    n = self.shape[0]
    i, j = _upper_pairs(n)
    # Each pair's distance depends on both rows: spread the pair gradients
    # over a symmetric matrix and reuse the cdist gradient.
    g = jnp.zeros((n, n), acc).at[i, j].set(grad.astype(acc))
    d = jnp.zeros((n, n), acc).at[i, j].set(pdist.astype(acc))
    return _dist_grad(g + g.T, _pairwise_diff(x, x), d + d.T, p, acc)
