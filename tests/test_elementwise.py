"""Pointwise math lowerings (torchtpu/ops/lowerings/elementwise.py) against the CPU."""


import pytest
import torch
from utils import TPU
from utils import check as _check


def check(fn, *args, **kw):
    """utils.check, with NaN == NaN (many cases here produce NaN on purpose)."""
    kw.setdefault("equal_nan", True)
    return _check(fn, *args, **kw)


NAN = float("nan")
INF = float("inf")

# Awkward float values: signed zeros, halves (rounding), infinities, NaN.
SPECIAL = torch.tensor([0.0, -0.0, 0.5, -0.5, 1.5, -2.5, 2.5, 3.7, -3.7, 1e-30, 1e30, INF, -INF, NAN])


def rand(*shape, dtype=torch.float32, low=-3.0, high=3.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(*shape, generator=g, dtype=torch.float64) * (high - low) + low
    if dtype.is_floating_point:
        return x.to(dtype)
    if dtype == torch.bool:
        return x > (low + high) / 2
    return x.round().to(dtype)


def rand_int(*shape, dtype=torch.int64, low=-20, high=20, seed=0, nonzero=False):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(low, high, shape, generator=g, dtype=dtype)
    if nonzero:
        x = torch.where(x == 0, torch.ones_like(x), x)
    return x


def grad_input(*shape, low=-3.0, high=3.0, seed=0):
    return rand(*shape, low=low, high=high, seed=seed).requires_grad_(True)


# ------------------------------------------------------------------ unary float ops

# name -> (function, domain)
UNARY_FLOAT = {
    "sqrt": (torch.sqrt, (0.1, 4)),
    "rsqrt": (torch.rsqrt, (0.1, 4)),
    "exp": (torch.exp, (-3, 3)),
    "exp2": (torch.exp2, (-3, 3)),
    "expm1": (torch.expm1, (-3, 3)),
    "log": (torch.log, (0.1, 4)),
    "log2": (torch.log2, (0.1, 4)),
    "log10": (torch.log10, (0.1, 4)),
    "log1p": (torch.log1p, (-0.5, 4)),
    "sin": (torch.sin, (-3, 3)),
    "cos": (torch.cos, (-3, 3)),
    "tan": (torch.tan, (-1.2, 1.2)),
    "asin": (torch.asin, (-0.9, 0.9)),
    "acos": (torch.acos, (-0.9, 0.9)),
    "atan": (torch.atan, (-3, 3)),
    "sinh": (torch.sinh, (-3, 3)),
    "cosh": (torch.cosh, (-3, 3)),
    "tanh": (torch.tanh, (-3, 3)),
    "asinh": (torch.asinh, (-3, 3)),
    "acosh": (torch.acosh, (1.1, 4)),
    "atanh": (torch.atanh, (-0.9, 0.9)),
    "erf": (torch.erf, (-2, 2)),
    "erfc": (torch.erfc, (-2, 2)),
    "erfinv": (torch.erfinv, (-0.9, 0.9)),
    "sigmoid": (torch.sigmoid, (-5, 5)),
    "reciprocal": (torch.reciprocal, (0.5, 3)),
    "lgamma": (torch.lgamma, (0.5, 4)),
    "digamma": (torch.digamma, (0.5, 4)),
    "sinc": (torch.sinc, (-3, 3)),
    "logit": (torch.logit, (0.05, 0.95)),
}


@pytest.mark.parametrize("name", sorted(UNARY_FLOAT))
def test_unary_float(name):
    fn, (lo, hi) = UNARY_FLOAT[name]
    # float32 with gradient
    check(fn, grad_input(5, 6, low=lo, high=hi), grad=True)
    # non-contiguous (transposed) and bfloat16
    check(lambda x: fn(x.t()), rand(6, 5, low=lo, high=hi, seed=1))
    check(fn, rand(7, dtype=torch.bfloat16, low=lo, high=hi, seed=2))


@pytest.mark.parametrize("name", ["sqrt", "exp", "sin", "sigmoid", "reciprocal", "log1p"])
def test_unary_float_int_input_promotes(name):
    fn, _ = UNARY_FLOAT[name]
    out = check(fn, rand_int(9, low=1, high=6))
    assert out.dtype == torch.float32


def test_unary_float_special_values():
    for fn in (torch.sqrt, torch.exp, torch.log, torch.sigmoid, torch.tanh, torch.reciprocal, torch.erfinv):
        check(fn, SPECIAL)


def test_logit_eps():
    x = torch.tensor([0.0, 1e-8, 0.3, 1.0, 0.99999, NAN])
    check(lambda t: torch.logit(t, eps=1e-6), x)
    check(lambda t: torch.logit(t, 0.1), grad_input(4, 5, low=0.01, high=0.99), grad=True)


# ------------------------------------------------------------- unary same-dtype


@pytest.mark.parametrize("name", ["neg", "abs", "sign", "sgn", "ceil", "floor", "round", "trunc", "frac"])
def test_unary_same(name):
    fn = getattr(torch, name)
    check(fn, SPECIAL)
    check(fn, rand(4, 5, dtype=torch.bfloat16, seed=3))
    if name != "frac":
        out = check(fn, rand_int(11))
        assert out.dtype == torch.int64
    if name in ("neg", "abs", "sign"):
        check(fn, grad_input(4, 5), grad=True)


def test_unary_small_ints_wrap():
    x = torch.tensor([-128, -1, 0, 5, 127], dtype=torch.int8)
    check(torch.neg, x)
    check(torch.abs, x)
    check(torch.sign, torch.tensor([True, False]))


def test_round_decimals():
    x = torch.tensor([0.125, 0.135, 1234.5678, -2.675, 1250.0, 1350.0, -0.0, NAN, INF])
    for d in (0, 1, 2, 3, -1, -2):
        check(lambda t: torch.round(t, decimals=d), x)
    check(lambda t: torch.round(t, decimals=1), rand(9, dtype=torch.bfloat16))


def test_bitwise_and_logical_not():
    check(torch.bitwise_not, rand_int(10))
    check(torch.bitwise_not, torch.tensor([0, 1, 255], dtype=torch.uint8))
    check(torch.bitwise_not, torch.tensor([True, False]))
    check(torch.logical_not, SPECIAL)
    check(torch.logical_not, rand_int(10, low=-2, high=2))


def test_classification():
    for fn in (torch.isnan, torch.isinf, torch.isfinite, torch.isposinf, torch.isneginf, torch.signbit):
        check(fn, SPECIAL)
        check(fn, SPECIAL.to(torch.bfloat16))
        check(fn, rand_int(7))
    check(torch.signbit, torch.tensor([True, False]))


def test_nan_to_num():
    x = SPECIAL
    check(torch.nan_to_num, x)
    check(lambda t: torch.nan_to_num(t, nan=1.5, posinf=100.0, neginf=-7.0), x)
    check(lambda t: torch.nan_to_num(t, posinf=1e300), x)
    check(torch.nan_to_num, x.to(torch.bfloat16))
    check(torch.nan_to_num, x.to(torch.float64))
    check(torch.nan_to_num, rand_int(5))
    check(lambda t: t.nan_to_num_(2.0), x.clone())


# ------------------------------------------------------------------ arithmetic

DTYPE_PAIRS = [
    (torch.float32, torch.float32),
    (torch.float32, torch.bfloat16),
    (torch.bfloat16, torch.bfloat16),
    (torch.int64, torch.int32),
    (torch.int32, torch.float32),
    (torch.bool, torch.int64),
    (torch.float16, torch.float64),
]


def operand(dtype, shape, seed, nonzero=False):
    if dtype.is_floating_point:
        x = rand(*shape, dtype=dtype, seed=seed)
        if nonzero:
            x = torch.where(x.abs() < 0.25, torch.ones_like(x), x)
        return x
    if dtype == torch.bool:
        return rand(*shape, dtype=torch.bool, seed=seed) | nonzero
    return rand_int(*shape, dtype=dtype, seed=seed, nonzero=nonzero)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
@pytest.mark.parametrize("dtypes", DTYPE_PAIRS, ids=lambda d: f"{d[0]}-{d[1]}".replace("torch.", ""))
def test_arith_promotion(op, dtypes):
    da, db = dtypes
    a = operand(da, (3, 4), 0)
    b = operand(db, (4,), 1, nonzero=op == "div")
    if op == "sub" and torch.bool in dtypes:  # torch forbids it: same error on tpu
        with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with"):
            torch.sub(a, b)
        with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with"):
            torch.sub(a.to("tpu"), b.to("tpu"))
        return
    out = check(getattr(torch, op), a, b)
    assert out.dtype == torch.result_type(a, b) or op == "div"


def test_arith_bool():
    a = torch.tensor([True, True, False, False])
    b = torch.tensor([True, False, True, False])
    check(torch.add, a, b)
    check(torch.mul, a, b)
    check(lambda x, y: torch.add(x, y, alpha=True), a, b)


def test_arith_python_scalars():
    f = rand(3, 4)
    i = rand_int(3, 4)
    h = rand(3, 4, dtype=torch.bfloat16)
    for x in (f, i, h):
        check(lambda t: t + 2, x)
        check(lambda t: t * 2.5, x)
        check(lambda t: t - 1.25, x)
        check(lambda t: t / 3, x)
        check(lambda t: 7 - t, x)
        check(lambda t: 2 / t, x.clamp(min=1) if x.dtype == torch.int64 else x + 10)
        check(lambda t: torch.add(t, 3, alpha=2), x)
        check(lambda t: torch.sub(t, t, alpha=3), x)
    check(lambda t: t + True, i)
    check(lambda t: t * 0.1, h)  # the scalar is not rounded to bf16 first


def test_arith_zero_dim_tensors():
    i = rand_int(3, 4)
    h = rand(3, 4, dtype=torch.bfloat16)
    f64_scalar = torch.tensor(1.5, dtype=torch.float64)
    # 0-dim tensors do not promote dimensioned tensors within the same category
    out = check(lambda t, s: t * s, h, f64_scalar)
    assert out.dtype == torch.bfloat16
    out = check(lambda t, s: t + s, i, torch.tensor(2.5))
    assert out.dtype == torch.float32
    # CPU 0-dim tensor mixed with tpu tensors (as torch allows for CPU scalars)
    x = rand(3, 4).to(TPU)
    s = torch.tensor(3.0)
    torch.testing.assert_close((x * s).cpu(), x.cpu() * s)
    torch.testing.assert_close((x + s).cpu(), x.cpu() + s)


def test_arith_broadcast_noncontiguous():
    a = rand(4, 6)
    b = rand(6, 4, seed=1)
    check(lambda x, y: x + y.t(), a, b)
    check(lambda x, y: x[:, ::2] * y.t()[:, 1::2], a, b)
    check(lambda x, y: x.unsqueeze(1) - y.t()[0], a, b)
    check(lambda x, y: x.expand(2, 4, 6) / y.t()[None, 1:2, :], a, b)


def test_arith_grad():
    a = grad_input(3, 4, seed=0)
    b = grad_input(3, 4, low=0.5, high=2, seed=1)
    check(lambda x, y: x + y * 2, a, b, grad=True)
    check(lambda x, y: torch.sub(x, y, alpha=0.5), a, b, grad=True)
    check(lambda x, y: x * y, a, b, grad=True)
    check(lambda x, y: x / y, a, b, grad=True)
    check(lambda x, y: 3 - x / 2, a, b, grad=True)


def test_arith_inplace_and_out():
    a = rand(3, 4)
    b = rand(3, 4, seed=1)
    check(lambda x, y: x.add_(y), a, b)
    check(lambda x, y: x.add_(y[0], alpha=2), a, b)  # broadcast into self
    check(lambda x, y: x.mul_(2.5).sub_(y).div_(3), a, b)
    check(lambda x, y: x.t().add_(y.t()), a, b)  # through a transposed view
    check(lambda x, y: (x[:, 1:3].mul_(y[:, :2]), x), a, b)  # slice of a tensor; whole base changes
    check(lambda x, y: x.add_(torch.tensor(2.0, dtype=torch.float64)), a, b)
    check(lambda x: x.add_(1), rand_int(5))
    check(lambda x: x.floor_divide_(3), rand_int(9))

    def out_same(x, y):
        out = torch.empty(3, 4, device=x.device)
        return torch.add(x, y, out=out), out

    def out_f64(x, y):
        out = torch.empty(3, 4, dtype=torch.float64, device=x.device)
        torch.mul(x, y, out=out)
        return out

    def out_resize(x, y):
        out = torch.empty(0, device=x.device)
        torch.div(x, y, out=out)
        return out

    def out_int(x, y):
        out = torch.empty(4, dtype=torch.int32, device=x.device)
        torch.sub(x[0].long(), 2, out=out)
        return out

    check(out_same, a, b)
    check(out_f64, a, b)
    check(out_resize, a, b)
    check(out_int, rand_int(3, 4), b)


def test_arith_invalid_inplace_promotion_raises():
    i = rand_int(4).to(TPU)
    with pytest.raises(RuntimeError):
        i.add_(1.5)
    with pytest.raises(RuntimeError):
        i.div_(2)
    with pytest.raises(RuntimeError):
        torch.tensor([True]).to(TPU) - torch.tensor([False]).to(TPU)


# ------------------------------------------------------------- division modes

FLOAT_NUM = torch.tensor([5.0, -5.0, 5.0, -5.0, 0.0, -0.0, 1.0, -1.0, 7.5, -7.5, 1e-30, 3.0, INF, NAN, 1.0])
FLOAT_DEN = torch.tensor([3.0, 3.0, -3.0, -3.0, -2.0, 2.0, 0.0, 0.0, 2.5, 2.5, 3.0, INF, 2.0, 1.0, -0.0])
INT_NUM = torch.tensor([7, -7, 7, -7, 0, 6, -6, 1, -1, 100])
INT_DEN = torch.tensor([2, 2, -2, -2, 3, 3, -3, 5, 5, -7])


@pytest.mark.parametrize("mode", [None, "trunc", "floor"])
def test_div_rounding_modes(mode):
    check(lambda x, y: torch.div(x, y, rounding_mode=mode), FLOAT_NUM, FLOAT_DEN)
    check(lambda x, y: torch.div(x, y, rounding_mode=mode), INT_NUM, INT_DEN)
    check(lambda x, y: torch.div(x, y, rounding_mode=mode), INT_NUM.to(torch.int8), INT_DEN.to(torch.int8))
    check(lambda x: torch.div(x, 3, rounding_mode=mode), INT_NUM)
    check(lambda x: torch.div(x, -2.5, rounding_mode=mode), FLOAT_NUM)
    check(lambda x, y: torch.div(x, y, rounding_mode=mode), rand(20, dtype=torch.bfloat16), rand(20, seed=1) + 4)
    check(lambda x, y: torch.div(x, y, rounding_mode=mode), rand(20, seed=2) * 100, rand(20, seed=3))


def test_div_mode_grad_and_inplace():
    a = grad_input(3, 4)
    b = grad_input(3, 4, low=1, high=2, seed=1)
    check(lambda x, y: torch.div(x, y, rounding_mode="floor"), a, b, grad=True)
    check(lambda x, y: x.div_(y, rounding_mode="trunc"), rand(3, 4), rand(3, 4, seed=1))


def test_floor_divide():
    check(torch.floor_divide, FLOAT_NUM, FLOAT_DEN)
    check(torch.floor_divide, INT_NUM, INT_DEN)
    check(lambda x: x // 4, INT_NUM)
    check(lambda x: x // -1.5, FLOAT_NUM)


def test_remainder_fmod():
    for fn in (torch.remainder, torch.fmod):
        check(fn, FLOAT_NUM, FLOAT_DEN)
        check(fn, INT_NUM, INT_DEN)
        check(fn, INT_NUM.to(torch.int16), INT_DEN.to(torch.int16))
        check(lambda x: fn(x, -3), INT_NUM)
        check(lambda x: fn(x, 2.5), FLOAT_NUM)
        check(lambda x: fn(x, 1.5), INT_NUM)  # int tensor, float scalar: float result
        check(fn, rand(16, dtype=torch.bfloat16) * 10, rand(16, dtype=torch.bfloat16, seed=1) + 4)
        check(fn, grad_input(3, 4) * 5, grad_input(3, 4, low=1, high=2, seed=1), grad=True)
    check(lambda x: 5 % x, INT_DEN)  # remainder.Scalar_Tensor
    check(lambda x: torch.remainder(-7.5, x), FLOAT_DEN)
    check(lambda x, y: x.remainder_(y), rand(5) * 10, rand(5, seed=1) + 1)


# A Scalar divisor is converted to the result dtype before ATen's zero check:
# 256 is 0 in int8, 2**40 in int16, -256 in uint8, 2**32 in int32.
ZERO_AFTER_CONVERSION = {
    "int8 // 256": lambda d: torch.tensor([-113, 50, 7], dtype=torch.int8, device=d) // 256,
    "0-dim int16 // 2**40": lambda d: torch.tensor(5, dtype=torch.int16, device=d) // 2**40,
    "uint8 // -256": lambda d: torch.tensor([3, 4], dtype=torch.uint8, device=d) // -256,
    "int8 // 0-dim int64 256": lambda d: torch.tensor([3, 4], dtype=torch.int8, device=d) // torch.tensor(256),
    "div floor": lambda d: torch.div(torch.tensor([-113, 50], dtype=torch.int8, device=d), 256, rounding_mode="floor"),
    "div_ trunc": lambda d: torch.tensor([-113, 50], dtype=torch.int8, device=d).div_(256, rounding_mode="trunc"),
    "remainder": lambda d: torch.remainder(torch.tensor([-113, 50], dtype=torch.int8, device=d), 256),
    "remainder_ int32": lambda d: torch.tensor([5], dtype=torch.int32, device=d).remainder_(2**32),
    "fmod": lambda d: torch.fmod(torch.tensor([-113, 50], dtype=torch.int8, device=d), 256),
    "fmod_": lambda d: torch.tensor([-113, 50], dtype=torch.int8, device=d).fmod_(-256),
}


@pytest.mark.parametrize("name", sorted(ZERO_AFTER_CONVERSION))
def test_integer_division_by_a_scalar_that_converts_to_zero_raises(name):
    fn = ZERO_AFTER_CONVERSION[name]
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        fn("cpu")
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        fn(TPU).cpu()  # (a device-side check: raised at the synchronization)


def test_integer_division_by_a_scalar_that_converts_to_nonzero():
    check(lambda x: (x // 257, x % 257, torch.fmod(x, -255)), torch.tensor([-113, 50, 7], dtype=torch.int8))


# ------------------------------------------------------------------------ pow


def test_pow_tensor_tensor():
    check(torch.pow, rand(3, 4, low=0.1, high=3), rand(3, 4, seed=1))
    base = torch.tensor([NAN, 1.0, -2.0, 0.0, -8.0, INF, 0.0])
    check(torch.pow, base, torch.tensor([0.0, NAN, 0.5, -1.0, 3.0, -1.0, 0.0]))
    # integer pow: wrap-around and negative exponents (0, except bases 1 and -1)
    base = torch.tensor([2, 3, -1, -1, 1, 2, 0, -3, 10, 7])
    exp = torch.tensor([3, 2, -3, -4, -5, -1, 0, 5, 20, 40])
    check(torch.pow, base, exp)
    check(torch.pow, base.to(torch.int32), exp.to(torch.int32))
    check(torch.pow, torch.tensor([2, -3, 5], dtype=torch.int8), torch.tensor([7, 3, 4], dtype=torch.int8))
    check(torch.pow, rand_int(6, low=1, high=4), rand(6, seed=1))  # int ** float tensor -> float
    check(torch.pow, rand(6, dtype=torch.bfloat16, low=0.5, high=2), rand(6, dtype=torch.bfloat16, seed=1))
    check(torch.pow, grad_input(3, 4, low=0.5, high=2), grad_input(3, 4, seed=1), grad=True)


@pytest.mark.parametrize("e", [2, 3, 0.5, -0.5, -1, -2, 1.7, 0, 1, -3.3])
def test_pow_tensor_scalar(e):
    x = torch.cat([rand(8, low=0.1, high=3), torch.tensor([0.0, -0.0, INF, NAN, -2.0])])
    check(lambda t: t**e, x)
    check(lambda t: t**e, rand(8, dtype=torch.bfloat16, low=0.1, high=3))


def test_pow_scalar_variants():
    check(lambda t: t**2, rand_int(6))
    check(lambda t: t**3, rand_int(6, dtype=torch.int32))
    check(lambda t: t**0.5, rand_int(6, low=0, high=9))  # int ** float scalar -> float
    check(lambda t: 2**t, rand(6))  # pow.Scalar
    check(lambda t: 2**t, rand_int(6, low=0, high=10))
    check(lambda t: 1.5**t, rand_int(6))
    check(lambda t: t**2.5, grad_input(3, 4, low=0.5, high=2), grad=True)
    check(lambda t: t**2, grad_input(3, 4), grad=True)
    check(lambda t: 3.0**t, grad_input(3, 4), grad=True)
    check(lambda t: torch.square(t), grad_input(3, 4), grad=True)
    check(lambda t: t.pow_(2), rand(5))
    check(lambda t: t.pow_(3), rand_int(5))


# ------------------------------------------------------------ other binary math


def test_binary_float_ops():
    a = rand(3, 4)
    b = rand(3, 4, seed=1)
    for fn in (torch.atan2, torch.hypot, torch.copysign, torch.logaddexp, torch.logaddexp2):
        check(fn, a, b)
        check(fn, a.to(torch.bfloat16), b[0].to(torch.bfloat16))
        check(fn, grad_input(3, 4), grad_input(3, 4, seed=1), grad=True)
    check(torch.atan2, rand_int(5), rand_int(5, seed=1))  # ints promote to float
    check(torch.copysign, SPECIAL, -SPECIAL.flip(0))
    check(lambda x: torch.copysign(x, -1), rand_int(5))
    check(torch.hypot, SPECIAL, SPECIAL.flip(0))


def test_xlogy():
    x = torch.tensor([0.0, 0.0, 1.0, 2.0, 0.0, 3.0, NAN])
    y = torch.tensor([0.0, NAN, 0.0, 3.0, -1.0, INF, 1.0])
    check(torch.xlogy, x, y)
    check(lambda t: torch.xlogy(t, 2.5), x)
    check(lambda t: torch.xlogy(2, t), y)
    check(torch.xlogy, rand_int(5, low=0, high=4), rand_int(5, low=1, high=4, seed=1))
    check(torch.xlogy, grad_input(3, 4), grad_input(3, 4, low=0.5, high=2, seed=1), grad=True)


def test_max_min_nan_propagation():
    a = torch.tensor([1.0, NAN, 3.0, NAN, -0.0, INF])
    b = torch.tensor([NAN, 2.0, 1.0, NAN, 0.0, 5.0])
    for fn in (torch.maximum, torch.minimum, torch.fmax, torch.fmin):
        check(fn, a, b)
        check(fn, rand_int(3, 4), rand_int(4, seed=1))
        check(fn, rand_int(5), rand(5, seed=1))  # promotion
        check(fn, rand(5, dtype=torch.bfloat16), rand(5, seed=1))
    check(torch.maximum, torch.tensor([True, False, False]), torch.tensor([False, False, True]))
    check(torch.maximum, grad_input(3, 4), grad_input(3, 4, seed=1), grad=True)
    check(torch.minimum, grad_input(3, 4), grad_input(3, 4, seed=1), grad=True)


def test_heaviside():
    x = torch.tensor([-1.5, 0.0, -0.0, 2.0, NAN, INF])
    check(torch.heaviside, x, torch.tensor([0.5]))
    check(torch.heaviside, x, torch.full((6,), 7.0))
    check(torch.heaviside, rand_int(6, low=-2, high=2), torch.tensor([9]))


def test_bitwise_binary():
    a = rand_int(4, 5, low=-100, high=100)
    b = rand_int(4, 5, low=-100, high=100, seed=1)
    for fn in (torch.bitwise_and, torch.bitwise_or, torch.bitwise_xor):
        check(fn, a, b)
        check(fn, a.to(torch.uint8), b.to(torch.uint8))
        check(fn, a.to(torch.int32), b[0])  # int32 with int64 -> int64
        check(fn, a > 0, b > 0)
        check(lambda x: fn(x, 12), a)
        check(lambda x: fn(x, True), a > 0)
    check(lambda x, y: x & y, a, b)
    check(lambda x, y: x | y, a > 0, b > 0)
    check(lambda x, y: x ^ y, a, b)
    check(lambda x, y: x.bitwise_and_(y), a, b)


def test_shifts():
    a = torch.tensor([5, -5, 5, -5, 1, -1, 123456789, 7])
    s = torch.tensor([1, 1, 70, 70, 63, 63, 3, -1])
    check(torch.bitwise_left_shift, a, s)
    check(torch.bitwise_right_shift, a, s)
    check(lambda x, y: x << y, a, s)
    check(lambda x, y: x >> y, a, s)
    a8 = torch.tensor([5, -5, 100, -100, 127], dtype=torch.int8)
    s8 = torch.tensor([1, 9, 2, 3, 8], dtype=torch.int8)
    check(lambda x, y: x << y, a8, s8)
    check(lambda x, y: x >> y, a8, s8)
    u8 = torch.tensor([255, 128, 3, 1], dtype=torch.uint8)
    su = torch.tensor([9, 200, 1, 7], dtype=torch.uint8)
    check(lambda x, y: x << y, u8, su)
    check(lambda x, y: x >> y, u8, su)
    check(lambda x: x << 3, a)
    check(lambda x: x >> 2, a)
    check(lambda x: torch.bitwise_left_shift(3, x), torch.tensor([0, 1, 4]))
    check(lambda x: x.__ilshift__(2), a.clone())


# ------------------------------------------------------- comparisons and logic


@pytest.mark.parametrize("name", ["eq", "ne", "lt", "le", "gt", "ge"])
def test_comparisons(name):
    fn = getattr(torch, name)
    a = torch.tensor([1.0, NAN, 2.0, -0.0, INF, 3.5])
    b = torch.tensor([1.0, NAN, 3.0, 0.0, INF, 3.0])
    check(fn, a, b)
    check(fn, rand_int(3, 4, low=-2, high=2), rand_int(4, low=-2, high=2, seed=1))
    check(lambda x: fn(x, 0.5), rand_int(8, low=-2, high=2))  # int tensor vs float scalar
    check(lambda x: fn(x, 1), a)
    check(fn, rand(6, dtype=torch.bfloat16), rand(6, seed=1))
    check(fn, rand(6, seed=2) > 0, rand(6, seed=3) > 0)
    check(lambda x, y: fn(x.t(), y), rand(4, 3), rand(3, 4, seed=1))

    def out_float(x, y):
        out = torch.empty(6, device=x.device)
        fn(x, y, out=out)
        return out

    check(out_float, a, b)


def test_comparison_inplace_keeps_dtype():
    check(lambda x, y: x.lt_(y), rand(5), rand(5, seed=1))
    check(lambda x: x.ge_(1), rand_int(5, low=-3, high=3))


def test_logical():
    a = torch.tensor([0.0, 1.0, NAN, -0.0, 2.0])
    b = torch.tensor([1.0, 1.0, 0.0, 5.0, 0.0])
    for fn in (torch.logical_and, torch.logical_or, torch.logical_xor):
        check(fn, a, b)
        check(fn, rand_int(5, low=-1, high=2), rand_int(5, low=-1, high=2, seed=1))
        check(fn, rand(5) > 0, rand_int(5, low=-1, high=2))

        def out_float(x, y, fn=fn):
            out = torch.empty(5, device=x.device)
            fn(x, y, out=out)
            return out

        check(out_float, a, b)
    check(lambda x, y: x.logical_and_(y), a, b)


# ---------------------------------------------------- clamp, where, lerp, ...


def test_clamp_scalar():
    x = torch.tensor([-3.0, -1.0, 0.0, 0.5, 2.0, NAN, INF, -INF])
    check(lambda t: torch.clamp(t, -1, 1), x)
    check(lambda t: torch.clamp(t, min=0.25), x)
    check(lambda t: torch.clamp(t, max=0.25), x)
    check(lambda t: torch.clamp(t, 2, 1), x)  # min > max: max wins
    check(lambda t: torch.clamp(t, min=NAN), x)
    check(lambda t: torch.clamp_min(t, 0), x)
    check(lambda t: torch.clamp_max(t, 0), x)
    check(lambda t: torch.clamp(t, -5, 5), rand_int(8, low=-10, high=10))
    out = check(lambda t: torch.clamp(t, min=0.5), rand_int(8, low=-2, high=3))  # promotes to float
    assert out.dtype == torch.float32
    check(lambda t: torch.clamp(t, -0.5, 0.5), rand(8, dtype=torch.bfloat16))
    check(lambda t: t.clamp_(-0.5, 0.5), rand(3, 4))
    check(lambda t: t.t().clamp_(min=0), rand(3, 4))
    check(lambda t: torch.clamp(t, -0.5, 0.5), grad_input(3, 4), grad=True)


def test_clamp_tensor():
    x = torch.tensor([-3.0, -1.0, 0.0, 0.5, 2.0, NAN, 1.0])
    lo = torch.tensor([-2.0, 0.0, 1.0, NAN, -1.0, 0.0, 2.0])
    hi = torch.tensor([-1.0, 1.0, 0.5, 1.0, NAN, 1.0, 1.0])
    check(torch.clamp, x, lo, hi)
    check(lambda t, l: torch.clamp(t, min=l), x, lo)
    check(lambda t, h: torch.clamp(t, max=h), x, hi)
    check(torch.clamp_min, x, lo)
    check(torch.clamp_max, x, hi)
    check(torch.clamp, rand_int(3, 4), rand_int(4, low=-5, high=0, seed=1), rand_int(3, 1, low=0, high=5, seed=2))
    check(lambda t, l, h: t.clamp_(l, h), rand(3, 4), rand(4, low=-1, high=0), rand(4, low=0, high=1))
    lo, hi = grad_input(3, 4, low=-2, high=0, seed=1), grad_input(3, 4, low=0, high=2, seed=2)
    check(torch.clamp, grad_input(3, 4), lo, hi, grad=True)


def test_where():
    c = rand(3, 4) > 0
    a = rand(3, 4, seed=1)
    b = rand(3, 4, seed=2)
    check(torch.where, c, a, b)
    check(torch.where, c, a, b[0])
    check(torch.where, c[:, :1], a.to(torch.bfloat16), rand_int(4))  # promotion
    check(lambda cc, x: torch.where(cc, x, 0.0), c, a)  # where.ScalarOther (composite)
    check(lambda cc, x: torch.where(cc, 2, x), c, rand_int(3, 4))
    check(lambda cc, x: torch.where(cc, x, 1.5), c, rand_int(3, 4))  # int tensor + float scalar -> float
    check(torch.where, c, rand(3, 4, seed=5) > 0, rand(3, 4, seed=6) > 0)
    check(lambda cc, x, y: torch.where(cc.t(), x.t(), y.t()), c, a, b)
    check(torch.where, c, grad_input(3, 4), grad_input(3, 4, seed=1), grad=True)


def test_lerp():
    a = rand(3, 4)
    b = rand(3, 4, seed=1)
    w = torch.tensor([0.0, 0.3, 0.5, 0.7])
    for weight in (0.0, 0.25, 0.5, 0.75, 1.0, -0.6, 1.5):
        check(lambda x, y: torch.lerp(x, y, weight), a, b)
    check(torch.lerp, a, b, w)
    check(torch.lerp, a.to(torch.bfloat16), b.to(torch.bfloat16), w.to(torch.bfloat16))
    check(lambda x, y: x.lerp_(y, 0.1), a, b)
    check(torch.lerp, grad_input(3, 4), grad_input(3, 4, seed=1), grad_input(3, 4, low=0, high=1, seed=2), grad=True)
    check(lambda x, y: torch.lerp(x, y, 0.3), grad_input(3, 4), grad_input(3, 4, seed=1), grad=True)


def test_lerp_tensor_weight_takes_part_in_promotion():
    # A 0-dim tensor weight promotes like any operand (int start and end with
    # a float weight: a float result); a Scalar weight does not.
    i = torch.tensor([-67, 5], dtype=torch.int32)
    j = torch.tensor([2, 9], dtype=torch.int32)
    check(torch.lerp, i, j, torch.tensor(-1.0))
    check(torch.lerp, i, j, torch.tensor(0.25, dtype=torch.float64))
    check(torch.lerp, i[0], j[0], torch.tensor(0.3))
    check(lambda a, b, w: torch.lerp(a, b, w, out=torch.empty(0, device=a.device)), i, j, torch.tensor(-1.0))
    check(torch.lerp, rand(3), rand(3, seed=1), torch.tensor(0.3j))  # a complex weight: a complex result
    check(torch.lerp, rand(3, dtype=torch.float16), rand(3, dtype=torch.float16, seed=1), torch.tensor(0.3))
    cases = {  # CPU's errors
        "Scalar weight": (lambda d: torch.lerp(i.to(d), j.to(d), 0.5), NotImplementedError, "lerp_kernel_scalar"),
        "int weight": (lambda d: torch.lerp(i.to(d), j.to(d), torch.tensor(2, device=d)), NotImplementedError,
                       "lerp_kernel_tensor"),
        "1-dim float weight": (lambda d: torch.lerp(i.to(d), j.to(d), torch.tensor([0.5], device=d)), RuntimeError,
                               "for `weight`"),
        "in place": (lambda d: i.to(d).lerp_(j.to(d), torch.tensor(0.5, device=d)), RuntimeError,
                     "can't be cast to the desired output type Int"),
    }
    for name, (fn, error, message) in cases.items():
        with pytest.raises(error, match=message):
            fn("cpu")
        with pytest.raises(error, match=message):
            fn(TPU).cpu()


def test_addcmul_addcdiv():
    s = rand(3, 4)
    t1 = rand(3, 4, seed=1)
    t2 = rand(4, low=0.5, high=2, seed=2)
    check(torch.addcmul, s, t1, t2)
    check(lambda a, b, c: torch.addcmul(a, b, c, value=-0.5), s, t1, t2)
    check(torch.addcdiv, s, t1, t2)
    check(lambda a, b, c: torch.addcdiv(a, b, c, value=3), s, t1, t2)
    check(lambda a, b, c: torch.addcmul(a, b, c, value=2), rand_int(3, 4), rand_int(3, 4, seed=1), rand_int(4, seed=2))
    check(torch.addcmul, s.to(torch.bfloat16), t1.to(torch.bfloat16), t2.to(torch.bfloat16))
    check(lambda a, b, c: a.addcdiv_(b, c, value=0.1), s, t1, t2)
    check(lambda a, b, c: a.t().addcmul_(b, c, value=0.1), rand(4, 3), t1, rand(3, 1))
    g = [grad_input(3, 4, seed=i) for i in range(3)]
    check(lambda a, b, c: torch.addcmul(a, b, c, value=0.5), *g, grad=True)
    g[2] = grad_input(3, 4, low=0.5, high=2, seed=9)
    check(lambda a, b, c: torch.addcdiv(a, b, c, value=0.5), *g, grad=True)


def test_kernel_cache_reuses_scalar_values():
    """Scalars are traced once a position has shown a few values (baked in
    until then): new values do not compile new kernels."""
    import torchtpu
    from torchtpu.ops.dispatch import MAX_BAKED_VALUES

    x = rand(3, 4).to(TPU)
    for k in range(MAX_BAKED_VALUES + 1):  # (on its own, this test's first op calls bake their values)
        (x * (1.5 + k)).cpu()
        torch.clamp(x, -1.5 - k, 1.5 + k).cpu()
    before = torchtpu.kernel_cache_stats()["compiles"]
    for v in (2.5, -1.0, 3.25):
        torch.testing.assert_close((x * v).cpu(), x.cpu() * v)
        torch.testing.assert_close(torch.clamp(x, -v, v).cpu(), torch.clamp(x.cpu(), -v, v))
    assert torchtpu.kernel_cache_stats()["compiles"] == before


def test_unsupported_dtypes_raise_like_torch():
    b = torch.tensor([True, False])
    i = torch.tensor([3, -2])
    cases = [
        lambda d: torch.abs(b.to(d)),
        lambda d: torch.ceil(b.to(d)),
        lambda d: torch.round(b.to(d)),
        lambda d: torch.frac(i.to(d)),
        lambda d: torch.round(i.to(d), decimals=1),
        lambda d: torch.pow(b.to(d), b.to(d)),
        lambda d: torch.hypot(i.to(d), i.to(d)),
        lambda d: torch.logaddexp(i.to(d), i.to(d)),
        lambda d: torch.lerp(i.to(d), i.to(d), 0.5),
        lambda d: torch.heaviside(i.to(d).float(), i.to(d)),
        lambda d: -b.to(d),
        lambda d: b.to(d) - b.to(d),
        lambda d: torch.bitwise_and(i.to(d).float(), i.to(d)),
        lambda d: torch.addcdiv(i.to(d), i.to(d), i.to(d)),
        lambda d: torch.relu(b.to(d)),
    ]
    for k, case in enumerate(cases):
        with pytest.raises((RuntimeError, NotImplementedError)):
            case("cpu")
        with pytest.raises((RuntimeError, NotImplementedError)):
            case(TPU).cpu()
            pytest.fail(f"case {k} did not raise on tpu")


def test_complex():
    a = torch.randn(5, dtype=torch.complex64)
    b = torch.randn(5, dtype=torch.complex64, generator=torch.Generator().manual_seed(1))
    for fn in (torch.add, torch.mul, torch.div, torch.eq):
        check(fn, a, b)
    for fn in (torch.exp, torch.sqrt, torch.abs, torch.sgn, torch.neg, torch.tanh, lambda t: t**2):
        check(fn, a)


def test_inplace_and_out_are_single_kernel_calls():
    """add_ / add(out=) / _foreach_add_ run their one lowered kernel, not a
    composite (functional op + copy_)."""
    import torchtpu

    def calls(fn):
        s0 = torchtpu.kernel_cache_stats()
        fn()
        s1 = torchtpu.kernel_cache_stats()
        return (s1["calls"] + s1.get("fast_hits", 0)) - (s0["calls"] + s0.get("fast_hits", 0))

    x = rand(3, 4).to(TPU)
    y = rand(3, 4, seed=1).to(TPU)
    out = torch.empty(3, 4, device=TPU)
    for fn in (lambda: x.add_(y), lambda: x.mul_(2), lambda: torch.sub(x, y, out=out), lambda: x.clamp_(-1, 1),
               lambda: x.pow_(2), lambda: x.div_(y, rounding_mode="floor"), lambda: x.lt_(y)):  # fmt: skip
        fn()  # compile
        assert calls(fn) == 1


@pytest.mark.parametrize(
    "name, fn",
    [("exp", lambda d, out: torch.exp(torch.linspace(0, 1, 7, device=d), out=out)),
     ("add 2-d", lambda d, out: torch.add(torch.arange(20.0, device=d).view(4, 5), 1, out=out)),
     ("arange", lambda d, out: torch.arange(5, out=out)),
     ("linspace", lambda d, out: torch.linspace(0, 1, 7, out=out))],
)  # fmt: skip
@pytest.mark.parametrize("out_numel", [3, 4])
def test_out_of_the_wrong_size_is_resized_and_written(name, fn, out_numel):
    """A non-empty out= of another size is resized (with a warning) and holds
    the result -- once lost to the storage move the resize queued."""
    dtype = torch.int64 if name == "arange" else torch.float32
    for _ in range(2):  # the kernel's first call and its cached one
        want = fn("cpu", torch.zeros(out_numel, dtype=dtype))
        out = torch.zeros(out_numel, dtype=dtype, device="tpu")
        with torch.device("tpu"):
            fn("tpu", out)
        assert torch.equal(out.cpu(), want)


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8])
def test_gcd_lcm_at_the_types_extremes(dtype):
    """|min| wraps to min: jnp.gcd never returned there (a hang); ATen gives a
    negative divisor.  lcm wraps as C's int arithmetic does."""
    info = torch.iinfo(dtype)
    vals = torch.tensor([info.min, info.min + 1, -7, -1, 0, 1, 6, 12, 18, info.max]).clamp(info.min, info.max).to(dtype)
    a, b = vals.repeat_interleave(len(vals)), vals.repeat(len(vals))
    assert torch.equal(torch.gcd(a.to("tpu"), b.to("tpu")).cpu(), torch.gcd(a, b))
    if dtype in (torch.int32, torch.int64):  # (C's INT_MIN / -1 traps on the CPU itself)
        keep = (a != info.min) & (b != info.min)
        a, b = a[keep], b[keep]
    assert torch.equal(torch.lcm(a.to("tpu"), b.to("tpu")).cpu(), torch.lcm(a, b))


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int32, torch.int64])
def test_shifts_broadcast_operands_of_different_ranks(dtype):
    a, b = torch.tensor([1, 2, 5]).to(dtype), torch.tensor([[1], [2], [9]]).to(dtype)
    for shift in (torch.bitwise_left_shift, torch.bitwise_right_shift, lambda x, y: x << y, lambda x, y: y >> x):
        assert torch.equal(shift(a.to("tpu"), b.to("tpu")).cpu(), shift(a, b))


def test_integer_pow_to_a_negative_scalar_raises():
    assert torch.equal(torch.pow(torch.tensor([2, 3], device="tpu"), 2).cpu(), torch.tensor([4, 9]))
    with pytest.raises(RuntimeError, match="Integers to negative integer powers are not allowed"):
        torch.pow(torch.tensor([2, 3], device="tpu"), -1).cpu()
    assert torch.allclose(torch.pow(torch.tensor([2, 4], device="tpu"), -1.0).cpu(), torch.tensor([0.5, 0.25]))


def test_complex_pow_of_zero_and_negative_powers_of_uint8():
    x = torch.tensor([0j, 1 + 0j, 2j, -1 - 1j])
    for e in (1 + 1j, 0.5 + 1j, 2 + 0j, -1 + 0j, 1j, 0.5, 3):
        torch.testing.assert_close((x.to(TPU) ** e).cpu(), x ** e, equal_nan=True)
        exponent = torch.full((4,), e, dtype=torch.complex64)
        torch.testing.assert_close((x.to(TPU) ** exponent.to(TPU)).cpu(), x ** exponent, equal_nan=True)
    for dtype in (torch.uint8, torch.int8, torch.int64):
        with pytest.raises(RuntimeError, match="Integers to negative integer powers are not allowed"):
            (torch.tensor([3, 0, 1], dtype=dtype, device=TPU) ** -3).cpu()
    torch.testing.assert_close((torch.tensor([3, 0], dtype=torch.uint8, device=TPU) ** 2).cpu(),
                               torch.tensor([9, 0], dtype=torch.uint8))


def test_bool_divided_by_a_false_scalar_tensor_gives_nan_for_zero():
    a = torch.tensor([True, False])
    for divisor in (torch.tensor(False), torch.tensor([False, False])):
        torch.testing.assert_close((a.to(TPU) / divisor.to(TPU)).cpu(), a / divisor, equal_nan=True)


def test_products_with_a_bool_mask_keep_nan():
    # XLA rewrites y * convert(mask) into select(mask, y, 0): inf * False and
    # nan * False gave 0 instead of nan.
    x = torch.tensor([INF, NAN, -INF, 2.0, 0.0])
    m = torch.tensor([False, False, True, True, False])
    check(lambda x, m: x * m, x, m)
    check(lambda x, m: x.clone().mul_(m), x, m)
    check(lambda x, m: torch.addcmul(x, x, m.float()), x, m)
    check(lambda x, m: m / x, x, m)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_python_scalars_are_rounded_to_a_low_precision_result(dtype):
    # ATen's remainder/fmod/floor_divide/xlogy kernels get the Scalar in the
    # tensor's dtype (0.3 -> 0.30078125 in bfloat16, 1e10 -> inf in float16):
    # computed with the float32 scalar, bf16 x % 0.3 was off by up to a period.
    x = torch.linspace(-3, 9, 33).to(dtype)
    for fn in (lambda t: t % 0.3, lambda t: torch.fmod(t, 0.3), lambda t: torch.remainder(1e10, t),
               lambda t: 1e10 // t, lambda t: torch.xlogy(t, 1e10)):
        torch.testing.assert_close(fn(x.to(TPU)).cpu(), fn(x), equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_special_functions_at_edges_match_cpu(dtype):
    """Found by a special-function probe: erfcx returned 0 in a band of large
    x (jax.scipy's branch underflows), float32 log_ndtr lost up to 9% for x
    in 3-6, zeta gave nan at its poles q = 0, -1, ..., and the Bessel / Airy
    functions gave 0 at +-inf where Cephes (CPU and CUDA) gives nan.
    (log_ndtr stops short of the subnormal range, which XLA flushes.)"""
    # (float64 log_ndtr far below 0 is jax.scipy's series: 2e-11 relative)
    tol = dict(rtol=5e-6, atol=0) if dtype == torch.float32 else dict(rtol=1e-10, atol=0)
    edges = torch.tensor([float("inf"), -float("inf"), float("nan"), 0.0])
    cases = [
        (torch.special.erfcx, (torch.cat([torch.linspace(-5, 40, 4001), torch.tensor([9.3, 26.6]), edges]),)),
        (torch.special.log_ndtr, (torch.cat([torch.linspace(-30, 10 if dtype == torch.float32 else 37, 4001), edges]),)),
        (torch.special.zeta, (torch.tensor([3.0, 2.5, 2.0, 3.0, 0.5, 3.0, 1.0, 2.5, 4.0]),
                              torch.tensor([-1.0, -2.0, -1.0, 0.0, -1.0, -1.5, 2.0, -1.5, 0.5]))),
    ] + [(getattr(torch.special, name), (torch.cat([torch.tensor([1.0, 30.0, -2.0]), edges]),))
         for name in ("bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "airy_ai")]
    for fn, args in cases:
        args = [a.to(dtype) for a in args]
        want = fn(*args)
        got = fn(*[a.to("tpu") for a in args]).cpu()
        torch.testing.assert_close(got, want, equal_nan=True, msg=lambda m: f"{fn.__name__}: {m}", **tol)


# Operands that ATen converts to the common dtype before computing (found by
# an eager fuzzer): the lowerings cast straight to the opmath type, skipping
# the rounding or wrapping of a 0-dim tensor (or an int64 tensor) meeting a
# narrower type.  (device) -> result.
_COMMON_DTYPE_CASES = {
    "f32 0-dim minus f16": lambda d: torch.tensor(70000.0, device=d) - torch.tensor([60000.0], dtype=torch.float16, device=d),
    "f32 0-dim times f16": lambda d: torch.tensor(1e-8, device=d) * torch.tensor([1e4], dtype=torch.float16, device=d),
    "f64 0-dim times f32": lambda d: torch.tensor(1e-50, dtype=torch.float64, device=d) * torch.tensor([1e30], device=d),
    "bf16 0-dim pow f16": lambda d: torch.tensor(-1e5, dtype=torch.bfloat16, device=d) ** torch.tensor([0.5, 2, -0.5], dtype=torch.float16, device=d),
    "int64 0-dim compared with int8": lambda d: torch.tensor(300, device=d) > torch.tensor([50, 40], dtype=torch.int8, device=d),
    "int64 0-dim times int8": lambda d: torch.tensor(300, device=d) * torch.tensor([2, 3], dtype=torch.int8, device=d),
    "int64 tensor times f16": lambda d: torch.tensor([100000, 3], device=d) * torch.tensor([1e-3, 1.0], dtype=torch.float16, device=d),
    "f32 0-dim equals f16": lambda d: torch.tensor(1e-8, device=d) == torch.tensor([0.0], dtype=torch.float16, device=d),
}  # fmt: skip


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("name", sorted(_COMMON_DTYPE_CASES))
def test_operands_are_converted_to_the_common_dtype_first(name, compiled):
    fn = _COMMON_DTYPE_CASES[name]
    want = fn("cpu")
    if compiled:
        got = torch.compile(lambda: fn("tpu"), backend="tpu", fullgraph=True)()
    else:
        got = fn("tpu")
    assert got.dtype == want.dtype
    torch.testing.assert_close(got.cpu(), want, equal_nan=True, rtol=0, atol=0)


def test_lgamma_is_exactly_zero_at_its_roots():
    # (XLA's float32 lgamma gave 4.8e-7 at 1: Poisson's log_prob of 0 and 1 counts)
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        assert torch.lgamma(torch.tensor([1.0, 2.0], dtype=dtype, device="tpu")).tolist() == [0.0, 0.0]


def test_incomplete_gamma_at_large_a_matches_mpmath():
    # Temme's expansion past a = 1e3 (JAX's iterations drift as a grows; torch's CPU kernel is 1e-11 off here)
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 30
    a = torch.tensor([2e3, 2e3, 1e4, 1e5, 1e6, 1e6], dtype=torch.float64)
    x = a * torch.tensor([0.97, 1.0, 1.001, 0.999, 1.0001, 1.003], dtype=torch.float64)
    upper = torch.igammac(a.to("tpu"), x.to("tpu")).cpu()
    lower = torch.igamma(a.to("tpu"), x.to("tpu")).cpu()
    for k in range(len(a)):
        q = mpmath.gammainc(mpmath.mpf(a[k].item()), mpmath.mpf(x[k].item()), mpmath.inf, regularized=True)
        assert abs(upper[k].item() - float(q)) < 1e-14
        assert abs(lower[k].item() - float(1 - q)) < 1e-14


def test_polygamma_of_negative_x_matches_mpmath():
    # By reflection (elementwise._polygamma): the shift to [0, 1) cancelled
    # (psi_10(-10.5) came out with the wrong sign; ATen's own form is 1% off there).
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 80
    points = [-10.5, -1.5, -0.3, -3.7, -100.25, -0.999, -2.0000001, -1e5 - 0.5]
    for n in (2, 3, 4, 7, 10):
        for dtype, rtol in ((torch.float64, 1e-12), (torch.float32, 2e-5)):
            x = torch.tensor(points, dtype=dtype)
            got = torch.polygamma(n, x.to("tpu")).cpu()
            for k, value in enumerate(x.tolist()):
                if value == int(value):  # (-2.0000001 in float32: a pole)
                    assert got[k].isinf()
                    continue
                want = float(mpmath.polygamma(n, mpmath.mpf(value)))
                if torch.finfo(dtype).tiny < abs(want) < torch.finfo(dtype).max:  # (subnormals flush to 0)
                    assert abs(got[k].item() - want) <= rtol * abs(want), (n, dtype, value)
