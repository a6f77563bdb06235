"""gather and the scatters (scatter, scatter_add, scatter_reduce) on padded
data under dynamic shapes: a repetition penalty reads and writes the logits
at the positions of the growing `input_ids` (`scores.gather(1, ids)`,
`scores.scatter(1, ids, penalised)`).

Real index entries point at real elements, so only the padded entries of
the index need care:
- gather reads them at position 0 (always in range); the result's mask is
  the index's;
- a scatter turns each into a copy of the first real entry of its row along
  `dim` (the same position, and the same value for a set / amax / amin, the
  reduction's identity for a sum / product): it then changes nothing.  A row
  with no real entry is a padded row; its writes land in the padded row of
  `self` with the same size, which is why an index padded along another dim
  needs `self` padded alike there.  `mean` counts its entries: no rule.

The output of a scatter has `self`'s mask."""

import jax.numpy as jnp
import torch

aten = torch.ops.aten

GATHERS = {aten.gather.default}
# op -> position of the reduction (None: a set), or the reduction itself
SCATTERS = {
    aten.scatter.src: None, aten.scatter.value: None, aten.scatter.reduce: 4, aten.scatter.value_reduce: 4,
    aten.scatter_add.default: "sum", aten.scatter_reduce.two: 4,
}  # fmt: skip
_LEGACY = {"add": "sum", "multiply": "prod"}
_IDENTITY = {"sum": 0, "prod": 1}


class NoRule(Exception):
    """This call has no padding rule here; the caller raises Unpaddable for
    `sizes` (symbolic sizes whose symbols are at fault), or, without any,
    for every padded input."""

    def __init__(self, reason, sizes=()):
        super().__init__(reason)
        self.sizes = sizes


def applies(op):
    return op in GATHERS or op in SCATTERS


def lower(shapes, op, values, masks, in_metas, fn, ctx):
    """(result, [mask]) of a gather or scatter with padded inputs."""
    values = list(values)
    self_meta, index_meta = in_metas[0], in_metas[2]
    dim = values[1] % max(values[0].ndim, 1)
    index, index_mask = values[2], masks[2]
    _check_true_range(shapes, ctx, self_meta, dim, index, index_mask)
    if op in GATHERS:
        _check_rows(shapes, self_meta, index_meta, dim, alike=False)
        if index_mask is None:
            return fn(ctx, *values), [None]
        index_mask = jnp.broadcast_to(index_mask, index.shape)
        values[2] = jnp.where(index_mask, index, jnp.zeros((), index.dtype))
        return fn(ctx, *values), [index_mask]
    _check_rows(shapes, self_meta, index_meta, dim, alike=True)
    reduce = SCATTERS[op]
    if isinstance(reduce, int):
        reduce = _LEGACY.get(values[reduce], values[reduce])  # (scatter_reduce's names are not legacy ones)
    if index_mask is None:
        return fn(ctx, *values), [masks[0]]
    if reduce not in (None, "sum", "prod", "amax", "amin"):
        raise NoRule(f"{op} (reduce={reduce}) over padded indices: padded entries would count")
    index_mask = jnp.broadcast_to(index_mask, index.shape)
    first = jnp.argmax(index_mask, axis=dim, keepdims=True)  # each row's first real entry
    has_real = jnp.any(index_mask, axis=dim, keepdims=True)
    repeated = jnp.where(has_real, jnp.take_along_axis(index, first, axis=dim), jnp.zeros((), index.dtype))
    values[2] = jnp.where(index_mask, index, repeated)
    src = values[3]
    short = [k for k, (n, m) in enumerate(zip(jnp.shape(src), index.shape)) if n < m]
    if jnp.ndim(src) and short:
        raise NoRule("an index padded past the size of src", [index_meta.shape[k] for k in short])
    if jnp.ndim(src) == 0 and reduce is None:
        return fn(ctx, *values), [masks[0]]  # (a value set twice at one position)
    src = jnp.broadcast_to(jnp.asarray(src), index.shape) if jnp.ndim(src) == 0 else src[
        tuple(slice(0, n) for n in index.shape)]
    if reduce in _IDENTITY:
        values[3] = jnp.where(index_mask, src, jnp.asarray(_IDENTITY[reduce]).astype(src.dtype))
    else:
        values[3] = jnp.where(index_mask, src, jnp.take_along_axis(src, first, axis=dim))
    return fn(ctx, *values), [masks[0]]


def _check_true_range(shapes, ctx, self_meta, dim, index, index_mask):
    """The lowering checks the indices against `self`'s padded size along
    `dim`; the real ones must also be below its true size, or a gather would
    read padding and a scatter write into it."""
    size = self_meta.shape[dim] if self_meta.ndim else 1
    if not shapes.is_padded_dim(size):
        return
    true_size = shapes.true_value(size)
    real = jnp.ones(index.shape, bool) if index_mask is None else jnp.broadcast_to(index_mask, index.shape)
    bad = (real & (index >= true_size)).reshape(-1)
    if bad.size:
        ctx.check(~jnp.any(bad), f"index {{value}} is out of bounds for dimension {dim}", RuntimeError,
                  value=index.reshape(-1)[jnp.argmax(bad)])


def _check_rows(shapes, self_meta, index_meta, dim, alike):
    """Along the dims other than `dim`, the index's padded rows must exist in
    `self` (its padded size at least as large); a scatter's must moreover be
    padding in `self` too (`alike`: the same size)."""
    for k, n in enumerate(index_meta.shape):
        if k == dim or not shapes.is_padded_dim(n):
            continue
        own = self_meta.shape[k]
        if alike and str(own) != str(n):
            raise NoRule(f"an index padded along dim {k}, where self has size {own}", (n, own))
        if shapes.size(own) < shapes.size(n):
            raise NoRule(f"an index padded along dim {k} past self's size {own}", (n, own))
