"""Views and in-place semantics: every case runs the same program on CPU and
on tpu and compares values *and* view metadata (shape, stride, storage
offset), including writes that must show through aliases."""

import pytest
import torch

from utils import TPU, assert_close


def _meta(t):
    return (tuple(t.shape), t.stride(), t.storage_offset(), t.dtype)


def run_case(program, make_input):
    """program(x) -> tuple of tensors; compare CPU vs tpu, values and metadata."""
    x_cpu = make_input()
    x_tpu = x_cpu.to(TPU)
    out_cpu = program(x_cpu)
    out_tpu = program(x_tpu)
    if not isinstance(out_cpu, tuple):
        out_cpu, out_tpu = (out_cpu,), (out_tpu,)
    for c, t in zip(out_cpu, out_tpu):
        assert _meta(t) == _meta(c)
        assert_close(t, c)
    # The input itself, after the program (writes through views land here).
    assert_close(x_tpu, x_cpu)


def arange(*shape, dtype=torch.float32):
    n = 1
    for s in shape:
        n *= s
    return lambda: torch.arange(n, dtype=torch.float64).reshape(shape).to(dtype)


def _setitem(x, index, value):
    x[index] = value
    return x


def _sort_into(x, view_of):
    """sort(out=) into a view whose sizes fit: written through the view's strides."""
    base = torch.zeros(8, 4, device=x.device)
    values = view_of(base)
    torch.sort(x, 1, out=(values, torch.empty(4, 4, dtype=torch.long, device=x.device)))
    return values, base


CASES = {
    # reads through views
    "slice_steps": (lambda x: x[::2, 1::3], arange(6, 7)),
    "slice_3d_steps": (lambda x: x[1:, ::2, 2:5:2], arange(4, 5, 6)),
    "select_row": (lambda x: x[2], arange(4, 5)),
    "select_col": (lambda x: x[:, 3], arange(4, 5)),
    "transpose": (lambda x: x.t(), arange(3, 5)),
    "permute": (lambda x: x.permute(2, 0, 1), arange(2, 3, 4)),
    "transpose_then_slice": (lambda x: x.transpose(0, 2)[1:, :, ::2], arange(3, 4, 5)),
    "expand": (lambda x: x[:, :1].expand(4, 6), arange(4, 5)),
    "expand_new_dims": (lambda x: x[0].expand(3, 2, 5), arange(4, 5)),
    "as_strided_overlap": (lambda x: x.as_strided((4, 3), (1, 1)), arange(10)),
    "as_strided_offset": (lambda x: x.as_strided((2, 2), (3, 2), 1), arange(10)),
    "unfold": (lambda x: x.unfold(0, 3, 2), arange(9)),
    "unfold_2d": (lambda x: x.unfold(1, 2, 1), arange(3, 5)),
    "diagonal": (lambda x: x.diagonal(), arange(4, 4)),
    "diagonal_offset": (lambda x: x.diagonal(1), arange(4, 5)),
    "narrow": (lambda x: x.narrow(1, 1, 3), arange(4, 5)),
    "view_flat": (lambda x: x.view(-1), arange(4, 5)),
    "view_of_slice_rows": (lambda x: x[1:3].view(10), arange(4, 5)),
    "reshape_noncontig_copy": (lambda x: x.t().reshape(-1), arange(3, 4)),
    "squeeze_unsqueeze": (lambda x: x[:, None, 1:].squeeze(1).unsqueeze(-1), arange(3, 4)),
    "chunk": (lambda x: x.chunk(3, dim=1), arange(2, 6)),
    "unbind": (lambda x: x.unbind(1), arange(2, 3)),
    "movedim": (lambda x: x.movedim(0, -1), arange(2, 3, 4)),
    "view_dtype_same_width": (lambda x: x.view(torch.int32), arange(3, 4)),
    "view_dtype_narrower": (lambda x: x.view(torch.uint8), arange(2, 3)),
    "view_dtype_wider": (lambda x: x.view(torch.int64), arange(2, 4, dtype=torch.int32)),
    "view_dtype_of_slice": (lambda x: x[1:].view(torch.int16), arange(3, 4)),
    # wider views of a storage whose byte size is no multiple of the new element
    "view_complex_of_odd_storage": (lambda x: x[:6].view(torch.complex64), arange(7)),
    "view_wider_of_odd_byte_storage": (lambda x: x[4:8].view(torch.int32), arange(10, dtype=torch.int8)),
    "write_complex_view_of_odd_storage": (lambda x: x[:6].view(torch.complex64)[1:].fill_(5 + 6j), arange(7)),
    "write_wider_view_of_odd_byte_storage": (lambda x: x[4:8].view(torch.int32).fill_(-7),
                                             arange(10, dtype=torch.int8)),
    "contiguous_of_transpose": (lambda x: x.t().contiguous(), arange(3, 4)),
    "channels_last": (lambda x: x.contiguous(memory_format=torch.channels_last), arange(2, 3, 4, 5)),
    "clone_preserves_strides": (lambda x: x.permute(0, 2, 3, 1).clone(), arange(2, 3, 4, 5)),
    # writes through views
    "setitem_column": (lambda x: _setitem(x, (slice(None), 1), 7.0), arange(3, 4)),
    "setitem_tensor_row": (lambda x: _setitem(x, 1, torch.full((4,), -1.0, device=x.device)), arange(3, 4)),
    "setitem_steps_3d": (lambda x: _setitem(x, (slice(1, None), slice(None, None, 2), 1), 5.0), arange(3, 4, 5)),
    "diagonal_fill": (lambda x: x.diagonal().fill_(9), arange(4, 4)),
    "diagonal_offset_fill": (lambda x: x.diagonal(-1).fill_(9), arange(4, 5)),
    "narrow_copy": (lambda x: x.narrow(0, 1, 2).copy_(torch.ones(2, 5, device=x.device)), arange(4, 5)),
    "copy_broadcast_into_view": (lambda x: x[:, 1:3].copy_(torch.tensor([5.0, 6.0], device=x.device)), arange(4, 5)),
    "copy_dtype_into_view": (lambda x: x[1].copy_(torch.arange(5, device=x.device)), arange(3, 5)),
    "zero_strided": (lambda x: x[::2, 1::2].zero_(), arange(5, 6)),
    "chain_of_three_views": (lambda x: x.t()[1:][:, ::2].fill_(3), arange(5, 6)),
    "chunk_inplace": (lambda x: x.chunk(2, dim=0)[1].fill_(-2), arange(4, 3)),
    "unbind_inplace": (lambda x: x.unbind(0)[1].zero_(), arange(3, 4)),
    "detach_shares": (lambda x: x.detach().fill_(4), arange(2, 3)),
    "view_dtype_write": (lambda x: x.view(torch.int32)[1].fill_(0x3F800000), arange(3, 2)),
    "view_dtype_narrow_write": (lambda x: x.view(torch.uint8)[0, :4].zero_(), arange(2, 2)),
    "view_dtype_bool_write": (lambda x: x.view(torch.bool)[1, :5].fill_(True), arange(3, 2)),
    "complex_imag_write": (lambda x: x.imag[1:].mul_(-2), arange(3, 2, dtype=torch.complex64)),
    "bytes_into_bool_storage": (lambda x: x.view(torch.uint8)[1:, 1:].fill_(5), arange(3, 4, dtype=torch.bool)),
    "as_strided_write": (lambda x: x.as_strided((2, 3), (4, 1), 1).fill_(-1), arange(12)),
    "unfold_write_nonoverlap": (lambda x: x.unfold(0, 2, 3).fill_(8), arange(9)),
    "squeeze_write": (lambda x: x[:, 0:1].squeeze(1).fill_(1), arange(3, 4)),
    "transpose_copy": (lambda x: x.t().copy_(torch.arange(12.0, device=x.device).view(4, 3)), arange(3, 4)),
    "permute_write_region": (lambda x: x.permute(1, 0, 2)[1].fill_(-3), arange(2, 3, 4)),
    "bool_row_fill": (lambda x: x[1].fill_(True), arange(4, 4, dtype=torch.bool)),
    "bool_column_logical_not": (lambda x: x[:, 2].logical_not_(), arange(4, 4, dtype=torch.bool)),
    "bool_plane_masked_fill": (lambda x: x[:, 1].masked_fill_(x[:, 2].clone(), False),
                               arange(3, 4, 5, dtype=torch.bool)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_view_case(name, no_fallback):
    program, make_input = CASES[name]
    run_case(program, make_input)


ARITH_CASES = {
    "transpose_add_": (lambda x: x.t().add_(torch.ones(4, 3, device=x.device)), arange(3, 4)),
    "permute_mul_": (lambda x: x.permute(1, 0).mul_(2), arange(3, 4)),
    "slice_add_self_alias": (lambda x: x[1:].add_(x[:-1].clone()), arange(4, 3)),
    "inplace_on_expand_source": (lambda x: x[:1].expand(3, 4) + x, arange(3, 4)),
    "relu_inplace_view": (lambda x: torch.relu_(x[:, 1:]), lambda: torch.randn(3, 4)),
    "out_resize": (lambda x: torch.add(x, 1, out=torch.empty(0, device=x.device)), arange(2, 3)),
    "out_resize_noncontig_input": (lambda x: torch.mul(x.t(), 2, out=torch.empty(0, device=x.device)), arange(2, 3)),
    "out_into_view": (lambda x: torch.add(x[0], 1, out=x[1]), arange(2, 3)),
    "sort_out_into_transposed_view": (lambda x: _sort_into(x, lambda base: base[:4].t()), lambda: torch.randn(4, 4)),
    "sort_out_into_strided_rows": (lambda x: _sort_into(x, lambda base: base[::2]), lambda: torch.randn(4, 4)),
}


@pytest.mark.parametrize("name", sorted(ARITH_CASES))
def test_view_arith_case(name, no_fallback):
    program, make_input = ARITH_CASES[name]
    run_case(program, make_input)


def test_write_through_a_view_of_another_dtype_reuses_the_donated_buffer():
    # The written box goes back to its storage's dtype: XLA warned that the
    # donated complex buffer was not usable for a float result.
    import warnings

    z = torch.zeros(2, 3, dtype=torch.complex64, device=TPU)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        z.imag.fill_(3.0)
        z.real[:, 1].add_(1.0)
        torch.view_as_real(z)[0].mul_(2)
    expected = torch.zeros(2, 3, dtype=torch.complex64)
    expected.imag.fill_(3.0)
    expected.real[:, 1].add_(1.0)
    torch.view_as_real(expected)[0].mul_(2)
    assert torch.equal(z.cpu(), expected)


def test_data_ptr_stable_under_inplace(no_fallback):
    x = torch.zeros(4, 5, device=TPU)
    ptr = x.data_ptr()
    x.add_(1)
    x[1:3].mul_(2)
    x.fill_(3)
    x.t().zero_()
    assert x.data_ptr() == ptr


def test_storage_shared_between_views():
    x = torch.zeros(4, 5, device=TPU)
    v = x[1:, ::2]
    assert v.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert v._base is x
    assert torch._C._is_alias_of(v, x)
    assert not torch._C._is_alias_of(x.clone(), x)
    d = x.detach()
    assert torch._C._is_alias_of(d, x)
    d.fill_(2)
    assert x.cpu().eq(2).all()


def test_is_set_to_sees_the_same_storage_and_geometry():
    def program(x):
        y = torch.empty(0, device=x.device).set_(x)
        views = (x, x.view(12), x[1:], y, x.t(), x.clone(), x.reshape(3, 4))
        return [v.is_set_to(x) for v in views]

    x = torch.arange(12.0).reshape(3, 4)
    assert program(x.to(TPU)) == program(x) == [True, False, False, True, False, False, True]


def test_storage_offset_and_strides_match_cpu():
    base_cpu = torch.zeros(6, 7, 8)
    base_tpu = base_cpu.to(TPU)
    for f in (
        lambda x: x[2:, 1::3, 4],
        lambda x: x.transpose(0, 2)[1:3],
        lambda x: x.unfold(2, 3, 2)[1],
        lambda x: x.diagonal(0, 1, 2),
        lambda x: x.view(42, 8)[5:].t(),
    ):
        a, b = f(base_cpu), f(base_tpu)
        assert (a.shape, a.stride(), a.storage_offset()) == (b.shape, b.stride(), b.storage_offset())


def test_resize_grows_and_keeps_data():
    x = torch.arange(6.0).to(TPU)
    x.resize_(10)
    assert torch.equal(x[:6].cpu(), torch.arange(6.0))
    x.resize_(2, 2)
    assert torch.equal(x.cpu(), torch.arange(4.0).view(2, 2))


def test_storage_resize_keeps_prefix():
    x = torch.arange(4.0).to(TPU)
    x.untyped_storage().resize_(32)
    y = torch.empty(0, device=TPU).set_(x.untyped_storage(), 0, (8,), (1,))
    assert torch.equal(y[:4].cpu(), torch.arange(4.0))


def test_set_shares_storage():
    x = torch.arange(6.0).to(TPU)
    y = torch.empty(0, device=TPU)
    y.set_(x.untyped_storage(), 2, (2, 2), (2, 1))
    y.fill_(-1)
    expected = torch.arange(6.0)
    expected[2:6] = -1
    assert torch.equal(x.cpu(), expected)


def test_set_source_tensor():
    x = torch.arange(6.0).to(TPU)
    y = torch.empty(0, device=TPU).set_(x)
    assert torch._C._is_alias_of(y, x) and y.shape == x.shape
    y[0] = 42
    assert x[0].item() == 42


def test_write_to_expanded_errors_like_cpu():
    with pytest.raises(RuntimeError, match="single memory location"):
        torch.zeros(1, 4).expand(3, 4).add_(1)
    with pytest.raises(RuntimeError, match="single memory location"):
        torch.zeros(1, 4, device=TPU).expand(3, 4).add_(1)


def _idx(x):
    return torch.tensor([0, 1, 2], device=x.device)


OVERLAPPING_WRITES = {
    "where": lambda x: torch.where(x > 4, x.t(), x, out=x),
    "gelu": lambda x: torch.ops.aten.gelu.out(x.t(), out=x),
    "hardtanh": lambda x: torch.ops.aten.hardtanh.out(x.t(), out=x),
    "leaky_relu": lambda x: torch.ops.aten.leaky_relu.out(x.t(), out=x),
    "softplus": lambda x: torch.ops.aten.softplus.out(x.t(), out=x),
    "floor_divide": lambda x: torch.floor_divide(x.t(), 2, out=x),
    "index_add_": lambda x: x.index_add_(0, _idx(x), x.t()),
    "index_add_-self": lambda x: x.index_add_(0, _idx(x), x),
    "index_copy_": lambda x: x.index_copy_(0, _idx(x), x.t()),
    "scatter_": lambda x: x.scatter_(0, _idx(x).expand(3, 3).contiguous(), x.t()),
    "scatter_add_": lambda x: x.scatter_add_(0, _idx(x).expand(3, 3).contiguous(), x.t()),
    "put_": lambda x: x.put_(_idx(x), x.view(-1)[3:6]),
    "take": lambda x: torch.take(x, _idx(x)[:2], out=x.view(-1)[3:5]),
    "stack": lambda x: torch.stack([x[0]], out=x[:1]),
}
SAME_ELEMENTS_WRITES = {  # (allowed: each element written is the one read)
    "where": lambda x: torch.where(x > 4, x, torch.zeros(3, device=x.device), out=x),
    "gelu_": lambda x: torch.ops.aten.gelu_(x),
    "hardtanh_": lambda x: torch.nn.functional.hardtanh_(x),
    "floor_divide_": lambda x: x.floor_divide_(2),
}


@pytest.mark.parametrize("name", sorted(OVERLAPPING_WRITES))
def test_writes_overlapping_their_inputs_raise_as_on_cpu(name):
    """ATen's overlap asserts of TensorIterator kernels without the pointwise
    tag, of stack and of the scatters and gathers: writing memory the op is
    still reading is refused, not computed in some order."""
    for device in ("cpu", TPU):
        x = torch.arange(9.0, device=device).reshape(3, 3)
        with pytest.raises(RuntimeError, match="refer to a single memory location"):
            OVERLAPPING_WRITES[name](x)


@pytest.mark.parametrize("name", sorted(SAME_ELEMENTS_WRITES))
def test_writes_reading_the_same_elements_run(name):
    run_case(SAME_ELEMENTS_WRITES[name], lambda: torch.arange(9.0).reshape(3, 3) - 4)


def test_partial_write_then_read_of_empty():
    x = torch.empty(3, 4, device=TPU)
    x[1] = 5
    assert torch.equal(x[1].cpu(), torch.full((4,), 5.0))


def test_empty_strided_odd_layout():
    x = torch.empty_strided((3, 4), (1, 3), device=TPU)
    assert x.stride() == (1, 3)
    x.copy_(torch.arange(12.0).view(3, 4))
    assert torch.equal(x.cpu(), torch.arange(12.0).view(3, 4))
    assert torch.equal(x.t().contiguous().cpu(), torch.arange(12.0).view(3, 4).t())


def test_zero_size_tensors():
    x = torch.empty(0, 3, device=TPU)
    assert x.cpu().shape == (0, 3)
    y = torch.zeros(4, 0, device=TPU).t()
    assert y.shape == (0, 4) and y.cpu().numel() == 0


# ------------------------------------------- view(dtype) with complex dtypes

_VIEW_DTYPES = [
    torch.float16, torch.bfloat16, torch.float32, torch.float64,
    torch.int8, torch.int16, torch.int32, torch.int64,
    torch.uint8, torch.uint16, torch.uint32, torch.uint64,
    torch.bool, torch.complex64, torch.complex128,
]


def _bits(t):
    """The bytes of `t` as integers (bit-exact comparison, NaN payloads too)."""
    t = t.cpu()
    if t.dtype == torch.bool:
        return t.view(torch.uint8)
    if t.dtype.is_complex:
        t = torch.view_as_real(t)
    width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return t.contiguous().view(width[t.element_size()])


def _raw_bytes(rows, cols):
    """Random bytes with float specials planted: f32 subnormal, quiet NaN with
    a payload, signalling NaN, f64 subnormal and NaN payload, f16 subnormal/inf."""
    g = torch.Generator().manual_seed(3)
    raw = torch.randint(0, 256, (rows, cols), dtype=torch.uint8, generator=g)
    planted = [
        (0, [1, 0, 0, 0]), (4, [0x34, 0x12, 0xC0, 0x7F]), (8, [1, 0, 0x80, 0x7F]),
        (16, [1, 0, 0, 0, 0, 0, 0, 0]), (24, [1, 0, 0, 0, 0, 0, 0xF0, 0x7F]),
        (32, [1, 0]), (34, [1, 0x7C]),
    ]
    for at, values in planted:
        raw[0, at:at + len(values)] = torch.tensor(values, dtype=torch.uint8)
    return raw


@pytest.mark.parametrize(
    "src,dst",
    [(a, b) for a in _VIEW_DTYPES for b in _VIEW_DTYPES
     if a != torch.bool and (a.is_complex or b.is_complex)],
    ids=str,
)
def test_view_dtype_complex_bit_exact(src, dst):
    # complex64 <-> 8-byte reals and complex128 -> complex64 used to raise
    # "bitcast between ... of the same width".
    x = _raw_bytes(2, 64).view(src)
    ref = x.view(dst)
    y = x.to(TPU).view(dst)
    assert _meta(y) == _meta(ref)
    if dst == torch.bool:
        assert torch.equal(y.cpu(), ref.view(torch.uint8) != 0)
    else:
        assert torch.equal(_bits(y), _bits(ref))
        assert torch.equal(_bits(y.clone()), _bits(ref))
    assert torch.equal(_bits(y.view(src)), _bits(x))
    # the whole storage written through the view keeps every bit
    z = torch.zeros_like(x, device=TPU)
    z.view(dst).copy_(ref.to(TPU))
    if dst != torch.bool:
        assert torch.equal(_bits(z), _bits(x))


def _check_bits(program, make):
    """program on CPU and tpu: same view metadata, same bits out and in."""
    x_cpu, x_tpu = make(), make().to(TPU)
    out_cpu, out_tpu = program(x_cpu), program(x_tpu)
    assert _meta(out_tpu) == _meta(out_cpu)
    assert torch.equal(_bits(out_tpu), _bits(out_cpu))
    assert torch.equal(_bits(x_tpu), _bits(x_cpu))


@pytest.mark.parametrize("src", [torch.float64, torch.int64, torch.uint64, torch.complex128])
def test_view_dtype_complex64_of_8_byte_writes(src):
    # Values of normal floats (XLA:CPU flushes subnormals in arithmetic).
    def make():
        return torch.randn(4, 6, dtype=torch.complex64, generator=torch.Generator().manual_seed(0)).view(src)

    def program(x):
        v = x.view(torch.complex64)
        v[0] = 1 + 2j
        v[1:3, ::2].mul_(2)
        v[:, 1] = 3 - 1j
        v[3].imag.zero_()
        return v

    _check_bits(program, make)


@pytest.mark.parametrize("dst", [torch.float64, torch.int64, torch.uint64])
def test_view_complex64_as_8_byte_writes(dst):
    def make():
        return torch.randn(4, 6, dtype=torch.complex64, generator=torch.Generator().manual_seed(1))

    def program(x):
        v = x.view(dst)
        v[0] = 7
        v[1:, ::2] = 3
        return v

    _check_bits(program, make)


def test_view_dtype_complex_zero_dim():
    for src, dst in [(torch.float64, torch.complex64), (torch.complex64, torch.int64),
                     (torch.complex64, torch.float64)]:
        x = torch.tensor(1.5 + 0.25j, dtype=torch.complex64)
        x = x if src.is_complex else x.view(src)
        ref = x.view(dst)
        y = x.to(TPU).view(dst)
        assert _meta(y) == _meta(ref)
        assert torch.equal(_bits(y), _bits(ref))
    with pytest.raises(RuntimeError, match="cannot be 0"):
        torch.tensor(1j, dtype=torch.complex128, device=TPU).view(torch.complex64)
