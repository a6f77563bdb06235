"""A fill kernel's first call served by a host transfer instead of a compile.

`zero_`, `fill_` with a number, and the `zeros`/`ones`/`full` factories are
one kernel per shape, and each costs an XLA compile (~45 ms on XLA:CPU) that
a one-shot fill pays in full: optimizer state (`zeros_like` per parameter
shape), buffers, masks, KV caches.  When such a fill writes a whole storage,
its result is a constant the host can build and transfer in well under a
millisecond, so the first calls of each kernel key are served that way
(`HOST_CALLS`: AdamW fills two state tensors per parameter, and a model
repeats its shapes layer after layer).  Then the key compiles its kernel as
usual: a fill that keeps repeating, like `zero_grad(set_to_none=False)`,
runs on the device with no transfers.

Only exact cases are served: the tensor covers its storage densely, the
value converts to the dtype without rounding or range checks, and the storage
is small enough that the transfer is cheaper than a compile."""

import math

import jax
import numpy as np
import torch

from .. import _C
from ..runtime import boxes, devices
from ..runtime.dtypes import to_jax
from . import plans

aten = torch.ops.aten

# Bytes above which a compiled fill beats building and sending the constant.
MAX_BYTES = 16 << 20
# Calls of one kernel key served from the host before it compiles.
HOST_CALLS = 8

# In-place fills: the value each writes over its first argument.
_FILL_VALUE = {
    aten.zero_.default: lambda values: 0,
    aten.fill_.Scalar: lambda values: values[1],
}
# Factories: (the value, the position of their layout= argument).
_FACTORIES = {
    aten.zeros.default: (lambda values: 0, 2),
    aten._efficientzerotensor.default: (lambda values: 0, 2),
    aten.ones.default: (lambda values: 1, 2),
    aten.full.default: (lambda values: values[1], 3),
}

_calls: dict = {}  # kernel key -> calls seen


def serve(op, values, call, key):
    """The op's result when `key` has had fewer than HOST_CALLS calls and a
    host transfer serves this one exactly, else None (the caller runs the
    kernel)."""
    if op not in _FILL_VALUE and op not in _FACTORIES:
        return None
    calls = _calls.get(key, 0)
    if calls >= HOST_CALLS:
        return None
    _calls[key] = calls + 1
    if op in _FILL_VALUE:
        return _fill(values[0], _FILL_VALUE[op](values))
    value_of, layout_at = _FACTORIES[op]
    if values[layout_at] not in (None, 0, torch.strided) or values[layout_at + 2]:  # sparse, pinned
        return None
    # dtype= arrives as a ScalarType number, and None means inferred from
    # the value: the meta kernel resolves both.
    arguments = dict(zip((a.name for a in op._schema.arguments), values), device="meta")
    meta = op(**arguments)
    if meta.numel() * meta.element_size() > MAX_BYTES:
        return None
    out = torch.empty(meta.shape, dtype=meta.dtype, device=torch.device("tpu", call.device))
    return _fill(out, value_of(values))


def _fill(t, value):
    """`t` with `value` written over its whole storage from the host, or
    None when that write is not one served exactly."""
    address, nbytes, sizes, strides, offset, device = _C._tensor_info(t)
    if not address or nbytes > MAX_BYTES:
        return None
    dtype = to_jax(t.dtype)
    order = plans.dense_order(sizes, strides, offset, dtype.itemsize, nbytes)
    value = _exact(value, dtype)
    if order is None or value is None:
        return None
    # The box of a whole-storage write: its non-unit dims in storage order
    # (plans.write_view).
    host = np.full([sizes[d] for d in order], value, dtype)
    boxes.bind(address, jax.device_put(host, devices.jax_device(device)))
    return t


def _exact(value, dtype):
    """`value` as `dtype` holds it when the conversion is exact and needs no
    range check (ATen's fill_ checks overflow; those calls take the kernel);
    else None."""
    if type(value) not in (bool, int, float):
        return None
    if dtype == np.bool_:
        return bool(value) if value in (0, 1) else None
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return value if type(value) is not float and info.min <= value <= info.max else None
    if type(value) is float and math.isnan(value):
        return value
    try:
        with np.errstate(over="ignore"):
            converted = np.array(value, dtype)
    except OverflowError:
        return None
    return value if converted.item() == value else None
