"""The box table: each tpu storage address -> the jax.Array holding its bytes.

A box value is `(array, sig)`: the storage's current array (in the N-D shape
of whichever tensor last wrote all of it) and `sig = (shape, dtype)`, used in
kernel cache keys.  A storage that was never written has no box; reading it
gives zeros (its bytes are unspecified, as after torch.empty).

The C++ allocator records storage frees and moves as events; `drain()` applies
them at safe points (before every op), then hands the freed addresses back.
"""

import numpy as np

from .. import _C

boxes: dict = {}

# Before every op: drop the boxes of storages torch freed (then let the
# allocator reuse their addresses) and move resized storages' bytes.  In C++
# (csrc/fastpath.cpp), which calls `move` below for resizes.
drain = _C._drain_boxes


def move(address, new_address, new_nbytes):
    """storage.resize_: carry the bytes both sizes share to the new address."""
    entry = boxes.get(address)
    if entry is None:
        return
    import jax.numpy as jnp

    array = entry[0]
    itemsize = array.dtype.itemsize
    if new_nbytes % itemsize:
        array = _as_bytes(array)
        itemsize = 1
    flat = array.reshape(-1)
    n = new_nbytes // itemsize
    if n <= flat.shape[0]:
        flat = flat[:n]
    else:
        flat = jnp.concatenate([flat, jnp.zeros((n - flat.shape[0],), flat.dtype)])
    bind(new_address, flat)


def _as_bytes(array):
    import jax.numpy as jnp
    from jax import lax

    if array.dtype == jnp.bool_:
        return array.astype(jnp.uint8).reshape(-1)
    return lax.bitcast_convert_type(array, jnp.uint8).reshape(-1)


_sig_cache: dict = {}


def signature(shape, dtype):
    """Interned (shape, dtype) so cache keys compare and hash cheaply."""
    key = (shape, dtype)
    sig = _sig_cache.get(key)
    if sig is None:
        sig = _sig_cache[key] = key
    return sig


def bind(address, array, sig=None):
    """Make `array` the contents of the storage at `address`."""
    if address == 0:
        return  # zero-byte storage
    if sig is None:
        sig = signature(tuple(array.shape), np.dtype(array.dtype))
    boxes[address] = (array, sig)


def get(address):
    """(array, sig) of a storage, or None if it was never written."""
    return boxes.get(address)


def live_count() -> int:
    return len(boxes)
