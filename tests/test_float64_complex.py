"""Float64 and complex per platform (README, "Float64 and complex").

CPU/GPU: float64, complex64 and complex128 are native (JAX with x64).
TPU: complex64 is native; float64 and complex128 raise a clear TypeError
(TPUs have no float64 unit), tested here by selecting the TPU policy."""

import pytest
import torch

from torchtpu.runtime import devices, dtypes
from utils import check


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex64, torch.complex128])
def test_native_on_this_platform(no_fallback, dtype):
    a = torch.randn(4, 5, dtype=dtype)
    b = torch.randn(5, 3, dtype=dtype)
    check(lambda a, b: (a @ b, (a * 2 + 1).sum(0), torch.fft.fft(a)), a, b)


def test_float64_is_exact():
    x = torch.tensor([1.0 + 2**-40], dtype=torch.float64)
    assert (x.to("tpu") - 1).item() == 2**-40


@pytest.fixture
def tpu_policy():
    dtypes.set_platform("tpu")
    yield
    dtypes.set_platform(devices.init()[0].platform)


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128])
def test_tpu_rejects_64_bit_floats(tpu_policy, dtype):
    with pytest.raises(TypeError, match="not supported on TPU"):
        torch.ones(3, dtype=dtype).to("tpu")
    with pytest.raises(TypeError, match="not supported on TPU"):
        dtypes.to_jax(dtype)


def test_tpu_keeps_complex64_and_float32(tpu_policy):
    z = torch.randn(3, dtype=torch.complex64)
    torch.testing.assert_close((z.to("tpu") * 2).cpu(), z * 2)
    x = torch.randn(3)
    torch.testing.assert_close((x.to("tpu") + 1).cpu(), x + 1)


@pytest.mark.parametrize("write", [
    lambda v: v.fill_(5 + 1j),
    lambda v: v.add_(1j),
    lambda v: v.__setitem__(0, 5 + 1j),
    lambda v: v.copy_(torch.tensor([5 + 1j, 6 + 1j], device=v.device)),
    lambda v: v.imag.fill_(7),
    lambda v: torch._neg_view(v).mul_(2j),
    lambda v: torch.add(torch.ones(2, dtype=torch.complex64, device=v.device), 1j, out=v),
    lambda v: v.copy_(torch.tensor([5 + 1j, 6 + 1j])),
    lambda v: v.__setitem__(slice(None), torch.tensor([5 + 1j, 6 + 1j])),
    lambda v: v.imag.add_(1),
    lambda v: torch._neg_view(v).real.mul_(3),
], ids=["fill_", "add_", "setitem", "copy_", "imag", "neg_view", "out=", "copy_ from the host", "setitem from the host",
        "imag add_", "real of a negative view"])
def test_writes_through_a_conjugate_view_store_the_conjugate(write, no_fallback):
    for device in ("cpu", "tpu"):
        base = torch.tensor([1 + 2j, 3 - 1j], device=device)
        write(base.conj())
        if device == "cpu":
            expected = base
    torch.testing.assert_close(base.cpu(), expected)


def test_lazy_conjugate_and_negative_bits(no_fallback):
    """Views with ATen's conj/neg bits read as their logical values, in copies
    to the host, in ops ATen lets through (clone, mm) and in the rest."""
    z = torch.randn(3, 3, dtype=torch.complex64)
    zt = z.to("tpu")
    for _ in range(2):  # (the second round is served by the kernel caches)
        c = zt.conj()
        assert c.is_conj()
        torch.testing.assert_close(c.cpu(), z.conj())
        torch.testing.assert_close(c.clone().cpu(), z.conj())
        torch.testing.assert_close((c + 1).cpu(), z.conj() + 1)
        torch.testing.assert_close((zt.mH @ zt).cpu(), z.mH @ z)
        torch.testing.assert_close(torch.fft.ifft(zt.real).cpu(), torch.fft.ifft(z.real))


def test_negative_views_read_their_values_through_real_views(no_fallback):
    """`z.conj().imag` carries ATen's negative bit; the real views taken of it
    (`view_as_real`, `.real`, `.imag`) keep the bit, as ATen's do."""
    z = torch.tensor([1 + 2j, 3 - 4j])
    views = {
        "real": lambda t: torch._neg_view(t).real,
        "imag": lambda t: torch._neg_view(t).imag,
        "view_as_real": lambda t: torch.view_as_real(torch._neg_view(t)),
        "view_as_complex": lambda t: torch.view_as_complex(torch._neg_view(torch.view_as_real(t))),
        "imag of conj": lambda t: t.conj().imag,
        "masked": lambda t: torch._neg_view(t).real.masked_fill(torch._neg_view(t).real > -2, 0),
    }
    for name, view in views.items():
        want, got = view(z), view(z.to("tpu"))
        assert got.is_neg() == want.is_neg(), name
        torch.testing.assert_close(got.cpu(), want, msg=name)
    x_cpu = z.clone().requires_grad_()
    x = z.to("tpu").requires_grad_()
    for t in (x_cpu, x):
        (torch.view_as_real(torch._neg_view(t)) * torch.tensor([1.0, 2.0], device=t.device)).sum().backward()
    torch.testing.assert_close(x.grad.cpu(), x_cpu.grad)
