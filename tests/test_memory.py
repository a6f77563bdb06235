"""The caching allocator and CUDA's memory API on `tpu` (csrc/allocator.cpp,
torchtpu/memory.py): statistics with CUDA's keys and arithmetic, the summary
printout, snapshots in CUDA's schema, block reuse, the per-process fraction and
OutOfMemoryError, leaks over a long training run, and thread safety."""

import gc
import json
import os
import pickle
import subprocess
import sys
import textwrap
import threading
import warnings

import pytest
import torch
from torch.cuda import _memory_viz

import torchtpu
from torchtpu.models import MLP
from torchtpu.runtime import boxes

KiB = 1 << 10
MiB = 1 << 20
TPU = torch.device("tpu", 0)

STAT_ARRAYS = [
    "allocation",
    "segment",
    "active",
    "inactive_split",
    "allocated_bytes",
    "reserved_bytes",
    "active_bytes",
    "inactive_split_bytes",
    "requested_bytes",
]
METRICS = ["current", "peak", "allocated", "freed"]
COUNTERS = [
    "num_alloc_retries",
    "num_ooms",
    "max_split_size",
    "num_sync_all_streams",
    "num_device_alloc",
    "num_device_free",
    "num_oom_rejections",
]


def _cuda_key_set():
    keys = {f"{a}.{p}.{m}" for a in STAT_ARRAYS for p in ("all", "small_pool", "large_pool") for m in METRICS}
    keys |= {f"{s}.{m}" for s in ("oversize_allocations", "oversize_segments") for m in METRICS}
    return keys | set(COUNTERS)


@pytest.fixture(autouse=True)
def _unlimited():
    yield
    for i in range(torch.tpu.device_count()):
        torch.tpu.set_per_process_memory_fraction(1.0, i)
    torch.tpu.memory._record_memory_history(None)


def _settle():
    """Drop the boxes of dead storages and release their blocks."""
    gc.collect()
    boxes.drain()


def _run_script(code, **env):
    full_env = dict(os.environ, TORCHTPU_PLATFORM="cpu", TORCHTPU_NUM_DEVICES="1", **env)
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300, env=full_env
    )
    assert out.returncode == 0, out.stderr[-4000:]
    return out.stdout


# ------------------------------------------------------------- key set


def test_memory_stats_has_cudas_key_set():
    x = torch.ones(1000, device=TPU)
    stats = torch.tpu.memory_stats()
    assert set(stats) == _cuda_key_set()
    assert list(stats) == sorted(stats)  # CUDA's flattening: sorted keys
    assert all(isinstance(v, int) for v in stats.values())
    assert stats["max_split_size"] == -1  # CUDA's default (no limit)
    nested = torch.tpu.memory_stats_as_nested_dict()
    assert nested["allocated_bytes"]["all"]["current"] == stats["allocated_bytes.all.current"]
    # The same numbers through torch.accelerator (the registered DeviceAllocator),
    # which flattens everything but num_oom_rejections.
    acc = torch.accelerator.memory_stats()
    assert set(acc) == _cuda_key_set() - {"num_oom_rejections"}
    assert all(acc[k] == stats[k] for k in acc)
    del x


def test_memory_api_rejects_a_device_that_does_not_exist():
    # (read as an empty device before; CUDA's allocator raises too)
    count = torch.tpu.device_count()
    for query in (torch.tpu.memory_allocated, torch.tpu.memory_reserved, torch.tpu.memory_stats):
        with pytest.raises(RuntimeError, match=f"Invalid device argument {count}"):
            query(count)
        query(count - 1)


def test_accelerator_api_agrees():
    x = torch.ones(3 * MiB // 4, device=TPU)
    assert torch.accelerator.memory_allocated() == torch.tpu.memory_allocated() >= 3 * MiB
    assert torch.accelerator.memory_reserved() == torch.tpu.memory_reserved()
    assert torch.accelerator.max_memory_allocated() == torch.tpu.max_memory_allocated()
    assert torch.accelerator.max_memory_reserved() == torch.tpu.max_memory_reserved()
    assert torch.tpu.mem_get_info() == torch.accelerator.get_memory_info()
    free, total = torch.tpu.mem_get_info()
    # JAX on the CPU reports no device memory: the stand-in capacity (host
    # RAM) minus what this process has reserved.
    assert total == torch.tpu.physical_memory_stats()["bytes_limit"]
    assert free == total - torch.tpu.memory_reserved()
    assert torch.tpu.device_memory_used() == torch.tpu.memory_reserved()
    reserved = torch.tpu.memory_reserved()
    del x  # its buffer is dropped by the empty_cache below (no op ran since)
    torch.accelerator.empty_cache()
    assert torch.tpu.memory_reserved() <= reserved - 4 * MiB
    torch.accelerator.reset_peak_memory_stats()
    assert torch.tpu.max_memory_allocated() == torch.tpu.memory_allocated()
    assert torch.tpu.max_memory_reserved() == torch.tpu.memory_reserved()
    torch.accelerator.reset_accumulated_memory_stats()
    assert torch.tpu.memory_stats()["num_device_alloc"] == 0


def test_platform_memory_numbers(monkeypatch):
    """Where the platform reports memory (TPU/GPU: jax.Device.memory_stats()),
    its limit becomes the allocator's capacity and mem_get_info reports its
    numbers (faked here: JAX on the CPU reports none)."""

    class FakeDevice:
        def memory_stats(self):
            return {"bytes_in_use": 3 * MiB, "peak_bytes_in_use": 5 * MiB, "bytes_limit": 64 * MiB}

    monkeypatch.setattr(torchtpu.memory, "_jax_memory_stats", lambda index: FakeDevice().memory_stats())
    torchtpu.memory._runtime_started([FakeDevice()])
    try:
        assert torch.tpu.mem_get_info() == torch.accelerator.get_memory_info() == (61 * MiB, 64 * MiB)
        assert torch.tpu.physical_memory_stats()["peak_bytes_in_use"] == 5 * MiB
        assert torch.tpu.device_memory_used() == 3 * MiB
        torch.tpu.set_per_process_memory_fraction(0.5)  # of the 64 MiB limit
        _settle()
        torch.tpu.empty_cache()
        with pytest.raises(torch.OutOfMemoryError, match="total capacity of 64.00 MiB"):
            torch.empty(40 * MiB, dtype=torch.uint8, device=TPU)
    finally:
        torchtpu._C._set_device_capacity(0, 0)  # back to the default stand-in
    monkeypatch.undo()
    assert torch.tpu.mem_get_info()[1] == torchtpu._C._host_physical_memory()


def test_torch_tpu_memory_module():
    assert torch.tpu.memory is torchtpu.memory
    for name in ("_record_memory_history", "_snapshot", "_dump_snapshot", "memory_snapshot", "memory_summary"):
        assert callable(getattr(torch.tpu.memory, name)) and callable(getattr(torch.tpu, name))
    assert torch.tpu.get_allocator_backend() == "native"


# ---------------------------------------------------------- arithmetic

_ARITHMETIC = """
    import json, torch, torchtpu
    from torchtpu.runtime import boxes
    MiB = 1 << 20
    out = {}
    def snap(name):
        out[name] = dict(torch.tpu.memory_stats())
    a = torch.empty(1000, device="tpu")                    # 4000 B -> 4 KiB block, 2 MiB small segment
    snap("alloc_small")
    v = a.view(10, 100)
    a.add_(1); v.mul_(3); a.fill_(2.0)                      # views, in-place writes: no allocation
    boxes.drain()
    snap("view_inplace")
    b = torch.empty(3 * MiB, dtype=torch.uint8, device="tpu")     # large: 20 MiB segment, split
    snap("alloc_3m")
    c = torch.empty(12 * MiB, dtype=torch.uint8, device="tpu")    # reuses the 17 MiB rest, split again
    snap("alloc_12m")
    d = torch.empty(6 * MiB, dtype=torch.uint8, device="tpu")     # 5 MiB rest too small: new segment
    snap("alloc_6m")
    del b
    snap("free_3m_pending")                                 # freed, box not yet dropped
    boxes.drain()
    snap("free_3m")
    del c
    boxes.drain()
    snap("free_12m")                                        # merges both neighbours: a whole free segment
    torch.tpu.empty_cache()
    snap("empty_cache")
    torch.tpu.reset_peak_memory_stats()
    snap("reset_peak")
    del a, v, d
    boxes.drain()
    torch.tpu.empty_cache()
    snap("all_freed")
    torch.tpu.reset_accumulated_memory_stats()
    snap("reset_accumulated")
    assert boxes.live_count() == 0
    try:
        torch.empty(2048 * MiB, dtype=torch.uint8, device="tpu")
    except torch.OutOfMemoryError as e:
        out["oom"] = str(e)
    snap("after_oom")
    print(json.dumps(out))
"""


def _check(stats, expected):
    wrong = {k: (stats[k], v) for k, v in expected.items() if stats[k] != v}
    assert not wrong, f"(got, expected): {wrong}"


def _pool(array, pool, current, peak=None, allocated=None, freed=None):
    out = {f"{array}.{pool}.current": current}
    for metric, value in (("peak", peak), ("allocated", allocated), ("freed", freed)):
        if value is not None:
            out[f"{array}.{pool}.{metric}"] = value
    return out


def test_stats_arithmetic_matches_cuda():
    """A fresh process (so that nothing else is cached), hand-computed with
    CUDA's rules: 512-byte rounding, 2 MiB small segments, 20 MiB segments for
    1-10 MiB requests, splitting when the rest is >= 512 B (small) / > 1 MiB
    (large), merging on free, requested bytes released with the block."""
    out = json.loads(_run_script(_ARITHMETIC, TORCHTPU_DEVICE_MEMORY="1G"))
    s = out["alloc_small"]
    small = 2 * MiB
    _check(
        s,
        {
            **_pool("allocation", "all", 1, 1, 1, 0),
            **_pool("allocation", "small_pool", 1, 1, 1, 0),
            **_pool("allocation", "large_pool", 0, 0, 0, 0),
            **_pool("allocated_bytes", "all", 4096, 4096, 4096, 0),
            **_pool("requested_bytes", "all", 4000, 4000, 4000, 0),
            **_pool("active", "small_pool", 1),
            **_pool("active_bytes", "small_pool", 4096),
            **_pool("segment", "small_pool", 1, 1, 1, 0),
            **_pool("reserved_bytes", "all", small, small, small, 0),
            **_pool("inactive_split", "small_pool", 1),
            **_pool("inactive_split_bytes", "small_pool", small - 4096),
            "num_device_alloc": 1,
            "num_device_free": 0,
            "num_ooms": 0,
        },
    )
    # Views and in-place writes (rebinding the storage's buffer) allocate nothing.
    for key in ("allocation.all.allocated", "allocated_bytes.all.current", "segment.all.current"):
        assert out["view_inplace"][key] == s[key], key

    _check(
        out["alloc_3m"],
        {
            **_pool("allocated_bytes", "large_pool", 3 * MiB),
            **_pool("reserved_bytes", "large_pool", 20 * MiB),
            **_pool("segment", "large_pool", 1),
            **_pool("inactive_split", "large_pool", 1),
            **_pool("inactive_split_bytes", "large_pool", 17 * MiB),
            **_pool("inactive_split_bytes", "all", small - 4096 + 17 * MiB),
        },
    )
    _check(
        out["alloc_12m"],
        {
            **_pool("allocation", "large_pool", 2),
            **_pool("allocated_bytes", "large_pool", 15 * MiB),
            **_pool("reserved_bytes", "large_pool", 20 * MiB),  # no new segment
            **_pool("inactive_split", "large_pool", 1),
            **_pool("inactive_split_bytes", "large_pool", 5 * MiB),
            **_pool("allocated_bytes", "all", 4096 + 15 * MiB, 4096 + 15 * MiB),
            "num_device_alloc": 2,
        },
    )
    _check(
        out["alloc_6m"],
        {
            **_pool("segment", "large_pool", 2),
            **_pool("reserved_bytes", "large_pool", 40 * MiB),
            **_pool("inactive_split", "large_pool", 2),
            **_pool("inactive_split_bytes", "large_pool", 5 * MiB + 14 * MiB),
            **_pool("allocated_bytes", "large_pool", 21 * MiB),
            **_pool("requested_bytes", "large_pool", 21 * MiB),
            "num_device_alloc": 3,
        },
    )
    # free(): no longer allocated, still active until its buffer is dropped.
    _check(
        out["free_3m_pending"],
        {
            **_pool("allocation", "large_pool", 2, 3, 3, 1),
            **_pool("allocated_bytes", "large_pool", 18 * MiB),
            **_pool("active", "large_pool", 3),
            **_pool("active_bytes", "large_pool", 21 * MiB),
            **_pool("requested_bytes", "large_pool", 21 * MiB),
            **_pool("inactive_split", "large_pool", 2),
        },
    )
    _check(
        out["free_3m"],
        {
            **_pool("active", "large_pool", 2),
            **_pool("active_bytes", "large_pool", 18 * MiB),
            **_pool("requested_bytes", "large_pool", 18 * MiB),
            **_pool("inactive_split", "large_pool", 3),
            **_pool("inactive_split_bytes", "large_pool", 22 * MiB),
        },
    )
    _check(
        out["free_12m"],
        {
            **_pool("active", "large_pool", 1),
            **_pool("active_bytes", "large_pool", 6 * MiB),
            **_pool("inactive_split", "large_pool", 1, 3),
            **_pool("inactive_split_bytes", "large_pool", 14 * MiB),
            **_pool("reserved_bytes", "large_pool", 40 * MiB),
        },
    )
    _check(
        out["empty_cache"],
        {
            **_pool("segment", "large_pool", 1, 2, 2, 1),
            **_pool("reserved_bytes", "large_pool", 20 * MiB, 40 * MiB, 40 * MiB, 20 * MiB),
            **_pool("reserved_bytes", "small_pool", small),  # holds a live block
            "num_device_free": 1,
        },
    )
    r = out["reset_peak"]
    assert all(r[f"{a}.{p}.peak"] == r[f"{a}.{p}.current"] for a in STAT_ARRAYS for p in ("all", "small_pool"))
    assert r["allocated_bytes.all.peak"] == 4096 + 6 * MiB
    assert r["allocated_bytes.all.allocated"] == out["empty_cache"]["allocated_bytes.all.allocated"]
    f = out["all_freed"]
    assert all(f[f"{a}.{p}.current"] == 0 for a in STAT_ARRAYS for p in ("all", "small_pool", "large_pool"))
    _check(f, {"num_device_alloc": 3, "num_device_free": 3, **_pool("segment", "all", 0, 2, 3, 3)})
    # allocated - freed == current, for every statistic
    for a in STAT_ARRAYS:
        for p in ("all", "small_pool", "large_pool"):
            assert f[f"{a}.{p}.allocated"] - f[f"{a}.{p}.freed"] == f[f"{a}.{p}.current"]
    z = out["reset_accumulated"]
    assert all(z[f"{a}.{p}.{m}"] == 0 for a in STAT_ARRAYS for p in ("all", "small_pool", "large_pool") for m in ("allocated", "freed"))
    assert z["num_device_alloc"] == z["num_device_free"] == 0
    # TORCHTPU_DEVICE_MEMORY=1G: the capacity; 2 GiB cannot fit, even after a flush.
    assert "Tried to allocate 2.00 GiB" in out["oom"] and "total capacity of 1024.00 MiB" in out["oom"]
    _check(out["after_oom"], {"num_ooms": 1, "num_alloc_retries": 1, "segment.all.current": 0})


# ------------------------------------------------------------- summary


def test_memory_summary_prints():
    x = torch.ones(1000, device=TPU)
    text = torch.tpu.memory_summary()
    lines = text.splitlines()
    assert "PyTorch TPU memory summary, device ID 0" in text
    assert "TPU OOMs" in text and "CUDA" not in text and "GPU" not in text
    for row in ("Allocated memory", "Active memory", "Requested memory", "TPU reserved memory", "Non-releasable memory",
                "Allocations", "Active allocs", "TPU reserved segments", "Non-releasable allocs", "from large pool",
                "Oversize allocations"):
        assert row in text, row
    assert all(len(line) == 77 for line in lines), {len(line) for line in lines}  # PyTorch's 75-wide table
    short = torch.tpu.memory_summary(abbreviated=True)
    assert "from large pool" not in short and len(short.splitlines()) < len(lines)
    # The fallback formatter (should PyTorch's ever be unusable) prints the same rows.
    own = torchtpu.memory._own_summary(None, False)
    assert "PyTorch TPU memory summary" in own and "Non-releasable allocs" in own
    del x


# ------------------------------------------------------------ snapshot


def test_snapshot_pickle_round_trip(tmp_path):
    _settle()
    torch.tpu.memory._record_memory_history(stacks="python", max_entries=100000)
    try:
        keep = torch.ones(3000, device=TPU)  # a live, written block

        def make_and_drop():
            gone = torch.ones(5000, device=TPU)
            gone_ptr = gone.untyped_storage().data_ptr()
            del gone
            return gone_ptr

        gone_ptr = make_and_drop()
        _settle()
        pending = torch.ones(700, device=TPU)
        pending_ptr = pending.untyped_storage().data_ptr()
        del pending  # freed, its buffer not yet dropped: active_pending_free
        path = tmp_path / "snapshot.pickle"
        torch.tpu.memory._dump_snapshot(str(path))
    finally:
        torch.tpu.memory._record_memory_history(None)
    with open(path, "rb") as f:
        snap = pickle.load(f)
    assert set(snap) == {"segments", "device_traces", "allocator_settings"}
    blocks = {}
    for seg in snap["segments"]:
        assert {"device", "address", "total_size", "allocated_size", "active_size", "requested_size", "stream",
                "segment_type", "segment_pool_id", "is_expandable", "frames", "blocks"} <= set(seg)
        assert sum(b["size"] for b in seg["blocks"]) == seg["total_size"]
        assert seg["allocated_size"] == sum(b["size"] for b in seg["blocks"] if b["state"] == "active_allocated")
        assert seg["segment_type"] in ("small", "large")
        address = seg["address"]
        for b in seg["blocks"]:
            assert {"address", "size", "requested_size", "state", "frames"} <= set(b)
            assert b["address"] == address and b["state"] in ("active_allocated", "active_pending_free", "inactive")
            address += b["size"]
            blocks[(seg["device"], b["address"])] = b
    ptr = keep.untyped_storage().data_ptr()
    live = blocks[(0, ptr)]
    assert live["state"] == "active_allocated" and live["requested_size"] == 3000 * 4 and live["size"] == 12288
    assert any(fr["filename"] == __file__ and fr["name"] == "test_snapshot_pickle_round_trip" for fr in live["frames"])
    assert blocks[(0, pending_ptr)]["state"] == "active_pending_free"
    trace = snap["device_traces"][0]
    actions = [(e["action"], e.get("addr")) for e in trace]
    assert ("alloc", ptr) in actions and ("alloc", gone_ptr) in actions
    assert ("free_requested", gone_ptr) in actions and ("free_completed", gone_ptr) in actions
    last = [a for a in actions if a[1] == pending_ptr][-1]
    assert last == ("free_requested", pending_ptr)  # its free has not completed
    assert actions.index(("free_requested", gone_ptr)) < actions.index(("free_completed", gone_ptr))
    assert all(isinstance(e["time_us"], int) and "size" in e and "stream" in e for e in trace)
    alloc = next(e for e in trace if e["action"] == "alloc" and e["addr"] == ptr)
    assert any(fr["name"] == "test_snapshot_pickle_round_trip" for fr in alloc["frames"])
    # PyTorch's own consumers (torch.cuda._memory_viz) read it.
    assert "total_reserved" in _memory_viz.segsum(snap)
    assert "entries" in _memory_viz.trace(snap)
    assert "<html>" in _memory_viz.trace_plot(snap)
    assert torch.tpu.memory_snapshot() and all("blocks" in s for s in torch.tpu.memory_snapshot())
    del keep


def test_record_history_modes():
    torch.tpu.memory._record_memory_history("all", context=None, stacks="python", max_entries=3)
    xs = [torch.empty(100, device=TPU) for _ in range(5)]
    trace = torch.tpu.memory._snapshot()["device_traces"][0]
    assert len(trace) == 3  # a ring of max_entries, oldest dropped
    assert all(e["frames"] == [] for e in trace)  # context=None: no stacks
    torch.tpu.memory._record_memory_history(True, trace_alloc_max_entries=10, clear_history=True)  # legacy form
    assert torch.tpu.memory._snapshot()["device_traces"][0][-1]["action"] == "snapshot"
    with pytest.raises(RuntimeError, match="expected stacks"):
        torch.tpu.memory._record_memory_history("all", stacks="cpp")
    with pytest.raises(RuntimeError, match="skip_actions"):
        torch.tpu.memory._record_memory_history("all", skip_actions=["nope"])
    del xs


# --------------------------------------------------------------- reuse


@pytest.mark.parametrize("numel", [1000, 75 * KiB, 768 * KiB, 3 * MiB])
def test_alloc_free_loop_keeps_reserved_flat(numel):
    x = torch.ones(numel, device=TPU)
    y = x * 2 + 1  # the loop's pattern: three blocks live at once
    del x, y
    _settle()
    reserved = torch.tpu.memory_reserved()
    segments = torch.tpu.memory_stats()["num_device_alloc"]
    for _ in range(200 if numel < MiB else 40):
        x = torch.ones(numel, device=TPU)
        y = x * 2 + 1
        del x, y
    _settle()
    assert torch.tpu.memory_reserved() == reserved
    assert torch.tpu.memory_stats()["num_device_alloc"] == segments


def test_empty_only_loop_reuses_after_drain():
    """Frees take effect once Python has dropped the storages' buffers (before
    the next op): a loop of bare allocations reuses blocks after each drain."""
    t = torch.empty(300 * KiB, device=TPU)
    del t
    _settle()
    reserved = torch.tpu.memory_reserved()
    for _ in range(100):
        t = torch.empty(300 * KiB, device=TPU)
        del t
        boxes.drain()
    assert torch.tpu.memory_reserved() == reserved


def test_resize_and_inplace_keep_accounting_per_storage():
    _settle()
    base = torch.tpu.memory_stats()
    x = torch.zeros(100, device=TPU)
    for _ in range(10):
        x.add_(1)  # rebinding the storage's buffer: no new storage
        x.copy_(x * 2)
    _settle()
    mid = torch.tpu.memory_stats()
    assert mid["allocation.all.current"] == base["allocation.all.current"] + 1
    assert mid["allocated_bytes.all.current"] == base["allocated_bytes.all.current"] + 512
    x.resize_(1000)  # a new block (4 KiB), the old one freed
    assert x[:100].cpu().eq(2046).all()  # (x + 1) * 2, ten times
    _settle()
    after = torch.tpu.memory_stats()
    assert after["allocation.all.current"] == base["allocation.all.current"] + 1
    assert after["allocated_bytes.all.current"] == base["allocated_bytes.all.current"] + 4096
    del x
    _settle()
    assert torch.tpu.memory_allocated() == base["allocated_bytes.all.current"]


# ----------------------------------------------------------------- OOM


def test_out_of_memory_with_fraction():
    _settle()
    torch.tpu.empty_cache()
    before = torch.tpu.memory_stats()
    live = boxes.live_count()
    total = torch.tpu.mem_get_info()[1]
    torch.tpu.set_per_process_memory_fraction((torch.tpu.memory_reserved() + 64 * MiB) / total)
    assert torch.tpu.get_per_process_memory_fraction() < 1.0

    with pytest.raises(torch.OutOfMemoryError) as info:
        torch.empty(256 * MiB, dtype=torch.uint8, device=TPU)
    msg = str(info.value)
    assert msg.startswith("TPU out of memory. Tried to allocate 256.00 MiB. TPU 0 has a total capacity of")
    for part in ("is free", "allowed", "is allocated by PyTorch", "is reserved by PyTorch but unallocated",
                 "empty_cache", "set_per_process_memory_fraction"):
        assert part in msg, part
    stats = torch.tpu.memory_stats()
    assert stats["num_ooms"] == before["num_ooms"] + 1
    assert stats["num_alloc_retries"] == before["num_alloc_retries"] + 1

    # The process stays usable: allocations and ops within the limit work ...
    a = torch.ones(10 * MiB, dtype=torch.uint8, device=TPU)
    b = (a + 1).sum()
    assert b.item() == 20 * MiB
    big = torch.ones(40 * MiB, dtype=torch.uint8, device=TPU)
    # ... and an op whose output does not fit raises the same error.
    with pytest.raises(torch.OutOfMemoryError):
        big + 1
    assert torch.tpu.memory_stats()["num_ooms"] == before["num_ooms"] + 2
    del a, b, big
    _settle()
    # Nothing leaked.
    assert torch.tpu.memory_allocated() == before["allocated_bytes.all.current"]
    assert torch.tpu.memory_stats()["allocation.all.current"] == before["allocation.all.current"]
    assert boxes.live_count() == live
    torch.tpu.set_per_process_memory_fraction(1.0)
    x = torch.empty(256 * MiB, dtype=torch.uint8, device=TPU)
    del x


def test_fraction_argument_checks():
    with pytest.raises(TypeError):
        torch.tpu.set_per_process_memory_fraction(1)
    with pytest.raises(ValueError):
        torch.tpu.set_per_process_memory_fraction(1.5)
    torch.tpu.set_per_process_memory_fraction(0.5, 1)
    assert torch.tpu.get_per_process_memory_fraction(1) == 0.5
    assert torch.tpu.get_per_process_memory_fraction(0) == 1.0


# --------------------------------------------------------------- leaks


def _rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _is_traced(t):
    """A FakeTensor or FunctionalTensor kept by a compiled graph's metadata:
    no device memory behind it."""
    from torch._subclasses.fake_tensor import FakeTensor
    from torch._subclasses.functional_tensor import FunctionalTensor

    return isinstance(t, (FakeTensor, FunctionalTensor))


def _live_tpu_storages():
    """(device, address) of every tpu storage reachable from Python."""
    found = set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # isinstance() on deprecated module proxies warns
        for obj in gc.get_objects():
            if isinstance(obj, torch.Tensor) and obj.device.type == "tpu" and not _is_traced(obj):
                storage = obj.untyped_storage()
                if storage.nbytes() > 0:
                    found.add((obj.device.index, storage.data_ptr()))
    return found


def _unreachable_counts():
    """(blocks without a Python-reachable storage, boxes without one): both
    0 unless something outside this test keeps storages alive from C++."""
    live = _live_tpu_storages()
    allocations = sum(torch.tpu.memory_stats(i)["allocation.all.current"] for i in range(torch.tpu.device_count()))
    with_box = {address for _, address in live if boxes.get(address) is not None}
    return allocations - len(live), boxes.live_count() - len(with_box)


def test_training_does_not_leak():
    _settle()
    baseline = _unreachable_counts()
    torch.manual_seed(0)
    model = MLP().to(TPU)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(16, 32, device=TPU)
    y = torch.randint(0, 10, (16,), device=TPU)

    def step():
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    for _ in range(100):
        step()
    _settle()
    steady = torch.tpu.memory_allocated()
    reserved = torch.tpu.memory_reserved()
    torch.tpu.reset_peak_memory_stats()
    rss = _rss_bytes()
    for _ in range(1900):
        loss = step()
    loss.item()
    del loss
    _settle()
    assert torch.tpu.memory_allocated() == steady
    assert torch.tpu.memory_reserved() == reserved
    assert torch.tpu.max_memory_reserved() == reserved  # reuse, never a new segment
    growth = _rss_bytes() - rss
    assert growth < 64 * MiB, f"RSS grew by {growth / MiB:.1f} MiB over 1900 steps"
    # Every live storage has exactly one block and at most one box; no block
    # and no box outlives its storage.
    assert _unreachable_counts() == baseline
    stats = [torch.tpu.memory_stats(i) for i in range(torch.tpu.device_count())]
    assert sum(s["active.all.current"] for s in stats) == sum(s["allocation.all.current"] for s in stats)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    assert all(boxes.get(address) is not None for address in params)


# ------------------------------------------------------------- threads


SIZES = [100, 3000, 70 * KiB, 600 * KiB, 3 * MiB // 4, 5 * MiB // 4]


def test_threads_keep_exact_stats():
    """8 Python threads allocating and freeing, and autograd's backward
    thread (the tpu device thread) freeing and allocating at the same time."""
    model = MLP().to(TPU)
    x = torch.randn(16, 32, device=TPU)

    def train_step():
        model(x).square().mean().backward()

    train_step()  # warm the kernel caches
    model.zero_grad(set_to_none=True)
    _settle()
    # What one step allocates (deterministic with warm caches).
    s0 = torch.tpu.memory_stats()
    train_step()
    model.zero_grad(set_to_none=True)
    _settle()
    s1 = torch.tpu.memory_stats()
    per_step = s1["allocation.all.allocated"] - s0["allocation.all.allocated"]
    # Requested bytes are exact whatever the cache holds (a block reused
    # whole may be larger than the rounded request, as in CUDA).
    per_step_bytes = s1["requested_bytes.all.allocated"] - s0["requested_bytes.all.allocated"]
    assert per_step > 0 and s1["allocation.all.current"] == s0["allocation.all.current"]

    n_threads, n_iter, n_steps = 8, 150, 40
    errors = []
    start = threading.Barrier(n_threads + 1)

    def worker(k):
        try:
            start.wait()
            for i in range(n_iter):
                a = torch.empty(SIZES[(i + k) % len(SIZES)], dtype=torch.uint8, device=TPU)
                b = torch.empty(SIZES[(i * 7 + k) % len(SIZES)], dtype=torch.uint8, device=TPU)
                del a
                del b
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    def trainer():
        try:
            start.wait()
            for _ in range(n_steps):
                train_step()
                model.zero_grad(set_to_none=True)
        except Exception as e:  # pragma: no cover
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(n_threads)]
    threads.append(threading.Thread(target=trainer))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    _settle()
    s2 = torch.tpu.memory_stats()
    expected_count = n_steps * per_step + n_threads * n_iter * 2
    expected_bytes = n_steps * per_step_bytes + sum(
        SIZES[(i + k) % len(SIZES)] + SIZES[(i * 7 + k) % len(SIZES)] for k in range(n_threads) for i in range(n_iter)
    )
    assert s2["allocation.all.allocated"] - s1["allocation.all.allocated"] == expected_count
    assert s2["requested_bytes.all.allocated"] - s1["requested_bytes.all.allocated"] == expected_bytes
    for key in ("allocation", "allocated_bytes", "active", "active_bytes", "requested_bytes"):
        for pool in ("all", "small_pool", "large_pool"):
            assert s2[f"{key}.{pool}.current"] == s1[f"{key}.{pool}.current"], (key, pool)
    for a in STAT_ARRAYS:
        for p in ("all", "small_pool", "large_pool"):
            up = s2[f"{a}.{p}.allocated"] - s1[f"{a}.{p}.allocated"]
            down = s2[f"{a}.{p}.freed"] - s1[f"{a}.{p}.freed"]
            assert up - down == s2[f"{a}.{p}.current"] - s1[f"{a}.{p}.current"], (a, p)
    assert s2["num_ooms"] == s1["num_ooms"]
