"""Views at moving storage offsets (X[i] in a loop) share one kernel: read
and written at a traced row (torchtpu/ops/row_offsets.py), in eager mode and
in compiled graphs, with the CPU's results."""

import pytest
import torch

import torchtpu
from torchtpu.ops import dispatch


def _compiles():
    return dispatch.stats["compiles"]


def test_eager_loop_over_rows_compiles_its_kernels_once():
    torch.manual_seed(0)
    x = torch.randn(12, 8, 16)
    xt = x.to("tpu")

    def step(a):
        return (a * 2 + a.sum(0)).softmax(-1)

    for i in range(2):  # row 0 (offset 0: the static plan) and the first traced row
        step(xt[i])
    before = _compiles()
    for i in range(12):
        torch.testing.assert_close(step(xt[i]).cpu(), step(x[i]))
    assert _compiles() == before


def test_eager_loop_over_an_inner_dim_compiles_its_kernels_once():
    # x[:, t] of a batch-first sequence: the index is traced in dim 1
    torch.manual_seed(6)
    x, w = torch.randn(4, 9, 8), torch.randn(8, 8)
    out = torch.zeros(4, 9, 8)
    xt, wt, out_t = x.to("tpu"), w.to("tpu"), out.to("tpu")
    for t in range(2):
        out_t[:, t] = torch.tanh(xt[:, t] @ wt)
    before = _compiles()
    for t in range(9):
        out[:, t] = torch.tanh(x[:, t] @ w)
        out_t[:, t] = torch.tanh(xt[:, t] @ wt)
    assert _compiles() == before
    torch.testing.assert_close(out_t.cpu(), out)


def test_eager_token_loop_over_the_minor_dim_compiles_its_kernels_once():
    # Meta's Llama generation loop: read tokens[:, prev:cur], write
    # tokens[:, cur] of a (batch, max_len) buffer -- the index is traced in
    # the buffer's minor dim
    torch.manual_seed(7)
    emb = torch.randn(20, 6)
    tokens = torch.zeros(3, 16, dtype=torch.long)
    tokens[:, 0] = torch.tensor([4, 9, 2])
    emb_t, tokens_t = emb.to("tpu"), tokens.to("tpu")

    def step(tok, table, prev, cur):
        tok[:, cur] = (table[tok[:, prev:cur]].sum((1, 2)) * 7).long().remainder(20)

    for cur in range(1, 4):
        step(tokens_t, emb_t, cur - 1, cur)
    before = _compiles()
    for cur in range(1, 16):
        step(tokens, emb, cur - 1, cur)
        if cur >= 4:
            step(tokens_t, emb_t, cur - 1, cur)
    assert _compiles() == before
    assert torch.equal(tokens_t.cpu(), tokens)


def test_eager_writes_through_rows_match_cpu():
    torch.manual_seed(1)
    x = torch.randn(10, 4, 6)
    y = torch.zeros(10, 4, 6)
    xt, yt = x.to("tpu"), y.to("tpu")
    flat, flat_t = torch.arange(60.0), torch.arange(60.0).to("tpu")
    idx = torch.tensor([3, 0])
    for i in range(1, 9):
        for a, b, f in ((x, y, flat), (xt, yt, flat_t)):
            b[i].add_(a[i])
            b[i : i + 2].mul_(1.5)
            b[i, 1:3].copy_(a[i + 1, :2])
            b[i][:, idx] = a[i][:, :2]
            b[i].t()[2].sub_(1)
            f[i * 5 + 1 : i * 5 + 4] += i  # 1-D storage: every offset past 0 is a row
        torch.testing.assert_close(yt.cpu(), y)
        torch.testing.assert_close(flat_t.cpu(), flat)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.complex64])
def test_views_across_rows_read_like_cpu(dtype):
    torch.manual_seed(2)
    x = (torch.randn(9, 5, 4) * 4).to(dtype)
    xt = x.to("tpu")
    views = [
        lambda a, s: a.view(-1)[s * 20 + 3 : s * 20 + 31],  # starts inside a row, spans two
        lambda a, s: a[s : s + 2, 1:4].transpose(0, 1),
        lambda a, s: a[s, :, ::2],
        lambda a, s: a[s : s + 3].permute(2, 0, 1),
        lambda a, s: a[s, 2].unsqueeze(0).expand(3, 4),
    ]
    for view in views:
        for s in range(1, 6):
            got = view(xt, s).clone()
            assert got.stride() == view(x, s).clone().stride()
            torch.testing.assert_close(got.cpu(), view(x, s).clone())


def test_dtype_views_of_rows_keep_their_offsets():
    x = torch.randn(6, 8)
    xt = x.to("tpu")
    for i in range(1, 6):
        torch.testing.assert_close((xt.view(torch.int32)[i] + 1).cpu(), x.view(torch.int32)[i] + 1)
        torch.testing.assert_close((xt.view(torch.bfloat16)[i] * 1).cpu(), x.view(torch.bfloat16)[i] * 1)


def test_outputs_at_an_inputs_offset_stay_exact():
    # as_strided_scatter keeps self's layout (its output sits at self's
    # offset); an out= of the wrong size is resized in place.  Neither may
    # share a kernel across rows.
    torch.manual_seed(3)
    x = torch.randn(6, 4, 3)
    xt = x.to("tpu")
    for i in range(1, 6):
        src = torch.randn(2, 2)
        want = torch.as_strided_scatter(x[i], src, (2, 2), (3, 1), x[i].storage_offset() + 1)
        got = torch.as_strided_scatter(xt[i], src.to("tpu"), (2, 2), (3, 1), xt[i].storage_offset() + 1)
        assert (got.storage_offset(), got.stride()) == (want.storage_offset(), want.stride())
        torch.testing.assert_close(got.cpu(), want)
    y, yt = torch.zeros(6, 4), torch.zeros(6, 4).to("tpu")
    for i in range(1, 6):
        torch.add(x[i, 0, :2], 1, out=y[i, :2])
        torch.add(xt[i, 0, :2], 1, out=yt[i, :2])
    torch.testing.assert_close(yt.cpu(), y)


def _mlp():
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def test_compiled_training_on_device_batches_compiles_a_bounded_number_of_graphs():
    torch.manual_seed(4)
    cpu_model = _mlp()
    model = _mlp().to("tpu")
    model.load_state_dict(cpu_model.state_dict())
    compiled = torch.compile(model, backend="tpu")
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (cpu_model, model)]
    x, y = torch.randn(10, 8, 16), torch.randn(10, 8, 4)
    xt, yt = x.to("tpu"), y.to("tpu")
    before = torchtpu.compile_stats()["compilations"]
    losses = {"cpu": [], "tpu": []}
    for epoch in range(2):
        for i in range(10):
            for name, m, opt, a, b in (("cpu", cpu_model, opts[0], x, y), ("tpu", compiled, opts[1], xt, yt)):
                loss = torch.nn.functional.mse_loss(m(a[i]), b[i])
                loss.backward()
                opt.step()
                opt.zero_grad()
                losses[name].append(loss.item())
    torch.testing.assert_close(torch.tensor(losses["tpu"]), torch.tensor(losses["cpu"]), rtol=1e-4, atol=1e-5)
    # forward and backward: batch 0 (offset 0), then all other batches at a
    # traced row -- once per offset before
    assert torchtpu.compile_stats()["compilations"] - before <= 4


def test_compiled_graph_keeps_version_counter_errors_for_row_inputs():
    model = _mlp().to("tpu")
    compiled = torch.compile(model, backend="tpu")
    x = torch.randn(6, 8, 16, device="tpu")
    for i in range(3):
        compiled(x[i]).sum().backward()  # rows 1 and 2 switch the input to a traced row
    for i in range(3, 5):
        out = compiled(x[i]).sum()
        x[i].mul_(2)  # the saved input changed before backward: as on the CPU
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            out.backward()


def test_compiled_graph_writes_into_row_inputs():
    def update(buf, v):
        buf.mul_(2).add_(v)
        return buf.sum()

    compiled = torch.compile(update, backend="tpu")
    torch.manual_seed(5)
    b, v = torch.randn(8, 3, 5), torch.randn(3, 5)
    bt, vt = b.to("tpu"), v.to("tpu")
    before = torchtpu.compile_stats()["compilations"]
    for i in range(8):
        want = update(b[i], v)
        got = compiled(bt[i], vt)
        torch.testing.assert_close(got.cpu(), want)
    torch.testing.assert_close(bt.cpu(), b)
    assert torchtpu.compile_stats()["compilations"] - before <= 3


def _random_view(rng, a):
    """A random view of `a` (4-D) starting at a random place: row slices,
    narrowing, steps, transposes, diagonals, unfold, expand, as_strided."""
    i = int(rng.integers(0, a.shape[0] - 2))
    kind = int(rng.integers(0, 11))
    if kind == 0:
        return a[i]
    if kind == 1:
        return a[i : i + 2, 1:, ::2]
    if kind == 2:
        return a[i, 1].t()
    if kind == 3:
        return a[i].diagonal(dim1=1, dim2=2)
    if kind == 4:
        return a[i, :, 0].unfold(-1, 2, 1)
    if kind == 5:
        return a[i, 2, :, :1].expand(-1, 3)
    if kind == 7:  # inner dims: a[:, t] (the dims before it crossed whole)
        return a[:, i % 4]
    if kind == 8:
        return a[1:, i % 4, 1:, ::2].transpose(0, 2)
    if kind == 9:
        return a[:, :, i % 5, 2:]
    if kind == 10:  # the minor dim: a[..., t], a[..., t:t+2]
        return a[..., i % 4 : i % 4 + 1 + i % 2].squeeze(-1)
    n = a[0].numel()
    return a.as_strided((3, 2), (2, 5), i * n + int(rng.integers(0, n)))


def _overlaps_itself(view):
    addresses = torch.arange(view.untyped_storage().nbytes() // view.element_size())
    addresses = addresses.as_strided(view.shape, view.stride(), view.storage_offset())
    return addresses.unique().numel() < view.numel()


def test_random_views_at_random_rows_match_cpu():
    # Reads and in-place writes through many geometries and rows; the C++
    # fast path serves the repeats, so its keys must agree with Python's.
    rng = __import__("numpy").random.default_rng(7)
    a = torch.randn(7, 4, 5, 5)
    at = a.to("tpu")
    ops = [
        lambda v: v * 2 + 1,
        lambda v: v.sum(-1),
        lambda v: torch.nn.functional.softmax(v, -1),
        lambda v: v.clone().add_(v.flip(-1)),
    ]
    for _ in range(100):
        state = rng.bit_generator.state
        view = _random_view(rng, a)
        rng.bit_generator.state = state
        view_t = _random_view(rng, at)
        assert (view_t.shape, view_t.stride(), view_t.storage_offset()) == (view.shape, view.stride(), view.storage_offset())
        op = ops[int(rng.integers(0, len(ops)))]
        torch.testing.assert_close(op(view_t).cpu(), op(view))
        if not _overlaps_itself(view):  # (an in-place op's order over shared elements is the CPU loop's)
            scale = float(rng.integers(1, 4))
            view.mul_(scale).add_(1)
            view_t.mul_(scale).add_(1)
    torch.testing.assert_close(at.cpu(), a)
