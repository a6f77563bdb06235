"""Random ops: shapes, dtypes, ranges, reproducibility and rough statistics.

The streams are not CPU's (no backend reproduces mt19937/Philox bit for bit),
so values are checked by their properties, not against the CPU."""

import math
import re

import pytest
import torch
import torchtpu
from utils import TPU


@pytest.fixture(autouse=True)
def _strict(no_fallback):
    yield


N = 20000


def cpu(t):
    assert t.device.type == "tpu"
    return t.cpu()


# ------------------------------------------------------------ uniform


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.float16])
def test_rand_range_and_moments(dtype):
    x = cpu(torch.rand(N, device=TPU, dtype=dtype))
    assert x.dtype == dtype and x.shape == (N,)
    assert x.min() >= 0 and x.max() < 1
    x = x.double()
    assert abs(x.mean() - 0.5) < 0.02 and abs(x.var() - 1 / 12) < 0.01
    # Values are multiples of 2**-digits (bf16: 2**-8), never rounded up to 1.
    digits = {torch.float32: 24, torch.bfloat16: 8, torch.float64: 53, torch.float16: 11}[dtype]
    scaled = x * 2.0**digits
    assert torch.equal(scaled, scaled.round())


def test_uniform_inplace_bounds_and_view():
    x = torch.zeros(4, 1000, device=TPU)
    x[1].uniform_(-3, -1)  # in-place on a view: other rows untouched
    y = cpu(x)
    assert (y[0] == 0).all() and (y[2:] == 0).all()
    assert y[1].min() >= -3 and y[1].max() < -1 and y[1].std() > 0.4
    with pytest.raises(RuntimeError, match="from=2.0 > to=1.0"):
        torch.empty(3, device=TPU).uniform_(2, 1)


def test_rand_like_and_generator_kwarg():
    base = torch.empty(3, 5, device=TPU, dtype=torch.bfloat16)
    assert torch.rand_like(base).dtype == torch.bfloat16
    g = torch.Generator(device=TPU).manual_seed(5)
    a = torch.rand(3, generator=g, device=TPU)
    g.manual_seed(5)
    b = torch.rand(3, generator=g, device=TPU)
    assert torch.equal(cpu(a), cpu(b))


# ------------------------------------------------------------- normal


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_randn_moments(dtype):
    x = cpu(torch.randn(N, device=TPU, dtype=dtype)).double()
    assert abs(x.mean()) < 0.04 and abs(x.std() - 1) < 0.04
    assert (x.abs() < 1).double().mean().sub(0.6827).abs() < 0.02  # Gaussian, not uniform


def test_normal_variants():
    y = cpu(torch.empty(N, device=TPU).normal_(3.0, 0.5))
    assert abs(y.mean() - 3) < 0.03 and abs(y.std() - 0.5) < 0.03
    mean = torch.tensor([-10.0, 10.0]).repeat(N // 2).to(TPU)
    z = cpu(torch.normal(mean, 0.1)).view(-1, 2)
    assert (z[:, 0] - -10).abs().max() < 1 and (z[:, 1] - 10).abs().max() < 1
    std = torch.tensor([0.0, 2.0]).repeat(N // 2).to(TPU)
    w = cpu(torch.normal(1.0, std)).view(-1, 2)
    assert (w[:, 0] == 1).all() and abs(w[:, 1].std() - 2) < 0.1
    v = cpu(torch.normal(mean, std))
    assert v.shape == (N,)
    u = cpu(torch.normal(2.0, 3.0, size=(N,), device=TPU))
    assert abs(u.mean() - 2) < 0.1 and abs(u.std() - 3) < 0.1
    with pytest.raises(RuntimeError, match="std >= 0.0"):
        torch.empty(3, device=TPU).normal_(0, -1)


def test_complex_randn_rand():
    z = cpu(torch.randn(N, device=TPU, dtype=torch.complex64))
    assert z.dtype == torch.complex64
    assert abs(z.abs().pow(2).mean() - 1) < 0.05 and abs(z.real.std() - 0.7071) < 0.02
    assert abs(torch.corrcoef(torch.stack([z.real, z.imag]))[0, 1]) < 0.05
    u = cpu(torch.rand(N, device=TPU, dtype=torch.complex64))
    assert u.real.min() >= 0 and u.imag.max() < 1 and abs(u.imag.mean() - 0.5) < 0.02


def test_log_normal_exponential_cauchy_geometric():
    ln = cpu(torch.empty(N, device=TPU).log_normal_(0.0, 0.25))
    assert ln.min() > 0 and abs(ln.log().mean()) < 0.01 and abs(ln.log().std() - 0.25) < 0.01
    ex = cpu(torch.empty(N, device=TPU).exponential_(2.0))
    assert ex.min() > 0 and abs(ex.mean() - 0.5) < 0.02
    ca = cpu(torch.empty(N, device=TPU).cauchy_(1.0, 2.0))
    assert abs(ca.median() - 1) < 0.1 and abs((ca - 1).abs().median() - 2) < 0.15
    ge = cpu(torch.empty(N, device=TPU).geometric_(0.25))
    assert ge.min() >= 1 and torch.equal(ge, ge.round()) and abs(ge.mean() - 4) < 0.15
    po = cpu(torch.poisson(torch.full((N,), 3.0, device=TPU)))
    assert torch.equal(po, po.round()) and abs(po.mean() - 3) < 0.1 and abs(po.var() - 3) < 0.2


# ----------------------------------------------------------- bernoulli


def test_bernoulli_variants():
    p = torch.tensor([0.0, 1.0, 0.3]).repeat(N // 3).to(TPU)
    b = cpu(torch.bernoulli(p)).view(-1, 3)
    assert b.dtype == torch.float32
    assert (b[:, 0] == 0).all() and (b[:, 1] == 1).all() and abs(b[:, 2].mean() - 0.3) < 0.03
    x = cpu(torch.empty(N, device=TPU, dtype=torch.bfloat16).bernoulli_(0.75))
    assert set(x.unique().tolist()) == {0.0, 1.0} and abs(x.float().mean() - 0.75) < 0.02
    y = cpu(torch.bernoulli(torch.empty(N, device=TPU, dtype=torch.int64), 0.2))
    assert y.dtype == torch.int64 and abs(y.double().mean() - 0.2) < 0.02
    z = cpu(torch.empty(3, N // 3, device=TPU, dtype=torch.bool).bernoulli_(p.view(-1, 3).t()))
    assert (~z[0]).all() and z[1].all()
    with pytest.raises(RuntimeError, match="p to be in"):
        torch.empty(3, device=TPU).bernoulli_(1.5)


# --------------------------------------------------------- integers


@pytest.mark.parametrize(
    "dtype, high",
    [
        (torch.float32, 2**24),
        (torch.bfloat16, 2**8),
        (torch.float64, 2**53),
        (torch.int8, 2**7 - 1),
        (torch.uint8, 2**8 - 1),
        (torch.int32, 2**31 - 1),
        (torch.int64, 2**63 - 1),
        (torch.bool, 1),
    ],
)
def test_random_default_range(dtype, high):
    x = cpu(torch.empty(N, device=TPU, dtype=dtype).random_())
    assert x.dtype == dtype
    v = x.double() if dtype != torch.int64 else x
    assert v.min() >= 0 and v.max() <= high
    if dtype not in (torch.bool, torch.bfloat16, torch.int8, torch.uint8):
        assert v.max() > high / 2  # covers the range, not a narrower one
    if dtype.is_floating_point:
        assert torch.equal(x, x.round())


def test_random_from_to_and_randint():
    x = cpu(torch.empty(N, device=TPU, dtype=torch.int64).random_(-5, 5))
    assert x.min() == -5 and x.max() == 4
    y = cpu(torch.empty(N, device=TPU).random_(10))
    assert y.min() == 0 and y.max() == 9 and torch.equal(y, y.round())
    z = cpu(torch.randint(3, 7, (N,), device=TPU))
    assert z.dtype == torch.int64 and z.min() == 3 and z.max() == 6
    counts = torch.bincount(z - 3).double() / N
    assert (counts - 0.25).abs().max() < 0.02
    w = cpu(torch.randint(2**40, 2**40 + 3, (N,), device=TPU))
    assert w.min() == 2**40 and w.max() == 2**40 + 2
    full = cpu(torch.empty(N, device=TPU, dtype=torch.int64).random_(-(2**63), None))
    assert full.min() < -(2**61) and full.max() > 2**61
    f = cpu(torch.randint(0, 3, (N,), device=TPU, dtype=torch.bfloat16))
    assert f.dtype == torch.bfloat16 and set(f.unique().tolist()) == {0.0, 1.0, 2.0}
    with pytest.raises(RuntimeError, match="from.* to be less than 'to'"):
        torch.empty(3, device=TPU, dtype=torch.int64).random_(5, 5)


def test_randperm():
    for n in (1, 10, 1000):
        p = cpu(torch.randperm(n, device=TPU))
        assert p.dtype == torch.int64 and torch.equal(p.sort().values, torch.arange(n))
    q = cpu(torch.randperm(7, device=TPU, dtype=torch.float32))
    assert q.dtype == torch.float32 and torch.equal(q.sort().values, torch.arange(7.0))
    assert cpu(torch.randperm(0, device=TPU)).shape == (0,)
    assert not torch.equal(cpu(torch.randperm(1000, device=TPU)), torch.arange(1000))
    out = torch.empty(0, dtype=torch.int64, device=TPU)
    torch.randperm(5, out=out)
    assert torch.equal(out.cpu().sort().values, torch.arange(5))
    g = torch.Generator(device=TPU).manual_seed(1)
    r1 = torch.randperm(50, generator=g, device=TPU)
    g.manual_seed(1)
    assert torch.equal(cpu(r1), cpu(torch.randperm(50, generator=g, device=TPU)))
    assert torch.randperm(4, device="tpu:1").device == torch.device("tpu", 1)


def test_multinomial():
    probs = torch.tensor([[0.0, 1.0, 3.0, 0.0], [5.0, 0.0, 0.0, 5.0]]).to(TPU)
    s = cpu(torch.multinomial(probs, 2000, replacement=True))
    assert s.shape == (2, 2000) and s.dtype == torch.int64
    assert set(s[0].unique().tolist()) <= {1, 2} and set(s[1].unique().tolist()) <= {0, 3}
    assert abs((s[0] == 2).double().mean() - 0.75) < 0.04
    t = cpu(torch.multinomial(probs, 2))  # without replacement: all non-zero categories
    assert sorted(t[0].tolist()) == [1, 2] and sorted(t[1].tolist()) == [0, 3]
    u = cpu(torch.multinomial(torch.ones(10, device=TPU), 10))
    assert torch.equal(u.sort().values, torch.arange(10))
    # Without replacement, first draws follow the probabilities.
    first = cpu(torch.multinomial(torch.tensor([1.0, 3.0]).expand(4000, 2).to(TPU), 1))
    assert abs(first.double().mean() - 0.75) < 0.04


# ------------------------------------------------------ reproducibility


def _draw():
    return [
        cpu(torch.rand(5, device=TPU)),
        cpu(torch.randn(5, device=TPU)),
        cpu(torch.randint(0, 100, (5,), device=TPU)),
        cpu(torch.randperm(8, device=TPU)),
        cpu(torch.bernoulli(torch.full((5,), 0.5, device=TPU))),
    ]


def _equal(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b))


def test_manual_seed_reproducible_and_seeds_differ():
    torch.manual_seed(123)
    a = _draw()
    torch.manual_seed(123)
    b = _draw()
    torch.manual_seed(124)
    c = _draw()
    assert _equal(a, b)
    assert not torch.equal(a[0], c[0]) and not torch.equal(a[1], c[1])
    torch.tpu.manual_seed(7)
    d = _draw()
    torch.tpu.manual_seed(7)
    assert _equal(d, _draw())
    # Successive draws differ (the generator's offset advances).
    assert not torch.equal(cpu(torch.rand(5, device=TPU)), cpu(torch.rand(5, device=TPU)))


def test_rng_state_round_trip():
    torch.manual_seed(0)
    torch.rand(3, device=TPU)
    state = torch.tpu.get_rng_state()
    a = _draw()
    torch.tpu.set_rng_state(state)
    assert _equal(a, _draw())


def test_generator_independent_of_default():
    g = torch.Generator(device=TPU)
    g.manual_seed(99)
    a = cpu(torch.empty(6, device=TPU).normal_(generator=g))
    torch.rand(10, device=TPU)  # default generator use does not disturb g
    g.manual_seed(99)
    b = cpu(torch.empty(6, device=TPU).normal_(generator=g))
    assert torch.equal(a, b)
    g2 = torch.Generator(device=TPU).manual_seed(100)
    assert not torch.equal(a, cpu(torch.empty(6, device=TPU).normal_(generator=g2)))


def test_devices_have_separate_generators():
    torch.manual_seed(5)
    a0 = cpu(torch.rand(4, device="tpu:0"))
    a1 = cpu(torch.rand(4, device="tpu:1"))
    torch.manual_seed(5)
    torch.rand(100, device="tpu:1")  # advancing tpu:1 leaves tpu:0 alone
    assert torch.equal(a0, cpu(torch.rand(4, device="tpu:0")))
    assert a1.shape == (4,)


def test_dropout_style_usage():
    x = torch.ones(N, device=TPU)
    mask = torch.empty_like(x).bernoulli_(0.9)
    kept = cpu(x * mask)
    assert abs(kept.mean() - 0.9) < 0.02


def test_graphsafe_state_is_shared_and_clone_state_is_not():
    # AOTAutograd swaps a generator's state into the default one
    # (graphsafe_set_state) so checkpointed random ops advance that generator.
    default = torch.tpu.default_generators[0]
    assert default is not None and len(torch.tpu.default_generators) == torch.tpu.device_count()
    own = default.clone_state().manual_seed(123)
    saved = default.graphsafe_get_state()
    before = default.get_state()
    default.graphsafe_set_state(own)
    a = torch.rand(5, device="tpu")
    default.graphsafe_set_state(saved)
    assert torch.equal(default.get_state(), before)  # the default's own state did not move
    assert own.get_offset() > 0  # the draw advanced the swapped-in generator
    again = torch.Generator("tpu").manual_seed(123)
    assert torch.equal(a.cpu(), torch.rand(5, device="tpu", generator=again).cpu())


# ------------------------------------------ gamma, binomial, dirichlet


def _assert_moments(x, mean, var, kurtosis=0.0, sigmas=6.0):
    """Sample mean and variance within `sigmas` standard errors of the
    theoretical ones (the variance's standard error from the excess kurtosis)."""
    x = x.double().flatten()
    n = x.numel()
    assert abs(x.mean().item() - mean) < sigmas * math.sqrt(var / n), (x.mean().item(), mean)
    assert abs(x.var().item() - var) < sigmas * var * math.sqrt((2 + kurtosis) / n), (x.var().item(), var)


GAMMA_ALPHAS = [0.125, 0.5, 1.0, 2.5, 32.0]  # (exact in bf16)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_standard_gamma_moments(dtype):
    alpha = torch.tensor(GAMMA_ALPHAS, dtype=dtype).repeat(10000, 1)
    x = cpu(torch._standard_gamma(alpha.to(TPU)))
    assert x.dtype == dtype and x.shape == alpha.shape
    assert (x > 0).all() and x.isfinite().all()
    for j, a in enumerate(GAMMA_ALPHAS):
        _assert_moments(x[:, j], a, a, kurtosis=6 / a)  # Gamma(a, 1): mean = var = a


def test_standard_gamma_edge_values_like_cpu():
    # ATen clamps to the smallest normal: alpha 0 (sample 0), alpha <= -2/3
    # and NaN (its sampler yields NaN) all give it; inf gives inf.
    # In (-2/3, 0) ATen's boost gives a finite sample.
    alpha = torch.tensor([0.0, -1.0, -3.0, float("nan"), float("inf"), 1e-30, -0.5, -0.5])
    x = cpu(torch._standard_gamma(alpha.to(TPU)))
    assert torch.equal(x[:6], torch._standard_gamma(alpha[:6]))
    assert (x[6:] > 0).all() and x[6:].isfinite().all()
    half = cpu(torch._standard_gamma(torch.zeros(8, device=TPU, dtype=torch.float16)))
    assert (half == torch.finfo(torch.float16).tiny).all()
    with pytest.raises(NotImplementedError, match="\"gamma_cpu\" not implemented for 'Long'"):
        torch._standard_gamma(torch.ones(3, device=TPU, dtype=torch.int64))


BINOMIAL_CASES = [(10.0, 0.3), (1000.0, 0.3), (50.0, 0.9), (7.0, 0.05), (3.0, 0.5), (20.0, 0.999), (1e6, 0.5)]


def test_binomial_moments():
    # Inversion (n p < 10) and BTRS (n p >= 10) samplers, p above and below 1/2.
    count = torch.tensor([n for n, _ in BINOMIAL_CASES]).repeat(20000, 1)
    prob = torch.tensor([p for _, p in BINOMIAL_CASES]).repeat(20000, 1)
    x = cpu(torch.binomial(count.to(TPU), prob.to(TPU)))
    assert x.dtype == torch.float32 and x.shape == count.shape
    assert torch.equal(x, x.round()) and (x >= 0).all() and (x <= count).all()
    for j, (n, p) in enumerate(BINOMIAL_CASES):
        npq = n * p * (1 - p)
        _assert_moments(x[:, j], n * p, npq, kurtosis=(1 - 6 * p * (1 - p)) / npq)


def test_binomial_edge_values_dtypes_and_errors_like_cpu():
    # ATen: 0 where count <= 0 or prob <= 0, count where prob >= 1, NaN prob gives NaN.
    count = torch.tensor([10.0, 10.0, 10.0, -3.0, 0.0, 10.0, 10.0, 2.5])
    prob = torch.tensor([0.0, 1.0, -0.5, 0.5, 0.5, 1.5, float("nan"), 1.0])
    expected = torch.binomial(count, prob)
    torch.testing.assert_close(cpu(torch.binomial(count.to(TPU), prob.to(TPU))), expected, equal_nan=True)
    # A non-integer count keeps its fraction where p > 1/2 (count - Binomial(count, 1 - p));
    # prob broadcasts to count's shape.
    x = cpu(torch.binomial(torch.full((2, 1000), 2.5, device=TPU), torch.tensor([[0.9], [0.1]], device=TPU)))
    assert x.shape == (2, 1000)
    assert set(x[0].unique().tolist()) <= {0.5, 1.5, 2.5} and set(x[1].unique().tolist()) <= {0.0, 1.0, 2.0}
    # bf16 (which CUDA takes), computed in float32.
    h = cpu(torch.binomial(torch.full((1000,), 8.0, device=TPU, dtype=torch.bfloat16),
                           torch.full((1000,), 0.5, device=TPU, dtype=torch.bfloat16)))
    assert h.dtype == torch.bfloat16 and h.min() >= 0 and h.max() <= 8 and abs(h.float().mean() - 4) < 0.3
    for count, prob, error, message in [
        (torch.full((3,), 5.0), torch.full((3,), 0.5, dtype=torch.float64), RuntimeError,
         "Found dtype Double but expected Float"),
        (torch.full((3,), 5), torch.full((3,), 0.5), ValueError, "floating-point dtypes for count, got: Long"),
        (torch.full((3,), 5.0), torch.full((2,), 0.5), RuntimeError,
         r"size of tensor a \(3\) must match the size of tensor b \(2\)"),
    ]:
        with pytest.raises(error, match=message):
            torch.binomial(count, prob)
        with pytest.raises(error, match=message):
            torch.binomial(count.to(TPU), prob.to(TPU))


def _beta_kurtosis(a, b):
    return 6 * ((a - b) ** 2 * (a + b + 1) - a * b * (a + b + 2)) / (a * b * (a + b + 2) * (a + b + 3))


def test_sample_dirichlet_moments():
    alphas = torch.tensor([[0.5, 1.5, 4.0], [0.1, 0.1, 0.2]])  # (small alphas: gammas drawn in log space)
    x = cpu(torch._sample_dirichlet(alphas.repeat(20000, 1, 1).to(TPU)))
    assert x.dtype == torch.float32 and x.shape == (20000, 2, 3)
    assert (x > 0).all() and (x < 1).all()
    assert (x.sum(-1) - 1).abs().max() < 1e-5
    for row in range(2):
        total = alphas[row].sum().item()
        for j, a in enumerate(alphas[row].tolist()):
            b = total - a  # the marginal is Beta(a, total - a)
            _assert_moments(x[:, row, j], a / total, a * b / (total**2 * (total + 1)), kurtosis=_beta_kurtosis(a, b))


def test_sample_dirichlet_edge_values_like_cpu():
    # ATen clamps each gamma to DBL_MIN before normalising: a row of zeros gives 1/n.
    alpha = torch.tensor([[0.0, 0.0, 0.0], [float("inf"), 1.0, 1.0], [-1.0, -2.0, -1.0], [float("nan"), 1.0, 1.0]])
    x = cpu(torch._sample_dirichlet(alpha.to(TPU)))
    torch.testing.assert_close(x[:3], torch._sample_dirichlet(alpha[:3]))
    assert x[3, 0] == torch.finfo(torch.float32).tiny and abs(x[3].sum() - 1) < 1e-6
    # A 0-dim alpha is its own row: the largest float below 1, as on CPU.
    scalar = torch.tensor(2.0)
    assert torch.equal(cpu(torch._sample_dirichlet(scalar.to(TPU))), torch._sample_dirichlet(scalar))
    h = cpu(torch._sample_dirichlet(torch.ones(1000, 4, device=TPU, dtype=torch.bfloat16)))
    assert h.dtype == torch.bfloat16 and (h > 0).all() and (h < 1).all() and abs(h.float().mean() - 0.25) < 0.01
    with pytest.raises(NotImplementedError, match="\"dirichlet\" not implemented for 'Long'"):
        torch._sample_dirichlet(torch.ones(2, 3, device=TPU, dtype=torch.int64))


def test_poisson_errors_like_cpu():
    for rate in ([-1.0, 2.0], [float("nan"), 1.0]):
        with pytest.raises(RuntimeError, match="invalid Poisson rate, expected rate to be non-negative"):
            cpu(torch.poisson(torch.tensor(rate, device=TPU)))  # (device-side check: raised at the sync)
    with pytest.raises(NotImplementedError, match="\"poisson_cpu\" not implemented for 'Long'"):
        torch.poisson(torch.ones(3, device=TPU, dtype=torch.int64))


def _distribution_draws():
    """.sample() of the distributions built on _standard_gamma, binomial,
    _sample_dirichlet and poisson, and the ops themselves."""
    a = torch.tensor([0.5, 1.5, 3.0, 7.0], device=TPU)
    D = torch.distributions
    return [
        D.Gamma(a, 2.0).sample(), D.Beta(a, a + 1).sample(), D.Dirichlet(torch.stack([a, a + 2], -1)).sample(),
        D.Chi2(a).sample(), D.StudentT(a).sample(), D.Binomial(10, probs=a / 8).sample(), D.Poisson(a).sample(),
        torch._standard_gamma(a), torch.binomial(a * 4, a / 8), torch._sample_dirichlet(torch.stack([a, a], -1)),
    ]


def test_gamma_family_follows_the_device_generator():
    torch.tpu.manual_seed(3)
    a = _distribution_draws()
    torch.tpu.manual_seed(3)
    assert _equal(a, _distribution_draws())
    torch.tpu.manual_seed(4)
    b = _distribution_draws()
    assert all(not torch.equal(x.cpu(), y.cpu()) for x, y in zip(a, b))
    state = torch.tpu.get_rng_state()
    c = _distribution_draws()
    torch.tpu.set_rng_state(state)
    assert _equal(c, _distribution_draws())
    with torch.random.fork_rng(devices=[0], device_type="tpu"):
        d = _distribution_draws()
    assert _equal(d, _distribution_draws())
    # An explicit generator, undisturbed by the default one.
    g = torch.Generator(TPU)
    rate = torch.full((4,), 2.5, device=TPU)

    def with_generator():
        return [torch._standard_gamma(rate, generator=g), torch.binomial(rate * 4, rate / 4, generator=g),
                torch._sample_dirichlet(torch.stack([rate, rate], -1), generator=g), torch.poisson(rate, generator=g)]

    g.manual_seed(9)
    e = with_generator()
    _distribution_draws()
    g.manual_seed(9)
    assert _equal(e, with_generator())


# ------------------------------------------------- random ops in graphs


def test_compiled_normal_and_randint_are_lowered():
    import torchtpu.compile

    def f(x, high):
        return (
            x.clone().normal_(2, 0.5),  # normal_functional
            torch.randint(0, 10, (N,), device=x.device),  # randint.low
            torch.randint(5, (N,), device=x.device, dtype=torch.int32),  # randint.default
            torch.randint(-3, 3, (N,), device=x.device, dtype=torch.bfloat16),
            torch.randint_like(x, 3, 8),  # randint_like.low_dtype
            torch.randint_like(x, 4, dtype=torch.int8),  # randint_like.default
            torch.randint_like(x, high),  # randint_like.Tensor
        )

    torch._dynamo.reset()
    torchtpu.compile.reset_compile_stats()
    try:
        fn = torch.compile(f, backend="tpu")
        x, high = torch.zeros(N, device=TPU), torch.tensor(6)
        torch.manual_seed(11)
        first = [cpu(t) for t in fn(x, high)]
        torch.manual_seed(11)
        again = [cpu(t) for t in fn(x, high)]
        stats = torchtpu.compile_stats()
    finally:
        torch._dynamo.reset()
    assert stats["eager_fallback_graphs"] == 0, [g["fallback"] for g in stats["per_graph"]]
    ops = {op for g in stats["per_graph"] for op in g["op_counts"]}
    for op in ("normal_functional.default", "randint.low", "randint.default", "randint_like.low_dtype",
               "randint_like.default", "randint_like.Tensor"):
        assert f"aten.{op}" in ops, ops
    assert _equal(first, again)
    normal, low, default, bf16, like_low, like, like_tensor = first
    assert normal.dtype == torch.float32 and abs(normal.mean() - 2) < 0.02 and abs(normal.std() - 0.5) < 0.02
    for t, dtype, lo, hi in [(low, torch.int64, 0, 9), (default, torch.int32, 0, 4), (bf16, torch.bfloat16, -3, 2),
                             (like_low, torch.float32, 3, 7), (like, torch.int8, 0, 3), (like_tensor, torch.float32, 0, 5)]:
        assert t.dtype == dtype and t.shape == (N,)
        assert t.min() == lo and t.max() == hi and torch.equal(t, t.round())
    counts = torch.bincount(low).double() / N
    assert (counts - 0.1).abs().max() < 0.015


# Bad arguments raise ATen's errors (found by a CUDA-API probe: tpu sampled
# out-of-range values, duplicate "permutations", or probabilities > 1).
ARGUMENT_ERRORS = {
    "randint below uint8": lambda d: torch.randint(-128, 128, (4,), dtype=torch.uint8, device=d),
    "randint past int8": lambda d: torch.randint(0, 256, (4,), dtype=torch.int8, device=d),
    "randint past bool": lambda d: torch.randint(0, 3, (4,), dtype=torch.bool, device=d),
    "int8 random_ past the type": lambda d: torch.zeros(4, dtype=torch.int8, device=d).random_(0, 1000),
    "half random_ past its max": lambda d: torch.zeros(4, dtype=torch.float16, device=d).random_(0, 2**20),
    "randperm past int8": lambda d: torch.randperm(300, dtype=torch.int8, device=d),
    "randperm past half's precision": lambda d: torch.randperm(5000, dtype=torch.float16, device=d),
    "bernoulli of p > 1": lambda d: torch.bernoulli(torch.tensor([1.5, -0.5], device=d)),
    "bernoulli_ of a p tensor with nan": lambda d: torch.zeros(2, device=d).bernoulli_(
        torch.tensor([0.5, float("nan")], device=d)),
    "normal with a negative std element": lambda d: torch.normal(torch.zeros(3, device=d),
                                                                 torch.tensor([1.0, -1.0, 1.0], device=d)),
    "normal of a float mean with a negative std element": lambda d: torch.normal(
        0.0, torch.tensor([1.0, -1.0], device=d)),
    "multinomial of no samples": lambda d: torch.multinomial(torch.ones(3, device=d), 0),
    "randn of an integer dtype": lambda d: torch.randn(2, dtype=torch.int32, device=d),
    "randn_like of a bool tensor": lambda d: torch.randn_like(torch.ones(2, dtype=torch.bool, device=d)),
    "multinomial of integer weights": lambda d: torch.multinomial(torch.ones(3, dtype=torch.long, device=d), 1),
}


@pytest.mark.parametrize("name", sorted(ARGUMENT_ERRORS))
def test_bad_arguments_raise_like_cpu(name):
    fn = ARGUMENT_ERRORS[name]
    with pytest.raises(RuntimeError) as cpu:
        fn("cpu")
    with pytest.raises(RuntimeError, match=re.escape(str(cpu.value).split("\n")[0])):
        fn("tpu").cpu()  # (device-side checks are raised at the next synchronization)


def test_valid_arguments_at_the_edges_still_sample():
    assert torch.randint(-128, 128, (64,), dtype=torch.int8, device="tpu").cpu().min() >= -128
    assert torch.randint(0, 256, (64,), dtype=torch.uint8, device="tpu").cpu().max() <= 255
    assert sorted(torch.randperm(128, dtype=torch.int8, device="tpu").cpu().tolist()) == list(range(128))
    assert sorted(torch.randperm(2049, dtype=torch.float16, device="tpu").cpu().tolist())[-1] == 2048
    assert set(torch.bernoulli(torch.tensor([0.0, 1.0], device="tpu")).cpu().tolist()) == {0.0, 1.0}
    assert torch.normal(torch.zeros(2, device="tpu"), torch.zeros(2, device="tpu")).cpu().tolist() == [0.0, 0.0]
