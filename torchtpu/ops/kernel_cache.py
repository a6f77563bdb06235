"""The eager kernel cache, bounded: least recently used kernels are evicted.

Every distinct call signature (op, shapes, view geometry, dtypes, baked
scalars) compiles a kernel, and each compiled XLA executable holds memory
and, on the CPU platform, about 15 memory maps: a process that keeps
meeting new shapes (eager generation with a growing cache compiles 20-50
kernels per token) would otherwise grow without bound until it runs out of
memory or reaches the kernel's map limit (vm.max_map_count, where XLA
crashes).  Past `limit` kernels, the oldest quarter not called since the
last sweep is dropped -- from this dict and from the C++ entry point's copy
(csrc/fastpath.cpp) -- so their executables are freed.  An evicted kernel
that is needed again is rebuilt, from the on-disk executable cache when it
is on (a few ms).

Recency is a flag each executable sets when called (`LazyExecutable.used`),
swept CLOCK-style: a kernel used since the last sweep gets a second chance.
TORCHTPU_KERNEL_CACHE_SIZE sets the limit (default 2048 kernels).
"""

import gc
import os

from .. import _C

DEFAULT_LIMIT = 2048
MIN_LIMIT = 8


def limit_from_env() -> int:
    raw = os.environ.get("TORCHTPU_KERNEL_CACHE_SIZE", "").strip()
    if not raw:
        return DEFAULT_LIMIT
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"TORCHTPU_KERNEL_CACHE_SIZE must be an integer number of kernels, got {raw!r}") from None
    return max(MIN_LIMIT, value)


def _executables(kernel):
    yield kernel.jitted
    if kernel.donating is not None:
        yield kernel.donating[0]


def _recently_used(kernel) -> bool:
    """Whether the kernel ran since the last sweep; clears the flags."""
    used = False
    for executable in _executables(kernel):
        used = used or executable.used
        executable.used = False
    return used


class KernelCache(dict):
    """key -> dispatch._Kernel, at most `limit` of them."""

    def __init__(self, limit: int):
        super().__init__()
        self.limit = limit
        self.evictions = 0

    def __setitem__(self, key, kernel):
        # Evict before inserting: the new kernel has not run yet, and the
        # C++ entry point caches it right after this call returns.
        if len(self) >= self.limit:
            self._evict(len(self) + 1 - self.limit * 3 // 4)
        super().__setitem__(key, kernel)

    def _evict(self, count):
        items = list(self.items())
        super().clear()
        kept_old, second_chance, victims = [], [], []
        for key, kernel in items:  # oldest first
            if len(victims) < count and not _recently_used(kernel):
                victims.append(kernel)
            elif len(victims) < count:
                second_chance.append((key, kernel))
            else:
                kept_old.append((key, kernel))
        order = kept_old + second_chance
        short = count - len(victims)  # everything scanned ran recently: oldest first
        victims += [kernel for _, kernel in order[:short]]
        self.update(order[short:])
        self.evictions += len(victims)
        _C._forget_kernels([executable for kernel in victims for executable in _executables(kernel)])
        # A kernel and its traced function form a cycle (the function fills
        # the kernel's check table), and JAX's trace caches keep a freshly
        # compiled executable while that function lives: collect now, or the
        # executables wait for the next full collection.
        del victims
        gc.collect()
