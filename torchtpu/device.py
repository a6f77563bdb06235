"""`torch.tpu`: the device module, mirroring `torch.cuda` where it applies.

Importing this module must not import JAX; functions start it on demand."""

import torch

from . import _C

_initialized = False


def _lazy_init():
    """Start the runtime (JAX) if it is not running yet."""
    global _initialized
    if _initialized:
        return
    from .ops.registration import ensure_loaded

    ensure_loaded()
    _initialized = True


def is_initialized() -> bool:
    return _initialized


def is_available() -> bool:
    return device_count() > 0


def device_count() -> int:
    return _C._device_count()


def current_device() -> int:
    return _C._current_device()


def _index(device) -> int:
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = torch.device(device)
    if device.type != "tpu":
        raise ValueError(f"Expected a tpu device, but got: {device}")
    return device.index if device.index is not None else current_device()


def set_device(device) -> None:
    index = _index(device)
    if index >= 0:
        _C._set_device(index)


class device:
    """Context manager that changes the current tpu device."""

    def __init__(self, device):
        self.index = _index(device) if device is not None else -1
        self.previous = -1

    def __enter__(self):
        self.previous = current_device()
        if self.index >= 0 and self.index != self.previous:
            _C._set_device(self.index)

    def __exit__(self, *exc):
        if self.index >= 0 and self.previous != self.index:
            _C._set_device(self.previous)
        return False


def synchronize(device=None) -> None:
    """Wait until all queued work on the device (all devices if None) is done."""
    if not _initialized:
        return
    from .runtime import boxes, devices

    boxes.drain()
    index = None if device is None else _index(device)
    arrays = [entry[0] for entry in list(boxes.boxes.values())]
    if index is not None:
        target = devices.jax_device(index)
        arrays = [a for a in arrays if target in a.devices()]
    import jax

    jax.block_until_ready(arrays)
    from .runtime import checks

    checks.flush()


def _synchronize_hook(index: int) -> None:
    synchronize(index if index >= 0 else None)


# ------------------------------------------------------------------ RNG


def default_generator(index: int) -> torch.Generator:
    """The default torch.Generator of tpu:index (what torch.manual_seed seeds)."""
    return _C._default_generator(index)


def get_rng_state(device="tpu") -> torch.Tensor:
    return default_generator(_index(device)).get_state()


def set_rng_state(new_state: torch.Tensor, device="tpu") -> None:
    default_generator(_index(device)).set_state(new_state)


def get_rng_state_all():
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


def manual_seed(seed: int) -> None:
    default_generator(current_device()).manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for i in range(device_count()):
        default_generator(i).manual_seed(int(seed))


def seed() -> None:
    default_generator(current_device()).seed()


def seed_all() -> None:
    s = default_generator(0).seed()
    for i in range(1, device_count()):
        default_generator(i).manual_seed(s)


def initial_seed() -> int:
    return default_generator(current_device()).initial_seed()


# -------------------------------------------------------------- misc


def _is_in_bad_fork() -> bool:
    return False


def get_amp_supported_dtype():
    return [torch.bfloat16, torch.float16]


# The memory API (torch.cuda.memory_* mirrors) and streams/events live in
# their own modules; torch.tpu exposes them here.
from .memory import *  # noqa: E402,F401,F403
from .memory import __all__ as _memory_all  # noqa: E402
from .streams import *  # noqa: E402,F401,F403
from .streams import __all__ as _streams_all  # noqa: E402
