"""The device contract beyond basic tensors (issue 6), checked the way PyTorch
checks CUDA: multi-device, streams and events, RNG state, autocast and
GradScaler, serialization, torch.accelerator, pinned memory and device
properties.  (Basics -- transfers, mismatch errors, launch blocking -- are in
test_device.py.)"""

import io
import os
import subprocess
import sys
import textwrap
import time

import pytest
import torch
import torch.nn.functional as F

import torchtpu
from torchtpu.ops.transfer import materialize

TPU_TYPE = 20  # c10::DeviceType::PrivateUse1


def _run_with_devices(n, code, timeout=600):
    """Run `code` in a fresh interpreter with TORCHTPU_NUM_DEVICES=n; it must
    print OK as its last line."""
    env = dict(os.environ, TORCHTPU_PLATFORM="cpu", TORCHTPU_NUM_DEVICES=str(n))
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True, timeout=timeout
    )
    lines = out.stdout.strip().splitlines()
    assert lines and lines[-1] == "OK", out.stdout + out.stderr


# =================================================================== devices


def test_accelerator_end_to_end():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("tpu")
    assert torch.accelerator.device_count() == torch.tpu.device_count() == 2
    assert torch.accelerator.current_device_index() == 0
    torch.accelerator.set_device_index(1)
    try:
        assert torch.tpu.current_device() == 1
        assert torch.empty(2, device="tpu").device == torch.device("tpu", 1)
        assert torch.accelerator.current_stream().device == torch.device("tpu", 1)
    finally:
        torch.accelerator.set_device_index(0)
    with torch.accelerator.device_index(1):
        assert torch.ones(1, device="tpu").device.index == 1
    assert torch.tpu.current_device() == 0
    caps = torch.accelerator.get_device_capability(0)["supported_dtypes"]
    assert {torch.float32, torch.bfloat16, torch.int64, torch.bool} <= caps
    assert torch.qint8 not in caps


def test_accelerator_memory_is_wired_to_the_allocator():
    torch.accelerator.synchronize()
    before = torch.accelerator.memory_allocated(0)
    assert before == torch.tpu.memory_allocated(0)
    x = torch.empty(1 << 20, device="tpu:0")  # 4 MiB
    assert torch.accelerator.memory_allocated(0) >= before + 4 * (1 << 20)
    assert torch.accelerator.max_memory_allocated(0) >= torch.accelerator.memory_allocated(0)
    assert torch.accelerator.memory_reserved(0) >= torch.accelerator.memory_allocated(0)
    stats = torch.accelerator.memory_stats(0)
    assert stats["allocated_bytes.all.current"] == torch.accelerator.memory_allocated(0)
    # tpu:1 is accounted separately
    assert torch.accelerator.memory_allocated(1) == torch.tpu.memory_allocated(1)
    del x
    torch.tpu.synchronize()
    assert torch.accelerator.memory_allocated(0) == before


def test_accelerator_synchronize_waits_for_all_work():
    a = torch.randn(512, 512, device="tpu")
    outs = [a @ a for _ in range(4)]
    torch.accelerator.synchronize()
    assert all(materialize(o).is_ready() for o in outs)
    b = torch.randn(512, 512, device="tpu:1")
    outs = [b @ b for _ in range(4)]
    torch.tpu.synchronize()
    assert all(materialize(o).is_ready() for o in outs)


def test_device_properties():
    import jax

    props = torch.tpu.get_device_properties(0)
    platform = jax.devices()[0].platform
    assert props.platform == platform == "cpu"
    assert props.name == torch.tpu.get_device_name() == torch.tpu.get_device_name(1) == jax.devices()[0].device_kind
    assert props.total_memory > 0
    assert torch.tpu.get_device_capability() == (props.major, props.minor) == (0, 0)
    assert "total_memory" in repr(props)
    assert torch.tpu.get_device_properties("tpu:1").id != props.id
    with pytest.raises(RuntimeError, match="Invalid device ordinal"):
        torch.tpu.get_device_properties(5)
    # (fields CUDA code reads)
    assert props.multi_processor_count >= 1 and props.is_integrated is False
    assert props.uuid != torch.tpu.get_device_properties(1).uuid


def test_factories_follow_current_device_and_cross_device_ops_raise():
    with torch.tpu.device(1):
        x = torch.randn(3, device="tpu")
        y = torch.zeros_like(x)
        assert x.device.index == y.device.index == 1
    z = torch.ones(3, device="tpu")
    assert z.device.index == 0
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.add(x, z)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.mm(x.view(3, 1), z.view(1, 3))


def test_autograd_across_devices():
    x_cpu = torch.randn(4, 3, requires_grad=True)
    w_cpu = torch.randn(3, 2, requires_grad=True)
    x = x_cpu.detach().to("tpu:0").requires_grad_()
    w = w_cpu.detach().to("tpu:1").requires_grad_()
    h = (x * 2).to("tpu:1")  # device-to-device, recorded by autograd
    loss = torch.tanh(h @ w).sum().to("tpu:0") * 3
    loss.backward()
    ref = torch.tanh((x_cpu * 2) @ w_cpu).sum() * 3
    ref.backward()
    assert x.grad.device == torch.device("tpu", 0) and w.grad.device == torch.device("tpu", 1)
    torch.testing.assert_close(x.grad.cpu(), x_cpu.grad)
    torch.testing.assert_close(w.grad.cpu(), w_cpu.grad)


def test_copies_between_devices_land_on_the_target_device():
    from torchtpu.runtime import devices

    src = torch.arange(12.0, device="tpu:1").view(3, 4)
    dst = torch.empty(4, 3, device="tpu:0").t()
    dst.copy_(src)
    assert materialize(dst).devices() == {devices.jax_device(0)}
    assert torch.equal(dst.cpu(), torch.arange(12.0).view(3, 4))
    assert torch.equal(src.t().to("tpu:0").cpu(), torch.arange(12.0).view(3, 4).t())


def test_four_devices_in_one_process():
    _run_with_devices(
        4,
        """
        import torch, torchtpu
        from torchtpu.ops.transfer import materialize
        from torchtpu.runtime import devices
        assert torch.tpu.device_count() == 4 == torch.accelerator.device_count()
        x = torch.arange(8.0, device="tpu:0", requires_grad=True)
        h = x
        for i in (1, 2, 3):
            h = (h * 2).to(f"tpu:{i}")
        assert materialize(h).devices() == {devices.jax_device(3)}
        h.sum().backward()
        assert torch.equal(x.grad.cpu(), torch.full((8,), 8.0))
        # per-device generators
        for i in range(4):
            torch.tpu.set_rng_state(torch.tpu.get_rng_state(0), i)
        vals = [torch.rand(5, device=f"tpu:{i}").cpu() for i in range(4)]
        assert all(torch.equal(v, vals[0]) for v in vals)
        with torch.tpu.device(3):
            torch.tpu.manual_seed(99)
        assert torch.tpu.default_generator(3).initial_seed() == 99
        assert torch.tpu.default_generator(2).initial_seed() != 99
        # streams and events on the last device
        s = torch.tpu.Stream(device=3)
        with torch.tpu.stream(s):
            assert torch.tpu.current_device() == 3
            e = torch.tpu.Event()
            y = torch.randn(64, 64, device="tpu") @ torch.randn(64, 64, device="tpu")
            e.record()
        e.synchronize()
        assert e.query() and y.device.index == 3
        # a checkpoint from tpu:3 restored onto tpu:1 through a dict map_location
        import io
        buf = io.BytesIO()
        torch.save({"y": y}, buf)
        buf.seek(0)
        back = torch.load(buf, map_location={"tpu:3": "tpu:1"})
        assert back["y"].device == torch.device("tpu", 1) and torch.equal(back["y"].cpu(), y.cpu())
        print("OK")
        """,
    )


# =========================================================== streams/events


def _on_cpu_platform():
    return torch.tpu.get_device_properties(0).platform == "cpu"


def test_streams_are_distinct_labels_per_device():
    s1 = torch.Stream(device="tpu")
    s2 = torch.tpu.Stream()
    assert s1.device == s2.device == torch.device("tpu", 0)
    assert s1 != s2 and s1.stream_id != 0 and s2.stream_id != 0
    assert isinstance(s2, torch.Stream)
    s3 = torch.tpu.Stream(device="tpu:1", priority=-1)
    assert s3.device_index == 1 and s3.priority == -1 and s2.priority == 0
    least, greatest = torch.tpu.Stream.priority_range()
    assert least == 0 and greatest < 0
    assert torch.tpu.default_stream().stream_id == 0
    assert torch.tpu.current_stream() == torch.tpu.default_stream()
    assert torch.accelerator.current_stream(1) == torch.tpu.default_stream(1)


def test_stream_context_sets_device_and_stream_and_restores():
    s = torch.tpu.Stream(device=1)
    with torch.tpu.stream(s):
        assert torch.tpu.current_device() == 1
        assert torch.tpu.current_stream() == s
        assert torch.accelerator.current_stream() == s
        y = torch.ones(3, device="tpu") * 2  # runs on tpu:1, in order
        assert y.device.index == 1
    assert torch.tpu.current_device() == 0
    assert torch.tpu.current_stream(1) == torch.tpu.default_stream(1)
    s0 = torch.Stream(device="tpu")
    with s0:
        assert torch.accelerator.current_stream() == s0
    assert torch.accelerator.current_stream() == torch.tpu.default_stream()
    torch.tpu.set_stream(s0)
    assert torch.tpu.current_stream() == s0
    torch.tpu.set_stream(torch.tpu.default_stream())
    torch.accelerator.set_stream(s)
    assert torch.tpu.current_device() == 1 and torch.tpu.current_stream() == s
    torch.accelerator.set_stream(torch.tpu.default_stream(1))
    torch.accelerator.set_device_index(0)


def test_current_stream_is_per_thread():
    import threading

    s = torch.tpu.Stream()
    seen = {}
    with torch.tpu.stream(s):

        def other():
            seen["stream"] = torch.tpu.current_stream()

        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert torch.tpu.current_stream() == s
    assert seen["stream"] == torch.tpu.default_stream()


def test_work_on_two_streams_is_ordered_and_correct():
    a = torch.randn(256, 256, device="tpu")
    s1, s2 = torch.tpu.Stream(), torch.tpu.Stream()
    with torch.tpu.stream(s1):
        b = a @ a
        e = s1.record_event()
    s2.wait_event(e)
    with torch.tpu.stream(s2):
        c = b + 1
    s2.wait_stream(s1)
    b.record_stream(s2)  # accepted; buffers outlive the work that uses them
    with pytest.raises(RuntimeError, match="expected a tpu stream"):
        b.record_stream(torch.Stream(device="cpu"))
    s2.synchronize()
    assert s1.query() and s2.query()
    torch.testing.assert_close(c.cpu(), a.cpu() @ a.cpu() + 1, rtol=1e-4, atol=1e-4)


def test_event_query_synchronize_and_wait():
    a = torch.randn(700, 700, device="tpu")
    torch.tpu.synchronize()
    e = torch.tpu.Event()
    assert isinstance(e, torch.Event) and isinstance(e, torch.tpu.Event)
    assert not isinstance(torch.Event(device="cpu"), torch.tpu.Event)
    assert e.query()  # never recorded: complete, as on CUDA
    out = a
    for _ in range(6):
        out = out @ a
    e.record()
    assert e.device == torch.device("tpu", 0)
    pending = e.query()
    e.synchronize()
    assert e.query() and materialize(out).is_ready()
    # recorded after enough device work that it cannot be complete at once
    # (on JAX's CPU platform; a real accelerator may finish it in time)
    if _on_cpu_platform():
        assert pending is False
    e.wait()  # no-op: the device queue is in order
    e.wait(torch.tpu.Stream(device=1))
    # an event recorded on tpu:1 stays there
    e1 = torch.Event(device="tpu")
    e1.record(torch.tpu.current_stream(1))
    assert e1.device == torch.device("tpu", 1)
    e1.synchronize()
    with pytest.raises(RuntimeError, match="does not match recording stream"):
        e1.record(torch.tpu.current_stream(0))


def test_synchronize_completes_recorded_events():
    a = torch.randn(600, 600, device="tpu")
    out = a
    for _ in range(4):
        out = out @ a
    e = torch.tpu.Event()
    e.record()
    torch.tpu.synchronize()
    assert e.query()
    assert torch.tpu.current_stream().query()


def _timed(fn, n=3):
    start = torch.tpu.Event(enable_timing=True)
    end = torch.tpu.Event(enable_timing=True)
    start.record()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    host_ms = (time.perf_counter() - t0) * 1e3
    end.record()
    end.synchronize()
    return start.elapsed_time(end), host_ms


def test_elapsed_time_measures_device_work():
    big = torch.randn(1024, 1024, device="tpu")
    tiny = torch.randn(8, 8, device="tpu")
    for x in (big, tiny):  # compile outside the timed region
        (x @ x @ x).cpu()
    torch.tpu.synchronize()
    big_ms, big_host_ms = _timed(lambda: big @ big @ big)
    tiny_ms, _ = _timed(lambda: tiny @ tiny @ tiny)
    assert big_ms > 0 and tiny_ms >= 0
    assert big_ms > tiny_ms
    # dispatch is asynchronous: on the CPU platform the device takes longer
    # than the host spends submitting the work, and the events measured the
    # device, not the submission
    if _on_cpu_platform():
        assert big_ms > big_host_ms


def _recorded(event):
    event.record()
    return event


def test_an_error_freeing_temporary_events_stays_the_error():
    """The temporaries are freed while the ValueError propagates; the C++
    destroy hook called Python with it pending (a SystemError)."""
    with pytest.raises(ValueError, match="enable_timing=True"):
        _recorded(torch.tpu.Event()).elapsed_time(_recorded(torch.tpu.Event()))


def test_elapsed_time_needs_timing_events():
    a, b = torch.tpu.Event(), torch.tpu.Event()
    a.record()
    b.record()
    b.synchronize()
    with pytest.raises(ValueError, match="enable_timing=True"):
        a.elapsed_time(b)
    c = torch.Event(device="tpu", enable_timing=True)
    d = torch.Event(device="tpu", enable_timing=True)
    with pytest.raises(ValueError, match="recorded"):
        c.elapsed_time(d)
    c.record()
    d.record()
    d.synchronize()
    assert c.elapsed_time(d) >= 0


# ======================================================================= RNG


def test_manual_seed_per_device_and_all():
    torch.manual_seed(1)  # seeds every tpu device, as for CUDA
    a0 = torch.rand(6, device="tpu:0").cpu()
    a1 = torch.rand(6, device="tpu:1").cpu()
    assert torch.equal(a0, a1)  # same seed, same stream of numbers
    torch.tpu.manual_seed(5)  # the current device only
    with torch.tpu.device(1):
        torch.tpu.manual_seed(6)
    assert torch.tpu.default_generator(0).initial_seed() == 5
    assert torch.tpu.default_generator(1).initial_seed() == 6
    b0 = torch.rand(6, device="tpu:0").cpu()
    b1 = torch.rand(6, device="tpu:1").cpu()
    assert not torch.equal(b0, b1)  # different per-device seeds
    torch.tpu.manual_seed_all(7)
    assert [torch.tpu.default_generator(i).initial_seed() for i in range(2)] == [7, 7]
    assert torch.tpu.initial_seed() == 7


def test_seed_is_nondeterministic_and_reported():
    torch.tpu.seed()
    s1 = torch.tpu.initial_seed()
    torch.tpu.seed()
    s2 = torch.tpu.initial_seed()
    assert s1 != s2
    torch.tpu.seed_all()
    assert torch.tpu.default_generator(0).initial_seed() == torch.tpu.default_generator(1).initial_seed()
    s = torch.seed()  # torch's global seed() reseeds the tpu devices too
    assert torch.tpu.initial_seed() == s


def test_rng_state_roundtrip_every_device():
    torch.manual_seed(3)
    torch.rand(10, device="tpu:1")  # advance tpu:1 only
    states = torch.tpu.get_rng_state_all()
    assert len(states) == 2 and all(s.dtype == torch.uint8 and s.device.type == "cpu" for s in states)
    assert not torch.equal(states[0], states[1])
    first = [torch.randn(20, device=f"tpu:{i}").cpu() for i in range(2)]
    torch.tpu.set_rng_state_all(states)
    again = [torch.randn(20, device=f"tpu:{i}").cpu() for i in range(2)]
    assert all(torch.equal(x, y) for x, y in zip(first, again))
    # a state moved to another device reproduces that device's sequence there
    torch.tpu.set_rng_state(states[1], 0)
    assert torch.equal(torch.randn(20, device="tpu:0").cpu(), first[1])
    with pytest.raises(RuntimeError, match="RNG state"):
        torch.tpu.set_rng_state(torch.zeros(3, dtype=torch.uint8))


def test_fork_rng_restores_tpu_state():
    torch.manual_seed(11)
    expected = torch.rand(5, device="tpu").cpu()
    torch.manual_seed(11)
    with torch.random.fork_rng(devices=range(torch.tpu.device_count()), device_type="tpu"):
        torch.manual_seed(999)
        inside = torch.rand(5, device="tpu").cpu()
        torch.rand(100, device="tpu:1")
    after = torch.rand(5, device="tpu").cpu()
    assert torch.equal(after, expected) and not torch.equal(inside, expected)
    # only the listed devices are forked
    torch.manual_seed(12)
    with torch.random.fork_rng(devices=[1], device_type="tpu"):
        torch.rand(5, device="tpu:0")  # tpu:0 is not forked: its state advances
    after = torch.rand(5, device="tpu:0").cpu()
    torch.manual_seed(12)
    torch.rand(5, device="tpu:0")
    assert torch.equal(after, torch.rand(5, device="tpu:0").cpu())


def test_generator_objects():
    g = torch.Generator(device="tpu")
    assert g.device == torch.device("tpu", 0)
    g.manual_seed(21)
    assert g.initial_seed() == 21
    state = g.get_state()
    a = torch.randn(10, device="tpu", generator=g).cpu()
    b = torch.randn(10, device="tpu", generator=g).cpu()
    assert not torch.equal(a, b)
    g.set_state(state)
    assert torch.equal(torch.randn(10, device="tpu", generator=g).cpu(), a)
    # a private generator does not touch the default one
    torch.manual_seed(4)
    ref = torch.rand(4, device="tpu").cpu()
    torch.manual_seed(4)
    torch.rand(4, device="tpu", generator=g)
    assert torch.equal(torch.rand(4, device="tpu").cpu(), ref)
    # other random ops take it too
    g.manual_seed(8)
    p1 = torch.randperm(16, device="tpu", generator=g).cpu()
    m1 = torch.multinomial(torch.ones(10, device="tpu"), 3, generator=g).cpu()
    n1 = torch.empty(6, device="tpu").normal_(generator=g).cpu()
    g.manual_seed(8)
    assert torch.equal(torch.randperm(16, device="tpu", generator=g).cpu(), p1)
    assert torch.equal(torch.multinomial(torch.ones(10, device="tpu"), 3, generator=g).cpu(), m1)
    assert torch.equal(torch.empty(6, device="tpu").normal_(generator=g).cpu(), n1)
    g1 = torch.Generator(device="tpu:1")
    assert g1.device == torch.device("tpu", 1)
    g1.manual_seed(21)
    assert torch.equal(torch.randn(10, device="tpu:1", generator=g1).cpu(), a)
    clone = g.clone_state()
    assert clone.device == g.device and torch.equal(clone.get_state(), g.get_state())


# ================================================================== autocast

LOW = "low"
FP32 = "fp32"


def _mat(*shape):
    return torch.randn(*shape, device="tpu")


# (name, fn, expected output dtype policy) -- CUDA's documented lists
# (https://pytorch.org/docs/stable/amp.html#cuda-ops-that-can-autocast-to-float16
# and #cuda-ops-that-can-autocast-to-float32), inputs in float32 for "low"
# ops and in the low dtype for float32 ops.
AUTOCAST_CASES = [
    ("mm", lambda x: torch.mm(x[0], x[1]), LOW),
    ("matmul", lambda x: x[0] @ x[1], LOW),
    ("bmm", lambda x: torch.bmm(x[0][None], x[1][None]), LOW),
    ("baddbmm", lambda x: torch.baddbmm(x[2][None], x[0][None], x[1][None]), LOW),
    ("addmm", lambda x: torch.addmm(x[2], x[0], x[1]), LOW),
    ("addmv", lambda x: torch.addmv(x[3], x[0], x[3]), LOW),
    ("addr", lambda x: torch.addr(x[2], x[3], x[3]), LOW),
    ("mv", lambda x: torch.mv(x[0], x[3]), LOW),
    ("linear", lambda x: F.linear(x[0], x[1], x[3]), LOW),
    ("einsum", lambda x: torch.einsum("ij,jk->ik", x[0], x[1]), LOW),
    ("conv2d", lambda x: F.conv2d(x[0].view(1, 1, 8, 8), x[1][:3, :3].reshape(1, 1, 3, 3)), LOW),
    ("conv1d", lambda x: F.conv1d(x[0].view(1, 8, 8), x[1][:, :8].reshape(8, 8, 1)), LOW),
    ("prelu", lambda x: F.prelu(x[0], x[3][:1]), LOW),
    ("sdpa", lambda x: F.scaled_dot_product_attention(x[0][None], x[1][None], x[2][None]), LOW),
    ("softmax", lambda x: torch.softmax(x[0], -1), FP32),
    ("log_softmax", lambda x: F.log_softmax(x[0], -1), FP32),
    ("layer_norm", lambda x: F.layer_norm(x[0], (8,)), FP32),
    ("group_norm", lambda x: F.group_norm(x[0].view(2, 4, 8), 2), FP32),
    ("sum", lambda x: x[0].sum(), FP32),
    ("cumsum", lambda x: x[0].cumsum(0), FP32),
    ("prod", lambda x: x[0].prod(1), FP32),
    ("exp", lambda x: torch.exp(x[0]), FP32),
    ("log", lambda x: torch.log(x[0].abs() + 1), FP32),
    ("pow", lambda x: torch.pow(x[0], 2), FP32),
    ("rsqrt", lambda x: torch.rsqrt(x[0].abs() + 1), FP32),
    ("norm", lambda x: torch.norm(x[0]), FP32),
    ("linalg_vector_norm", lambda x: torch.linalg.vector_norm(x[0]), FP32),
    ("mse_loss", lambda x: F.mse_loss(x[0], x[1]), FP32),
    ("l1_loss", lambda x: F.l1_loss(x[0], x[1]), FP32),
    ("smooth_l1_loss", lambda x: F.smooth_l1_loss(x[0], x[1]), FP32),
    ("cross_entropy", lambda x: F.cross_entropy(x[0], torch.arange(8, device="tpu")), FP32),
    ("nll_loss", lambda x: F.nll_loss(x[0], torch.arange(8, device="tpu")), FP32),
    ("bce_with_logits", lambda x: F.binary_cross_entropy_with_logits(x[0], x[1].sigmoid()), FP32),
    ("kl_div", lambda x: F.kl_div(x[0], x[1], reduction="batchmean"), FP32),
    ("cosine_similarity", lambda x: F.cosine_similarity(x[0], x[1]), FP32),
    ("logsumexp", lambda x: torch.logsumexp(x[0], 1), FP32),
    ("softplus", lambda x: F.softplus(x[0]), FP32),
]


@pytest.mark.parametrize("low", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("name,fn,policy", AUTOCAST_CASES, ids=[c[0] for c in AUTOCAST_CASES])
def test_autocast_output_dtypes_match_cuda_lists(name, fn, policy, low):
    base = [_mat(8, 8), _mat(8, 8), _mat(8, 8), _mat(8)]
    inputs = base if policy == LOW else [t.to(low) for t in base]
    with torch.autocast("tpu", dtype=low):
        out = fn(inputs)
    assert out.dtype == (low if policy == LOW else torch.float32), (name, out.dtype)
    # outside autocast the same call keeps the input dtype
    assert fn(inputs).dtype == inputs[0].dtype


@pytest.mark.parametrize("low", [torch.bfloat16, torch.float16], ids=str)
def test_autocast_promote_and_untouched_ops(low):
    a32 = _mat(4, 3)
    a16 = _mat(4, 3).to(low)
    with torch.autocast("tpu", dtype=low):
        # promote: run in the widest input type
        assert torch.addcmul(a32, a16, a16).dtype == torch.float32
        assert torch.addcdiv(a16, a16, a32).dtype == torch.float32
        assert torch.atan2(a16, a32).dtype == torch.float32
        assert torch.dot(a16[0], a32[0]).dtype == torch.float32
        assert torch.cross(a16, a32, dim=1).dtype == torch.float32
        idx = torch.tensor([0, 2], device="tpu")
        assert a16.index_put((idx,), a32[:2]).dtype == torch.float32
        assert torch.zeros(4, 3, device="tpu", dtype=low).scatter_add(0, idx.view(2, 1).expand(2, 3), a32[:2]).dtype == (
            torch.float32
        )
        # not on any list: ordinary type promotion, no casts
        assert torch.relu(a32).dtype == torch.float32
        assert (a32 + a16).dtype == torch.float32
        assert torch.cat([a16, a16]).dtype == low
        # float64 is never autocast
        d = a32.double()
        assert torch.mm(d, d.t()).dtype == torch.float64
        # CPU tensors follow CPU autocast (disabled here), not the tpu lists
        c = torch.randn(3, 3)
        assert torch.mm(c, c).dtype == torch.float32
        assert torch.is_autocast_enabled("tpu") and torch.get_autocast_dtype("tpu") == low
        with torch.autocast("tpu", enabled=False):
            assert torch.mm(a32, a32.t()).dtype == torch.float32
        assert torch.mm(a32, a32.t()).dtype == low
    assert not torch.is_autocast_enabled("tpu")


def test_autocast_registers_every_cuda_autocast_op():
    """The AutocastPrivateUse1 kernels are exactly CUDA's (cudnn-only ops aside)."""
    cuda = set(torch._C._dispatch_get_registrations_for_dispatch_key("AutocastCUDA"))
    tpu = set(torch._C._dispatch_get_registrations_for_dispatch_key("AutocastPrivateUse1"))
    cuda_only = {op for op in cuda - tpu if "cudnn" in op}
    assert cuda - tpu == cuda_only, sorted(cuda - tpu - cuda_only)
    assert tpu <= cuda | {""}, sorted(tpu - cuda)


def test_autocast_bans_binary_cross_entropy_like_cuda():
    p = torch.rand(4, device="tpu")
    with torch.autocast("tpu", dtype=torch.bfloat16):
        with pytest.raises(RuntimeError, match="unsafe to autocast"):
            F.binary_cross_entropy(p, p)


def test_autocast_backward_and_weight_cast_cache():
    lin = torch.nn.Linear(8, 4).to("tpu")
    x = torch.randn(3, 8, device="tpu")
    with torch.autocast("tpu", dtype=torch.bfloat16):
        y = lin(x)
        assert y.dtype == torch.bfloat16
        loss = y.float().pow(2).mean()
    loss.backward()
    # gradients of float32 parameters are float32, and close to a float32 run
    assert lin.weight.grad.dtype == torch.float32
    ref = torch.nn.Linear(8, 4)
    ref.load_state_dict({k: v.cpu() for k, v in lin.state_dict().items()})
    ref(x.cpu()).pow(2).mean().backward()
    torch.testing.assert_close(lin.weight.grad.cpu(), ref.weight.grad, atol=3e-2, rtol=3e-2)


def test_amp_supported_dtypes():
    assert torch.tpu.get_amp_supported_dtype() == [torch.bfloat16, torch.float16]
    assert torch.tpu.is_bf16_supported()
    with pytest.warns(UserWarning, match="target dtype is not supported"):
        with torch.autocast("tpu", dtype=torch.float64):
            pass


def _grad_scaler_run(device, inf_step):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 2))
    model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler(device, init_scale=2.0**12, growth_interval=2)
    scales = []
    for step in range(6):
        x = torch.linspace(-1, 1, 24).view(4, 6).to(device) * (step + 1)
        loss = model(x).float().pow(2).mean()
        scaler.scale(loss).backward()
        if step == inf_step:
            model[0].weight.grad[0, 0] = float("inf")
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        scales.append(scaler.get_scale())
    return scales, [p.detach().cpu() for p in model.parameters()]


def test_grad_scaler_matches_cpu(no_fallback):
    cpu_scales, cpu_params = _grad_scaler_run("cpu", inf_step=3)
    tpu_scales, tpu_params = _grad_scaler_run("tpu", inf_step=3)
    assert tpu_scales == cpu_scales
    assert tpu_scales[3] == tpu_scales[2] / 2  # backoff after the inf step
    assert tpu_scales[1] == 2 * tpu_scales[0]  # growth after growth_interval steps
    for a, b in zip(tpu_params, cpu_params):
        torch.testing.assert_close(a, b)


def test_amp_unscale_op_semantics(no_fallback):
    grads = [torch.tensor([2.0, 4.0], device="tpu"), torch.tensor([1.0, float("nan")], device="tpu").to(torch.bfloat16)]
    found = torch.zeros(1, device="tpu")
    inv = torch.full((1,), 0.5, device="tpu")
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv)
    assert found.item() == 1.0
    assert torch.equal(grads[0].cpu(), torch.tensor([1.0, 2.0]))
    assert grads[1].dtype == torch.bfloat16 and grads[1][0].item() == 0.5
    ok = [torch.tensor([8.0], device="tpu")]
    found.zero_()
    torch._amp_foreach_non_finite_check_and_unscale_(ok, found, inv)
    assert found.item() == 0.0 and ok[0].item() == 4.0
    scale = torch.full((1,), 8.0, device="tpu")
    tracker = torch.zeros(1, dtype=torch.int32, device="tpu")
    torch._amp_update_scale_(scale, tracker, torch.zeros(1, device="tpu"), 2.0, 0.5, 2)
    assert scale.item() == 8.0 and tracker.item() == 1
    torch._amp_update_scale_(scale, tracker, torch.zeros(1, device="tpu"), 2.0, 0.5, 2)
    assert scale.item() == 16.0 and tracker.item() == 0
    torch._amp_update_scale_(scale, tracker, torch.ones(1, device="tpu"), 2.0, 0.5, 2)
    assert scale.item() == 8.0 and tracker.item() == 0


# ============================================================= serialization


def _roundtrip(obj, **load_kw):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **load_kw)


def test_save_tpu_tensors_load_anywhere():
    x = torch.randn(3, 4, device="tpu")
    y = torch.arange(6, device="tpu:1", dtype=torch.int32)
    z = torch.tensor([1.5, -2.0], dtype=torch.bfloat16, device="tpu")
    obj = {"x": x, "xt": x.t(), "row": x[1], "y": y, "z": z}
    same = _roundtrip(obj)
    assert same["x"].device == torch.device("tpu", 0) and same["y"].device == torch.device("tpu", 1)
    on_cpu = _roundtrip(obj, map_location="cpu")
    on_tpu1 = _roundtrip(obj, map_location="tpu:1")
    with torch.tpu.device(1):
        current = _roundtrip(obj, map_location="tpu")  # "tpu": the current device, as "cuda"
    for loaded, dev in ((same, None), (on_cpu, "cpu"), (on_tpu1, "tpu:1"), (current, "tpu:1")):
        for k, v in obj.items():
            assert loaded[k].dtype == v.dtype and loaded[k].shape == v.shape
            assert loaded[k].stride() == v.stride()
            if dev is not None:
                assert loaded[k].device == torch.device(dev)
            assert torch.equal(loaded[k].cpu(), v.cpu()), k
        # views keep sharing their storage
        assert loaded["xt"].untyped_storage().data_ptr() == loaded["x"].untyped_storage().data_ptr()
        assert loaded["row"].storage_offset() == 4
    on_tpu1["x"].add_(1)
    torch.testing.assert_close(on_tpu1["xt"].cpu(), (x.cpu() + 1).t())


def test_cpu_checkpoint_loads_on_tpu():
    obj = {"w": torch.randn(5, 5), "step": torch.tensor(7), "half": torch.ones(2, dtype=torch.float16)}
    loaded = _roundtrip(obj, map_location="tpu")
    assert all(v.device == torch.device("tpu", 0) for v in loaded.values())
    assert all(torch.equal(loaded[k].cpu(), v) for k, v in obj.items())
    loaded = _roundtrip(obj, map_location=torch.device("tpu", 1))
    assert loaded["w"].device == torch.device("tpu", 1)
    loaded = _roundtrip(obj, map_location=lambda storage, loc: storage.tpu(1))
    assert loaded["step"].device == torch.device("tpu", 1) and loaded["step"].item() == 7


def test_load_onto_missing_device_raises():
    buf = io.BytesIO()
    torch.save(torch.ones(2, device="tpu:1"), buf)
    data = buf.getvalue().replace(b"tpu:1", b"tpu:7")
    with pytest.raises(RuntimeError, match="device_count"):
        torch.load(io.BytesIO(data))


def test_state_dict_and_module_roundtrip(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 2)).to("tpu")
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x = torch.randn(5, 4, device="tpu")
    model(x).sum().backward()
    opt.step()
    path = tmp_path / "ckpt.pt"
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, path)
    # on the CPU
    ckpt = torch.load(path, map_location="cpu")
    cpu_model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 2))
    cpu_model.load_state_dict(ckpt["model"])
    for (k, v), (k2, v2) in zip(model.state_dict().items(), cpu_model.state_dict().items()):
        assert k == k2 and torch.equal(v.cpu(), v2)
    assert ckpt["opt"]["state"][0]["exp_avg"].device.type == "cpu"
    # back on tpu (memory-mapped file), into a fresh model and optimizer
    ckpt = torch.load(path, map_location="tpu", mmap=True)
    fresh = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 2)).to("tpu")
    fresh.load_state_dict(ckpt["model"])
    fresh_opt = torch.optim.Adam(fresh.parameters(), lr=1e-2)
    fresh_opt.load_state_dict(ckpt["opt"])
    assert fresh_opt.state_dict()["state"][0]["exp_avg"].device.type == "tpu"
    model.eval()
    fresh.eval()
    torch.testing.assert_close(fresh(x).cpu(), model(x).cpu())
    # whole modules pickle too
    torch.save(model, path)
    whole = torch.load(path, weights_only=False)
    assert next(whole.parameters()).device.type == "tpu"
    torch.testing.assert_close(whole(x).cpu(), model(x).cpu())


def test_checkpoint_written_on_cpu_loads_on_tpu_model(tmp_path):
    cpu_model = torch.nn.Linear(3, 3)
    path = tmp_path / "cpu.pt"
    torch.save(cpu_model.state_dict(), path)
    tpu_model = torch.nn.Linear(3, 3).to("tpu")
    tpu_model.load_state_dict(torch.load(path))  # CPU tensors copied into tpu parameters
    assert tpu_model.weight.device.type == "tpu"
    assert torch.equal(tpu_model.weight.cpu(), cpu_model.weight.detach())


def test_safetensors_roundtrip(tmp_path):
    st = pytest.importorskip("safetensors.torch")
    tensors = {
        "a": torch.randn(3, 4, device="tpu"),
        "b": torch.arange(5, dtype=torch.int64, device="tpu:1"),
        "c": torch.ones(2, 2, dtype=torch.bfloat16, device="tpu"),
    }
    path = str(tmp_path / "t.safetensors")
    st.save_file(tensors, path)
    loaded = st.load_file(path)  # CPU
    for k, v in tensors.items():
        assert loaded[k].device.type == "cpu" and torch.equal(loaded[k], v.cpu())
    on_tpu = {k: v.to("tpu") for k, v in loaded.items()}
    assert all(torch.equal(on_tpu[k].cpu(), tensors[k].cpu()) for k in tensors)
    assert torch.equal(st.load(st.save(tensors))["a"], tensors["a"].cpu())
    # save_model / load_model with tied weights on tpu
    emb = torch.nn.Embedding(6, 4)
    head = torch.nn.Linear(4, 6, bias=False)
    head.weight = emb.weight
    model = torch.nn.ModuleDict({"emb": emb, "head": head}).to("tpu")
    st.save_model(model, str(tmp_path / "m.safetensors"))
    fresh = torch.nn.ModuleDict({"emb": torch.nn.Embedding(6, 4), "head": torch.nn.Linear(4, 6, bias=False)})
    fresh["head"].weight = fresh["emb"].weight
    fresh.to("tpu")
    st.load_model(fresh, str(tmp_path / "m.safetensors"))
    assert torch.equal(fresh["emb"].weight.cpu(), model["emb"].weight.cpu())


# ================================================================ pin memory


def test_pin_memory_reports_pinned():
    x = torch.randn(16)
    assert not x.is_pinned()
    p = x.pin_memory()
    assert p.is_pinned() and torch.equal(p, x) and p.data_ptr() != x.data_ptr()
    assert p[3:].is_pinned() and p.view(4, 4).t().is_pinned()
    assert p.pin_memory().data_ptr() == p.data_ptr()  # already pinned: same tensor
    e = torch.empty(8, pin_memory=True)
    assert e.is_pinned()
    del p, e
    assert not torch.randn(16).is_pinned()
    torch.accelerator.empty_host_cache()


def test_non_blocking_copies_are_correct():
    src = torch.randn(64, 32).pin_memory()
    on_tpu = src.to("tpu", non_blocking=True)
    src.mul_(0)  # the copy already holds its own data
    out = torch.empty(64, 32, device="tpu")
    out.copy_(torch.arange(64 * 32.0).view(64, 32).pin_memory(), non_blocking=True)
    y = (on_tpu * 2).to("cpu", non_blocking=True)
    assert y.is_pinned()  # tpu -> CPU non_blocking lands in pinned memory, as on CUDA
    torch.tpu.synchronize()
    assert torch.equal(out.cpu(), torch.arange(64 * 32.0).view(64, 32))
    assert torch.equal(y, on_tpu.cpu() * 2) and y.abs().sum() > 0
    z = torch.empty(64, 32).pin_memory()
    z.copy_(on_tpu, non_blocking=True)
    torch.tpu.synchronize()
    assert torch.equal(z, on_tpu.cpu())


def test_dataloader_pin_memory():
    data = torch.utils.data.TensorDataset(torch.arange(40.0).view(20, 2), torch.arange(20))
    loader = torch.utils.data.DataLoader(data, batch_size=8, pin_memory=True)
    seen = 0
    for xb, yb in loader:
        assert xb.is_pinned() and yb.is_pinned()
        xb = xb.to("tpu", non_blocking=True)
        assert torch.equal(xb.cpu(), data.tensors[0][seen : seen + len(yb)])
        seen += len(yb)
    assert seen == 20


def test_device_contexts_name_their_devices_as_cuda_does():
    context = torch.tpu.device(1)
    assert (context.idx, context.prev_idx) == (1, -1)
    with context:
        assert context.prev_idx == 0 and torch.tpu.current_device() == 1
    assert torch.tpu.device_of(torch.ones(1, device="tpu:1")).idx == 1


def test_legacy_tensor_types():
    """Old CUDA code: `Tensor = torch.cuda.FloatTensor if cuda else
    torch.FloatTensor`, then `Tensor(2, 3)`, `Tensor(data)`, isinstance."""
    import numpy as np

    T = torch.tpu.FloatTensor
    assert repr(T) == "<class 'torch.tpu.FloatTensor'>"
    assert T(2, 3).shape == (2, 3) and T(2, 3).device.type == "tpu" and T(2, 3).dtype == torch.float32
    assert T().shape == (0,) and T(torch.Size([4])).shape == (4,)
    assert torch.equal(T([1.5, 2]).cpu(), torch.tensor([1.5, 2.0]))
    assert torch.equal(torch.tpu.LongTensor(np.arange(3)).cpu(), torch.arange(3))
    x = torch.ones(2, device="tpu")
    assert isinstance(x, T) and not isinstance(x, torch.tpu.LongTensor) and not isinstance(torch.ones(2), T)
    assert T(x).data_ptr() == x.data_ptr()
    with pytest.raises(TypeError):
        T(torch.ones(2))
    assert x.type() == "torch.tpu.FloatTensor"
    converted = torch.arange(3).type(T)
    assert converted.device.type == "tpu" and converted.dtype == torch.float32
    assert x.type(torch.tpu.HalfTensor).dtype == torch.float16
    for name in ("DoubleTensor", "BFloat16Tensor", "ByteTensor", "CharTensor", "ShortTensor", "IntTensor",
                 "BoolTensor"):
        assert getattr(torch.tpu, name)(1).dtype == getattr(torch.cuda, name).dtype


def test_tpu_work_in_a_forked_child_raises_cuda_error():
    """A child forked after JAX started has no runtime threads: tpu work
    there waited forever (a DataLoader worker building tpu tensors hung).
    It raises CUDA's error instead; CPU workers and the parent keep working."""
    _run_with_devices(1, """
        import os, torch
        class TpuItems(torch.utils.data.Dataset):
            def __len__(self): return 2
            def __getitem__(self, i): return torch.full((2,), float(i), device="tpu")
        class CpuItems(TpuItems):
            def __getitem__(self, i): return torch.full((2,), float(i))
        x = torch.ones(3, device="tpu") * 2
        try:
            list(torch.utils.data.DataLoader(TpuItems(), batch_size=2, num_workers=1))
            raise SystemExit("no error")
        except RuntimeError as e:
            assert "Cannot re-initialize tpu in forked subprocess" in str(e), e
        batches = list(torch.utils.data.DataLoader(CpuItems(), batch_size=2, num_workers=1, pin_memory=True))
        assert [b.to("tpu").sum().item() for b in batches] == [2.0]
        pid = os.fork()
        if pid == 0:
            errors = []
            for work in (lambda: (x + 1).cpu(), lambda: x.cpu(), torch.tpu.synchronize):
                try:
                    work()
                except RuntimeError as e:
                    errors.append("forked subprocess" in str(e))
            os._exit(0 if errors == [True, True, True] and torch.tpu._is_in_bad_fork() else 1)
        assert os.waitpid(pid, 0)[1] == 0
        assert not torch.tpu._is_in_bad_fork()
        assert (x + 1).cpu().tolist() == [3.0, 3.0, 3.0]
        print("OK")
    """, timeout=300)
