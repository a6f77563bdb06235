"""Random ops: shapes, dtypes, ranges, reproducibility and rough statistics.

The streams are not CPU's (no backend reproduces mt19937/Philox bit for bit),
so values are checked by their properties, not against the CPU."""

import math

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
