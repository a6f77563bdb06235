"""The memory API of `torch.tpu` (mirrors `torch.cuda.memory_*`), backed by
the C++ allocator's statistics (csrc/allocator.cpp).

Re-exported by torch.tpu (torchtpu/device.py).  No JAX import here."""

from . import _C

__all__ = ["memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved"]


def _index(device) -> int:
    from .device import _index as index

    return index(device)


def memory_allocated(device=None) -> int:
    return _C._basic_memory_stats(_index(device))["allocated_bytes"]


def max_memory_allocated(device=None) -> int:
    return _C._basic_memory_stats(_index(device))["peak_allocated_bytes"]


def memory_reserved(device=None) -> int:
    return _C._basic_memory_stats(_index(device))["reserved_bytes"]


def max_memory_reserved(device=None) -> int:
    return _C._basic_memory_stats(_index(device))["peak_reserved_bytes"]
