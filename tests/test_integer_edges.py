"""Integer edge cases raise or compute on tpu what they do on the CPU: fill
values out of an integer dtype's range, Python ints past int64 (c10's
uint64 Scalars), and the index and input dtypes ATen's kernels reject."""

import pytest
import torch
import torch.nn.functional as F


def _outcome(fn, device):
    try:
        return "ok", fn(device).cpu()
    except Exception as e:  # noqa: BLE001 -- the error itself is compared
        return type(e), str(e)


def _same_as_cpu(fn):
    cpu, tpu = _outcome(fn, "cpu"), _outcome(fn, "tpu")
    if cpu[0] == "ok":
        assert tpu[0] == "ok", tpu
        assert tpu[1].dtype == cpu[1].dtype
        assert torch.equal(tpu[1], cpu[1]), (tpu[1], cpu[1])
    else:
        assert tpu[0] is cpu[0], (tpu, cpu)
        assert tpu[1].startswith(cpu[1]), (tpu[1], cpu[1])  # (tpu may add where a device-side check fired)


def _pad(dtype, value, pad=(1, 1), shape=(2,)):
    return lambda d: F.pad(torch.zeros(shape, dtype=dtype, device=d), pad, value=value)


PAD_CASES = {
    "int8 300": _pad(torch.int8, 300),
    "uint8 -3": _pad(torch.uint8, -3),
    "int32 nan": _pad(torch.int32, float("nan")),
    "int8 in range": _pad(torch.int8, -128),
    "empty result still checks": _pad(torch.int8, 300, (1, 0), (0, 3)),
    "only cropping does not fill": _pad(torch.int8, 300, (-1, 0), (3,)),
    "half single element unchecked": _pad(torch.float16, 1e6, (1, 0), (0,)),
    "half overflow": _pad(torch.float16, 1e6, (1, 0), (1,)),
    "bool": _pad(torch.bool, 300),
}


@pytest.mark.parametrize("name", PAD_CASES)
def test_constant_pad_value_converts_like_cpu(name):
    _same_as_cpu(PAD_CASES[name])


def _u64(*values):
    return lambda d: torch.tensor(values, dtype=torch.uint64, device=d)


BIG_INT_CASES = {
    "uint64 == 2**63": lambda d: _u64(2**63, 5)(d) == 2**63,
    "uint64 & 2**64-1": lambda d: _u64(5)(d) & (2**64 - 1),
    "where uint64 2**63": lambda d: torch.where(torch.tensor([False], device=d), _u64(5)(d), 2**63),
    "int64 == 2**63": lambda d: torch.tensor([5, -(2**63)], device=d) == 2**63,
    "int32 + 2**63": lambda d: torch.tensor([1], dtype=torch.int32, device=d) + 2**63,
    "float + 2**63": lambda d: torch.tensor([1.0], device=d) + 2**63,
    "uint32 fill_ 2**64-1": lambda d: torch.zeros(1, dtype=torch.uint32, device=d).fill_(2**64 - 1),
    "uint32 full 2**64-1": lambda d: torch.full((1,), 2**64 - 1, dtype=torch.uint32, device=d),
    "uint64 full 2**64-1": lambda d: torch.full((2,), 2**64 - 1, dtype=torch.uint64, device=d),
}


@pytest.mark.parametrize("name", BIG_INT_CASES)
def test_python_int_past_int64_like_cpu(name):
    _same_as_cpu(BIG_INT_CASES[name])


@pytest.mark.parametrize("dtype", [torch.uint64, torch.int64, torch.uint32, torch.float32])
def test_traced_python_int_past_int64_like_cpu(dtype):
    # past a few distinct values the Scalar is traced, not baked in
    for v in [1, 2, 3, 4, 5, 2**63, 2**64 - 1, 7]:
        _same_as_cpu(lambda d: torch.tensor([0, 5, 2**31], dtype=dtype, device=d) == v)
        _same_as_cpu(lambda d: torch.zeros(2, dtype=dtype, device=d).fill_(v))


def _select(index_dtype, shape=(1,)):
    return lambda d: torch.arange(4.0, device=d).index_select(0, torch.ones(shape, dtype=index_dtype, device=d))


INDEX_CASES = {
    "index_select int16": _select(torch.int16),
    "index_select uint8": _select(torch.uint8),
    "index_select bool": _select(torch.bool),
    "index_select 0-dim int16": _select(torch.int16, ()),
    "index_select 2-d": _select(torch.int64, (1, 1)),
    "index_select int32": _select(torch.int32),
    "index_select out= int16": lambda d: torch.index_select(
        torch.arange(4.0, device=d), 0, torch.ones(1, dtype=torch.int16, device=d), out=torch.empty(1, device=d)),
    "index_select backward int16": lambda d: torch.ops.aten.index_select_backward(
        torch.ones(1, device=d), [4], 0, torch.ones(1, dtype=torch.int16, device=d)),
    "index_add_ uint8 index": lambda d: torch.zeros(4, device=d).index_add_(
        0, torch.ones(1, dtype=torch.uint8, device=d), torch.ones(1, device=d)),
    "index_add index before source dtype": lambda d: torch.zeros(4, device=d).index_add(
        0, torch.ones(1, dtype=torch.int16, device=d), torch.ones(1, dtype=torch.double, device=d)),
    "index_add 2-d index": lambda d: torch.zeros(4, device=d).index_add_(
        0, torch.ones(1, 1, dtype=torch.uint8, device=d), torch.ones(1, device=d)),
}


@pytest.mark.parametrize("name", INDEX_CASES)
def test_index_dtype_checked_like_cpu(name):
    _same_as_cpu(INDEX_CASES[name])


ARG_CASES = {
    "empty bool argmax": lambda d: torch.zeros(0, dtype=torch.bool, device=d).argmax(),
    "empty bool argmin": lambda d: torch.zeros(0, dtype=torch.bool, device=d).argmin(),
    "bool argmax dim": lambda d: torch.zeros(2, dtype=torch.bool, device=d).argmax(0),
    "bool argmin dim": lambda d: torch.zeros(2, dtype=torch.bool, device=d).argmin(0),
    "empty float argmax": lambda d: torch.zeros(0, device=d).argmax(),
}


@pytest.mark.parametrize("name", ARG_CASES)
def test_argmax_of_bool_raises_like_cpu(name):
    _same_as_cpu(ARG_CASES[name])


def _t(dtype, d):
    return torch.tensor([4], dtype=dtype, device=d)


KERNEL_CASES = {
    "int << float scalar": lambda d: _t(torch.int64, d) << 1.5,
    "int >> float scalar": lambda d: _t(torch.int64, d) >> 1.5,
    "float << int": lambda d: _t(torch.float32, d) << 1,
    "complex << int": lambda d: _t(torch.complex64, d) << 1,
    "bool << bool": lambda d: _t(torch.bool, d) << _t(torch.bool, d),
    "bool >> bool": lambda d: _t(torch.bool, d) >> _t(torch.bool, d),
    "bool << int scalar": lambda d: _t(torch.bool, d) << 1,
    "float scalar << int": lambda d: 1.5 << _t(torch.int64, d),
    "in-place int <<= float": lambda d: _t(torch.int64, d).__ilshift__(1.5),
    "bool // bool": lambda d: _t(torch.bool, d) // _t(torch.bool, d),
    "bool // True": lambda d: _t(torch.bool, d) // True,
    "bool floor_divide_": lambda d: _t(torch.bool, d).floor_divide_(_t(torch.bool, d)),
    "bool div trunc": lambda d: torch.div(_t(torch.bool, d), _t(torch.bool, d), rounding_mode="trunc"),
    "bool // int": lambda d: _t(torch.bool, d) // 2,
}


@pytest.mark.parametrize("name", KERNEL_CASES)
def test_missing_integer_kernels_raise_like_cpu(name):
    _same_as_cpu(KERNEL_CASES[name])


def test_compiled_python_int_past_int64_like_cpu():
    cases = [(torch.uint64, lambda x: (x == 2**63, x & (2**64 - 1))), (torch.int64, lambda x: (x == 2**63, x + 2**63)),
             (torch.int32, lambda x: (x == 2**63, x + 2**63)), (torch.float32, lambda x: (x == 2**63, x + 2**63))]
    for dtype, fn in cases:
        x = torch.tensor([0, 5], dtype=dtype)
        for got, want in zip(torch.compile(fn, backend="tpu")(x.to("tpu")), fn(x)):
            assert got.dtype == want.dtype and torch.equal(got.cpu(), want), (dtype, got, want)
