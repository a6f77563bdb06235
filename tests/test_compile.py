"""torch.compile(backend="tpu"): parity with eager tpu and with CPU, graph
input mutations, aliasing outputs, randomness, caches, fallbacks."""

import copy
import logging
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torchtpu
import torchtpu.compile
from torchtpu.models import CNN, GPT, MLP
from utils import assert_close

TOL = dict(rtol=1e-4, atol=1e-5)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    torchtpu.compile.reset_compile_stats()
    yield
    torch._dynamo.reset()


def test_reset_frees_the_compiled_graphs(monkeypatch):
    """After `torch._dynamo.reset()` (and the model gone) nothing keeps a
    compiled graph, so its XLA executables are freed."""
    import gc
    import weakref

    from torchtpu.compile.runner import CompiledGraph

    built = []
    original_init = CompiledGraph.__init__

    def recording_init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        built.append(weakref.ref(self))

    monkeypatch.setattr(CompiledGraph, "__init__", recording_init)
    model = MLP().to("tpu")
    compiled = torch.compile(model, backend="tpu")
    compiled(torch.randn(4, 32, device="tpu")).square().mean().backward()
    assert len(built) == 2  # forward and backward
    del model, compiled
    torch._dynamo.reset()
    gc.collect()
    assert [ref() for ref in built] == [None, None]


def _graph_stats():
    return torchtpu.compile_stats()


def _train(model, data, steps, device, compiled, compile_step=False, lr=2e-3):
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, foreach=True)
    fwd = torch.compile(model, backend="tpu") if compiled else model

    def opt_step():
        opt.step()

    step_fn = torch.compile(opt_step, backend="tpu") if compile_step else opt_step
    losses = []
    for i in range(steps):
        x, y = (t.to(device) for t in data(i))
        loss = model.loss(x, y) if not compiled and hasattr(model, "loss") else _loss(fwd, model, x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        step_fn()
        losses.append(loss.item())
    return losses, model


def _loss(fwd, model, x, y):
    out = fwd(x)
    if isinstance(model, GPT):
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
    return F.cross_entropy(out, y)


def _gpt_data(i):
    g = torch.Generator().manual_seed(100 + i)
    idx = torch.randint(0, 64, (4, 16), generator=g)
    return idx, (idx + 1) % 64


def _mlp_data(i):
    g = torch.Generator().manual_seed(200 + i)
    x = torch.randn(16, 32, generator=g)
    return x, x[:, :10].argmax(1)


def _cnn_data(i):
    g = torch.Generator().manual_seed(300 + i)
    return torch.randn(4, 3, 16, 16, generator=g), torch.randint(0, 10, (4,), generator=g)


def _gpt():
    torch.manual_seed(0)
    return GPT(vocab=64, d_model=32, n_heads=4, n_layers=2, max_len=16)


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_forward_backward_parity(kind):
    torch.manual_seed(0)
    model = MLP() if kind == "mlp" else CNN(dropout=0.0)
    x, y = (_mlp_data if kind == "mlp" else _cnn_data)(0)
    ref = copy.deepcopy(model)
    out_cpu = ref(x)
    F.cross_entropy(out_cpu, y).backward()
    tpu_model = copy.deepcopy(model).to("tpu")
    fn = torch.compile(tpu_model, backend="tpu")
    out = fn(x.to("tpu"))
    F.cross_entropy(out, y.to("tpu")).backward()
    assert_close(out, out_cpu, **TOL)
    for (name, p), (_, q) in zip(tpu_model.named_parameters(), ref.named_parameters()):
        assert_close(p.grad, q.grad, **TOL)
    for (name, b), (_, c) in zip(tpu_model.named_buffers(), ref.named_buffers()):
        assert_close(b, c, **TOL)  # BatchNorm running stats: an input mutation
    stats = _graph_stats()
    assert stats["eager_fallback_graphs"] == 0, [g["fallback"] for g in stats["per_graph"]]
    assert stats["compilations"] >= 2  # forward and backward


def test_default_inductor_backend_says_to_use_backend_tpu():
    # Inductor hands "tpu" to Google's torch_tpu Pallas codegen, which failed
    # with "No module named 'torch_tpu'"; torchtpu/inductor_device.py gives
    # the way out instead.
    torch.manual_seed(0)
    x = torch.randn(2, 4).to("tpu")
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU()).to("tpu")
    with pytest.raises(Exception, match='backend="tpu"') as error:
        torch.compile(model)(x)
    assert "torch_tpu'" not in str(error.value)


class _RoutedExperts(torch.nn.Module):
    """Mixtral-style routing as Hugging Face writes it: top-k gates, one_hot,
    torch.where per expert (a graph break), index_add_."""

    def __init__(self, d=32, experts=4):
        super().__init__()
        self.gate = torch.nn.Linear(d, experts, bias=False)
        self.experts = torch.nn.ModuleList(torch.nn.Linear(d, d, bias=False) for _ in range(experts))

    def forward(self, x):
        b, s, h = x.shape
        x = x.view(-1, h)
        weights, chosen = torch.topk(F.softmax(self.gate(x), dim=1, dtype=torch.float), 2, dim=-1)
        out = torch.zeros_like(x)
        mask = F.one_hot(chosen, num_classes=len(self.experts)).permute(2, 1, 0)
        for e, expert in enumerate(self.experts):
            slot, rows = torch.where(mask[e])
            out.index_add_(0, rows, F.silu(expert(x[None, rows].reshape(-1, h))) * weights[rows, slot, None])
        return out.reshape(b, s, h)


def test_compiled_routed_experts_train_without_host_syncs():
    # Found by an LLM probe: the third step crashed in the device-side checks'
    # folding (runtime/checks.py), which a graph's runner called in the eager
    # region between graph breaks, where dynamo's frame hook traced into JAX.
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Embedding(100, 32), _RoutedExperts(), _RoutedExperts(), torch.nn.Linear(32, 100))
    model = copy.deepcopy(ref).to("tpu")
    ids = torch.randint(0, 100, (2, 16))
    compiled = torch.compile(lambda m, i: F.cross_entropy(m(i).view(-1, 100), i.view(-1)), backend="tpu")
    losses = {}
    for m, device, fn in ((ref, "cpu", lambda m, i: F.cross_entropy(m(i).view(-1, 100), i.view(-1))), (model, "tpu", compiled)):
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
        out = []
        for _ in range(5):  # no host read inside the loop
            opt.zero_grad()
            loss = fn(m, ids.to(device))
            loss.backward()
            opt.step()
            out.append(loss.detach())
        losses[device] = torch.stack(out).cpu()
    assert_close(losses["tpu"].to("tpu"), losses["cpu"], rtol=1e-4, atol=1e-5)


def test_batchnorm_eval_parity():
    torch.manual_seed(0)
    model = CNN(dropout=0.0)
    _train(model, _cnn_data, 2, "cpu", compiled=False)
    tpu_model = copy.deepcopy(model).to("tpu").eval()
    model.eval()
    x, _ = _cnn_data(7)
    with torch.no_grad():
        out = torch.compile(tpu_model, backend="tpu")(x.to("tpu"))
    assert_close(out, model(x), **TOL)


@pytest.mark.parametrize("compile_step", [False, True])
def test_gpt_training_parity(compile_step):
    cpu_losses, cpu_model = _train(_gpt(), _gpt_data, 10, "cpu", compiled=False)
    eager_losses, _ = _train(_gpt(), _gpt_data, 3, "tpu", compiled=False)
    tpu_losses, tpu_model = _train(_gpt(), _gpt_data, 10, "tpu", compiled=True, compile_step=compile_step)
    torch.testing.assert_close(torch.tensor(tpu_losses), torch.tensor(cpu_losses), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(torch.tensor(tpu_losses[:3]), torch.tensor(eager_losses), rtol=1e-4, atol=1e-5)
    cpu_state = cpu_model.state_dict()
    for name, value in tpu_model.state_dict().items():
        torch.testing.assert_close(value.cpu(), cpu_state[name], rtol=1e-4, atol=2e-4)  # Adam: see test_training
    assert _graph_stats()["eager_fallback_graphs"] == 0, [g["fallback"] for g in _graph_stats()["per_graph"]]


def test_outputs_that_are_views_of_inputs():
    def f(x, y):
        return x.t(), x[1:, ::2], y.view(-1) + 1, x

    x = torch.randn(4, 6)
    y = torch.randn(2, 3)
    xt, yt = x.to("tpu"), y.to("tpu")
    out = torch.compile(f, backend="tpu")(xt, yt)
    expected = f(x, y)
    for a, b in zip(out, expected):
        assert_close(a, b)
    assert out[0]._base is xt or out[0].untyped_storage().data_ptr() == xt.untyped_storage().data_ptr()
    assert out[3] is xt
    out[1].fill_(0)  # a real view: writes land in x
    assert xt.cpu()[1:, ::2].eq(0).all()


def test_input_mutated_in_place():
    def f(x, y):
        x.add_(y)
        x[0].mul_(2)
        return (x * y).sum()

    x = torch.randn(3, 4)
    y = torch.randn(3, 4)
    xt = x.to("tpu")
    ptr = xt.data_ptr()
    out = torch.compile(f, backend="tpu")(xt, y.to("tpu"))
    expected = f(x, y)
    assert_close(out, expected, **TOL)
    assert_close(xt, x, **TOL)
    assert xt.data_ptr() == ptr


@pytest.mark.parametrize("dynamic", [False, True])
def test_conjugate_and_negative_views_are_read_and_written_as_their_values(dynamic):
    # ATen's lazy conj/neg bits: the graph must see (and write back through)
    # the logical value, as eager kernels do.
    def f(x):
        return x * 2 + 1

    def g(x):
        x.add_(1j)
        return x.sum()

    z_cpu = torch.tensor([1 + 2j, 3 - 1j, 0.5 + 0.25j])
    z = z_cpu.to("tpu")
    compiled = torch.compile(f, backend="tpu", dynamic=dynamic)
    for view in (lambda t: t, lambda t: t.conj(), lambda t: t.conj().imag, lambda t: t, lambda t: -t.real):
        assert_close(compiled(view(z)), f(view(z_cpu)))
    def h(x):
        x.imag.add_(1.0)  # (x.imag of a conjugate view: a negative view)
        return x, x.imag * 2, x.imag

    for fn in (g, h):
        written_cpu = z_cpu.clone()
        written = written_cpu.to("tpu")
        out = torch.compile(fn, backend="tpu", dynamic=dynamic)(written.conj())
        for got, want in zip(out if isinstance(out, tuple) else [out], torch.utils._pytree.tree_leaves(fn(written_cpu.conj()))):
            assert_close(got, want)
        assert_close(written, written_cpu)


def test_gradient_through_a_saved_conjugate_view():
    def h(z):
        return (z * z.conj()).real.sum()

    z_cpu = torch.tensor([1 + 2j, 3 - 1j], requires_grad=True)
    z = z_cpu.detach().to("tpu").requires_grad_()
    h(z_cpu).backward()
    torch.compile(h, backend="tpu")(z).backward()
    assert_close(z.grad, z_cpu.grad)


def test_cpu_scalar_inputs_updated_on_the_host(monkeypatch):
    # An optimizer's step count (a CPU scalar) bumped inside a compiled step:
    # its new value is computed on the host, not copied back from the device
    # (which waited for the executable: every compiled opt.step() was synchronous).
    from torchtpu.compile import runner

    def copied_back(t, value):
        raise AssertionError("a CPU input was copied back from the device")

    monkeypatch.setattr(runner, "write_back", copied_back)

    def f(steps, x):
        torch._foreach_add_(steps, 1)
        x.mul_(steps[0] * 0.5 + steps[1])
        return x * steps[1]

    compiled = torch.compile(f, backend="tpu")
    x = torch.randn(3, 4)
    steps = [torch.tensor(0.0), torch.tensor(2.0, dtype=torch.float64)]
    xt, steps_t = x.to("tpu"), [s.clone() for s in steps]
    for _ in range(3):  # (the step values change: one executable, their values traced)
        out, expected = compiled(steps_t, xt), f(steps, x)
        assert_close(out, expected, **TOL)
        assert_close(xt, x, **TOL)
        assert [s.item() for s in steps_t] == [s.item() for s in steps]
        assert [s.dtype for s in steps_t] == [torch.float32, torch.float64]


def test_compiled_adamw_step_keeps_step_counts_on_the_host(monkeypatch):
    from torchtpu.compile import runner

    monkeypatch.setattr(runner, "write_back", lambda t, value: pytest.fail("step count copied back"))
    models = [torch.nn.Linear(4, 3), torch.nn.Linear(4, 3).to("tpu")]
    models[1].load_state_dict(models[0].state_dict())
    opts = [torch.optim.AdamW(m.parameters(), lr=0.1, foreach=True) for m in models]
    step = torch.compile(opts[1].step, backend="tpu")
    x = torch.randn(5, 4)
    for _ in range(3):
        for m, o, device in zip(models, opts, ("cpu", "tpu")):
            o.zero_grad()
            m(x.to(device)).square().sum().backward()
        opts[0].step()
        step()
    for p_cpu, p_tpu in zip(models[0].parameters(), models[1].parameters()):
        assert_close(p_tpu, p_cpu, **TOL)
        assert opts[1].state[p_tpu]["step"].device.type == "cpu"
        assert opts[1].state[p_tpu]["step"].item() == 3


def test_step_counts_update_as_one_vector_and_fall_back_when_it_disagrees(monkeypatch):
    # `_foreach_add(steps, 1)` on the host runs as one add on the gathered
    # vector, scattered back in place (host_updates.VectorUpdate), after its
    # first call agreed with the graph's own per-tensor computation.
    from torchtpu.compile import host_updates

    scattered = []
    scatter = host_updates._C._scatter_cpu_scalars
    monkeypatch.setattr(host_updates._C, "_scatter_cpu_scalars", lambda t, v: scattered.append(v) or scatter(t, v))

    def f(steps, x):
        torch._foreach_add_(steps, 1)
        return x * steps[0] + steps[1]

    for wrong_first_result in (False, True):
        if wrong_first_result:  # a vector form whose result differs is dropped for the graph's
            run = host_updates.VectorUpdate.run
            monkeypatch.setattr(host_updates.VectorUpdate, "run", lambda self, args: run(self, args) + 1)
        torch._dynamo.reset()
        scattered.clear()
        compiled = torch.compile(f, backend="tpu")
        x = torch.randn(3)
        steps_cpu = [torch.tensor(0.0), torch.tensor(5.0)]
        steps = [s.clone() for s in steps_cpu]
        for _ in range(3):
            versions = [s._version for s in steps]
            assert_close(compiled(steps, x.to("tpu")), f(steps_cpu, x), **TOL)
            assert [s.item() for s in steps] == [s.item() for s in steps_cpu]
            assert all(s._version > v for s, v in zip(steps, versions))  # (the write is seen, as copy_'s)
        assert len(scattered) == (0 if wrong_first_result else 3)


def test_linalg_with_error_checks_dist_and_broadcast_complex_lower_whole():
    # Non-_ex linalg ops reach the graph as with_effects(token, _linalg_check_errors, ...)
    # (graph._inline_effect_tokens); torch.dist and broadcasting torch.complex
    # had no graph lowering: each made its whole graph run op by op.
    def f(a, b, re, im):
        inverse = torch.linalg.inv(a) * 2 + torch.linalg.solve(a, b) + torch.linalg.cholesky(a @ a.T)
        return inverse, torch.dist(a, b, 3.0), torch.complex(re, im)

    g = torch.Generator().manual_seed(0)
    a = torch.randn(4, 4, generator=g) + 4 * torch.eye(4)
    args = [a, torch.randn(4, 4, generator=g), torch.randn(3, 1, generator=g), torch.randn(4, generator=g)]
    before = torchtpu.compile_stats()["eager_fallback_graphs"]
    compiled = torch.compile(f, backend="tpu")
    for got, want in zip(compiled(*[t.to("tpu") for t in args]), f(*args)):
        assert_close(got, want, **TOL)
    assert torchtpu.compile_stats()["eager_fallback_graphs"] == before
    # the checks stay: a singular input raises (at the next synchronization, as on CUDA)
    with pytest.raises(torch.linalg.LinAlgError, match="singular"):
        compiled(*[t.to("tpu") for t in [torch.zeros(4, 4)] + args[1:]])[0].cpu()


def test_bilinear_and_cholesky_solve_lower_whole_with_their_gradients():
    # (compile/decompositions.py: eager runs both through composite kernels no PyTorch table decomposes)
    import torch.nn.functional as F

    def f(x1, x2, w, b, rhs, chol):
        return F.bilinear(x1, x2, w, b).sum() + torch.cholesky_solve(rhs, chol).sum() + \
            torch.cholesky_solve(rhs, chol.mT, upper=True).square().sum()

    g = torch.Generator().manual_seed(0)
    a = torch.randn(2, 1, 4, 4, generator=g)
    chol = torch.linalg.cholesky(a @ a.mT + 4 * torch.eye(4))
    args = [torch.randn(2, 5, 3, generator=g), torch.randn(2, 5, 4, generator=g), torch.randn(6, 3, 4, generator=g),
            torch.randn(6, generator=g), torch.randn(3, 4, 2, generator=g), chol]
    cpu = [t.clone().requires_grad_() for t in args]
    tpu = [t.to("tpu").requires_grad_() for t in args]
    before = torchtpu.compile_stats()["eager_fallback_graphs"]
    got, want = torch.compile(f, backend="tpu")(*tpu), f(*cpu)
    got.backward()
    want.backward()
    assert_close(got, want, **TOL)
    for t, c in zip(tpu, cpu):
        assert_close(t.grad, c.grad, **TOL)
    assert torchtpu.compile_stats()["eager_fallback_graphs"] == before


@pytest.mark.parametrize("kwargs", [{}, {"atol": 0.5}, {"rtol": 0.3}, {"atol": 0.2, "rtol": 0.1}, {"hermitian": True}])
def test_pinv_lowers_whole_with_its_tolerances(kwargs):
    # (its atol/rtol tensor overload has no PyTorch decomposition: compile/decompositions.py)
    g = torch.Generator().manual_seed(0)
    a = torch.randn(2, 5, 2, generator=g, dtype=torch.float64) @ torch.randn(2, 2, 5, generator=g, dtype=torch.float64)
    a = a + a.mT + torch.diag(torch.tensor([0.0, 0.1, 0.4, 1.0, 3.0], dtype=torch.float64))  # (rank 5, small values)
    before = torchtpu.compile_stats()["eager_fallback_graphs"]
    got = torch.compile(lambda x: torch.linalg.pinv(x, **kwargs), backend="tpu")(a.to("tpu"))
    assert_close(got, torch.linalg.pinv(a, **kwargs))
    assert torchtpu.compile_stats()["eager_fallback_graphs"] == before


def test_multiple_outputs_and_dtypes():
    def f(x, i):
        return x.softmax(-1), x.argmax(-1), (x > 0).sum(), x[i].to(torch.bfloat16)

    x = torch.randn(5, 7)
    i = torch.tensor([4, 0, 2])
    out = torch.compile(f, backend="tpu")(x.to("tpu"), i.to("tpu"))
    for a, b in zip(out, f(x, i)):
        assert_close(a, b)


def test_dtype_casts_and_autocast_compile_whole():
    # `.float()` / `.to(dtype)` / autocast's casts are `_to_copy` nodes: the
    # graph must be lowered whole, not run op by op.
    def casts(x):
        scores = (x.to(torch.bfloat16) * 2).float().softmax(-1)
        return scores, x.to(torch.int32), (x > 0).to(torch.float16).sum(-1)

    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))

    def mixed(x):
        with torch.autocast(x.device.type, dtype=torch.bfloat16):
            return model.to(x.device)(x).float().log_softmax(-1)

    x = torch.randn(4, 8) * 3
    for a, b in zip(torch.compile(casts, backend="tpu")(x.to("tpu")), casts(x)):
        assert_close(a, b, **TOL)
    assert_close(torch.compile(mixed, backend="tpu")(x.to("tpu")), mixed(x), rtol=2e-2, atol=2e-2)
    stats = _graph_stats()
    assert stats["graphs"] >= 2 and stats["eager_fallback_graphs"] == 0, stats["per_graph"]


def test_tensor_literals_and_assertions_compile_whole():
    # A tensor literal in forward() is a graph constant (get_attr +
    # lift_fresh_copy); one_hot's decomposition asserts its range with
    # _assert_async, a device-side check like CUDA's.
    def literal(x, scale):
        t = torch.tensor([0, 2, 1, 1, 0], device=x.device)
        return F.cross_entropy(x, t, label_smoothing=0.1) * scale + torch.tensor([1.5, -2.0], device=x.device).sum()

    def one_hot(x, idx):
        return x + F.one_hot(idx, 4).float()

    x = torch.randn(5, 3)
    fn = torch.compile(literal, backend="tpu")
    assert_close(fn(x.to("tpu"), 2.0), literal(x, 2.0), **TOL)
    # same code, other literal values: the constants are part of the graph's identity
    def literal2(x, scale):
        t = torch.tensor([2, 2, 0, 1, 1], device=x.device)
        return F.cross_entropy(x, t, label_smoothing=0.1) * scale + torch.tensor([0.5, 4.0], device=x.device).sum()

    assert_close(torch.compile(literal2, backend="tpu")(x.to("tpu"), 2.0), literal2(x, 2.0), **TOL)
    y, idx = torch.randn(3, 4), torch.tensor([0, 3, 1])
    g = torch.compile(one_hot, backend="tpu")
    assert_close(g(y.to("tpu"), idx.to("tpu")), one_hot(y, idx), **TOL)
    stats = _graph_stats()
    assert stats["graphs"] >= 3 and stats["eager_fallback_graphs"] == 0, stats["per_graph"]
    with pytest.raises(RuntimeError, match="Class values must be smaller than num_classes"):
        g(y.to("tpu"), torch.tensor([0, 4, 1], device="tpu")).cpu()


def test_dropout_follows_the_device_generator():
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Dropout(0.5)).to("tpu")
    fn = torch.compile(model, backend="tpu")
    x = torch.ones(8, 64, device="tpu")
    torch.manual_seed(5)
    a = fn(x).cpu()
    b = fn(x).cpu()
    torch.manual_seed(5)
    c = fn(x).cpu()
    assert torch.equal(a, c)
    assert not torch.equal(a, b)
    frac = (a == 0).float().mean().item()
    assert 0.4 < frac < 0.6


@pytest.mark.parametrize("backend", ["tpu", "aot_eager"])
@pytest.mark.parametrize("kwargs", [dict(use_reentrant=False), dict(use_reentrant=True),
                                    dict(use_reentrant=False, preserve_rng_state=False)])
def test_checkpointed_dropout_recomputes_the_forwards_mask(backend, kwargs):
    # The backward recomputes the checkpointed dropout: it must draw the
    # forward's mask (graphsafe_run_with_rng_state: lowered by the tpu
    # backend, run by our generator's graph-safe state under aot_eager).
    from torch.utils.checkpoint import checkpoint

    fn = torch.compile(lambda x: checkpoint(lambda t: F.dropout(t, 0.5) * 3.0, x, **kwargs), backend=backend)
    fractions = []
    for _ in range(3):
        x = (torch.rand(64, 32) + 0.5).to("tpu").requires_grad_()
        y = fn(x)
        y.backward(torch.ones_like(y))
        kept = (y != 0).float()
        assert torch.equal(x.grad.cpu(), (kept * 6.0).cpu())
        assert_close(y, (x.detach() * kept * 6.0).cpu())
        fractions.append(kept.mean().item())
    assert all(0.4 < f < 0.6 for f in fractions) and len(set(fractions)) > 1  # fresh masks per call
    if backend == "tpu":
        stats = _graph_stats()
        assert stats["graphs"] >= 2 and stats["eager_fallback_graphs"] == 0, stats["per_graph"]


def test_checkpointed_dropout_follows_the_seed():
    from torch.utils.checkpoint import checkpoint

    runs = []
    for _ in range(2):
        torch._dynamo.reset()
        torch.manual_seed(5)
        model = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.Dropout(0.3), torch.nn.Linear(64, 8)).to("tpu")
        fn = torch.compile(lambda x: checkpoint(model, x, use_reentrant=False), backend="tpu")
        out = fn(torch.ones(4, 8, device="tpu"))
        out.sum().backward()
        runs.append((out.detach().cpu(), model[0].weight.grad.cpu()))
    assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])


def test_cpu_tensor_attribute_moved_inside_the_graph_is_an_input():
    # A plain tensor attribute (not a buffer) stays on the CPU when the model
    # moves; `.to(x.device)` inside forward makes it a CPU graph input.
    class Weighted(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(8, 5)
            self.class_weights = torch.rand(5) + 0.5

        def forward(self, x, y):
            return F.cross_entropy(self.linear(x), y, weight=self.class_weights.to(x.device))

    torch.manual_seed(0)
    cpu_model = Weighted()
    model = copy.deepcopy(cpu_model).to("tpu")
    fn = torch.compile(model, backend="tpu")
    x, y = torch.randn(6, 8), torch.randint(0, 5, (6,))
    for step in range(2):
        if step:  # the graph reads the tensor at each call, it does not bake it in
            cpu_model.class_weights.mul_(2.0).add_(torch.arange(5.0))
            model.class_weights.copy_(cpu_model.class_weights)
        loss = fn(x.to("tpu"), y.to("tpu"))
        loss.backward()
        expected = cpu_model(x, y)
        expected.backward()
        assert_close(loss, expected)
        assert_close(model.linear.weight.grad, cpu_model.linear.weight.grad)
    stats = _graph_stats()
    assert stats["eager_fallback_graphs"] == 0, stats["per_graph"]


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_multilabel_margin_loss_matches_cpu_despite_upstreams_decomposition(reduction):
    # PyTorch's tracing decomposition of this loss counts the target slots
    # after the first -1 (aot_eager gives a wrong loss); the backend routes
    # the call around it.
    torch.manual_seed(0)
    x = torch.randn(4, 5)
    target = torch.tensor([[1, 3, -1, 0, 0], [0, -1, 2, 2, 2], [4, -1, 0, 0, 0], [2, 1, 0, 4, 3]])
    fn = torch.compile(lambda x, t: F.multilabel_margin_loss(x, t, reduction=reduction) * 2, backend="tpu")
    xt = x.to("tpu").requires_grad_()
    out = fn(xt, target.to("tpu"))
    out.sum().backward()
    xc = x.clone().requires_grad_()
    expected = F.multilabel_margin_loss(xc, target, reduction=reduction) * 2
    expected.sum().backward()
    assert_close(out, expected)
    assert_close(xt.grad, xc.grad)
    assert _graph_stats()["eager_fallback_graphs"] == 0


def test_returned_cpu_copies_compile_whole():
    # `lengths.cpu()` for pack_padded_sequence, a metric's `.cpu()`: the
    # graph ran op by op ("produces a tensor on cpu").
    def f(x, lengths):
        h = (x * 2).relu()
        return h.sum(1), lengths.cpu(), h.mean().cpu(), (x * 3).t().cpu()

    compiled = torch.compile(f, backend="tpu")
    for _ in range(2):
        x, lengths = torch.randn(3, 4), torch.tensor([3, 1, 2])
        xt = x.to("tpu").requires_grad_()
        got, want = compiled(xt, lengths.to("tpu")), f(x, lengths)
        for g, w in zip(got, want):
            assert g.device == (torch.device("tpu", 0) if w is want[0] else w.device)
            assert g.dtype == w.dtype and g.stride() == w.stride()
            torch.testing.assert_close(g.cpu(), w)
        got[3].sum().backward()  # (through the copy: x * 3)
        assert_close(xt.grad, torch.full((3, 4), 3.0))
    assert _graph_stats()["eager_fallback_graphs"] == 0


def _cond_model(linear):
    return lambda x: torch.cond(x.sum() > 0, lambda x: linear(x).sin(), lambda x: linear(x).cos() * 2, (x,))


def test_torch_cond_and_while_loop_compile_whole_and_match_cpu():
    from torch._higher_order_ops import while_loop

    torch.manual_seed(0)
    cpu_linear = torch.nn.Linear(4, 4)
    linear = copy.deepcopy(cpu_linear).to("tpu")
    fn = torch.compile(_cond_model(linear), backend="tpu")
    for sign in (1.0, -1.0):  # both branches, forward and backward
        x = sign * torch.rand(3, 4)
        xt = x.to("tpu").requires_grad_()
        y = fn(xt)
        y.sum().backward()
        xc = x.clone().requires_grad_()
        expected = _cond_model(cpu_linear)(xc)
        expected.sum().backward()
        assert_close(y, expected)
        assert_close(xt.grad, xc.grad)
        assert_close(linear.weight.grad, cpu_linear.weight.grad)

    def loop(x):
        return while_loop(lambda i, s: i < 5, lambda i, s: (i + 1, s * 0.9 + i), (torch.tensor(0, device=x.device), x))[1]

    assert_close(torch.compile(loop, backend="tpu")(torch.ones(3, 4, device="tpu")), loop(torch.ones(3, 4)))
    stats = _graph_stats()
    assert stats["graphs"] == 3 and stats["eager_fallback_graphs"] == 0, stats["per_graph"]


def test_torch_cond_with_a_device_check_in_a_branch_runs_op_by_op():
    table = torch.randn(5, 3)
    on_device = table.to("tpu")

    def f(i, t):
        return torch.cond(i.sum() > 0, lambda i: t[i], lambda i: t[i] * 2, (i,))

    out = torch.compile(f, backend="tpu")(torch.tensor([1, 4], device="tpu"), on_device)
    assert_close(out, f(torch.tensor([1, 4]), table))
    (graph,) = _graph_stats()["per_graph"]
    assert "device-side checks" in graph["fallback"]  # (the index bounds check)


def test_same_signature_is_cached_and_new_shape_recompiles(caplog):
    fn = torch.compile(lambda x: (x * 2).sum(0), backend="tpu")
    x = torch.randn(4, 3, device="tpu")
    fn(x)
    before = _graph_stats()
    fn(torch.randn(4, 3, device="tpu"))
    after = _graph_stats()
    assert after["compilations"] == before["compilations"]
    assert after["hits"] == before["hits"] + 1


def test_unlowerable_op_runs_eagerly_with_a_log_line(caplog):
    # Antialiased resampling is lowered for floating inputs only (ATen
    # resamples uint8 images in 16-bit fixed point, on the CPU here).
    def f(x):
        return F.interpolate(x * 2, size=(3, 4), mode="bilinear", antialias=True) + 1

    x = torch.randint(0, 100, (1, 2, 6, 7), dtype=torch.uint8)
    with caplog.at_level(logging.WARNING, logger="torchtpu.compile"):
        out = torch.compile(f, backend="tpu")(x.to("tpu"))
    assert torch.equal(out.cpu(), f(x))
    messages = [r.getMessage() for r in caplog.records]
    assert any("_upsample_bilinear2d_aa" in m for m in messages), messages
    assert _graph_stats()["eager_fallback_graphs"] >= 1


def test_boolean_mask_assignment_under_captured_dynamic_shapes_trains():
    # The backward reads the mask as an index (aten.index.Tensor with a bool
    # index): that graph runs op by op, where its lowering once raised.
    def f(x, w):
        y = x * 1
        y[x > 0] = w * 2
        return y.sum()

    x, w = torch.randn(6, 5), torch.tensor(0.5, requires_grad=True)
    f(x, w).backward()
    tw = torch.tensor(0.5, device="tpu", requires_grad=True)
    with torch._dynamo.config.patch(capture_scalar_outputs=True, capture_dynamic_output_shape_ops=True):
        loss = torch.compile(f, backend="tpu")(x.to("tpu"), tw)
        loss.backward()
    assert_close(loss, f(x, w), **TOL)
    assert_close(tw.grad, w.grad, **TOL)


def test_explain_works():
    def f(x):
        y = x.sin()
        print("graph break")
        return y.cos()

    explanation = torch._dynamo.explain(f)(torch.randn(3, device="tpu"))
    assert explanation.graph_break_count == 1
    out = torch.compile(f, backend="tpu")(torch.randn(3, device="tpu"))
    assert out.device.type == "tpu"


def test_modes_are_noted_or_refused(caplog):
    model = nn.Linear(4, 2).to("tpu")
    x = torch.randn(3, 4, device="tpu")
    with caplog.at_level(logging.WARNING, logger="torchtpu.compile"):
        out = torch.compile(model, backend="tpu", mode="max-autotune")(x)
    assert_close(out, model(x).cpu(), **TOL)
    assert any("mode='max-autotune' has no effect" in r.getMessage() for r in caplog.records)
    torch._dynamo.reset()
    torch._dynamo.reset()
    assert_close(torch.compile(model, backend="tpu", mode="lite")(x), model(x).cpu(), **TOL)  # (inductor's modes)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="Unrecognized mode=fastest"):
        torch.compile(model, backend="tpu", mode="fastest")(x)


def test_options_dump_graphs_and_hlo(tmp_path):
    fn = torch.compile(lambda x: x.relu() + 1, backend="tpu", options={"dump_dir": str(tmp_path), "xla_opt_level": 1})
    out = fn(torch.randn(4, device="tpu"))
    assert out.device.type == "tpu"
    files = sorted(os.listdir(tmp_path))
    assert any(f.endswith(".fx.py") for f in files), files
    hlo = [f for f in files if f.endswith(".stablehlo.mlir")]
    assert hlo and "stablehlo" in (tmp_path / hlo[0]).read_text()
    with pytest.raises(Exception, match="unknown compile options"):
        torch.compile(lambda x: x + 1, backend="tpu", options={"nope": 1})(torch.randn(2, device="tpu"))


def test_persistent_cache_second_process(tmp_path):
    script = textwrap.dedent(
        """
        import torch, torchtpu
        model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).to("tpu")
        torch.manual_seed(0)
        out = torch.compile(model, backend="tpu")(torch.randn(8, 16, device="tpu"))
        out.sum().backward()
        s = torchtpu.compile_stats()
        print("STATS", s["compilations"], s["persistent_hits"])
        """
    )
    env = dict(os.environ, TORCHTPU_COMPILE_CACHE_DIR=str(tmp_path / "cache"))
    runs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
        line = [ln for ln in out.stdout.splitlines() if ln.startswith("STATS")]
        assert line, out.stderr[-3000:]
        runs.append(tuple(int(v) for v in line[0].split()[1:]))
    (compiled1, hits1), (compiled2, hits2) = runs
    assert compiled1 == compiled2 >= 2
    assert hits1 == 0
    assert hits2 == compiled2  # every graph of the second process came from disk


def test_precompile_second_process_skips_tracing(tmp_path):
    # PyTorch's caching precompile (TORCH_CACHING_PRECOMPILE=1, saved with
    # torch.compiler.save_cache_artifacts()) keeps dynamo's bytecode and the
    # backend's graphs: the second process traces nothing (no dynamo frame,
    # no AOTAutograd graph) and loads every executable from disk.  BatchNorm
    # (a mutated buffer) and a returned view of the input go through it too.
    script = textwrap.dedent(
        """
        import sys, torch, torchtpu
        from torch._dynamo.utils import counters

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
                self.bn = torch.nn.BatchNorm2d(8)
                self.fc = torch.nn.Linear(8, 4)

            def forward(self, x):
                h = torch.relu(self.bn(self.conv(x))).mean((2, 3))
                return self.fc(h).logsumexp(1).mean(), x[:, 0]

        torch.manual_seed(0)
        net = Net().to("tpu")
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        step = torch.compile(net, backend="tpu")
        for _ in range(2):
            x = torch.randn(4, 3, 8, 8, device="tpu")
            loss, view = step(x)
            loss.backward()
            opt.step()
            opt.zero_grad()
            assert view._base is x or view.data_ptr() == x.data_ptr()
            print("LOSS", repr(loss.item()), repr(net.bn.running_mean.sum().item()))
        s = torchtpu.compile_stats()
        print("STATS", s["compilations"], s["persistent_hits"], counters["dynamo_cache"]["dynamo_cache_hit"],
              counters["stats"]["unique_graphs"], counters["aot_autograd"]["total"])
        if sys.argv[1] == "save":
            torch.compiler.save_cache_artifacts()
        """
    )
    env = dict(os.environ, TORCH_CACHING_PRECOMPILE="1", TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "torch"),
               TORCHTPU_COMPILE_CACHE_DIR=str(tmp_path / "tpu"))
    runs = []
    for mode in ("save", "load"):
        out = subprocess.run([sys.executable, "-c", script, mode], env=env, capture_output=True, text=True, timeout=600)
        stats = [ln.split()[1:] for ln in out.stdout.splitlines() if ln.startswith("STATS")]
        assert stats, out.stderr[-3000:]
        runs.append(([ln for ln in out.stdout.splitlines() if ln.startswith("LOSS")], [int(v) for v in stats[0]]))
    (losses1, (compiled1, _, cache_hits1, graphs1, aot1)), (losses2, (compiled2, disk2, cache_hits2, graphs2, aot2)) = runs
    assert losses1 == losses2 and len(losses1) == 2
    assert cache_hits1 == 0 and graphs1 == 1 and aot1 >= 1
    assert cache_hits2 == 1 and graphs2 == 0 and aot2 == 0  # nothing traced
    assert compiled2 == disk2 == compiled1 >= 2  # every executable from disk


def test_bundled_aot_cache_hit_runs_with_the_calls_options(tmp_path, monkeypatch):
    # AOTAutograd's bundled cache keys a graph without the backend's options:
    # a hit for a call with other options ran with the saved ones (no dumps).
    import torch._functorch.config as functorch_config
    from torch._dynamo.utils import counters

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "torch"))
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Linear(8, 2)).to("tpu")
    x = torch.randn(4, 8, device="tpu")
    # (config.patch, not monkeypatch.setattr: undoing that deletes the config entry)
    with torch.no_grad(), functorch_config.patch(bundled_autograd_cache=True):
        expected = torch.compile(net, backend="tpu", options={"xla_opt_level": 1})(x)
        torch._dynamo.reset()
        counters.clear()
        dumps = tmp_path / "dumps"
        got = torch.compile(net, backend="tpu", options={"dump_dir": str(dumps)})(x)
    assert counters["aot_autograd"]["autograd_cache_hit"] == 1
    assert torch.equal(got.cpu(), expected.cpu())
    files = sorted(p.name for p in dumps.iterdir())
    assert any(f.endswith(".fx.py") for f in files) and any(f.endswith(".stablehlo.mlir") for f in files), files


def test_dynamic_sizes_kept_exact_do_not_share_executables_with_buckets(tmp_path):
    # flip(0) has no padding rule: the batch size is kept exact after the
    # first try, and an executable for exactly 4 rows is stored.  A new
    # process tries the bucketed batch first: 3 rows padded to 4 must not
    # load the exact one (it has no masks: the padded row would count).
    script = textwrap.dedent(
        """
        import torch, torchtpu
        f = lambda x: x.flip(0)[0] + x.mean(0)
        fn = torch.compile(f, backend="tpu", dynamic=True)
        for n in (3, 4, 3):
            x = torch.randn(n, 4)  # (4: its own bucket)
            print("ERR", n, (fn(x.to("tpu")).cpu() - f(x)).abs().max().item())
        """
    )
    env = dict(os.environ, TORCHTPU_COMPILE_CACHE_DIR=str(tmp_path / "cache"))
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
        errors = [float(ln.split()[2]) for ln in out.stdout.splitlines() if ln.startswith("ERR")]
        assert len(errors) == 3, out.stderr[-3000:]
        assert max(errors) < 1e-5, out.stdout


class _Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = torch.nn.LayerNorm(16)
        self.qkv = torch.nn.Linear(16, 48)
        self.out = torch.nn.Linear(16, 16)

    def forward(self, x):
        q, k, v = self.qkv(self.ln(x)).split(16, -1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y) + x, y.mean(1), y.amax(1)  # reductions over the padded dim too


def test_dynamic_sequence_sweep_is_bucketed():
    torch.manual_seed(0)
    model = _Attention()
    tpu_model = copy.deepcopy(model).to("tpu")
    fn = torch.compile(tpu_model, backend="tpu", dynamic=True)
    lengths = list(range(8, 65, 5))
    with torch.no_grad():
        for t in lengths:
            x = torch.randn(2, t, 16)
            for a, b in zip(fn(x.to("tpu")), model(x)):
                assert a.shape == b.shape
                assert_close(a, b, **TOL)
    stats = _graph_stats()
    assert stats["eager_fallback_graphs"] == 0
    # Power-of-two buckets over 8..64: 8, 16, 32, 64.
    assert stats["compilations"] <= 4, stats["per_graph"]


def test_dynamic_training_is_correct():
    torch.manual_seed(0)
    model = GPT(vocab=64, d_model=32, n_heads=4, n_layers=1, max_len=64)
    tpu_model = copy.deepcopy(model).to("tpu")
    fn = torch.compile(tpu_model, backend="tpu", dynamic=True)
    for t in (8, 11):
        idx = torch.randint(0, 64, (2, t))
        tgt = (idx + 1) % 64
        out = fn(idx.to("tpu"))
        loss = F.cross_entropy(out.reshape(-1, 64), tgt.reshape(-1).to("tpu"))
        loss.backward()
        ref = F.cross_entropy(model(idx).reshape(-1, 64), tgt.reshape(-1))
        ref.backward()
        assert_close(loss, ref, **TOL)
        for p, q in zip(tpu_model.parameters(), model.parameters()):
            assert_close(p.grad, q.grad, **TOL)
        tpu_model.zero_grad()
        model.zero_grad()


def test_dynamic_training_backward_is_bucketed_too():
    # The backward reads (B*T, C) activations the forward saved: merged
    # dims, padded per factor like the views of the graph that split them.
    torch.manual_seed(0)
    model = GPT(vocab=64, d_model=32, n_heads=4, n_layers=1, max_len=64)
    tpu_model = copy.deepcopy(model).to("tpu")
    fn = torch.compile(tpu_model, backend="tpu")  # automatic dynamic: T symbolic from the 2nd length
    for t in (8, 11, 13, 16, 21, 27):
        idx = torch.randint(0, 64, (2, t))
        out = fn(idx.to("tpu"))
        F.cross_entropy(out.reshape(-1, 64), idx.reshape(-1).to("tpu")).backward()
        F.cross_entropy(model(idx).reshape(-1, 64), idx.reshape(-1)).backward()
        for p, q in zip(tpu_model.parameters(), model.parameters()):
            assert_close(p.grad, q.grad, **TOL)
        tpu_model.zero_grad()
        model.zero_grad()
    backward = sorted(g["compilations"] for g in _graph_stats()["per_graph"] if g["name"].endswith("_backward"))
    assert backward == [1, 2], _graph_stats()["per_graph"]  # 8 static; then buckets 16 and 32


def test_dynamic_merged_dims_in_two_layouts_are_not_mixed():
    # (B, T) rows and (T, B) rows merged into one size meet in the add:
    # padded, their real elements sit at different places.  The graph keeps
    # those sizes exact instead (it used to return wrong values).
    lin = torch.nn.Linear(4, 4)

    def f(x):
        return lin(x).reshape(-1, 4) + lin(x).transpose(0, 1).reshape(-1, 4) * 2

    tpu_lin = copy.deepcopy(lin).to("tpu")
    g = torch.compile(lambda x: tpu_lin(x).reshape(-1, 4) + tpu_lin(x).transpose(0, 1).reshape(-1, 4) * 2,
                      backend="tpu", dynamic=True)
    with torch.no_grad():
        for t in (5, 7, 6):
            x = torch.randn(3, t, 4)
            assert_close(g(x.to("tpu")), f(x), **TOL)


def test_dynamic_slice_of_merged_rows_is_not_padded():
    # rows 0..4 of a (B*T, C) view are not the padded value's first rows
    # once T is padded: the sizes stay exact.
    f = lambda x: (x * 2).reshape(-1, 4)[:5] + 1
    g = torch.compile(f, backend="tpu", dynamic=True)
    for t in (3, 2, 3):
        x = torch.randn(3, t, 4)
        assert_close(g(x.to("tpu")), f(x), **TOL)


@pytest.mark.parametrize("case", ["own_elements", "non_contiguous", "outside_the_view"])
def test_as_strided_of_an_intermediate(case):
    # A graph has only the value of an intermediate, not its storage: an
    # as_strided that reads its own contiguous elements compiles, the others
    # (which crashed) run op by op on the real storage.
    fns = {
        "own_elements": lambda x: (x * 2).as_strided((2, 2), (1, 2), 1),
        "non_contiguous": lambda x: torch.rot90(x, -1, [0, 1]).as_strided((2, 2), (1, 2)),
        "outside_the_view": lambda x: x.view(-1)[2:].as_strided((3,), (1,), 0) + 1,
    }
    f = fns[case]
    x = torch.arange(6.0).reshape(3, 2)
    assert_close(torch.compile(f, backend="tpu")(x.to("tpu")), f(x))
    assert _graph_stats()["eager_fallback_graphs"] == (case != "own_elements")


@pytest.mark.parametrize("dynamic", [False, True])
def test_strided_in_place_update_reads_the_old_values(dynamic):
    # slice_scatter with a step was an XLA scatter, which XLA:CPU fused with
    # an update computed from the same rows through a reversal: row 4 was
    # updated from the already updated row 0.
    cases = [
        lambda x: x[::2, 1:].add_(x[::2, 1:].flip(0) * 1),
        lambda x: x.t()[::2, 1:].add_(x.t()[::2, 1:].flip(0)),
        lambda x: x[::2, 1:].bitwise_xor_(x[::2, 1:].roll(1, 0)),
        lambda x: x[1::3].mul_(x[1::3].flip(1)),
    ]
    for f in cases:
        for dtype in (torch.float32, torch.int64):
            x = torch.arange(1, 31, dtype=dtype).view(5, 6)
            if dtype.is_floating_point and f is cases[2]:
                continue
            expected = x.clone()
            f(expected)
            got = x.to("tpu")
            torch._dynamo.reset()
            torch.compile(f, backend="tpu", dynamic=dynamic)(got)
            assert torch.equal(got.cpu(), expected)


def test_write_through_bool_view_of_other_dtype_raises_not_wrong():
    # The functional graph makes a bool value of x's bytes and views it back:
    # a JAX bool keeps only 0/1, so every byte of x came back 0 or 1.  Raise
    # (eager mode keeps the bytes); reading a bool view still compiles.
    def write(x):
        x.view(torch.bool)[1, :5] = True
        return x

    x = torch.arange(6.0).reshape(3, 2) + 0.5
    with pytest.raises(Exception, match="bool view of a torch.float32 tensor"):
        torch.compile(write, backend="tpu")(x.to("tpu"))
    assert torch.equal(write(x.to("tpu")).cpu(), write(x.clone()))

    def read(x):
        return x.view(torch.bool).sum(), x.view(torch.uint8).view(torch.bool).float().mean()

    got = torch.compile(read, backend="tpu")(x.to("tpu"))
    assert [g.item() for g in got] == [r.item() for r in read(x)]


def test_dynamic_symbolic_outputs_are_their_true_values():
    # A size comparison returned by a graph (dynamo breaks at
    # `sdpa(is_causal=q.shape[2] > 1)` and returns the SymBool) came back None.
    def f(x):
        return x.sum(), x.shape[0] * 1.5, x.shape[0] // 2, x.shape[0] > 2

    g = torch.compile(f, backend="tpu", dynamic=True)
    for n in (2, 3, 5, 9):
        out = g(torch.ones(n, device="tpu"))
        assert out[1:] == f(torch.ones(n))[1:] and type(out[3]) is bool

    # Boolean algebra on sizes (torch.sym_not, &, |) and int() of a size ratio
    # (math.trunc: Swin's window_reverse) compile too; they made the graph run op by op.
    def flags(x):
        small = torch.sym_not(x.shape[0] > 2)
        half = int(x.shape[0] / 2)
        return x * 2 + small + half, small, (x.shape[0] > 2) & (x.shape[0] < 4), (x.shape[0] == 2) | (x.shape[0] > 4)

    for dynamic in (False, True):
        g = torch.compile(flags, backend="tpu", dynamic=dynamic)
        for n in (2, 3, 5):
            out, ref = g(torch.ones(n, device="tpu")), flags(torch.ones(n))
            assert_close(out[0], ref[0])
            assert out[1:] == ref[1:]
    assert _graph_stats()["eager_fallback_graphs"] == 0

    def attend(q, kv):
        return F.scaled_dot_product_attention(q, kv, kv, is_causal=q.shape[2] > 1)

    h = torch.compile(attend, backend="tpu", dynamic=True)
    for length in (1, 3, 4):
        q, kv = torch.randn(1, 2, length, 4), torch.randn(1, 2, length + 2, 4)
        assert_close(h(q.to("tpu"), kv.to("tpu")), attend(q, kv), **TOL)


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("requires_grad", [False, True])
def test_outputs_that_are_views_of_inputs_or_outputs(requires_grad, dynamic):
    # Returned as real views, as in eager.  Under dynamic shapes this is
    # also what makes them right: AOTAutograd cannot replay a view with
    # symbolic bounds and rebuilds an output that aliases an input or
    # another output from our tensor's geometry (a copy at offset 0 came
    # back shifted).
    def f(x):
        y = x * 2
        return x.narrow(-1, 1, x.shape[-1] - 1), x.t()[1:], y, y.narrow(-1, 1, x.shape[-1] - 1)

    fn = torch.compile(f, backend="tpu", dynamic=dynamic)
    for n in (10, 5, 7):
        x = torch.randn(3, n)
        xt = x.to("tpu").requires_grad_(requires_grad) * 1 if requires_grad else x.to("tpu")
        outs = fn(xt)
        for got, want in zip(outs, f(x)):
            assert_close(got, want, **TOL)
            assert got.storage_offset() == want.storage_offset()
        if not requires_grad:
            outs[0].mul_(0)  # real views: writes reach the input, and the other output
            assert xt[:, 1:].abs().sum().item() == 0
            outs[3].fill_(7)
            assert outs[2][:, 1:].eq(7).all().item()


@pytest.mark.parametrize("kind", ["linear", "conv"])
def test_dynamic_batchnorm_training_updates_running_stats(kind):
    # A graph that updates an input in place (BatchNorm's running stats)
    # with a padded batch: the statistics leave the padded samples out, the
    # update is written back whole, a batch sweep costs one executable per
    # bucket.  (Under dynamic=True the conv's spatial sizes are symbolic
    # too: they cannot be padded -- convolution mixes neighbours -- and are
    # kept exact.)
    torch.manual_seed(0)
    if kind == "linear":
        ref = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6), torch.nn.ReLU())
        shape = (4,)
    else:
        ref = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                                  torch.nn.MaxPool2d(2), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                  torch.nn.Linear(4, 3))
        shape = (3, 10, 10)
    model = copy.deepcopy(ref).to("tpu")
    fn = torch.compile(model, backend="tpu", dynamic=True)
    batches = (3, 5, 8, 6, 7, 5)
    for batch in batches:
        x = torch.randn(batch, *shape)
        out, want = fn(x.to("tpu")), ref(x)
        weights = torch.randn(want.shape)  # (a loss without scale invariances)
        (out * weights.to("tpu")).sum().backward()
        (want * weights).sum().backward()
        assert_close(out, want, **TOL)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        assert_close(getattr(model[1], name), getattr(ref[1], name), **TOL)
    for p, q in zip(model.parameters(), ref.parameters()):
        # (a bias's gradient through BatchNorm is ~0: rounding noise)
        assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4)
    stats = _graph_stats()
    assert stats["eager_fallback_graphs"] == 0
    # the first call's static graph, then buckets 8 and 4 (pow2 of 5..8, 3)
    # for the dynamic one: forward and backward each -- not one per batch size
    assert stats["compilations"] <= 2 + 2 * 2, stats["per_graph"]


_PER_SAMPLE_MODELS = {
    "groupnorm": lambda: torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3, padding=1), torch.nn.GroupNorm(2, 4),
                                             torch.nn.SiLU(), torch.nn.Conv2d(4, 2, 1)),
    "pooling": lambda: torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                                           torch.nn.AvgPool2d(2, ceil_mode=True), torch.nn.AdaptiveAvgPool2d(1),
                                           torch.nn.Flatten(), torch.nn.Linear(4, 3)),
}


@pytest.mark.parametrize("name", sorted(_PER_SAMPLE_MODELS))
def test_dynamic_per_sample_ops_pad_the_batch(name):
    # Convolution, pooling and GroupNorm treat each sample alone: a padded
    # batch is harmless (weight gradients leave the padded samples out).
    torch.manual_seed(0)
    ref = _PER_SAMPLE_MODELS[name]()
    model = copy.deepcopy(ref).to("tpu")
    fn = torch.compile(model, backend="tpu", dynamic=True)
    for batch in (3, 5, 8, 6, 7, 5):
        x = torch.randn(batch, 2, 8, 8)
        out, want = fn(x.to("tpu")), ref(x)
        weights = torch.randn(want.shape)
        (out * weights.to("tpu")).sum().backward()
        (want * weights).sum().backward()
        assert_close(out, want, **TOL)
        for p, q in zip(model.parameters(), ref.parameters()):
            assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4)
            p.grad = q.grad = None
    stats = _graph_stats()
    assert stats["eager_fallback_graphs"] == 0
    assert stats["compilations"] <= 2 + 2 * 2, stats["per_graph"]


@pytest.mark.parametrize("conv", ["conv1d", "conv2d"])
def test_dynamic_convolution_with_a_weight_passed_in(conv):
    # The weight is a graph input, so dynamic=True makes its out channels
    # symbolic too: found by a compile probe (a broadcasting error when they
    # differ from the batch, wrong numbers when they equal it, as padding
    # the batch padded the output's channels with it).
    torch.manual_seed(0)
    op = getattr(F, conv)
    fn = lambda x, w, b: op(x, w, b, padding=1).relu()  # noqa: E731
    compiled = torch.compile(fn, backend="tpu", dynamic=True)
    spatial = (7,) if conv == "conv1d" else (5, 6)
    for batch, out_channels in ((2, 4), (5, 5), (3, 6)):
        x = torch.randn(batch, 3, *spatial)
        w = torch.randn(out_channels, 3, *(3,) * len(spatial), requires_grad=True)
        b = torch.randn(out_channels, requires_grad=True)
        w_t, b_t = (t.detach().to("tpu").requires_grad_() for t in (w, b))
        want, got = fn(x, w, b), compiled(x.to("tpu"), w_t, b_t)
        assert_close(got, want, **TOL)
        weights = torch.randn(want.shape)
        (want * weights).sum().backward()
        (got * weights.to("tpu")).sum().backward()
        assert_close(w_t.grad, w.grad, rtol=1e-4, atol=1e-4)
        assert_close(b_t.grad, b.grad, rtol=1e-4, atol=1e-4)


def test_dynamic_mean_over_no_element_is_nan():
    # as on the CPU (0 / 0); found by a compile probe (it gave 0)
    fn = lambda x: (x.mean(0), x.mean(), x.mean(1))  # noqa: E731
    compiled = torch.compile(fn, backend="tpu", dynamic=True)
    for rows in (3, 0, 5):
        x = torch.randn(rows, 4)
        for got, want in zip(compiled(x.to("tpu")), fn(x)):
            assert_close(got, want, equal_nan=True)


_PADDED_CASES = {
    # counting from the end of a padded dim: the padding is there
    "slice from the end": lambda x: (x * 2)[..., :-1] + 1,
    "slice between both ends": lambda x: (x * 2)[:, 1:-2].cumsum(1),
    # Llama's RoPE: complex views of a (..., 2) pair dim
    "view_as_complex": lambda x: torch.view_as_real(torch.view_as_complex(torch.stack([x, x * 2], -1)) * (1 + 2j)).cumsum(1),
    # bool/integer inputs: no infinity to pad with
    "logsumexp of bool": lambda x: torch.logsumexp(x > 0, -1),
    "amax of bool": lambda x: (x > 0).amax(-1),
    "amin of int": lambda x: (x * 4).int().amin(-1),
    # a size used in float arithmetic (var's 1 / (N - 1)), forward and backward
    "var": lambda x: x.var(-1, keepdim=True) * x,
    # zeros_like/ones_like of a padded value (autograd's own graphs use them)
    "ones_like": lambda x: torch.ones_like(x).cumsum(-1) * x,
    # windows: one that reaches into the padding is not real
    "unfold": lambda x: x.unfold(-1, 2, 1).sum(-1),
    # arange from a size: its start is traced
    "arange from a size": lambda x: x.index_select(-1, torch.arange(x.shape[-1] - 1, -1, -1, device=x.device)),
    # positions computed from a padded size (found by model probes: wrong
    # elements, not errors, before those sizes were kept exact)
    "slice from the middle": lambda x: x[..., x.shape[-1] // 2:] * 2,
    "narrow at a size": lambda x: x.narrow(-1, x.shape[-1] // 2, 2) * 2,
    "select the last": lambda x: x[..., x.shape[-1] - 1] * 2,
    "chunk": lambda x: x.chunk(2, -1)[1] * 2,
    "chunk returned as a view": lambda x: x.chunk(2, -1)[1],
    "split with a size": lambda x: torch.split(x, [2, x.shape[-1] - 2], -1)[1] * 2,
    # where a slice ends along the padded dim (found by model probes: the
    # slice kept all the padded size's real elements)
    "slice to a size": lambda x: x[:, : x.shape[1] - 1].sum(1),
    "slice to half the size": lambda x: x[:, : x.shape[1] // 2] * 2,
    "narrow to half the size": lambda x: x.narrow(1, 0, x.shape[1] // 2).sum(1),
    # graph-only lowerings that are not views, once masked as views (found by
    # a dynamic-shape probe: padded elements counted as real)
    "randint_like": lambda x: (torch.randint_like(x, 0, 3) * 0 + 1).sum(1),
    "bucketize": lambda x: torch.bucketize(x, torch.tensor([-0.5, 0.0, 0.5]).to(x.device)).float().sum(1),
    "complex": lambda x: torch.complex(x, x + 1).abs().sum(1),
    # a diagonal computed from the sizes (a bottom-right aligned causal mask)
    "tril at a size": lambda x: (torch.ones(x.shape[1], x.shape[1] + 3, device=x.device).tril(3) * x.sum()).sum(1)
    + torch.ones(x.shape[0], x.shape[1], device=x.device).tril(x.shape[1] - x.shape[0]).sum(),
    # pieces of a list: cat along the padded dim goes piece after piece
    "cat along the padded dim": lambda x: torch.cat([x, x * 2, x[..., :1]], -1) + 1,
    "cat across it": lambda x: torch.cat([x, x * 2], 0).softmax(-1),
    "stack": lambda x: torch.stack([x, x * 2], 1).sum(-1),
    # a padded size reached by expand (the backward of a sum spreads the
    # gradient over the summed dim)
    "expand of a sum": lambda x: x.sum(-1, keepdim=True).expand_as(x),
    # a padded embedding dim (found by a probe: the columns' mask was dropped)
    "embedding of a padded table": lambda x: F.embedding(torch.tensor([[0, 1], [1, 0]], device=x.device), x) * 2,
    # repeat: to a padded size from a size-1 dim (T5's causal mask), along a
    # padded dim once, and tiling one (kept exact)
    "repeat to a causal mask": lambda x: _t5_causal_mask(x).float().sum(-1) * x,
    "repeat a new dim": lambda x: x.repeat(2, 1, 1).cumsum(2),
    "repeat tiling the padded dim": lambda x: x.repeat(1, 2).cumsum(1),
    # (found by a dynamic-shape probe) a cat along the padded dim split by a
    # view into (2, n): wrong numbers; a slice to n // 2, which dynamo
    # specialises to 1 for n = 3: a shape error
    "cat then split the catted dim": lambda x: torch.cat([x, x * 2], 1).reshape(x.shape[0], 2, x.shape[1]).sum(1),
    "slice to half a size of 3": lambda x: x[:, : x.shape[1] // 2].cumsum(1),
    # all/any: padding is neutral (True for all, False for any)
    "all and any": lambda x: (x > -0.5).all(1).float() + (x > 1).any(-1, keepdim=True).float().sum() + (x < 9).all(),
    "all and any over dims": lambda x: torch.ops.aten.all.dims(x > -1, [0, 1]).float() + torch.ops.aten.any.dims(x > 1, [1]),
}


def _t5_causal_mask(x):
    ids = torch.arange(x.shape[1], device=x.device)
    return ids[None, None, :].repeat(x.shape[0], x.shape[1], 1) <= ids[None, :, None]


def test_dynamic_one_hot_logits_against_marked_targets():
    # one_hot's logits flattened to B*T against targets flattened alike, the
    # sequence dims marked dynamic: the target's B*T was padded where the
    # logits' was kept exact, and JAX's broadcasting error leaked (found by
    # a compile probe); operands padded to different sizes now keep their
    # symbols exact
    def loss(idx, tgt, w):
        return F.cross_entropy((F.one_hot(idx, 8).float() @ w).reshape(-1, 5), tgt.reshape(-1))

    compiled = torch.compile(loss, backend="tpu")
    w = torch.randn(8, 5)
    for b, t in [(4, 7), (2, 3), (3, 5)]:
        idx, tgt = torch.randint(0, 8, (b, t)), torch.randint(0, 5, (b, t))
        idx_t, tgt_t = idx.to("tpu"), tgt.to("tpu")
        torch._dynamo.mark_dynamic(idx_t, 1)
        torch._dynamo.mark_dynamic(tgt_t, 1)
        assert_close(compiled(idx_t, tgt_t, w.to("tpu")), loss(idx, tgt, w), **TOL)


def test_dynamic_loss_after_a_graph_break_has_exact_gradients():
    # After a graph break the logits have symbols of their own: the
    # backward's saved targets (B*T rows it never views: a prefix) met
    # log-probabilities it views per factor, and nll paired misplaced rows
    # -- the loss right, every gradient wrong (found by a dynamic probe
    # training Embedding -> GRU -> Linear)
    def loss(ids, w, head):
        h = F.embedding(ids, w)
        torch._dynamo.graph_break()
        out = h @ head
        return F.cross_entropy(out[:, :-1].reshape(-1, 11), ids[:, 1:].reshape(-1))

    compiled = torch.compile(loss, backend="tpu", dynamic=True)
    w, head = torch.randn(11, 8), torch.randn(8, 11)
    for length in (5, 7, 3):
        ids = torch.randint(0, 11, (3, length))
        want = [w.clone().requires_grad_(), head.clone().requires_grad_()]
        got = [w.to("tpu").requires_grad_(), head.to("tpu").requires_grad_()]
        loss(ids, *want).backward()
        compiled(ids.to("tpu"), *got).backward()
        for a, b in zip(got, want):
            assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5)


def test_dynamic_cat_of_empty_pieces():
    # (found by a compile probe: JAX's "Need at least one array")
    def flat(x):
        return torch.cat([x.reshape(-1), x.reshape(-1) * 2])

    compiled = torch.compile(flat, backend="tpu", dynamic=True)
    for shape in [(4, 3), (3, 0), (0, 3), (2, 0, 3)]:
        x = torch.randn(shape)
        assert_close(compiled(x.to("tpu")), flat(x))


def test_dynamic_cat_of_a_merged_piece_read_by_position():
    # A flattened (2, n) piece holds padding between its rows: cat placed it
    # whole, so positions past it (gather, a slice) read padding (found by a
    # random-program compile probe)
    def f(a, b):
        v = torch.cat([a, b.flatten(), a * 2])
        return v.gather(0, torch.arange(v.shape[0], device=v.device)), v[1:-1] * 3

    compiled = torch.compile(f, backend="tpu", dynamic=True)
    for n in (3, 5, 6):
        a, b = torch.randn(2), torch.randn(2, n)
        for got, want in zip(compiled(a.to("tpu"), b.to("tpu")), f(a, b)):
            assert_close(got, want)


ELEMENTWISE_WITHOUT_THE_TAG = {
    "floor_divide": lambda x: x + (x.detach() // 2 + torch.floor_divide(x.detach(), x.detach().abs() + 1)),
    "masked_fill with a 0-dim tensor": lambda x: x.masked_fill(x > 0, torch.tensor(0.5)),
    "hardswish": F.hardswish,
    "hardtanh": F.hardtanh,
    "elu": F.elu,
    "softplus": F.softplus,
    "leaky_relu": F.leaky_relu,
    "hardsigmoid": F.hardsigmoid,
    "hardshrink": F.hardshrink,
    "softshrink": F.softshrink,
    "mish": F.mish,
}


@pytest.mark.parametrize("name", sorted(ELEMENTWISE_WITHOUT_THE_TAG))
def test_dynamic_elementwise_ops_without_the_pointwise_tag_stay_bucketed(name):
    # (each compiled once per length: no padding rule; found by a compile probe)
    fn = ELEMENTWISE_WITHOUT_THE_TAG[name]

    def f(x):
        return fn(x * 3).sum(-1)

    compiled = torch.compile(f, backend="tpu", dynamic=True)
    before = _graph_stats()["compilations"]
    for length in range(9, 14):
        x = torch.randn(2, length, requires_grad=True)
        xt = x.detach().to("tpu").requires_grad_()
        out = compiled(xt)
        assert_close(out, f(x), **TOL)
        out.sum().backward()
        f(x).sum().backward()
        assert_close(xt.grad, x.grad, **TOL)
    assert _graph_stats()["compilations"] - before <= 2  # (the forward and the backward, bucket 16)


def test_dynamic_t5_causal_mask_stays_bucketed():
    # T5 builds its causal mask with repeat, which had no padding rule: one
    # compilation per length (found by an LLM probe)
    def scores(x):
        s = (x @ x.transpose(1, 2)).masked_fill(~_t5_causal_mask(x), -1e9)
        return s.softmax(-1).sum(-1)

    compiled = torch.compile(scores, backend="tpu", dynamic=True)
    before = _graph_stats()["compilations"]
    for length in range(9, 17):
        x = torch.randn(2, length, 4)
        assert_close(compiled(x.to("tpu")), scores(x), **TOL)
    assert _graph_stats()["compilations"] - before == 1


def test_dynamic_scatter_into_padded_data_stays_bucketed():
    # A functional cache update (clone, write at p) of a cache whose sizes
    # are symbolic too: the write's whole-dim slice_scatter along the padded
    # batch had no padding rule and kept every size exact.
    def fn(cache, k, p):
        cache = cache.clone()
        cache[:, p : p + k.shape[1]] = k * 2
        return cache, cache[:, p : p + k.shape[1]] + 1

    compiled = torch.compile(fn, backend="tpu", dynamic=True)
    calls = [(2, 16, 2), (3, 16, 3), (3, 20, 5), (2, 24, 9), (4, 30, 12), (3, 28, 6), (4, 18, 7), (3, 26, 10),
             (4, 22, 11), (3, 30, 13)]
    for batch, length, p in calls:
        cache, k = torch.randn(batch, length, 4), torch.randn(batch, 3, 4)
        assert_close(compiled(cache.to("tpu"), k.to("tpu"), p), fn(cache, k, p), **TOL)
    # batches 2..4 -> 2, 4; lengths 16..30 -> 16, 32; p 2..13 -> 2, 4, 8, 16: five
    # combinations occur (exact sizes: ten)
    assert _graph_stats()["compilations"] <= 6, _graph_stats()["per_graph"]


def test_dynamic_slice_written_into_a_clone_trains():
    # The backward reads the clone's strides (found by a probe: aten.sym_stride
    # raised Unpaddable to the user).
    def fn(cache, k):
        cache = cache.clone()
        cache[:, 2:5] = k
        return cache

    compiled = torch.compile(fn, backend="tpu", dynamic=True)
    for n in (32, 20, 9):
        cache, k = torch.randn(2, n, 4, requires_grad=True), torch.randn(2, 3, 4, requires_grad=True)
        tpu_cache, tpu_k = (t.detach().to("tpu").requires_grad_() for t in (cache, k))
        w = torch.randn(2, n, 4)
        (fn(cache, k) * w).sum().backward()
        (compiled(tpu_cache, tpu_k) * w.to("tpu")).sum().backward()
        assert_close(tpu_cache.grad, cache.grad, **TOL)
        assert_close(tpu_k.grad, k.grad, **TOL)


@pytest.mark.parametrize("name", sorted(_PADDED_CASES))
def test_dynamic_shapes_padding_rules(name):
    # dynamic=True pads sizes to buckets: each case once mishandled padding
    # (found by randomized compiled programs under dynamic=True).
    fn = _PADDED_CASES[name]
    compiled = torch.compile(fn, backend="tpu", dynamic=True)
    for shape in ((2, 5), (3, 6), (2, 7), (2, 3)):
        x = torch.randn(shape)
        grad = fn(x.clone().requires_grad_()).requires_grad
        a, b = x.clone().requires_grad_(grad), x.to("tpu").requires_grad_(grad)
        want, got = fn(a), compiled(b)
        assert_close(got, want, **TOL)
        if grad:
            w = torch.randn(want.shape)
            (want * w).sum().backward()
            (got * w.to("tpu")).sum().backward()
            assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-4)


def test_dynamic_causal_lm_loss_shift_and_rope_stay_bucketed():
    # logits[:, :-1] (every Hugging Face causal-LM loss) and Meta's
    # view_as_complex RoPE kept the sequence length exact: one compilation
    # per length (found by an LLM probe)
    torch.manual_seed(0)
    emb, head = torch.nn.Embedding(50, 8), torch.nn.Linear(8, 50)

    def loss(ids, freqs, emb, head):
        h = emb(ids)
        h = torch.view_as_real(torch.view_as_complex(h.reshape(*h.shape[:-1], -1, 2)) * freqs).flatten(-2)
        logits = head(torch.tanh(h))
        return F.cross_entropy(logits[:, :-1].reshape(-1, 50), ids[:, 1:].reshape(-1))

    emb_t, head_t = copy.deepcopy(emb).to("tpu"), copy.deepcopy(head).to("tpu")
    compiled = torch.compile(loss, backend="tpu", dynamic=True)
    before = _graph_stats()["compilations"]
    for length in (9, 11, 12, 14, 16):
        ids = torch.randint(0, 50, (2, length))
        freqs = torch.polar(torch.ones(length, 4), torch.randn(length, 4))
        want = loss(ids, freqs, emb, head)
        got = compiled(ids.to("tpu"), freqs.to("tpu"), emb_t, head_t)
        want.backward()
        got.backward()
        assert_close(got, want.detach(), **TOL)
        for p, q in zip([*emb_t.parameters(), *head_t.parameters()], [*emb.parameters(), *head.parameters()]):
            assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
            p.grad = q.grad = None
    assert _graph_stats()["compilations"] - before <= 2  # forward and backward, one bucket


# Reshapes that move real elements across a padded dim's padding (found by a
# capture probe: wrong numbers from the second call of a default compile, when
# dynamo makes the size dynamic, and a reshape crash): (input's dims past the
# first, the function).
_PADDED_RESHAPES = {
    "split in two": ((12,), lambda x: x.reshape(-1).view(2, -1).cumsum(1)),
    "unflatten a static inner dim": ((3,), lambda x: x.reshape(-1).unflatten(0, (-1, 3)).cumsum(1)),
    "regroup with a static dim": ((4,), lambda x: x.reshape(-1, 8).sum(1)),
    "rows of 4 from rows of 12": ((12,), lambda x: x.reshape(-1, 4).softmax(-1)),
    "transpose then split": ((6,), lambda x: x.t().reshape(-1).view(3, -1).cumsum(1)),
}


@pytest.mark.parametrize("dynamic", [True, None])
@pytest.mark.parametrize("name", sorted(_PADDED_RESHAPES))
def test_dynamic_reshapes_across_padding(name, dynamic):
    inner, fn = _PADDED_RESHAPES[name]
    compiled = torch.compile(fn, backend="tpu", dynamic=dynamic)
    for n in (6, 10, 14, 12):
        x = torch.randn((n,) + inner, requires_grad=True)
        y = x.detach().to("tpu").requires_grad_()
        want, got = fn(x), compiled(y)
        assert_close(got, want, **TOL)
        w = torch.randn(want.shape)
        (want * w).sum().backward()
        (got * w.to("tpu")).sum().backward()
        assert_close(y.grad, x.grad, **TOL)


def test_dynamic_multihead_attention_training_forward_is_bucketed():
    # nn.MultiheadAttention views (B*T, E) rows in two factor orders: the
    # forward's reshapes merge and split them (no single layout) and must
    # stay plain reshapes, not send the forward to exact sizes.  (Its
    # backward is kept exact: fresh values of such a size have no layout.)
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.out = nn.Embedding(20, 16), nn.Linear(16, 20)
            self.attention = nn.MultiheadAttention(16, 2, batch_first=True)

        def forward(self, ids):
            h = self.emb(ids)
            return self.out(self.attention(h, h, h, need_weights=False)[0])

    torch.manual_seed(0)
    model = Model()
    tpu_model = copy.deepcopy(model).to("tpu")
    compiled = torch.compile(lambda m, i, t: F.cross_entropy(m(i).reshape(-1, 20), t.reshape(-1)), backend="tpu",
                             dynamic=True)
    for length in (9, 10, 11, 13):
        ids, targets = torch.randint(0, 20, (3, length)), torch.randint(0, 20, (3, length))
        want = F.cross_entropy(model(ids).reshape(-1, 20), targets.reshape(-1))
        got = compiled(tpu_model, ids.to("tpu"), targets.to("tpu"))
        assert_close(got, want, **TOL)
        want.backward()
        got.backward()
    assert_close(tpu_model.attention.in_proj_weight.grad, model.attention.in_proj_weight.grad, rtol=1e-4, atol=1e-4)
    forward = [g["compilations"] for g in _graph_stats()["per_graph"] if g["name"].endswith("forward")]
    assert forward == [1], _graph_stats()["per_graph"]


def test_dynamic_causal_mask_buffer_gradients():
    # nanoGPT's causal mask: a (16, 16) buffer sliced to [:T, :T]; the saved
    # mask was bound at the padded row length, so the gradient read it
    # shifted (the loss was right, every gradient before the attention wrong).
    class Masked(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("mask", torch.tril(torch.ones(16, 16)))

        def forward(self, x):
            n = x.shape[1]
            return x.masked_fill(self.mask[:n, :n] == 0, -1e9).softmax(-1)

    compiled = torch.compile(Masked().to("tpu"), backend="tpu", dynamic=True)
    for n in (5, 6, 7):
        x, w = torch.randn(2, n, n), torch.randn(2, n, n)
        xt, xc = x.to("tpu").requires_grad_(), x.clone().requires_grad_()
        (compiled(xt) * w.to("tpu")).sum().backward()
        (Masked()(xc) * w).sum().backward()
        assert_close(xt.grad, xc.grad, rtol=1e-4, atol=1e-5)


def test_dynamic_cpu_tensor_inputs_keep_their_sizes_exact():
    # a CPU tensor moved inside the graph (a global weight, class weights):
    # the graph ran op by op ("a CPU graph input of dynamic shape").
    weight = torch.randn(6, 6)
    f = lambda x: (x @ weight.to(x.device)).relu().sum(1)
    h = lambda x, w: (x * w.to(x.device)).sum(0)
    compiled_f = torch.compile(f, backend="tpu", dynamic=True)
    compiled_h = torch.compile(h, backend="tpu", dynamic=True)
    for b, t in ((3, 5), (2, 7), (4, 9)):
        x = torch.randn(b, t, 6)
        assert_close(compiled_f(x.to("tpu")), f(x), **TOL)
        y, w = torch.randn(4, t), torch.arange(float(t))
        assert_close(compiled_h(y.to("tpu"), w), h(y, w), **TOL)
    assert _graph_stats()["eager_fallback_graphs"] == 0


def test_dynamic_static_tables_shorter_than_the_bucket_and_scaled_embedding_gradients():
    # a 12-row position table sliced to T = 9 (bucket 16) raised; padded
    # indices counted in scale_grad_by_freq's frequency of row 0
    torch.manual_seed(0)
    class Positions(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.table = torch.nn.Parameter(torch.randn(12, 4))

        def forward(self, x):
            return x + self.table[: x.shape[1]]

    positions = Positions()
    emb = torch.nn.Embedding(20, 4, scale_grad_by_freq=True)
    compiled_positions = torch.compile(copy.deepcopy(positions).to("tpu"), backend="tpu", dynamic=True)
    emb_tpu = copy.deepcopy(emb).to("tpu")
    compiled_emb = torch.compile(emb_tpu, backend="tpu", dynamic=True)
    for n in (5, 9, 11):
        x = torch.randn(2, n, 4)
        assert_close(compiled_positions(x.to("tpu")), positions(x))
        ids = torch.randint(0, 20, (2, n))
        ids[0, 0] = 0
        emb(ids).sum().backward()
        compiled_emb(ids.to("tpu")).sum().backward()
        assert_close(emb_tpu.weight.grad, emb.weight.grad)
        emb.weight.grad = emb_tpu.weight.grad = None


def test_dynamic_kv_cache_grows_with_bucketed_compilations():
    """A decode loop appending to a cache with cat along the padded length:
    right values at every length, one executable per bucket."""
    torch.manual_seed(0)

    def step(cache, new, q):
        cache = torch.cat([cache, new], 1)
        return cache, torch.softmax(q @ cache.transpose(1, 2), -1) @ cache

    compiled = torch.compile(step, backend="tpu", dynamic=True)
    cache, q = torch.randn(2, 3, 8), torch.randn(2, 1, 8)
    tpu_cache = cache.to("tpu")
    for _ in range(14):  # lengths 4..17
        new = torch.randn(2, 1, 8)
        cache, out = step(cache, new, q)
        tpu_cache, tpu_out = compiled(tpu_cache, new.to("tpu"), q.to("tpu"))
        assert_close(tpu_cache, cache, rtol=0, atol=0)
        assert_close(tpu_out, out, **TOL)
    stats = _graph_stats()
    assert stats["eager_fallback_graphs"] == 0
    assert stats["compilations"] <= 4, stats["per_graph"]  # buckets 4, 8, 16, 32


def test_dynamic_python_sum_of_sizes_compiles_whole():
    # dynamo turns sum() of symbolic sizes into torch.sym_sum
    def f(x):
        return x.sum() + torch.arange(sum([x.shape[0], x.shape[1], 1]), device=x.device).float().sum()

    fn = torch.compile(f, backend="tpu", dynamic=True)
    for n in (3, 5, 6):
        x = torch.randn(n, n + 2)
        assert_close(fn(x.to("tpu")), f(x), **TOL)
    assert _graph_stats()["eager_fallback_graphs"] == 0


def test_dynamic_integer_arguments_as_an_index_and_a_count():
    # An int argument becomes a symbol under dynamic=True like a size, and is
    # bucketed like one: as an index it is traced, as a count (x[:n]) the
    # slice is padded and masked.  Read at its padded value, row 3 was read
    # as row 4 and a select past the end crashed.
    def f(x, i, n):
        return x.select(0, i) * 2 + x[:n].sum(0)

    compiled = torch.compile(f, backend="tpu", dynamic=True)
    x = torch.randn(8, 3)
    for i, n in ((3, 5), (5, 3), (6, 7), (2, 2), (-1, 8)):
        assert_close(compiled(x.to("tpu"), i, n), f(x, i, n), **TOL)


class _StaticCacheAttention(torch.nn.Module):
    """Meta's Llama reference decoding: a preallocated KV cache written at
    `start_pos` and read up to `start_pos + seqlen`, a RoPE-like table sliced
    at `start_pos`, and a prefix mask `hstack([zeros(n, start_pos), triu])`."""

    def __init__(self, max_len=24, dim=8):
        super().__init__()
        self.q, self.k, self.v = (torch.nn.Linear(dim, dim) for _ in range(3))
        self.register_buffer("cache_k", torch.zeros(2, max_len, dim))
        self.register_buffer("cache_v", torch.zeros(2, max_len, dim))
        self.register_buffer("table", torch.randn(max_len, dim))

    def forward(self, x, start_pos):
        n = x.shape[1]
        x = x + self.table[start_pos : start_pos + n]
        self.cache_k[:, start_pos : start_pos + n] = self.k(x)
        self.cache_v[:, start_pos : start_pos + n] = self.v(x)
        keys, values = self.cache_k[:, : start_pos + n], self.cache_v[:, : start_pos + n]
        scores = self.q(x) @ keys.transpose(1, 2)
        if n > 1:
            mask = torch.full((n, n), float("-inf"), device=x.device).triu(1)
            scores = scores + torch.hstack([torch.zeros((n, start_pos), device=x.device), mask])
        return scores.softmax(-1) @ values


def test_dynamic_kv_cache_written_at_an_integer_position_is_bucketed():
    """A decode loop over a static cache: the position is traced, the read
    length padded up to its bucket -- right values at every position up to
    the cache's end (the last bucket reaches past it), one executable per
    bucket instead of one per position."""
    torch.manual_seed(0)
    model = _StaticCacheAttention()
    tpu_model = copy.deepcopy(model).to("tpu")
    step = torch.compile(lambda m, x, p: m(x, p), backend="tpu", dynamic=True)
    with torch.no_grad():
        prompt = torch.randn(2, 3, 8)
        for pos, x in [(0, prompt), (3, torch.randn(2, 2, 8))] + [(p, torch.randn(2, 1, 8)) for p in range(5, 24)]:
            assert_close(step(tpu_model, x.to("tpu"), pos), model(x, pos), **TOL)
            assert_close(tpu_model.cache_k, model.cache_k, **TOL)
    stats = _graph_stats()
    assert stats["eager_fallback_graphs"] == 0
    # prefill at 0 and at 3; decode at 5..22: buckets 8, 16, 32; at 23
    # dynamo traces a graph of its own (reading the whole cache is an alias)
    assert stats["compilations"] <= 6, stats["per_graph"]


def test_dynamic_graph_updates_a_static_input_in_its_own_buffer():
    # A cache of static shape written by a dynamic graph: its buffer is
    # donated and the new value bound in place (it was copied back through
    # an eager copy_ per call: two extra copies of the whole cache).
    from torchtpu import _C
    from torchtpu.runtime import boxes

    def buffer_address(t):
        boxes.drain()
        return boxes.boxes[_C._tensor_info(t)[0]][0].unsafe_buffer_pointer()

    def step(cache, k, p):
        cache[:, p : p + 1] = k
        return cache[:, : p + 1].sum(1)

    compiled = torch.compile(step, backend="tpu", dynamic=True)
    cache = torch.zeros(2, 16, 4)
    tpu_cache = cache.to("tpu")
    torch._dynamo.mark_static(tpu_cache)
    for p in (3, 5, 6, 12, 13):
        k = torch.randn(2, 1, 4)
        before = buffer_address(tpu_cache)
        assert_close(compiled(tpu_cache, k.to("tpu"), p), step(cache, k, p), **TOL)
        if p in (6, 13):  # (an executable that has run before: a fresh one at times gave a new buffer)
            assert buffer_address(tpu_cache) == before, p
        assert_close(tpu_cache, cache, rtol=0, atol=0)


def test_dynamic_steady_calls_read_each_calls_static_inputs():
    # After a bucket's first call, calls are keyed in C++ by the storages of
    # the inputs of static shape (the weights of a decode step): a weight
    # updated in place, another weight of the same shape, or a transposed
    # view of one must each be read as they are at the call.
    def f(x, w, p):
        return x[:, : p + 1] @ w + p

    compiled = torch.compile(f, backend="tpu")  # (p symbolic from its second value; tensors static)
    x, w1, w2 = torch.randn(3, 16, 4), torch.randn(4, 4), torch.randn(4, 4)
    tx, tw1, tw2 = x.to("tpu"), w1.to("tpu"), w2.to("tpu")
    for p in (4, 5, 6, 7):  # (one bucket)
        for w, tw in ((w1, tw1), (w2, tw2), (w1.t(), tw1.t())):
            assert_close(compiled(tx, tw, p), f(x, w, p), **TOL)
        w1.add_(1.0)
        tw1.add_(1.0)
    assert _graph_stats()["compilations"] <= 6


_BOOL_MASK_PRODUCTS = {
    "x * m.float()": lambda x, m: x * m.float(),
    "x * (x > 5).to(x.dtype)": lambda x, m: x * (x > 5).to(x.dtype),
    "(x * m).sum()": lambda x, m: (x * m).sum(),
    "x @ m.float()": lambda x, m: x[None] @ m.float()[:, None],
    "addcmul(x, x, m.float())": lambda x, m: torch.addcmul(x, x, m.float()),
}


@pytest.mark.parametrize("name", sorted(_BOOL_MASK_PRODUCTS))
def test_compiled_products_with_a_bool_mask_keep_nan(name):
    # In a graph the cast fuses into the product, which XLA rewrites into a
    # select: inf * False and nan * False gave 0 instead of nan.
    fn = _BOOL_MASK_PRODUCTS[name]
    x = torch.tensor([float("inf"), float("nan"), -float("inf"), 2.0, 7.0])
    m = torch.tensor([False, False, True, True, False])
    assert_close(torch.compile(fn, backend="tpu")(x.to("tpu"), m.to("tpu")), fn(x, m), equal_nan=True)


@pytest.mark.parametrize("fn", [lambda x: x.clamp(-1000, 1000), lambda x: torch.where(x > 0, x, 1000),
                                lambda x: x.masked_fill(x > 0, 1000), lambda x: torch.full_like(x, 2**40)])
def test_compiled_scalar_out_of_range_raises_like_eager(fn):
    # ATen converts these Scalars with an overflow check; the graph baked
    # them and wrapped (1000 -> -24 in int8).
    x = torch.tensor([-128, -1, 0, 5, 127], dtype=torch.int8)
    with pytest.raises(RuntimeError, match="value cannot be converted to type int8_t without overflow"):
        fn(x)
    with pytest.raises(RuntimeError, match="value cannot be converted to type int8_t without overflow"):
        torch.compile(fn, backend="tpu")(x.to("tpu"))


@pytest.mark.parametrize("dynamic", [None, True])
def test_views_of_a_growing_tensor_do_not_compile_per_call(dynamic):
    # Hugging Face's generation loop passes input_ids[:, -1:]: a (B, 1)
    # view of a tensor that grows by a column per token.  The graph read it
    # through its view plan from the whole storage, so every token compiled
    # the graph again; such inputs are now copied compact.  Inputs the graph
    # writes, or returns a view of, must stay the caller's tensors.
    emb = torch.nn.Embedding(50, 8)
    tpu_emb = copy.deepcopy(emb).to("tpu")

    def step(embedding, ids, state, mask):
        state.add_(ids)  # a written input: never copied
        # (the reshape to a constant batch makes it static under dynamic=True too)
        return embedding(ids).reshape(3, 8).sum(-1, keepdim=True) + mask.sum(-1, keepdim=True), state[:, :1]

    compiled = torch.compile(lambda *a: step(tpu_emb, *a), backend="tpu", dynamic=dynamic)
    ids = torch.randint(0, 50, (3, 4))
    history = torch.zeros(3, 4, dtype=torch.long)
    tpu_ids, tpu_history = ids.to("tpu"), history.to("tpu")
    with torch.no_grad():
        for t in range(10):
            out, view = step(emb, ids[:, -1:], history[:, -1:], ids.float())
            tpu_out, tpu_view = compiled(tpu_ids[:, -1:], tpu_history[:, -1:], tpu_ids.float())
            assert_close(tpu_out, out, **TOL)
            assert_close(tpu_history, history, rtol=0, atol=0)
            tpu_view.fill_(t)  # a returned view of an input aliases it
            view.fill_(t)
            assert_close(tpu_history, history, rtol=0, atol=0)
            ids = torch.cat([ids, ids[:, -1:] * 7 % 50], 1)
            tpu_ids = torch.cat([tpu_ids, tpu_ids[:, -1:] * 7 % 50], 1)
    assert _graph_stats()["compilations"] <= 6  # (10 before: one per token)


def _attention_then_rope(cache, x, p):
    cache[:, p : p + 1] = x
    keys = cache[:, : p + 1]
    a = torch.softmax(x @ keys.transpose(1, 2), -1) @ keys
    return torch.view_as_real(torch.view_as_complex(a.reshape(1, 1, 4, 2)) * 2)


def _causal_mask_from_aranges(cache, x, p):
    cache[:, p : p + 1] = x
    keys = cache[:, : p + 1]
    i = torch.arange(1, device=x.device)[:, None] + p
    j = torch.arange(p + 1, device=x.device)[None]
    scores = (x @ keys.transpose(1, 2)).masked_fill(j > i, float("-inf"))
    return scores.softmax(-1) @ keys, (j * 2.0).cumsum(-1)


def _causal_mask_by_tril(cache, x, p):
    cache[:, p : p + 1] = x
    keys = cache[:, : p + 1]
    causal = torch.ones(1, p + 1, dtype=torch.bool, device=x.device).tril(diagonal=p)
    scores = (x @ keys.transpose(1, 2)).masked_fill(~causal, torch.finfo(x.dtype).min)
    return scores.softmax(-1) @ keys


# Decode steps that a probe found compiled once per position:
_DECODE_STEPS = {
    # attention over the cache leaves a (1, 1, 8) value whose mask came from
    # the padded keys; view_as_complex has no padding rule, and the graph was
    # compiled per shape
    "attention then rope": _attention_then_rope,
    # GPT-2's causal mask from aranges over the cache length p + 1: that size
    # was taken for a merged (B*T) dim read by position and kept exact
    "causal mask from aranges": _causal_mask_from_aranges,
    # Llama/HF's causal mask `ones(n, p + n).tril(diagonal=p)`: a tril at a
    # position computed from p kept p exact
    "causal mask by tril": _causal_mask_by_tril,
}


@pytest.mark.parametrize("name", sorted(_DECODE_STEPS))
def test_dynamic_decode_step_is_bucketed(name):
    step = _DECODE_STEPS[name]
    compiled = torch.compile(step, backend="tpu", dynamic=True)
    cache = torch.zeros(1, 64, 8)
    tpu_cache = cache.to("tpu")
    torch._dynamo.mark_static(tpu_cache)
    for p in range(3, 20):
        x = torch.randn(1, 1, 8)
        assert_close(compiled(tpu_cache, x.to("tpu"), p), step(cache, x, p), **TOL)
    assert _graph_stats()["compilations"] <= 4, _graph_stats()["per_graph"]  # buckets 4, 8, 16, 32


_INTEGER_POSITION_CASES = {
    # (function of x (6, 10) and an int p in 0..6, values of p)
    "slice at p": lambda x, p: x[:, p : p + 3] * 2,
    "narrow at p": lambda x, p: x.narrow(1, p, 4).sum(1),
    "select at p": lambda x, p: x[:, p] + x[:, p + 1],
    "select from the end": lambda x, p: x[:, -p - 1] * 2,
    "prefix to p": lambda x, p: x[:, : p + 1].softmax(-1).sum(-1),
    "slice_scatter at p": lambda x, p: x.clone().index_put_((torch.arange(6, device=x.device),), x[:, :1])
    .slice_scatter(x[:, :3] * 2, 1, p, p + 3),
    "written at p in place": lambda x, p: _written_at(x.clone(), p),
    "from p to the end": lambda x, p: x[:, p:] * 2,  # (shrinks as p grows: kept exact)
    "causal mask by tril at p": lambda x, p: x[:, : p + 1].masked_fill(
        ~torch.ones(6, p + 1, dtype=torch.bool, device=x.device).tril(p - 3), -1e4).softmax(-1),
    "triu at p": lambda x, p: x[:, : p + 2] * torch.ones(6, p + 2, device=x.device).triu(p - 2),
}


def _repetition_penalty(ids, scores, w):
    # Hugging Face's RepetitionPenaltyLogitsProcessor
    score = torch.gather(scores, 1, ids)
    score = torch.where(score < 0, score * 1.3, score / 1.3)
    return scores.scatter(1, ids, score) * w


_GROWING_SEQUENCE_CASES = {
    # (function of x (3, T, 6), T growing from 3 to 17)
    "the last position": lambda x: x[:, -1:] * 2,
    "between negative ends": lambda x: x[:, -3:-1].sum(1),
    "select the last ones": lambda x: x[:, -1] + x[:, -2],
    "narrow from the end": lambda x: x.narrow(1, -2, 2) * 3,
    "argmax over features": lambda x: x.argmax(-1),
    "argmax along the sequence": lambda x: x.argmax(1),
    "max along the sequence": lambda x: x.max(1).values + x.max(1).indices,
    "min along the sequence, negative values": lambda x: (-x.abs()).min(1, keepdim=True).values,
    "topk over features": lambda x: x.topk(2, dim=-1).values,
    "sort over features": lambda x: x.sort(-1, descending=True).values * torch.arange(6.0, device=x.device),
    "var over features": lambda x: x.var(-1),
    "cummax over features": lambda x: x.cummax(-1).values,
    "any over features": lambda x: (x > 1).any(-1),
}


@pytest.mark.parametrize("name", sorted(_GROWING_SEQUENCE_CASES))
def test_dynamic_row_ops_and_slices_from_the_end_stay_bucketed(name):
    # HF's decode idioms (input_ids[:, -1:], logits[:, -1], argmax) and
    # row-by-row ops on a growing sequence: the start from the end is the
    # true end's, padded rows and positions never win a max.  Each compiled
    # once per shape before.
    fn = _GROWING_SEQUENCE_CASES[name]
    compiled = torch.compile(fn, backend="tpu", dynamic=True)
    data = torch.randn(3, 17, 6, generator=torch.Generator().manual_seed(0))
    for length in (3, 5, 8, 11, 17):  # (few lengths: each new shape also compiles the test's eager kernels)
        x = data[:, :length].clone().requires_grad_()
        tpu_x = x.detach().to("tpu").requires_grad_()
        want, got = fn(x), compiled(tpu_x)
        assert_close(got, want, **TOL)
        if want.is_floating_point():
            g = torch.randn(want.shape)
            (grad,) = torch.autograd.grad((want * g).sum(), x)
            (tpu_grad,) = torch.autograd.grad((got * g.to("tpu")).sum(), tpu_x)
            assert_close(tpu_grad, grad, **TOL)
    assert _graph_stats()["compilations"] <= 8, _graph_stats()["per_graph"]  # forward, backward: 4, 8, 16, 32


def _hf_mask(attention_mask, dtype):
    return (1.0 - attention_mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min


def _sdpa_over_a_cat_cache(q, past, new, attention_mask):
    keys = torch.cat([past, new], dim=-2)
    return F.scaled_dot_product_attention(q, keys, keys, attn_mask=_hf_mask(attention_mask, q.dtype))


def _last_token_over_a_cat_cache(q, past, new, attention_mask):
    # input_ids[:, -1:]: the ids' length is tied to the cache's (past + 1)
    keys = torch.cat([past, new], dim=-2)
    scores = q @ keys.transpose(-1, -2) + _hf_mask(attention_mask, q.dtype)
    return scores.softmax(-1) @ keys * attention_mask[:, -1:, None, None]


@pytest.mark.parametrize("step", [_sdpa_over_a_cat_cache, _last_token_over_a_cat_cache])
def test_dynamic_hf_cat_cache_steps_stay_bucketed(step):
    # HF's DynamicCache: keys concatenated to past + 1, a 2-D attention mask
    # of its own length (a symbol of its own, equal at run time).  SDPA's mask
    # padded to the mask's bucket did not match the scores' (past + 1), and a
    # slice from the end of past + 1 had no rule: each compiled per token.
    compiled = torch.compile(step, backend="tpu", dynamic=True)
    torch.manual_seed(0)
    past = torch.randn(2, 2, 5, 8, requires_grad=True)
    mask = torch.ones(2, 5, dtype=torch.long)
    mask[0, :2] = 0
    for _ in range(8):
        q, new = torch.randn(2, 2, 1, 8, requires_grad=True), torch.randn(2, 2, 1, 8)
        mask = torch.cat([mask, mask.new_ones(2, 1)], -1)
        tpu_q, tpu_past = (t.detach().to("tpu").requires_grad_() for t in (q, past))
        want, got = step(q, past, new, mask), compiled(tpu_q, tpu_past, new.to("tpu"), mask.to("tpu"))
        assert_close(got, want, **TOL)
        g = torch.randn(want.shape)
        grads = torch.autograd.grad((want * g).sum(), (q, past))
        assert_close(torch.autograd.grad((got * g.to("tpu")).sum(), (tpu_q, tpu_past)), grads, **TOL)
        past = torch.cat([past, new], -2).detach().requires_grad_()
    assert _graph_stats()["compilations"] <= 8, _graph_stats()["per_graph"]  # forward, backward: 8, 16


_GATHER_SCATTER_CASES = {
    # (function of ids (4, T) in [0, 50), scores (4, 50) and w (4, 50), both differentiable)
    "repetition penalty": _repetition_penalty,
    "counts by scatter_add": lambda ids, scores, w: torch.zeros_like(scores).scatter_add(
        1, ids, torch.ones(ids.shape, device=ids.device)) * w,
    "scatter_reduce amax without self": lambda ids, scores, w: scores.scatter_reduce(
        1, ids, ids.float() * w[:, : ids.shape[1]], "amax", include_self=False),
    "scatter_reduce prod": lambda ids, scores, w: scores.scatter_reduce(1, ids % 7, w[:, : ids.shape[1]], "prod"),
    "scatter of a value, reduce add": lambda ids, scores, w: scores.detach().scatter(1, ids % 5, 2.0, reduce="add") * w,
    "scatter_reduce mean": lambda ids, scores, w: scores.scatter_reduce(1, ids, w[:, : ids.shape[1]], "mean"),
    "gather along the growing dim": lambda ids, scores, w: (scores[:, : ids.shape[1]] * ids).gather(
        1, torch.tensor([[0, 3]] * 4, device=ids.device)) * w[:, :2],
    "gather at computed positions": lambda ids, scores, w: scores.gather(1, ids * 3 % 50) * w[:, : ids.shape[1]],
}


@pytest.mark.parametrize("name", sorted(_GATHER_SCATTER_CASES))
def test_dynamic_gather_and_scatter_over_a_growing_sequence(name):
    # An index that grows with the sequence (generated tokens): its padded
    # entries must not read out of range nor write anything; `mean` counts
    # its entries, so there the length is kept exact (still right).
    fn = _GATHER_SCATTER_CASES[name]
    compiled = torch.compile(fn, backend="tpu", dynamic=True)
    scores, w = torch.randn(4, 50, requires_grad=True), torch.randn(4, 50, requires_grad=True)
    tpu_scores, tpu_w = (t.detach().to("tpu").requires_grad_() for t in (scores, w))
    ids = torch.randint(0, 50, (4, 20), generator=torch.Generator().manual_seed(0))
    for length in (4, 5, 9, 13, 19):
        want, got = fn(ids[:, :length], scores, w), compiled(ids[:, :length].to("tpu"), tpu_scores, tpu_w)
        assert_close(got, want, **TOL)
        g = torch.randn(want.shape)
        grads = torch.autograd.grad((want * g).sum(), (scores, w), allow_unused=True)
        tpu_grads = torch.autograd.grad((got * g.to("tpu")).sum(), (tpu_scores, tpu_w), allow_unused=True)
        for tpu_grad, grad in zip(tpu_grads, grads):
            assert (tpu_grad is None) == (grad is None)
            if grad is not None:
                assert_close(tpu_grad, grad, **TOL)
    if name != "scatter_reduce mean":
        assert _graph_stats()["compilations"] <= 8, _graph_stats()["per_graph"]  # forward, backward: 4, 8, 16


@pytest.mark.parametrize("op", ["gather", "scatter", "scatter_add"])
def test_dynamic_gather_and_scatter_index_past_the_true_size_raises(op):
    # Along a padded dim, an index between the true and the padded size is
    # in range for the padded array: it must still raise, not read or write
    # the padding.
    def fn(scores, ids):
        if op == "gather":
            return scores.gather(1, ids) * 2
        src = torch.ones(ids.shape, device=ids.device)
        return getattr(scores, op)(1, ids, src) * 2

    compiled = torch.compile(fn, backend="tpu", dynamic=True)
    for n in (5, 6, 7):
        scores = torch.randn(2, n, device="tpu")
        good = torch.tensor([[0, n - 1], [1, 2]])
        assert_close(compiled(scores, good.to("tpu")), fn(scores.cpu(), good), **TOL)
        with pytest.raises(RuntimeError, match=f"index {n} is out of bounds for dimension 1"):
            compiled(scores, torch.tensor([[0, n], [1, 2]], device="tpu")).cpu()
    assert _graph_stats()["compilations"] <= 2, _graph_stats()["per_graph"]


@pytest.mark.parametrize("mode, antialias", [("bilinear", True), ("bilinear", False), ("bicubic", False)])
def test_dynamic_resampling_to_a_static_size_has_exact_gradients(mode, antialias):
    # The backward gets a static gradient and the input's (symbolic) size:
    # evaluated at its padded size, the taps followed the wrong ratio (an
    # antialiased gradient came back shifted by a pixel; found by a probe).
    def fn(x):
        return F.interpolate(x, size=(3, 2), mode=mode, antialias=antialias)

    compiled = torch.compile(fn, backend="tpu", dynamic=True)
    w = torch.linspace(0.1, 1, 12).reshape(1, 2, 3, 2)
    for h, width in ((8, 6), (9, 7), (11, 5)):
        x = torch.randn(1, 2, h, width, requires_grad=True)
        tpu_x = x.detach().to("tpu").requires_grad_()
        want, got = fn(x), compiled(tpu_x)
        assert_close(got, want, **TOL)
        (grad,) = torch.autograd.grad((want * w).sum(), x)
        (tpu_grad,) = torch.autograd.grad((got * w.to("tpu")).sum(), tpu_x)
        assert_close(tpu_grad, grad, **TOL)


def test_dynamic_integer_argument_shrinking_a_static_tensor_and_as_a_count():
    # w[:, p:] of a parameter: its size 24 - p shrinks as p grows, so p keeps
    # its value (found by a probe: the backward padded its gradient input by
    # a negative width); topk's k padded past the dim has nothing to take.
    w = torch.nn.Parameter(torch.randn(3, 24))
    tpu_w = torch.nn.Parameter(w.detach().to("tpu"))
    fn = torch.compile(lambda w, p, k: w[:, p:].log_softmax(1).topk(k, 1).values, backend="tpu", dynamic=True)
    for p, k in ((3, 2), (5, 17), (9, 3), (2, 13)):
        want, got = w[:, p:].log_softmax(1).topk(k, 1).values, fn(tpu_w, p, k)
        assert_close(got, want, **TOL)
        (grad,) = torch.autograd.grad(want.exp().sum(), w)
        (tpu_grad,) = torch.autograd.grad(got.exp().sum(), tpu_w)
        assert_close(tpu_grad, grad, **TOL)


def _written_at(x, p):
    x[:, p : p + 2] = x[:, :2] * 3
    x[:, p + 2] = -1.0
    return x


@pytest.mark.parametrize("name", sorted(_INTEGER_POSITION_CASES))
def test_dynamic_integer_positions_are_traced(name):
    fn = _INTEGER_POSITION_CASES[name]
    compiled = torch.compile(fn, backend="tpu", dynamic=True)
    x = torch.randn(6, 10, requires_grad=True)
    tpu_x = x.detach().to("tpu").requires_grad_()
    for p in (2, 3, 5, 6, 4, 0, 1):
        want, got = fn(x, p), compiled(tpu_x, p)
        assert_close(got, want, **TOL)
        w = torch.randn(want.shape)
        (grad,) = torch.autograd.grad((want * w).sum(), x)
        (tpu_grad,) = torch.autograd.grad((got * w.to("tpu")).sum(), tpu_x)
        assert_close(tpu_grad, grad, **TOL)
    assert _graph_stats()["eager_fallback_graphs"] == 0


def test_dynamic_bfloat16_training_matches_cpu():
    # bf16 x bf16 -> f32 products in a padded backward graph once failed at
    # run time on XLA:CPU ("Unsupported element type for DotThunk").
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(approximate="tanh"), torch.nn.Linear(8, 4)).bfloat16()
    dev = copy.deepcopy(ref).to("tpu")
    compiled = torch.compile(dev, backend="tpu", dynamic=True)
    for rows in (3, 5):
        x = torch.randn(rows, 8, dtype=torch.bfloat16)
        want, got = ref(x), compiled(x.to("tpu"))
        assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2)
        want.float().pow(2).mean().backward()
        got.float().pow(2).mean().backward()
        for p, q in zip(ref.parameters(), dev.parameters()):
            assert_close(q.grad.float(), p.grad.float(), rtol=3e-2, atol=3e-2)
            p.grad = q.grad = None


def test_dynamic_interpolate_compiles_whole():
    # With symbolic sizes, upsampling decomposes into prims.convert_element_type
    # and aten.true_divide, which once sent the graph op by op.
    def f(x):
        up = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True)
        return up + F.interpolate(x, size=(10, 10), mode="nearest").mean()

    before = torchtpu.compile_stats()["eager_fallback_graphs"]
    compiled = torch.compile(f, backend="tpu", dynamic=True)
    for shape in ((2, 3, 5, 5), (2, 3, 6, 7)):
        x = torch.randn(shape)
        assert_close(compiled(x.to("tpu")), f(x), **TOL)
    assert torchtpu.compile_stats()["eager_fallback_graphs"] == before


def test_dynamic_view_of_an_input_the_graph_mutates():
    # The returned views are views of the input's new value in the graph
    # (select(permute(new value))); they must come back as views of the
    # updated input -- a copy at offset 0 was read back from element 0.
    def f(x, i):
        v = x.permute(1, 0).select(0, i)
        v.mul_(2)
        return v, x.permute(1, 0)

    compiled = torch.compile(f, backend="tpu", dynamic=True)
    for n, i in ((5, 3), (6, 2), (7, 4)):
        x = torch.randn(2, n)
        xc, xt = x.clone(), x.to("tpu")
        want, got = f(xc, i), compiled(xt, i)
        for w, g in zip(want, got):
            assert_close(g, w, **TOL)
            assert (g.stride(), g.storage_offset()) == (w.stride(), w.storage_offset())
        assert_close(xt, xc, **TOL)


def test_dynamic_view_of_a_non_contiguous_input():
    # an output that is a view of an input, with size arithmetic in its
    # arguments (reshape of a narrowed tensor: view(x, [s0 * s1, s2]))
    def f(x):
        return x.reshape(-1, x.shape[-1])

    compiled = torch.compile(f, backend="tpu", dynamic=True)
    for shape in ((2, 3, 5), (2, 4, 6), (3, 2, 7)):
        x = torch.randn(shape)
        n, nt = x.narrow(-1, 1, shape[-1] - 1), x.to("tpu").narrow(-1, 1, shape[-1] - 1)
        got, want = compiled(nt), f(n)
        assert_close(got, want, **TOL)
        assert (got.stride(), got.storage_offset()) == (want.stride(), want.storage_offset())


_GRAPH_EDGE_CASES = {
    # CPU tensor literals in the compiled code (torch.distributions builds
    # them from Python floats): constants of the graph
    "0-dim CPU literal": lambda x: x - torch.tensor(0.5) * torch.tensor(2.0, dtype=torch.float64),
    "bfloat16 literal": lambda x: x.bfloat16() + torch.tensor(2.5, dtype=torch.bfloat16),
    "literal moved to the device": lambda x: x * torch.tensor([1.0, -2.0, 3.0]).to(x.device).exp(),
    "normal log_prob": lambda x: torch.distributions.Normal(0.0, 1.0).log_prob(x),
    # split/chunk into a single piece keep the dim
    "one split piece": lambda x: x.split(3, 1)[0] + 1,
    "one chunk": lambda x: x.chunk(1, 0)[0] + 1,
    "split_with_sizes of one": lambda x: x.split([3], 1)[0] + 1,
    # an empty output beside a non-empty one
    "empty and non-empty outputs": lambda x: (x[4:] * 3, x + 1),
    # x[mask] = v: a where (v a scalar, or a row per selected element)
    "masked assignment": lambda x: _assign(x * 2, (x * 2) > 1.5, 1.5),
    "masked rows assignment": lambda x: _assign(x.clone(), x[:, 0] > 0, torch.tensor([7.0, 8.0, 9.0]).to(x.device)),
    "masked accumulate": lambda x: x.clone().index_put_((x > 0,), torch.tensor(5.0), accumulate=True),
    # composites eager mode decomposes (the graph ran op by op)
    "complex and polar": lambda x: torch.view_as_real(torch.complex(x, x * 2) * torch.polar(x.abs(), x)),
    "conj": lambda x: torch.view_as_real(torch.view_as_complex(x.reshape(3, 2)).conj() * 2),
    "bucketize": lambda x: torch.bucketize(x, torch.tensor([-1.0, 0.0, 1.0]).to(x.device), right=True),
    "ldexp": lambda x: torch.ldexp(x, torch.tensor([1, -2, 30]).to(x.device)),
    "complex addcmul_ (prims.fma)": lambda x: torch.view_as_real(torch.complex(x, -x).addcmul_(torch.complex(x, x), x, value=0.5)),
}


def _assign(h, mask, value):
    h[mask] = value
    return h


@pytest.mark.parametrize("name", sorted(_GRAPH_EDGE_CASES))
def test_graph_edge_cases_compile_whole_and_match_cpu(name):
    """Each once crashed the backend or fell back op by op (found by model
    probes and a randomized-program fuzzer)."""
    fn = _GRAPH_EDGE_CASES[name]
    x = torch.randn(2, 3)
    want = fn(x)
    got = torch.compile(fn, backend="tpu")(x.to("tpu"))
    assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert _graph_stats()["eager_fallback_graphs"] == 0


@pytest.mark.parametrize("dynamic", [False, True])
def test_cumsum_backward_of_its_last_column(dynamic):
    # cumsum's backward (flip, cumsum, flip) of a slice_scatter covering the
    # whole tensor: XLA:CPU aborted the process while compiling it.
    f = lambda x: x.cumsum(1)[:, -1]
    compiled = torch.compile(f, backend="tpu", dynamic=dynamic)
    x = torch.randn(3, 5)
    xt = x.to("tpu").requires_grad_()
    compiled(xt).sum().backward()
    xc = x.clone().requires_grad_()
    f(xc).sum().backward()
    assert_close(xt.grad, xc.grad)


def test_masked_assignment_of_rows_checks_their_count():
    def f(x, mask, rows):
        h = x.clone()
        h[mask] = rows
        return h

    compiled = torch.compile(f, backend="tpu")
    x, rows = torch.randn(4, 2), torch.randn(2, 2)
    mask = torch.tensor([True, False, True, False])
    assert_close(compiled(x.to("tpu"), mask.to("tpu"), rows.to("tpu")), f(x, mask, rows))
    with pytest.raises(RuntimeError, match="shape mismatch"):
        compiled(x.to("tpu"), torch.tensor([True, True, True, False]).to("tpu"), rows.to("tpu")).cpu()


def test_random_factories_compile_whole_and_follow_the_seed():
    def f(x):
        return x + torch.rand_like(x), torch.randn(4, 8, device=x.device), torch.randn_like(x)

    compiled = torch.compile(f, backend="tpu")
    x = torch.zeros(64, 32, device="tpu")
    torch.manual_seed(3)
    first = [t.cpu() for t in compiled(x)]
    torch.manual_seed(3)
    again = [t.cpu() for t in compiled(x)]
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    u, n = first[0], first[2]
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.02
    assert abs(n.mean()) < 0.05 and abs(n.std() - 1) < 0.05
    assert _graph_stats()["eager_fallback_graphs"] == 0


_BUCKETED_REDUCTIONS = {
    "var": lambda x: x.var(0),
    "std keepdim, no correction": lambda x: x.std(0, keepdim=True, correction=0),
    "var_mean": lambda x: torch.var_mean(x, 0)[0] + torch.var_mean(x, 0)[1],
    "var of everything": lambda x: x.var() + x[0],
    "max of everything": lambda x: x.max() - x,
    "min of everything": lambda x: (x - 1).min() * x,
    "prod": lambda x: (x * 0.5 + 1).prod(0),
    "norm": lambda x: x.norm(dim=0),
    "normalize": lambda x: F.normalize(x, dim=0),
    "inf-norm": lambda x: torch.linalg.vector_norm(x, float("inf"), dim=0),
}


@pytest.mark.parametrize("name", sorted(_BUCKETED_REDUCTIONS))
def test_dynamic_reductions_over_the_padded_dim_stay_bucketed(name):
    """Reductions over a padded dim with a padding rule (neutral fill, or the
    masked variance with the true count): one compilation per bucket, not
    per size, and exact values and gradients."""
    fn = _BUCKETED_REDUCTIONS[name]
    compiled = torch.compile(fn, backend="tpu", dynamic=True)
    for n in (5, 7, 9, 13, 17, 23):  # buckets 8, 16, 32
        x = torch.randn(n, 3)
        a, b = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
        want, got = fn(a), compiled(b)
        assert_close(got, want, **TOL)
        w = torch.randn(want.shape)
        (want * w).sum().backward()
        (got * w.to("tpu")).sum().backward()
        assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-4)
    forward = [g for g in _graph_stats()["per_graph"] if g["name"].endswith("forward")]
    assert [g["compilations"] for g in forward] == [3]


def test_a_factory_lands_on_the_device_it_names():
    """One executable runs on one device: a graph with no tpu input runs on
    its factories' device (not the current one), a graph naming another
    device than its inputs' runs op by op, as eager would place it."""
    ones = torch.compile(lambda: torch.ones(2, device="tpu:1"), backend="tpu")()
    assert ones.device == torch.device("tpu:1") and ones.cpu().tolist() == [1.0, 1.0]
    x, zeros = torch.compile(lambda x: (x + 1, torch.zeros(2, device="tpu:1")), backend="tpu")(
        torch.ones(2, device="tpu:0"))
    assert (x.device, zeros.device) == (torch.device("tpu:0"), torch.device("tpu:1"))
    with pytest.raises(RuntimeError, match="Invalid device ordinal"):
        torch.compile(lambda: torch.ones(2, device="tpu:9"), backend="tpu")()


def test_inputs_on_two_devices_and_a_step_over_a_split_model():
    a, b = torch.compile(lambda a, b: (a * 2, b * 3), backend="tpu")(torch.ones(2, device="tpu:0"),
                                                                      torch.ones(2, device="tpu:1"))
    assert (a.device, b.device) == (torch.device("tpu:0"), torch.device("tpu:1"))
    assert a.cpu().tolist() == [2.0, 2.0] and b.cpu().tolist() == [3.0, 3.0]

    torch.manual_seed(0)
    cpu_layers = [nn.Linear(4, 8), nn.Linear(8, 3)]
    layers = [copy.deepcopy(cpu_layers[0]).to("tpu:0"), copy.deepcopy(cpu_layers[1]).to("tpu:1")]
    x = torch.randn(5, 4)

    def train(layers, x, device):
        params = [p for layer in layers for p in layer.parameters()]
        opt = torch.optim.AdamW(params, lr=0.1)
        step = torch.compile(opt.step, backend="tpu") if device else opt.step
        for _ in range(3):
            h = layers[0](x.to(device[0]) if device else x).relu()
            loss = layers[1](h.to(device[1]) if device else h).square().mean()
            opt.zero_grad()
            loss.backward()
            step()
        return [p.detach() for p in params]

    for got, want in zip(train(layers, x, ("tpu:0", "tpu:1")), train(cpu_layers, x, None)):
        assert_close(got, want, **TOL)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_sort_and_running_extremes_along_a_dynamic_dim_share_buckets(dtype):
    """A stable sort (topk, kthvalue) along a padded prefix keeps the real
    elements first when the padding sorts last (NaN ascending, -inf
    descending, the integer limits); cummax/cummin never see the padding.  Bucketed: one executable
    per power of two, not per length."""
    def f(x):
        ascending = torch.sort(x, dim=1)[0]  # (unstable: CPU's order of ties is its own)
        descending, order = torch.sort(x, dim=1, descending=True, stable=True)
        peak, where = torch.cummax(x, 1)
        selections = () if x.dtype == torch.bool else (torch.topk(x, 2, dim=1)[0], torch.kthvalue(x, 2, dim=1)[0])
        return ascending, descending, order, peak, where, torch.cummin(x, 1)[0], *selections

    fn = torch.compile(f, backend="tpu", dynamic=True)
    for n in range(2, 18):
        x = torch.randint(-2, 3, (3, n, 2), generator=torch.Generator().manual_seed(n)).to(dtype)
        if dtype.is_floating_point:  # (the values padding must not displace)
            x[0, 0, 0], x[1, -1, 1], x[2, 0, 1] = float("nan"), float("-inf"), float("inf")
        for got, want in zip(fn(x.to("tpu")), f(x)):
            assert torch.equal(got.cpu(), want) or torch.allclose(got.cpu(), want, equal_nan=True), n
    assert _graph_stats()["compilations"] <= 5  # lengths 2..17: buckets 2, 4, 8, 16, 32
