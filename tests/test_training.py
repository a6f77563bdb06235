"""Training parity: the same model, data and optimizer on CPU and on tpu for
20 steps; losses and final parameters must agree within float32 tolerance,
with nothing falling back to the CPU."""

import copy

import pytest
import torch

import torchtpu
from torchtpu.models import CNN, GPT, MLP

STEPS = 20


def _optimizer(name, params, kind):
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.3 if kind == "gpt" else 0.05, momentum=0.9, weight_decay=1e-4)
    return torch.optim.AdamW(params, lr=2e-3, weight_decay=0.01)


# Adam divides each gradient by its running RMS, so a parameter whose true
# gradient is ~0 (the key bias of attention: softmax ignores a shift shared by
# all keys) moves by float noise, identically scaled on any two backends:
# parameters get an absolute tolerance of a few such steps.
PARAM_ATOL = {"sgd": 1e-5, "adamw": 2e-4}


def _data(kind, step):
    g = torch.Generator().manual_seed(1000 + step)
    if kind == "mlp":
        x = torch.randn(16, 32, generator=g)
        return x, (x[:, :10].argmax(1))
    if kind == "cnn":
        x = torch.randn(8, 3, 16, 16, generator=g)
        return x, torch.randint(0, 10, (8,), generator=g)
    idx = torch.randint(0, 64, (4, 16), generator=g)
    return idx, (idx + 1) % 64


def _model(kind):
    torch.manual_seed(0)
    if kind == "mlp":
        return MLP()
    if kind == "cnn":
        return CNN(dropout=0.0)
    return GPT(vocab=64, d_model=32, n_heads=4, n_layers=2, max_len=16)


def _loss(kind, model, x, y):
    if kind == "gpt":
        return model.loss(x, y)
    return torch.nn.functional.cross_entropy(model(x), y)


def _train(kind, model, opt_name, device):
    model = model.to(device)
    opt = _optimizer(opt_name, model.parameters(), kind)
    losses = []
    for step in range(STEPS):
        x, y = (t.to(device) for t in _data(kind, step))
        loss = _loss(kind, model, x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model


@pytest.mark.parametrize("opt_name", ["sgd", "adamw"])
@pytest.mark.parametrize("kind", ["mlp", "cnn", "gpt"])
def test_training_parity(kind, opt_name):
    base = _model(kind)
    torchtpu.reset_fallback_counts()
    cpu_losses, cpu_model = _train(kind, copy.deepcopy(base), opt_name, "cpu")
    tpu_losses, tpu_model = _train(kind, copy.deepcopy(base), opt_name, "tpu")
    assert torchtpu.fallback_counts() == {}, torchtpu.fallback_counts()
    torch.testing.assert_close(torch.tensor(tpu_losses), torch.tensor(cpu_losses), rtol=1e-4, atol=1e-5)
    assert tpu_losses[-1] < tpu_losses[0]
    cpu_state = cpu_model.state_dict()
    for name, value in tpu_model.state_dict().items():
        torch.testing.assert_close(value.cpu(), cpu_state[name], rtol=1e-4, atol=PARAM_ATOL[opt_name])


def test_batchnorm_eval_after_training():
    base = _model("cnn")
    _, cpu_model = _train("cnn", copy.deepcopy(base), "sgd", "cpu")
    _, tpu_model = _train("cnn", copy.deepcopy(base), "sgd", "tpu")
    x, _ = _data("cnn", 99)
    cpu_model.eval()
    tpu_model.eval()
    with torch.no_grad():
        torch.testing.assert_close(tpu_model(x.to("tpu")).cpu(), cpu_model(x), rtol=1e-4, atol=1e-5)
