"""The C++ key of a compiled graph's call (`_C._graph_call_key`, used by
compile/runner.py on every steady-state call) must tell calls apart exactly
when the Python key (dispatch.Call, which builds the executables) does:
coarser would run an executable compiled for another geometry, finer would
recompile forever."""

import itertools

import numpy as np
import pytest
import torch

import torchtpu
from torchtpu import _C
from torchtpu.ops.dispatch import Call


def _python_key(args, trace_offsets=False):
    call = Call()
    parts = tuple(call.tensor_key(a, trace_offsets) for a in args)
    return parts, call.device, tuple(call.dyn)


def _fast_key(args, trace_offsets=False):
    found = _C._graph_call_key(tuple(args), tuple(range(len(args))) if trace_offsets else None)
    assert found is not None
    key, entries, addresses, device, rows = found
    assert len(entries) == len(addresses)
    return key, device, tuple(rows)


def _argument_sets():
    base = torch.randn(4, 6, device="tpu")
    other = torch.randn(4, 6, device="tpu")
    tall = torch.randn(5, 6, device="tpu")
    cplx = torch.randn(4, 6, dtype=torch.complex64, device="tpu")
    cube = torch.randn(3, 4, 5, device="tpu")
    singles = [
        base, other, base.t(), base[1:], tall[:4], tall[1:], base.view(6, 4), base.double(),
        cplx, cplx.conj(), torch._neg_view(base), torch.empty(0, device="tpu"),
        torch.randn(4, 6, device="tpu:1"), base[:, 1:], base.unsqueeze(0),
        # views at leading rows (ops/row_offsets.py): keyed alike at any row when traced
        base[2], base[3], base[1:3], base[2:4], base[2, 1:], base[3, 1:], base[1:3].t(), base[2:4].t(),
        base.view(-1)[7:12], base.view(-1)[13:18], base.view(torch.int32)[2], base[1:3, ::2], tall[3:],
        torch.arange(10, device="tpu")[3:6], torch.arange(10, device="tpu")[5:8],
        # ... and at an index of an inner dim (x[:, t])
        cube[:, 1], cube[:, 2], cube[:, 2, 1:], cube[1:, 2], cube[:, :, 3], cube[:, 1:3].transpose(0, 1),
    ]
    sets = [(t,) for t in singles]
    sets += [(base, base), (base, other), (base, base.t()), (other, other.t()), (base, base[1:]), (tall[:4], base)]
    return sets


@pytest.mark.parametrize("trace_offsets", [False, True])
def test_fast_key_separates_calls_exactly_like_the_python_key(trace_offsets):
    sets = _argument_sets()
    python = [_python_key(s, trace_offsets) for s in sets]
    fast = [_fast_key(s, trace_offsets) for s in sets]
    for i, j in itertools.combinations(range(len(sets)), 2):
        assert (python[i][:2] == python[j][:2]) == (fast[i][:2] == fast[j][:2]), (i, j)
    for p, f in zip(python, fast):
        assert p[2] == f[2]  # the same rows, traced in the same order
    # and the calls differ somewhere: the check above is not vacuous
    assert len(set(fast)) > len(sets) // 2
    # traced rows make row views alike (base[2] ~ base[3]); static keys tell them apart
    i, j = [k for k, s in enumerate(sets) if len(s) == 1 and s[0].shape == (6,) and s[0].stride() == (1,)][:2]
    assert (fast[i][0] == fast[j][0]) == trace_offsets


def test_fast_key_declines_what_only_python_keys():
    x = torch.randn(3, device="tpu")
    assert _C._graph_call_key((x, torch.ones(2))) is None  # a CPU tensor with dims (a host input)
    assert _C._graph_call_key((x, 3)) is None  # a number
    assert _C._graph_call_key((x, torch.randn(3, device="tpu:1"))) is None  # two devices: PyTorch's error


def test_cpu_scalars_are_keyed_by_dtype_and_passed_by_value():
    # (an optimizer's step counts: a compiled opt.step() takes one per parameter)
    x = torch.randn(3, device="tpu")
    sets = [(x, torch.tensor(2.0)), (x, torch.tensor(7.0)), (x, torch.tensor(2.0, dtype=torch.float64)),
            (x, torch.tensor(0.1, dtype=torch.float64)), (x, torch.tensor(2)), (x, torch.tensor(True)),
            (x, torch.tensor(1 - 2j)), (x, torch.tensor(2**63 - 1)), (torch.tensor(2.0), x), (x, x)]
    python = [_python_key(s) for s in sets]
    fast = [_C._graph_call_key(s) for s in sets]
    for i, j in itertools.combinations(range(len(sets)), 2):
        assert (python[i][:2] == python[j][:2]) == (fast[i][0] == fast[j][0]), (i, j)
    for p, f in zip(python, fast):
        # (the Python key's 0-d arrays, the C++ key's exact Python numbers: the dtype is in both keys)
        assert [np.asarray(v).item() for v in p[2]] == f[4]
        assert [type(np.asarray(v).item()) for v in p[2]] == [type(v) for v in f[4]]


def test_compiled_graph_reads_each_call_at_its_own_offset_and_alias():
    def f(a, b):
        return a * 2 + b

    compiled = torch.compile(f, backend="tpu", dynamic=False)
    base_cpu = torch.randn(4, 6)
    base = base_cpu.to("tpu")
    calls = [(0, 1), (1, 2), (2, 2), (3, 0), (0, 1)]  # rows: offsets move, a and b sometimes one view
    before = torchtpu.compile_stats()["hits"]
    for i, j in calls:
        got = compiled(base[i], base[j])
        torch.testing.assert_close(got.cpu(), f(base_cpu[i], base_cpu[j]))
    assert torchtpu.compile_stats()["hits"] > before  # repeated signatures are served from the cache


@pytest.mark.parametrize("dynamic", [False, True])
def test_compiled_graph_takes_cpu_scalars_of_mixed_dtypes_by_value(dynamic):
    # The CPU scalars reach the executable packed, one array per dtype
    # (graph_inputs.ScalarPacking): each must still come out in its place.
    def f(x, a, b, c, i, j, h, k, d, flag, other):
        y = x * a + b - c * i + j + h.float() * k.float() + d
        return torch.where(flag, y, -y) * torch.where(other, 2.0, 3.0), a + 1, i * j

    compiled = torch.compile(f, backend="tpu", dynamic=dynamic)
    g = torch.Generator().manual_seed(0)
    for n in (5, 5, 9, 5):
        x_cpu = torch.randn(n, generator=g)
        scalars = [torch.randn((), generator=g) for _ in range(3)]
        scalars += [torch.randint(-5, 5, (), generator=g) for _ in range(2)]
        scalars += [torch.randn((), generator=g).to(torch.bfloat16) for _ in range(2)]
        scalars += [torch.randn((), generator=g, dtype=torch.float64)]
        scalars += [torch.rand((), generator=g) > 0.5, torch.rand((), generator=g) > 0.5]
        got = compiled(x_cpu.to("tpu"), *scalars)
        want = f(x_cpu, *scalars)
        for w, o in zip(want, got):
            assert o.dtype == w.dtype
            torch.testing.assert_close(o.cpu(), w)


def test_scalar_packing_round_trips_each_value_in_place():
    import jax

    from torchtpu.compile.graph_inputs import ScalarPacking

    dyn = [np.asarray(1.5, np.float32), 7, np.asarray(2, np.int64), np.asarray(-2.5, np.float32),
           np.arange(3.0), np.asarray(9, np.int64), np.asarray(0.25, np.float32)]
    packing = ScalarPacking(dyn)
    assert packing.width == 4  # a float32 array, an int64 array, the int, the non-scalar array
    # later calls' scalars may come as Python numbers (_C._graph_call_key's): the same arguments
    as_numbers = [v.item() if isinstance(v, np.ndarray) and v.ndim == 0 else v for v in dyn]
    for values in (dyn, as_numbers):
        unpacked = jax.jit(lambda *a: packing.unpack(a))(*packing.pack(values))
        for want, got in zip(dyn, unpacked):
            assert np.asarray(got).dtype == np.asarray(want).dtype
            np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
