"""scaled_dot_product_attention as one fused op (csrc/attention.cpp picks
ATen's "overrideable" backend for tpu; ops/lowerings/attention.py lowers it,
torchtpu/pallas/attention.py is its TPU/GPU kernel): values and gradients
against the CPU, which calls take it, compiled graphs keeping it whole, and
the Pallas kernel against the XLA reference in interpret mode."""

import copy
import os
import subprocess
import sys
import textwrap

import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from jax import lax
from torch.nn.attention import SDPBackend, sdpa_kernel

import torchtpu
import torchtpu.compile
from torchtpu.models import GPT
from torchtpu.ops.lowerings import attention as reference
from torchtpu.pallas import attention as pallas_attention
from utils import TPU, assert_close, check

FUSED = "ScaledDotProductFusedAttentionOverrideableBackward0"
B, H, L, S, D = 2, 3, 5, 7, 4


def randn(*shape, dtype=torch.float32, seed=0, grad=True):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype).requires_grad_(grad)


def qkv(q_heads=H, length=L, source=S, dtype=torch.float32, dv=6):
    return randn(B, q_heads, length, D, dtype=dtype, seed=1), randn(B, H, source, D, dtype=dtype, seed=2), \
        randn(B, H, source, dv, dtype=dtype, seed=3)


def empty_row_mask():
    mask = torch.rand(L, S, generator=torch.Generator().manual_seed(4)) > 0.3
    mask[1] = False  # a query that sees no key: zeros, as on the CPU
    return mask


CASES = {
    "plain": lambda: (qkv(), {}),
    "causal": lambda: (qkv(), dict(is_causal=True)),
    "causal_more_queries_than_keys": lambda: (qkv(source=3), dict(is_causal=True)),
    "bool_mask_with_empty_row": lambda: (qkv(), dict(attn_mask=empty_row_mask())),
    "learned_bias": lambda: (qkv(), dict(attn_mask=randn(1, H, L, S, seed=5))),
    "key_padding_bias": lambda: (qkv(), dict(attn_mask=randn(B, 1, 1, S, seed=6))),
    "scale": lambda: (qkv(), dict(scale=0.3)),
    "grouped_query": lambda: (qkv(q_heads=6), dict(enable_gqa=True)),
    "grouped_query_bias": lambda: (qkv(q_heads=6), dict(enable_gqa=True, attn_mask=randn(L, S, seed=7))),
    "float64": lambda: (qkv(dtype=torch.float64), {}),
}


def _sdpa(q, k, v, **kw):
    return F.scaled_dot_product_attention(q, k, v, **kw)


@pytest.mark.parametrize("case", sorted(CASES))
def test_fused_attention_matches_cpu(case):
    (q, k, v), kw = CASES[case]()
    out = check(lambda q, k, v, kw: _sdpa(q, k, v, **kw), q, k, v, kw, grad=True, atol=1e-5, rtol=1e-5)
    assert type(out.grad_fn).__name__ == FUSED


def test_fused_attention_float64_gradients_are_double_precise():
    # ATen keeps the saved log-sum-exp in float32; the backward of double
    # inputs must not inherit that rounding (it gave 1e-7 errors).
    q, k, v = qkv(dtype=torch.float64)
    mask = randn(L, S, dtype=torch.float64, seed=8)
    check(lambda q, k, v, m: _sdpa(q, k, v, attn_mask=m), q, k, v, mask, grad=True, atol=1e-12, rtol=1e-12)


class _DropsTheFirstGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        return a + b

    @staticmethod
    def backward(ctx, grad):
        return None, grad


def test_fused_attention_backward_without_an_output_gradient():
    # The backward node runs with an undefined output gradient (gradcheck's
    # undefined-gradient check does the same): undefined input gradients, as
    # CUDA's kernels return -- the lowering once read the missing gradient.
    q, k, v = (t.to(TPU).requires_grad_() for t in qkv(dtype=torch.float64))
    _sdpa(q, k, v).sum().backward()  # (the ordinary backward first: the kernel is cached)
    for t in (q, k, v):
        t.grad = None
    other = torch.zeros(q.shape[:-1] + v.shape[-1:], dtype=q.dtype, device=TPU, requires_grad=True)
    _DropsTheFirstGradient.apply(_sdpa(q, k, v), other).sum().backward()
    assert q.grad is None and k.grad is None and v.grad is None
    assert torch.equal(other.grad.cpu(), torch.ones(other.shape, dtype=torch.float64))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fused_attention_16_bit(dtype):
    q, k, v = qkv(dtype=dtype)
    check(lambda q, k, v: _sdpa(q, k, v, is_causal=True), q, k, v, grad=True, atol=2e-2, rtol=2e-2)


def test_calls_the_fused_op_does_not_take_use_the_math_path():
    q, k, v = (t.detach().to(TPU).requires_grad_() for t in qkv())
    assert type(_sdpa(q, k, v).grad_fn).__name__ == FUSED
    with sdpa_kernel([SDPBackend.MATH]):  # the user's choice is respected
        assert type(_sdpa(q, k, v).grad_fn).__name__ != FUSED
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):  # CUDA code asking for flash gets ours
        assert type(_sdpa(q, k, v).grad_fn).__name__ == FUSED
    assert type(_sdpa(q, k, v, dropout_p=0.5).grad_fn).__name__ == FUSED  # dropout is fused too
    assert type(_sdpa(q[0], k[0], v[0]).grad_fn).__name__ != FUSED  # 3-d: the math path
    with pytest.raises(RuntimeError):  # head counts differ without enable_gqa: ATen's own error
        _sdpa(torch.randn(1, 4, 3, 2, device=TPU), torch.randn(1, 3, 3, 2, device=TPU), torch.randn(1, 3, 3, 2, device=TPU))


def test_dynamic_mask_left_static_against_padded_scores(fresh_dynamo):
    # The second call recompiles: the query length changed (dynamo makes it
    # symbolic) but the mask, now of another rank, has no history (static
    # sizes).  Padding the scores alone would not broadcast with it: the
    # length must stay exact.
    def f(q, k, v, mask):
        return _sdpa(q, k, v, attn_mask=mask)

    compiled = torch.compile(f, backend="tpu")
    for length, mask_shape in ((4, (B, 1, 1, S)), (5, (5, S)), (6, (6, S))):
        q, k, v = (t.detach() for t in qkv(length=length))
        mask = randn(*mask_shape, seed=length, grad=False)
        got = compiled(*(t.to(TPU) for t in (q, k, v, mask)))
        assert_close(got, f(q, k, v, mask), atol=1e-5, rtol=1e-5)
    assert torchtpu.compile_stats()["eager_fallback_graphs"] == 0


# ------------------------------------------------------------------ dropout
#
# The random mask differs from the CPU's, so these read it back: value is
# [v | I] (I the S x S identity), whose last S output columns are the
# dropped probabilities themselves, P * keep / (1 - p) -- in the same call,
# so eager and compiled alike.  The CPU then recomputes the output and
# every gradient from that mask.


def _dropout_inputs(mask_kind):
    q, k, v = (t.detach() for t in qkv(q_heads=6 if mask_kind == "grouped" else H))
    v = torch.cat([v, torch.eye(S).expand(B, H, S, S)], -1)
    kw = {"grouped": dict(enable_gqa=True), "causal": dict(is_causal=True),
          "bias": dict(attn_mask=randn(1, H, L, S, seed=5).detach())}.get(mask_kind, {})
    return q, k, v, kw


def _cpu_dropout_reference(q, k, v, kw, dropped, p, weights):
    """The math path's output and gradients with the mask `dropped` shows."""
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    bias = kw.get("attn_mask")
    bias = bias.clone().requires_grad_() if bias is not None else None
    group = q.shape[1] // k.shape[1]
    kk, vv = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = q @ kk.transpose(-1, -2) / D**0.5
    if bias is not None:
        scores = scores + bias
    if kw.get("is_causal"):
        scores = scores.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), float("-inf"))
    probs = scores.softmax(-1)
    out = (probs * (dropped != 0) / (1 - p)) @ vv
    (out[..., : -S] * weights).sum().backward()
    return out.detach(), [t.grad for t in (q, k, v, bias) if t is not None]


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("mask_kind", ["plain", "causal", "bias", "grouped"])
def test_fused_attention_dropout_is_one_mask_forward_and_backward(mask_kind, compiled, fresh_dynamo):
    p = 0.4
    q, k, v, kw = _dropout_inputs(mask_kind)
    weights = randn(B, q.shape[1], L, 6, seed=9, grad=False)
    on_tpu = [t.to(TPU).requires_grad_() for t in (q, k, v)]
    bias = kw["attn_mask"].to(TPU).requires_grad_() if "attn_mask" in kw else None
    tpu_kw = dict(kw, attn_mask=bias) if bias is not None else kw

    def f(q, k, v):
        return _sdpa(q, k, v, dropout_p=p, **tpu_kw)

    out = (torch.compile(f, backend="tpu") if compiled else f)(*on_tpu)
    (out[..., :-S] * weights.to(TPU)).sum().backward()
    dropped = out[..., -S:].detach().cpu()
    ref_out, ref_grads = _cpu_dropout_reference(q, k, v, kw, dropped, p, weights)
    assert_close(out, ref_out, atol=1e-5, rtol=1e-5)
    grads = [t.grad for t in on_tpu] + ([bias.grad] if bias is not None else [])
    assert len(grads) == len(ref_grads)
    for got, want in zip(grads, ref_grads):
        assert_close(got, want, atol=1e-5, rtol=1e-5)
    # the mask really drops about p of the probabilities, and is not all-or-nothing per row
    live = _sdpa(q, k, v, **kw)[..., -S:] > 0  # the probabilities before dropout
    rate = 1 - (dropped[live] != 0).float().mean().item()
    assert 0.25 < rate < 0.55, rate


def test_fused_attention_dropout_follows_the_seed():
    q, k, v = (t.detach().to(TPU) for t in qkv())
    torch.manual_seed(3)
    first = _sdpa(q, k, v, dropout_p=0.5)
    second = _sdpa(q, k, v, dropout_p=0.5)
    torch.manual_seed(3)
    again = _sdpa(q, k, v, dropout_p=0.5)
    assert torch.equal(first.cpu(), again.cpu())
    assert not torch.equal(first.cpu(), second.cpu())
    assert torch.equal(_sdpa(q, k, v, dropout_p=1.0).cpu(), torch.zeros(B, H, L, 6))


class _Heads(torch.nn.Module):
    """Multi-head causal self-attention on (N, T, C) with a learned bias."""

    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(16, 48)
        self.bias = torch.nn.Parameter(torch.randn(4, 1, 1) * 0.1)

    def forward(self, x):
        n, t, _ = x.shape
        q, k, v = (y.reshape(n, t, 4, 4).transpose(1, 2) for y in self.qkv(x).split(16, -1))
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        bias = self.bias.expand(4, t, t).masked_fill(~causal, float("-inf"))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias).transpose(1, 2).reshape(n, t, 16)


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    torchtpu.compile.reset_compile_stats()
    yield
    torch._dynamo.reset()


def _compiled_training_matches(dynamic, lengths):
    torch.manual_seed(0)
    model = _Heads()
    tpu_model = copy.deepcopy(model).to(TPU)
    fn = torch.compile(tpu_model, backend="tpu", dynamic=dynamic)
    for t in lengths:
        x = torch.randn(2, t, 16)
        out = fn(x.to(TPU))
        ref = model(x)
        assert_close(out, ref, atol=1e-5, rtol=1e-5)
        out.square().mean().backward()
        ref.square().mean().backward()
        for p, q in zip(tpu_model.parameters(), model.parameters()):
            assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-5)
            p.grad = q.grad = None
    return torchtpu.compile_stats()


def _attention_ops(stats):
    return {op: n for g in stats["per_graph"] for op, n in g["op_counts"].items() if "attention" in op or "bmm" in op}


def test_compiled_graphs_keep_attention_whole(fresh_dynamo):
    stats = _compiled_training_matches(None, [8])
    assert _attention_ops(stats) == {
        "aten._scaled_dot_product_fused_attention_overrideable.default": 1,
        "aten._scaled_dot_product_fused_attention_overrideable_backward.default": 1,
    }


def test_dynamic_sequence_sweep_pads_fused_attention(fresh_dynamo):
    # Automatic dynamic (the default): the first length compiles static,
    # the second recompiles with a symbolic length.  Padded keys get no
    # probability and padded queries give nothing to the gradients, so the
    # forward compiles once per bucket: 16 (11, 13, 16) and 32 (21, 27).
    stats = _compiled_training_matches(None, [8, 11, 13, 16, 21, 27])
    assert stats["eager_fallback_graphs"] == 0
    assert "aten._scaled_dot_product_fused_attention_overrideable.default" in _attention_ops(stats)
    forward = [g["compilations"] for g in stats["per_graph"] if g["name"].endswith("_forward")]
    assert sorted(forward) == [1, 2], stats["per_graph"]  # the static graph, then the symbolic one
    # (The backward reads (2*T, 16) activations saved by the forward: a
    # merged dim whose mask the backward graph cannot know, so it is
    # compiled per length -- the same without fused attention.)


# ------------------------------------------------------------ Pallas kernel


class _Ctx:
    precision = lax.Precision.HIGHEST


PALLAS_CASES = {
    "plain": ((2, 4, 16, 8), (2, 4, 24, 8), (2, 4, 24, 16), None, False),
    "causal": ((2, 4, 16, 8), (2, 4, 24, 8), (2, 4, 24, 16), None, True),
    "grouped_query_causal_mask": ((1, 4, 32, 8), (1, 2, 16, 8), (1, 2, 16, 8), (32, 16), True),
    "key_padding_bias": ((2, 2, 8, 8), (2, 2, 8, 8), (2, 2, 8, 8), (2, 1, 1, 8), False),
    "per_head_bias": ((2, 2, 8, 8), (2, 2, 8, 8), (2, 2, 8, 8), (1, 2, 8, 8), False),
}


@pytest.mark.parametrize("case", sorted(PALLAS_CASES))
def test_pallas_kernel_matches_reference(case):
    q_shape, k_shape, v_shape, bias_shape, causal = PALLAS_CASES[case]
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.standard_normal(s), jnp.float32) for s in (q_shape, k_shape, v_shape))
    bias = None
    if bias_shape is not None:
        bias = jnp.asarray(rng.standard_normal(bias_shape), jnp.float32)
        if len(bias_shape) == 2:
            bias = bias.at[3].set(-jnp.inf)  # a fully masked row
    assert pallas_attention.usable("tpu", q, k, v, bias)
    out, lse = pallas_attention.flash_attention_forward(q, k, v, bias, causal, 0.35, lax.Precision.HIGHEST, "tpu",
                                                        interpret=True)
    want_out, want_lse = reference.attention_forward(_Ctx, q, k, v, bias, causal, 0.35)
    np.testing.assert_allclose(np.asarray(out), np.asarray(want_out), atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(lse), np.asarray(want_lse), atol=1e-5, rtol=1e-5)


def test_pallas_kernel_that_does_not_compile_falls_back_with_a_warning(caplog):
    # On the CPU only interpret mode lowers: the side compile fails, the
    # caller gets None (and computes the reference), once per signature.
    q = k = v = jnp.zeros((1, 1, 8, 8), jnp.float32)
    with caplog.at_level("WARNING", logger="torchtpu.pallas"):
        assert pallas_attention.attention(q, k, v, None, False, 0.5, lax.Precision.HIGHEST, "tpu") is None
    assert "does not compile" in caplog.text
    assert pallas_attention.mode("cpu") is None  # the CPU uses the reference unless asked


def test_pallas_kernel_serves_sdpa_in_interpret_mode(tmp_path):
    # TORCHTPU_PALLAS=interpret runs the kernel on any platform: eager
    # SDPA and its gradients through it match the CPU.
    script = textwrap.dedent(
        """
        import torch, torch.nn.functional as F, torchtpu
        from torchtpu.pallas import attention as pallas_attention
        calls = []
        kernel = pallas_attention.flash_attention_forward
        pallas_attention.flash_attention_forward = lambda *a, **k: calls.append(1) or kernel(*a, **k)
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(2, 4, 16, 8, generator=g, requires_grad=True) for _ in range(3))
        bias = torch.randn(16, 16, generator=g, requires_grad=True)
        ref = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        ref.sum().backward()
        tq, tk, tv, tb = (t.detach().to("tpu").requires_grad_() for t in (q, k, v, bias))
        out = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=tb)
        out.sum().backward()
        err = max((a.cpu() - b).abs().max().item() for a, b in [(out, ref), (tq.grad, q.grad), (tk.grad, k.grad),
                                                                (tv.grad, v.grad), (tb.grad, bias.grad)])
        print("RESULT", len(calls), err)
        """
    )
    env = dict(os.environ, TORCHTPU_PALLAS="interpret", TORCHTPU_COMPILE_CACHE_DIR=str(tmp_path / "cache"))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT")]
    assert line, out.stderr[-3000:]
    calls, err = line[0].split()[1:]
    assert int(calls) >= 1
    assert float(err) < 1e-4


def test_gpt_trains_through_fused_attention():
    torch.manual_seed(0)
    model = GPT(vocab=32, d_model=16, n_heads=2, n_layers=1, max_len=16)
    tpu_model = copy.deepcopy(model).to(TPU)
    idx = torch.randint(0, 32, (2, 16))
    for m, x in ((model, idx), (tpu_model, idx.to(TPU))):
        F.cross_entropy(m(x).reshape(-1, 32), x.reshape(-1)).backward()
    for p, q in zip(tpu_model.parameters(), model.parameters()):
        assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-5)
