"""Slices, selects and their scatters at positions computed from bucketed
symbols: a KV cache written at `start_pos` (`cache[:, p : p + n] = k`) and
read up to it (`cache[:, : p + n]`), a position table sliced at `p`, a
sequence sliced to `x[:, : n - 1]`.  The position is the symbol's true
value, traced (`lax.dynamic_slice` / `dynamic_update_slice`), so one
executable serves every position of a bucket; a length computed from a
bucketed symbol is its padded size, its tail marked padding by the mask.
Along a padded dim this needs the real elements to be a prefix (a symbol,
or a sum no view splits into factors: a cache length `past + 1`), so a
merged dim (B*T, dynamic.merged_layouts) is left to the general rules.
The same tracing serves a constant negative start along a padded dim
(`input_ids[:, -1:]`, `logits[:, -1]`: from the true end) and a tril/triu
whose diagonal is computed from a symbol (the causal mask
`ones(n, p + n).tril(p)`).

Lengths only grow with their symbols (merged_layouts keeps a shrinking
one -- `x[:, p:]` -- exact), so the true start plus the padded length is at
most the padded start plus the padded length: the input is padded along
the dim up to that bound when it is shorter (padding the mask marks), so a
dynamic slice never clamps its start back onto real elements."""

import sys

import jax.numpy as jnp
import torch
from jax import lax

aten = torch.ops.aten

# op -> (index of its position argument, of its end (narrow: its length) or
# None, of its step or None); the tensor is argument 0 and the dim argument 1, or 2
# for the scatters (after `src`).
SLICES = {aten.slice.Tensor: (2, 3, 4), aten.narrow.default: (2, 3, None), aten.select.int: (2, None, None)}
SCATTERS = {aten.slice_scatter.default: (3, 4, 5), aten.select_scatter.default: (3, None, None)}


# tril / triu: the diagonal argument (a causal mask `ones(n, p + n).tril(p)`)
TRIANGLES = {aten.tril.default: lambda offset, diagonal: offset <= diagonal,
             aten.triu.default: lambda offset, diagonal: offset >= diagonal}


def applies(shapes, op, in_metas, masks):
    """Whether this call is a step-1 slice/select (or scatter) along a dim
    that is not padded or is a prefix, at a position or to an end computed
    from bucketed symbols -- or a scatter into padded data at any position
    (the general rules have none for it) -- or a tril/triu whose diagonal is
    computed from bucketed symbols, over dims whose real elements are a
    prefix (`p + 1` is: no view splits it)."""
    if op in TRIANGLES:
        meta = in_metas[0]
        return bool(_bucketed(shapes, _arg(in_metas, 1, 0))) and meta.dim() >= 2 and not any(
            shapes.is_padded_dim(n) and not _prefix(shapes, n) for n in meta.shape[-2:])
    spec = SLICES.get(op) or SCATTERS.get(op)
    if spec is None:
        return False
    position, end, step = spec
    dim_at = position - 1
    meta = in_metas[0]
    size = meta.shape[_arg(in_metas, dim_at, 0) % max(meta.dim(), 1)]
    if (shapes.is_padded_dim(size) and not _prefix(shapes, size)) or _arg(in_metas, step, 1) != 1:
        return False
    if op in SCATTERS and any(m is not None for m in masks[:2]):
        return True
    if op in SLICES and _from_the_end(shapes, op, in_metas, size, position, end):
        return True
    return bool(_bucketed(shapes, _arg(in_metas, position, None)) | _bucketed(shapes, _arg(in_metas, end, None)))


def _prefix(shapes, size):
    """A padded dim whose real elements are a prefix (Shapes.is_prefix)."""
    return shapes.is_padded_dim(size) and shapes.is_prefix(size)


def _from_the_end(shapes, op, in_metas, size, position, end):
    """A constant negative start along a padded prefix dim, for a constant
    length (`input_ids[:, -1:]`, `logits[:, -1]`): it counts from the true
    end, not the padded one."""
    start = _arg(in_metas, position, None)
    if not (isinstance(start, int) and start < 0 and _prefix(shapes, size)):
        return False
    stop = _arg(in_metas, end, None)
    if op is aten.select.int:
        return True
    if op is aten.narrow.default:
        return isinstance(stop, int)
    return stop is None or (isinstance(stop, int) and (stop < 0 or stop >= sys.maxsize))


def lower(shapes, op, values, masks, in_metas, out_meta):
    """(result, [mask]) of an op `applies` accepted."""
    if op in TRIANGLES:
        return _triangle(shapes, op, values, masks, in_metas)
    if op in SLICES:
        return _slice(shapes, op, values, masks, in_metas, out_meta[0])
    return _scatter(shapes, op, values, masks, in_metas)


def _slice(shapes, op, values, masks, in_metas, out):
    x, mask = values[0], masks[0]
    dim = values[1] % max(x.ndim, 1)
    if mask is not None:
        mask = jnp.broadcast_to(mask, x.shape)
    true_size = shapes.true_value(in_metas[0].shape[dim])
    start_meta = _arg(in_metas, 2, 0)
    if op is aten.select.int:
        index = _true_start(shapes, start_meta, true_size, clamp=False)
        result = lax.dynamic_index_in_dim(x, index, axis=dim, keepdims=False)
        return result, [None if mask is None else lax.dynamic_index_in_dim(mask, index, axis=dim, keepdims=False)]
    length = shapes.size(out.shape[dim])
    bound = _reach(shapes, start_meta, x.shape[dim], length)
    start = _true_start(shapes, start_meta, true_size, clamp=True)
    result = lax.dynamic_slice_in_dim(_pad_dim(x, dim, bound), start, length, axis=dim)
    if mask is not None:
        mask = lax.dynamic_slice_in_dim(_pad_dim(mask, dim, bound), start, length, axis=dim)
    if shapes.is_padded_dim(out.shape[dim]):  # (its tail, past the true length, is padding)
        tail = shapes.prefix_mask(out, dims=[dim])
        mask = tail if mask is None else mask & tail
    return result, [mask]


def _triangle(shapes, op, values, masks, in_metas):
    """tril/triu at the diagonal's true value: real elements keep their
    (row, column) in the padded array, so the comparison is the same."""
    x = values[0]
    diagonal = shapes.true_value(in_metas[1])
    rows = lax.broadcasted_iota(jnp.int32, x.shape[-2:], 0)
    columns = lax.broadcasted_iota(jnp.int32, x.shape[-2:], 1)
    keep = TRIANGLES[op](columns - rows, diagonal)
    return jnp.where(keep, x, jnp.zeros((), x.dtype)), [masks[0]]


def _scatter(shapes, op, values, masks, in_metas):
    """src written into self at the true position; where src is padding
    (its mask), self keeps its elements."""
    base, src, dim = values[0], values[1], values[2] % max(values[0].ndim, 1)
    src_mask = masks[1]
    if op is aten.select_scatter.default:
        src = jnp.expand_dims(src, dim)
        src_mask = None if src_mask is None else jnp.expand_dims(jnp.broadcast_to(src_mask, values[1].shape), dim)
    n, length = base.shape[dim], src.shape[dim]
    true_size = shapes.true_value(in_metas[0].shape[dim])
    start_meta = _arg(in_metas, 3, 0)
    padded = _pad_dim(base, dim, _reach(shapes, start_meta, n, length))
    start = _true_start(shapes, start_meta, true_size, clamp=op is aten.slice_scatter.default)
    src = src.astype(base.dtype)
    if src_mask is not None:
        old = lax.dynamic_slice_in_dim(padded, start, length, axis=dim)
        src = jnp.where(src_mask, src, old)
    result = lax.dynamic_update_slice_in_dim(padded, src, start, axis=dim)
    return lax.slice_in_dim(result, 0, n, axis=dim), [masks[0]]


def _reach(shapes, start_meta, n, length):
    """How long the dim (n elements, padded) must be for every start of the
    bucket to have `length` elements after it: a start that grows with its
    symbols is at most its padded value (clamped to n); any other, n."""
    from .dynamic import grows

    if start_meta is None:
        start = 0
    elif isinstance(start_meta, int):
        start = min(max(start_meta + n if start_meta < 0 else start_meta, 0), n)
    elif grows(start_meta.node.expr):
        start = min(shapes.size(start_meta), n)
    else:
        start = n
    return max(n, start + length)


def _pad_dim(x, dim, size):
    if x.shape[dim] >= size:
        return x
    widths = [(0, 0)] * x.ndim
    widths[dim] = (0, size - x.shape[dim])
    return jnp.pad(x, widths)


def _true_start(shapes, start_meta, true_size, clamp):
    """The true start: traced for a symbolic one; negative counts from the
    dim's true end; a slice clamps it into [0, size] (a select's index is in
    range)."""
    if start_meta is None:
        return 0
    value = shapes.true_value(start_meta)
    if isinstance(value, int) and isinstance(true_size, int):
        value = value + true_size if value < 0 else value
        return min(max(value, 0), true_size) if clamp else value
    value = jnp.where(value < 0, value + true_size, value)
    return jnp.clip(value, 0, true_size) if clamp else value


def _arg(args, i, default):
    if i is None or i >= len(args) or args[i] is None:
        return default
    return args[i]


def _bucketed(shapes, value):
    if not isinstance(value, torch.SymInt):
        return set()
    return value.node.expr.free_symbols & shapes.bucketed
