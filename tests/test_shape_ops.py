"""Shape ops that make new data (cat, flip, roll, tril, pads, repeat, view
scatters, ...) against the CPU."""

import pytest
import torch
import torch.nn.functional as F
from utils import TPU, check


def _x(*shape, dtype=torch.float32):
    if dtype == torch.bool:
        return torch.rand(*shape) > 0.5
    if dtype == torch.int64:
        return torch.randint(-50, 50, shape)
    return torch.randn(*shape).to(dtype)


DTYPES = [torch.float32, torch.bfloat16, torch.int64, torch.bool]


# ------------------------------------------------------------------ cat


@pytest.mark.parametrize("dtype", DTYPES)
def test_cat_dtypes(dtype):
    a, b = _x(2, 3, dtype=dtype), _x(4, 3, dtype=dtype)
    check(lambda a, b: torch.cat([a, b]), a, b)
    check(lambda a, b: torch.cat([a.t(), b.t(), a.t()], dim=-1), a, b)  # non-contiguous


def test_cat_empty_promotion_out():
    a, b = torch.randn(2, 3), torch.randint(0, 5, (1, 3))
    check(lambda a, b: torch.cat([a, b]), a, b)  # float + int -> float
    check(lambda a, b: torch.cat([a.bfloat16(), b]), a, b)
    check(lambda a: torch.cat([a, torch.zeros(0, device=a.device), a], 1), a)  # legacy 1-D empty
    check(lambda a: torch.cat([a[:0], a]), a)
    check(lambda a: torch.cat([torch.zeros(0, device=a.device)]), a)
    out = torch.empty(0, device=TPU)
    torch.cat([a.to(TPU), a.to(TPU)], out=out)
    torch.testing.assert_close(out.cpu(), torch.cat([a, a]))


def test_cat_stack_grad():
    a = torch.randn(2, 3, requires_grad=True)
    b = torch.randn(2, 3, requires_grad=True)
    check(lambda a, b: torch.cat([a, b * 2], 1), a, b, grad=True)
    check(lambda a, b: torch.stack([a, b], 1), a, b, grad=True)
    check(lambda a, b: torch.stack([a.int(), b.int()], -1), a, b)


# ------------------------------------------------------ flip/roll/tril


@pytest.mark.parametrize("dtype", DTYPES)
def test_flip_roll_tril_dtypes(dtype):
    x = _x(3, 4, 5, dtype=dtype)
    check(lambda a: a.flip(0, -1), x)
    check(lambda a: a.roll(2, 1), x)
    check(lambda a: a.triu(1), x)


def test_flip_roll_variants_grad():
    x = torch.randn(4, 5, requires_grad=True)
    check(lambda a: a.t().flip(1) * 2, x, grad=True)
    check(lambda a: torch.rot90(a, 1, (0, 1)), x, grad=True)
    check(lambda a: a.roll((1, -7), (0, 1)), x, grad=True)
    check(lambda a: a.roll(3), x, grad=True)  # flattened
    check(lambda a: a.flip([]), x)


def test_tril_triu_grad_batched():
    x = torch.randn(2, 4, 3, requires_grad=True)
    check(lambda a: a.tril(-1), x, grad=True)
    check(lambda a: a.triu(2), x, grad=True)
    check(lambda a: a.transpose(1, 2).tril(), x, grad=True)
    y = torch.randn(3, 3)
    check(lambda a: a.clone().tril_(), y)
    check(lambda a: torch.triu(a, out=torch.empty_like(a)), y)


# ------------------------------------------------------------- padding


def test_constant_pad():
    x = torch.randn(2, 3, 4, requires_grad=True)
    check(lambda a: F.pad(a, (1, 2)), x, grad=True)
    check(lambda a: F.pad(a, (0, -1, 2, 1), value=-3.0), x, grad=True)  # crop + pad
    check(lambda a: F.pad(a, (1, 1, 1, 1, 1, 1)), x.detach().to(torch.int64))
    check(lambda a: F.pad(a, (1, 0), value=1.5), x.detach().bfloat16())


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
def test_reflect_replicate_pad_grad(mode):
    check(lambda a: F.pad(a, (2, 1), mode=mode), torch.randn(2, 3, 5, requires_grad=True), grad=True)
    check(lambda a: F.pad(a, (1, 2, 2, 0), mode=mode), torch.randn(1, 2, 4, 5, requires_grad=True), grad=True)
    check(lambda a: F.pad(a, (1, 1, 1, 0, 0, 2), mode=mode), torch.randn(1, 1, 3, 4, 3, requires_grad=True), grad=True)


def test_reflect_pad_too_large():
    with pytest.raises(RuntimeError, match="Padding size should be less than"):
        F.pad(torch.randn(1, 2, 3).to(TPU), (3, 0), mode="reflect")


def test_circular_pad():
    check(lambda a: F.pad(a, (1, 2), mode="circular"), torch.randn(1, 2, 4, requires_grad=True), grad=True)


# --------------------------------------------------------------- repeat


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_repeat(dtype):
    x = _x(2, 3, dtype=dtype)
    check(lambda a: a.repeat(2, 1), x)
    check(lambda a: a.t().repeat(1, 2, 3), x)


def test_repeat_grad_and_interleave():
    x = torch.randn(2, 3, requires_grad=True)
    check(lambda a: a.repeat(3, 1, 2), x, grad=True)
    check(lambda a: a.repeat_interleave(2, dim=1), x, grad=True)
    check(lambda a: torch.tile(a, (2,)), x, grad=True)


# ------------------------------------------- diagonals and view scatters


def test_diag_embed_diagonal_grad():
    x = torch.randn(2, 3, requires_grad=True)
    check(lambda a: torch.diag_embed(a), x, grad=True)
    check(lambda a: torch.diag_embed(a, offset=-1, dim1=0, dim2=2), x, grad=True)
    check(lambda a: torch.diag(a[0], 1), x, grad=True)
    y = torch.randn(3, 4, 5, requires_grad=True)
    check(lambda a: torch.diagonal(a, 1, 0, 2) * 2, y, grad=True)
    check(lambda a: torch.diagonal(a, -2, -1, 1), y, grad=True)


def test_view_scatters():
    x = torch.randn(4, 5)
    check(lambda a, s: torch.diagonal_scatter(a, s, 1), x, torch.randn(4))
    check(lambda a, s: torch.select_scatter(a, s, 1, -2), x, torch.randn(4))
    check(lambda a, s: torch.slice_scatter(a, s, 1, 1, None, 2), x, torch.randn(4, 2))
    check(lambda a, s: torch.slice_scatter(a, s, 0, -3, -1), x, torch.randn(2, 5))
    check(lambda a, s: torch.as_strided_scatter(a, s, (2, 2), (5, 2), 1), x, torch.randn(2, 2))
    check(lambda a, s: torch.as_strided_scatter(a.t(), s, (3,), (4,), 2), x, torch.randn(3))
    check(lambda a, s: torch.select_scatter(a, s, 0, 0), _x(2, 3, dtype=torch.int64), _x(3, dtype=torch.int64))


def test_view_backwards():
    """select/slice/as_strided/unfold backward build their gradient with the
    view-scatter ops (or unfold_backward)."""
    x = torch.randn(4, 6, requires_grad=True)
    check(lambda a: a[1] * 2, x, grad=True)
    check(lambda a: a[:, 1:5:2] * 2, x, grad=True)
    check(lambda a: a.unfold(1, 3, 2) * 2, x, grad=True)
    check(lambda a: a.unfold(0, 2, 1), x, grad=True)  # overlapping windows
    check(lambda a: a.as_strided((2, 3), (1, 2), 1) * 2, x, grad=True)


def test_split_chunk_copies():
    x = torch.randn(5, 4, requires_grad=True)
    check(lambda a: torch.split_copy(a, 2), x)
    check(lambda a: torch.split_with_sizes_copy(a, [1, 4]), x)
    check(lambda a: [t * 2 for t in torch.split(a, [3, 2])], x, grad=True)
    check(lambda a: a.narrow_copy(1, 1, 2), x)
    check(lambda a: torch.block_diag(a, a[:2]), x)


def test_unfold_backward_broadcasts_its_gradient():
    """istft's decomposition passes a gradient with a batch of 1."""
    g = torch.randn(1, 17, 64)
    want = torch.ops.aten.unfold_backward(g, [2, 320], 1, 64, 16)
    got = torch.ops.aten.unfold_backward(g.to("tpu"), [2, 320], 1, 64, 16)
    torch.testing.assert_close(got.cpu(), want)
