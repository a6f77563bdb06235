"""Nested tensors on tpu (torchtpu/ops/nested.py): nn.TransformerEncoder's
inference fast path packs a padded batch into one, as on CUDA."""

import pytest
import torch
from torch import nn

import torchtpu

TOL = dict(rtol=1e-4, atol=2e-5)


def _pair(make):
    """The same freshly initialised module on the CPU and on tpu, in eval."""
    torch.manual_seed(0)
    cpu = make().eval()
    tpu = make().eval()
    tpu.load_state_dict(cpu.state_dict())
    return cpu, tpu.to("tpu")


def _padding(lengths, rows):
    return torch.arange(rows)[None] >= torch.tensor(lengths)[:, None]


@pytest.mark.parametrize("activation, final_norm", [("relu", False), ("gelu", True)])
def test_encoder_with_padding_mask_matches_cpu(activation, final_norm):
    def make():  # (norm_first=True layers turn the nested path off)
        layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, activation=activation)
        return nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(32) if final_norm else None)

    cpu, tpu = _pair(make)
    x = torch.randn(4, 9, 32)
    pad = _padding([9, 4, 0, 6], 9)
    before = sum(torchtpu.fallback_counts().values())
    with torch.no_grad():
        want = cpu(x, src_key_padding_mask=pad)
        got = tpu(x.to("tpu"), src_key_padding_mask=pad.to("tpu"))
    # The nested path gives exact zeros (or the final norm of zeros) past
    # each length, the padded path does not: equal values say which ran.
    torch.testing.assert_close(got.cpu(), want, **TOL)
    assert sum(torchtpu.fallback_counts().values()) == before


def test_nn_transformer_with_source_padding_matches_cpu():
    cpu, tpu = _pair(lambda: nn.Transformer(32, 4, 2, 2, 64, batch_first=True))
    src, tgt = torch.randn(3, 7, 32), torch.randn(3, 5, 32)
    pad = _padding([7, 3, 5], 7)
    with torch.no_grad():
        want = cpu(src, tgt, src_key_padding_mask=pad, memory_key_padding_mask=pad)
        got = tpu(src.to("tpu"), tgt.to("tpu"), src_key_padding_mask=pad.to("tpu"),
                  memory_key_padding_mask=pad.to("tpu"))
    torch.testing.assert_close(got.cpu(), want, **TOL)


def test_encoder_with_a_gap_in_the_mask_takes_the_padded_path_as_on_cpu():
    cpu, tpu = _pair(lambda: nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, batch_first=True), 1))
    x = torch.randn(2, 6, 16)
    pad = _padding([6, 4], 6)
    pad[0, 2] = True  # not left-aligned: the encoder's mask check sends it the padded way
    with torch.no_grad():
        torch.testing.assert_close(tpu(x.to("tpu"), src_key_padding_mask=pad.to("tpu")).cpu(),
                                   cpu(x, src_key_padding_mask=pad), **TOL)


def test_padding_that_holds_nan_does_not_reach_the_tokens():
    cpu, tpu = _pair(lambda: nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, batch_first=True), 2))
    x = torch.randn(2, 6, 16)
    pad = _padding([6, 3], 6)
    x[1, 3:] = float("nan")
    with torch.no_grad():
        want = cpu(x, src_key_padding_mask=pad)
        got = tpu(x.to("tpu"), src_key_padding_mask=pad.to("tpu")).cpu()
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, want, **TOL)


def test_new_lengths_need_no_new_kernels():
    """The nested batch keeps its padded layout: a batch with other lengths
    runs the kernels of the first."""
    _, tpu = _pair(lambda: nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, batch_first=True), 2))
    x = torch.randn(3, 8, 16, device="tpu")
    with torch.no_grad():
        tpu(x, src_key_padding_mask=_padding([8, 5, 2], 8).to("tpu"))
        compiles = torchtpu.kernel_cache_stats()["compiles"]
        for lengths in ([3, 8, 1], [7, 7, 6], [8, 8, 8]):
            tpu(x, src_key_padding_mask=_padding(lengths, 8).to("tpu"))
    assert torchtpu.kernel_cache_stats()["compiles"] == compiles


def test_nested_tensor_from_mask_and_back():
    x = torch.randn(3, 5, 4)
    keep = ~_padding([5, 2, 0], 5)
    want = torch._nested_tensor_from_mask(x, keep)
    got = torch._nested_tensor_from_mask(x.to("tpu"), keep.to("tpu"))
    assert got.is_nested and got.device.type == "tpu"
    for g, w in zip(got.unbind(), want.unbind()):
        torch.testing.assert_close(g.cpu(), w)
    for padding, size in ((0.0, None), (-1.5, (3, 7, 6))):
        torch.testing.assert_close(got.to_padded_tensor(padding, size).cpu(), want.to_padded_tensor(padding, size))
    assert torch._nested_tensor_from_mask_left_aligned(x.to("tpu"), keep.to("tpu"))
    keep[1, 4] = True
    assert not torch._nested_tensor_from_mask_left_aligned(x.to("tpu"), keep.to("tpu"))
    with pytest.raises(RuntimeError, match="Mask must be left-aligned without gaps"):
        torch._nested_tensor_from_mask(x.to("tpu"), keep.to("tpu"))
    # Without the check ATen takes each row's first sum(mask) tokens.
    torch.testing.assert_close(
        torch._nested_tensor_from_mask(x.to("tpu"), keep.to("tpu"), mask_check=False).to_padded_tensor(0.0).cpu(),
        torch._nested_tensor_from_mask(x, keep, mask_check=False).to_padded_tensor(0.0))
    with pytest.raises(RuntimeError, match="Truncation is not supported"):
        got.to_padded_tensor(0.0, (3, 4, 4))
    with pytest.raises(RuntimeError, match="Expected mask to be of ScalarType Bool"):
        torch._nested_tensor_from_mask(x.to("tpu"), keep.float().to("tpu"))


def test_nested_tensor_of_tpu_tensors_pads_and_runs_an_encoder_layer():
    parts = [torch.randn(3, 16), torch.randn(5, 16), torch.randn(1, 16)]
    want = torch.nested.nested_tensor(parts)
    got = torch.nested.nested_tensor([p.to("tpu") for p in parts])
    torch.testing.assert_close(got.to_padded_tensor(2.0).cpu(), want.to_padded_tensor(2.0))
    cpu, tpu = _pair(lambda: nn.TransformerEncoderLayer(16, 2, 32, batch_first=True))
    with torch.no_grad():
        want_out, got_out = cpu(want), tpu(got)
    assert got_out.is_nested
    for g, w in zip(got_out.unbind(), want_out.unbind()):
        torch.testing.assert_close(g.cpu(), w, **TOL)
