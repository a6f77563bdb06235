"""The backward ops of rsample(): `_standard_gamma_grad` (Gamma and the
distributions built on it) and `_dirichlet_grad` (Dirichlet, Beta).

Both are the derivative of a sample with respect to its shape parameter at a
fixed quantile.  The CPU's kernels evaluate fitted approximations of it (off
by ~1e-3 for typical samples and by up to 50% in the tails), so values are
checked against a high-precision reference (mpmath, differentiating the
regularized incomplete gamma and beta functions), and against the CPU only
within its approximations' error."""

import mpmath
import pytest
import torch
import torchtpu  # noqa: F401
from utils import TPU


@pytest.fixture(autouse=True)
def _strict(no_fallback):
    yield


def cpu(t):
    assert t.device.type == "tpu"
    return t.cpu()


mpmath.mp.dps = 30


def _gamma_reference(alpha, x):
    """dx/dalpha for x ~ Gamma(alpha, 1): -(dP/dalpha) / pdf, from the tail
    (lower or upper) that does not round to 1, in log space."""
    alpha, x = mpmath.mpf(alpha), mpmath.mpf(x)
    lower = x < alpha
    bounds = (0, x) if lower else (x, mpmath.inf)

    def log_tail(a):
        return mpmath.log(mpmath.gammainc(a, *bounds, regularized=True))

    log_pdf = (alpha - 1) * mpmath.log(x) - x - mpmath.loggamma(alpha)
    grad = mpmath.diff(log_tail, alpha) * mpmath.exp(log_tail(alpha) - log_pdf)
    return float(-grad if lower else grad)


def _beta_reference(x, alpha, total):
    """What `_dirichlet_grad` returns: (dx/dalpha at fixed beta) / (1 - x) for
    x ~ Beta(alpha, beta = total - alpha)."""
    x, alpha, total = mpmath.mpf(x), mpmath.mpf(alpha), mpmath.mpf(total)
    beta = total - alpha
    lower = x < (alpha + 1) / (total + 2)

    def log_tail(a):  # (the upper tail as the lower one of Beta(beta, alpha): no subtraction)
        if lower:
            return mpmath.log(mpmath.betainc(a, beta, 0, x, regularized=True))
        return mpmath.log(mpmath.betainc(beta, a, 0, 1 - x, regularized=True))

    log_pdf = (alpha - 1) * mpmath.log(x) + (beta - 1) * mpmath.log1p(-x) - mpmath.log(mpmath.beta(alpha, beta))
    grad = mpmath.diff(log_tail, alpha) * mpmath.exp(log_tail(alpha) - log_pdf) / (1 - x)
    return float(-grad if lower else grad)


def _float32_exact(*values):
    """Inputs rounded to float32, as doubles: the reference and both dtypes see the same numbers."""
    return [torch.tensor(v, dtype=torch.float32).double() for v in values]


# ------------------------------------------------------------------ gamma


def _gamma_points():
    """Shape parameters on both sides of the switch to the asymptotic
    expansion (20 in float32, 100 in float64): samples from -3 to +5
    standard deviations, and tails far beyond (x = alpha / 1000 .. 50 alpha)."""
    alphas, xs, tail = [], [], []
    for alpha in (0.01, 0.3, 1.0, 4.0, 15.0, 19.5, 20.5, 60.0, 99.0, 101.0, 1e3, 1e5):
        sd = alpha**0.5
        central = [alpha + z * sd for z in (-3, -1, 0, 0.5, 2, 5)]
        for x in central + [alpha * r for r in (1e-3, 0.2, 4.0, 50.0)]:
            if x > 0:
                alphas.append(alpha)
                xs.append(x)
                tail.append(x not in central)
    return (*_float32_exact(alphas, xs), torch.tensor(tail))


def test_standard_gamma_grad_against_reference():
    alpha, x, tail = _gamma_points()
    expected = torch.tensor([_gamma_reference(a, s) for a, s in zip(alpha.tolist(), x.tolist())], dtype=torch.float64)
    # (float32 in the far tails: JAX's series lose digits, 1e-3 at x = alpha / 1000 for alpha just below 20)
    for dtype, rtol, tail_rtol in ((torch.float32, 1e-4, 2e-3), (torch.float64, 5e-6, 5e-6)):
        got = cpu(torch._standard_gamma_grad(alpha.to(dtype).to(TPU), x.to(dtype).to(TPU)))
        assert got.dtype == dtype
        got = got.double()
        torch.testing.assert_close(got[~tail], expected[~tail], rtol=rtol, atol=0)
        torch.testing.assert_close(got[tail], expected[tail], rtol=tail_rtol, atol=0)


def test_standard_gamma_grad_like_cpu():
    # Samples as Gamma(alpha).rsample() draws them: within the CPU approximation's error.
    torch.manual_seed(0)
    alpha = torch.cat([torch.logspace(-3, 4, 71), torch.tensor([0.8, 1.0, 7.99, 8.0, 8.01])]).repeat_interleave(40)
    x = torch._standard_gamma(alpha)
    for dtype in (torch.float32, torch.float64):
        a, s = alpha.to(dtype), x.to(dtype)
        torch.testing.assert_close(cpu(torch._standard_gamma_grad(a.to(TPU), s.to(TPU))),
                                   torch._standard_gamma_grad(a, s), rtol=2e-3, atol=1e-6)
    # Edge values: 0 where the sample is <= 0; NaN where alpha <= 0 < sample, for NaNs and infinite samples.
    a = torch.tensor([0.0, 0.0, 1.0, 2.0, float("nan"), 1.0, 0.5, -1.0, 2.0, 1e3, 1e3, 1e3])
    s = torch.tensor([1.0, 0.0, 0.0, 1e-30, 1.0, float("nan"), float("inf"), 1.0, -1.0, 0.0, float("inf"), -5.0])
    torch.testing.assert_close(cpu(torch._standard_gamma_grad(a.to(TPU), s.to(TPU))),
                               torch._standard_gamma_grad(a, s), equal_nan=True)
    # Broadcasting, bf16 (computed in float32), and ATen's errors.
    a, s = torch.tensor([0.5, 2.0, 20.0]), torch.tensor([[0.1, 1.0, 21.0], [0.7, 3.0, 9.0]])
    expected = torch._standard_gamma_grad(a.expand_as(s), s)  # (the CPU resizes its output, with a warning)
    torch.testing.assert_close(cpu(torch._standard_gamma_grad(a.to(TPU), s.to(TPU))), expected, rtol=2e-3, atol=0)
    a16, s16 = a.bfloat16(), s.bfloat16()
    got = cpu(torch._standard_gamma_grad(a16.to(TPU), s16.to(TPU)))
    assert got.dtype == torch.bfloat16
    expected = torch._standard_gamma_grad(a16.float().expand_as(s), s16.float())
    torch.testing.assert_close(got.float(), expected, rtol=1e-2, atol=1e-2)
    with pytest.raises(RuntimeError, match="Found dtype Float but expected Double"):
        torch._standard_gamma_grad(a.double().to(TPU), s.to(TPU))
    with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):
        torch._standard_gamma_grad(a.long().to(TPU), s.long().to(TPU))


def test_gamma_rsample_backward():
    alpha = torch.tensor([0.3, 1.0, 2.5, 12.0, 40.0], device=TPU, requires_grad=True)
    sample = torch.distributions.Gamma(alpha, 1.0).rsample((500,))
    sample.sum().backward()
    s = sample.detach().cpu()
    expected = torch._standard_gamma_grad(alpha.detach().cpu().expand_as(s), s).sum(0)
    torch.testing.assert_close(cpu(alpha.grad), expected, rtol=2e-3, atol=1e-5)


# ---------------------------------------------------------------- dirichlet


def _beta_points():
    """Concentrations from 0.05 to 2000 on both sides, samples from -2 to +1.5
    standard deviations around the mean (kept inside (0, 1)) and two fixed
    ones; both branches of the continued fraction (x below and above
    (alpha + 1) / (total + 2))."""
    xs, alphas, totals = [], [], []
    conc = (0.05, 0.7, 3.0, 40.0, 2000.0)
    for alpha in conc:
        for beta in conc:
            total = alpha + beta
            mean = alpha / total
            sd = (alpha * beta / (total * total * (total + 1))) ** 0.5
            for x in [mean + z * sd for z in (-2, 0, 1.5)] + [0.01, 0.9]:
                x = min(max(x, 1e-6), 1 - 1e-6)
                xs.append(x)
                alphas.append(alpha)
                totals.append(total)
    return _float32_exact(xs, alphas, totals)


def test_dirichlet_grad_against_reference():
    x, alpha, total = _beta_points()
    expected = torch.tensor([_beta_reference(*v) for v in zip(x.tolist(), alpha.tolist(), total.tolist())],
                            dtype=torch.float64)
    for dtype, rtol in ((torch.float32, 5e-4), (torch.float64, 1e-11)):
        got = cpu(torch._dirichlet_grad(*(t.to(dtype).to(TPU) for t in (x, alpha, total))))
        assert got.dtype == dtype
        torch.testing.assert_close(got.double(), expected, rtol=rtol, atol=0)


def test_dirichlet_grad_like_cpu():
    # Beta samples over concentrations 0.1..100, in double (the CPU's float32
    # kernel keeps float where its terms cancel, and is off by far more).
    conc = torch.logspace(-1, 2, 10, dtype=torch.float64)
    a, b = (t.flatten().repeat_interleave(8) for t in torch.meshgrid(conc, conc, indexing="ij"))
    torch.manual_seed(0)
    x = torch.distributions.Beta(a, b).sample()
    keep = (x > 1e-6) & (x < 1 - 1e-6)
    x, a, total = x[keep], a[keep], (a + b)[keep]
    torch.testing.assert_close(cpu(torch._dirichlet_grad(x.to(TPU), a.to(TPU), total.to(TPU))),
                               torch._dirichlet_grad(x, a, total), rtol=3e-3, atol=0)
    # Edge values: 0 at x = 0 and at alpha = 0, NaN for NaN.
    x, a, total = torch.tensor([0.0, 0.5, float("nan"), 1e-30]), torch.tensor([1.0, 0.0, 1.0, 0.5]), torch.ones(4) * 2
    torch.testing.assert_close(cpu(torch._dirichlet_grad(x.to(TPU), a.to(TPU), total.to(TPU))),
                               torch._dirichlet_grad(x, a, total), equal_nan=True)
    with pytest.raises(RuntimeError, match="Found dtype Double but expected Float"):
        torch._dirichlet_grad(x.to(TPU), a.double().to(TPU), total.to(TPU))
    with pytest.raises(NotImplementedError, match="\"_dirichlet_grad_cpu\" not implemented for 'Long'"):
        torch._dirichlet_grad(*(t.long().to(TPU) for t in (x, a, total)))


def test_dirichlet_and_beta_rsample_backward():
    from torch.distributions.dirichlet import _Dirichlet_backward

    conc = torch.tensor([0.5, 2.0, 5.0], device=TPU, requires_grad=True)
    weights = torch.tensor([1.0, -2.0, 0.5])
    sample = torch.distributions.Dirichlet(conc).rsample((300,))
    (sample * weights.to(TPU)).sum().backward()
    s = sample.detach().cpu()
    expected = _Dirichlet_backward(s, conc.detach().cpu().expand_as(s), weights.expand_as(s)).sum(0)
    torch.testing.assert_close(cpu(conc.grad), expected, rtol=1e-2, atol=1e-4)
    a = torch.tensor([0.7, 3.0], device=TPU, requires_grad=True)
    torch.distributions.Beta(a, 2.0).rsample((100,)).sum().backward()
    assert cpu(a.grad).isfinite().all() and (a.grad.cpu() > 0).all()  # (a larger alpha moves Beta samples up)
