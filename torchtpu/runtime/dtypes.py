"""torch <-> JAX dtype mapping.

Only imported once JAX is needed (first op), never at `import torch`.
"""

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import torch

TORCH_TO_JAX = {
    torch.float32: jnp.dtype(jnp.float32),
    torch.float64: jnp.dtype(jnp.float64),
    torch.float16: jnp.dtype(jnp.float16),
    torch.bfloat16: jnp.dtype(jnp.bfloat16),
    torch.int8: jnp.dtype(jnp.int8),
    torch.int16: jnp.dtype(jnp.int16),
    torch.int32: jnp.dtype(jnp.int32),
    torch.int64: jnp.dtype(jnp.int64),
    torch.uint8: jnp.dtype(jnp.uint8),
    torch.uint16: jnp.dtype(jnp.uint16),
    torch.uint32: jnp.dtype(jnp.uint32),
    torch.uint64: jnp.dtype(jnp.uint64),
    torch.bool: jnp.dtype(jnp.bool_),
    torch.complex64: jnp.dtype(jnp.complex64),
    torch.complex128: jnp.dtype(jnp.complex128),
    torch.float8_e4m3fn: jnp.dtype(ml_dtypes.float8_e4m3fn),
    torch.float8_e5m2: jnp.dtype(ml_dtypes.float8_e5m2),
    torch.float8_e4m3fnuz: jnp.dtype(ml_dtypes.float8_e4m3fnuz),
    torch.float8_e5m2fnuz: jnp.dtype(ml_dtypes.float8_e5m2fnuz),
}
JAX_TO_TORCH = {v: k for k, v in TORCH_TO_JAX.items()}

# numpy cannot hold these natively: move them through an integer of the same
# width when crossing the torch <-> numpy boundary.
_NUMPY_CARRIERS = {
    torch.bfloat16: torch.int16,
    torch.float8_e4m3fn: torch.uint8,
    torch.float8_e5m2: torch.uint8,
    torch.float8_e4m3fnuz: torch.uint8,
    torch.float8_e5m2fnuz: torch.uint8,
}


# 64-bit floating point per platform.  CPU and GPU run float64/complex128
# natively (JAX with x64).  TPUs have no float64 unit: XLA would emulate some
# ops slowly and reject others, so there, like MPS, float64 and complex128
# are a clear error at the first kernel or copy (complex64 is native).
_NO_FLOAT64_PLATFORMS = frozenset({"tpu"})
_unsupported: frozenset = frozenset()


def set_platform(platform):
    """Called once the JAX platform is known (runtime.devices)."""
    global _unsupported
    _unsupported = frozenset({torch.float64, torch.complex128}) if platform in _NO_FLOAT64_PLATFORMS else frozenset()


def to_jax(dtype: torch.dtype):
    if dtype in _unsupported:
        raise TypeError(
            f"torchtpu: {dtype} is not supported on TPU (no native float64); use "
            f"{'torch.complex64' if dtype.is_complex else 'torch.float32'} instead"
        )
    try:
        return TORCH_TO_JAX[dtype]
    except KeyError:
        raise TypeError(f"torchtpu: dtype {dtype} is not supported on the tpu device") from None


def to_torch(dtype) -> torch.dtype:
    return JAX_TO_TORCH[jnp.dtype(dtype)]


def torch_to_numpy(t: torch.Tensor) -> np.ndarray:
    """A CPU tensor's values as a numpy array (any strides; no copy if possible)."""
    t = t.resolve_conj().resolve_neg()
    carrier = _NUMPY_CARRIERS.get(t.dtype)
    if carrier is None:
        return t.numpy()
    return t.view(carrier).numpy().view(TORCH_TO_JAX[t.dtype])


def numpy_to_torch(a: np.ndarray) -> torch.Tensor:
    """A numpy array (possibly of an ml_dtypes type) as a CPU tensor."""
    dtype = JAX_TO_TORCH[a.dtype]
    a = np.ascontiguousarray(a).reshape(a.shape)  # ascontiguousarray makes 0-d 1-d
    carrier = _NUMPY_CARRIERS.get(dtype)
    if carrier is None:
        return torch.from_numpy(a)
    return torch.from_numpy(a.view(TORCH_TO_JAX[carrier])).view(dtype)


def itemsize(dtype: torch.dtype) -> int:
    return dtype.itemsize


def is_uint64_scalar(v) -> bool:
    """A Python int past int64 (up to 2**64 - 1): c10 keeps it as a uint64
    Scalar, which JAX's int64 refuses."""
    return type(v) is int and 2**63 <= v < 2**64


def convert(x, dtype):
    """x (traced) as `dtype`, converted as c10 converts.  A bool array
    becomes a float or complex one through a select of constants, not a
    convert: XLA rewrites `y * convert(mask)` into `select(mask, y, 0)`, so
    inf * False and nan * False gave 0 instead of torch's nan, wherever the
    cast fuses into a product (every compiled graph)."""
    if is_uint64_scalar(x):
        x = np.uint64(x)  # (wrapped by the cast below, as c10 casts it)
    x = jnp.asarray(x)
    dtype = jnp.dtype(dtype)
    if x.dtype == jnp.bool_ and jnp.issubdtype(dtype, jnp.inexact):
        return jnp.where(x, jnp.ones((), dtype), jnp.zeros((), dtype))
    if jnp.issubdtype(x.dtype, jnp.complexfloating) and not jnp.issubdtype(dtype, jnp.complexfloating):
        if dtype == jnp.bool_:
            return x != 0
        x = jnp.real(x)  # (c10 converts the real part; JAX's astype warns that it will refuse)
    if dtype == _E4M3FN and x.dtype != dtype:
        # c10 saturates to the largest finite value (+-inf too: the type has
        # none); XLA's convert gives NaN.  NaN stays NaN (clip keeps it).
        x = jnp.clip(x.astype(_wide_float(x.dtype)), -448.0, 448.0)
    if jnp.issubdtype(x.dtype, jnp.floating) and dtype in _FLOAT_TO_INT_VIA:
        return _float_to_int(x, dtype)
    return x.astype(dtype)


def _wide_float(dtype):
    """float64 for float64, else float32 (JAX has no promotion path from
    the float8 types, so promote_types(float8, float32) raised)."""
    return jnp.dtype(jnp.float64) if dtype == jnp.float64 else jnp.dtype(jnp.float32)


def _float_to_int(x, dtype):
    """c10's float -> integer conversion as the CPU runs it (XLA's clamps):
    truncation through an intermediate type -- int64 for uint8 (c10's
    choice, so that negative floats wrap, on CUDA too), int32 for int8 and
    int16, the type itself for int32 and int64 --, NaN and values past the
    intermediate's range giving its minimum (x86's "integer indefinite"),
    then the low bits (`(x * 255).to(uint8)` of 256.0 is 0, not 255).
    The wider unsigned types follow the compiler's code for static_cast:
    uint16 through int32, uint32 through int64, uint64 exact up to 2**64."""
    wide = jnp.trunc(x.astype(_wide_float(x.dtype)))
    if dtype == jnp.uint64:
        # x86's sequence: below 2**63 as int64; above it, x - 2**63 as int64
        # with the top bit flipped (2**64 and more give 0, NaN gives 2**63)
        high = wide >= 2.0**63
        low_bits = _truncate(jnp.where(high, wide - 2.0**63, wide), jnp.dtype(jnp.int64)).astype(dtype)
        return jnp.where(high, low_bits ^ jnp.asarray(2**63, dtype), low_bits)
    return _truncate(wide, _FLOAT_TO_INT_VIA[dtype]).astype(dtype)


def _truncate(wide, via):
    """Integral floats as the integer type `via`, NaN and values out of its
    range giving its minimum (x86's "integer indefinite")."""
    limit = 2.0 ** (jnp.iinfo(via).bits - 1)
    indefinite = jnp.isnan(wide) | (wide >= limit) | (wide < -limit)
    return jnp.where(indefinite, jnp.iinfo(via).min, wide.astype(via))


_E4M3FN = jnp.dtype(jnp.float8_e4m3fn)
_FLOAT_TO_INT_VIA = {jnp.dtype(k): jnp.dtype(v) for k, v in (
    (jnp.uint8, jnp.int64), (jnp.int8, jnp.int32), (jnp.int16, jnp.int32), (jnp.int32, jnp.int32),
    (jnp.int64, jnp.int64), (jnp.uint16, jnp.int32), (jnp.uint32, jnp.int64), (jnp.uint64, jnp.int64))}
