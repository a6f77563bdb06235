"""Views whose storage offset is a kernel input, not part of its key.

A loop over the rows of a device tensor (`model(X[i])`, `out[t] = f(x[t])`,
`Y[i:i+bs]`, `x[:, t]`) meets a new storage offset at every step.  A read
plan with the offset baked in (plans.read_view) compiles a kernel per step,
and under torch.compile the whole graph.  Instead such a view is read as a
`dynamic_slice` of the box along one dim k, at a traced index, followed by
the static plan for the view inside that slice:

    k        the outermost box dim at which the offset is non-zero
    offset = index * box_stride[k] + residual   (residual < box_stride[k])
    span     indices of dim k the view touches from `index` on

The dims before k the view may cross whole (`x[:, t]` of a (B, T, D) box:
k = 1); the view's strides over them are rescaled to the slice's.  The key
holds (k, residual, span) instead of the offset, and `index` is passed with
each call, so X[1], X[2], ... share one kernel (X[0], at offset 0, keeps the
static plan).  The eager keys (ops/dispatch.py, csrc/fastpath.cpp) and the
compiled graphs' (compile/runner.py) apply the same rule, `traced_index`;
the C++ copy of it must stay identical (tests/test_graph_call_key.py).

Only views of the box's own dtype qualify (no bitcast between the slice and
the plan).  The minor dim qualifies too: Meta's Llama generation loop reads
`tokens[:, prev:cur]` and writes `tokens[:, cur]` of a (batch, max_len)
buffer, which compiled two kernels per token with the offset in the key.  A
traced start there may cost a relayout on TPU (not measured: no TPU here),
small next to a compile per step.
"""

import functools

import jax.numpy as jnp
from jax import lax

from ..runtime.dtypes import JAX_TO_TORCH
from . import plans


@functools.lru_cache(maxsize=None)
def box_layout(sig):
    """(shape, contiguous strides, torch dtype) of a box signature (shape,
    dtype); None for a box whose views never take a traced index."""
    shape, dtype = sig
    torch_dtype = JAX_TO_TORCH.get(jnp.dtype(dtype))
    if len(shape) == 0 or 0 in shape or torch_dtype is None:
        return None
    return tuple(shape), plans.contiguous_strides(shape), torch_dtype


def traced_index(sig, dtype, sizes, strides, offset):
    """(k, index, residual, span) for a view read at a traced index of box
    dim k, or None when its offset stays in the key."""
    if offset == 0 or sig is None:
        return None
    layout = box_layout(sig)
    if layout is None or layout[2] != dtype or 0 in sizes:
        return None
    shape, box_strides, _ = layout
    k = next((j for j, s in enumerate(box_strides) if offset >= s), None)
    if k is None:
        return None
    index, residual = divmod(offset, box_strides[k])
    outer = box_strides[k - 1] if k > 0 else None
    extent = 1  # of the view's dims inside dim k
    for n, s in zip(sizes, strides):
        if n == 1:
            continue
        if outer is not None and s >= outer:
            if s % outer:
                return None
        else:
            extent += (n - 1) * s
    span = -(-(residual + extent) // box_strides[k])
    if index + span > shape[k]:
        return None
    return k, index, residual, span


def _slice_strides(box_shape, k, span, sizes, strides):
    """The view's strides inside the box sliced to `span` along dim k."""
    if k == 0:
        return strides
    box_strides = plans.contiguous_strides(box_shape)
    outer, sliced = box_strides[k - 1], span * box_strides[k]
    return tuple(s // outer * sliced if n != 1 and s >= outer else s for n, s in zip(sizes, strides))


def read_at(x, k, index, span, sizes, strides, residual, dtype):
    """The view's value, read from indices [index, index + span) of dim k of box `x`."""
    part = lax.dynamic_slice_in_dim(x, index, span, axis=k)
    return plans.read_view(part, sizes, _slice_strides(x.shape, k, span, sizes, strides), residual, dtype)


def write_at(x, k, index, span, sizes, strides, residual, value):
    """Box `x` after writing `value` through the view in indices [index, index + span) of dim k."""
    part = lax.dynamic_slice_in_dim(x, index, span, axis=k)
    nbytes = part.size * part.dtype.itemsize
    part = plans.write_view(part, nbytes, sizes, _slice_strides(x.shape, k, span, sizes, strides), residual, value)
    return lax.dynamic_update_slice_in_dim(x, part, index, axis=k)
