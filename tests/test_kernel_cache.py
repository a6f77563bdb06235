"""The bounded eager kernel cache (ops/kernel_cache.py): past its limit the
least recently used kernels are evicted from the Python cache and the C++
entry point's copy, so their executables are freed; kernels in use stay,
and an evicted kernel that comes back is rebuilt and gives the same
results."""

import gc
import weakref

import pytest
import torch

import torchtpu
from torchtpu.ops import dispatch, kernel_cache

LIMIT = 16


@pytest.fixture
def small_cache(monkeypatch):
    monkeypatch.setattr(dispatch._cache, "limit", LIMIT)
    yield dispatch._cache


def _kernel_of(fn, *args):
    """(the kernel `fn(*args)` ran on the Python path, its result)."""
    before = dict(dispatch._cache)
    out = fn(*args)
    new = [k for key, k in dispatch._cache.items() if key not in before]
    assert len(new) == 1, "expected one new kernel"
    return new[0], out


def _new_shapes(count, start):
    """`count` calls that each compile kernels never seen before."""
    for n in range(start, start + count):
        x = torch.arange(float(n), device="tpu")
        assert torch.equal((x * 3 - 1).cpu(), torch.arange(float(n)) * 3 - 1)


def test_cache_stays_bounded_and_frees_evicted_kernels(small_cache):
    victim, _ = _kernel_of(torch.erfinv, torch.full((5, 7), 0.25, device="tpu"))
    victim_ref = weakref.ref(victim)
    del victim
    evicted = small_cache.evictions
    _new_shapes(3 * LIMIT, 1000)
    assert len(small_cache) <= LIMIT
    assert small_cache.evictions > evicted
    assert torchtpu.kernel_cache_stats()["evicted"] == small_cache.evictions
    gc.collect()
    # Freed: neither the Python cache nor the C++ cache holds it.
    assert victim_ref() is None


def test_recently_used_kernel_survives(small_cache):
    x = torch.full((3, 11), 0.5, device="tpu")
    kept, expected = _kernel_of(torch.special.ndtri, x)
    evicted = small_cache.evictions
    for start in range(2000, 2000 + 4 * LIMIT):
        _new_shapes(1, start)
        assert torch.equal(torch.special.ndtri(x).cpu(), expected.cpu())  # the C++ path's hit marks it used
    assert small_cache.evictions > evicted
    assert any(k is kept for k in small_cache.values())  # never evicted, never rebuilt


def test_evicted_kernel_is_rebuilt_and_cached_again(small_cache):
    x = torch.linspace(-2, 2, 13, device="tpu")
    first = torch.special.erfcx(x).cpu()
    _new_shapes(3 * LIMIT, 3000)
    compiles = dispatch.stats["compiles"]
    hits = torchtpu.kernel_cache_stats()["fast_hits"]
    again = torch.special.erfcx(x).cpu()
    assert dispatch.stats["compiles"] == compiles + 1  # rebuilt (from disk when the cache is on)
    torch.special.erfcx(x)
    assert torchtpu.kernel_cache_stats()["fast_hits"] > hits  # and the C++ path caches it again
    torch.testing.assert_close(again, first, rtol=0, atol=0)
    torch.testing.assert_close(first, torch.special.erfcx(torch.linspace(-2, 2, 13)))


def test_in_place_and_donating_kernels_survive_eviction(small_cache):
    """Kernels with a donating variant (in-place writes) evict and rebuild
    like the others; the written tensors keep their values."""
    w = torch.ones(6, 5, device="tpu")
    cpu = torch.ones(6, 5)
    for step in range(3 * LIMIT):
        w.mul_(1.01).add_(step)
        cpu.mul_(1.01).add_(step)
        _new_shapes(1, 4000 + step)
    assert small_cache.evictions > 0
    torch.testing.assert_close(w.cpu(), cpu)


def test_limit_from_env(monkeypatch):
    monkeypatch.delenv("TORCHTPU_KERNEL_CACHE_SIZE", raising=False)
    assert kernel_cache.limit_from_env() == kernel_cache.DEFAULT_LIMIT
    monkeypatch.setenv("TORCHTPU_KERNEL_CACHE_SIZE", "300")
    assert kernel_cache.limit_from_env() == 300
    monkeypatch.setenv("TORCHTPU_KERNEL_CACHE_SIZE", "1")
    assert kernel_cache.limit_from_env() == kernel_cache.MIN_LIMIT
    monkeypatch.setenv("TORCHTPU_KERNEL_CACHE_SIZE", "lots")
    with pytest.raises(ValueError, match="TORCHTPU_KERNEL_CACHE_SIZE"):
        kernel_cache.limit_from_env()
