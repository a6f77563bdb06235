"""torch.nn modules on tpu against the same modules on the CPU: outputs,
input gradients and parameter gradients (and buffers such as BatchNorm's
running statistics).

Modules are built on the CPU with a fixed seed, deep-copied and moved with
`.to("tpu")`.  Their forward/backward also run ops of other families
(views, elementwise math, sums, softmax); no op may fall back to the CPU
unless a test says so."""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from utils import TPU, assert_close

import torchtpu


def randn(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def run_module(module, *inputs, train=True, steps=1, allow_fallback=False, grad_inputs=True, **tol):
    """Run `module` (and a tpu copy) on inputs; compare outputs, input grads,
    parameter grads and buffers after `steps` forward/backward passes."""
    cpu = module
    cpu.zero_grad(set_to_none=True)
    tpu = copy.deepcopy(module).to(TPU)
    cpu.train(train)
    tpu.train(train)
    before = torchtpu.fallback_counts()
    for step in range(steps):
        c_in = [x.detach().clone().requires_grad_(grad_inputs and x.is_floating_point()) for x in inputs]
        t_in = [x.detach().to(TPU).requires_grad_(grad_inputs and x.is_floating_point()) for x in inputs]
        c_out = cpu(*c_in)
        t_out = tpu(*t_in)
        assert_close(t_out, c_out, **tol)
        g = torch.Generator().manual_seed(100 + step)
        weights = torch.randn(c_out.shape, generator=g).to(c_out.dtype)
        if c_out.requires_grad:
            c_out.backward(weights)
            t_out.backward(weights.to(TPU))
            for c, t in zip(c_in, t_in):
                if c.requires_grad:
                    assert_close(t.grad, c.grad, **tol)
    for (name, cp), (_, tp) in zip(cpu.named_parameters(), tpu.named_parameters()):
        if cp.grad is not None:
            assert tp.grad is not None, name
            assert_close(tp.grad, cp.grad, **tol)
    for (name, cb), (_, tb) in zip(cpu.named_buffers(), tpu.named_buffers()):
        assert_close(tb, cb, **tol)
    if not allow_fallback:
        after = torchtpu.fallback_counts()
        new = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
        assert not new, f"ops fell back to the CPU: {new}"
    return tpu


# ------------------------------------------------------------------- Linear


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(5, 8), (2, 3, 8)])
def test_linear(shape, dtype):
    torch.manual_seed(0)
    m = nn.Linear(8, 6).to(dtype)
    run_module(m, randn(*shape, dtype=dtype))


def test_linear_no_bias_stack():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16, bias=False), nn.Linear(16, 4))
    run_module(m, randn(7, 8))


# --------------------------------------------------------------------- Conv

CONV_MODULES = [
    lambda: nn.Conv1d(4, 6, 3, stride=2, padding=1),
    lambda: nn.Conv1d(4, 8, 3, dilation=2, groups=4, bias=False),
    lambda: nn.Conv2d(3, 6, 3, stride=2, padding=1),
    lambda: nn.Conv2d(4, 6, (3, 2), stride=(1, 2), dilation=(2, 1), groups=2),
    lambda: nn.Conv2d(3, 4, 3, padding="same", padding_mode="zeros"),
    lambda: nn.Conv3d(2, 4, 3, stride=(1, 2, 1), padding=1),
    lambda: nn.ConvTranspose1d(4, 3, 3, stride=2, padding=1, output_padding=1),
    lambda: nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2, dilation=2),
    lambda: nn.ConvTranspose3d(2, 3, 2, stride=2),
]
CONV_INPUTS = [
    (2, 4, 11),
    (2, 4, 9),
    (2, 3, 8, 8),
    (1, 4, 9, 8),
    (2, 3, 6, 7),
    (1, 2, 5, 6, 5),
    (2, 4, 6),
    (2, 4, 5, 5),
    (1, 2, 3, 4, 3),
]


@pytest.mark.parametrize("case", range(len(CONV_MODULES)))
def test_conv_modules(case):
    torch.manual_seed(case)
    run_module(CONV_MODULES[case](), randn(*CONV_INPUTS[case]))


def test_conv2d_bf16():
    torch.manual_seed(0)
    m = nn.Conv2d(3, 4, 3, padding=1).to(torch.bfloat16)
    # CPU's bf16 conv backward rounds partial sums; allow a few bf16 ulps
    run_module(m, randn(2, 3, 6, 6, dtype=torch.bfloat16), atol=0.1, rtol=2e-2)


# --------------------------------------------------------------- BatchNorm


def test_batchnorm2d_train_and_eval():
    torch.manual_seed(0)
    m = nn.BatchNorm2d(3, momentum=0.2)
    with torch.no_grad():
        m.weight.normal_()
        m.bias.normal_()
    x = randn(4, 3, 5, 5) * 2 + 1
    # several training steps: running stats accumulate
    tpu = run_module(m, x, train=True, steps=2)
    assert tpu.num_batches_tracked.item() == 2
    run_module(m, x, train=False)


def test_batchnorm_1d_3d_no_affine_no_stats():
    torch.manual_seed(0)
    run_module(nn.BatchNorm1d(4, affine=False), randn(6, 4, 3))
    run_module(nn.BatchNorm1d(4, track_running_stats=False), randn(6, 4))
    run_module(nn.BatchNorm3d(2), randn(2, 2, 3, 4, 3))
    # momentum=None: cumulative moving average (factor 1/num_batches_tracked)
    run_module(nn.BatchNorm2d(3, momentum=None), randn(2, 3, 4, 4), steps=2)


@pytest.mark.parametrize("train", [True, False])
def test_batchnorm_of_an_input_that_needs_no_gradient(train):
    # BatchNorm on raw data, or after a frozen layer: its backward is asked
    # for the weight and bias gradients only, and ATen returns no input
    # gradient (the meta kernel has one; the backward once failed on it).
    torch.manual_seed(0)
    run_module(nn.BatchNorm1d(4), randn(6, 4), train=train, grad_inputs=False)
    run_module(nn.BatchNorm2d(3), randn(2, 3, 4, 4), train=train, grad_inputs=False)
    run_module(nn.InstanceNorm2d(3, affine=True), randn(2, 3, 4, 4), train=train, grad_inputs=False)
    frozen = nn.Sequential(nn.Linear(5, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
    frozen[0].requires_grad_(False)
    run_module(frozen, randn(6, 5), train=train)
    x, w = randn(6, 4).to(TPU), randn(4).to(TPU)
    grads = torch.ops.aten.native_batch_norm_backward(torch.ones_like(x), x, w, None, None, x.mean(0), x.var(0),
                                                      True, 1e-5, [False, True, True])
    assert grads[0] is None and grads[1].shape == grads[2].shape == (4,)


def test_batchnorm2d_bf16_eval():
    torch.manual_seed(0)
    m = nn.BatchNorm2d(3)
    m.running_mean.normal_()
    m.running_var.uniform_(0.5, 2)
    m = m.to(torch.bfloat16)
    run_module(m, randn(2, 3, 4, 4, dtype=torch.bfloat16), train=False)


# ----------------------------------------------------- LayerNorm / GroupNorm


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_layernorm(dtype):
    torch.manual_seed(0)
    m = nn.LayerNorm((4, 6)).to(dtype)
    with torch.no_grad():
        m.weight.normal_()
        m.bias.normal_()
    tol = dict(atol=2e-2, rtol=2e-2) if dtype == torch.bfloat16 else {}
    run_module(m, randn(3, 4, 6, dtype=dtype), **tol)
    run_module(nn.LayerNorm(6, elementwise_affine=False).to(dtype), randn(5, 6, dtype=dtype), **tol)


def test_groupnorm():
    torch.manual_seed(0)
    m = nn.GroupNorm(3, 6)
    with torch.no_grad():
        m.weight.normal_()
        m.bias.normal_()
    run_module(m, randn(2, 6, 4, 3))
    run_module(nn.GroupNorm(2, 4, affine=False), randn(3, 4, 5))


# ------------------------------------------------------------------ Pooling


def test_pool_modules():
    x = randn(2, 3, 9, 10)
    run_module(nn.MaxPool2d(3, stride=2, padding=1), x)
    run_module(nn.MaxPool2d(2, ceil_mode=True), x)
    run_module(nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False), x)
    run_module(nn.AvgPool2d(2, ceil_mode=True), x)
    run_module(nn.AdaptiveAvgPool2d((3, 4)), x)
    run_module(nn.AdaptiveAvgPool2d(1), x)
    run_module(nn.AdaptiveMaxPool2d((2, 3)), x)


# ---------------------------------------------------------------- Embedding


def test_embedding_module():
    torch.manual_seed(0)
    idx = torch.tensor([[0, 3, 3, 9], [1, 0, 5, 3]])
    run_module(nn.Embedding(10, 5), idx)
    run_module(nn.Embedding(10, 5, padding_idx=3), idx)
    run_module(nn.Embedding(10, 5, scale_grad_by_freq=True), idx)


def test_embedding_bag_module():
    torch.manual_seed(0)
    idx = torch.tensor([0, 3, 3, 9, 1, 0, 5, 3])
    offsets = torch.tensor([0, 3, 5])
    for mode in ("sum", "mean", "max"):
        m = nn.EmbeddingBag(10, 4, mode=mode)
        run_module(m, idx, offsets, grad_inputs=False)


# ------------------------------------------------------------- Recurrent


@pytest.mark.parametrize(
    "make",
    [
        lambda: nn.LSTM(4, 5, num_layers=2),
        lambda: nn.LSTM(4, 5, bias=False, batch_first=True, bidirectional=True),
        lambda: nn.GRU(4, 5, num_layers=2),
        lambda: nn.GRU(4, 5, bias=False, batch_first=True, bidirectional=True),
        lambda: nn.RNN(4, 5, nonlinearity="relu"),
    ],
)
def test_rnn_modules(make):
    torch.manual_seed(0)

    class OutputOnly(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = make()

        def forward(self, x):
            return self.rnn(x)[0]

    run_module(OutputOnly(), randn(3, 2, 4))


def test_rnn_cells():
    torch.manual_seed(0)

    class Cells(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTMCell(4, 5)
            self.gru = nn.GRUCell(5, 3)

        def forward(self, x):
            h, c = self.lstm(x)
            h, c = self.lstm(x, (h, c))
            return self.gru(h + c)

    run_module(Cells(), randn(2, 4))


# ------------------------------------------------------------------- Losses


class _Loss(nn.Module):
    def __init__(self, loss, target):
        super().__init__()
        self.loss = loss
        self.register_buffer("target", target)

    def forward(self, x):
        return self.loss(x, self.target)


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(ignore_index=2),
        dict(label_smoothing=0.1),
        dict(reduction="sum", ignore_index=0, label_smoothing=0.2),
    ],
)
def test_cross_entropy(kw):
    torch.manual_seed(0)
    target = torch.tensor([1, 2, 0, 4, 2, 3])
    weight = torch.rand(5) + 0.5
    # log_softmax + nll_loss; label smoothing adds sum/neg/mul
    run_module(_Loss(nn.CrossEntropyLoss(**kw), target), randn(6, 5))
    run_module(_Loss(nn.CrossEntropyLoss(weight=weight, **kw), target), randn(6, 5))


def test_cross_entropy_spatial():
    target = torch.tensor([[[0, 1], [2, 2]], [[1, 1], [0, 2]]])
    run_module(_Loss(nn.CrossEntropyLoss(ignore_index=1), target), randn(2, 3, 2, 2))


def test_cross_entropy_probability_targets():
    target = torch.softmax(randn(4, 5, seed=1), dim=1)
    run_module(_Loss(nn.CrossEntropyLoss(label_smoothing=0.1), target), randn(4, 5))


def test_other_loss_modules():
    x = randn(4, 5)
    y = randn(4, 5, seed=1)
    run_module(_Loss(nn.MSELoss(), y), x)
    run_module(_Loss(nn.SmoothL1Loss(beta=0.5), y), x)
    run_module(_Loss(nn.HuberLoss(delta=0.7, reduction="sum"), y), x)
    run_module(_Loss(nn.BCELoss(), torch.rand(4, 5)), torch.rand(4, 5) * 0.9 + 0.05)
    run_module(_Loss(nn.L1Loss(), y), x)
    run_module(_Loss(nn.BCEWithLogitsLoss(pos_weight=torch.rand(5) + 0.5), torch.rand(4, 5)), x)


# -------------------------------------------------------- attention (math)


@pytest.mark.parametrize("mode", ["plain", "causal", "mask"])
def test_scaled_dot_product_attention(mode):
    q, k, v = randn(2, 3, 5, 8), randn(2, 3, 7, 8, seed=1), randn(2, 3, 7, 8, seed=2)
    if mode == "causal":
        k, v = k[:, :, :5], v[:, :, :5]
    mask = torch.rand(5, 7, generator=torch.Generator().manual_seed(3)) > 0.3
    mask[:, 0] = True

    class Attn(nn.Module):
        def forward(self, q, k, v):
            if mode == "mask":
                return F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask)
            return F.scaled_dot_product_attention(q, k, v, is_causal=mode == "causal")

    m = Attn()
    m.register_buffer("mask", mask)
    # math path: bmm (here) + softmax/where/tril/mul (reductions, elementwise, creation)
    run_module(m, q, k, v)


def test_transformer_encoder_layer():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    run_module(layer, randn(2, 5, 16))


# ------------------------------------------------------------------ a model


def test_small_cnn_training_step():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 8, 3, padding=1, groups=2),
        nn.GroupNorm(2, 8),
        nn.AdaptiveAvgPool2d(2),
        nn.Flatten(),
        nn.Linear(32, 10),
        nn.LayerNorm(10),
    )
    run_module(model, randn(4, 3, 8, 8))


@pytest.mark.parametrize("norm_first, activation", [(False, "relu"), (True, "gelu")])
def test_transformer_inference_fast_path_runs_on_tpu(norm_first, activation):
    """Eval + no_grad takes PyTorch's fused path (_transformer_encoder_layer_fwd,
    _native_multi_head_attention): lowered, not run on the CPU."""
    import torchtpu

    torch.manual_seed(0)

    def make():
        layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, norm_first=norm_first, activation=activation)
        return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()

    enc, enc_tpu = make(), make()
    enc_tpu.load_state_dict(enc.state_dict())
    enc_tpu.to("tpu")
    x = torch.randn(3, 9, 32)
    pad = torch.zeros(3, 9, dtype=torch.bool)
    pad[1, 6:] = True
    causal = nn.Transformer.generate_square_subsequent_mask(9).bool()
    before = sum(torchtpu.fallback_counts().values())
    with torch.no_grad():
        for kwargs in ({}, {"src_key_padding_mask": pad}, {"mask": causal}):
            got = enc_tpu(x.to("tpu"), **{k: v.to("tpu") for k, v in kwargs.items()})
            torch.testing.assert_close(got.cpu(), enc(x, **kwargs), rtol=1e-4, atol=1e-5)
        mha = enc.layers[0].self_attn
        mha_tpu = enc_tpu.layers[0].self_attn
        for need, average in ((False, True), (True, True), (True, False)):
            want = mha(x, x, x, key_padding_mask=pad, need_weights=need, average_attn_weights=average)
            got = mha_tpu(*(x.to("tpu"),) * 3, key_padding_mask=pad.to("tpu"), need_weights=need,
                          average_attn_weights=average)
            torch.testing.assert_close(got[0].cpu(), want[0], rtol=1e-4, atol=1e-5)
            assert (got[1] is None) == (want[1] is None)
            if need:
                torch.testing.assert_close(got[1].cpu(), want[1], rtol=1e-4, atol=1e-6)
    assert sum(torchtpu.fallback_counts().values()) == before


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_fast_path_follows_tpu_autocast(norm_first):
    """PyTorch disables the fused encoder layer under CUDA autocast only: under
    tpu autocast it must still compute as the slow path does (bf16 matmuls),
    not as one fp32 kernel."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True, norm_first=norm_first).to("tpu")
    x = torch.randn(3, 9, 32, device="tpu")
    pad = torch.zeros(3, 9, dtype=torch.bool, device="tpu")
    pad[1, 6:] = True
    with torch.no_grad():
        full = layer.eval()(x, src_key_padding_mask=pad)
        with torch.autocast("tpu", dtype=torch.bfloat16):
            fast = layer.eval()(x, src_key_padding_mask=pad)
            slow = layer.train()(x, src_key_padding_mask=pad)  # training: PyTorch's slow path
    assert fast.dtype == slow.dtype
    keep = ~pad[..., None].expand_as(fast)
    torch.testing.assert_close(fast[keep].float().cpu(), slow[keep].float().cpu(), rtol=3e-2, atol=3e-2)
    assert (fast.float() - full).abs().max() > 1e-4  # bf16 products, not fp32 ones

