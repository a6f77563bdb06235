"""Streams and events of `torch.tpu` (mirrors `torch.cuda.Stream`/`Event`).

What a stream is on a tpu
-------------------------
JAX has no user-visible streams: each device executes the computations
submitted to it in submission order.  torchtpu keeps exactly that one queue
per device and is honest about it:

* Every stream of a device -- its default stream, `torch.Stream(device="tpu")`,
  `torch.tpu.Stream()`, pool streams -- is a label on the device's single
  in-order queue.  Stream objects are distinct (ids, priorities, the current
  stream per thread and device, `with stream:`) so CUDA-style code runs
  unchanged, but work on two streams of one device is never reordered or
  overlapped: ordering is *stronger* than CUDA's, never weaker.
* `stream.synchronize()` / `stream.query()` wait for / ask about all work
  submitted to the stream's device; `stream.wait_event(e)` and
  `stream.wait_stream(s)` need no device-side wait (same device: the queue is
  in order; another device: results reach it by a transfer, which itself
  waits for them).
* Priorities are accepted and reported (`Stream.priority`,
  `Stream.priority_range()`), and have no scheduling effect.

Events
------
`event.record(stream)` enqueues a tiny *marker* computation on the stream's
device.  It completes after every computation submitted to that device
before it, so `query()`, `synchronize()` and `wait()` have CUDA's meaning for
device work.  (Host-to-device uploads are not computations; anything that
reads their result waits for them, which is all a program can observe.)

With `enable_timing=True` a per-device waiter thread takes a host timestamp
(`time.perf_counter_ns`) when the marker completes, so
`start.elapsed_time(end)` is the time the *device* took between the two
points, not the time the host spent dispatching.  Resolution: the waiter
needs the GIL to read the clock; while the host thread is busy in Python a
timestamp can be late by up to the interpreter's switch interval (5 ms by
default).  As on CUDA, `elapsed_time` needs both events recorded and
completed (call `end.synchronize()` first).

Re-exported by torch.tpu (torchtpu/device.py).  No JAX import at module
level."""

import atexit
import os
import queue
import threading
import time

import torch

from . import _C

__all__ = [
    "Stream",
    "Event",
    "StreamContext",
    "current_stream",
    "default_stream",
    "set_stream",
    "stream",
]

# c10::DeviceType::PrivateUse1
_DEVICE_TYPE = 20


def _device_index(device) -> int:
    from .device import _index

    return _index(device)


# ------------------------------------------------------------------ markers

_marker_fns: dict = {}  # device index -> compiled zero-input computation on it
_last_marker: dict = {}  # device index -> the newest marker array
_lock = threading.Lock()


def _enqueue_marker(device: int):
    """A marker computation on tpu:`device`, after all work submitted so far."""
    fn = _marker_fns.get(device)
    if fn is None:
        from .device import _lazy_init

        _lazy_init()
        import jax
        import jax.numpy as jnp

        from .runtime import devices

        sharding = jax.sharding.SingleDeviceSharding(devices.jax_device(device))
        # Compiled ahead of time: compiling needs no device, so the first
        # record does not wait behind the work already queued.
        fn = jax.jit(lambda: jnp.zeros((), jnp.int8), out_shardings=sharding).lower().compile()
        _marker_fns[device] = fn
    marker = fn()
    _last_marker[device] = marker
    return marker


def _markers(device=None) -> list:
    """The newest marker of one device (None: of every device)."""
    if device is None:
        return list(_last_marker.values())
    marker = _last_marker.get(device)
    return [] if marker is None else [marker]


# ------------------------------------------------------------------ events


class _EventState:
    __slots__ = ("device", "marker", "timing", "generation", "time_ns", "stamped")

    def __init__(self):
        self.device = -1
        self.marker = None
        self.timing = False
        self.generation = 0
        self.time_ns = None
        self.stamped = threading.Event()


_events: dict = {}  # event id -> _EventState
_waiters: dict = {}  # device index -> (queue of (state, generation, marker), its thread)


def _waiter_loop(q):
    while True:
        item = q.get()
        if item is None:  # (interpreter exit: _stop_waiters)
            return
        state, generation, marker = item
        try:
            marker.block_until_ready()
        except Exception:  # the device failed: the event completes anyway
            pass
        now = time.perf_counter_ns()
        if state.generation == generation:
            state.time_ns = now
            state.stamped.set()


def _waiter(device: int):
    waiter = _waiters.get(device)
    if waiter is None:
        with _lock:
            waiter = _waiters.get(device)
            if waiter is None:
                q = queue.SimpleQueue()
                thread = threading.Thread(
                    target=_waiter_loop, args=(q,), name=f"torchtpu-event-timer-{device}", daemon=True
                )
                thread.start()
                waiter = _waiters[device] = (q, thread)
    return waiter[0]


@atexit.register
def _stop_waiters():
    """Let each waiter finish its markers and return before the interpreter
    finalizes: a daemon thread still blocked in a marker's
    block_until_ready() then was torn down inside C++ and aborted the
    process (SIGABRT at exit after recording a timing event behind work)."""
    for q, _ in _waiters.values():
        q.put(None)
    for _, thread in _waiters.values():
        thread.join()


def _after_fork_in_child():
    # The waiter threads did not survive the fork.
    _waiters.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _record(event_id: int, device: int, stream_id: int, timing: bool) -> None:
    state = _events.get(event_id)
    if state is None:
        state = _events[event_id] = _EventState()
    state.device = device
    state.timing = timing
    state.generation += 1
    state.time_ns = None
    state.stamped.clear()
    state.marker = _enqueue_marker(device)
    if timing:
        _waiter(device).put((state, state.generation, state.marker))


def _query(event_id: int) -> bool:
    state = _events.get(event_id)
    if state is None or state.marker is None:
        return True
    if state.timing:
        return state.stamped.is_set()
    return state.marker.is_ready()


def _synchronize(event_id: int) -> None:
    state = _events.get(event_id)
    if state is None or state.marker is None:
        return
    state.marker.block_until_ready()
    if state.timing:
        state.stamped.wait()
    from .runtime import checks

    checks.flush()  # as CUDA reports device-side asserts at a sync point


def _elapsed(start_id: int, end_id: int) -> float:
    start, end = _events.get(start_id), _events.get(end_id)
    if start is None or end is None or start.marker is None or end.marker is None:
        raise ValueError("Both events must be recorded before calculating elapsed time.")
    if not (start.timing and end.timing):
        raise ValueError("Both events must be created with argument 'enable_timing=True'.")
    start.stamped.wait()
    end.stamped.wait()
    return (end.time_ns - start.time_ns) / 1e6


def _destroy(event_id: int) -> None:
    _events.pop(event_id, None)


def _device_query(device: int) -> bool:
    """Whether all work submitted to tpu:`device` has completed."""
    if not all(m.is_ready() for m in _markers(device)):
        return False
    from .device import _initialized

    if not _initialized:
        return True
    from .runtime import boxes, devices

    target = devices.jax_device(device)
    for array, _ in list(boxes.boxes.values()):
        if not array.is_ready() and target in array.devices():
            return False
    return True


_C._set_event_hooks(_record, _query, _synchronize, _elapsed, _destroy, _device_query)


# ------------------------------------------------------------------ classes


class Stream(torch.Stream):
    """A stream of a tpu device: `torch.tpu.Stream(device=None, priority=0)`.

    A label on the device's single in-order queue (see the module docstring):
    work submitted while it is current runs in submission order with all
    other work of the device.  `query()`, `synchronize()`, `wait_event()`,
    `wait_stream()`, `record_event()` and `with stream:` behave as on CUDA."""

    def __new__(cls, device=None, priority=0, **kwargs):
        if kwargs:  # Stream(stream_id=..., device_index=..., device_type=...)
            return super().__new__(cls, **kwargs)
        index = _device_index(device)
        return super().__new__(cls, device=torch.device("tpu", index), priority=priority)

    @property
    def priority(self) -> int:
        return _C._stream_priority(self.stream_id)

    @staticmethod
    def priority_range():
        """(least, greatest) priority, as torch.cuda.Stream.priority_range()."""
        return _C._stream_priority_range()

    def record_event(self, event=None):
        """Record `event` (a new torch.tpu.Event if None) on this stream."""
        if event is None:
            event = Event()
        event.record(self)
        return event

    def __repr__(self):
        return f"<torch.tpu.Stream device=tpu:{self.device_index} stream_id={self.stream_id}>"


class _EventMeta(type):
    # torch.Event's C++ methods insist on exactly torch.Event (elapsed_time
    # rejects subclasses), so a tpu event *is* a torch.Event; this class
    # makes one and recognises them.
    def __call__(cls, enable_timing=False, blocking=False, interprocess=False):
        if interprocess:
            raise NotImplementedError("torchtpu: interprocess tpu events are not supported")
        return torch.Event(device=torch.device("tpu"), enable_timing=enable_timing, blocking=blocking)

    def __instancecheck__(cls, obj):
        return isinstance(obj, torch.Event) and obj.device.type == "tpu"


class Event(metaclass=_EventMeta):
    """A tpu event: `torch.tpu.Event(enable_timing=False, blocking=False,
    interprocess=False)` returns a `torch.Event` on the tpu device (and
    `isinstance(e, torch.tpu.Event)` holds for those).

    `record(stream=None)` marks the point after all work submitted so far to
    the stream's device (see the module docstring); `query()`,
    `synchronize()`, `wait(stream)` and, with `enable_timing=True`,
    `elapsed_time(end)` in milliseconds of device time.  `blocking` is
    accepted (synchronize always blocks the calling thread); interprocess
    events are not supported."""


def _wrap(packed) -> Stream:
    stream_id, device_index = packed
    return Stream(stream_id=stream_id, device_index=device_index, device_type=_DEVICE_TYPE)


def current_stream(device=None) -> Stream:
    """The calling thread's current stream on a device (default: current device)."""
    return _wrap(_C._current_stream(_device_index(device)))


def default_stream(device=None) -> Stream:
    """The default stream of a device (default: current device)."""
    return _wrap(_C._default_stream(_device_index(device)))


def set_stream(stream) -> None:
    """Make `stream` current on its device, and its device current (as
    torch.cuda.set_stream)."""
    if stream is None:
        return
    _check_tpu_stream(stream)
    _C._set_device(stream.device_index)
    _C._exchange_stream(stream.stream_id, stream.device_index)


def _check_tpu_stream(stream):
    if stream.device_type != _DEVICE_TYPE:
        raise ValueError(f"Expected a tpu stream, but got a stream of {stream.device}")


class StreamContext:
    """Context manager that makes a stream current (torch.cuda.StreamContext):
    on entry its device becomes current too; both are restored on exit.
    `None` is a no-op."""

    def __init__(self, stream):
        self.stream = stream
        self.src_device = -1
        self.src_prev_stream = None
        self.dst_prev_stream = None

    def __enter__(self):
        s = self.stream
        if s is None:
            return self
        _check_tpu_stream(s)
        self.src_device = _C._current_device()
        self.src_prev_stream = _C._current_stream(self.src_device)
        if s.device_index != self.src_device:
            _C._set_device(s.device_index)
        self.dst_prev_stream = _C._exchange_stream(s.stream_id, s.device_index)
        return self

    def __exit__(self, *exc):
        s = self.stream
        if s is None:
            return False
        _C._exchange_stream(*self.dst_prev_stream)
        if s.device_index != self.src_device:
            _C._exchange_stream(*self.src_prev_stream)
            _C._set_device(self.src_device)
        return False


def stream(stream) -> StreamContext:
    """`with torch.tpu.stream(s):` -- run the block with `s` current."""
    return StreamContext(stream)
