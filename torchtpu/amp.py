"""torch.tpu.amp: the device-specific AMP names that torch.cuda.amp still
keeps (deprecated there in favour of torch.amp), so CUDA code that uses them
runs on tpu: `autocast`, `GradScaler`, `custom_fwd`, `custom_bwd`.  Each
forwards to torch.amp with device "tpu" and warns as CUDA's do."""

import functools
import warnings

import torch

__all__ = ["autocast", "GradScaler", "custom_fwd", "custom_bwd"]


def _deprecated(old, new):
    warnings.warn(f"`torch.tpu.amp.{old}` is deprecated. Please use `{new}` instead.", FutureWarning, stacklevel=3)


class autocast(torch.amp.autocast):
    def __init__(self, enabled=True, dtype=torch.float16, cache_enabled=True):
        _deprecated("autocast(args...)", 'torch.amp.autocast("tpu", args...)')
        super().__init__("tpu", enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)


class GradScaler(torch.amp.GradScaler):
    def __init__(self, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000, enabled=True):
        _deprecated("GradScaler(args...)", 'torch.amp.GradScaler("tpu", args...)')
        super().__init__("tpu", init_scale=init_scale, growth_factor=growth_factor, backoff_factor=backoff_factor,
                         growth_interval=growth_interval, enabled=enabled)


def custom_fwd(fwd=None, *, cast_inputs=None):
    _deprecated("custom_fwd(args...)", 'torch.amp.custom_fwd(args..., device_type="tpu")')
    if fwd is None:
        return functools.partial(torch.amp.custom_fwd, device_type="tpu", cast_inputs=cast_inputs)
    return torch.amp.custom_fwd(fwd, device_type="tpu", cast_inputs=cast_inputs)


def custom_bwd(bwd=None):
    _deprecated("custom_bwd(args...)", 'torch.amp.custom_bwd(args..., device_type="tpu")')
    if bwd is None:
        return functools.partial(torch.amp.custom_bwd, device_type="tpu")
    return torch.amp.custom_bwd(bwd, device_type="tpu")
