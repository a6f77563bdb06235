"""FFTs: the three aten primitives every `torch.fft.*` function (fft, ifft,
rfft, irfft, hfft, ihfft and their 2-D/n-D forms, stft/istft) is built from.

- `_fft_r2c(x, dim, normalization, onesided)`: real -> complex;
- `_fft_c2c(x, dim, normalization, forward)`: complex -> complex;
- `_fft_c2r(x, dim, normalization, last_dim_size)`: one-sided complex -> real.

The transforms are jnp.fft's (XLA's FFT op), unnormalized, then scaled as
ATen's `normalization` says: 0 none, 1 by 1/sqrt(n), 2 by 1/n, n the product
of the transformed sizes (of the output for c2r).
"""

import math

import jax.numpy as jnp
import torch

from ..aten_checks import c10_name
from ..registry import lower

aten = torch.ops.aten


def _scale(x, n, normalization):
    if normalization == 0 or n == 0:
        return x
    factor = 1.0 / math.sqrt(n) if normalization == 1 else 1.0 / n
    return x * jnp.asarray(factor, dtype=jnp.real(x).dtype)


def _sizes(shape, dim):
    return math.prod(shape[d] for d in dim)


def _complex(x, out_dtype):
    return x.astype(out_dtype) if x.dtype != out_dtype else x


# ATen's CPU kernels check the input dtype; the meta kernels only
# `torch._check` it ("Expected cond to be True, but got False").  These run
# (as `accepts`) before the meta kernel, so a bad call raises CPU's error:
# `torch.fft.ihfft2(complex)` reaches `_fft_r2c` with its complex input.


def _r2c_input(self, *rest, **kwargs):
    if not self.dtype.is_floating_point:
        raise RuntimeError(f"Only supports floating-point dtypes, but found: {c10_name(self.dtype)}")
    if self.dtype in (torch.float16, torch.bfloat16):
        raise RuntimeError(f"MKL FFT doesn't support tensors of type: {c10_name(self.dtype)}")
    return True


def _complex_input(self, *rest, **kwargs):
    if not self.dtype.is_complex:
        raise RuntimeError(f"Only supports complex dtypes, but found: {c10_name(self.dtype)}")
    return True


@lower(aten._fft_r2c, accepts=_r2c_input)
def fft_r2c(ctx, self, dim, normalization, onesided):
    dim = tuple(dim)
    out = ctx.out_dtype
    if not dim:
        return _complex(self, out)
    if onesided:
        r = jnp.fft.rfftn(self, axes=dim)
    else:
        r = jnp.fft.fftn(self.astype(out), axes=dim)
    return _scale(r.astype(out), _sizes(self.shape, dim), normalization)


@lower(aten._fft_c2c, accepts=_complex_input)
def fft_c2c(ctx, self, dim, normalization, forward):
    dim = tuple(dim)
    if not dim:
        return self
    if forward:
        r = jnp.fft.fftn(self, axes=dim)
    else:
        r = jnp.fft.ifftn(self, axes=dim, norm="forward")  # unnormalized inverse
    return _scale(r.astype(self.dtype), _sizes(self.shape, dim), normalization)


@lower(aten._fft_c2r, accepts=_complex_input)
def fft_c2r(ctx, self, dim, normalization, last_dim_size):
    dim = tuple(dim)
    shape = ctx.out_shape
    s = [shape[d] for d in dim]
    s[-1] = last_dim_size
    r = jnp.fft.irfftn(self, s=s, axes=dim, norm="forward")
    return _scale(r.astype(ctx.out_dtype), _sizes(shape, dim), normalization)
