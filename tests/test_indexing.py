"""Indexing, scatter and data-dependent ops against the CPU."""

import pytest
import torch
import torchtpu
from torchtpu.ops.lowerings import data_dependent, indexing
from utils import TPU, check


def _x(*shape, dtype=torch.float32):
    if dtype == torch.bool:
        return torch.rand(*shape) > 0.5
    if dtype in (torch.int64, torch.int32):
        return torch.randint(-50, 50, shape, dtype=dtype)
    return torch.randn(*shape).to(dtype)


DTYPES = [torch.float32, torch.bfloat16, torch.int64, torch.bool]


# ---------------------------------------------------------- index_select


@pytest.mark.parametrize("dtype", DTYPES)
def test_index_select_dtypes(dtype):
    x = _x(4, 5, dtype=dtype)
    idx = torch.tensor([3, 0, 3, 1])
    check(lambda a, i: a.index_select(1, i), x, idx[:3])
    check(lambda a, i: a.index_select(-2, i), x, idx)


def test_index_select_noncontiguous_grad_out():
    x = torch.randn(5, 6, requires_grad=True)
    idx = torch.tensor([4, 4, 0, 2], dtype=torch.int32)
    check(lambda a, i: a.t().index_select(0, i) * 2, x, idx, grad=True)
    check(lambda a, i: a.index_select(0, i[1:]), x.detach(), idx)
    out = torch.empty(0, device=TPU)
    res = torch.index_select(x.detach().to(TPU), 0, idx.to(TPU), out=out)
    assert res is out
    torch.testing.assert_close(out.cpu(), x.detach().index_select(0, idx))


def test_index_select_scalar_self():
    check(lambda a, i: a.index_select(0, i), torch.tensor(3.0), torch.tensor([0]))


@pytest.mark.parametrize("bad", [5, -1])
def test_index_select_out_of_range(bad):
    x = torch.randn(5, 2).to(TPU)
    with pytest.raises(IndexError, match="index out of range in self"):
        x.index_select(0, torch.tensor([0, bad]).to(TPU))
        torch.tpu.synchronize()  # device-side check: reported at the next sync


# --------------------------------------------------------------- gather


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_gather(dtype):
    x = _x(4, 5, dtype=dtype)
    idx = torch.randint(0, 4, (3, 2))  # smaller than self in the other dim
    check(lambda a, i: a.gather(0, i), x, idx)
    check(lambda a, i: torch.gather(a, -1, i), x, torch.randint(0, 5, (4, 7)))


def test_gather_grad_noncontiguous():
    x = torch.randn(6, 4, requires_grad=True)
    idx = torch.randint(0, 6, (4, 5))
    check(lambda a, i: a.t().gather(1, i), x, idx, grad=True)


def test_gather_out_of_range():
    x = torch.randn(3, 3).to(TPU)
    with pytest.raises(RuntimeError, match="index 3 is out of bounds for dimension 0 with size 3"):
        x.gather(0, torch.tensor([[0, 3]]).to(TPU))
        torch.tpu.synchronize()  # device-side check: reported at the next sync
    with pytest.raises(RuntimeError, match="index -1 is out of bounds"):
        x.gather(1, torch.tensor([[-1]]).to(TPU))
        torch.tpu.synchronize()  # device-side check: reported at the next sync


def test_index_errors_surface_at_the_next_sync():
    """As with CUDA's device-side asserts: the op itself does not wait, the
    error is raised by the next synchronization, and the device stays usable."""
    x = torch.randn(3, 3).to(TPU)
    good = torch.tensor([[0, 2, 1]]).to(TPU)
    bad = torch.tensor([[0, 3, 1]]).to(TPU)
    for _ in range(3):  # plain kernel calls, cached by the C++ entry point
        x.gather(0, good)
    out = x.gather(0, bad)  # returns at once
    y = x[bad[0]]
    with pytest.raises(RuntimeError, match="index 3 is out of bounds for dimension 0 with size 3"):
        out.cpu()
    # The failure was reported once; later work runs normally.
    assert torch.equal(x.gather(0, good).cpu(), x.cpu().gather(0, good.cpu()))
    del y
    with pytest.raises(IndexError, match="out of bounds"):
        x[bad[0]].sum().item()
    for _ in range(200):  # many pending checks are folded on the device
        x.gather(0, good)
    x.gather(0, bad)
    with pytest.raises(RuntimeError, match="index 3 is out of bounds"):
        torch.tpu.synchronize()


# -------------------------------------------------------------- scatter


def test_scatter_src_value_inplace():
    x = torch.randn(4, 5)
    idx = torch.stack([torch.randperm(4)[:3] for _ in range(5)], 1)  # no duplicates per column
    src = torch.randn(4, 6)
    check(lambda a, i, s: a.scatter(0, i, s), x, idx, src)
    check(lambda a, i: a.scatter(0, i, 2.5), x, idx)
    check(lambda a, i, s: a.clone().scatter_(0, i, s), x, idx, src)
    ii = torch.tensor([[4, 0], [1, 2]])
    check(lambda a, i: a.t().scatter(0, i, -1.0), x, ii)


def test_scatter_int_bool():
    idx = torch.tensor([[0, 1, 2], [2, 0, 1]])
    check(lambda a, i: a.scatter(1, i, 7), _x(2, 4, dtype=torch.int64), idx)
    check(lambda a, i: a.scatter(1, i, True), torch.zeros(2, 4, dtype=torch.bool), idx)


def test_scatter_legacy_reduce():
    x = torch.randn(3, 4)
    idx = torch.tensor([[0, 1, 0, 2], [1, 1, 2, 0]])
    src = torch.randn(2, 4)
    check(lambda a, i, s: a.scatter(0, i, s, reduce="add"), x, idx, src)
    check(lambda a, i, s: a.scatter(0, i, s, reduce="multiply"), x, idx, src)
    check(lambda a, i: a.scatter(0, i, 2.0, reduce="multiply"), x, idx)


def test_scatter_add_grad():
    x = torch.randn(3, 4, requires_grad=True)
    src = torch.randn(5, 4, requires_grad=True)
    idx = torch.randint(0, 3, (5, 4))  # duplicates accumulate
    check(lambda a, i, s: a.scatter_add(0, i, s), x, idx, src, grad=True)
    check(lambda a, i, s: a.scatter(0, i[:2], s[:2] * 1), x, idx, src, grad=True)


def test_scatter_add_bf16_and_int():
    idx = torch.randint(0, 3, (5, 4))
    check(lambda a, i, s: a.scatter_add(0, i, s), _x(3, 4, dtype=torch.bfloat16), idx, _x(5, 4, dtype=torch.bfloat16))
    check(lambda a, i, s: a.clone().scatter_add_(0, i, s), _x(3, 4, dtype=torch.int64), idx, _x(5, 4, dtype=torch.int64))


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(reduce, include_self):
    x = torch.randn(4, 3)
    idx = torch.tensor([[0, 1, 0], [0, 3, 2], [1, 1, 0], [0, 3, 3], [2, 2, 2]])
    src = torch.randn(5, 3)
    check(lambda a, i, s: a.scatter_reduce(0, i, s, reduce, include_self=include_self), x, idx, src)
    xi = torch.randint(-9, 9, (4, 3))
    check(lambda a, i, s: a.scatter_reduce(0, i, s, reduce, include_self=include_self), xi, idx, torch.randint(-9, 9, (5, 3)))


@pytest.mark.parametrize("reduce", ["sum", "mean", "amax"])
def test_scatter_reduce_grad(reduce):
    x = torch.randn(4, 3, requires_grad=True)
    src = torch.randn(5, 3, requires_grad=True)
    idx = torch.tensor([[0, 1, 0], [0, 3, 2], [1, 1, 0], [0, 3, 3], [2, 2, 2]])
    check(lambda a, i, s: a.scatter_reduce(0, i, s, reduce, include_self=False), x, idx, src, grad=True)


def test_scatter_out_of_range():
    x = torch.zeros(3, 3).to(TPU)
    with pytest.raises(RuntimeError, match="index 3 is out of bounds for dimension 1 with size 3"):
        x.scatter_(1, torch.tensor([[3]]).to(TPU), 1.0)
        torch.tpu.synchronize()  # device-side check: reported at the next sync
    with pytest.raises(RuntimeError, match="out of bounds"):
        x.scatter_add(0, torch.tensor([[-1]]).to(TPU), torch.ones(1, 1).to(TPU))
        torch.tpu.synchronize()  # device-side check: reported at the next sync
    assert x.cpu().eq(0).all()


# ------------------------------------------------------- advanced index


@pytest.mark.parametrize("dtype", DTYPES)
def test_index_dtypes(dtype):
    x = _x(4, 5, 3, dtype=dtype)
    i = torch.tensor([3, -1, 0])
    j = torch.tensor([[1], [-4]])
    check(lambda a, i: a[i], x, i)
    check(lambda a, i, j: a[j, :, i[1:]], x, i, j)  # separated -> front


def test_index_patterns():
    x = torch.randn(4, 5, 6)
    i = torch.tensor([3, -4, 1])
    j = torch.tensor([[0], [4]])
    check(lambda a, i: a[:, i], x, i)
    check(lambda a, i, j: a[:, j, i], x, i, j)  # adjacent, broadcast
    check(lambda a, i: a[..., i.int()], x, i)
    check(lambda a, i: a[i[0], 1:, i], x, i)  # 0-dim tensor index
    check(lambda a: a[[0, 2], [1, 3]], x)
    check(lambda a, i: a.transpose(0, 2)[i], x, i)  # non-contiguous self
    check(lambda a: a[torch.tensor([], dtype=torch.long)], x)


def test_index_with_cpu_indices():
    x = torch.randn(4, 5)
    i = torch.tensor([0, 3, -1])
    expected = x[i, 1:][:, i]
    actual = x.to(TPU)[i, 1:][:, i]
    torch.testing.assert_close(actual.cpu(), expected)
    with pytest.raises(IndexError, match="index 4 is out of bounds for dimension 0 with size 4"):
        x.to(TPU)[torch.tensor([4])]
        torch.tpu.synchronize()  # device-side check: reported at the next sync


def test_index_out_of_range():
    x = torch.randn(4, 5).to(TPU)
    with pytest.raises(IndexError, match="index 5 is out of bounds for dimension 1 with size 5"):
        x[:, torch.tensor([1, 5]).to(TPU)]
        torch.tpu.synchronize()  # device-side check: reported at the next sync
    with pytest.raises(IndexError, match="index -5 is out of bounds for dimension 0 with size 4"):
        x[torch.tensor([-5]).to(TPU)]
        torch.tpu.synchronize()  # device-side check: reported at the next sync
    with pytest.raises(IndexError, match="too many indices"):
        x[torch.tensor([0]).to(TPU), torch.tensor([0]).to(TPU), torch.tensor([0]).to(TPU)]


def test_index_grad():
    x = torch.randn(5, 4, requires_grad=True)
    i = torch.tensor([0, 3, 0, -1])
    check(lambda a, i: a[i, 1:] * 3, x, i, grad=True)
    check(lambda a, i: a[:, i[:2]], x, i, grad=True)


# ---------------------------------------------------------- index_put


@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_index_put(accumulate, dtype):
    x = _x(5, 4, dtype=dtype)
    i = torch.tensor([4, 0, -2]) if not accumulate else torch.tensor([4, 0, -1, 4])
    v = _x(len(i), 4, dtype=dtype)
    check(lambda a, i, v: a.index_put((i,), v, accumulate=accumulate), x, i, v)

    def f(a, i, v):
        a = a.clone()
        a[:, i[:2] % 4] = v[0, :2]
        return a

    check(f, x, i, v)


def test_setitem_patterns():
    x = torch.randn(5, 4, 3)

    def f(a, i, v):
        a = a.clone()
        a[i] = v  # broadcast value
        a[:, i[:2], 0] = 7.0
        a[i[0]] += 1
        return a

    check(f, x, torch.tensor([1, 3]), torch.randn(4, 3))

    def g(a):
        b = a.t()  # write through a non-contiguous view
        b[torch.tensor([0, 2])] = -1.0
        return a

    check(g, torch.randn(4, 3))


def test_index_put_grad():
    x = torch.randn(5, 4, requires_grad=True)
    v = torch.randn(3, 4, requires_grad=True)
    i = torch.tensor([1, 3, 1])
    check(lambda a, i, v: a.index_put((i,), v, accumulate=True), x, i, v, grad=True)
    check(lambda a, i, v: a.index_put((i[:2],), v[:2]), x, i, v, grad=True)


def test_index_put_errors():
    x = torch.zeros(3, 2).to(TPU)
    with pytest.raises(IndexError, match="index 3 is out of bounds"):
        x[torch.tensor([3]).to(TPU)] = 1.0
        torch.tpu.synchronize()  # device-side check: reported at the next sync
    with pytest.raises(RuntimeError, match="Index put requires the source and destination dtypes match"):
        x.index_put_((torch.tensor([0]).to(TPU),), torch.tensor([1]).to(TPU))
    assert x.cpu().eq(0).all()



@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.uint16, torch.uint32, torch.float32])
def test_index_tensor_of_a_rejected_dtype_raises_index_error(dtype):
    """Only long/int (and bool/byte masks) index, as on CPU: reads, writes and
    index_put_ raise ATen's IndexError and leave the tensor unchanged."""
    x = torch.arange(3.0).to(TPU)
    i = torch.tensor([1]).to(dtype).to(TPU)
    message = "tensors used as indices must be long, int, byte or bool tensors"
    with pytest.raises(IndexError, match=message):
        x[i]
    with pytest.raises(IndexError, match=message):
        x[i] = 0.0
    with pytest.raises(IndexError, match=message):
        x.index_put_((i,), torch.tensor(0.0).to(TPU))
    assert x.cpu().tolist() == [0.0, 1.0, 2.0]



@pytest.mark.parametrize(
    "write",
    [
        lambda a: a.__setitem__(a > 2, a[:3]),
        lambda a: a.__setitem__(torch.arange(6).to(a.device), a),
        lambda a: a.index_put_((torch.arange(3).to(a.device),), a[3:]),
        lambda a: a.index_put_((torch.arange(3).to(a.device),), a[3:], accumulate=True),
    ],
    ids=["mask", "index-whole", "index-slice", "accumulate"],
)
def test_index_put_of_values_sharing_self_memory_raises(write):
    """ATen's assert_no_overlap: writing part of a tensor into itself through
    an index is refused (on CPU and CUDA), not a read of half-written data."""
    for device in ("cpu", TPU):
        a = torch.arange(6.0).to(device)
        with pytest.raises(RuntimeError, match="refer to a single memory location"):
            write(a)
        assert a.cpu().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    b = torch.arange(6.0).to(TPU)
    b[b > 2] = b[0]  # a one-element value: masked_fill, no check, as in ATen
    assert b.cpu().tolist() == [0.0, 1.0, 2.0, 0.0, 0.0, 0.0]


# ---------------------------------------------------------- masked_fill


@pytest.mark.parametrize("dtype", DTYPES)
def test_masked_fill(dtype):
    x = _x(3, 4, dtype=dtype)
    m = torch.rand(3, 4) > 0.5
    value = True if dtype == torch.bool else 3
    check(lambda a, m: a.masked_fill(m, value), x, m)
    check(lambda a, m: a.masked_fill(m[0], torch.tensor(value)), x, m)  # broadcast mask, tensor value
    check(lambda a, m: a.t().clone().masked_fill_(m.t(), value), x, m)


def test_masked_fill_grad():
    x = torch.randn(3, 4, requires_grad=True)
    v = torch.tensor(2.0, requires_grad=True)
    m = torch.rand(3, 4) > 0.5
    check(lambda a, m: a.masked_fill(m, 1.5), x, m, grad=True)
    check(lambda a, m, v: a.masked_fill(m, v), x, m, v, grad=True)


def test_masked_scatter_grad():
    x = torch.randn(3, 4, requires_grad=True)
    m = torch.rand(3, 4) > 0.5
    src = torch.randn(20, requires_grad=True)
    check(lambda a, m, s: a.masked_scatter(m, s), x, m, src, grad=True)


# --------------------------------------------- index_add/copy/fill/reduce


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_index_add_copy_fill(dtype):
    x = _x(5, 3, dtype=dtype)
    i = torch.tensor([4, 0, 4])
    s = _x(3, 3, dtype=dtype)
    check(lambda a, i, s: a.index_add(0, i, s), x, i, s)
    check(lambda a, i, s: a.index_add(1, i[:2] % 3, torch.cat([s, s])[:5, :2], alpha=2), x, i, s)
    check(lambda a, i, s: a.clone().index_copy_(0, i[:2], s[:2]), x, i, s)
    check(lambda a, i: a.index_fill(1, i[:2] % 3 - 3, 9), x, i)  # negative indices allowed
    check(lambda a, i: a.t().index_fill(0, i[:1] % 3, torch.tensor(-1).to(a.dtype)), x, i)


def test_index_add_copy_fill_grad():
    x = torch.randn(5, 3, requires_grad=True)
    s = torch.randn(3, 3, requires_grad=True)
    i = torch.tensor([4, 0, 2])
    check(lambda a, i, s: a.index_add(0, i, s, alpha=0.5), x, i, s, grad=True)
    check(lambda a, i, s: a.index_copy(0, i, s), x, i, s, grad=True)
    check(lambda a, i: a.index_fill(0, i, 2.0), x, i, grad=True)


@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
def test_index_reduce(reduce):
    x = torch.randn(4, 3)
    i = torch.tensor([0, 2, 0, 3, 0])
    s = torch.randn(5, 3)
    check(lambda a, i, s: a.index_reduce(0, i, s, reduce), x, i, s)
    check(lambda a, i, s: a.index_reduce(0, i, s, reduce, include_self=False), x, i, s)


def test_index_add_out_of_range():
    x = torch.zeros(3, 2).to(TPU)
    with pytest.raises(RuntimeError, match="index 3 is out of bounds for dimension 0 with size 3"):
        x.index_add_(0, torch.tensor([3]).to(TPU), torch.ones(1, 2).to(TPU))
        torch.tpu.synchronize()  # device-side check: reported at the next sync
    with pytest.raises(IndexError, match=r"index_copy_\(\): index -1 is out of bounds"):
        x.index_copy_(0, torch.tensor([-1]).to(TPU), torch.ones(1, 2).to(TPU))
        torch.tpu.synchronize()  # device-side check: reported at the next sync
    with pytest.raises(IndexError, match="index -4 is out of bounds"):
        x.index_fill_(0, torch.tensor([-4]).to(TPU), 1.0)
        torch.tpu.synchronize()  # device-side check: reported at the next sync


# ------------------------------------------------------------ take/put


def test_take_put():
    x = torch.randn(3, 4)
    i = torch.tensor([[0, -1], [11, 5]])
    s = torch.randn(2, 2)
    check(lambda a, i: a.t().take(i), x, i)
    check(lambda a, i, s: a.put(i, s), x, i, s)
    check(lambda a, i, s: a.clone().put_(i.flip(0), s, accumulate=True), x, torch.tensor([[0, 0], [3, -12]]), s)
    check(lambda a, i: a.take(i), _x(3, 4, dtype=torch.int64), i)


def test_take_put_grad_and_errors():
    x = torch.randn(3, 4, requires_grad=True)
    i = torch.tensor([0, 5, 5, -1])
    check(lambda a, i: a.take(i), x, i, grad=True)
    y = torch.zeros(3, 4).to(TPU)
    with pytest.raises(IndexError, match="out of range: tried to access index 12 on a tensor of 12 elements"):
        y.take(torch.tensor([12]).to(TPU))
        torch.tpu.synchronize()  # device-side check: reported at the next sync
    with pytest.raises(IndexError, match="out of range"):
        y.put_(torch.tensor([-13]).to(TPU), torch.ones(1).to(TPU))
        torch.tpu.synchronize()  # device-side check: reported at the next sync


# -------------------------------------------------- boolean / data-dependent


@pytest.mark.parametrize("dtype", DTYPES)
def test_bool_mask_index(dtype):
    x = _x(4, 5, dtype=dtype)
    m = torch.rand(4, 5) > 0.4
    check(lambda a, m: a[m], x, m)
    check(lambda a, m: a[m[:, 0]], x, m)
    check(lambda a, m: a[:, m[0]], x, m)
    check(lambda a, m: a[m[:, 0], 1:], x, m)


def test_bool_mask_index_grad_and_errors():
    x = torch.randn(4, 5, requires_grad=True)
    m = torch.rand(4, 5) > 0.4
    check(lambda a, m: a[m] * 2, x, m, grad=True)
    check(lambda a, m: a[m[:, 0]], x, m, grad=True)
    with pytest.raises(IndexError, match=r"The shape of the mask \[3\] at index 0 does not match"):
        x.detach().to(TPU)[torch.ones(3, dtype=torch.bool).to(TPU)]
    # A CPU mask on a tpu tensor is allowed, as on CUDA.
    torch.testing.assert_close(x.detach().to(TPU)[m].cpu(), x.detach()[m])
    with pytest.warns(UserWarning, match="uint8"):
        got = x.detach().to(TPU)[m.to(torch.uint8).to(TPU)]
    torch.testing.assert_close(got.cpu(), x.detach()[m])


def test_bool_mask_setitem():
    x = torch.randn(4, 5)
    m = torch.rand(4, 5) > 0.5

    def scalar(a, m):
        a = a.clone()
        a[m] = 0.5
        a[:, m[0]] = -1.0
        return a

    def tensor(a, m):
        a = a.clone()
        a[m] = torch.arange(int(m.sum()), dtype=a.dtype, device=a.device)
        a[m[:, 0]] += 1.0  # accumulate-free read-modify-write
        return a

    def accumulate(a, m):
        return a.index_put((m,), torch.tensor(2.0, device=a.device), accumulate=True)

    check(scalar, x, m)
    check(tensor, x, m)
    check(accumulate, x, m)


def test_setitem_scalar_mask_does_not_sync():
    x = torch.randn(64).to(TPU)
    m = (torch.randn(64) > 0).to(TPU)
    before = data_dependent._count_nonzero._cache_size()
    calls = []
    real = data_dependent.nonzero_tensor
    data_dependent.nonzero_tensor = lambda t: calls.append(t) or real(t)
    try:
        x[m] = 0.0
    finally:
        data_dependent.nonzero_tensor = real
    assert not calls
    assert data_dependent._count_nonzero._cache_size() == before
    assert (x.cpu()[m.cpu()] == 0).all()


def test_nonzero_family():
    x = torch.randn(3, 4, 2)
    x[x.abs() < 0.5] = 0
    check(lambda a: a.nonzero(), x)
    check(lambda a: torch.nonzero(a, as_tuple=True), x)
    check(lambda a: torch.argwhere(a), x)
    check(lambda a: torch.where(a[0] > 0), x)
    check(lambda a: a.nonzero(), torch.zeros(5))
    check(lambda a: a.nonzero(), torch.tensor(2.0))
    check(lambda a: a.nonzero(), torch.rand(7) > 0.5)
    out = torch.empty(0, dtype=torch.long, device=TPU)
    torch.nonzero(x.to(TPU), out=out)
    torch.testing.assert_close(out.cpu(), x.nonzero())


def test_nonzero_compiles_per_bucket_not_per_count():
    fn = data_dependent._nonzero_kernel
    x = torch.zeros(100)
    x[:37] = 1
    x.to(TPU).nonzero()
    before = fn._cache_size()
    for n in (33, 40, 64):  # same bucket of 64
        y = torch.zeros(100)
        y[torch.randperm(100)[:n]] = 1
        got = y.to(TPU).nonzero()
        torch.testing.assert_close(got.cpu(), y.nonzero())
    assert fn._cache_size() == before


def test_nonzero_static():
    x = torch.tensor([0.0, 1.0, 0.0, 2.0, 3.0])
    check(lambda a: torch.nonzero_static(a, size=2), x)
    check(lambda a: torch.nonzero_static(a, size=6, fill_value=-7), x)


def test_masked_select():
    x = torch.randn(3, 4)
    m = torch.rand(3, 4) > 0.5
    check(lambda a, m: a.masked_select(m), x, m)
    check(lambda a, m: torch.masked_select(a, m[0]), x, m)  # broadcast mask
    check(lambda a, m: a.masked_select(m), _x(3, 4, dtype=torch.int64), m)
    xg = torch.randn(3, 4, requires_grad=True)
    check(lambda a, m: a.masked_select(m) * 2, xg, m, grad=True)


def test_unique():
    x = torch.randint(0, 5, (4, 6))
    check(lambda a: torch.unique(a), x.float())
    check(lambda a: torch.unique(a, return_inverse=True, return_counts=True), x)
    check(lambda a: torch.unique(a.t(), return_counts=True), x.bool())
    check(lambda a: torch.unique_consecutive(a, return_inverse=True, return_counts=True), x.bfloat16())
    check(lambda a: torch.unique_consecutive(a.flatten()), x)


def test_unique_dim_and_nan():
    x = torch.tensor([[1, 2, 1], [0, 5, 0], [1, 2, 1], [1, 2, 0]])
    check(lambda a: torch.unique(a, dim=0, return_inverse=True, return_counts=True), x)
    check(lambda a: torch.unique(a.bool(), dim=1), x)
    check(lambda a: torch.unique_consecutive(a, dim=0, return_counts=True), x)
    nan = float("nan")
    check(lambda a: torch.unique(a, return_inverse=True), torch.tensor([3.0, nan, 1.0, nan, 3.0]), equal_nan=True)
    check(lambda a: torch.unique(a), torch.zeros(0))


def test_bincount():
    x = torch.tensor([4, 1, 1, 0, 9])
    w = torch.randn(5)
    check(lambda a: torch.bincount(a), x)
    check(lambda a: torch.bincount(a, minlength=12), x)
    check(lambda a, w: torch.bincount(a, w), x, w)
    check(lambda a, w: torch.bincount(a, w.double()), x, w)
    check(lambda a: torch.bincount(a, minlength=3), torch.zeros(0, dtype=torch.long))
    empty = torch.zeros(0, dtype=torch.long)
    check(lambda a, w: torch.bincount(a, w, minlength=3), empty, torch.zeros(0))  # int64, not the weights dtype
    with pytest.raises(RuntimeError, match="non-negative"):
        torch.bincount(torch.tensor([1, -1]).to(TPU))
    with pytest.raises(NotImplementedError, match="not implemented for 'Float'"):  # (as ATen's integral dispatch)
        torch.bincount(torch.tensor([1.0, 2.0]).to(TPU))


def test_repeat_interleave_tensor():
    x = torch.randn(3, 2, requires_grad=True)
    r = torch.tensor([2, 0, 3])
    check(lambda r: torch.repeat_interleave(r), r)
    check(lambda a, r: a.repeat_interleave(r, dim=0), x, r, grad=True)
    check(lambda a, r: torch.repeat_interleave(a, r[:2] + 1, dim=1, output_size=4), x, r, grad=True)
    check(lambda a: a.repeat_interleave(2), x, grad=True)
    with pytest.raises(RuntimeError, match="repeats can not be negative"):
        torch.repeat_interleave(torch.tensor([1, -1]).to(TPU))


def test_masked_scatter_with_too_few_source_elements_raises():
    # The CPU raises; a device-side check (as CUDA's), never a repeated last element.
    for n in (5, 0):
        with pytest.raises(RuntimeError, match="Number of elements of source < number of ones in mask"):
            torch.randn(3, 4).masked_scatter(torch.ones(3, 4, dtype=torch.bool), torch.randn(n))
        with pytest.raises(RuntimeError, match="Number of elements of source < number of ones in mask"):
            x = torch.randn(3, 4).to(TPU)
            x.masked_scatter_(torch.ones(3, 4, dtype=torch.bool).to(TPU), torch.randn(n).to(TPU))
            torch.tpu.synchronize()  # device-side check: reported at the next sync
    m = torch.tensor([[True, False], [False, True]])
    check(lambda a, m, s: a.masked_scatter(m, s), torch.randn(2, 2), m, torch.randn(2))  # exactly enough
    check(lambda a, m, s: a.masked_scatter(m, s), torch.randn(2, 2), m & False, torch.randn(0))


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_of_no_indices_and_empty_bags(mode):
    import torch.nn.functional as F

    w = torch.randn(6, 2, requires_grad=True)
    empty = torch.zeros(0, dtype=torch.long)
    check(lambda w, i, o: F.embedding_bag(i, w, o, mode=mode), w, empty, torch.tensor([0, 0]), grad=True)
    check(lambda w, i, o: F.embedding_bag(i, w, o, mode=mode, include_last_offset=True), w, empty,
          torch.tensor([0, 0]), grad=True)
    check(lambda w, i, o: F.embedding_bag(i, w, o, mode=mode), w, torch.tensor([1, 2]), torch.tensor([0, 0, 2]),
          grad=True)
    if mode == "max":  # (sum/mean's auxiliary outputs have the meta kernel's shapes, not the CPU's)
        check(lambda w, i, o: torch.ops.aten._embedding_bag(w, i, o, False, 2), w.detach(), empty,
              torch.tensor([0, 0]))


@pytest.mark.parametrize("op", ["index_add", "index_reduce"])
def test_index_add_source_shape_must_match_self_zero_dim_included(op):
    # The CPU kernels compare shapes (a 0-dim tensor matches only a 0-dim one);
    # index_copy and index_fill accept these, on the CPU too.
    extra = ("prod",) if op == "index_reduce" else ()
    for self_shape, source_shape in [((), (1,)), ((), (2,)), ((3,), ()), ((2, 3), (1, 4)), ((3,), (1, 1))]:
        n = source_shape[0] if source_shape else 1
        args = (torch.zeros(self_shape), torch.zeros(n, dtype=torch.long), torch.ones(source_shape))
        with pytest.raises(RuntimeError) as expected:
            getattr(args[0], op)(0, *args[1:], *extra)
        with pytest.raises(RuntimeError) as actual:
            getattr(args[0].to(TPU), op)(0, *(a.to(TPU) for a in args[1:]), *extra)
        assert str(actual.value) == str(expected.value)
    check(lambda a, i, s: getattr(a, op)(0, i, s, *extra), torch.tensor(1.0), torch.tensor([0]), torch.tensor(2.0))
    check(lambda a, i, s: a.index_copy(0, i, s), torch.tensor(1.0), torch.tensor([0]), torch.tensor([2.0]))
    check(lambda a, i, s: a.index_copy(0, i, s), torch.zeros(3), torch.tensor([1]), torch.tensor(2.0))
    check(lambda a, i: a.index_fill(0, i, 2.0), torch.tensor(1.0), torch.tensor(0))
