"""Hooks the Python side into the dispatcher for the PrivateUse1 key.

At import (cheap, no JAX): a boxed fallback for every op without a kernel,
and the data-movement kernels.  On first use (`ensure_loaded`, which imports
JAX and the lowering table): a direct kernel for each lowered op, so a
lowering also wins over an op's CompositeExplicitAutograd kernel."""

import threading

import torch

_fallback_lib = torch.library.Library("_", "IMPL")
_aten_lib = torch.library.Library("aten", "IMPL")
_lock = threading.RLock()
_loaded = False
_registered: set = set()

# Kernels that move data rather than compute it (see transfer.py).
_TRANSFER_KERNELS = {
    "copy_": "copy_",
    "_copy_from": "copy_from",
    "_copy_from_and_resize": "copy_from_and_resize",
    "_local_scalar_dense": "local_scalar_dense",
}


def _lazy_transfer(name):
    def kernel(*args, **kwargs):
        ensure_loaded()
        from . import transfer

        return getattr(transfer, name)(*args, **kwargs)

    return kernel


def _run(op, args, kwargs):
    from . import dispatch, fallback, special

    handler = special.HANDLERS.get(op)
    if handler is not None:
        return handler(*args, **kwargs)
    if dispatch.entry_of(op).lowering is not None:
        try:
            return dispatch.run(op, args, kwargs)
        except dispatch.Unsupported:
            pass
    return fallback.handle(op, args, kwargs)


def _boxed_fallback(op, *args, **kwargs):
    ensure_loaded()
    return _run(op, args, kwargs)


def _op_kernel(op):
    def kernel(*args, **kwargs):
        return _run(op, args, kwargs)

    return kernel


def _is_composite_implicit(op) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd")


def ensure_loaded():
    """Import JAX and the lowering table; register a kernel per lowered op."""
    global _loaded
    if _loaded:
        return
    with _lock:
        if _loaded:
            return
        from ..runtime import devices

        devices.init()
        from . import lowerings, special  # noqa: F401  (fills the tables)
        from .registry import LOWERINGS

        transfer_ops = {"aten::" + name for name in _TRANSFER_KERNELS}
        for op in list(LOWERINGS) + list(special.HANDLERS):
            if op in _registered or _is_composite_implicit(op):
                continue
            if op.name() in transfer_ops:
                continue
            _aten_lib.impl(op, _op_kernel(op), "PrivateUse1")
            _registered.add(op)
        _loaded = True


def install():
    """Called at `import torchtpu`: cheap registrations only."""
    _fallback_lib.fallback(_boxed_fallback, "PrivateUse1")
    for aten_name, fn_name in _TRANSFER_KERNELS.items():
        _aten_lib.impl(aten_name, _lazy_transfer(fn_name), "PrivateUse1")
