"""torch.optim's foreach implementations on tpu parameters against the same
optimizer on the CPU: 5 steps, parameters of several shapes, float32 tolerance,
and nothing may fall back to the CPU."""

import pytest
import torch
import torchtpu
from utils import TPU

SHAPES = [(4, 3), (7,), (2, 3, 2), ()]
STEPS = 5

CONFIGS = {
    "sgd": (torch.optim.SGD, dict(lr=0.1)),
    "sgd_momentum": (torch.optim.SGD, dict(lr=0.1, momentum=0.9)),
    "sgd_momentum_wd_dampening": (torch.optim.SGD, dict(lr=0.05, momentum=0.8, dampening=0.1, weight_decay=0.01)),
    "sgd_nesterov_wd": (torch.optim.SGD, dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.05)),
    "sgd_maximize": (torch.optim.SGD, dict(lr=0.05, momentum=0.5, maximize=True)),
    "adam": (torch.optim.Adam, dict(lr=0.01)),
    "adam_wd": (torch.optim.Adam, dict(lr=0.01, weight_decay=0.1)),
    "adam_amsgrad": (torch.optim.Adam, dict(lr=0.01, amsgrad=True, betas=(0.8, 0.9))),
    "adam_capturable": (torch.optim.Adam, dict(lr=0.01, capturable=True, weight_decay=0.01)),
    "adam_capturable_amsgrad": (torch.optim.Adam, dict(lr=0.01, capturable=True, amsgrad=True)),
    "adamw": (torch.optim.AdamW, dict(lr=0.01)),
    "adamw_wd": (torch.optim.AdamW, dict(lr=0.02, weight_decay=0.1)),
    "adamw_amsgrad_wd": (torch.optim.AdamW, dict(lr=0.02, weight_decay=0.05, amsgrad=True)),
    "adamw_maximize": (torch.optim.AdamW, dict(lr=0.01, maximize=True)),
}


def initial_params(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g) for s in SHAPES]


def fixed_grads(step):
    g = torch.Generator().manual_seed(100 + step)
    return [torch.randn(s, generator=g) for s in SHAPES]


def run(device, cls, kwargs):
    params = [p.to(device).requires_grad_(True) for p in initial_params()]
    if device == "cpu":
        kwargs = {k: v for k, v in kwargs.items() if k != "capturable"}  # same math, CPU can't capture
    opt = cls(params, foreach=True, **kwargs)
    for step in range(STEPS):
        with torch.no_grad():
            # the gradient depends on the current parameters, so errors compound
            for p, g in zip(params, fixed_grads(step)):
                p.grad = p.detach() * 0.5 + g.to(device)
        opt.step()
    return params, opt


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_optimizer_matches_cpu(name):
    cls, kwargs = CONFIGS[name]
    expected, cpu_opt = run("cpu", cls, kwargs)
    before = torchtpu.fallback_counts()
    actual, opt = run(TPU, cls, kwargs)
    after = torchtpu.fallback_counts()
    new = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
    assert not new, f"ops fell back to the CPU: {new}"
    for a, e in zip(actual, expected):
        assert a.device.type == "tpu"
        torch.testing.assert_close(a.detach().cpu(), e.detach(), atol=1e-5, rtol=1.3e-5)
    # the optimizer state matches too (moments, momentum buffers: more sensitive
    # than the parameters, which move by lr-sized steps) and lives on the tpu
    # (step counters stay on the CPU unless capturable)
    for a, e in zip(actual, expected):
        a_state, e_state = opt.state[a], cpu_opt.state[e]
        assert a_state.keys() == e_state.keys()
        for key, value in a_state.items():
            if key != "step":
                assert value.device.type == "tpu", key
            torch.testing.assert_close(value.cpu(), e_state[key], atol=1e-5, rtol=1.3e-5, check_device=False)


def test_optimizer_step_uses_foreach_kernels():
    """One Adam step is a handful of list-wide kernels, not one per parameter."""
    params = [p.to(TPU).requires_grad_(True) for p in initial_params()]
    params += [torch.randn(3).to(TPU).requires_grad_(True) for _ in range(12)]
    opt = torch.optim.Adam(params, lr=0.01, foreach=True)
    for p in params:
        p.grad = torch.ones_like(p)
    opt.step()  # creates the state

    def total():
        s = torchtpu.kernel_cache_stats()
        return s["calls"] + s.get("fast_hits", 0)

    before = total()
    opt.step()
    calls = total() - before
    assert calls < 15, calls  # independent of the 16 parameters


@pytest.mark.parametrize("name", ["RMSprop", "Adagrad", "Adamax", "NAdam", "RAdam", "Adadelta", "ASGD", "Rprop"])
def test_other_optimizers_match_cpu(name):
    """The remaining torch.optim foreach implementations, default hyperparameters."""
    cls = getattr(torch.optim, name)
    expected, cpu_opt = run("cpu", cls, {})
    before = torchtpu.fallback_counts()
    actual, opt = run(TPU, cls, {})
    assert torchtpu.fallback_counts() == before
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a.detach().cpu(), e.detach(), atol=1e-5, rtol=1.3e-5)
        for key, value in opt.state[a].items():
            if isinstance(value, torch.Tensor):
                want = cpu_opt.state[e][key]
                torch.testing.assert_close(value.cpu(), want, atol=1e-5, rtol=1.3e-5, check_device=False)
