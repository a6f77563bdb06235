"""What happens to an op with no lowering: first PyTorch's decompositions (run
eagerly on tpu tensors, so each piece dispatches back to us), then the CPU,
with a one-time warning naming the op and a per-op counter.

TORCHTPU_CPU_FALLBACK=warn (default) | error | silent."""

import os
import threading
import warnings
from collections import Counter

import torch
from torch.utils._pytree import tree_flatten, tree_map

from . import aten_checks, sparse_layouts, written_checks
from .dispatch import device_mismatch, first_tpu_device
from .schema import schema_of

_counts: Counter = Counter()
_warned: set = set()
_local = threading.local()


def counts() -> dict:
    """{op name: number of calls that ran on the CPU} since start (or reset)."""
    return dict(_counts)


def reset_counts():
    _counts.clear()


def _mode() -> str:
    mode = os.environ.get("TORCHTPU_CPU_FALLBACK", "warn").strip().lower()
    if mode not in ("warn", "error", "silent"):
        raise ValueError(f"TORCHTPU_CPU_FALLBACK must be warn, error or silent, not {mode!r}")
    return mode


def _decomposition(op):
    from torch._decomp import decomposition_table

    return decomposition_table.get(op)


# Arguments PyTorch lets live on the CPU next to device tensors.
_CPU_OK_ARGS = frozenset({"indices", "scalars", "steps", "state_steps"})


def _check_devices(sch, values):
    """Same rule as the lowered path: one tpu device, and CPU tensors only as
    0-dim scalars (PyTorch's own error otherwise): falling back must not make
    a wrong program run."""
    tpu = set()
    cpu = False
    for name, value in zip(sch.names, values):
        if name in _CPU_OK_ARGS:
            continue
        for x in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(x, torch.Tensor):
                if x.device.type == "tpu":
                    tpu.add(x.device)
                elif x.dim() > 0:
                    cpu = True
    if len(tpu) > 1:
        first, second = sorted(tpu, key=str)[:2]
        raise device_mismatch(first, second)
    if tpu and cpu:
        raise device_mismatch(next(iter(tpu)), "cpu")


def handle(op, args, kwargs):
    """Run `op` without a lowering: decomposed if PyTorch can, else on CPU."""
    sch = schema_of(op)
    values = sch.normalize(args, kwargs)
    _check_devices(sch, values)
    aten_checks.before_meta(sch, values)  # (ATen's dtype checks a decomposition skips: trace of bool)
    written_checks.check_exact_out_dtype_unlowered(sch, values)
    active = getattr(_local, "decomposing", None)
    if active is None:
        active = _local.decomposing = set()
    decomp = _decomposition(op)
    if decomp is not None and op not in active:
        active.add(op)
        try:
            result = decomp(*args, **kwargs)
        except NotImplementedError:
            result = NotImplemented
        finally:
            active.discard(op)
        if result is not NotImplemented:
            return result
    return run_on_cpu(op, args, kwargs)


def run_on_cpu(op, args, kwargs):
    name = str(op)
    mode = _mode()
    if mode == "error":
        raise NotImplementedError(
            f"torchtpu: the op '{name}' has no tpu lowering and TORCHTPU_CPU_FALLBACK=error. "
            f"Set TORCHTPU_CPU_FALLBACK=warn to run it on the CPU (slow but correct), "
            f"or add a lowering in torchtpu/ops/lowerings/."
        )
    _counts[name] += 1
    if mode == "warn" and name not in _warned:
        _warned.add(name)
        warnings.warn(
            f"torchtpu: '{name}' has no tpu lowering; running it on the CPU (this warning is shown once "
            f"per op; torchtpu.fallback_counts() counts the calls)",
            stacklevel=3,
        )
    device = first_tpu_device(args, kwargs)

    def to_cpu(x):
        if isinstance(x, torch.Tensor) and x.device.type == "tpu":
            return x.cpu()
        if isinstance(x, torch.device) and x.type == "tpu":
            return torch.device("cpu")
        if isinstance(x, torch.Generator) and x.device.type == "tpu":
            return None
        return x

    cpu_args, cpu_kwargs = tree_map(to_cpu, (args, kwargs))
    result = op(*cpu_args, **cpu_kwargs)
    if any(isinstance(r, torch.Tensor) and r.layout != torch.strided for r in tree_flatten(result)[0]):
        sparse_layouts.unsupported(op)  # (`to_sparse_csr()` of a tpu tensor)

    sch = schema_of(op)
    values = sch.normalize(args, kwargs)
    cpu_values = sch.normalize(cpu_args, cpu_kwargs)
    for position in sch.mutated:
        original, updated = values[position], cpu_values[position]
        if isinstance(original, (list, tuple)):
            for o, u in zip(original, updated):
                _write_back(o, u)
        else:
            _write_back(original, updated)

    returns = result if sch.num_returns > 1 else (result,)
    out = []
    for alias, r in zip(sch.return_alias, returns):
        if alias is not None and values[alias] is not None and sch.op._schema.returns and alias in sch.mutated:
            out.append(values[alias])
        else:
            out.append(tree_map(lambda x: x.to(device) if isinstance(x, torch.Tensor) else x, r))
    if sch.num_returns == 0:
        return None
    return out[0] if sch.num_returns == 1 else tuple(out)


def _write_back(original, updated):
    if isinstance(original, torch.Tensor) and original.device.type == "tpu":
        if original.shape != updated.shape:
            original.resize_(updated.shape)
        original.copy_(updated)
