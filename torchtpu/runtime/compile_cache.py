"""JAX's persistent compilation cache, on by default.

TORCHTPU_COMPILE_CACHE_DIR moves it (default: ~/.cache/torchtpu/xla, or
$XDG_CACHE_HOME/torchtpu/xla); TORCHTPU_COMPILE_CACHE=0 turns it off.  A
second process compiling the same graph loads the executable from disk;
`persistent_hits()` counts those loads (JAX's monitoring events)."""

import os
import threading

_lock = threading.Lock()
_configured = False
_hits = 0


def _on_event(event, **kwargs):
    global _hits
    if event == "/jax/compilation_cache/cache_hits":
        _hits += 1


def directory():
    explicit = os.environ.get("TORCHTPU_COMPILE_CACHE_DIR")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "torchtpu", "xla")


def enabled() -> bool:
    return os.environ.get("TORCHTPU_COMPILE_CACHE", "1").strip().lower() not in ("0", "false", "off", "no")


def configure():
    """Point JAX at the cache directory (once, before compiling)."""
    global _configured
    if _configured:
        return
    with _lock:
        if _configured:
            return
        import jax
        import jax.monitoring

        jax.monitoring.register_event_listener(_on_event)
        if enabled():
            path = directory()
            os.makedirs(path, exist_ok=True)
            jax.config.update("jax_compilation_cache_dir", path)
            # Cache every executable: graph compiles are seconds, eager
            # kernels tens of milliseconds each -- both worth keeping.
            jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
            jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
        _configured = True


def persistent_hits() -> int:
    return _hits
