"""torchtpu: TPUs as an ordinary PyTorch device.

    import torch, torchtpu          # or just `import torch` (autoload)
    x = torch.randn(4, 4, device="tpu")

Importing registers the PrivateUse1 backend under the name `tpu`, the
`torch.tpu` device module and the dispatcher hooks.  JAX starts on first use.
"""

import torch

__version__ = "0.1.0"

if torch._C._get_privateuse1_backend_name() != "tpu":
    torch.utils.rename_privateuse1_backend("tpu")

from . import _C  # noqa: E402  (C++ runtime: allocator, guard, hooks, generator)
from . import device as _device_module  # noqa: E402
from .ops import registration as _registration  # noqa: E402


def _device_count_provider() -> int:
    from .runtime import devices

    return devices.count()


def _register():
    _C._register_runtime(_device_count_provider, _device_module._synchronize_hook)
    torch._register_device_module("tpu", _device_module)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
    )
    _registration.install()
    # Random ops inside activation checkpointing under torch.compile: the
    # recomputed draw in the backward graph replays the forward's through a
    # generator pair (graphsafe_run_with_rng_state), as on CUDA.
    from torch._functorch._aot_autograd.utils import register_graphsafe_rng_device_type

    register_graphsafe_rng_device_type("tpu")
    # torch.compile(model) with the default backend: a clear error (inductor_device.py)
    from . import inductor_device

    inductor_device.install()


if not hasattr(torch, "tpu"):
    _register()


def fallback_counts() -> dict:
    """{aten op: calls that ran on the CPU for lack of a tpu lowering}."""
    from .ops import fallback

    return fallback.counts()


def reset_fallback_counts() -> None:
    from .ops import fallback

    fallback.reset_counts()


def compile_stats() -> dict:
    """torch.compile(backend="tpu") telemetry (see torchtpu.compile)."""
    from .compile import compile_stats as stats

    return stats()


def kernel_cache_stats() -> dict:
    """Eager kernel cache: distinct kernels compiled, Python-path calls, the
    C++ entry point's cache hits/misses, and the kernels held, their limit
    (TORCHTPU_KERNEL_CACHE_SIZE) and how many were evicted."""
    from .ops import dispatch

    hits, misses = _C._fastpath_stats()
    cache = dispatch._cache
    return dict(dispatch.stats, cached=len(cache), limit=cache.limit, evicted=cache.evictions,
                fast_hits=hits, fast_misses=misses)
