"""embedding, embedding_bag and their backward ops; embedding_renorm (max_norm).

Gathers use `mode="clip"` (torch raises on out-of-range indices; a kernel
cannot), scatter-adds accumulate in float32 for bfloat16/float16."""

import jax
import jax.numpy as jnp
import torch

from ..registry import lower
from .common import acc_dtype

aten = torch.ops.aten



@lower(aten.embedding)
def embedding(ctx, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    # padding_idx only affects the gradient.  Out-of-range rows raise at the
    # next sync (device-side check) and read as NaN, never as a clamped row.
    n = weight.shape[0]
    ctx.check_index(indices, n, "index out of range in self", IndexError, negative_ok=False)
    return jnp.take(weight, jnp.where(indices < 0, n, indices), axis=0, mode="fill")


@lower(aten.embedding_dense_backward)
def embedding_dense_backward(ctx, grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
    dtype = jnp.dtype(grad_output.dtype)
    acc = acc_dtype(dtype)
    dim = grad_output.shape[-1]
    idx = indices.reshape(-1)
    g = grad_output.reshape(-1, dim).astype(acc)
    if scale_grad_by_freq:
        counts = jnp.zeros((num_weights,), acc).at[idx].add(1, mode="drop")
        g = g / jnp.take(counts, idx, mode="clip")[:, None]
    # Rows looked up with padding_idx get no gradient.
    g = jnp.where((idx != padding_idx)[:, None], g, jnp.zeros((), acc))
    return jnp.zeros((num_weights, dim), acc).at[idx].add(g, mode="drop")


@lower(aten.embedding_renorm)
def embedding_renorm(ctx, self, indices, max_norm, norm_type):
    """Rows looked up by `indices` whose p-norm exceeds max_norm are scaled by
    max_norm / (norm + 1e-7) (the in-place embedding_renorm_ that
    F.embedding(max_norm=...) runs)."""
    dtype = jnp.dtype(self.dtype)
    acc = acc_dtype(dtype)
    w = self.astype(acc)
    touched = jnp.zeros((self.shape[0],), jnp.bool_).at[indices.reshape(-1)].set(True, mode="drop")
    a = jnp.abs(w)
    if norm_type == float("inf"):
        norm = jnp.max(a, axis=1)
    elif norm_type == 0:
        norm = jnp.sum((a != 0).astype(acc), axis=1)
    elif norm_type == 1:
        norm = jnp.sum(a, axis=1)
    elif norm_type == 2:
        norm = jnp.sqrt(jnp.sum(a * a, axis=1))
    else:
        norm = jnp.sum(a**norm_type, axis=1) ** (1.0 / norm_type)
    scale = jnp.where(touched & (norm > max_norm), max_norm / (norm + 1e-7), jnp.ones((), acc))
    return (w * scale[:, None]).astype(dtype)


# ------------------------------------------------------------- embedding_bag
#
# mode 0 sum, 1 mean, 2 max.  Bag b holds indices[offsets[b]:offsets[b+1]]
# (the last bag runs to the end of `indices`; with include_last_offset the
# final offset only closes it).  Entries equal to padding_idx take part in no
# bag.  The auxiliary outputs (offset2bag, bag_size, max_indices) have the
# shapes of ATen's meta kernels; they only feed this file's backward.

SUM, MEAN, MAX = 0, 1, 2


def _bags(indices, offsets, include_last_offset, padding_idx):
    """(number of bags, bag id per index with padding entries sent to an
    extra bag `num_bags`, bag sizes without padding)."""
    num_bags = offsets.shape[0] - (1 if include_last_offset else 0)
    starts = offsets[:num_bags]
    positions = jnp.arange(indices.shape[0], dtype=starts.dtype)
    bag = jnp.searchsorted(starts, positions, side="right") - 1
    member = indices != padding_idx
    seg = jnp.where(member, bag, num_bags)
    size = jnp.zeros((num_bags + 1,), jnp.int64).at[seg].add(1)[:num_bags]
    return num_bags, bag, seg, size


def _embedding_bag(ctx, weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
                   include_last_offset, padding_idx):
    dtype = jnp.dtype(weight.dtype)
    acc = acc_dtype(dtype)
    indices = indices.reshape(-1)
    _check_offsets(ctx, offsets, indices.shape[0])
    ctx.check_index(indices, weight.shape[0], "embedding_bag: Expected idx >= 0 && idx < num_embeddings but found "
                    "idx to be {value}", error=RuntimeError, negative_ok=False)
    num_bags, bag, seg, size = _bags(indices, offsets, include_last_offset, padding_idx)
    rows = jnp.take(weight, indices, axis=0, mode="clip").astype(acc)
    if mode == MAX:
        member = seg < num_bags
        neg = jnp.full((), -jnp.inf, acc)
        vals = jnp.where(member[:, None], rows, neg)
        best = jax.ops.segment_max(vals, seg, num_segments=num_bags + 1)[:num_bags]
        # first position holding the maximum (torch keeps the first of ties)
        hit = member[:, None] & (vals == best[seg.clip(0, num_bags - 1)])
        pos = jnp.where(hit, jnp.arange(indices.shape[0])[:, None], indices.shape[0])
        first = jax.ops.segment_min(pos, seg, num_segments=num_bags + 1)[:num_bags]
        empty = (size == 0)[:, None]
        if indices.shape[0]:
            max_indices = jnp.where(empty, 0, jnp.take(indices, first.clip(0, indices.shape[0] - 1)))
        else:  # (no indices, every bag empty: jnp.take refuses an empty axis)
            max_indices = jnp.zeros(best.shape, indices.dtype)
        out = jnp.where(empty, jnp.zeros((), acc), best)
        return out, bag, _bag_size_output(size, offsets), max_indices
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.astype(acc)[:, None]
    total = jax.ops.segment_sum(rows, seg, num_segments=num_bags + 1)[:num_bags]
    if mode == MEAN:
        count = size.astype(acc)[:, None]
        total = jnp.where(count > 0, total / jnp.maximum(count, 1), jnp.zeros((), acc))
    return total, bag, _bag_size_output(size, offsets), jnp.zeros((), jnp.int64)


def _check_offsets(ctx, offsets, n):
    """ATen's checks of the bag boundaries (device-side: they are values)."""
    if offsets.shape[0] == 0:
        return
    ctx.check(offsets[0] == 0, "offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start "
              "from position 0. However, got {value}", value=offsets[0])
    ctx.check(offsets[-1] <= n, f"offsets[-1] can not be greater than input's length {n} but got offsets[-1] of "
              "{value}", value=offsets[-1])


def _bag_size_output(size, offsets):
    """bag_size as ATen's meta kernel sizes it: one entry per offset."""
    return jnp.pad(size, (0, offsets.shape[0] - size.shape[0]))


@lower(aten._embedding_bag, aten._embedding_bag_forward_only)
def embedding_bag(ctx, weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                  per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    return _embedding_bag(ctx, weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
                          include_last_offset, padding_idx)


def _embedding_bag_grad(grad, indices, offset2bag, bag_size, maximum_indices, num_weights, scale_grad_by_freq,
                        mode, per_sample_weights, padding_idx):
    dtype = jnp.dtype(grad.dtype)
    acc = acc_dtype(dtype)
    g = grad.astype(acc)
    indices = indices.reshape(-1)
    dim = g.shape[1]
    if mode == MAX:
        num_bags = g.shape[0]
        nonempty = (bag_size[:num_bags] > 0)[:, None]
        target = jnp.where(nonempty, maximum_indices, num_weights)  # empty bags: dropped
        cols = jnp.broadcast_to(jnp.arange(dim), target.shape)
        return jnp.zeros((num_weights, dim), acc).at[target, cols].add(g, mode="drop")
    member = indices != padding_idx
    contrib = jnp.take(g, offset2bag, axis=0, mode="clip")
    if mode == MEAN:
        size = jnp.take(bag_size, offset2bag, mode="clip").astype(acc)
        contrib = contrib / jnp.maximum(size, 1)[:, None]
    if per_sample_weights is not None:
        contrib = contrib * per_sample_weights.astype(acc)[:, None]
    if scale_grad_by_freq:
        counts = jnp.zeros((num_weights,), acc).at[indices].add(1, mode="drop")
        contrib = contrib / jnp.take(counts, indices, mode="clip")[:, None]
    contrib = jnp.where(member[:, None], contrib, jnp.zeros((), acc))
    return jnp.zeros((num_weights, dim), acc).at[indices].add(contrib, mode="drop")


@lower(aten._embedding_bag_backward)
def embedding_bag_backward(ctx, grad, indices, offsets, offset2bag, bag_size, maximum_indices, num_weights,
                           scale_grad_by_freq, mode, sparse, per_sample_weights, padding_idx=-1):
    # Bag ids and sizes are recomputed from offsets (robust to any aux layout).
    include_last = offsets.shape[0] != grad.shape[0]
    _, bag, _, size = _bags(indices.reshape(-1), offsets, include_last, padding_idx)
    return _embedding_bag_grad(grad, indices, bag, size, maximum_indices, num_weights, scale_grad_by_freq, mode,
                               per_sample_weights, padding_idx)


@lower(aten._embedding_bag_dense_backward)
def embedding_bag_dense_backward(ctx, grad, indices, offset2bag, bag_size, maximum_indices, num_weights,
                                 scale_grad_by_freq, mode, per_sample_weights, padding_idx=-1):
    return _embedding_bag_grad(grad, indices, offset2bag, bag_size, maximum_indices, num_weights, scale_grad_by_freq,
                               mode, per_sample_weights, padding_idx)


@lower(aten._embedding_bag_per_sample_weights_backward)
def embedding_bag_per_sample_weights_backward(ctx, grad, weight, indices, offsets, offset2bag, mode, padding_idx=-1):
    acc = acc_dtype(grad.dtype)
    indices = indices.reshape(-1)
    include_last = offsets.shape[0] != grad.shape[0]
    _, bag, _, _ = _bags(indices, offsets, include_last, padding_idx)
    rows = jnp.take(weight, indices, axis=0, mode="clip").astype(acc)
    g = jnp.take(grad.astype(acc), bag, axis=0, mode="clip")
    out = jnp.sum(rows * g, axis=1)
    return jnp.where(indices != padding_idx, out, jnp.zeros((), acc))
