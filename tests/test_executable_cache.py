"""The on-disk executable cache (runtime/executable_cache.py): a second
process loads eager kernels from disk without tracing, gets the same
results (device-side checks included), and keys never alias."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from torchtpu.runtime import executable_cache as ec

_EAGER_SCRIPT = textwrap.dedent(
    """
    import torch, torchtpu
    from torchtpu.runtime import executable_cache as ec
    x = torch.arange(12.0, device="tpu").reshape(3, 4)
    out = [(x.t() @ x).sum().item(), (x * 2.5).sum().item(), (x * -0.0).sum().item()]
    out += [str(torch.arange(3, device="tpu").dtype), str(torch.arange(3.0, device="tpu").dtype)]
    out += [torch.full((2,), -0.0, device="tpu").cpu().tolist()[0].hex()]
    try:  # a kernel with a device-side check: the check table comes from disk too
        loss = torch.nn.functional.nll_loss(torch.zeros(2, 3, device="tpu"), torch.tensor([0, 5], device="tpu"))
        loss.item()
        out.append("no error")
    except IndexError as e:
        out.append(str(e).split(" (")[0])
    print("RESULT", out)
    print("STATS", ec.stats["hits"], ec.stats["misses"])
    """
)


def _run(cache_dir):
    env = dict(os.environ, TORCHTPU_COMPILE_CACHE_DIR=str(cache_dir))
    out = subprocess.run([sys.executable, "-c", _EAGER_SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    result = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT")]
    stats = [ln for ln in out.stdout.splitlines() if ln.startswith("STATS")]
    assert result and stats, out.stderr[-3000:]
    hits, misses = (int(v) for v in stats[0].split()[1:])
    return result[0], hits, misses


def _expected():
    x = torch.arange(12.0).reshape(3, 4)
    return "RESULT " + str([
        (x.t() @ x).sum().item(), (x * 2.5).sum().item(), (x * -0.0).sum().item(),
        "torch.int64", "torch.float32", (-0.0).hex(), "Target 5 is out of bounds.",
    ])


def test_second_process_loads_eager_kernels_from_disk(tmp_path):
    first, hits1, misses1 = _run(tmp_path / "cache")
    second, hits2, misses2 = _run(tmp_path / "cache")
    assert first == second == _expected()
    assert hits1 == 0 and misses1 > 0
    assert misses2 == 0 and hits2 == misses1  # every kernel of the second process came from disk


def test_unreadable_entries_are_recompiled(tmp_path):
    _run(tmp_path / "cache")
    files = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path / "cache") for f in fs]
    assert files
    for path in files:
        with open(path, "wb") as f:
            f.write(b"not an executable")
    result, hits, misses = _run(tmp_path / "cache")
    assert result == _expected()
    assert hits == 0 and misses > 0


def _digest(key, args=(), extra=()):
    return ec._digest("kernel", key, list(args), extra)


def test_keys_are_typed_and_exact():
    # Equal in Python, different kernels: each gets its own entry.
    assert len({_digest((3,)), _digest((3.0,)), _digest((True,))}) == 3
    assert _digest((0.0,)) != _digest((-0.0,))
    assert _digest((torch.float32,)) != _digest((torch.float16,))
    assert _digest((torch.ops.aten.add.Tensor,)) != _digest((torch.ops.aten.add.Scalar,))
    # Argument types are part of the key: a weakly typed Python float is not an f32 array.
    import numpy as np

    assert _digest((), [1.0]) != _digest((), [np.float32(1.0)])
    assert _digest((), [np.zeros((2, 3), np.float32)]) != _digest((), [np.zeros((3, 2), np.float32)])


def test_objects_without_a_stable_encoding_are_not_cached():
    class Opaque:
        pass

    with pytest.raises(ec._Unstable):
        _digest((Opaque(),))
    before = ec.stats["uncacheable"]
    import jax

    entry = ec.Entry("kernel", (Opaque(),), [], jax.devices()[0])
    assert entry.path is None and entry.load() is None
    assert ec.stats["uncacheable"] == before + 1


def test_lowerings_registered_outside_torchtpu_are_not_cached():
    # The salt hashes torchtpu's own sources only: a kernel whose lowering
    # lives elsewhere could change without its key changing.
    from torchtpu.ops.lowerings import core

    def external_lowering(ctx, x):
        return x

    assert ec.covers(core.copy)
    assert not ec.covers(external_lowering)
    with pytest.raises(ec._Unstable):
        _digest((ec.UNCACHEABLE,))


def test_linear_algebra_loaded_from_disk_runs(tmp_path):
    # jaxlib sets LAPACK up while lowering a linalg op; a process that loads
    # the executable instead must set it up itself (this segfaulted).
    script = textwrap.dedent(
        """
        import torch, torchtpu
        a = torch.randn(5, 5, generator=torch.Generator().manual_seed(0))
        a = a @ a.T + 5 * torch.eye(5)
        out = torch.linalg.cholesky(a.to("tpu")).cpu()
        print("ERR", (out - torch.linalg.cholesky(a)).abs().max().item())
        """
    )
    env = dict(os.environ, TORCHTPU_COMPILE_CACHE_DIR=str(tmp_path / "cache"))
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, f"exit {out.returncode}: {out.stderr[-2000:]}"
        err = [float(ln.split()[1]) for ln in out.stdout.splitlines() if ln.startswith("ERR")]
        assert err and err[0] < 1e-5


def test_only_executables_calling_jaxlib_kernels_set_the_runtime_up():
    # Setting LAPACK up costs ~0.2 s of every warm process; an executable
    # without jaxlib kernels is loaded without it.
    import jax
    import jax.numpy as jnp

    matrix = jax.ShapeDtypeStruct((3, 3), jnp.float32)
    assert not ec._needs_runtime(jax.jit(lambda m: m @ m + 1).lower(matrix))
    assert ec._needs_runtime(jax.jit(jnp.linalg.cholesky).lower(matrix))


def test_in_place_op_compiles_only_its_donating_executable():
    """An in-place op donates the box's buffer from its first call (Python
    path) on, so its later calls (C++ path) compile nothing new; the plain
    executable is built only once a buffer is shared."""
    from torchtpu.ops import dispatch
    from torchtpu.runtime import boxes

    x = torch.ones(771, device="tpu")
    for _ in range(3):
        x.add_(1)
    (kernel,) = [k for key, k in dispatch._cache.items()
                 if key[0] is torch.ops.aten.add_.Tensor and key[1][0] == (771,)]
    donating, _ = kernel.donating
    assert donating.compiled is not None and kernel.jitted.compiled is None

    held = boxes.boxes[x.data_ptr()][0]  # a second holder of the buffer
    x.add_(1)
    assert not held.is_deleted() and held[0] == 4
    assert kernel.jitted.compiled is not None
    assert x.cpu().tolist() == [5.0] * 771


def test_compiles_pause_the_garbage_collector_and_restore_its_state():
    import gc

    from torchtpu.runtime.gc_pause import gc_paused

    seen = []
    for enabled in (True, False):
        (gc.enable if enabled else gc.disable)()
        try:
            with gc_paused():
                seen.append(gc.isenabled())
            assert gc.isenabled() is enabled
            with pytest.raises(ValueError), gc_paused():
                raise ValueError("a failed compile")
            assert gc.isenabled() is enabled
        finally:
            gc.enable()
    assert seen == [False, False]
