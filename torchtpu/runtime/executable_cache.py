"""Compiled executables on disk, keyed by what we know before tracing.

A cache keyed by the lowered HLO (JAX's persistent cache) makes even a hit
pay for tracing our lowering and lowering it to StableHLO:
30-70 ms per eager kernel, about half a second for a GPT graph -- most of
a warm process's first step.  This cache sits in front of it and is keyed by
what determines that HLO on our side: a kernel's in-memory key (op, view
geometry, dtypes, baked scalars, device) or a graph's code and node
metadata, the argument types, and a fingerprint of everything else a
lowering reads: torchtpu's own source, the torch/jax/jaxlib versions, the
backend and its device kind, XLA flags and JAX's x64 mode.  A hit
deserializes the executable (a few ms) and skips tracing altogether.

Keys are built from a whitelist of value types (`_encode`); a key holding
anything else is not cached here (JAX's cache still applies), so an object
whose repr is not its identity can never alias two kernels.  Files are
written atomically; an unreadable entry is recompiled and rewritten.
"""

import enum
import hashlib
import logging
import os
import pickle
import re
import sys
import tempfile
import threading

import jax
import numpy as np
import torch

from . import compile_cache, outside_dynamo
from .gc_pause import gc_paused

log = logging.getLogger("torchtpu.compile")

_lock = threading.Lock()
_salt = None
stats = {"hits": 0, "misses": 0, "uncacheable": 0}

# Settings of the process that change what a lowering emits without being
# part of any kernel key.
_ENV_SETTINGS = ("XLA_FLAGS", "LIBTPU_INIT_ARGS", "TORCHTPU_PLATFORM", "TORCHTPU_NUM_DEVICES", "JAX_PLATFORMS",
                 "TORCHTPU_PALLAS")


class _Unstable(Exception):
    """A key part with no process-independent encoding."""


class _Uncacheable:
    """A key part that keeps its entry off the disk (has no encoding)."""


UNCACHEABLE = _Uncacheable()


def covers(fn) -> bool:
    """Whether the salt covers `fn`'s source: lowerings registered from
    outside torchtpu make their kernels' keys UNCACHEABLE."""
    return (getattr(fn, "__module__", None) or "").startswith("torchtpu.")


def _encode(value, out):
    """Appends a process-independent encoding of `value` to `out` (a list
    of strings), or raises _Unstable."""
    t = type(value)
    if value is None or t is bool or t is int or t is str:
        out.append(f"{t.__name__}:{value!r}")
    elif t is float:
        out.append(f"float:{value.hex()}")
    elif t is tuple or t is list or t is frozenset:
        items = sorted(value, key=repr) if t is frozenset else value
        out.append(f"{t.__name__}[{len(items)}](")
        for item in items:
            _encode(item, out)
        out.append(")")
    elif t is torch.dtype or t is torch.memory_format or t is torch.layout:
        out.append(str(value))
    elif t is torch.device:
        out.append(f"device:{value}")
    elif isinstance(value, torch._ops.OpOverload):
        out.append(f"op:{value._schema.name}.{value._schema.overload_name}")
    elif t is type:
        out.append(f"type:{value.__module__}.{value.__qualname__}")
    elif isinstance(value, np.dtype):
        out.append(f"np:{_dtype_name(value)}")
    elif isinstance(value, enum.Enum):
        out.append(f"enum:{t.__module__}.{t.__qualname__}.{value.name}")
    else:
        raise _Unstable(t.__name__)


def _dtype_name(dtype):
    """A NumPy dtype's name and byte layout: `.str` alone is '<V1' for every
    1-byte ml_dtypes type (float8_e4m3fn, float8_e5m2fnuz, int4, ...) and
    '<V2' for bfloat16."""
    return f"{dtype.name}{dtype.str}"


def _aval_parts(args):
    out = []
    for a in args:
        if hasattr(a, "shape") and hasattr(a, "dtype"):  # arrays, ShapeDtypeStructs, NumPy scalars
            weak = "w" if getattr(a, "weak_type", False) else ""
            out.append(f"{_dtype_name(np.dtype(a.dtype))}{weak}{tuple(a.shape)}")
        else:  # a Python scalar: traced weakly typed, so its type is its aval
            out.append(f"py:{type(a).__name__}")
    return out


def _source_digest(h):
    """torchtpu's Python sources and its C extension, in path order."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py") or name.endswith(".so"):
                path = os.path.join(folder, name)
                h.update(os.path.relpath(path, root).encode())
                if name.endswith(".py"):
                    with open(path, "rb") as f:
                        h.update(f.read())
                else:  # the extension: its size and mtime stand for its contents
                    st = os.stat(path)
                    h.update(f"{st.st_size}:{st.st_mtime_ns}".encode())


def salt() -> str:
    """Everything outside a kernel's key that a lowering depends on."""
    global _salt
    if _salt is None:
        import jaxlib

        h = hashlib.sha256()
        _source_digest(h)
        device = jax.devices()[0]
        parts = [
            sys.version, torch.__version__, jax.__version__, jaxlib.__version__,
            device.platform, getattr(device, "device_kind", ""), str(len(jax.devices())),
            str(jax.config.jax_enable_x64), str(jax.config.jax_default_matmul_precision),
        ]
        parts += [f"{k}={os.environ.get(k, '')}" for k in _ENV_SETTINGS]
        h.update("\0".join(parts).encode())
        _salt = h.hexdigest()
    return _salt


def _digest(kind, key, args, extra):
    parts = [kind, salt()]
    _encode(key, parts)
    _encode(extra, parts)
    parts.extend(_aval_parts(args))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _path(digest):
    return os.path.join(compile_cache.directory(), "torchtpu-executables", digest[:2], digest)


_runtime_ready = False

# Custom-call targets that need no jaxlib runtime set up (XLA's own markers).
_PLAIN_CUSTOM_CALLS = frozenset({"Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape", "annotate_device_placement"})


def _needs_runtime(lowered):
    """Whether an executable calls jaxlib kernels (LAPACK, the GPU solvers)
    that are set up while lowering: then loading it needs `_prepare_runtime`."""
    targets = set(re.findall(r"custom_call @([\w.$-]+)", lowered.as_text()))
    return bool(targets - _PLAIN_CUSTOM_CALLS)


def _prepare_runtime():
    """Some jaxlib kernels are set up while an op is *lowered*: LAPACK's
    function table (linear algebra on the CPU), the GPU hybrid eigensolver.
    An executable loaded from disk skips lowering and would call them
    uninitialised -- a segfault.  Lowering (not compiling) a tiny function
    that uses them sets them up, once per process, and only before loading
    an executable that calls them (it costs ~0.2 s: LAPACK's table comes
    from scipy)."""
    global _runtime_ready
    if not _runtime_ready:
        import jax.numpy as jnp

        matrix = jax.ShapeDtypeStruct((2, 2), jnp.float32)
        jax.jit(lambda m: (jnp.linalg.cholesky(m), jax.lax.linalg.eig(m))).lower(matrix)
        _runtime_ready = True


def _read(path, device):
    try:
        with open(path, "rb") as f:
            payload, in_tree, out_tree, aux, needs_runtime = pickle.load(f)
        from jax.experimental.serialize_executable import deserialize_and_load

        if needs_runtime:
            _prepare_runtime()

        return deserialize_and_load(payload, in_tree, out_tree, execution_devices=[device]), aux
    except FileNotFoundError:
        return None
    except Exception as e:  # a truncated or stale entry: recompile and overwrite
        log.info("torchtpu: ignoring unreadable cached executable %s: %s", path, e)
        return None


def _write(path, compiled, aux, needs_runtime):
    from jax.experimental.serialize_executable import serialize

    try:
        blob = pickle.dumps(serialize(compiled) + (aux, needs_runtime))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        os.replace(tmp, path)  # atomic: concurrent processes never see half a file
    except Exception as e:  # a full disk or an unpicklable aux costs speed, not correctness
        log.info("torchtpu: could not store executable %s: %s", path, e)


class Entry:
    """One executable's place on disk: `load()` it, or `store()` it after
    compiling.  Inert (loads nothing, stores nothing) when the cache is off
    or the key has no stable encoding."""

    __slots__ = ("path", "device", "needs_runtime")

    def __init__(self, kind, key, args, device, extra=()):
        """`device`: the JAX device the executable runs on."""
        self.path = None
        self.device = device
        self.needs_runtime = True
        if not compile_cache.enabled():
            return
        try:
            self.path = _path(_digest(kind, key, args, extra))
        except _Unstable:
            stats["uncacheable"] += 1

    def load(self):
        """(executable, aux) from disk, or None."""
        if self.path is None:
            return None
        found = _read(self.path, self.device)
        with _lock:
            stats["hits" if found is not None else "misses"] += 1
        return found

    def compile(self, lowered):
        """`lowered.compile()`, remembering whether JAX's own persistent
        cache served it (then it must not be stored: see compile_cache)."""
        before = compile_cache.jax_cache_hits()
        compiled = lowered.compile()
        if compile_cache.jax_cache_hits() != before:
            self.path = None
        if self.path is not None:
            self.needs_runtime = _needs_runtime(lowered)
        return compiled

    def store(self, compiled, aux=None):
        """Writes an executable this entry compiled (see `compile`)."""
        if self.path is not None:
            _write(self.path, compiled, aux, self.needs_runtime)


class LazyExecutable:
    """`jax.jit(fn, **jit_kwargs)`, compiled at its first call -- from disk
    when this (key, argument types) was compiled before.  `aux` is a pair
    (get, set) of facts recorded while tracing, stored with the executable
    and restored on a hit.  A later call whose argument types differ from
    the compiled ones goes through jax.jit, which retraces, as before.
    `used` is set by every call (the kernel cache's recency, see
    ops/kernel_cache.py)."""

    __slots__ = ("fn", "key", "jit_kwargs", "aux", "compiled", "_jitted", "used")

    def __init__(self, fn, key, jit_kwargs, aux=None):
        self.fn = fn
        self.key = key
        self.jit_kwargs = jit_kwargs
        self.aux = aux
        self.compiled = None
        self._jitted = None
        self.used = False

    def __call__(self, *args):
        self.used = True
        compiled = self.compiled
        if compiled is None:
            # (a first call can come from the C++ entry point, in the eager
            # code of a compiled function that graph-broke)
            compiled = outside_dynamo.call(self._compile, args)
        try:
            return compiled(*args)
        except TypeError:  # argument types the executable was not compiled for
            return outside_dynamo.call(self.jitted(), *args)

    def jitted(self):
        if self._jitted is None:
            self._jitted = jax.jit(self.fn, **self.jit_kwargs)
        return self._jitted

    def _compile(self, args):
        extra = tuple(sorted((k, v) for k, v in self.jit_kwargs.items() if k != "out_shardings"))
        (device,) = self.jit_kwargs["out_shardings"].device_set
        entry = Entry("kernel", self.key, args, device, extra)
        found = entry.load()
        if found is not None:
            self.compiled, aux = found
            if self.aux is not None:
                self.aux[1](aux)
        else:
            with gc_paused():
                self.compiled = entry.compile(self.jitted().lower(*args))
            entry.store(self.compiled, self.aux[0]() if self.aux is not None else None)
        return self.compiled
