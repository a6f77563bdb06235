"""Moving tensor values between the host, the box table and devices:
`copy_` in every direction, `_local_scalar_dense`, and `materialize` (a tpu
tensor's logical value as one jax.Array)."""

import jax
import numpy as np
import torch

from .. import _C
from ..runtime import boxes, checks, devices
from ..runtime.dtypes import numpy_to_torch, to_jax, torch_to_numpy
from . import dispatch, plans, row_offsets
from .special import special
from .warn_once import warn_once

aten = torch.ops.aten

_read_kernels: dict = {}


def materialize(t: torch.Tensor):
    """The value of tpu tensor `t` (its view applied) as a jax.Array."""
    boxes.drain()
    address, nbytes, sizes, strides, offset, device = _C._tensor_info(t)
    entry = boxes.get(address) if address else None
    dtype = to_jax(t.dtype)
    if entry is not None:
        array, sig = entry
        if sig == (sizes, dtype) and offset == 0 and plans.is_contiguous(sizes, strides):
            return array
    sig = None if entry is None else entry[1]
    traced = row_offsets.traced_index(sig, t.dtype, sizes, strides, offset)
    if traced is not None:  # (`losses[i].item()` in a loop: one read kernel for all rows)
        dim, index, residual, span = traced
        key = (sizes, strides, ("at", dim, residual, span), dtype, sig, device)
        fn = _read_kernels.get(key)
        if fn is None:
            fn = _read_kernels[key] = jax.jit(
                lambda x, index: row_offsets.read_at(x, dim, index, span, sizes, strides, residual, dtype))
        return fn(entry[0], index)
    key = (sizes, strides, offset, dtype, sig, device)
    fn = _read_kernels.get(key)
    if fn is None:
        target = jax.sharding.SingleDeviceSharding(devices.jax_device(device))
        if entry is None:
            fn = jax.jit(lambda: plans.read_view(None, sizes, strides, offset, dtype), out_shardings=target)
        else:
            fn = jax.jit(lambda x: plans.read_view(x, sizes, strides, offset, dtype))
        _read_kernels[key] = fn
    return fn() if entry is None else fn(entry[0])


def to_host(array) -> torch.Tensor:
    """A jax.Array as a CPU tensor (zero-copy where JAX allows it)."""
    if array.dtype != np.bool_ and next(iter(array.devices())).platform == "cpu":
        try:
            return torch.from_dlpack(array)
        except Exception:  # dtype without dlpack support: go through numpy
            pass
    host = np.asarray(array)
    if not host.flags.writeable:
        host = host.copy()
    return numpy_to_torch(host)


def from_host(t: torch.Tensor, device: int):
    """A CPU tensor's value as a jax.Array on tpu:`device`."""
    to_jax(t.dtype)  # (raises for a dtype the platform does not support)
    host = torch_to_numpy(t.detach())
    target = devices.jax_device(device)
    if target.platform == "cpu":
        # The CPU client may alias the numpy buffer, which is the tensor's
        # memory: a later in-place op on the CPU tensor would show through.
        host = np.array(host, copy=True)
    return jax.device_put(host, target)


def wrap(array, dtype: torch.dtype, device: int) -> torch.Tensor:
    """A fresh contiguous tpu tensor whose storage is `array`."""
    t = torch.empty(tuple(array.shape), dtype=dtype, device=torch.device("tpu", device))
    if t.numel():
        boxes.bind(t.data_ptr(), array)
    return t


def _bind_whole(dst: torch.Tensor, array) -> bool:
    """Rebind dst's box to `array` if dst densely covers its storage."""
    address, nbytes, sizes, strides, offset, _ = _C._tensor_info(dst)
    if tuple(array.shape) != sizes or array.dtype != to_jax(dst.dtype):
        return False
    order = plans.dense_order(sizes, strides, offset, dst.element_size(), nbytes)
    if order is None or order != sorted(order) or not address:
        return False
    boxes.bind(address, array.reshape([sizes[i] for i in order]) if len(order) != len(sizes) else array)
    return True


def _same_tpu_device(dst, src, non_blocking=False):
    return (
        isinstance(src, torch.Tensor)
        and dst.device.type == "tpu"
        and src.device == dst.device
        and not (src.is_complex() and not dst.is_complex())  # (the handler warns)
    )


@special(aten.copy_.default, generic_when=_same_tpu_device)
def copy_(dst: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    if not isinstance(src, torch.Tensor):  # `t.copy_(2.5)`: the number arrives unwrapped
        src = torch.tensor(src, dtype=torch.float64 if type(src) is float else None)
    if src.is_complex() and not dst.is_complex():
        # (ATen's copy_ warning; stacklevel: the user's line, past slow_path)
        warn_once("Casting complex values to real discards the imaginary part", stacklevel=3)
    dst_tpu = dst.device.type == "tpu"
    src_tpu = src.device.type == "tpu"
    if dst_tpu and src_tpu:
        if dst.device == src.device:
            return dispatch.run(aten.copy_.default, (dst, src, non_blocking), {})
        array = jax.device_put(materialize(src), devices.jax_device(dst.device.index))
        return _copy_array_into(dst, array, src.dtype)
    if dst_tpu:
        boxes.drain()
        if dst.numel() == 0:
            return dst
        return _copy_array_into(dst, from_host(src, dst.device.index), src.dtype)
    if src_tpu:
        checks.flush()  # a host read: report failed device-side checks first
        host = to_host(materialize(src))
        if src.is_conj():  # (the lazy bits: the CPU copy resolves them)
            host = host.conj()
        if src.is_neg():
            host = host._neg_view()
        return dst.copy_(host)
    raise RuntimeError(f"torchtpu: copy_ between {dst.device} and {src.device}")


def _copy_array_into(dst, array, src_dtype):
    bits_free = not (dst.is_conj() or dst.is_neg())  # (a lazy conj/neg view stores the conjugate/negation)
    if bits_free and dst.shape == array.shape and dst.dtype == src_dtype and _bind_whole(dst, array):
        return dst
    tmp = wrap(array, src_dtype, dst.device.index)
    return dispatch.run(aten.copy_.default, (dst, tmp, False), {})


def copy_from(src, dst, non_blocking=False):
    return copy_(dst, src, non_blocking)


def copy_from_and_resize(src, dst):
    dst.resize_(src.shape)
    return copy_(dst, src)


def local_scalar_dense(t: torch.Tensor):
    checks.flush()
    value = np.asarray(materialize(t)).reshape(()).item()
    if t.dtype.is_floating_point:
        return float(value)
    if t.dtype == torch.bool:
        return bool(value)
    if t.dtype.is_complex:
        return complex(value)
    return int(value)
