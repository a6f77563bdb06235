"""Scalars ATen converts with an overflow check.

Some kernels convert a Scalar argument to the result's dtype with
c10::checked_convert: `uint8_tensor.fill_(300)`, `masked_fill(m, 300)`,
`half_tensor.clamp(max=1e5)`, `add(a, b, alpha=300)` on uint8, ... raise
"value cannot be converted to type uint8_t without overflow", where JAX's
astype would wrap or saturate.  Meta kernels skip the check.

A baked Scalar (dispatch.MAX_BAKED_VALUES) is checked when its kernel is
built, by ATen itself: a CPU `fill_` makes the same conversion.  A
traced one gets a device-side check with c10's rules (`overflows`), raised
at the next synchronization like every device-side check."""

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import torch

from ..runtime.dtypes import to_jax

# Schema name -> the Scalar arguments its CPU kernel converts with a check.
CHECKED = {
    **dict.fromkeys(("aten::fill", "aten::fill_", "aten::masked_fill", "aten::masked_fill_", "aten::index_fill",
                     "aten::index_fill_", "aten::scatter", "aten::scatter_"), ("value",)),
    **dict.fromkeys(("aten::full", "aten::full_like", "aten::new_full"), ("fill_value",)),
    **dict.fromkeys(("aten::clamp", "aten::clamp_"), ("min", "max")),
    **dict.fromkeys(("aten::clamp_min", "aten::clamp_min_"), ("min",)),
    **dict.fromkeys(("aten::clamp_max", "aten::clamp_max_"), ("max",)),
    **dict.fromkeys(("aten::threshold", "aten::threshold_"), ("threshold", "value")),
    **dict.fromkeys(("aten::hardtanh", "aten::hardtanh_"), ("min_val", "max_val")),
    **dict.fromkeys(("aten::add", "aten::add_", "aten::sub", "aten::sub_"), ("alpha",)),
    **dict.fromkeys(("aten::addcmul", "aten::addcmul_", "aten::addcdiv", "aten::addcdiv_"), ("value",)),
    **dict.fromkeys(("aten::lerp", "aten::lerp_"), ("weight",)),
    **dict.fromkeys(("aten::pow", "aten::pow_"), ("exponent",)),
    **dict.fromkeys(("aten::linspace", "aten::logspace"), ("start", "end")),
    "aten::scalar_tensor": ("s",),
    "aten::constant_pad_nd": ("value",),
    "aten::softplus": ("beta", "threshold"),
}  # fmt: skip

# ATen fills one element without the check for these types (fill_,
# scalar_tensor, `t[i] = v`, `torch.where`'s Scalar through scalar_tensor,
# and constant_pad_nd, which fills its result with fill_).
_FILLS = {"aten::fill", "aten::fill_", "aten::full", "aten::full_like", "aten::new_full", "aten::scalar_tensor",
          "aten::constant_pad_nd"}
_UNCHECKED_SINGLE_FILL = {torch.float16, torch.bfloat16}

# These kernels convert the Scalar to their opmath type: float for half and
# bfloat16 (`half.lerp(x, 7e4)` is fine on CPU, `half.pow_(7e4)` is not).
_OPMATH = {"aten::addcmul", "aten::addcmul_", "aten::addcdiv", "aten::addcdiv_", "aten::lerp", "aten::lerp_",
           "aten::softplus"}
_REDUCED_FLOATS = {torch.float16, torch.bfloat16}
# pow takes a float or complex exponent as double / complex<double>:
# `float32.pow(1e39)` is no overflow.
_POW = {"aten::pow", "aten::pow_"}
_DOUBLE_EXPONENT = {torch.float32, torch.float64, torch.complex64, torch.complex128}


def _converted_to(name, dtype):
    """The dtype the kernel converts its checked Scalars to, or None (no
    check), for a result of `dtype`."""
    if name in _OPMATH and dtype in _REDUCED_FLOATS:
        return torch.float32
    if name in _POW and dtype in _DOUBLE_EXPONENT:
        return None
    return dtype


# c10's names for the types in its message.
CPP_NAMES = {
    torch.uint8: "uint8_t", torch.int8: "int8_t", torch.int16: "int16_t", torch.int32: "int", torch.int64: "int64_t",
    torch.uint16: "uint16_t", torch.uint32: "uint32_t", torch.uint64: "uint64_t",
    torch.float16: "c10::Half", torch.bfloat16: "c10::BFloat16", torch.float32: "float", torch.float64: "double",
    torch.complex64: "c10::complex<float>", torch.complex128: "c10::complex<double>",
    torch.float8_e4m3fn: "c10::Float8_e4m3fn", torch.float8_e5m2: "c10::Float8_e5m2",
    torch.float8_e4m3fnuz: "c10::Float8_e4m3fnuz", torch.float8_e5m2fnuz: "c10::Float8_e5m2fnuz",
}  # fmt: skip


def traced_checks(sch, values, meta_out, dynamic):
    """Check the op's baked checked Scalars now (raising as ATen does);
    return [(position, result dtype)] of the traced ones, which the kernel
    checks on the device (`device_check`)."""
    names = CHECKED.get(sch.op._schema.name)
    if names is None or _only_crops(sch, values):
        return []
    result = meta_out[0] if isinstance(meta_out, (tuple, list)) else meta_out
    if not isinstance(result, torch.Tensor) or result.dtype not in CPP_NAMES:
        return []  # (bool results never overflow)
    single_fill = sch.op._schema.name in _FILLS and result.numel() == 1
    if single_fill and result.dtype in _UNCHECKED_SINGLE_FILL:
        return []
    dtype = _converted_to(sch.op._schema.name, result.dtype)
    if dtype is None:
        return []
    traced = []
    for name in names:
        if name not in sch.names:
            continue
        position = sch.names.index(name)
        value = values[position]
        if type(value) not in (bool, int, float, complex):
            continue
        if position in dynamic:
            traced.append((position, dtype))
        else:
            # ATen's own conversion and message
            torch.empty(2, dtype=dtype).fill_(value)
    return traced


def _only_crops(sch, values):
    """constant_pad_nd with no positive pad narrows without filling (no
    conversion of its value)."""
    if sch.op._schema.name != "aten::constant_pad_nd":
        return False
    pad = values[sch.names.index("pad")]
    return all(isinstance(p, int) and p <= 0 for p in pad)


def device_check(ctx, value, dtype):
    """`value` (a traced Python number, or a 0-dim tensor ATen reads as one
    with `item()`) must convert to `dtype` (torch)."""
    ctx.check(~overflows(_as_scalar(jnp.asarray(value)), to_jax(dtype)),
              f"value cannot be converted to type {CPP_NAMES[dtype]} without overflow")


def _as_scalar(v):
    """v as the c10::Scalar `item()` makes of it: int64, float64 or
    complex128 (a uint8 value compared in uint8 wrapped: -255 is 1)."""
    if v.dtype == np.uint64:
        return v  # (a Python int past int64: c10 keeps it as uint64)
    for kind, wide in ((np.bool_, np.bool_), (np.integer, np.int64), (np.floating, np.float64),
                       (np.complexfloating, np.complex128)):
        if jnp.issubdtype(v.dtype, kind):
            return v.astype(wide)
    return v


def overflows(v, to):
    """c10::overflows<To, From>: whether number `v` (int64, float64,
    complex128 or bool) is out of range for dtype `to`."""
    if v.dtype == np.bool_:
        return jnp.bool_(False)
    if jnp.iscomplexobj(v):
        component = np.dtype(np.float32 if to == np.complex64 else np.float64) if _is_complex(to) else to
        # to a real type, a non-zero imaginary part is an overflow
        bad = jnp.bool_(False) if _is_complex(to) else jnp.imag(v) != 0
        return bad | _real_overflows(jnp.real(v), component) | _real_overflows(jnp.imag(v), component)
    if _is_complex(to):
        to = np.dtype(np.float32 if to == np.complex64 else np.float64)
    return _real_overflows(v, to)


def _is_complex(dtype):
    return np.issubdtype(dtype, np.complexfloating)


def _real_overflows(v, to):
    if np.issubdtype(to, np.integer):
        info = np.iinfo(to)
        if v.dtype == np.uint64:  # a Python int past int64
            return v > info.max if info.max < 2**64 - 1 else jnp.bool_(False)
        if np.issubdtype(v.dtype, np.integer):  # an int64 source
            too_big = v > info.max if info.max < 2**63 else jnp.bool_(False)
            if info.min == 0:
                # unsigned: negatives wrap (two's complement) down to -max
                too_small = v < -info.max if info.max < 2**63 else jnp.bool_(False)
            else:
                too_small = v < info.min
            return too_big | too_small
        return jnp.isnan(v) | (v < float(info.min)) | (v > float(info.max))  # inf is out of range
    info = ml_dtypes.finfo(to)
    out_of_range = (v < float(info.min)) | (v > float(info.max))  # NaN converts (every float type has one)
    has_infinity = bool(np.isinf(np.array(np.inf).astype(to).astype(np.float32)))
    return out_of_range & ~jnp.isinf(v) if has_infinity else out_of_range
