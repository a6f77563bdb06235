"""Hooks torchtpu into the dispatcher for the PrivateUse1 key.

At import (cheap, no JAX): the C++ entry point (csrc/fastpath.cpp) becomes
the PrivateUse1 fallback, and the data-movement kernels are registered.  On
first use (`ensure_loaded`, which starts JAX and loads the lowering table):
the C++ entry point also becomes the kernel of each lowered op, so a
lowering wins over the op's CompositeExplicitAutograd kernel.

The C++ entry point serves cache hits itself and sends everything else to
`slow_path` below, which routes the call (special handler, lowered kernel,
or fallback) and hands back the kernel it used when that is safe to reuse.
"""

import functools
import os
import threading

import torch

from .. import _C
from ..runtime import boxes, devices
from . import schema as schema_mod
from . import nested, sparse_layouts

_lock = threading.RLock()
_loaded = False

# Kernels that move data rather than compute it (see transfer.py).
_TRANSFER_KERNELS = {
    "_copy_from": "copy_from",
    "_copy_from_and_resize": "copy_from_and_resize",
    "_local_scalar_dense": "local_scalar_dense",
}

# schema.py's argument kinds, numbered as csrc/fastpath.cpp expects.
_KIND_CODES = {
    schema_mod.TENSOR: 0,
    schema_mod.OPT_TENSOR: 1,
    schema_mod.TENSOR_LIST: 2,
    schema_mod.OPT_TENSOR_LIST: 3,
    schema_mod.SCALAR: 4,
    schema_mod.SCALAR_LIST: 5,
    schema_mod.GENERATOR: 6,
    schema_mod.STATIC: 7,
}


_ops_by_name: dict = {}


def resolve(name: str, overload: str):
    """The OpOverload for a schema name ('aten::add') and overload name."""
    key = (name, overload)
    op = _ops_by_name.get(key)
    if op is None:
        namespace, op_name = name.split("::")
        packet = getattr(getattr(torch.ops, namespace), op_name)
        op = _ops_by_name[key] = getattr(packet, overload or "default")
    return op


def op_info(name: str, overload: str):
    """For the C++ entry point: (argument kinds, baked-in Scalar positions,
    whether this op can ever be served from the C++ kernel cache)."""
    ensure_loaded()
    from . import dispatch, special

    op = resolve(name, overload)
    entry = dispatch.entry_of(op)
    kinds = [_KIND_CODES[k] for k in entry.kinds]
    fast = entry.lowering is not None and (op not in special.HANDLERS or op in special.GENERIC_WHEN)
    return kinds, sorted(entry.static), fast


def slow_path(name: str, overload: str, args, kwargs):
    """One call through the Python dispatcher: (result, kernel spec for the
    C++ cache, or None when this call must not be cached)."""
    if devices._forked_after_start:
        devices.check_not_forked()
    ensure_loaded()
    from . import dispatch, fallback, foreach_devices, special

    op = resolve(name, overload)
    if _takes_generator(op):
        _check_generator_device(args, kwargs)
    transfer_kernel = _TRANSFER_KERNELS.get(name[len("aten::"):]) if name.startswith("aten::") else None
    if transfer_kernel is not None:
        from . import transfer

        return getattr(transfer, transfer_kernel)(*args, **kwargs), None
    if name.startswith("aten::_foreach_") and foreach_devices.spans_devices(args, kwargs):
        return foreach_devices.run_per_device(op, args, kwargs), None
    handler = special.handler_for(op, args, kwargs)
    if handler is not None:
        return handler(*args, **kwargs), None
    if dispatch.entry_of(op).lowering is not None:
        try:
            result, kernel = dispatch.run_with_kernel(op, args, kwargs)
            return result, None if kernel is None else kernel.fastpath_spec()
        except dispatch.Declined:
            return fallback.run_on_cpu(op, args, kwargs), None
        except dispatch.Unsupported:
            pass
    return fallback.handle(op, args, kwargs), None


@functools.lru_cache(maxsize=None)
def _takes_generator(op) -> bool:
    """Whether the op's schema has a Generator argument (the scan below is
    skipped for every other op, `.item()` included)."""
    return any(isinstance(a.type, torch.OptionalType) and str(a.type.getElementType()) == "Generator"
               or str(a.type) == "Generator" for a in op._schema.arguments)


def _check_generator_device(args, kwargs):
    """A tpu generator brings a call here even when the op works on the CPU
    (`torch.randperm(5, generator=torch.Generator("tpu"))`); raise CUDA's
    error for its generators rather than run a CPU op on the tpu."""
    values = list(args) + list(kwargs.values())
    generator = next((v for v in values if isinstance(v, torch.Generator)), None)
    if generator is None or generator.device.type != "tpu":
        return
    flat = [x for v in values for x in (v if isinstance(v, (list, tuple)) else (v,))]
    device = kwargs.get("device")
    on_tpu = any(isinstance(x, torch.Tensor) and x.device.type == "tpu" for x in flat)
    if not on_tpu and (device is None or torch.device(device).type != "tpu"):
        raise RuntimeError("Expected a 'cpu' device type for generator but found 'tpu'")


def _is_composite_implicit(op) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd")


def ensure_loaded():
    """Start JAX, load the lowering table, register the lowered ops."""
    global _loaded
    if _loaded:
        return
    with _lock:
        if _loaded:
            return
        from ..runtime import devices

        devices.init()
        from . import lowerings, special, transfer  # noqa: F401  (fill the tables)
        from .registry import LOWERINGS, find_lowering, known_to_dispatcher, variants

        transfer_ops = {"aten::" + name for name in _TRANSFER_KERNELS}
        names = {"copy_"}  # served by transfer.copy_ unless both sides are one tpu device
        # Every overload a lowering serves (its in-place and out= variants too)
        # gets the C++ entry point as its kernel, so it wins over the
        # overload's CompositeExplicitAutograd kernel (`add_` would otherwise
        # run as `add` + `copy_`, `_foreach_add_` as a loop).
        ops = {v for op in LOWERINGS for v in variants(op) if find_lowering(v) is not None}
        ops.update(special.HANDLERS)
        for op in ops:
            if op.namespace != "aten" or op.name() in transfer_ops or not known_to_dispatcher(op):
                continue
            if _is_composite_implicit(op):
                continue
            overload = op._overloadname
            names.add(op._schema.name.split("::")[1] + ("" if overload == "default" else "." + overload))
        _C._register_kernels(sorted(names))
        if os.environ.get("TORCHTPU_LAUNCH_BLOCKING", "0").strip().lower() in ("1", "true", "yes", "on"):
            from . import dispatch

            dispatch.set_launch_blocking(True)
        _loaded = True


def install():
    """Called at `import torchtpu`: cheap registrations only."""
    from ..runtime import checks

    _C._init_fastpath(boxes.boxes, boxes.move, op_info, slow_path, checks.pending, checks.maybe_fold)
    # The data-movement kernels go through the C++ entry point too (to
    # slow_path, which loads transfer.py on first use), so they share its
    # way out of dynamo (runtime/outside_dynamo.py).
    _C._register_kernels(sorted(_TRANSFER_KERNELS))
    sparse_layouts.install()
    nested.install()
