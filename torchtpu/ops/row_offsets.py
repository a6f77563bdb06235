"""Views whose storage offset is a kernel input, not part of its key.

A loop over the rows of a device tensor (`model(X[i])`, `out[t] = f(x[t])`,
`Y[i:i+bs]`) meets a new storage offset at every step.  A read plan with the
offset baked in (plans.read_view) compiles a kernel per step, and under
torch.compile the whole graph.  Instead, a view lying at or past the box's
second leading index is read as a `dynamic_slice` of whole leading rows of
the box, taken at a traced row, followed by the static plan for the view
inside those rows:

    offset = row * per_row + residual      (per_row: elements per leading index)
    span   = leading indices the view touches from `row` on

The key holds (residual, span) instead of the offset, and `row` is passed
with each call, so X[1], X[2], ... share one kernel (X[0], at offset 0, keeps
the static plan).  The eager keys (ops/dispatch.py, csrc/fastpath.cpp) and
the compiled graphs' (compile/runner.py) apply the same rule, `leading_rows`;
the C++ copy of it must stay identical.

Only views of the box's own dtype qualify (no bitcast between the slice and
the plan), and only when the rows fit in the box (ATen guarantees they fit in
the storage; a box always covers its storage, checked anyway).
"""

import functools
import math

import jax.numpy as jnp
from jax import lax

from ..runtime.dtypes import JAX_TO_TORCH
from . import plans


@functools.lru_cache(maxsize=None)
def box_rows(sig):
    """(leading size, elements per leading index, torch dtype) of a box
    signature (shape, dtype); None for a box that has no leading rows."""
    shape, dtype = sig
    if len(shape) == 0:
        return None
    return shape[0], math.prod(shape[1:]), JAX_TO_TORCH.get(jnp.dtype(dtype))


def leading_rows(sig, dtype, sizes, strides, offset):
    """(row, residual, span) for a view read with a traced row, or None
    when its offset stays in the key."""
    if offset == 0 or sig is None:
        return None
    rows = box_rows(sig)
    if rows is None:
        return None
    lead, per_row, box_dtype = rows
    if box_dtype != dtype or per_row == 0 or offset < per_row or 0 in sizes:
        return None
    extent = 1 + sum((n - 1) * s for n, s in zip(sizes, strides))
    row, residual = divmod(offset, per_row)
    span = -(-(residual + extent) // per_row)
    if row + span > lead:
        return None
    return row, residual, span


def read_rows(x, row, span, sizes, strides, residual, dtype):
    """The view's value, read from rows [row, row + span) of box `x`."""
    rows = lax.dynamic_slice_in_dim(x, row, span, axis=0)
    return plans.read_view(rows, sizes, strides, residual, dtype)


def write_rows(x, row, span, sizes, strides, residual, value):
    """Box `x` after writing `value` through the view in rows [row, row + span)."""
    rows = lax.dynamic_slice_in_dim(x, row, span, axis=0)
    nbytes = rows.size * rows.dtype.itemsize
    rows = plans.write_view(rows, nbytes, sizes, strides, residual, value)
    return lax.dynamic_update_slice_in_dim(x, rows, row, axis=0)
