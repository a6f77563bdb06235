"""The backward ops of reparameterised sampling: `_standard_gamma_grad`
(Gamma/Chi2/StudentT `rsample()`) and `_dirichlet_grad` (Dirichlet/Beta).

Both are implicit derivatives of a sample x with respect to its shape
parameter at a fixed quantile: dx/dalpha = -(dF/dalpha) / (dF/dx) for the
distribution's CDF F.  ATen evaluates fitted approximations of them; these are
computed from the special functions instead (JAX's gamma derivative, an
asymptotic expansion where it loses accuracy, and the incomplete beta
function's continued fraction differentiated in forward mode), and agree with
a high-precision reference at least as well as the CPU's kernels do.
"""

import jax
import jax.numpy as jnp
import torch
from jax import lax

from ..dtype_names import found_dtype_error
from ..registry import lower
from .random import _check_floating, _compute


aten = torch.ops.aten


def _same_floating_dtype(kernel_name, expected, *others):
    for t in others:
        if t.dtype != expected.dtype:
            raise found_dtype_error(t.dtype, expected.dtype)
    _check_floating(kernel_name, expected.dtype)


def _broadcast_compute(ctx, *tensors):
    """The operands broadcast to the output's shape, in the compute dtype."""
    compute = _compute(ctx.out_dtype)
    return tuple(jnp.broadcast_to(t.astype(compute), ctx.out_shape) for t in tensors)


def _log1p_minus(t):
    """log1p(t) - t, without the cancellation for small |t| (its series there)."""
    series = t * t * (-1 / 2 + t * (1 / 3 + t * (-1 / 4 + t * (1 / 5 + t * (-1 / 6 + t * (1 / 7 - t / 8))))))
    return jnp.where(jnp.abs(t) < 0.1, series, jnp.log1p(t) - t)


# ------------------------------------------------------------------ gamma

# Below these alphas JAX's derivative is accurate to a few ulps; above them
# its float32 series lose digits (1e-3 at alpha = 30, 10% in the far tails
# at 100; float64 from 300) and the expansion's error, ~0.025 / alpha^2, is
# the smaller one.
_GAMMA_EXPANSION_FROM = {jnp.dtype(jnp.float32): 20.0, jnp.dtype(jnp.float64): 100.0}

# The series of B(t) below around t = 0: B = sum_k 2 (-1)^k t^(k-3) / (k (k-1)), k >= 3.
_B_SERIES = tuple(2 * (-1) ** k / (k * (k - 1)) for k in range(3, 12))


def _gamma_grad_large_alpha(alpha, x):
    """dx/dalpha for Gamma(alpha, 1) from Temme's uniform expansion

        P(alpha, x) = Phi(s) - phi(s) c0(eta) / sqrt(alpha) + O(alpha^-3/2),
        s = eta sqrt(alpha),  eta^2 / 2 = t - log1p(t),  t = x / alpha - 1,
        c0 = 1 / t - 1 / eta,

    differentiated implicitly at fixed P, which gives

        dx/dalpha = (1 + t) (log1p(t) / t - B / (2 alpha)),
        B = d(eta c0)/d eta = (t^2 - (1 + t) eta^2) / t^3."""
    t = (x - alpha) / alpha
    near = jnp.abs(t) < 0.1
    t_far = jnp.where(near, 1.0, t)
    eta2 = -2 * _log1p_minus(t_far)
    b_far = (t_far * t_far - (1 + t_far) * eta2) / (t_far * t_far * t_far)
    b_near = jnp.zeros_like(t)
    for c in reversed(_B_SERIES):
        b_near = b_near * t + c
    b = jnp.where(near, b_near, b_far)
    t_nonzero = jnp.where(t == 0, 1.0, t)
    log_ratio = jnp.where(t == 0, 1.0, jnp.log1p(t_nonzero) / t_nonzero)  # log(lambda) / (lambda - 1)
    return (1 + t) * (log_ratio - b / (2 * alpha))


def _standard_gamma_grad_meta(self, output):
    _same_floating_dtype("_standard_gamma_grad_cpu", self, output)
    return torch.empty(torch._C._infer_size(self.shape, output.shape), dtype=self.dtype, device="meta")


@lower(aten._standard_gamma_grad.default, meta=_standard_gamma_grad_meta)
def standard_gamma_grad(ctx, self, output):
    """d sample / d alpha of Gamma(alpha, 1) samples (self = alpha, output = the sample).
    As the CPU: 0 where the sample is <= 0, NaN where alpha <= 0 < sample."""
    alpha, x = _broadcast_compute(ctx, self, output)
    large = alpha >= _GAMMA_EXPANSION_FROM[alpha.dtype]
    grad = jnp.where(large, _gamma_grad_large_alpha(alpha, x), lax.random_gamma_grad(alpha, x))
    grad = jnp.where(x <= 0, jnp.zeros_like(grad), grad)
    return grad.astype(ctx.out_dtype)


# ---------------------------------------------------------------- dirichlet

# psi(z) ~ log z - 1/(2z) - sum_k B_2k / (2k z^2k): B_2k / 2k for k = 1..7.
_DIGAMMA_ASYMPTOTIC = (1 / 12, -1 / 120, 1 / 252, -1 / 240, 1 / 132, -691 / 32760, 1 / 12)


def _digamma_asymptotic_tail(z):
    """sum_k B_2k / (2k z^2k), for z >= 10."""
    w = 1 / (z * z)
    acc = jnp.zeros_like(z)
    for c in reversed(_DIGAMMA_ASYMPTOTIC):
        acc = (acc + c) * w
    return acc


def _digamma_difference(x, h):
    """psi(x + h) - psi(x) for x, h > 0 without subtracting two digammas
    (they cancel when h is small next to x): both arguments are moved past 10
    by psi(z + 1) = psi(z) + 1/z, whose terms difference to h / ((x + k)(x + h + k)),
    and the asymptotic series is differenced term by term."""
    y = x + h
    shift = 10
    steps = jnp.zeros_like(x)
    for k in range(shift):
        steps = steps + h / ((x + k) * (y + k))
    xs, ys = x + shift, y + shift
    # log(ys) - log(xs) - 1/(2 ys) + 1/(2 xs) - (tail(ys) - tail(xs))
    series = jnp.log1p(h / xs) + h / (2 * xs * ys) - (_digamma_asymptotic_tail(ys) - _digamma_asymptotic_tail(xs))
    return jnp.where(jnp.isfinite(y), series + steps, jax.scipy.special.digamma(y) - jax.scipy.special.digamma(x))


def _beta_continued_fraction(p, q, y, dp, dq):
    """The continued fraction K of I_y(p, q) = y^p (1 - y)^q K / (p B(p, q)),
    with d log K along the parameter direction (dp, dq): the fraction's
    recurrence (modified Lentz) carried in forward mode, iterated until both
    have converged.  Converges fast for y < (p + 1) / (p + q + 2); elements
    outside p, q > 0, 0 < y < 1 are not iterated."""
    dtype = p.dtype
    eps = jnp.finfo(dtype).eps
    tiny = jnp.asarray(jnp.finfo(dtype).tiny, dtype) * 1e6

    def guard(v):
        return jnp.where(jnp.abs(v) < tiny, tiny, v)

    def coefficient(m, p, q):
        """The numerators of the fraction: d_2m, then d_2m+1 (d_1 for m = 0)."""
        even = m * (q - m) * y / ((p + 2 * m - 1) * (p + 2 * m))
        odd = -(p + m) * (p + q + m) * y / ((p + 2 * m) * (p + 2 * m + 1))
        return even, odd

    def lentz_step(c, d, num):
        d = 1 / guard(1 + num * d)
        c = guard(1 + num / c)
        return c, d, c * d

    def round_(m, p, q, c, d):
        """Two Lentz steps (the even and the odd numerator); the product of their deltas."""
        even, odd = coefficient(m, p, q)
        c, d, delta_even = lentz_step(c, d, even)
        c, d, delta_odd = lentz_step(c, d, odd)
        return c, d, jnp.log(delta_even * delta_odd)

    def first(p, q):
        d = 1 / guard(1 - (p + q) * y / (p + 1))
        return jnp.ones_like(p), d, jnp.log(d)

    (c, d, log_k), (dc, dd, dlog_k) = jax.jvp(first, (p, q), (dp, dq))

    def body(state):
        m, c, d, log_k, dc, dd, dlog_k, done = state
        mf = m.astype(dtype)
        (c, d, log_delta), (dc, dd, dlog_delta) = jax.jvp(
            lambda p, q, c, d: round_(mf, p, q, c, d), (p, q, c, d), (dp, dq, dc, dd)
        )
        # (an element stops once its terms are below rounding: later ones only add rounding noise)
        log_k = jnp.where(done, log_k, log_k + log_delta)
        dlog_k = jnp.where(done, dlog_k, dlog_k + dlog_delta)
        converged = (jnp.abs(log_delta) <= 2 * eps) & (jnp.abs(dlog_delta) <= 2 * eps * (jnp.abs(dlog_k) + 1))
        return m + 1, c, d, log_k, dc, dd, dlog_k, done | converged

    def pending(state):
        m, *_, done = state
        return (m < 20000) & ~jnp.all(done)

    outside = ~((p > 0) & (q > 0) & (y > 0) & (y < 1) & jnp.isfinite(p + q))
    state = (jnp.int32(1), c, d, log_k, dc, dd, dlog_k, outside)
    _, _, _, log_k, _, _, dlog_k, _ = lax.while_loop(pending, body, state)
    return log_k, dlog_k


def _dirichlet_grad_one(x, alpha, total):
    """(d x / d alpha at fixed beta) / (1 - x) for x ~ Beta(alpha, beta = total - alpha),
    the quantity ATen's `_dirichlet_grad` returns: -(dI/dalpha) / pdf / (1 - x)
    for the regularized incomplete beta function I_x(alpha, beta).

    Away from the upper tail, log I = alpha log x + beta log(1 - x) - log alpha
    - log B(alpha, beta) + log K, and I / pdf = x (1 - x) K / alpha, so

        result = -x K / alpha (log x - 1/alpha + psi(alpha + beta) - psi(alpha) + dlogK/dalpha).

    In the upper tail I = 1 - J, J = I_{1-x}(beta, alpha), and likewise

        result = x K' / beta (log x + psi(alpha + beta) - psi(alpha) + dlogK'/dalpha)."""
    beta = total - alpha
    lower = x < (alpha + 1) / (total + 2)
    one, zero = jnp.ones_like(x), jnp.zeros_like(x)
    p, q = jnp.where(lower, alpha, beta), jnp.where(lower, beta, alpha)
    y = jnp.where(lower, x, 1 - x)
    log_k, dlog_k = _beta_continued_fraction(p, q, y, jnp.where(lower, one, zero), jnp.where(lower, zero, one))
    dlog = jnp.log(x) + _digamma_difference(alpha, beta) + dlog_k
    lower_grad = -x * jnp.exp(log_k) / alpha * (dlog - 1 / alpha)
    upper_grad = x * jnp.exp(log_k) / beta * dlog
    grad = jnp.where(lower, lower_grad, upper_grad)
    # As the CPU: 0 at x = 0 and at alpha = 0 (a Beta(0, beta) sample is 0).
    # Outside the distribution's domain, NaN (the CPU's values there mean nothing).
    grad = jnp.where((x == 0) | (alpha == 0), zero, grad)
    return jnp.where((alpha < 0) | (beta <= 0) | (x < 0) | (x > 1), jnp.nan, grad)


def _dirichlet_grad_meta(x, alpha, total):
    _same_floating_dtype("_dirichlet_grad_cpu", x, alpha, total)
    shape = torch._C._infer_size(torch._C._infer_size(x.shape, alpha.shape), total.shape)
    return torch.empty(shape, dtype=x.dtype, device="meta")


@lower(aten._dirichlet_grad.default, meta=_dirichlet_grad_meta)
def dirichlet_grad(ctx, x, alpha, total):
    """Dirichlet (and Beta) rsample()'s backward."""
    x, alpha, total = _broadcast_compute(ctx, x, alpha, total)
    return _dirichlet_grad_one(x, alpha, total).astype(ctx.out_dtype)
