"""`torch.tpu`: the device module, mirroring `torch.cuda` where it applies.

Importing this module must not import JAX; functions start it on demand."""

import uuid

import torch

from . import _C

_initialized = False


def _lazy_init():
    """Start the runtime (JAX) if it is not running yet."""
    global _initialized
    from .runtime import devices

    devices.check_not_forked()
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
    if not isinstance(device, torch.device):  # (torch.cuda's error for, e.g., a float)
        raise ValueError(f"Expected a torch.device with a specified index or an integer, but got:{device}")
    if device.type != "tpu":
        raise ValueError(f"Expected a tpu device, but got: {device}")
    return device.index if device.index is not None else current_device()


def _checked_index(device) -> int:
    """The device's index, which must name a device (CUDA rejects an ordinal
    it has no device for)."""
    i = _index(device)
    count = device_count()
    if not 0 <= i < count:
        raise RuntimeError(f"Invalid device argument {i}: torchtpu has {count} tpu device(s)")
    return i


def set_device(device) -> None:
    index = _index(device)
    if index >= 0:
        _C._set_device(index)


class device:
    """Context manager that changes the current tpu device (`idx`, and the
    one before it `prev_idx`, as torch.cuda.device)."""

    def __init__(self, device):
        self.idx = _index(device) if device is not None else -1
        self.prev_idx = -1

    def __enter__(self):
        self.prev_idx = current_device()
        if self.idx >= 0 and self.idx != self.prev_idx:
            _C._set_device(self.idx)

    def __exit__(self, *exc):
        if self.idx >= 0 and self.prev_idx != self.idx:
            _C._set_device(self.prev_idx)
        return False


def synchronize(device=None) -> None:
    """Wait until all work submitted to the device (every device if None) is
    done -- kernels, transfers and recorded events -- and raise the first
    failed device-side check, as CUDA raises a device-side assert."""
    index = None if device is None else _checked_index(device)
    if not _initialized:
        return
    from . import streams
    from .runtime import boxes, devices

    devices.check_not_forked()

    boxes.drain()
    arrays = [entry[0] for entry in list(boxes.boxes.values())]
    if index is not None:
        target = devices.jax_device(index)
        arrays = [a for a in arrays if target in a.devices()]
    arrays += streams._markers(index)
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


class _DefaultGenerators:
    """`torch.tpu.default_generators`, as `torch.cuda.default_generators`;
    a sequence built on demand (its length starts the runtime)."""

    def __getitem__(self, index: int) -> torch.Generator:
        if not -device_count() <= index < device_count():
            raise IndexError(f"tpu:{index} does not exist ({device_count()} devices)")
        return default_generator(index % device_count())

    def __len__(self) -> int:
        return device_count()


default_generators = _DefaultGenerators()


def _get_generator(device: torch.device) -> torch.Generator:
    """The default generator of `device` (AOTAutograd's graph-safe RNG:
    checkpointed random ops replay their draws through generators cloned
    from it)."""
    return default_generator(_index(device))


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


# ------------------------------------------------------------ properties


class _TpuDeviceProperties:
    """What `torch.tpu.get_device_properties()` returns (the fields of
    torch.cuda's `_CudaDeviceProperties` that have a meaning here).

    name: the JAX device kind ("TPU v5 lite", "cpu", ...); platform: "tpu",
    "gpu" or "cpu"; total_memory: bytes the device can hold (PJRT's
    `bytes_limit`; the host's physical memory on the CPU platform);
    major/minor: see get_device_capability; id, process_index: JAX's;
    num_cores: cores per device where JAX reports it (else 1), also as
    CUDA's multi_processor_count; uuid: a stable id of (platform, kind,
    process, device id); is_integrated: False (its memory is its own)."""

    __slots__ = ("name", "platform", "total_memory", "major", "minor", "id", "process_index", "num_cores",
                 "multi_processor_count", "uuid", "is_integrated")

    def __init__(self, **fields):
        for key, value in fields.items():
            setattr(self, key, value)

    def __repr__(self):
        return (
            f"_TpuDeviceProperties(name='{self.name}', platform='{self.platform}', "
            f"major={self.major}, minor={self.minor}, total_memory={self.total_memory // (1024 * 1024)}MB, "
            f"num_cores={self.num_cores})"
        )


_properties: dict = {}


def _jax_device(device):
    _lazy_init()
    from .runtime import devices

    index = _index(device)
    devices.jax_device(index)  # raises for a bad index
    return index, devices.jax_device(index)


def _capability(dev) -> tuple:
    if dev.platform == "gpu":
        cc = getattr(dev, "compute_capability", None)
        if cc:
            major, _, minor = str(cc).partition(".")
            return int(major), int(minor or 0)
    if dev.platform == "tpu":
        import re

        match = re.search(r"(\d+)", dev.device_kind)
        if match:
            return int(match.group(1)), 0
    return 0, 0


def _total_memory(dev) -> int:
    try:
        stats = dev.memory_stats()
    except Exception:
        stats = None
    if stats and stats.get("bytes_limit"):
        return int(stats["bytes_limit"])
    import os

    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def get_device_properties(device=None) -> _TpuDeviceProperties:
    """Properties of a tpu device (default: the current one)."""
    index, dev = _jax_device(device)
    props = _properties.get(index)
    if props is None:
        major, minor = _capability(dev)
        props = _properties[index] = _TpuDeviceProperties(
            name=str(dev.device_kind),
            platform=dev.platform,
            total_memory=_total_memory(dev),
            major=major,
            minor=minor,
            id=int(dev.id),
            process_index=int(getattr(dev, "process_index", 0)),
            num_cores=int(getattr(dev, "num_cores", None) or 1),
            is_integrated=False,
        )
        props.multi_processor_count = props.num_cores
        props.uuid = uuid.uuid5(uuid.NAMESPACE_OID, f"{dev.platform}:{dev.device_kind}:{props.process_index}:{dev.id}")
    return props


def get_device_name(device=None) -> str:
    """The device's kind as JAX reports it, e.g. "TPU v5 lite" ("cpu" when
    JAX's CPU platform stands in for the TPU)."""
    return get_device_properties(device).name


def get_device_capability(device=None) -> tuple:
    """(major, minor) of a device: the TPU generation (v4 -> (4, 0), v5e ->
    (5, 0)), the compute capability on the GPU platform, (0, 0) on the CPU
    platform.  (torch.accelerator.get_device_capability reports the
    supported dtypes instead.)"""
    props = get_device_properties(device)
    return props.major, props.minor


# -------------------------------------------------------------- misc


def _is_in_bad_fork() -> bool:
    from .runtime import devices

    return devices._forked_after_start


def get_amp_supported_dtype():
    """The dtypes torch.autocast("tpu", dtype=...) accepts."""
    return [torch.bfloat16, torch.float16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


# torch.cuda names that code written for CUDA calls unconditionally.
OutOfMemoryError = torch.OutOfMemoryError


def init() -> None:
    """Initialise the device now (it otherwise starts on first use)."""
    _lazy_init()


class device_of(device):
    """Context manager: the current device becomes `obj`'s (a no-op for a
    CPU tensor), as torch.cuda.device_of."""

    def __init__(self, obj):
        super().__init__(obj.get_device() if obj.device.type == "tpu" else -1)


def can_device_access_peer(device: int, peer_device: int) -> bool:
    """Whether `device` reads `peer_device`'s memory directly: tpu-to-tpu
    copies go through XLA's transfers, never a peer mapping."""
    _index(device), _index(peer_device)
    return False


def ipc_collect() -> None:
    """No interprocess tpu memory to collect (tensors are not shared across
    processes)."""


def is_current_stream_capturing() -> bool:
    """Always False: there are no tpu graphs being captured."""
    return False


# torch.serialization looks for `_utils._get_device_index` on a backend's
# device module to map "tpu" (no index) to the current device, as for CUDA.
from . import _utils  # noqa: E402,F401


# The memory API (torch.cuda.memory_* mirrors) and streams/events live in
# their own modules; torch.tpu exposes them here.
from .memory import *  # noqa: E402,F401,F403
from .memory import __all__ as _memory_all  # noqa: E402
from .streams import *  # noqa: E402,F401,F403
from .streams import __all__ as _streams_all  # noqa: E402
from . import amp  # noqa: E402,F401  (torch.tpu.amp, as torch.cuda.amp)
from .legacy_types import *  # noqa: E402,F401,F403  (torch.tpu.FloatTensor, ...)
