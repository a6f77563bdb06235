"""torch.optim's fused=True steps (one kernel for all parameters) against the
CPU's fused kernels: Adam, AdamW, SGD, Adagrad, with AMP's GradScaler (unscaling in
place, skipping a step whose gradients overflowed) and a tensor lr."""

import pytest
import torch



CASES = [
    (torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1)),
    (torch.optim.Adam, dict(lr=1e-2, weight_decay=0.1, amsgrad=True)),
    (torch.optim.Adam, dict(lr=torch.tensor(1e-2), maximize=True)),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, dampening=0.1)),
    (torch.optim.SGD, dict(lr=0.1)),
    (torch.optim.Adagrad, dict(lr=0.1, lr_decay=0.05, weight_decay=0.1)),
    (torch.optim.Adagrad, dict(lr=torch.tensor(0.1), maximize=True, initial_accumulator_value=0.1, eps=1e-8)),
]


def _train(device, opt_cls, kwargs, steps=3, init_scale=None, fused=True):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3)).to(device)
    opt = opt_cls(model.parameters(), **kwargs, **(dict(fused=True) if fused else dict(foreach=True)))
    scaler = torch.amp.GradScaler(device, init_scale=init_scale) if init_scale else None
    x = torch.randn(8, 6).to(device)
    for _ in range(steps):
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
    grads = [p.grad.detach().cpu() for p in model.parameters()]
    return [p.detach().cpu() for p in model.parameters()], grads


@pytest.mark.parametrize("opt_cls, kwargs", CASES, ids=lambda v: getattr(v, "__name__", None) or str(sorted(v)))
@pytest.mark.parametrize("init_scale", [None, 1024.0])
def test_fused_step_matches_cpu(opt_cls, kwargs, init_scale, no_fallback):
    cpu_params, cpu_grads = _train("cpu", opt_cls, kwargs, init_scale=init_scale)
    tpu_params, tpu_grads = _train("tpu", opt_cls, kwargs, init_scale=init_scale)
    for a, b in zip(tpu_params + tpu_grads, cpu_params + cpu_grads):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_overflowing_step_is_skipped(no_fallback):
    # A scale this large overflows float32 gradients: GradScaler passes
    # found_inf=1 and the fused kernel must leave every parameter alone.
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2).to("tpu")
    before = [p.detach().cpu().clone() for p in model.parameters()]
    opt = torch.optim.AdamW(model.parameters(), lr=0.1, fused=True)
    scaler = torch.amp.GradScaler("tpu", init_scale=2.0**127)
    scaler.scale(model(torch.randn(3, 4, device="tpu")).sum() * 1e10).backward()
    scaler.step(opt)
    scaler.update()
    for p, b in zip(model.parameters(), before):
        assert torch.equal(p.detach().cpu(), b)
    assert scaler.get_scale() < 2.0**127


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(lr=0.1, lr_decay=0.1, weight_decay=0.05),
        dict(lr=0.05, lr_decay=0.01, maximize=True),
        dict(lr=0.1, weight_decay=0.1, maximize=True, initial_accumulator_value=0.5),
    ],
    ids=str,
)
def test_fused_adagrad_matches_cpu_fused_and_foreach(kwargs, no_fallback):
    # lr_decay makes the step count matter: clr = lr / (1 + (step - 1) * lr_decay)
    tpu_params, tpu_grads = _train("tpu", torch.optim.Adagrad, kwargs, steps=6)
    for fused in (True, False):
        cpu_params, cpu_grads = _train("cpu", torch.optim.Adagrad, kwargs, steps=6, fused=fused)
        for a, b in zip(tpu_params + tpu_grads, cpu_params + cpu_grads):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("opt_cls, kwargs", [
    (torch.optim.Adam, {}), (torch.optim.AdamW, dict(weight_decay=0.1)), (torch.optim.SGD, dict(momentum=0.9)),
    (torch.optim.Adagrad, {}),
], ids=lambda v: getattr(v, "__name__", None) or str(sorted(v)))
def test_fused_step_with_an_lr_tensor_on_the_device(opt_cls, kwargs, no_fallback):
    # (the tensor_lr overloads: lr stays a tensor argument, read on the device)
    results = [_train(device, opt_cls, dict(kwargs, lr=torch.tensor(1e-2, device=device)))
               for device in ("cpu", "tpu")]
    for a, b in zip(results[1][0] + results[1][1], results[0][0] + results[0][1]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("opt_cls", [torch.optim.Adam, torch.optim.AdamW])
def test_fused_adam_bias_corrections_are_exact(opt_cls, no_fallback):
    """1 - beta**step in float32 was off by 1.3e-5 relative (1 - 0.999f), and
    so was every update; ATen's fused kernels take it in double."""
    start = torch.tensor([1.0, -2.0, 3e-3, 0.5])
    grad = torch.tensor([1e-3, -0.5, 2.0, 1e-8])
    results = []
    for device in ("cpu", "tpu"):
        p = start.clone().to(device).requires_grad_()
        opt = opt_cls([p], lr=0.1, fused=True)
        for _ in range(3):
            p.grad = grad.to(device)
            opt.step()
        results.append(p.detach().cpu())
    torch.testing.assert_close(results[1], results[0], rtol=2e-7, atol=1e-7)
