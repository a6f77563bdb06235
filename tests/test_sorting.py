"""Sorting, top-k, order statistics and scans (torchtpu/ops/lowerings/sorting.py)
against PyTorch on the CPU.

Index outputs are compared exactly wherever torch's answer is determined:
stable sorts, distinct values, cummax/cummin's rules, mode on short rows
(the CPU's std::sort is an insertion sort below 16 elements, hence stable).
Where the CPU's index for equal values depends on its selection algorithm
(topk, kthvalue, median), ties are checked by values plus gather
consistency."""

import math

import pytest
import torch

from utils import TPU, check

aten = torch.ops.aten
nan, inf = math.nan, math.inf

DTYPES = [torch.float32, torch.bfloat16, torch.int64, torch.int32, torch.bool]


def make(shape, dtype, low=-4, high=5):
    if dtype.is_floating_point:
        return torch.randn(shape).to(dtype)
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    return torch.randint(low, high, shape, dtype=dtype)


def ties(shape, dtype):
    """Few distinct values: many ties (stability is visible)."""
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    return torch.randint(-2, 3, shape).to(dtype)


def distinct(shape, dtype=torch.float32):
    """All values distinct (every index is determined)."""
    n = math.prod(shape)
    return (torch.randperm(n).reshape(shape) - n // 2).to(dtype)


def with_specials(shape):
    x = ties(shape, torch.float32)
    flat = x.view(-1)
    flat[0] = nan
    flat[3] = -0.0
    flat[5] = inf
    flat[6] = nan
    flat[8] = -inf
    flat[11] = 0.0
    return x


def noncontig(a):
    return a.transpose(0, 1)[:, ::2]


# ------------------------------------------------------------------ sort / argsort


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("descending", [False, True])
def test_sort_stable_ties(dtype, descending):
    x = ties((4, 9), dtype)
    check(lambda a: (a.sort(descending=descending, stable=True), a.sort(0, descending=descending)), x)


def test_sort_specials():
    # NaN is the largest value; -0.0 == 0.0 keep their input order
    x = with_specials((3, 12))
    check(lambda a: (a.sort(1), a.sort(1, descending=True), a.argsort(dim=1, stable=True)), x, equal_nan=True)


def test_sort_dims_and_noncontiguous():
    x = ties((5, 4, 6), torch.float32)
    check(lambda a: (a.sort(0), a.sort(-2, descending=True), torch.sort(noncontig(a), 1)), x)
    check(lambda a: (a.argsort(), a.argsort(0, descending=True), torch.msort(a)), x)


def test_sort_scalar_and_empty():
    check(lambda a: (a.sort(), a.sort(0, descending=True), a.argsort()), torch.tensor(3.5))
    check(lambda a: (a.sort(0), a.sort(1), a.argsort(1)), torch.empty(0, 3))


def test_sort_out_and_errors():
    def fn(a, v, i, o):
        torch.sort(a, 1, out=(v, i))
        torch.argsort(a, dim=0, stable=True, out=o)
        return v, i, o

    x = ties((3, 5), torch.float32)
    check(fn, x, torch.empty(3, 5), torch.empty(0, dtype=torch.int64), torch.empty(3, 5, dtype=torch.int64))
    with pytest.raises(RuntimeError):
        torch.randn(3, dtype=torch.complex64).to(TPU).sort()


# ------------------------------------------------------------------ topk


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.int32])
def test_topk_distinct(dtype):
    x = distinct((4, 7), dtype)
    check(lambda a: (a.topk(3), a.topk(2, largest=False)), x)
    if dtype == torch.float32:
        check(lambda a: (a.topk(1, 0), a.topk(7, -1, largest=False)), x)


def test_topk_nan_and_options():
    x = distinct((3, 8))
    x[0, 2] = nan
    x[2, 5] = nan
    x[2, 1] = inf
    check(lambda a: (a.topk(3), a.topk(3, largest=False), a.topk(8)), x, equal_nan=True)
    check(lambda a: (a.topk(2, 0), a.topk(0, 1), noncontig(a).topk(2, 1, largest=False)), distinct((3, 8)))
    # a 0-dim input comes back whole, for k = 0 too (crashed in a reshape)
    check(lambda a: (a.topk(0), a.topk(1, largest=False)), torch.tensor(1.5))


def test_topk_unsorted_and_ties():
    # sorted=False: any order is valid; compare as sets (sorted by index)
    x = distinct((3, 8))
    ti = x.to(TPU).topk(4, sorted=False)
    ci = x.topk(4, sorted=False)
    torch.testing.assert_close(ti.indices.cpu().sort(1).values, ci.indices.sort(1).values)
    # ties: values must agree, indices must point at those values
    y = ties((5, 9), torch.float32)
    for largest in (True, False):
        v, i = y.to(TPU).topk(4, largest=largest)
        torch.testing.assert_close(v.cpu(), y.topk(4, largest=largest).values)
        torch.testing.assert_close(y.gather(1, i.cpu()), v.cpu())
        assert all(len(set(row.tolist())) == 4 for row in i.cpu())  # no index twice


def test_topk_out_and_errors():
    def fn(a, v, i):
        torch.topk(a, 2, out=(v, i))
        return v, i

    check(fn, distinct((3, 5)), torch.empty(0), torch.empty(0, dtype=torch.int64))
    with pytest.raises(RuntimeError):
        torch.ones(3).to(TPU).topk(4)
    with pytest.raises(RuntimeError):
        torch.ones(3, dtype=torch.bool).to(TPU).topk(1)


# ------------------------------------------------------------------ kthvalue / median / nanmedian / mode


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.int32])
def test_kthvalue(dtype):
    x = distinct((4, 7), dtype)
    check(lambda a: (a.kthvalue(1), a.kthvalue(4, 1, True)), x)
    if dtype == torch.float32:
        check(lambda a: (a.kthvalue(2, 0), a.kthvalue(7)), x)


def test_kthvalue_nan_ties_and_errors():
    x = distinct((3, 6))
    x[1, 2] = nan
    check(lambda a: (a.kthvalue(6), a.kthvalue(5), a.kthvalue(1, 0)), x, equal_nan=True)
    y = ties((4, 9), torch.float32)
    v, i = y.to(TPU).kthvalue(5)
    torch.testing.assert_close(v.cpu(), y.kthvalue(5).values)
    torch.testing.assert_close(y.gather(1, i.cpu()[:, None])[:, 0], v.cpu())
    with pytest.raises(RuntimeError):
        y.to(TPU).kthvalue(10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.int32])
def test_median(dtype):
    x = distinct((4, 6), dtype)  # even rows: the lower median
    y = distinct((5, 7), dtype)  # odd rows
    check(lambda a, b: (a.median(1), b.median(0, keepdim=True)), x, y)
    if dtype == torch.float32:
        check(lambda a, b: (a.median(), b.median(), a.nanmedian(1)), x, y)


def test_median_nan():
    x = distinct((4, 7))
    x[0, 3] = nan  # median: NaN, index of the first NaN
    x[0, 5] = nan
    x[2, 1] = nan  # nanmedian: lower median of the rest
    check(
        lambda a: (a.median(), a.nanmedian(), a.median(1), a.nanmedian(1), a.median(0), a.nanmedian(0, True)),
        x,
        equal_nan=True,
    )
    check(lambda a: (a.median(), a.nanmedian()), torch.empty(0), equal_nan=True)
    # all-NaN rows: NaN (the CPU's index for them comes from nth_element: not compared)
    x[1, :] = nan
    check(lambda a: (a.nanmedian(1).values, a.median(1)), x, equal_nan=True)
    check(lambda a: (a.median(), a.median(0), a.nanmedian(-1)), torch.tensor(2.0))


def test_median_ties_values():
    y = ties((4, 8), torch.float32)
    v, i = y.to(TPU).median(1)
    torch.testing.assert_close(v.cpu(), y.median(1).values)
    torch.testing.assert_close(y.gather(1, i.cpu()[:, None])[:, 0], v.cpu())


@pytest.mark.parametrize("dtype", DTYPES)
def test_mode(dtype):
    # rows of <= 16 elements: the CPU's index is the last occurrence of the
    # smallest most frequent value
    x = ties((5, 9), dtype)
    check(lambda a: (a.mode(), a.mode(0, keepdim=True)), x)


def test_mode_more():
    x = torch.tensor([[3.0, 1, 3, 1, 2, 2], [5, 5, 1, 1, 1, 5], [0, 0, 0, 7, 7, 7], [4, 3, 2, 1, -1, -2]])
    check(lambda a: (a.mode(), noncontig(a).mode(0), a.mode(1, True)), x)
    check(lambda a: a.mode(0), torch.tensor(2.0))

    def fn(a, v, i):
        torch.mode(a, 0, out=(v, i))
        return v, i

    check(fn, x, torch.empty(0), torch.empty(0, dtype=torch.int64))


def test_order_statistics_errors():
    e = torch.empty(0, 3)
    for fn in (lambda a: a.mode(0), lambda a: a.median(0), lambda a: a.nanmedian(0)):
        with pytest.raises(IndexError):
            fn(e)
        with pytest.raises(IndexError):
            fn(e.to(TPU))
    with pytest.raises(NotImplementedError):
        torch.ones(3, dtype=torch.bool).to(TPU).median()


def test_order_statistics_out():
    def fn(a, v, i, m, mi):
        torch.kthvalue(a, 2, 1, out=(v, i))
        torch.median(a, 0, out=(m, mi))
        return v, i, m, mi

    check(fn, distinct((3, 5)), torch.empty(0), torch.empty(0, dtype=torch.int64), torch.empty(5), torch.empty(5, dtype=torch.int64))


# ------------------------------------------------------------------ cumsum / cumprod


@pytest.mark.parametrize("dtype", DTYPES)
def test_cumsum_cumprod(dtype):
    x = make((3, 5), dtype, -2, 3)
    check(lambda a: (a.cumsum(1), a.cumprod(0)), x)


def test_cumsum_cumprod_more():
    x = torch.randn(3, 4, 6)
    check(lambda a: (a.cumsum(-1), a.cumprod(1), noncontig(a).cumsum(1)), x)
    check(lambda a: (a.cumsum(0, dtype=torch.float64), a.cumprod(1, dtype=torch.int32)), make((3, 4), torch.int32))
    check(lambda a: (a.cumsum(0), a.cumprod(0)), torch.tensor(1.5))
    check(lambda a: (a.cumsum(0), a.cumprod(1)), torch.empty(0, 3))
    # bf16 accumulates in float32: ones stay exact up to 4096 (only a real
    # accelerator can fail this: XLA:CPU upcasts bf16 arithmetic itself)
    out = check(lambda a: a.cumsum(0), torch.ones(4096, dtype=torch.bfloat16))
    assert out[-1].item() == 4096.0
    check(lambda a: a.cumsum(0), torch.full((6,), 2**62, dtype=torch.int64))  # wraps like the CPU


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8])
def test_reductions_and_scans_cast_to_dtype_as_c10_does(dtype):
    # the input is cast to dtype= first, as c10 casts (and torchtpu's .to):
    # -2.0 becomes 254 in uint8; astype saturated it to 0
    x = torch.tensor([1.5, -2.0, 3.0, -0.5, 300.7])
    check(lambda a: (a.sum(dtype=dtype), a.reshape(1, 5).sum(1, dtype=dtype), a.nansum(dtype=dtype)), x)
    check(lambda a: (a[:3].prod(dtype=dtype), a[:3].prod(0, dtype=dtype)), x)
    check(lambda a: (a.cumsum(0, dtype=dtype), a[:3].cumprod(0, dtype=dtype)), x)


def test_cumsum_out_and_inplace():
    def fn(a, o, b):
        torch.cumsum(a, 1, out=o)
        b.cumsum_(0)
        b.cumprod_(1)
        return o, b

    check(fn, torch.randn(3, 4), torch.empty(0), torch.randn(3, 4))


# ------------------------------------------------------------------ cummax / cummin / logcumsumexp


@pytest.mark.parametrize("dtype", DTYPES)
def test_cummax_cummin(dtype):
    # ties: the later index wins (ATen's >= / <=)
    x = ties((4, 9), dtype)
    check(lambda a: (a.cummax(1), a.cummin(0)), x)


def test_cummax_cummin_nan_and_more():
    x = torch.tensor([[1.0, 3, 3, nan, 5, nan, 2], [2, -inf, -inf, 0, inf, inf, 1]])
    check(lambda a: (a.cummax(1), a.cummin(1), a.cummax(0)), x, equal_nan=True)
    check(lambda a: (noncontig(a).cummax(0), a.cummin(-1)), ties((3, 4, 6), torch.float32))
    check(lambda a: (a.cummax(0), a.cummin(0)), torch.tensor(1.5))
    check(lambda a: (a.cummax(0), a.cummin(1)), torch.empty(0, 3))

    def fn(a, v, i):
        torch.cummax(a, 1, out=(v, i))
        return v, i

    check(fn, x, torch.empty(0), torch.empty(0, dtype=torch.int64), equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_logcumsumexp(dtype):
    x = (torch.randn(3, 6) * 5).to(dtype)
    check(lambda a: (a.logcumsumexp(1), a.logcumsumexp(0)), x)


def test_logcumsumexp_infinities():
    x = torch.tensor([[-inf, -inf, 0.0, -inf], [inf, 1.0, inf, -inf], [1.0, nan, 2.0, 3.0], [-inf, inf, -inf, 5.0]])
    check(lambda a: (a.logcumsumexp(1), a.logcumsumexp(0)), x, equal_nan=True)

    def fn(a, o):
        torch.logcumsumexp(a, 1, out=o)
        return o

    check(fn, torch.randn(3, 4), torch.empty(3, 4))
    with pytest.raises(NotImplementedError):
        torch.ones(3, dtype=torch.int64).to(TPU).logcumsumexp(0)


# ------------------------------------------------------------------ gradients
# Backward formulas here are built from other families' ops (scatter,
# gather, flip, mul, div, ...); the checks are strict (no CPU fallback).


@pytest.mark.parametrize(
    "fn",
    [
        lambda a: a.sort(1)[0],
        lambda a: a.sort(0, descending=True)[0],
        lambda a: a.topk(2, 1)[0],
        lambda a: a.kthvalue(2, 1)[0],
        lambda a: a.median(1)[0],
        lambda a: a.median(),
        lambda a: a.nanmedian(0)[0],
        lambda a: a.cumsum(1),
        lambda a: a.cumprod(1),
        lambda a: a.cummax(0)[0],
        lambda a: a.logcumsumexp(1),
    ],
)
def test_grad(fn):
    x = distinct((4, 5)).div(3).requires_grad_()
    check(fn, x, grad=True)


def test_grad_mode():
    x = torch.tensor([[1.0, 2, 2, 3], [4, 4, 5, 4]], requires_grad=True)
    check(lambda a: a.mode(1)[0], x, grad=True)


# ------------------------------------------------------------------ searchsorted / bucketize


def test_searchsorted_converts_a_scalar_to_the_sequence_dtype():
    # ATen searches in torch's result type of the sequence and the values: a
    # Scalar or 0-dim value wraps to a narrow sequence's dtype (-1 is 255 in
    # uint8, 200 is -56 in int8); a float Scalar promotes.
    u8 = torch.tensor([1, 2, 3], dtype=torch.uint8)
    i8 = torch.tensor([-60, 2, 3], dtype=torch.int8)
    check(lambda s: (torch.searchsorted(s, -1), torch.searchsorted(s, -1, right=True),
                     torch.searchsorted(s, 2.5), torch.searchsorted(s, -1.0)), u8)
    check(lambda s: (torch.searchsorted(s, 200), torch.searchsorted(s, 200, side="right")), i8)
    check(lambda s, v: (torch.searchsorted(s, v), torch.bucketize(v, s)), u8, torch.tensor(-1))
    check(lambda s, v: torch.searchsorted(s, v), u8, torch.tensor([-1, 2]))  # (1-dim: int64 wins)
    check(lambda s, o: torch.searchsorted(s, -1, sorter=o), torch.tensor([3, 1, 2], dtype=torch.uint8),
          torch.tensor([1, 2, 0]))
    check(lambda s: (torch.bucketize(-1, s), torch.bucketize(200, s.to(torch.int8))), u8)


def test_searchsorted_sorter_out_of_range_raises():
    for sorter in ([0, 5], [-1, 0]):
        with pytest.raises(RuntimeError, match=r"torch.searchsorted\(\): sorter index out of range"):
            torch.searchsorted(torch.tensor([3.0, 1.0]), torch.tensor([2.0]), sorter=torch.tensor(sorter))
        with pytest.raises(RuntimeError, match=r"torch.searchsorted\(\): sorter index out of range"):
            torch.searchsorted(torch.tensor([3.0, 1.0]).to(TPU), torch.tensor([2.0]).to(TPU),
                               sorter=torch.tensor(sorter).to(TPU))
            torch.tpu.synchronize()  # device-side check: reported at the next sync


def test_searchsorted_and_bucketize_search_as_aten_does():
    # ATen's binary search with raw comparisons: NaN (in the boundaries or
    # the values) and unsorted boundaries give the CPU's answers, not NumPy's.
    b = torch.tensor([1.0, 2.0, nan])
    v = torch.tensor([nan, 0.0, 3.0, 2.0, 1.5])
    for right in (False, True):
        check(lambda b, v: (torch.searchsorted(b, v, right=right), torch.bucketize(v, b, right=right)), b, v)
    gen = torch.Generator().manual_seed(0)
    seq = torch.randint(-3, 4, (3, 9), generator=gen).float()
    seq[torch.rand(seq.shape, generator=gen) < 0.3] = nan
    vals = torch.randint(-4, 5, (3, 6), generator=gen).float()
    vals[0, 0] = nan
    sorter = torch.argsort(torch.rand(seq.shape, generator=gen), -1)
    for side in ("left", "right"):
        check(lambda s, v: torch.searchsorted(s, v, side=side), seq, vals)  # (unsorted rows too)
        check(lambda s, v, o: torch.searchsorted(s, v, side=side, sorter=o), seq, vals, sorter)
        check(lambda s, v: torch.searchsorted(s, v, side=side), seq.sort(-1).values, vals)
        check(lambda s, v: torch.bucketize(v, s, right=side == "right"), seq[0], vals)
    check(lambda s, v: torch.searchsorted(s, v), torch.arange(1000), torch.randint(-5, 1005, (50,), generator=gen))
