"""Factory ops against the CPU: arange, linspace, logspace, eye, full, tri indices."""

import math

import pytest
import torch
import torchtpu
from utils import TPU, assert_close


@pytest.fixture(autouse=True)
def _strict(no_fallback):
    yield


def same(make, **tol):
    """make(device) on tpu vs on cpu: values, dtype, shape and device."""
    actual = make(TPU)
    expected = make(torch.device("cpu"))
    assert_close(actual, expected, **tol)
    return actual


@pytest.mark.parametrize(
    "args, kwargs",
    [
        ((5,), {}),
        ((0,), {}),
        ((2, 9), {}),
        ((9, -3, -2), {}),
        ((0, 1, 0.1), {}),
        ((-1.5, 2.25, 0.25), {}),
        ((1, 4), {"dtype": torch.float32}),
        ((0, 3, 0.5), {"dtype": torch.bfloat16}),
        ((10,), {"dtype": torch.int32}),
        ((0.5, 5), {"dtype": torch.int64}),
        ((3.0,), {}),
    ],
)
def test_arange(args, kwargs):
    same(lambda d: torch.arange(*args, device=d, **kwargs))


def test_arange_out_and_varying_end():
    out = torch.empty(0, device=TPU, dtype=torch.int64)
    torch.arange(2, 7, out=out)
    assert_close(out, torch.arange(2, 7))
    # Different ends must give different lengths (the end is part of the kernel key).
    for n in (3, 4, 3):
        assert torch.arange(n, device=TPU).shape == (n,)


@pytest.mark.filterwarnings("ignore:torch.range is deprecated")
@pytest.mark.parametrize(
    "args, kwargs",
    [((0, 1, 0.3), {}), ((1, 4), {}), ((0, 1, 0.1), {}), ((5, 1, -1), {}), ((0.5, 2.5, 0.5), {"dtype": torch.float64}),
     ((-3, 5, 2), {"dtype": torch.int64}), ((1, 1), {"dtype": torch.int32}), ((0, 2, 0.25), {"dtype": torch.bfloat16})],
)
def test_range_end_inclusive(args, kwargs):
    # torch.range (deprecated) ran on the CPU.
    same(lambda d: torch.range(*args, device=d, **kwargs))


def test_factories_respect_device_index():
    for make in (
        lambda: torch.arange(4, device="tpu:1"),
        lambda: torch.eye(3, device="tpu:1"),
        lambda: torch.linspace(0, 1, 5, device="tpu:1"),
        lambda: torch.full((2,), 3.0, device="tpu:1"),
        lambda: torch.zeros(2, device="tpu:1"),
    ):
        t = make()
        assert t.device == torch.device("tpu", 1)
        torch.testing.assert_close(t.cpu(), make().cpu())
    with torch.tpu.device(1):
        assert torch.arange(3, device="tpu").device == torch.device("tpu", 1)


@pytest.mark.parametrize(
    "start, end, steps, dtype",
    [
        (0, 1, 5, None),
        (-2.5, 10, 1, None),
        (3, -3, 0, None),
        (0, 10, 7, torch.int64),
        (-5, 4, 6, torch.int32),
        (0, 1, 33, torch.bfloat16),
        (1, 2, 8, torch.float64),
    ],
)
def test_linspace(start, end, steps, dtype):
    same(lambda d: torch.linspace(start, end, steps, device=d, dtype=dtype))


def test_linspace_with_traced_endpoints_divides_exactly():
    # New start/end values are traced; the step must still be a true
    # division (XLA would multiply by the reciprocal of steps - 1: 1 ulp off).
    for start, end in ((0.25, 0.5), (2.015, -0.403), (0.854, -1.885), (1.98, 1.022), (0.032, 0.534)):
        torch.testing.assert_close(
            torch.linspace(start, end, 4, device=TPU).cpu(), torch.linspace(start, end, 4), rtol=0, atol=0)


@pytest.mark.parametrize(
    "start, end, steps, base, dtype",
    [(0, 2, 5, 10.0, None), (-1, 1, 4, 2.0, None), (0, 3, 4, 2.0, torch.int64), (1, 0, 3, 10.0, torch.float64)],
)
def test_logspace(start, end, steps, base, dtype):
    same(lambda d: torch.logspace(start, end, steps, base=base, device=d, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int64], ids=str)
def test_logspace_steps_in_double_like_aten(dtype):
    # ATen rounds start and end to the output type and keeps the step and
    # the exponents in double (the step rounded to bfloat16 put 10**4 at 9856).
    for start, end, steps in ((-10, 10, 1001), (-4.3, 4.7, 257), (0.5, 9.5, 10)):
        same(lambda d: torch.logspace(start, end, steps, device=d, dtype=dtype), rtol=0, atol=0)


def test_eye():
    same(lambda d: torch.eye(4, device=d))
    same(lambda d: torch.eye(2, 5, device=d, dtype=torch.int64))
    same(lambda d: torch.eye(3, 1, device=d, dtype=torch.bool))
    out = torch.empty(0, device=TPU)
    torch.eye(3, out=out)
    assert_close(out, torch.eye(3))


def test_full_zeros_ones_scalar_tensor():
    same(lambda d: torch.full((2, 3), 1.5, device=d))
    same(lambda d: torch.full((2,), 7, device=d))  # int fill -> int64
    same(lambda d: torch.full((2,), True, device=d))
    same(lambda d: torch.zeros(2, 3, device=d, dtype=torch.bfloat16))
    same(lambda d: torch.ones(4, device=d, dtype=torch.int32))
    same(lambda d: torch.scalar_tensor(2.5, device=d))
    same(lambda d: torch.tensor(3, device=d))


def test_like_factories():
    x = torch.randn(2, 3)
    for make in (torch.zeros_like, torch.ones_like, lambda t: torch.full_like(t, 4.0), lambda t: t.new_full((3,), 2)):
        assert_close(make(x.to(TPU)), make(x))
    assert_close(x.to(TPU).new_zeros((2, 2), dtype=torch.int64), x.new_zeros((2, 2), dtype=torch.int64))
    assert torch.empty_like(x.to(TPU)).shape == (2, 3)


@pytest.mark.parametrize("row, col, offset", [(4, 3, 0), (3, 5, 1), (5, 5, -2), (0, 3, 0), (3, 3, 10)])
def test_tri_indices(row, col, offset):
    same(lambda d: torch.tril_indices(row, col, offset, device=d))
    same(lambda d: torch.triu_indices(row, col, offset, device=d, dtype=torch.int32))


def test_factories_compile_once_per_static_signature():
    """Scalars are baked into a kernel until their position has shown
    dispatch.MAX_BAKED_VALUES values, then traced: one more kernel serves
    every later value."""
    def compiles():
        return torchtpu.kernel_cache_stats()["compiles"]

    from torchtpu.ops import host_fill

    for v in (2.0, -9.0, 5.0, 6.0):
        for _ in range(host_fill.HOST_CALLS + 1):  # (a fill kernel's first calls are served from the host)
            torch.full((4, 7), v, device=TPU)
            torch.linspace(v, 10, 13, device=TPU)
    m = compiles()
    for v in (-1.5, 3.25, 100.0):
        assert_close(torch.full((4, 7), v, device=TPU), torch.full((4, 7), v))
        assert_close(torch.linspace(v, 10, 13, device=TPU), torch.linspace(v, 10, 13))
    assert compiles() == m


def test_factory_on_second_device():
    from torchtpu.ops.transfer import materialize
    from torchtpu.runtime import devices

    x = torch.arange(5, device="tpu:1")
    assert x.device == torch.device("tpu", 1)
    assert materialize(x).devices() == {devices.jax_device(1)}
    with torch.tpu.device(1):
        y = torch.full((3,), 2.0, device="tpu")
    assert y.device.index == 1 and materialize(y).devices() == {devices.jax_device(1)}


def test_kernel_cache_tells_equal_python_numbers_apart():
    """3 == 3.0 == True and -0.0 == 0.0 in Python, but each gives a different
    kernel: a cache keyed on the raw values served arange(3.0) the int64
    kernel of an earlier arange(3)."""
    for _ in range(2):  # the second round is served from the caches
        same(lambda d: torch.arange(3, device=d))
        same(lambda d: torch.arange(3.0, device=d))
        same(lambda d: torch.full((2,), 1, device=d))
        same(lambda d: torch.full((2,), True, device=d))
        same(lambda d: torch.full((2,), 1.0, device=d))
        for value in (0.0, -0.0):
            t = torch.full((1,), value, device="tpu").cpu()
            assert math.copysign(1, t.item()) == math.copysign(1, value)


def test_deterministic_mode_fills_new_tensors_like_cpu():
    torch.use_deterministic_algorithms(True)
    try:
        for dtype in (torch.float32, torch.bfloat16, torch.int32, torch.bool):
            for make in (lambda d: torch.empty(3, dtype=dtype, device=d),
                         lambda d: torch.empty_strided((2, 2), (1, 2), dtype=dtype, device=d),
                         lambda d: torch.ones(2, dtype=dtype, device=d).new_empty(4)):
                torch.testing.assert_close(make("tpu").cpu(), make("cpu"), equal_nan=True)
        model = torch.nn.Linear(4, 2).to("tpu")  # ordinary work is unaffected
        model(torch.ones(3, 4, device="tpu")).sum().backward()
        assert not model.weight.grad.isnan().any()
    finally:
        torch.use_deterministic_algorithms(False)


# ------------------------------------------------------------- window functions

_WINDOW_RTOL = {torch.float32: 4e-7, torch.float64: 1e-15, torch.bfloat16: 8e-3, torch.float16: 1e-3}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_kaiser_window(dtype):
    # ATen's composite kaiser_window calls a DispatchStub: it used to fail
    # with "DispatchStub: missing kernel for tpu".
    cases = [(0, True), (1, False), (2, True), (7, True, 5.5), (8, False), (8, True, 0.0),
             (8, False, 20.0), (7, False, -3.0), (260, False)]  # 260: bf16 rounds 259 up to 260
    for args in cases:
        same(lambda d: torch.kaiser_window(*args, dtype=dtype, device=d), rtol=_WINDOW_RTOL[dtype], atol=1e-30)


def test_kaiser_window_signatures_and_out():
    same(lambda d: torch.kaiser_window(8, device=d), rtol=4e-7, atol=1e-30)
    same(lambda d: torch.kaiser_window(8, periodic=False, device=d), rtol=4e-7, atol=1e-30)
    same(lambda d: torch.kaiser_window(8, periodic=False, beta=3.0, dtype=torch.float64, device=d),
         rtol=1e-15, atol=1e-30)
    for overload, args in [(torch.ops.aten.kaiser_window.out, (8,)),
                           (torch.ops.aten.kaiser_window.periodic_out, (7, False)),
                           (torch.ops.aten.kaiser_window.beta_out, (9, True, 4.0))]:
        for dtype in (torch.float64, torch.bfloat16):
            def make(d):
                out = torch.empty(args[0], dtype=dtype, device=d)
                assert overload(*args, out=out) is out
                return out

            same(make, rtol=_WINDOW_RTOL[dtype], atol=1e-30)


def test_kaiser_window_errors_like_cpu():
    for kwargs in [dict(window_length=-1), dict(window_length=8, dtype=torch.int64)]:
        with pytest.raises(RuntimeError) as cpu:
            torch.kaiser_window(**kwargs)
        with pytest.raises(RuntimeError) as tpu:
            torch.kaiser_window(**kwargs, device=TPU)
        # (the dtype message names the device: cpu there, meta here)
        assert str(tpu.value).split("TensorOptions")[0] == str(cpu.value).split("TensorOptions")[0]


@pytest.mark.parametrize("name", ["hann_window", "hamming_window", "blackman_window", "bartlett_window"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_other_windows(name, dtype):
    fn = getattr(torch, name)
    for n, periodic in [(0, True), (1, False), (7, True), (8, False)]:
        same(lambda d: fn(n, periodic, dtype=dtype, device=d))


@pytest.mark.parametrize("name", ["bartlett", "blackman", "cosine", "exponential", "gaussian",
                                  "general_hamming", "hamming", "hann", "kaiser", "nuttall"])
def test_signal_windows(name):
    fn = getattr(torch.signal.windows, name)
    for n, sym in [(1, True), (7, True), (8, False)]:
        same(lambda d: fn(n, sym=sym, dtype=torch.float64, device=d))


# ------------------------------------------------ FFT input dtype errors


def _raises_like_cpu(fn, x):
    with pytest.raises(Exception) as cpu:
        fn(x)
    with pytest.raises(Exception) as tpu:
        fn(x.to(TPU))
    assert type(tpu.value) is type(cpu.value)
    assert str(tpu.value) == str(cpu.value)


@pytest.mark.parametrize("name", ["rfft", "rfft2", "rfftn", "ihfft", "ihfft2", "ihfftn"])
@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_real_input_ffts_reject_complex_like_cpu(name, dtype):
    # ihfft2/ihfftn used to raise the meta kernel's "Expected cond to be True".
    fn = getattr(torch.fft, name)
    _raises_like_cpu(fn, torch.randn(4, 6, dtype=dtype))
    _raises_like_cpu(lambda x: fn(x, norm="ortho"), torch.randn(4, 6, dtype=dtype))


def test_fft_primitives_check_input_dtype_like_cpu():
    r2c = lambda x: torch.ops.aten._fft_r2c(x, [0], 0, True)  # noqa: E731
    c2c = lambda x: torch.ops.aten._fft_c2c(x, [0], 0, True)  # noqa: E731
    c2r = lambda x: torch.ops.aten._fft_c2r(x, [0], 0, 6)  # noqa: E731
    for dtype in [torch.complex64, torch.int64, torch.bool, torch.float16, torch.bfloat16]:
        _raises_like_cpu(r2c, torch.ones(4, dtype=dtype))
    for dtype in [torch.float32, torch.int64, torch.bfloat16]:
        _raises_like_cpu(c2c, torch.ones(4, dtype=dtype))
        _raises_like_cpu(c2r, torch.ones(4, dtype=dtype))
    # valid inputs still run on the device
    x = torch.randn(4, 6)
    same(lambda d: torch.fft.ihfft2(x.to(d)))
    same(lambda d: torch.fft.rfftn(x.to(d), norm="forward"))
    same(lambda d: torch.fft.irfft(torch.fft.rfft(x.to(d))))


def test_fft_out_variants_after_dtype_checks():
    x = torch.randn(4, 6)

    def make(fn, out_dtype):
        def run(d):
            out = torch.empty(0, dtype=out_dtype, device=d)
            assert fn(x.to(d), out=out) is out
            return out

        return run

    same(make(torch.fft.rfft2, torch.complex64))
    same(make(torch.fft.ihfftn, torch.complex64))
    same(make(torch.fft.fft, torch.complex64))
    same(make(lambda x, out: torch.fft.irfft(torch.fft.rfft(x), out=out), torch.float32))
    z = torch.randn(4, 6, dtype=torch.complex64)
    _raises_like_cpu(lambda x: torch.fft.ihfft2(x, out=torch.empty(0, dtype=torch.complex64, device=x.device)), z)


@pytest.mark.parametrize("make", [
    lambda **kw: torch.empty(2, **kw), lambda **kw: torch.zeros(2, **kw), lambda **kw: torch.ones(2, 3, **kw),
    lambda **kw: torch.full((2,), 3.0, **kw), lambda **kw: torch.arange(3.0, **kw), lambda **kw: torch.eye(2, **kw),
], ids=["empty", "zeros", "ones", "full", "arange", "eye"])
def test_pinned_tpu_factories_raise_as_cuda(make):
    """pin_memory=True is for CPU tensors: CUDA's factories refuse it for a
    device tensor, whichever factory it is."""
    with pytest.raises(RuntimeError, match="Only dense CPU tensors can be pinned"):
        make(device=TPU, pin_memory=True)
    assert make(device=TPU, pin_memory=False).device.type == "tpu"
