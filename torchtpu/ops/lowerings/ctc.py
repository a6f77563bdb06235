"""CTC loss (`F.ctc_loss`): aten._ctc_loss and aten._ctc_loss_backward.

`F.ctc_loss` is composite: it moves an unbatched (T, C) input to (T, 1, C),
calls `_ctc_loss`, and applies zero_infinity and the reduction itself, so the
lowerings only see batched (T, N, C) log-probabilities.

The forward is ATen's alpha recursion (Graves et al. 2006, eq. 6-8) over the
extended labels `blank, l1, blank, l2, ..., blank`: all samples and states
advance together, one `lax.scan` step per frame.  Lengths are traced arrays
(the `.Tensor` overloads take them as tensors), so a sample shorter than T
is handled by masks: its alphas stop changing after its last frame, and the
states past its own target are never read.  Returns, as ATen's CPU kernel:
neg_log_likelihood (N,) (+inf for an impossible alignment, whatever
zero_infinity says) and log_alpha (N, T, 2L+1).  ATen leaves the entries of
log_alpha past a sample's lengths uninitialised; here they are -inf.

The backward is the VJP of the forward's nll, plus ATen's extra term (see
`_ctc_grad`).
"""

import functools

import jax
import jax.numpy as jnp
import torch
from jax import lax

from ..registry import lower
from .common import acc_dtype

aten = torch.ops.aten

NEG_INF = -jnp.inf


def _logsumexp(*xs):
    """Elementwise log(sum(exp(x))) that stays finite in value and gradient
    when every term is -inf (unreachable states are everywhere in the
    lattice; a NaN there would poison the VJP through the zero cotangent)."""
    m = functools.reduce(jnp.maximum, xs)
    m = lax.stop_gradient(jnp.where(jnp.isfinite(m), m, jnp.zeros((), m.dtype)))
    total = sum(jnp.exp(x - m) for x in xs)
    reachable = total > 0
    return jnp.where(reachable, jnp.log(jnp.where(reachable, total, 1)) + m, NEG_INF)


def _shift(a, k):
    """a[..., s - k] along the state axis, -inf for s < k."""
    k = min(k, a.shape[-1])
    pad = jnp.full(a.shape[:-1] + (k,), NEG_INF, a.dtype)
    return jnp.concatenate([pad, a[..., : a.shape[-1] - k]], axis=-1)


def _labels(targets, target_lengths, width):
    """(N, width) labels of each sample, from padded (N, S) or concatenated
    1-d targets; entries past a sample's length are 0 (never read)."""
    batch = target_lengths.shape[0]
    if width == 0 or targets.size == 0:
        return jnp.zeros((batch, width), jnp.int32)
    pos = jnp.arange(width)
    if targets.ndim == 2:
        labels = targets[:, :width]
    else:
        # Sample b's target starts after the targets of samples 0..b-1.
        start = jnp.cumsum(target_lengths) - target_lengths
        idx = jnp.clip(start[:, None] + pos, 0, targets.shape[0] - 1)
        labels = targets[idx]
    return jnp.where(pos < target_lengths[:, None], labels, 0).astype(jnp.int32)


def _extended(labels, blank):
    """(N, 2W+1) extended labels: blanks at even states, labels at odd ones."""
    batch, width = labels.shape
    ext = jnp.full((batch, 2 * width + 1), blank, jnp.int32)
    return ext.at[:, 1::2].set(labels)


def _skip_allowed(ext):
    """State s may be entered from s-2 unless ext[s] == ext[s-2]: that
    rules out blanks (s-2 is a blank too) and a label repeated right after
    itself (the blank between them is mandatory)."""
    prev = jnp.concatenate([jnp.full_like(ext[:, :2], -1), ext[:, :-2]], axis=1)
    return ext != prev


def _alphas(lp, ext, input_lengths, target_lengths):
    """log_alpha (T, N, S) and each sample's alphas at its last frame (N, S)."""
    T = lp.shape[0]
    states = jnp.arange(ext.shape[1])
    emit = jnp.take_along_axis(lp, ext[None], axis=2)  # (T, N, S)
    skip = _skip_allowed(ext)
    # A path starts in the leading blank or in the first label.
    first = (states == 0) | ((states == 1) & (target_lengths[:, None] > 0))
    alpha0 = jnp.where(first, emit[0], NEG_INF)

    def step(alpha, inputs):
        emit_t, t = inputs
        new = _logsumexp(alpha, _shift(alpha, 1), jnp.where(skip, _shift(alpha, 2), NEG_INF)) + emit_t
        # Frames past a sample's input length leave its alphas as they are.
        new = jnp.where(t < input_lengths[:, None], new, alpha)
        return new, new

    last, rest = lax.scan(step, alpha0, (emit[1:], jnp.arange(1, T)))
    return jnp.concatenate([alpha0[None], rest], axis=0), last


def _nll(last, input_lengths, target_lengths):
    """-log p(target): the path ends in the last label or the blank after it."""
    end = 2 * target_lengths
    final = jnp.take_along_axis(last, end[:, None], axis=1)[:, 0]
    before = jnp.take_along_axis(last, jnp.maximum(end - 1, 0)[:, None], axis=1)[:, 0]
    before = jnp.where(target_lengths > 0, before, NEG_INF)
    nll = -_logsumexp(final, before)
    # No frames: only the empty target is possible (-log 1 is -0.0, as ATen's).
    empty = jnp.where(target_lengths == 0, -jnp.zeros((), nll.dtype), jnp.inf)
    return jnp.where(input_lengths == 0, empty, nll)


def _ctc(log_probs, targets, input_lengths, target_lengths, blank, width):
    """(nll (N,), log_alpha (N, T, 2*width+1)) in the compute dtype."""
    lp = log_probs.astype(acc_dtype(log_probs.dtype))
    il = jnp.asarray(input_lengths, jnp.int32).reshape(-1)
    tl = jnp.asarray(target_lengths, jnp.int32).reshape(-1)
    ext = _extended(_labels(targets, tl, width), blank)
    T, batch = lp.shape[:2]
    if T == 0:
        nll = jnp.where(tl == 0, -jnp.zeros((), lp.dtype), jnp.inf)
        return nll, jnp.zeros((batch, 0, ext.shape[1]), lp.dtype)
    alphas, last = _alphas(lp, ext, il, tl)
    # Report -inf (ATen: uninitialised) past each sample's frames and states.
    valid = (jnp.arange(T)[:, None, None] < il[None, :, None]) & (
        jnp.arange(ext.shape[1]) <= 2 * tl[:, None]
    )
    alphas = jnp.where(valid, alphas, NEG_INF)
    return _nll(last, il, tl), jnp.transpose(alphas, (1, 0, 2))


def _width_of(targets, target_lengths):
    """Longest target: known from an int list; for tensor lengths the static
    bound the targets' shape allows (padded: S, concatenated: all of them)."""
    if isinstance(target_lengths, (list, tuple)):
        return max(target_lengths, default=0)
    return targets.shape[1] if targets.ndim == 2 else targets.shape[0]


def _forward(log_probs, targets, input_lengths, target_lengths, blank):
    nll, log_alpha = _ctc(log_probs, targets, input_lengths, target_lengths, blank,
                          _width_of(targets, target_lengths))
    return nll.astype(log_probs.dtype), log_alpha.astype(log_probs.dtype)


def _ctc_grad(grad, log_probs, targets, input_lengths, target_lengths, blank, zero_infinity):
    """ATen's gradient: (exp(log_probs) - gamma) * grad for the frames of each
    sample, 0 past them.  -gamma * grad is the VJP of the nll; ATen adds
    exp(log_probs) (the gradient it returns is the one of the logits under a
    log_softmax, where that term cancels out).  An infinite loss gives NaN
    (ATen computes inf - inf) unless zero_infinity zeroes it."""
    width = _width_of(targets, target_lengths)
    lp = log_probs.astype(acc_dtype(log_probs.dtype))
    nll, vjp = jax.vjp(lambda x: _ctc(x, targets, input_lengths, target_lengths, blank, width)[0], lp)
    g = grad.astype(lp.dtype).reshape(-1)
    (dlp,) = vjp(g)
    out = jnp.exp(lp) * g[None, :, None] + dlp
    infinite = jnp.isinf(nll)[None, :, None]
    out = jnp.where(infinite, jnp.zeros((), lp.dtype) if zero_infinity else jnp.nan, out)
    il = jnp.asarray(input_lengths, jnp.int32).reshape(-1)
    frames = jnp.arange(lp.shape[0])[:, None, None] < il[None, :, None]
    return jnp.where(frames, out, jnp.zeros((), lp.dtype)).astype(log_probs.dtype)


def _forward_meta(log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    """ATen has no meta kernel for `_ctc_loss.Tensor` (log_alpha's width
    depends on the lengths' values): the static bound of `_width_of`."""
    T, batch = log_probs.shape[0], log_probs.shape[1]
    width = _width_of(targets, target_lengths)
    return (log_probs.new_empty((batch,)), log_probs.new_empty((batch, T, 2 * width + 1)))


def _grad_meta(grad, log_probs, *args, **kwargs):
    """ATen has no meta kernel for the backward: a contiguous gradient of log_probs."""
    return torch.empty_like(log_probs, memory_format=torch.contiguous_format)


@lower(aten._ctc_loss.default, aten._ctc_loss.Tensor, meta=_forward_meta)
def ctc_loss(ctx, log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    # zero_infinity only matters to F.ctc_loss and the backward.
    if log_probs.size == 0:  # (ATen's first check; the meta kernel does not make it)
        raise RuntimeError("log_probs tensor must not be empty")
    return _forward(log_probs, targets, input_lengths, target_lengths, blank)


@lower(aten._ctc_loss_backward.default, aten._ctc_loss_backward.Tensor, meta=_grad_meta)
def ctc_loss_backward(ctx, grad, log_probs, targets, input_lengths, target_lengths,
                      neg_log_likelihood, log_alpha, blank, zero_infinity=False):
    # log_alpha is not reused: the VJP recomputes the forward.
    return _ctc_grad(grad, log_probs, targets, input_lengths, target_lengths, blank, zero_infinity)
