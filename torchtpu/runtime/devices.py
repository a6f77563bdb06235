"""Which JAX devices back `tpu:0..N-1`.

TORCHTPU_PLATFORM=tpu|gpu|cpu picks the JAX platform (default: the best one
JAX finds); TORCHTPU_NUM_DEVICES=N makes N host devices on the CPU platform.
JAX is imported here, on first use, never at `import torch`.
"""

import os
import threading

_lock = threading.RLock()
_devices = None
_platform = None
_forked_after_start = False  # this process was forked from one that had started JAX

FORKED_MESSAGE = (
    "Cannot re-initialize tpu in forked subprocess. To use tpu with multiprocessing, you must use the "
    "'spawn' start method"
)


def _configure_and_list():
    import jax

    from . import compile_cache

    compile_cache.configure()  # before the first compilation, eager kernels included
    # torch's default integer is int64 and float64 is a real dtype there:
    # without x64 JAX would silently narrow them.
    jax.config.update("jax_enable_x64", True)
    _stop_array_tracebacks()
    requested = os.environ.get("TORCHTPU_PLATFORM", "").strip().lower() or None
    if requested == "cuda":
        requested = "gpu"
    num = os.environ.get("TORCHTPU_NUM_DEVICES")
    if num and (requested in (None, "cpu")):
        jax.config.update("jax_num_cpu_devices", int(num))
    if requested is None:
        devices = jax.devices()
    else:
        devices = jax.devices(requested)
    if num and devices and devices[0].platform == "cpu":
        devices = devices[: int(num)]
    return devices


def _stop_array_tracebacks():
    """JAX records the Python stack in every array it creates (for its own
    error messages).  Those records hold the stack's code objects strongly,
    so a tensor's box kept alive the code of the frame that made it -- and
    when that was dynamo's generated code, the compiled graphs and their XLA
    executables that hang off it, even after `torch._dynamo.reset()`.  Our
    users' stacks are PyTorch's, which torch reports itself; recording them
    also cost ~1 us per kernel call.  (jaxlib's switch; JAX has no public one.)"""
    from jax._src.lib import _jax

    if hasattr(_jax, "set_tracebacks_enabled"):
        _jax.set_tracebacks_enabled(False)


def init():
    """Start JAX once and pick the devices; returns the device list."""
    global _devices, _platform
    if _devices is not None:
        return _devices
    with _lock:
        if _devices is None:
            devices = _configure_and_list()
            _platform = devices[0].platform if devices else None
            from .. import memory
            from . import dtypes

            memory._runtime_started(devices)  # allocator capacity = the devices' memory limits
            dtypes.set_platform(_platform)
            os.register_at_fork(after_in_child=_after_fork_in_child)
            _devices = devices
    return _devices


def _after_fork_in_child():
    """A forked child inherits JAX's state but not its runtime threads: any
    kernel or transfer there would wait forever.  Refuse tpu work instead,
    as CUDA does (a DataLoader worker then reports the error)."""
    global _forked_after_start
    _forked_after_start = True
    from .. import _C

    _C._clear_fastpath_cache()  # cached kernels would run without the Python check


def check_not_forked():
    if _forked_after_start:
        raise RuntimeError(FORKED_MESSAGE)


def count() -> int:
    return len(init())


def jax_device(index: int):
    devices = init()
    if not 0 <= index < len(devices):
        raise RuntimeError(
            f"Invalid device ordinal tpu:{index} (torchtpu sees {len(devices)} devices)"
        )
    return devices[index]


def platform() -> str:
    init()
    return _platform


def index_of(jax_dev) -> int:
    return init().index(jax_dev)
