"""A fill kernel's first calls are served by a host transfer (ops/host_fill.py):
the values must be exactly those of the compiled kernel that serves the later
calls, whatever the dtype, layout or value."""

import pytest
import torch

from torchtpu.ops import dispatch

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int32,
          torch.int64, torch.bool, torch.complex64]


def _fresh_shape(tag):
    """A shape no other test compiled a kernel for (the first call of a key
    is the one served from the host)."""
    return (3, 5 + tag % 97, 2)


@pytest.mark.parametrize("dtype", DTYPES)
def test_factories_and_fills_match_cpu_on_first_and_later_calls(dtype):
    from torchtpu.ops import host_fill

    shape = _fresh_shape(DTYPES.index(dtype))
    value = True if dtype is torch.bool else 3
    makers = [
        lambda d: torch.zeros(shape, dtype=dtype, device=d),
        lambda d: torch.ones(shape, dtype=dtype, device=d),
        lambda d: torch.full(shape, value, dtype=dtype, device=d),
        lambda d: torch.empty(shape, dtype=dtype, device=d).zero_(),
        lambda d: torch.empty(shape, dtype=dtype, device=d).fill_(value),
        # a dense storage written through a permuted view
        lambda d: torch.empty(shape[::-1], dtype=dtype, device=d).permute(2, 1, 0).fill_(value),
    ]
    for make in makers:
        expected = make("cpu")
        for _ in range(host_fill.HOST_CALLS + 2):  # host-served, then compiled, then cached
            got = make("tpu")
            assert got.dtype == expected.dtype and got.shape == expected.shape and got.stride() == expected.stride()
            torch.testing.assert_close(got.cpu(), expected, rtol=0, atol=0)


def test_first_calls_compile_nothing_then_the_kernel_compiles():
    from torchtpu.ops import host_fill

    shape = (7, 61, 3)
    before = dispatch.stats["compiles"]
    made = []
    for _ in range(host_fill.HOST_CALLS):
        made += [(torch.zeros(shape, device="tpu"), 0.0), (torch.empty(shape, device="tpu").fill_(0.25), 0.25)]
    assert dispatch.stats["compiles"] == before
    made += [(torch.zeros(shape, device="tpu"), 0.0), (torch.empty(shape, device="tpu").fill_(0.25), 0.25)]
    assert dispatch.stats["compiles"] == before + 2
    for t, v in made:
        assert torch.equal(t.cpu(), torch.full(shape, v))


def test_the_filled_storage_reads_back_through_views_and_later_writes():
    base = torch.empty(6, 4, device="tpu").t()  # the fill writes the storage through a transpose
    base.fill_(2.5)
    base[1:3].zero_()  # a partial write compiles a kernel over the host-filled box
    ref = torch.full((6, 4), 2.5).t()
    ref[1:3].zero_()
    assert torch.equal(base.cpu(), ref)
    assert torch.equal((base * 2).cpu(), ref * 2)


@pytest.mark.parametrize(
    "dtype, value",
    [(torch.float32, 0.1), (torch.float16, 1 / 3), (torch.bfloat16, 1e-3), (torch.float32, float("nan")),
     (torch.float16, float("-inf")), (torch.float32, -0.0), (torch.int64, 2**62 + 1), (torch.float64, 2**60 + 1),
     (torch.bool, 0.5), (torch.uint8, -1), (torch.complex64, 0.1)],
)
def test_values_that_round_or_wrap_convert_as_on_cpu(dtype, value):
    """Values the host would convert differently from ATen take the kernel."""
    shape = (2, 3 + int(abs(hash((str(dtype), str(value)))) % 89))
    expected = torch.full(shape, value, dtype=dtype)
    got = torch.full(shape, value, dtype=dtype, device="tpu").cpu()
    torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True)
    assert torch.equal(got.view(torch.uint8) if dtype.is_floating_point else got,
                       expected.view(torch.uint8) if dtype.is_floating_point else expected)


def test_inferred_dtypes_and_default_dtype():
    shape = (5, 83)
    for value in (True, 7, 1.5):
        assert torch.full(shape, value, device="tpu").dtype == torch.full(shape, value).dtype
    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        with torch.device("tpu"):
            z = torch.zeros(shape)
            f = torch.full(shape, 0.1)
    finally:
        torch.set_default_dtype(prev)
    assert z.dtype == f.dtype == torch.float64
    assert torch.equal(z.cpu(), torch.zeros(shape, dtype=torch.float64))
    assert torch.equal(f.cpu(), torch.full(shape, 0.1, dtype=torch.float64))


def test_overlapping_and_partial_targets_take_the_kernel():
    base = torch.arange(12.0).reshape(3, 4).to("tpu")
    base[:, 1].fill_(-1)  # a column: not the whole storage
    ref = torch.arange(12.0).reshape(3, 4)
    ref[:, 1].fill_(-1)
    assert torch.equal(base.cpu(), ref)
    e = torch.zeros(1, device="tpu").expand(5)
    e.zero_()  # expanded: ATen allows zero_ on it
    assert torch.equal(e.cpu(), torch.zeros(5))


def test_the_host_box_has_the_shape_the_kernel_writes():
    """Later kernels are keyed by the box signature: a host-served fill must
    leave the signature the compiled fill leaves, or every kernel reading the
    storage would compile twice."""
    from torchtpu.runtime import boxes

    def signature(t):
        return boxes.boxes[t.untyped_storage().data_ptr()][1]

    from torchtpu.ops import host_fill

    for make in (lambda: torch.empty(1, 4, 1, 9, device="tpu").permute(3, 2, 1, 0).fill_(1.0),
                 lambda: torch.zeros(9, 1, 4, device="tpu"),
                 lambda: torch.empty(5, 2, 3, device="tpu").transpose(0, 2).zero_()):
        made = [make() for _ in range(host_fill.HOST_CALLS + 1)]  # the last one compiled
        assert signature(made[0]) == signature(made[-1])
