"""The C++ key of a compiled graph's call (`_C._graph_call_key`, used by
compile/runner.py on every steady-state call) must tell calls apart exactly
when the Python key (dispatch.Call, which builds the executables) does:
coarser would run an executable compiled for another geometry, finer would
recompile forever."""

import itertools

import torch

import torchtpu
from torchtpu import _C
from torchtpu.ops.dispatch import Call


def _python_key(args):
    call = Call()
    parts = tuple(call.tensor_key(a) for a in args)
    return parts, call.device


def _fast_key(args):
    found = _C._graph_call_key(tuple(args))
    assert found is not None
    key, entries, addresses, device = found
    assert len(entries) == len(addresses)
    return key, device


def _argument_sets():
    base = torch.randn(4, 6, device="tpu")
    other = torch.randn(4, 6, device="tpu")
    tall = torch.randn(5, 6, device="tpu")
    cplx = torch.randn(4, 6, dtype=torch.complex64, device="tpu")
    singles = [
        base, other, base.t(), base[1:], tall[:4], tall[1:], base.view(6, 4), base.double(),
        cplx, cplx.conj(), torch._neg_view(base), torch.empty(0, device="tpu"),
        torch.randn(4, 6, device="tpu:1"), base[:, 1:], base.unsqueeze(0),
    ]
    sets = [(t,) for t in singles]
    sets += [(base, base), (base, other), (base, base.t()), (other, other.t()), (base, base[1:]), (tall[:4], base)]
    return sets


def test_fast_key_separates_calls_exactly_like_the_python_key():
    sets = _argument_sets()
    python = [_python_key(s) for s in sets]
    fast = [_fast_key(s) for s in sets]
    for i, j in itertools.combinations(range(len(sets)), 2):
        assert (python[i] == python[j]) == (fast[i] == fast[j]), (i, j)
    # and the calls differ somewhere: the check above is not vacuous
    assert len(set(fast)) > len(sets) // 2


def test_fast_key_declines_what_only_python_keys():
    x = torch.randn(3, device="tpu")
    assert _C._graph_call_key((x, torch.tensor(2.0))) is None  # a CPU scalar
    assert _C._graph_call_key((x, 3)) is None  # a number
    assert _C._graph_call_key((x, torch.randn(3, device="tpu:1"))) is None  # two devices: PyTorch's error


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
