"""Device-side checks: the errors an op must raise that depend on tensor
*values* (an index out of range, a class label outside [0, C)).

Checking them eagerly would synchronise after every such op.  Instead, as
with CUDA's device-side asserts, a kernel computes a check code next to its
results -- [k, value]: its k-th check failed on `value`, or [-1, 0] -- and
the codes pile up here; they are read at the next synchronisation (a host
read, `.item()`, `torch.tpu.synchronize()`), which raises the first failure.
The C++ entry point appends to `pending` directly.

Codes are folded on the device in blocks, so a long run without a sync keeps
only a few of them alive.  (No JAX import at module level: the list exists
from `import torch` on.)"""

from . import outside_dynamo

# [(int64[2] code on device, ((message, error class, op name), ...))]
pending: list = []

_BLOCK = 64
_fold_fn = None


def check_code(checks):
    """Inside a kernel: the [index, value] code of a list of
    (ok, value, message, error) checks."""
    import jax.numpy as jnp

    ok = jnp.stack([c[0] for c in checks])
    values = jnp.stack([c[1] for c in checks])
    first = jnp.argmin(ok)
    failed = ~jnp.all(ok)
    return jnp.stack([jnp.where(failed, first, -1), jnp.where(failed, values[first], 0)]).astype(jnp.int64)


def _fold(codes, bases):
    """First failure among a block of codes, re-indexed into the block's
    concatenated message table."""
    global _fold_fn
    if _fold_fn is None:
        import jax
        import jax.numpy as jnp

        def fold(codes, bases):
            c = jnp.stack(codes)  # (block, 2)
            failed = c[:, 0] >= 0
            first = jnp.argmax(failed)
            hit = jnp.any(failed)
            return jnp.stack([jnp.where(hit, c[first, 0] + bases[first], -1), jnp.where(hit, c[first, 1], 0)])

        _fold_fn = jax.jit(fold)
    return _fold_fn(codes, bases)


def _fold_block(items):
    import jax.numpy as jnp
    import numpy as np

    tables = []
    bases = np.zeros(_BLOCK, np.int64)
    codes = []
    for i, (code, table) in enumerate(items):
        bases[i] = len(tables)
        tables.extend(table)
        codes.append(code)
    filler = jnp.asarray(np.array([-1, 0], np.int64), device=next(iter(codes[0].devices())))
    codes.extend([filler] * (_BLOCK - len(codes)))
    return _fold(tuple(codes), bases), tuple(tables)


def maybe_fold():
    """Keep the pending list short (called by the dispatchers).  Outside
    dynamo: a compiled graph's runner calls this in the eager region after a
    graph break, where dynamo's frame hook would trace into JAX (a compiled
    MoE with `torch.where` routing crashed at its third step)."""
    if len(pending) < 2 * _BLOCK:
        return
    outside_dynamo.call(_fold_pending)


def _fold_pending():
    items = pending[:]
    del pending[:]
    by_device = {}
    for item in items:
        by_device.setdefault(next(iter(item[0].devices())), []).append(item)
    for group in by_device.values():
        for i in range(0, len(group), _BLOCK):
            pending.append(_fold_block(group[i : i + _BLOCK]))


def flush():
    """Raise the first failed device-side check since the last flush."""
    if not pending:
        return
    import jax

    items = pending[:]
    del pending[:]
    codes = jax.device_get([code for code, _ in items])
    for (index, value), (_, table) in zip(codes, items):
        if int(index) >= 0:
            message, error, op = table[int(index)]
            raise error(
                message.format(value=int(value))
                + f" (device-side check in {op}, reported at the next synchronization as CUDA reports "
                f"device-side asserts)"
            )
