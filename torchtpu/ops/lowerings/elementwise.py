"""Pointwise math, comparisons, logical/bitwise ops, where/clamp, with torch's type promotion.

Conventions used throughout:
- the *result type* of an op is `ctx.result_type(...)` over its inputs (torch's
  promotion, Python scalars and 0-dim tensors included); ops that promote
  integers to floats (`div`, `sqrt`, ...) then go to the default float dtype;
- math on bfloat16/float16 is done in float32 ("opmath", as torch's CPU kernels
  do) and rounded back to the result type once, at the end;
- the dispatcher casts what a lowering returns to the output's dtype (which
  differs from the result type for out= and in-place calls).
"""

import math

import jax.numpy as jnp
import numpy as np
import torch
from jax import lax
from jax.scipy import special as jsp

from ...runtime.dtypes import to_jax
from ..registry import lower
from . import _special_coeffs as C
from .common import acc_dtype, astype
from .special_functions import zeta_large_q

aten = torch.ops.aten

BOOL = jnp.dtype(jnp.bool_)
F32 = jnp.dtype(jnp.float32)


# ------------------------------------------------------------------ dtype helpers


def is_floating(dt):
    return jnp.issubdtype(dt, jnp.floating)


def is_complex(dt):
    return jnp.issubdtype(dt, jnp.complexfloating)


def is_inexact(dt):
    return jnp.issubdtype(dt, jnp.inexact)


def is_signed_int(dt):
    return jnp.issubdtype(dt, jnp.signedinteger)


def is_integral(dt):
    """Integer types (bool excluded)."""
    return jnp.issubdtype(dt, jnp.integer)


def opmath(dt):
    """The dtype torch computes in for values of dtype `dt`."""
    return acc_dtype(dt)


def default_float():
    return to_jax(torch.get_default_dtype())


def to_float(dt):
    """INT_TO_FLOAT promotion: integers and bool become the default float dtype."""
    dt = jnp.dtype(dt)
    return dt if is_inexact(dt) else default_float()


def cast(x, dt):
    return astype(x, dt)


def rounded(x, dt, m):
    """x in the result dtype `dt`, computed in `m`: a Python scalar rounded
    to a bfloat16/float16 result first, as ATen's kernels receive it (only
    add, sub, mul and div keep it in float32; 1e10 in float16 is inf)."""
    with np.errstate(over="ignore"):
        return cast(cast(x, dt), m)


def float_result(ctx, *positions):
    return to_float(ctx.result_type(*positions))


_TYPE_NAMES = {
    "bool": "Bool", "uint8": "Byte", "int8": "Char", "int16": "Short", "int32": "Int", "int64": "Long",
    "uint16": "UInt16", "uint32": "UInt32", "uint64": "UInt64", "float16": "Half", "bfloat16": "BFloat16",
    "float32": "Float", "float64": "Double", "complex64": "ComplexFloat", "complex128": "ComplexDouble",
}  # fmt: skip


def not_implemented(name, dt):
    """torch's error for a dtype its kernel does not support (dtypes are
    static, so this fires while the kernel is traced, i.e. at the call)."""
    return NotImplementedError(f'"{name}" not implemented for \'{_TYPE_NAMES.get(jnp.dtype(dt).name, dt)}\'')


def nan_max(a, b):
    """Elementwise max that propagates NaN from either side (torch.maximum)."""
    r = jnp.maximum(a, b)
    if is_inexact(r.dtype):
        r = jnp.where(jnp.isnan(a), a, jnp.where(jnp.isnan(b), b, r))
    return r


def nan_min(a, b):
    r = jnp.minimum(a, b)
    if is_inexact(r.dtype):
        r = jnp.where(jnp.isnan(a), a, jnp.where(jnp.isnan(b), b, r))
    return r


# ------------------------------------------------------------ unary float ops

# op -> f(x) on float inputs (computed in opmath; integer inputs promote to float).
def _sqrt(x):
    """sqrt; a complex one as C99's csqrt (XLA's ignores a -0.0 imaginary
    part: sqrt(-4 - 0j) gave +2j, not -2j, on the branch cut)."""
    if not is_complex(x.dtype):
        return jnp.sqrt(x)
    re, im = jnp.real(x), jnp.imag(x)
    # (scaled by 1/4 near the top of the range, where |x| + |re| overflows)
    big = jnp.maximum(jnp.abs(re), jnp.abs(im)) > jnp.finfo(re.dtype).max / 4
    scale = jnp.where(big, 0.25, 1.0).astype(re.dtype)
    sre, sim = re * scale, im * scale
    t = jnp.sqrt((jnp.abs(lax.complex(sre, sim)) + jnp.abs(sre)) / 2)
    out_re = jnp.where(sre >= 0, t, jnp.abs(sim) / (2 * t))
    out_im = jnp.where(sre >= 0, sim / (2 * t), jnp.copysign(t, sim))
    out_re, out_im = (jnp.where(big, 2 * v, v) for v in (out_re, out_im))
    zero = (re == 0) & (im == 0)
    out_re, out_im = jnp.where(zero, 0, out_re), jnp.where(zero, im, out_im)
    # C99's infinities: +inf real part -> (inf, +-0 or nan); -inf -> (0 or
    # nan, +-inf); an infinite imaginary part -> (inf, it), whatever else
    out_re = jnp.where(re == jnp.inf, jnp.inf, jnp.where(re == -jnp.inf, jnp.where(jnp.isnan(im), im, 0), out_re))
    out_im = jnp.where(re == jnp.inf, jnp.where(jnp.isnan(im), im, jnp.copysign(0.0, im)),
                       jnp.where(re == -jnp.inf, jnp.copysign(jnp.inf, im), out_im))
    inf_im = jnp.isinf(im)
    out_re, out_im = jnp.where(inf_im, jnp.inf, out_re), jnp.where(inf_im, im, out_im)
    return lax.complex(out_re.astype(re.dtype), out_im.astype(re.dtype))


UNARY_FLOAT = {
    aten.sqrt.default: _sqrt,
    aten.rsqrt.default: lambda x: 1 / jnp.sqrt(x),
    aten.exp.default: jnp.exp,
    aten.exp2.default: lambda x: _exp2(x),
    aten.expm1.default: jnp.expm1,
    aten.log.default: jnp.log,
    aten.log2.default: jnp.log2,
    aten.log10.default: jnp.log10,
    aten.log1p.default: jnp.log1p,
    aten.sin.default: jnp.sin,
    aten.cos.default: jnp.cos,
    aten.tan.default: jnp.tan,
    aten.asin.default: jnp.arcsin,
    aten.acos.default: jnp.arccos,
    aten.atan.default: jnp.arctan,
    aten.sinh.default: lambda x: _sinh_cosh(x, jnp.sinh, odd=True),
    aten.cosh.default: lambda x: _sinh_cosh(x, jnp.cosh, odd=False),
    aten.tanh.default: jnp.tanh,
    aten.asinh.default: jnp.arcsinh,
    aten.acosh.default: jnp.arccosh,
    aten.atanh.default: jnp.arctanh,
    aten.erf.default: lambda x: jnp.clip(lax.erf(x), -1, 1),  # (XLA's float32 erf overshoots by an ulp: ndtr < 0)
    aten.erfc.default: lax.erfc,
    aten.erfinv.default: lambda x: _erfinv(x),
    aten.sigmoid.default: lambda x: 1 / (1 + jnp.exp(-x)),
    aten.reciprocal.default: lambda x: 1 / x,
    aten.lgamma.default: lambda x: _lgamma(x),
    aten.digamma.default: lambda x: _digamma(x),
    aten.sinc.default: jnp.sinc,
    aten.deg2rad.default: jnp.deg2rad,
    aten.rad2deg.default: jnp.rad2deg,
    aten.i0.default: jsp.i0,
}


def _exp2(x):
    """2**x as 2**f * 2**n, n = round(x) and f = x - n exact: XLA's float32
    exp2 lost accuracy as |x| grew (30 ulp at -120).  The power of two is
    applied exactly, so the extremes over- and underflow where the CPU's do."""
    if x.dtype == jnp.float64:
        return jnp.exp2(x)
    n = jnp.round(jnp.clip(x, -400, 400))  # (past +-400 f itself over/underflows)
    return _times_pow2(jnp.exp2(x - n), n, x.dtype)


def _sinh_cosh(x, fn, odd):
    """sinh/cosh; from |x| = 9 on (float32) as 0.5 e e, e = exp(|x| / 2),
    since XLA's lost up to 24 ulp there.  Halving e first keeps the product
    finite up to 89.4, as the CPU's."""
    if x.dtype == jnp.float64:
        return fn(x)
    a = jnp.abs(x)
    e = jnp.exp(a / 2)
    big = (0.5 * e) * e
    big = jnp.copysign(big, x) if odd else big
    return jnp.where(a >= 9, big, fn(x))


def _erfinv(x):
    """erfinv with one Newton step near +-1 on erfc(y) = 1 - |x| (exact for
    |x| >= 1/2), so the residual does not cancel: XLA's was 64 ulp off at 0.9998."""
    y = lax.erf_inv(x)
    if x.dtype == jnp.float64:
        return y
    a = jnp.abs(x)
    near = (a > 0.9) & (a < 1)
    t = jnp.where(near, jnp.abs(y), 1)
    residual = lax.erfc(t) - jnp.where(near, 1 - a, lax.erfc(jnp.ones_like(t)))
    slope = (2 / math.sqrt(math.pi)) * jnp.exp(-t * t)  # -d erfc/dt
    refined = jnp.copysign(t + residual / slope, x)
    return jnp.where(near, refined, y)


def _unary_float(fn):
    def lowering(ctx, self):
        dt = float_result(ctx, 0)
        return fn(cast(self, opmath(dt))).astype(dt)

    return lowering


for _op, _fn in UNARY_FLOAT.items():
    lower(_op)(_unary_float(_fn))


# ----------------------------------------------------- unary same-dtype ops


def _sign(x):
    """torch.sign: (0 < x) - (x < 0); NaN and -0.0 give 0."""
    if is_complex(x.dtype):
        raise NotImplementedError("Unlike NumPy, torch.sign is not intended to support complex numbers. Please use "
                                  "torch.sgn instead.")
    if x.dtype == BOOL:
        return x
    return (x > 0).astype(x.dtype) - (x < 0).astype(x.dtype)


def _sgn(x):
    if is_complex(x.dtype):
        mag = jnp.abs(x)
        return jnp.where(mag == 0, jnp.zeros_like(x), x / mag.astype(x.dtype))
    return _sign(x)


def _rounding(fn):
    """ceil/floor/round/trunc: the identity on integers."""

    def f(x):
        return x if not is_inexact(x.dtype) else fn(x)

    return f


UNARY_SAME = {
    aten.neg.default: lambda x: -x,
    aten.abs.default: jnp.abs,
    aten.sign.default: _sign,
    aten.sgn.default: _sgn,
    aten.ceil.default: _rounding(jnp.ceil),
    aten.floor.default: _rounding(jnp.floor),
    aten.round.default: _rounding(jnp.round),  # half to even, as nearbyint
    aten.trunc.default: _rounding(jnp.trunc),
    aten.frac.default: lambda x: x - jnp.trunc(x),
    aten.bitwise_not.default: lambda x: ~x,
    aten.logical_not.default: lambda x: ~x.astype(BOOL),
}


# ops whose torch kernels reject some dtypes: op -> predicate on the dtype
_REJECTS = {
    aten.abs.default: lambda dt: dt == BOOL,
    aten.ceil.default: lambda dt: dt == BOOL,
    aten.floor.default: lambda dt: dt == BOOL,
    aten.round.default: lambda dt: dt == BOOL,
    aten.trunc.default: lambda dt: dt == BOOL,
    aten.frac.default: lambda dt: not is_inexact(dt),
    aten.bitwise_not.default: is_inexact,
}


def _unary_same(op, fn):
    rejects = _REJECTS.get(op)
    name = op._schema.name.split("::")[1]

    def lowering(ctx, self):
        dt = ctx.result_type(0)
        if rejects is not None and rejects(dt):
            raise not_implemented(name, dt)
        r = fn(cast(self, opmath(dt)))
        if is_complex(dt) and not is_complex(r.dtype):
            return r  # abs of complex is real
        return r.astype(dt)

    return lowering


for _op, _fn in UNARY_SAME.items():
    lower(_op)(_unary_same(_op, _fn))


def _lgamma(x):
    """lgamma, exactly 0 at its roots 1 and 2 as the C library's (XLA's
    float32 approximation gave 4.8e-7 at 1: Poisson's log_prob of 0 and 1).
    In float32 on [0.5, 2.5] from the Taylor series about 1 and 2: XLA's
    was 1.6% off at 0.9999 (its absolute error, ~1e-6, does not shrink with
    the value).  The series about 2 converges fast (terms ~ (e/2)^k / k);
    [0.5, 0.8] and [1.2, 1.5] use it through lgamma(x) = lgamma(x + 1) - log1p(x - 1)."""
    r = jnp.where((x == 1) | (x == 2), jnp.zeros((), x.dtype), lax.lgamma(x))
    if x.dtype == jnp.float64:
        return r
    e1, e2 = x - 1, x - 2  # (exact in this window)
    about_1 = jnp.where(jnp.abs(e1) <= 0.2, _taylor(C.LGAMMA_AT_1, e1), _taylor(C.LGAMMA_AT_2, e1) - jnp.log1p(e1))
    r = jnp.where(jnp.abs(e1) < 0.5, about_1, r)
    return jnp.where(jnp.abs(e2) <= 0.5, _taylor(C.LGAMMA_AT_2, e2), r)


def _taylor(coeffs, e):
    """sum c_k e^k, k from 1, by Horner."""
    r = jnp.zeros_like(e)
    for c in reversed(coeffs):
        r = (r + c) * e
    return r


def _digamma(x):
    """ATen's calc_digamma: x < 0 by reflection, NaN at negative integers,
    -+inf at -+0.  cot(pi x) comes from _cot_pi, exact in its period (pi /
    tan(pi frac) was 6% off at -1 + 1e-6)."""
    neg = x < 0
    frac = x - jnp.trunc(x)
    reflected = lax.digamma(jnp.where(neg, 1 - x, 1)) - math.pi * _cot_pi(frac)
    r = jnp.where(neg, reflected, lax.digamma(jnp.where(neg, 1, x)))
    r = jnp.where(neg & (frac == 0), jnp.nan, r)
    return jnp.where(x == 0, jnp.copysign(jnp.inf, -x), r)


def _polygamma(n, x):
    """n >= 2.  x < 0 by the reflection psi_n(x) = (-1)^n psi_n(1 - x) -
    pi d^n/dx^n cot(pi x) (lax.polygamma needs x > 0), the derivative a
    polynomial in cot(pi x) (_cot_derivative).  It does not cancel where the
    value is small: psi_10(-10.5) is -1.348e-5, which ATen's Hurwitz-zeta
    form gets 1% wrong and a shift to [0, 1) got with the wrong sign."""
    negative = x < 0
    cot = _cot_pi(jnp.where(negative, x - jnp.trunc(x), 0.5))
    reflected = (-1) ** n * lax.polygamma(jnp.asarray(n, x.dtype), jnp.where(negative, 1 - x, 1))
    reflected = reflected - math.pi ** (n + 1) * _cot_derivative(n, cot)
    r = jnp.where(negative, reflected, lax.polygamma(jnp.asarray(n, x.dtype), jnp.where(negative, 1, x)))
    # large x as (-1)^(n+1) n! zeta(n + 1, x) in its underflow-free form
    # (polygamma(2, 1e15) gave -0.0, not -1e-30)
    large = (x >= 1e4) & (x >= 100 * (n + 1)) & (x < jnp.inf)
    tail = zeta_large_q(jnp.asarray(n + 1, x.dtype), jnp.where(large, x, 1e4), (-1) ** (n + 1) * math.factorial(n))
    r = jnp.where(large, tail, r)
    r = jnp.where(x == jnp.inf, jnp.nan, r)  # (ATen's zeta at q = inf)
    sign = 1.0 if n % 2 else -1.0
    return jnp.where((x <= 0) & (x == jnp.trunc(x)), sign * jnp.inf, r)  # (poles, -inf too)


def _cot_pi(f):
    """cot(pi f) for f in (-1, 1), accurate near every pole and exactly 0 at
    f = +-1/2 (tan(pi/2) is not infinite in floating point): f is moved by
    its period to g in [-1/2, 1/2], then 1 / tan(pi g) near 0 and tan(pi
    (+-1/2 - g)) nearer the half-integers -- each shift exact."""
    g = f - jnp.round(f)
    half = jnp.where(g > 0, 0.5, -0.5)
    near_zero = jnp.abs(g) <= 0.25
    return jnp.where(near_zero, 1 / jnp.tan(math.pi * jnp.where(near_zero, g, 0.25)), jnp.tan(math.pi * (half - g)))


def _cot_derivative(n, c):
    """d^n/du^n cot(u) as the polynomial P_n(cot u): P_0(c) = c and
    P_{k+1}(c) = -(1 + c^2) P_k'(c), evaluated by Horner."""
    coeffs = [0, 1]  # P_0, lowest degree first
    for _ in range(n):
        d = [k * coeffs[k] for k in range(1, len(coeffs))] + [0, 0]  # P_k', padded
        coeffs = [-(d[k] + (d[k - 2] if k >= 2 else 0)) for k in range(len(coeffs) + 1)]
    result = jnp.zeros_like(c)
    for coefficient in reversed(coeffs):
        result = result * c + coefficient
    return result


def _trigamma(x):
    """ATen's calc_trigamma (reflection below 1/2 with sin(pi x) as the CPU
    computes it, six recurrence steps, then the asymptotic series)."""
    refl = x < 0.5
    r = jnp.where(refl, -(math.pi**2) / jnp.sin(math.pi * x) ** 2, 0)
    x = jnp.where(refl, 1 - x, x)
    for _ in range(6):
        r = r + 1 / (x * x)
        x = x + 1
    ixx = 1 / (x * x)
    r = r + (1 + 1 / (2 * x) + ixx * (1 / 6 - ixx * (1 / 30 - ixx * (1 / 42)))) / x
    return jnp.where(refl, -r, r)


@lower(aten.polygamma.default)
def polygamma(ctx, n, self):
    dt = float_result(ctx, 1)
    x = cast(self, opmath(dt))
    if n == 0:
        return _digamma(x).astype(dt)
    if n == 1:
        return _trigamma(x).astype(dt)
    return _polygamma(n, x).astype(dt)


@lower(aten.round.decimals)
def round_decimals(ctx, self, decimals):
    dt = ctx.result_type(0)
    if not is_inexact(dt):
        raise not_implemented("round", dt)
    m = opmath(dt)
    x = cast(self, m)
    # (a full array behind a barrier: XLA rewrites a division by a broadcast
    # scalar as a multiply by its rounded reciprocal, 0.05 -> 0.049999997)
    scale = lax.optimization_barrier(jnp.full(x.shape, 10.0 ** abs(decimals), dtype=m))
    if decimals < 0:
        r = jnp.round(x / scale) * scale
    else:
        r = jnp.round(x * scale) / scale
    return r.astype(dt)


@lower(aten.ldexp.Tensor, aten.ldexp.out)
def ldexp(ctx, self, other):
    """self * 2 ** other, as the CPU's std::ldexp (ATen's composite
    mul(self, pow(2, other)) made 2**130 inf in float32: 1e-30 * 2**130 gave
    inf, 0 * 2**130 nan).  Eager and graphs both run this lowering
    (graph_only.py has none of its own)."""
    dtype = ctx.out_dtype
    m = jnp.float64 if dtype == jnp.float64 else jnp.float32  # (16-bit floats scale in float32, round once)
    x = jnp.asarray(self).astype(m)
    n = jnp.asarray(other).astype(m)  # (it arrives promoted to self's type)
    integral = n == jnp.round(n)
    # (jnp.ldexp is not exact: 1e-30 * 2**130 came out 3584 off)
    scaled = _times_pow2(x, jnp.where(integral, n, 0), m)
    # a fractional one: two halves, neither overflowing alone
    half = jnp.floor(n / 2)
    fractional = x * jnp.exp2(half) * jnp.exp2(n - half)
    return jnp.where(integral, scaled, fractional).astype(dtype)


def _times_pow2(x, n, m):
    """x * 2**n for an integral n (float, any size) by three exact powers of
    two, each a normal number, so the result rounds once; past +-2200
    (float64) or +-330 (float32) every finite x has over- or underflowed."""
    bound = 2200 if m == jnp.float64 else 330
    k = jnp.clip(n, -bound, bound).astype(jnp.int32)
    third = k // 3
    for part in (third, third, k - 2 * third):
        x = x * _pow2(part, m)
    return x


def _pow2(k, m):
    """2**k exactly, by its bits (k an int32 within m's normal exponents)."""
    if m == jnp.float64:
        return lax.bitcast_convert_type((k.astype(jnp.int64) + 1023) << 52, jnp.float64)
    return lax.bitcast_convert_type((k + 127) << 23, jnp.float32)


@lower(aten.isnan.default)
def isnan(ctx, self):
    return jnp.isnan(self) if is_inexact(self.dtype) else jnp.zeros(self.shape, BOOL)


@lower(aten.isinf.default)
def isinf(ctx, self):
    return jnp.isinf(self) if is_inexact(self.dtype) else jnp.zeros(self.shape, BOOL)


@lower(aten.isfinite.default)
def isfinite(ctx, self):
    return jnp.isfinite(self) if is_inexact(self.dtype) else jnp.ones(self.shape, BOOL)


@lower(aten.isposinf.default)
def isposinf(ctx, self):
    return jnp.isposinf(self) if is_floating(self.dtype) else jnp.zeros(self.shape, BOOL)


@lower(aten.isneginf.default)
def isneginf(ctx, self):
    return jnp.isneginf(self) if is_floating(self.dtype) else jnp.zeros(self.shape, BOOL)


@lower(aten.signbit.default)
def signbit(ctx, self):
    if is_floating(self.dtype):
        return jnp.signbit(self)
    if is_signed_int(self.dtype):
        return self < 0
    return jnp.zeros(self.shape, BOOL)


@lower(aten.nan_to_num.default)
def nan_to_num(ctx, self, nan=None, posinf=None, neginf=None):
    dt = self.dtype
    if jnp.issubdtype(dt, jnp.complexfloating):  # (ATen: the real and imaginary parts each)
        parts = [nan_to_num(ctx, part, nan, posinf, neginf) for part in (jnp.real(self), jnp.imag(self))]
        return lax.complex(*parts)
    if not is_floating(dt):
        return self
    info = jnp.finfo(dt)

    def const(v, default):  # a replacement too large for dt becomes inf, as static_cast does
        with np.errstate(over="ignore"):
            return np.asarray(default if v is None else v, np.float64).astype(dt)

    nan_v = const(nan, 0.0)
    pos_v = const(posinf, info.max)
    neg_v = const(neginf, info.min)
    x = jnp.where(jnp.isnan(self), nan_v, self)
    x = jnp.where(jnp.isposinf(self), jnp.asarray(pos_v, dt), x)
    return jnp.where(jnp.isneginf(self), jnp.asarray(neg_v, dt), x)


@lower(aten.logit.default)
def logit(ctx, self, eps=None):
    dt = float_result(ctx, 0)
    x = cast(self, opmath(dt))
    if eps is not None:
        lo = jnp.asarray(eps, x.dtype)
        # (ATen's order, which matters for eps > 0.5: below eps first, then above 1 - eps)
        x = jnp.where(x < lo, lo, jnp.where(x > 1 - lo, 1 - lo, x))
        x = jnp.where(jnp.isnan(self), self.astype(x.dtype), x)
    return jnp.log(x / (1 - x)).astype(dt)


@lower(aten.logit_backward.default)
def logit_backward(ctx, grad_output, self, eps=None):
    dt = ctx.result_type(0, 1)
    m = opmath(dt)
    g = cast(grad_output, m)
    x = cast(self, m)
    inside = g / (x * (1 - x))
    edge = (x == 0) | (x == 1)
    inside = jnp.where(edge, g * jnp.inf, inside)
    if eps is None or eps < 0:
        out = jnp.where((x < 0) | (x > 1), jnp.nan, inside)
    else:
        out = jnp.where((x < eps) | (x > 1 - eps), 0, inside)
    return out.astype(dt)


# ------------------------------------------------------------- arithmetic


@lower(aten.add.Tensor, aten.add.Scalar)
def add(ctx, self, other, alpha=1):
    dt = ctx.result_type(0, 1)
    if dt == BOOL:
        return cast(self, BOOL) | (cast(other, BOOL) & cast(alpha, BOOL))
    m = opmath(dt)
    return (cast(self, m) + cast(alpha, m) * cast(other, m)).astype(dt)


def _sub_check(ctx):
    """ATen's sub_check (its meta kernel skips it): no bool operands."""
    for v in ctx.meta_args[:2]:
        if (v.dtype == torch.bool) if isinstance(v, torch.Tensor) else isinstance(v, bool):
            raise RuntimeError(
                "Subtraction, the `-` operator, with a bool tensor is not supported. "
                "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead."
            )


@lower(aten.sub.Tensor, aten.sub.Scalar)
def sub(ctx, self, other, alpha=1):
    _sub_check(ctx)
    dt = ctx.result_type(0, 1)
    m = opmath(dt)
    return (cast(self, m) - cast(alpha, m) * cast(other, m)).astype(dt)


@lower(aten.rsub.Tensor, aten.rsub.Scalar)
def rsub(ctx, self, other, alpha=1):
    _sub_check(ctx)
    dt = ctx.result_type(0, 1)
    m = opmath(dt)
    return (cast(other, m) - cast(alpha, m) * cast(self, m)).astype(dt)


@lower(aten.mul.Tensor, aten.mul.Scalar)
def mul(ctx, self, other):
    dt = ctx.result_type(0, 1)
    if dt == BOOL:
        return cast(self, BOOL) & cast(other, BOOL)
    m = opmath(dt)
    return (cast(self, m) * cast(other, m)).astype(dt)


@lower(aten.div.Tensor, aten.div.Scalar)
def div(ctx, self, other):
    dt = float_result(ctx, 0, 1)
    m = opmath(dt)
    return (cast(self, m) / cast(other, m)).astype(dt)  # (cast: XLA would make a bool's 0 / 0 a 0)


def _rem(a, b):
    """C's fmod/% (lax.rem), broadcasting like torch (lax ops do not)."""
    a, b = jnp.broadcast_arrays(a, b)
    return lax.rem(a, b)


def _div(a, b):
    a, b = jnp.broadcast_arrays(a, b)
    return lax.div(a, b)


def int_floor_div(a, b):
    q = _div(a, b)  # truncates, as C
    if not is_signed_int(a.dtype):
        return q
    r = _rem(a, b)
    return q - ((r != 0) & ((r < 0) != (b < 0))).astype(q.dtype)


def float_floor_div(a, b):
    """torch's div_floor_floating: Python's float floor division."""
    mod = _rem(a, b)  # fmod
    d = (a - mod) / b
    d = jnp.where((mod != 0) & ((b < 0) != (mod < 0)), d - 1, d)
    fl = jnp.floor(d)
    fl = jnp.where(d - fl > 0.5, fl + 1, fl)
    q = a / b
    res = jnp.where(d != 0, fl, jnp.copysign(jnp.zeros_like(q), q))
    return jnp.where(b == 0, q, res)


def floor_div(a, b):
    if is_integral(a.dtype):
        return int_floor_div(a, b)
    if a.dtype == BOOL:
        raise not_implemented("div_floor", a.dtype)
    return float_floor_div(a, b)


def trunc_div(a, b):
    if is_integral(a.dtype):
        return _div(a, b)
    if a.dtype == BOOL:
        raise not_implemented("div_trunc", a.dtype)
    return jnp.trunc(a / b)


def _no_integer_division_by_zero(ctx, dt, other):
    """ATen's integer division kernels raise for a zero divisor, after its
    conversion to the result dtype (`int8 // 256` divides by 0).  A Python
    number is checked here, or on the device when traced (a wrapped scalar);
    a tensor divisor is not (see README).  An empty result divides nothing:
    no error (take_along_dim of an empty tensor takes its indices % 0)."""
    if is_inexact(dt) or jnp.ndim(other) != 0 or 0 in ctx.out_shape:
        return
    if type(other) in (int, float, bool):
        if np.asarray(other).astype(dt) == 0:  # (int64 -> narrower ints wraps, as in c10)
            raise RuntimeError("ZeroDivisionError")
    else:
        ctx.check(cast(other, dt) != 0, "ZeroDivisionError")


@lower(aten.div.Tensor_mode, aten.div.Scalar_mode)
def div_mode(ctx, self, other, rounding_mode=None):
    if rounding_mode is None:
        return div(ctx, self, other)
    dt = ctx.result_type(0, 1)
    _no_integer_division_by_zero(ctx, dt, other)
    m = opmath(dt)
    fn = trunc_div if rounding_mode == "trunc" else floor_div
    return fn(cast(self, m), cast(other, m)).astype(dt)


@lower(aten.floor_divide.default, aten.floor_divide.Scalar)
def floor_divide(ctx, self, other):
    dt = ctx.result_type(0, 1)
    _no_integer_division_by_zero(ctx, dt, other)
    m = opmath(dt)
    return floor_div(rounded(self, dt, m), rounded(other, dt, m)).astype(dt)


def remainder_values(a, b):
    """Python's modulo: the result has the sign of the divisor."""
    r = _rem(a, b)
    if not is_signed_int(a.dtype) and not is_floating(a.dtype):
        return r
    return jnp.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)


@lower(aten.remainder.Tensor, aten.remainder.Scalar, aten.remainder.Scalar_Tensor)
def remainder(ctx, self, other):
    dt = ctx.result_type(0, 1)
    _no_integer_division_by_zero(ctx, dt, other)
    m = opmath(dt)
    return remainder_values(rounded(self, dt, m), rounded(other, dt, m)).astype(dt)


@lower(aten.fmod.Tensor, aten.fmod.Scalar)
def fmod(ctx, self, other):
    dt = ctx.result_type(0, 1)
    _no_integer_division_by_zero(ctx, dt, other)
    m = opmath(dt)
    return _rem(rounded(self, dt, m), rounded(other, dt, m)).astype(dt)


# -------------------------------------------------------------------- pow


def int_pow(base, exp):
    """torch's integer pow: wrap-around square-and-multiply; a negative
    exponent gives 0 except for bases 1 and -1."""
    base, exp = jnp.broadcast_arrays(base, exp)
    dt = base.dtype
    one = jnp.ones_like(base)
    e = jnp.where(exp < 0, jnp.zeros_like(exp), exp) if is_signed_int(dt) else exp

    def body(_, carry):
        result, b, e = carry
        result = jnp.where((e & 1) != 0, result * b, result)
        return result, b * b, e >> 1

    bits = 8 * dt.itemsize
    result, _, _ = lax.fori_loop(0, bits, body, (one, base, e))
    if is_signed_int(dt):
        odd = (exp & 1) != 0
        neg = jnp.where(base == 1, one, jnp.where(base == -1, jnp.where(odd, -one, one), jnp.zeros_like(base)))
        result = jnp.where(exp < 0, neg, result)
    return result


def pow_values(base, exp):
    dt = base.dtype
    if is_integral(dt):
        return int_pow(base, exp)
    if dt == BOOL:
        raise not_implemented("pow", dt)
    if jnp.issubdtype(dt, jnp.complexfloating):
        # exp(e * log(0)) is nan for a complex e; ATen's complex pow gives 0
        # when the exponent's real part is positive.
        return jnp.where((base == 0) & (jnp.real(exp) > 0), jnp.zeros((), dt), jnp.power(base, exp))
    return jnp.power(base, exp)


@lower(aten.pow.Tensor_Tensor, aten.pow.Scalar)
def pow_(ctx, self, exponent):
    dt = ctx.result_type(0, 1)
    m = opmath(dt)
    return pow_values(cast(self, m), cast(exponent, m)).astype(dt)


@lower(aten.pow.Tensor_Scalar)
def pow_tensor_scalar(ctx, self, exponent):
    dt = ctx.result_type(0, 1)
    if dt == BOOL and jnp.asarray(exponent).dtype == BOOL:
        # ATen's pow(Tensor, Scalar) copies the base for an exponent of 1
        # and fills 1 for 0 before any dtype dispatch: bool ** True works
        return jnp.where(exponent, self, jnp.ones(self.shape, dt))
    m = opmath(dt)
    x = cast(self, m)
    e = cast(exponent, m)
    if is_integral(m):  # ATen's pow(Tensor, Scalar) argument check, on the value before the cast (uint8)
        ctx.check(jnp.asarray(exponent) >= 0, "Integers to negative integer powers are not allowed.")
    if not is_floating(m):
        return pow_values(x, e).astype(dt)
    # torch evaluates these exponents exactly (x*x, sqrt, ...), not with pow().
    r = jnp.power(x, e)
    r = jnp.where(e == 2, x * x, r)
    r = jnp.where(e == 3, x * x * x, r)
    r = jnp.where(e == 0.5, jnp.sqrt(x), r)
    r = jnp.where(e == -0.5, 1 / jnp.sqrt(x), r)
    r = jnp.where(e == -1, 1 / x, r)
    r = jnp.where(e == -2, 1 / (x * x), r)
    return r.astype(dt)


# ------------------------------------------------------- other binary math


def _binary_float(fn, name=None):
    """INT_TO_FLOAT binary ops; with `name`, a float-only op (integer inputs are an error)."""

    def lowering(ctx, self, other):
        dt = ctx.result_type(0, 1)
        if name is not None and not is_inexact(dt):
            raise not_implemented(name, dt)
        dt = to_float(dt)
        m = opmath(dt)
        return fn(rounded(self, dt, m), rounded(other, dt, m)).astype(dt)

    return lowering


def _xlogy(x, y):
    r = jnp.where(x == 0, jnp.zeros_like(x), x * jnp.log(y))
    return jnp.where(jnp.isnan(y), y, r)


BINARY_FLOAT = {
    aten.atan2.default: jnp.arctan2,
    aten.copysign.Tensor: jnp.copysign,
    aten.copysign.Scalar: jnp.copysign,
    aten.xlogy.Tensor: _xlogy,
    aten.xlogy.Scalar_Other: _xlogy,
    aten.xlogy.Scalar_Self: _xlogy,
}
BINARY_FLOAT_ONLY = {
    aten.hypot.default: jnp.hypot,
    aten.logaddexp.default: jnp.logaddexp,
    aten.logaddexp2.default: jnp.logaddexp2,
}

for _op, _fn in BINARY_FLOAT.items():
    lower(_op)(_binary_float(_fn))
for _op, _fn in BINARY_FLOAT_ONLY.items():
    lower(_op)(_binary_float(_fn, _op._schema.name.split("::")[1]))


def _binary_same(fn, name=None):
    """Binary ops computed in the result type; with `name`, an integer/bool-only op."""

    def lowering(ctx, self, other):
        dt = ctx.result_type(0, 1)
        if name is not None and is_inexact(dt):
            raise not_implemented(name, dt)
        m = opmath(dt)
        return fn(cast(self, m), cast(other, m)).astype(dt)

    return lowering


def _heaviside(x, values):
    return jnp.where(x == 0, values, (x > 0).astype(x.dtype))


BINARY_SAME = {
    aten.maximum.default: nan_max,
    aten.minimum.default: nan_min,
    aten.fmax.default: jnp.fmax,
    aten.fmin.default: jnp.fmin,
}

for _op, _fn in BINARY_SAME.items():
    lower(_op)(_binary_same(_fn))

BITWISE = {
    aten.bitwise_and: jnp.bitwise_and,
    aten.bitwise_or: jnp.bitwise_or,
    aten.bitwise_xor: jnp.bitwise_xor,
}

for _packet, _fn in BITWISE.items():
    lower(_packet.Tensor, _packet.Scalar, _packet.Scalar_Tensor)(_binary_same(_fn, _packet._qualified_op_name[6:]))


def _gcd(a, b):
    """ATen's Euclid on |a|, |b| with C's truncating remainder.  (jnp.gcd
    never ends when an input is the type's minimum, whose |x| wraps to
    itself; ATen returns a negative divisor there: gcd(-128, 6) = -2.)"""
    a, b = jnp.broadcast_arrays(jnp.abs(a), jnp.abs(b))

    def step(state):
        a, b = state
        nonzero = a != 0
        return jnp.where(nonzero, lax.rem(b, jnp.where(nonzero, a, 1)), 0), jnp.where(nonzero, a, b)

    return lax.while_loop(lambda state: jnp.any(state[0] != 0), step, (a, b))[1]


def _lcm(a, b):
    """torch's: 0 where gcd is 0, else |a / gcd * b|, computed as C does
    (narrow types promoted to int, then wrapped back)."""
    g = _gcd(a, b)
    dtype = g.dtype
    wide = jnp.int32 if dtype.itemsize < 4 else dtype
    a, b, g = (x.astype(wide) for x in (a, b, g))
    return jnp.abs(jnp.where(g == 0, 0, lax.div(a, jnp.where(g == 0, 1, g))) * b).astype(dtype)


INTEGER_ONLY = {aten.gcd.default: _gcd, aten.lcm.default: _lcm}

for _op, _fn in INTEGER_ONLY.items():
    lower(_op)(_binary_same(_fn, _op._schema.name.split("::")[1]))


@lower(aten.heaviside.default)
def heaviside(ctx, self, values):
    if ctx.meta_args[0].dtype != getattr(ctx.meta_args[1], "dtype", None):
        raise RuntimeError("heaviside is not yet implemented for tensors with different dtypes")
    dt = ctx.result_type(0, 1)
    return _heaviside(self, values.astype(dt)).astype(dt)


def _shift_left(a, b):
    a, b = jnp.broadcast_arrays(a, b)  # (lax's shifts do not broadcast)
    bits = 8 * a.dtype.itemsize
    out_of_range = (b >= bits) | (b < 0) if is_signed_int(b.dtype) else b >= bits
    safe = jnp.where(out_of_range, jnp.zeros_like(b), b)
    return jnp.where(out_of_range, jnp.zeros_like(a), lax.shift_left(a, safe))


def _shift_right(a, b):
    a, b = jnp.broadcast_arrays(a, b)
    bits = 8 * a.dtype.itemsize
    if is_signed_int(a.dtype):
        out_of_range = (b >= bits) | (b < 0)
        safe = jnp.where(out_of_range, jnp.full_like(b, bits - 1), b)
        return lax.shift_right_arithmetic(a, safe)
    out_of_range = b >= bits
    safe = jnp.where(out_of_range, jnp.zeros_like(b), b)
    return jnp.where(out_of_range, jnp.zeros_like(a), lax.shift_right_logical(a, safe))


for _ops, _fn in (
    ((aten.bitwise_left_shift.Tensor, aten.bitwise_left_shift.Tensor_Scalar, aten.bitwise_left_shift.Scalar_Tensor,
      aten.__lshift__.Tensor, aten.__lshift__.Scalar), _shift_left),
    ((aten.bitwise_right_shift.Tensor, aten.bitwise_right_shift.Tensor_Scalar, aten.bitwise_right_shift.Scalar_Tensor,
      aten.__rshift__.Tensor, aten.__rshift__.Scalar), _shift_right),
):  # fmt: skip
    lower(*_ops)(_binary_same(_fn, "shift"))


# ------------------------------------------------------ comparisons, logic

COMPARISONS = {
    aten.eq: jnp.equal,
    aten.ne: jnp.not_equal,
    aten.lt: jnp.less,
    aten.le: jnp.less_equal,
    aten.gt: jnp.greater,
    aten.ge: jnp.greater_equal,
}


def _comparison(fn, name):
    def lowering(ctx, self, other):
        dt = ctx.result_type(0, 1)  # compared in the promoted type, result bool
        if is_complex(dt) and name not in ("eq", "ne"):  # complex numbers have no order
            raise not_implemented(f"{name}_cpu", dt)
        return fn(cast(self, dt), cast(other, dt))

    return lowering


for _packet, _fn in COMPARISONS.items():
    lower(_packet.Tensor, _packet.Scalar)(_comparison(_fn, _packet._qualified_op_name[6:]))


LOGICAL = {
    aten.logical_and.default: jnp.logical_and,
    aten.logical_or.default: jnp.logical_or,
    aten.logical_xor.default: jnp.logical_xor,
}


def _logical(fn):
    def lowering(ctx, self, other):
        return fn(cast(self, BOOL), cast(other, BOOL))

    return lowering


for _op, _fn in LOGICAL.items():
    lower(_op)(_logical(_fn))


# ---------------------------------------------------- clamp, where, lerp, ...


def clamp_values(x, lo, hi):
    if lo is not None:
        x = nan_max(x, lo)
    if hi is not None:
        x = nan_min(x, hi)
    return x


@lower(aten.clamp.default, aten.clamp.Tensor)
def clamp(ctx, self, min=None, max=None):
    dt = ctx.result_type(0, 1, 2)
    if jnp.issubdtype(self.dtype, jnp.floating) and any(isinstance(ctx.meta_args[i], complex) for i in (1, 2)):
        # ATen converts a floating self's Scalar bounds to its dtype (a
        # complex one with an imaginary part is refused: aten_checks)
        min, max = (None if b is None else jnp.real(b) for b in (min, max))
        dt = self.dtype
    m = opmath(dt)
    lo = None if min is None else cast(min, m)
    hi = None if max is None else cast(max, m)
    return clamp_values(cast(self, m), lo, hi).astype(dt)


@lower(aten.clamp_min.default, aten.clamp_min.Tensor)
def clamp_min(ctx, self, min):
    dt = ctx.result_type(0, 1)
    m = opmath(dt)
    return nan_max(cast(self, m), cast(min, m)).astype(dt)


@lower(aten.clamp_max.default, aten.clamp_max.Tensor)
def clamp_max(ctx, self, max):
    dt = ctx.result_type(0, 1)
    m = opmath(dt)
    return nan_min(cast(self, m), cast(max, m)).astype(dt)


@lower(aten.where.self)
def where(ctx, condition, self, other):
    dt = ctx.result_type(1, 2)
    return jnp.where(cast(condition, BOOL), cast(self, dt), cast(other, dt))


def lerp_values(start, end, weight):
    """torch's lerp: two formulas, picked by |weight| < 0.5, for accuracy at both ends."""
    diff = end - start
    small = jnp.abs(weight) < 0.5
    return jnp.where(small, start + weight * diff, end - diff * (1 - weight))


@lower(aten.lerp.Scalar, aten.lerp.Tensor)
def lerp(ctx, self, end, weight):
    """A tensor weight takes part in type promotion (int start and end with
    a 0-dim float weight give a float result); a Scalar weight does not."""
    tensor_weight = isinstance(ctx.meta_args[2], torch.Tensor)
    dt = ctx.result_type(0, 1, 2) if tensor_weight else ctx.result_type(0, 1)
    if not is_inexact(dt):
        raise not_implemented("lerp_kernel_tensor" if tensor_weight else "lerp_kernel_scalar", dt)
    m = opmath(dt)
    return lerp_values(cast(self, m), cast(end, m), cast(weight, m)).astype(dt)


@lower(aten.addcmul.default)
def addcmul(ctx, self, tensor1, tensor2, value=1):
    dt = ctx.result_type(0, 1, 2)
    if dt == BOOL:
        return cast(self, BOOL) | (cast(value, BOOL) & cast(tensor1, BOOL) & cast(tensor2, BOOL))
    m = opmath(dt)
    return (cast(self, m) + cast(value, m) * cast(tensor1, m) * cast(tensor2, m)).astype(dt)


@lower(aten.addcdiv.default)
def addcdiv(ctx, self, tensor1, tensor2, value=1):
    dt = ctx.result_type(0, 1, 2)
    m = opmath(dt)
    return (cast(self, m) + cast(value, m) * cast(tensor1, m) / cast(tensor2, m)).astype(dt)
