"""The memory API of `torch.tpu` (mirrors `torch.cuda.memory`), backed by the
C++ caching allocator (csrc/allocator.cpp, bindings in csrc/memory_bindings.cpp).

Re-exported by torch.tpu (torchtpu/device.py star-imports `__all__`, which
includes this module itself as `memory`, so `torch.tpu.memory._snapshot()`
works as `torch.cuda.memory._snapshot()` does).  No JAX import here: only the
physical numbers (`mem_get_info`, `physical_memory_stats`) start JAX.

The device's capacity -- what `set_per_process_memory_fraction` is a fraction
of, what `mem_get_info` reports as total -- is the platform's memory limit
(`jax.Device.memory_stats()["bytes_limit"]`, pushed into C++ when JAX starts).
JAX on the CPU reports none: the stand-in is the host's physical RAM, with
"free" = capacity - this process's reserved bytes.  `TORCHTPU_DEVICE_MEMORY`
(bytes, or with a K/M/G/T suffix, e.g. `16G`) overrides the capacity on any
platform.
"""

import builtins
import collections
import os
import pickle
import re
import sys
import types
import warnings
from typing import Any

import torch

from . import _C
from .device import _checked_index as _index

__all__ = [
    "memory",
    "caching_allocator_enable",
    "device_memory_used",
    "empty_cache",
    "get_allocator_backend",
    "get_per_process_memory_fraction",
    "max_memory_allocated",
    "max_memory_cached",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_cached",
    "memory_reserved",
    "memory_snapshot",
    "memory_stats",
    "memory_stats_as_nested_dict",
    "memory_summary",
    "physical_memory_stats",
    "reset_accumulated_memory_stats",
    "reset_max_memory_allocated",
    "reset_max_memory_cached",
    "reset_peak_memory_stats",
    "set_per_process_memory_fraction",
    "_dump_snapshot",
    "_record_memory_history",
    "_snapshot",
]

# torch.tpu.memory: this module (exported through __all__).
memory = sys.modules[__name__]


# ------------------------------------------------------------ capacity


def _parse_bytes(text: str) -> int:
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = 1
    for suffix, factor in (("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30), ("T", 1 << 40)):
        if text.endswith(suffix):
            text, scale = text[:-1], factor
            break
    return int(float(text) * scale)


_capacity_override = None
if os.environ.get("TORCHTPU_DEVICE_MEMORY"):
    _capacity_override = _parse_bytes(os.environ["TORCHTPU_DEVICE_MEMORY"])
    _C._set_device_capacity(-1, _capacity_override)


def _jax_memory_stats(index: int):
    """The platform's allocator statistics of tpu:index, or None (CPU)."""
    from .runtime import devices

    try:
        return devices.jax_device(index).memory_stats() or None
    except (AttributeError, NotImplementedError):
        return None


def _runtime_started(jax_devices) -> None:
    """Called once JAX has picked the devices (runtime/devices.py): the
    allocator's capacity becomes each device's reported memory limit."""
    if _capacity_override is not None:
        return
    for index, device in enumerate(jax_devices):
        try:
            stats = device.memory_stats()
        except (AttributeError, NotImplementedError):
            stats = None
        limit = (stats or {}).get("bytes_limit")
        if limit:
            _C._set_device_capacity(index, int(limit))


def _physical_memory(index: int):
    """For C++ (mem_get_info / torch.accelerator.get_memory_info):
    (bytes_in_use, bytes_limit) where the platform reports them, else None."""
    if _capacity_override is not None:
        return None
    stats = _jax_memory_stats(index)
    if not stats or not stats.get("bytes_limit"):
        return None
    return int(stats.get("bytes_in_use", 0)), int(stats["bytes_limit"])


_C._set_physical_memory_provider(_physical_memory)


# -------------------------------------------------------- statistics


def memory_stats_as_nested_dict(device=None) -> dict[str, Any]:
    """The result of :func:`memory_stats` as a nested dictionary."""
    return _C._memory_stats(_index(device))


def memory_stats(device=None) -> dict[str, Any]:
    """The caching allocator's statistics for a device, with CUDA's keys and
    arithmetic (see ``torch.cuda.memory_stats``): ``{allocation, segment,
    active, inactive_split, allocated_bytes, reserved_bytes, active_bytes,
    inactive_split_bytes, requested_bytes}.{all,small_pool,large_pool}.
    {current,peak,allocated,freed}``, ``oversize_{allocations,segments}.*``
    and the counters ``num_alloc_retries``, ``num_ooms``, ``num_device_alloc``,
    ``num_device_free``, ``num_sync_all_streams``, ``num_oom_rejections``,
    ``max_split_size``.  "Device alloc/free" are segment reservations of the
    allocator (the bytes themselves are JAX buffers, one per live storage)."""
    flat = []

    def walk(prefix, value):
        if isinstance(value, dict):
            for key, item in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), item)
        else:
            flat.append((prefix, value))

    walk("", memory_stats_as_nested_dict(device))
    flat.sort()
    return collections.OrderedDict(flat)


def memory_allocated(device=None) -> int:
    """Bytes occupied by live tensors' storages (rounded, as CUDA)."""
    return _C._memory_counters(_index(device))[0]


def max_memory_allocated(device=None) -> int:
    return _C._memory_counters(_index(device))[1]


def memory_reserved(device=None) -> int:
    """Bytes held by the caching allocator (live blocks + cached free ones)."""
    return _C._memory_counters(_index(device))[2]


def max_memory_reserved(device=None) -> int:
    return _C._memory_counters(_index(device))[3]


def memory_cached(device=None) -> int:
    """Deprecated; see :func:`memory_reserved`."""
    return memory_reserved(device)


def max_memory_cached(device=None) -> int:
    """Deprecated; see :func:`max_memory_reserved`."""
    return max_memory_reserved(device)


def reset_peak_memory_stats(device=None) -> None:
    _C._reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device=None) -> None:
    _C._reset_accumulated_memory_stats(_index(device))


def reset_max_memory_allocated(device=None) -> None:
    warnings.warn(
        "torch.tpu.reset_max_memory_allocated now calls torch.tpu.reset_peak_memory_stats, "
        "which resets /all/ peak memory stats.",
        FutureWarning,
        stacklevel=2,
    )
    reset_peak_memory_stats(device)


def reset_max_memory_cached(device=None) -> None:
    warnings.warn(
        "torch.tpu.reset_max_memory_cached now calls torch.tpu.reset_peak_memory_stats, "
        "which resets /all/ peak memory stats.",
        FutureWarning,
        stacklevel=2,
    )
    reset_peak_memory_stats(device)


def get_allocator_backend() -> str:
    return "native"


def caching_allocator_enable(value: bool = True) -> None:
    """The caching allocator cannot be turned off (its blocks cost no device
    memory once released: the bytes are JAX buffers); accepted for API parity."""
    if not value:
        warnings.warn("torch.tpu: the caching allocator cannot be disabled", stacklevel=2)


# ------------------------------------------------------------- cache


def empty_cache() -> None:
    """Releases every cached segment that holds no live tensor (all devices),
    after dropping the buffers of tensors that died since the last op."""
    from .runtime import boxes

    boxes.drain()
    _C._empty_cache()


# ------------------------------------------------------------ limits


def set_per_process_memory_fraction(fraction, device=None) -> None:
    """Caps what the allocator may reserve on a device at ``fraction`` of its
    capacity (see the module docstring); beyond it, allocations raise
    torch.OutOfMemoryError."""
    index = _index(device)
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    if fraction < 0 or fraction > 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    _C._set_memory_fraction(fraction, index)


def get_per_process_memory_fraction(device=None) -> float:
    return _C._get_memory_fraction(_index(device))


def mem_get_info(device=None) -> tuple[int, int]:
    """(free, total) bytes of the device: the platform's numbers where it
    reports them, else the stand-in capacity minus this process's reserved
    bytes.  The same numbers as ``torch.accelerator.get_memory_info()``."""
    return tuple(_C._mem_get_info(_index(device)))


def physical_memory_stats(device=None) -> dict[str, int]:
    """The platform's own allocator numbers for the device
    (``jax.Device.memory_stats()``: ``bytes_in_use``, ``peak_bytes_in_use``,
    ``bytes_limit``, ...).  Where the platform reports none (JAX on the CPU),
    the stand-in: this process's reserved bytes, their peak, the capacity."""
    index = _index(device)
    stats = _jax_memory_stats(index) if _capacity_override is None else None
    if stats:
        return dict(stats)
    allocated, peak_allocated, reserved, peak_reserved = _C._memory_counters(index)
    return {
        "bytes_in_use": reserved,
        "peak_bytes_in_use": peak_reserved,
        "bytes_limit": _C._device_capacity(index),
    }


def device_memory_used(device=None) -> int:
    """Device memory in use, as the platform sees it (``bytes_in_use``)."""
    return int(physical_memory_stats(device).get("bytes_in_use", 0))


# ----------------------------------------------------------- summary

# PyTorch's own printout (torch.cuda.memory_summary) reads torch.cuda's
# statistics through its module globals; the same code object is run here
# with globals that read ours (torch itself is left untouched), and CUDA's
# words are swapped for the device's, width for width.
_SUMMARY_WORDS = (
    (re.compile(r"PyTorch CUDA memory summary, device ID (\d+)"), r"PyTorch TPU memory summary, device ID \1 "),
    ("CUDA OOMs:", " TPU OOMs:"),
    ("cudaMalloc retries:", " TPU alloc retries:"),
    ("GPU reserved memory", "TPU reserved memory"),
    ("GPU reserved segments", "TPU reserved segments"),
    ("Oversize GPU segments", "Oversize TPU segments"),
)


def _torch_summary():
    source = getattr(getattr(torch.cuda, "memory", None), "memory_summary", None)
    if source is None or source.__code__.co_freevars:
        return None

    def get_device_index(device, optional=False, allow_cpu=False):
        return _index(device)

    namespace = {
        "__builtins__": builtins,
        "__name__": __name__,
        "_get_device_index": get_device_index,
        "memory_stats": memory_stats,
    }
    return types.FunctionType(source.__code__, namespace, "memory_summary", source.__defaults__)


def _own_summary(device, abbreviated):
    """The same table, should PyTorch's formatter ever be unusable."""
    stats = memory_stats(device)
    rows = [
        ("allocated_bytes", "Allocated memory", True),
        ("active_bytes", "Active memory", True),
        ("requested_bytes", "Requested memory", True),
        ("reserved_bytes", "TPU reserved memory", True),
        ("inactive_split_bytes", "Non-releasable memory", True),
        ("allocation", "Allocations", False),
        ("active", "Active allocs", False),
        ("segment", "TPU reserved segments", False),
        ("inactive_split", "Non-releasable allocs", False),
    ]

    def cell(value, is_bytes):
        if not is_bytes:
            return f"{value:>10d}"
        for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
            if abs(value) < 768 * 1024 or unit == "TiB":
                return f"{value:>6d} {unit:<3}"
            value //= 1024
        return str(value)

    rule = "=" * 75
    lines = [
        rule,
        f" PyTorch TPU memory summary, device ID {_index(device)}",
        f" TPU OOMs: {stats['num_ooms']} | TPU alloc retries: {stats['num_alloc_retries']}",
        rule,
        "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ",
    ]
    pools = [("all", "")] if abbreviated else [("all", ""), ("large_pool", "from large pool"), ("small_pool", "from small pool")]
    for key, name, is_bytes in rows:
        lines.append("-" * 75)
        for pool, label in pools:
            p = f"{key}.{pool}."
            values = [cell(stats[p + m], is_bytes) for m in ("current", "peak", "allocated", "freed")]
            lines.append(f" {(label and '      ' + label) or name:<21} | " + " | ".join(values) + " ")
    lines.append(rule)
    return "|" + "|\n|".join(lines) + "|\n"


def memory_summary(device=None, abbreviated: bool = False) -> str:
    """A human-readable table of the allocator's statistics: PyTorch's own
    ``memory_summary`` printout over tpu's numbers."""
    formatter = _torch_summary()
    if formatter is not None:
        try:
            text = formatter(device, abbreviated)
        except (KeyError, NameError, TypeError):
            text = None
        if text is not None:
            for cuda_word, tpu_word in _SUMMARY_WORDS:
                if isinstance(cuda_word, str):
                    text = text.replace(cuda_word, tpu_word)
                else:
                    text = cuda_word.sub(tpu_word, text)
            return text
    return _own_summary(device, abbreviated)


# ---------------------------------------------------- history/snapshots


def _record_memory_history_legacy(
    enabled: bool,
    record_context=True,
    trace_alloc_max_entries=1,
    trace_alloc_record_context=False,
    device=None,
    record_context_cpp=False,
    clear_history=False,
    compile_context=False,
    global_record_annotations=False,
    skip_actions=None,
):
    if not enabled:
        return _record_memory_history_impl(None)
    context = "alloc" if trace_alloc_record_context else ("state" if record_context else None)
    return _record_memory_history_impl(
        "all" if trace_alloc_max_entries > 1 else "state",
        context,
        "all" if record_context_cpp else "python",
        trace_alloc_max_entries,
        device,
        clear_history,
        compile_context,
        global_record_annotations,
        skip_actions,
    )


def _record_memory_history_impl(
    enabled: str | None = "all",
    context: str | None = "all",
    stacks: str = "all",
    max_entries: int = sys.maxsize,
    device=None,
    clear_history: bool = False,
    compile_context: bool = False,
    global_record_annotations: bool = False,
    skip_actions: list[str] | None = None,
):
    _C._record_memory_history(
        enabled, context, stacks, int(min(max_entries, sys.maxsize)), clear_history, list(skip_actions or [])
    )


def _record_memory_history(enabled="all", *args, **kwargs) -> None:
    """Records a history of allocator events, with stack traces, for
    :func:`_snapshot` (as ``torch.cuda.memory._record_memory_history``:
    ``enabled`` None/"state"/"all", ``context`` None/"state"/"alloc"/"all",
    ``stacks`` "python"/"all", ``max_entries``, ``clear_history``,
    ``skip_actions``; the legacy boolean form is accepted too)."""
    if isinstance(enabled, bool):
        return _record_memory_history_legacy(enabled, *args, **kwargs)
    return _record_memory_history_impl(enabled, *args, **kwargs)


def _snapshot(device=None, augment_with_fx_traces: bool = False) -> dict:
    """The allocator's state in ``torch.cuda.memory._snapshot()``'s schema:
    ``{"segments": [...], "device_traces": [[...] per device],
    "allocator_settings": {...}}`` -- what pytorch.org/memory_viz and
    ``torch.cuda._memory_viz`` read."""
    snapshot = _C._memory_snapshot(True)
    if augment_with_fx_traces:
        augment = getattr(torch.cuda.memory, "_augment_memory_snapshot_stack_traces", None)
        if augment is not None:
            snapshot = augment(snapshot)
    return snapshot


def _dump_snapshot(filename: str = "dump_snapshot.pickle", augment_with_fx_traces: bool = False) -> None:
    """Pickles :func:`_snapshot` to ``filename`` (open it at pytorch.org/memory_viz)."""
    snapshot = _snapshot(augment_with_fx_traces=augment_with_fx_traces)
    with open(filename, "wb") as f:
        pickle.dump(snapshot, f)


def memory_snapshot(mempool_id=None, include_traces: bool = True) -> list:
    """The allocator's segments (and their blocks), as ``torch.cuda.memory_snapshot``."""
    return _C._memory_snapshot(include_traces)["segments"]
