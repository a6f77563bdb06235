"""Where compiled executables persist across processes, on by default.

TORCHTPU_COMPILE_CACHE_DIR moves it (default: ~/.cache/torchtpu/xla, or
$XDG_CACHE_HOME/torchtpu/xla); TORCHTPU_COMPILE_CACHE=0 turns it off.  A
second process compiling the same eager kernel or graph loads the
executable from disk (executable_cache.py); `persistent_hits()` counts those
loads.

JAX's own persistent cache is left off: our cache, keyed before tracing,
covers what it would, and an executable JAX loaded from its cache cannot be
serialized again on XLA:CPU (the copy lacks its kernels' object code).  If a
user turns JAX's cache on anyway, `jax_cache_hits()` lets ours skip storing
what JAX served."""

import os
import threading

_lock = threading.Lock()
_configured = False
_jax_hits = 0


def _on_event(event, **kwargs):
    global _jax_hits
    if event == "/jax/compilation_cache/cache_hits":
        _jax_hits += 1


def directory():
    explicit = os.environ.get("TORCHTPU_COMPILE_CACHE_DIR")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "torchtpu", "xla")


def enabled() -> bool:
    return os.environ.get("TORCHTPU_COMPILE_CACHE", "1").strip().lower() not in ("0", "false", "off", "no")


def configure():
    """Listen for JAX cache hits (once, before compiling)."""
    global _configured
    if _configured:
        return
    with _lock:
        if _configured:
            return
        import jax.monitoring

        jax.monitoring.register_event_listener(_on_event)
        _configured = True


def jax_cache_hits() -> int:
    """Executables JAX loaded from its own persistent cache (if a user set one)."""
    return _jax_hits


def persistent_hits() -> int:
    """Executables loaded from our cache on disk so far."""
    from . import executable_cache

    return executable_cache.stats["hits"]
