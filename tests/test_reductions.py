"""Reductions (torchtpu/ops/lowerings/reductions.py) against PyTorch on the CPU.

Inputs are built on the CPU; `check` moves them to tpu.  Non-contiguous
inputs are made inside the checked function (transpose / step slicing are
views, so the reduction reads through a strided view on the device)."""

import math

import pytest
import torch

from utils import TPU, check

aten = torch.ops.aten
nan, inf = math.nan, math.inf

FLOATS = [torch.float32, torch.bfloat16]
ALL = [torch.float32, torch.bfloat16, torch.int64, torch.int32, torch.bool]


def make(shape, dtype, low=-4, high=5):
    if dtype.is_floating_point:
        return torch.randn(shape).to(dtype)
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    return torch.randint(low, high, shape, dtype=dtype)


def ties(shape, dtype):
    """Few distinct values (0, 1, 2; bool: False/True): many ties."""
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    return torch.randint(0, 3, shape).to(dtype)


def with_specials(x):
    """Float tensor with a NaN, +-inf and repeated values sprinkled in."""
    x = x.clone()
    flat = x.view(-1)
    flat[1] = nan
    flat[4] = inf
    flat[7] = -inf
    flat[9] = flat[10]
    return x


def noncontig(a):
    """A strided view of a (3, 4, 6) tensor: transposed and step-sliced."""
    return a.transpose(0, 2)[::2]


def raises_like(fn, *args):
    """fn raises the same exception type on the CPU and on tpu."""
    with pytest.raises(Exception) as cpu_err:
        fn(*args)
    with pytest.raises(type(cpu_err.value)):
        fn(*[a.to(TPU) if isinstance(a, torch.Tensor) else a for a in args])


# ------------------------------------------------------------------ sum / mean / prod / nansum

DIM_CASES = [
    dict(),
    dict(dim=0),
    dict(dim=-1, keepdim=True),
    dict(dim=(0, 2)),
    dict(dim=[]),  # [] reduces everything
]


@pytest.mark.parametrize("kw", DIM_CASES, ids=str)
def test_sum_dims(kw):
    check(lambda a: torch.sum(a, **kw), make((3, 4, 5), torch.float32))


@pytest.mark.parametrize("dtype", ALL[1:])
def test_sum_dtypes(dtype):
    check(lambda a: (a.sum(), a.sum((0, 2), keepdim=True)), make((3, 4, 5), dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bool])
def test_sum_noncontiguous(dtype):
    check(lambda a: noncontig(a).sum((0, 1)), make((3, 4, 6), dtype))


def test_sum_dtype_arg():
    check(lambda a: a.sum(1, dtype=torch.float64), make((3, 4), torch.float32))
    check(lambda a: a.sum(dtype=torch.float32), make((3, 4), torch.int32))
    check(lambda a: a.sum(0, dtype=torch.int32), make((3, 4), torch.int32))
    check(lambda a: a.sum(0, dtype=torch.bfloat16), torch.randn(7, 3) * 100)


def test_sum_int_wraps_and_bf16_accumulates_in_float32():
    check(lambda a: a.sum(), torch.full((8,), 2**62, dtype=torch.int64))  # wraps like the CPU
    # a bf16 accumulator would saturate at 256 (XLA:CPU upcasts bf16 math by
    # itself, so this one can only fail on a real accelerator)
    out = check(lambda a: a.sum(), torch.ones(4096, dtype=torch.bfloat16))
    assert out.item() == 4096.0


@pytest.mark.parametrize("kw", DIM_CASES, ids=str)
def test_mean_dims(kw):
    check(lambda a: torch.mean(a, **kw), make((3, 4, 5), torch.float32))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64])
def test_mean_dtypes(dtype):
    check(lambda a: (a.mean(), a.mean((0, 2), keepdim=True)), make((3, 4, 5), dtype))


def test_mean_dtype_and_errors():
    check(lambda a: a.mean(0, dtype=torch.float64), make((3, 4), torch.float32))
    check(lambda a: a.mean(dtype=torch.float32), make((3, 4), torch.bfloat16))
    check(lambda a: noncontig(a).mean(-1), make((3, 4, 6), torch.float32))
    raises_like(lambda a: a.mean(), make((3,), torch.int64))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.int32, torch.bool])
def test_prod(dtype):
    x = make((3, 4), dtype, -2, 3)
    check(lambda a: (a.prod(), a.prod(1)), x)
    if dtype == torch.float32:
        check(lambda a: (a.prod(0, keepdim=True), a.prod(-1, dtype=torch.float64)), x)


def test_prod_noncontiguous():
    check(lambda a: noncontig(a).prod(1), make((3, 4, 6), torch.float32))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_nansum(dtype):
    x = make((3, 4, 5), dtype)
    if dtype.is_floating_point:
        x[0, 1, 2] = nan
        x[2, :, 0] = nan
    check(lambda a: (a.nansum(), a.nansum(1), a.nansum((0, 2), keepdim=True)), x)


def test_empty_and_zero_dim():
    e = torch.empty(0, 3)
    check(lambda a: (a.sum(0), a.sum(), a.mean(0), a.prod(0), a.nansum(1), a.var(0)), e, equal_nan=True)
    check(lambda a: (a.amax(1), a.max(1), a.argmax(1), a.logsumexp(0), a.softmax(0)), e)
    s = torch.tensor(2.5)
    check(lambda a: (a.sum(0), a.sum([-1]), a.mean(-1), a.amax(0), a.max(0), a.argmax(0), a.argmin()), s)
    check(lambda a: (a.softmax(0), a.log_softmax(-1), a.logsumexp(0), a.var(0), a.norm(), a.prod(0)), s, equal_nan=True)
    check(lambda a: (a.any(0), a.all(), torch.count_nonzero(a, 0), torch.aminmax(a, dim=0)), s)


@pytest.mark.parametrize(
    "fn",
    [
        lambda a: a.amax(0),
        lambda a: a.amin(),
        lambda a: a.max(),
        lambda a: a.min(0),
        lambda a: a.argmax(),
        lambda a: a.argmax(0),
        lambda a: torch.aminmax(a),
        lambda a: torch.aminmax(a, dim=0),
    ],
)
def test_empty_without_identity_raises(fn):
    # The CPU raises IndexError or RuntimeError; ATen's meta kernels (which
    # run first on tpu) sometimes raise the other one for the same mistake.
    e = torch.empty(0, 3)
    with pytest.raises((IndexError, RuntimeError)):
        fn(e)
    with pytest.raises((IndexError, RuntimeError)):
        fn(e.to(TPU))


# ------------------------------------------------------------------ max / min / amax / amin / argmax


@pytest.mark.parametrize("dtype", ALL)
def test_amax_amin(dtype):
    x = make((3, 4, 5), dtype)
    check(lambda a: (a.amax(), a.amin((0, 2), keepdim=True)), x)
    if dtype == torch.float32:
        check(lambda a: (a.amax(1), a.amin(-1)), x)


@pytest.mark.parametrize("dtype", ALL)
def test_max_min_values_indices(dtype):
    # a small value range: plenty of ties, torch returns the first index
    x = ties((4, 6), dtype)
    check(lambda a: (a.max(1), a.min(0, keepdim=True)), x)
    if dtype in (torch.float32, torch.int64):
        check(lambda a: (a.max(), a.min(), a.max(-1, keepdim=True), a.min(1)), x)


def test_max_min_nan():
    x = with_specials(torch.randn(3, 5))
    x[2, 3] = nan  # second NaN in the row: the first one wins
    x[2, 1] = nan
    check(lambda a: (a.max(), a.min(), a.amax(1), a.amin(0), a.max(1), a.min(1), a.argmax(1), a.argmin(1)), x, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.int32])
def test_argmax_argmin(dtype):
    x = ties((4, 6), dtype)
    check(lambda a: (a.argmax(), a.argmin(0), a.argmax(-1, keepdim=True)), x)
    if dtype == torch.float32:
        check(lambda a: (a.argmin(), a.argmax(keepdim=True)), x)


def test_arg_and_max_noncontiguous():
    check(lambda a: (noncontig(a).argmax(1), noncontig(a).max(0), noncontig(a).amin(2)), make((3, 4, 6), torch.float32))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_aminmax(dtype):
    x = make((3, 4), dtype)
    check(lambda a: (torch.aminmax(a), torch.aminmax(a, dim=1), torch.aminmax(a, dim=0, keepdim=True)), x)


def test_dtype_errors_like_cpu():
    raises_like(lambda a: a.argmax(), make((3,), torch.bool))
    raises_like(lambda a: a.var(), make((3,), torch.int64))
    raises_like(lambda a: aten._softmax(a, 0, False), make((3,), torch.int64))
    raises_like(lambda a: a.amax(), torch.randn(3, dtype=torch.complex64))


# ------------------------------------------------------------------ var / std


@pytest.mark.parametrize(
    "kw",
    [dict(), dict(dim=1), dict(dim=(0, 2), keepdim=True), dict(dim=0, correction=0), dict(dim=-1, correction=2)],
    ids=str,
)
def test_var_mean_dims(kw):
    check(lambda a: torch.var_mean(a, **kw), make((3, 4, 5), torch.float32) * 3 + 1)


@pytest.mark.parametrize("dtype", FLOATS)
def test_var_std(dtype):
    x = make((3, 4, 5), dtype) * 3 + 1
    kw = dict(dim=(0, 2), correction=0)
    check(lambda a: (torch.var(a, 1), torch.std(a, **kw), torch.std_mean(a, keepdim=True), torch.var_mean(a, 1)), x)


def test_var_unbiased_flag_and_small_n():
    x = torch.randn(4, 5)
    check(lambda a: (a.var(unbiased=False), a.std(1, unbiased=True), a.var(0, keepdim=True)), x)
    # N - correction <= 0: inf / nan like the CPU
    check(lambda a: (a[:1].var(0), a[:1].std(0, correction=0), a[:2].var(0, correction=3)), x, equal_nan=True)
    check(lambda a: noncontig(a).std((0, 2)), make((3, 4, 6), torch.float32))


def test_var_correction_is_traced():
    x = torch.randn(6, 5)
    from torchtpu.ops import dispatch

    # Baked in for the first few values, then traced: bounded compilations.
    for c in range(dispatch.MAX_BAKED_VALUES + 1):
        check(lambda a: torch.var(a, 0, correction=c), x, equal_nan=True)
    before = dispatch.stats["compiles"]
    for c in (5, 7, 9):
        check(lambda a: torch.var(a, 0, correction=c), x, equal_nan=True)
    assert dispatch.stats["compiles"] == before


def test_var_complex():
    x = torch.randn(3, 4, dtype=torch.complex64)
    check(lambda a: (a.var(1), a.std(0)), x)


# ------------------------------------------------------------------ norms


@pytest.mark.parametrize("ord", [2, 1, 0, inf, -inf, 3, 0.5, -1])
def test_vector_norm(ord):
    x = torch.randn(3, 4, 5)
    x[0, 0, 0] = 0.0
    check(lambda a: (torch.linalg.vector_norm(a, ord), torch.linalg.vector_norm(a, ord, dim=(0, 2), keepdim=True)), x)


def test_norm_variants():
    x = torch.randn(3, 4)
    check(lambda a: (a.norm(), a.norm(1), a.norm(dim=1), a.norm(inf, dim=0, keepdim=True), a.norm(p=3, dim=[])), x)
    check(lambda a: (torch.norm(a, 2, dtype=torch.float64), torch.norm(a, 1, dim=1, dtype=torch.float64)), x)
    check(lambda a: torch.linalg.vector_norm(a, 2, dim=0, dtype=torch.float64), x)
    check(lambda a: (a.norm(), torch.linalg.vector_norm(a, inf, 1)), x.to(torch.bfloat16))
    check(lambda a: noncontig(a).norm(dim=(0, 1)), make((3, 4, 6), torch.float32))


def test_norm_with_specials():
    x = with_specials(torch.randn(3, 4))
    x[1, :] = 0.0
    check(lambda a: [torch.linalg.vector_norm(a, o, dim=1) for o in (2, 1, 0, inf, -inf, 3)], x, equal_nan=True)


# ------------------------------------------------------------------ logsumexp


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_logsumexp(dtype):
    x = make((3, 4, 5), dtype) * (1 if dtype.is_floating_point else 20)
    check(lambda a: (a.logsumexp(1), a.logsumexp((0, 2), keepdim=True), a.logsumexp(-1)), x)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_logsumexp_16_bit_rounds_like_aten(dtype):
    # ATen's logsumexp is a composite that rounds to the 16-bit type after
    # each op (CUDA runs the same composite): bit-exact, not just close.
    x = (torch.randn(50, 7, 9, generator=torch.Generator().manual_seed(0)) * 3).to(dtype)
    for dim in (0, 1, (1, 2)):
        assert torch.equal(x.to(TPU).logsumexp(dim).cpu(), x.logsumexp(dim)), dim


def test_logsumexp_infinities():
    x = torch.randn(5, 3) * 50
    x[0] = -inf  # all -inf row: -inf
    x[1, 1] = inf  # +inf: inf
    x[2, 0] = nan
    x[3, 2] = -inf
    check(lambda a: (a.logsumexp(1), a.logsumexp(0)), x, equal_nan=True)


# ------------------------------------------------------------------ any / all / count_nonzero


def any_all_input(dtype):
    x = make((3, 4, 5), dtype, 0, 2)
    if dtype.is_floating_point:
        x = (x > 0).float()
        x[0, 0, 0] = nan  # NaN is true
    x[1] = 1  # an all-true slice
    x[2, 0] = 0  # and an all-false row
    return x


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.uint8])
def test_any_all_dtypes(dtype):
    check(lambda a: (a.any(), a.all(1), a.any((0, 2))), any_all_input(dtype))


def test_any_all():
    check(
        lambda a: (
            a.any(),
            a.all(),
            a.any(1),
            a.all(-1, keepdim=True),
            a.any((0, 2)),
            a.all((1,), keepdim=True),
            torch.any(a, dim=()),  # [] reduces nothing for any/all
            torch.all(a, dim=None),
        ),
        any_all_input(torch.bool),
    )


def test_any_all_noncontiguous():
    check(lambda a: (noncontig(a).any(0), noncontig(a).all(2)), make((3, 4, 6), torch.bool))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_count_nonzero(dtype):
    x = make((3, 4, 5), dtype, -1, 2)
    check(lambda a: torch.count_nonzero(a, (0, 2)), x)
    if dtype == torch.float32:
        check(lambda a: (torch.count_nonzero(a), torch.count_nonzero(a, 1), torch.count_nonzero(a, [])), x)


# ------------------------------------------------------------------ softmax family


@pytest.mark.parametrize("dtype", FLOATS + [torch.float64])
def test_softmax_log_softmax(dtype):
    x = make((3, 4, 5), dtype) * 4
    check(lambda a: (a.softmax(1), a.log_softmax(-1)), x)
    if dtype == torch.float32:
        check(lambda a: (a.softmax(0), torch.log_softmax(a, 2)), x)


def test_softmax_special_values_and_dtype():
    x = torch.randn(4, 5)
    x[0] = -inf  # all -inf: NaN, like ATen
    x[1, 2] = -inf
    x[2, 3] = inf
    x[3, 0] = nan
    check(lambda a: (a.softmax(1), a.log_softmax(1)), x, equal_nan=True)
    check(lambda a: (a.softmax(1, dtype=torch.float64), a.log_softmax(0, dtype=torch.float32)), torch.randn(3, 4).bfloat16())
    check(lambda a: (noncontig(a).softmax(1), noncontig(a).log_softmax(0)), make((3, 4, 6), torch.float32))


def test_safe_softmax():
    x = torch.randn(4, 5)
    x[0] = -inf  # all -inf: 0 instead of NaN
    x[1, 2] = -inf
    check(lambda a: (aten._safe_softmax(a, 1), aten._safe_softmax(a, 0, torch.float64)), x)


@pytest.mark.parametrize("dtype", FLOATS)
def test_softmax_backward_data(dtype):
    g = torch.randn(3, 4, 5).to(dtype)
    y = torch.randn(3, 4, 5).softmax(1).to(dtype)
    ly = torch.randn(3, 4, 5).log_softmax(2).to(dtype)
    check(
        lambda g, y, ly: (
            aten._softmax_backward_data(g, y, 1, dtype),
            aten._log_softmax_backward_data(g, ly, 2, dtype),
        ),
        g,
        y,
        ly,
    )


# ------------------------------------------------------------------ out= variants


def test_histogram_family_matches_cpu():
    # Values are also covered by the OpInfo suite; this pins the cases it
    # samples lightly: weights with density, given edges, histogramdd.
    torch.manual_seed(0)
    x, w, p = torch.randn(50), torch.rand(50), torch.randn(30, 3)
    check(lambda t: torch.histogram(t, 7), x)
    check(lambda t: torch.histogram(t, 7, range=(-1.0, 1.0)), x)
    check(lambda t, u: torch.histogram(t, 5, weight=u, density=True), x, w)
    check(lambda t, e: torch.histogram(t, e), x, torch.tensor([-2.0, -0.5, 0.0, 0.3, 2.0]))
    check(lambda t: torch.histogram(t, 4), torch.ones(4))  # equal extremes widen by 0.5
    check(lambda t: torch.histogram(t, 4), torch.tensor([]))
    check(lambda t: torch.histogramdd(t, [2, 3, 4]), p)
    check(lambda t: torch.histogramdd(t, [2, 3, 4], range=[-1.0, 1.0, -2.0, 2.0, 0.0, 1.0], density=True), p)
    check(lambda t, a, b, c: torch.histogramdd(t, [a, b, c]), p,
          torch.tensor([-1.0, 0.0, 1.0]), torch.tensor([-2.0, 2.0]), torch.tensor([-0.5, 0.0, 0.5, 1.0]))


def test_histogram_of_non_finite_data_is_a_device_side_error():
    x = torch.tensor([1.0, inf], device=TPU)
    torch.histogram(x, 3)
    with pytest.raises(RuntimeError, match="dimension 0's range is not finite"):
        torch.tpu.synchronize()
    with pytest.raises(RuntimeError, match="min should not exceed max"):
        torch.histogram(x, 3, range=(2.0, 1.0))


@pytest.mark.parametrize("bad", [inf, float("nan")])
def test_histc_of_non_finite_data_is_a_device_side_error(bad):
    # (it counted the finite values, where ATen raises on the CPU and on CUDA)
    torch.histc(torch.tensor([1.0, bad, 2.0], device=TPU), bins=4)
    with pytest.raises(RuntimeError, match="torch.histc: range of .* is not finite"):
        torch.tpu.synchronize()
    counts = torch.histc(torch.tensor([1.0, bad, 2.0], device=TPU), bins=4, min=0, max=4)  # a given range: fine
    assert counts.tolist() == torch.histc(torch.tensor([1.0, bad, 2.0]), bins=4, min=0, max=4).tolist()


def test_out_variants():
    def fn(a, o, v, i, b):
        torch.sum(a, 0, out=o)
        torch.max(a, 1, out=(v, i))
        torch.any(a > 0, 1, out=b)
        return o, v, i, b

    x = torch.randn(3, 4)
    check(fn, x, torch.empty(4), torch.empty(3), torch.empty(3, dtype=torch.int64), torch.empty(3, dtype=torch.bool))

    def fn2(a, o1, o2, o3, o4):
        torch.amax(a, 1, out=o1)  # o1 gets resized
        torch.argmin(a, 0, out=o2)
        torch.var(a, 1, out=o3)
        torch.logsumexp(a, 0, out=o4)
        return o1, o2, o3, o4

    check(fn2, x, torch.empty(0), torch.empty(4, dtype=torch.int64), torch.empty(3), torch.empty(4))

    def fn3(a, o1, o2, o3):
        torch.mean(a, (0, 1), keepdim=True, out=o1)
        torch.prod(a, 1, out=o2[1])  # writes through a view of a bigger tensor
        torch.linalg.vector_norm(a, 1, 0, out=o3)
        return o1, o2, o3

    check(fn3, x, torch.empty(1, 1), torch.zeros(2, 3), torch.empty(4))


# ------------------------------------------------------------------ gradients
# Autograd formulas of reductions also call other families' ops (expand,
# mul, div, eq, scatter, ...); the checks are strict (no CPU fallback).


@pytest.mark.parametrize(
    "fn",
    [
        lambda a: a.sum(1),
        lambda a: a.mean((0, 2)),
        lambda a: a.amax(1),
        lambda a: a.max(2)[0],
        lambda a: a.max(),
        lambda a: a.var(1),
        lambda a: a.std(0, correction=0),
        lambda a: torch.var_mean(a, -1),
        lambda a: a.norm(dim=1),
        lambda a: torch.linalg.vector_norm(a, 3, dim=0),
        lambda a: a.logsumexp(1),
        lambda a: a.prod(1),
        lambda a: a.nansum(0),
    ],
)
def test_grad(fn):
    x = torch.randn(3, 4, 5, requires_grad=True)
    check(fn, x, grad=True)


def test_grad_softmax():
    x = torch.randn(3, 5, requires_grad=True)
    check(lambda a: a.softmax(1), x, grad=True)
    check(lambda a: a.log_softmax(0), x, grad=True)
    # bf16 forward, float32 leaf: bf16 tolerances on the gradient
    check(lambda a: a.bfloat16().softmax(0), x, grad=True, atol=1e-2, rtol=1.6e-2)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_norm_in_a_complex_dtype_keeps_the_imaginary_part(dtype):
    x = torch.randn(5, dtype=torch.complex64)
    for ord in (1, 2, 3, float("inf")):
        want = torch.linalg.vector_norm(x, ord, dtype=dtype)
        got = torch.linalg.vector_norm(x.to("tpu"), ord, dtype=dtype)
        assert got.dtype == want.dtype
        torch.testing.assert_close(got.cpu(), want)
    torch.testing.assert_close(torch.norm(x.to("tpu"), 2, dtype=dtype).cpu(), torch.norm(x, 2, dtype=dtype))
