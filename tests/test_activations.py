"""Activation lowerings (torchtpu/ops/lowerings/activations.py) against the CPU,
forward and backward (the *_backward ops are what autograd calls)."""

import pytest
import torch
import torch.nn.functional as F
from utils import check as _check

NAN = float("nan")


def check(fn, *args, **kw):
    """utils.check, with NaN == NaN (many cases here produce NaN on purpose)."""
    kw.setdefault("equal_nan", True)
    return _check(fn, *args, **kw)


def rand(*shape, dtype=torch.float32, low=-4.0, high=4.0, seed=0, grad=False):
    g = torch.Generator().manual_seed(seed)
    x = (torch.rand(*shape, generator=g, dtype=torch.float64) * (high - low) + low).to(dtype)
    return x.requires_grad_(grad)


# Values on and around the kinks of piecewise activations, and NaN.
EDGES = torch.tensor([-20.0, -3.0, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 3.0, 6.0, 20.0, 25.0, NAN])

ACTIVATIONS = {
    "relu": F.relu,
    "relu6": F.relu6,
    "hardtanh": lambda x: F.hardtanh(x, -0.5, 2.0),
    "leaky_relu": lambda x: F.leaky_relu(x, 0.2),
    "leaky_relu_default": F.leaky_relu,
    "elu": F.elu,
    "elu_alpha": lambda x: F.elu(x, alpha=0.7),
    "celu": lambda x: F.celu(x, alpha=1.5),
    "selu": F.selu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "threshold": lambda x: F.threshold(x, 0.5, -2.0),
    "softplus": F.softplus,
    "softplus_beta": lambda x: F.softplus(x, beta=2.0, threshold=3.0),
    "mish": F.mish,
    "hardswish": F.hardswish,
    "hardsigmoid": F.hardsigmoid,
    "logsigmoid": F.logsigmoid,
    "rrelu_eval": lambda x: F.rrelu(x, training=False),
    "hardshrink": F.hardshrink,
    "softshrink": lambda x: F.softshrink(x, 0.75),
}


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation(name):
    fn = ACTIVATIONS[name]
    check(fn, rand(4, 6, grad=True), grad=True)  # forward and backward
    check(fn, EDGES)
    check(lambda x: fn(x.t()[1:, ::2]), rand(6, 5, seed=1))  # non-contiguous view
    check(fn, rand(4, 6, dtype=torch.bfloat16, seed=2, grad=True), grad=True)


INPLACE = {
    "relu_": lambda x: F.relu(x, inplace=True),
    "relu6_": lambda x: F.relu6(x, inplace=True),
    "leaky_relu_": lambda x: F.leaky_relu(x, 0.1, inplace=True),
    "elu_": lambda x: F.elu(x, inplace=True),
    "celu_": lambda x: F.celu(x, inplace=True),
    "selu_": lambda x: F.selu(x, inplace=True),
    "silu_": lambda x: F.silu(x, inplace=True),
    "hardswish_": lambda x: F.hardswish(x, inplace=True),
    "hardsigmoid_": lambda x: F.hardsigmoid(x, inplace=True),
    "threshold_": lambda x: F.threshold(x, 0.1, 20.0, inplace=True),
    "mish_": lambda x: F.mish(x, inplace=True),
    "sigmoid_": lambda x: x.sigmoid_(),
}


@pytest.mark.parametrize("name", sorted(INPLACE))
def test_activation_inplace(name):
    fn = INPLACE[name]
    check(fn, rand(3, 5))
    check(lambda x: (fn(x[:, 1:4]), x), rand(3, 5, seed=1))  # in place on a slice: the base changes


@pytest.mark.parametrize("name", ["relu", "elu", "leaky_relu", "hardtanh", "silu"])
def test_activation_inplace_grad(name):
    """In-place activations inside autograd use the result-based backward formulas."""
    fn = INPLACE.get(name + "_") or (lambda x: F.hardtanh(x, inplace=True))
    check(lambda x: fn(x * 1.0), rand(4, 5, grad=True), grad=True)


def test_relu_integer():
    x = torch.randint(-5, 5, (4, 5))
    check(F.relu, x)
    check(torch.relu_, x)


def test_gelu_backward_out_and_scalars_traced():
    import torchtpu

    from torchtpu.ops.dispatch import MAX_BAKED_VALUES

    x = rand(3, 4).to("tpu")
    for k in range(MAX_BAKED_VALUES + 1):  # baked, then traced
        F.leaky_relu(x, 0.1 * (k + 1)).cpu()
    before = torchtpu.kernel_cache_stats()["compiles"]
    for slope in (0.25, 0.35, 0.05):
        torch.testing.assert_close(F.leaky_relu(x, slope).cpu(), F.leaky_relu(x.cpu(), slope))
    assert torchtpu.kernel_cache_stats()["compiles"] == before

    def out_variant(g, t):
        out = torch.empty_like(t)
        torch.ops.aten.gelu_backward.grad_input(g, t, approximate="tanh", grad_input=out)
        return out

    check(out_variant, rand(3, 4, seed=1), rand(3, 4, seed=2))


@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_glu(dim):
    check(lambda x: F.glu(x, dim), rand(4, 6, 8, grad=True), grad=True)
    check(lambda x: F.glu(x.transpose(0, 2), dim), rand(4, 6, 8, seed=1))
    check(lambda x: F.glu(x, dim), rand(4, 6, 8, dtype=torch.bfloat16, seed=2))


def test_prelu():
    x = rand(2, 3, 4, 5, grad=True)
    check(F.prelu, x, torch.tensor([0.25], requires_grad=True), grad=True)
    check(F.prelu, x, rand(3, low=0, high=1, seed=1, grad=True), grad=True)
    check(F.prelu, rand(2, 3, seed=2, grad=True), rand(3, low=0, high=1, seed=3, grad=True), grad=True)
    check(F.prelu, x.detach().to(torch.bfloat16), torch.tensor([0.25]).to(torch.bfloat16))


def test_backward_ops_direct():
    """The backward ops with the argument variants autograd does not exercise above."""
    aten = torch.ops.aten
    g = rand(3, 4, seed=1)
    x = rand(3, 4, seed=2)
    y = torch.sigmoid(x)
    check(lambda a, b: aten.elu_backward(a, 1.5, 1.2, 0.8, False, b), g, x)
    check(lambda a, b: aten.elu_backward(a, 1.5, 1.2, 0.8, True, b), g, F.elu(x, 1.5) * 1.2)
    check(lambda a, b: aten.leaky_relu_backward(a, b, 0.3, True), g, x)
    check(aten.sigmoid_backward, g, y)
    check(aten.tanh_backward, g, torch.tanh(x))
    check(lambda a, b: aten.threshold_backward(a, b, 0.5), g, x)
    check(lambda a, b: aten.hardtanh_backward(a, b, -1.0, 1.0), g, EDGES[:12].reshape(3, 4))
    check(lambda a, b: aten.softplus_backward(a, b, 2.0, 3.0), g, x)
    check(aten.silu_backward, g, x)
    check(aten.mish_backward, g, x)
    check(aten.hardswish_backward, g, EDGES[:12].reshape(3, 4))
    check(aten.hardsigmoid_backward, g, EDGES[:12].reshape(3, 4))
    check(lambda a, b: aten.gelu_backward(a, b), g, x)
    check(lambda a, b: aten.gelu_backward(a, b, approximate="tanh"), g, x)
    check(lambda a, b: aten.glu_backward(a, b, 1), g[:, :2], x)
    check(lambda t: aten.log_sigmoid_forward(t), x)
    check(lambda a, b: aten.log_sigmoid_backward(a, b, torch.exp(-b.abs())), g, x)
    check(aten._prelu_kernel_backward, g, x, rand(1, 4, seed=3))
    check(lambda a, b: aten.threshold_backward(a, b, 0.0), g.to(torch.bfloat16), x.to(torch.bfloat16))


def test_rrelu_training_is_random_within_bounds():
    import torchtpu

    before = torchtpu.fallback_counts()
    x = rand(200, seed=3).to("tpu").requires_grad_(True)
    y = F.rrelu(x, lower=0.1, upper=0.3, training=True)
    y.backward(torch.ones(200, device="tpu"))
    xc, yc, gc = x.detach().cpu(), y.detach().cpu(), x.grad.cpu()
    pos = xc > 0
    torch.testing.assert_close(yc[pos], xc[pos])
    slope = yc[~pos] / xc[~pos]
    assert ((slope >= 0.1) & (slope <= 0.3)).all()
    assert slope.std() > 0.01  # really drawn, not the mean slope
    torch.testing.assert_close(gc[~pos], slope)
    torch.testing.assert_close(gc[pos], torch.ones(int(pos.sum())))
    y2 = F.rrelu(x.detach(), lower=0.1, upper=0.3, training=True).cpu()
    assert not torch.equal(y2, yc)  # a fresh draw each call
    assert torchtpu.fallback_counts() == before
