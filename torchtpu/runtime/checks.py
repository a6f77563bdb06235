"""Device-side checks: the errors an op must raise that depend on tensor
*values* (an index out of range, a class label outside [0, C)).

Checking them eagerly would synchronise after every such op.  Instead, as
with CUDA's device-side asserts, a kernel computes a check code next to its
results (-1: fine, k: its k-th check failed) and the codes pile up here;
they are read at the next synchronisation (a host read, `.item()`,
`torch.tpu.synchronize()`), which raises the first failure.  The C++ entry
point appends to `pending` directly.

Codes are folded on the device in blocks, so a long run without a sync keeps
only a few of them alive.  (No JAX import here: the list exists from
`import torch` on.)"""

# [(int32 scalar code on device, ((message, error class, op name), ...))]
pending: list = []

_BLOCK = 64
_NONE = 2**31 - 1
_fold_fn = None


def _fold(codes, bases):
    """First failure among a block of codes, as an index into the block's
    concatenated message table (-1 if none failed)."""
    global _fold_fn
    if _fold_fn is None:
        import jax
        import jax.numpy as jnp

        def fold(codes, bases):
            c = jnp.stack(codes)
            g = jnp.where(c >= 0, c + bases, _NONE)
            first = jnp.min(g)
            return jnp.where(first == _NONE, -1, first).astype(jnp.int32)

        _fold_fn = jax.jit(fold)
    return _fold_fn(codes, bases)


def _fold_block(items):
    import jax.numpy as jnp
    import numpy as np

    tables = []
    bases = np.zeros(_BLOCK, np.int32)
    codes = []
    for i, (code, table) in enumerate(items):
        bases[i] = len(tables)
        tables.extend(table)
        codes.append(code)
    filler = jnp.full((), -1, jnp.int32, device=next(iter(codes[0].devices())))
    codes.extend([filler] * (_BLOCK - len(codes)))
    return _fold(tuple(codes), bases), tuple(tables)


def maybe_fold():
    """Keep the pending list short (called by the dispatcher)."""
    if len(pending) < 2 * _BLOCK:
        return
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
    items = pending[:]
    del pending[:]
    import jax

    codes = jax.device_get([code for code, _ in items])
    for code, (_, table) in zip(codes, items):
        if int(code) >= 0:
            message, error, op = table[int(code)]
            raise error(
                f"{message} (device-side check in {op}: reported at the next synchronization, "
                f"as CUDA reports device-side asserts)"
            )
