"""Python's cyclic garbage collector paused while a graph compiles.

Tracing a training graph through AOTAutograd and JAX allocates some 10^5
objects that mostly outlive the compile (graphs, jaxprs, caches).  Each time
enough of them survive, CPython runs a full collection over the whole heap --
torch and jax alone are ~4 * 10^5 objects, ~0.1-0.2 s per pass on the 2-core
development machine -- and finds almost nothing to free.  Paused, the
allocations of one compile count as a single young generation: one cheap
collection after it instead of full ones inside it.  The previous state is
restored, so a program that disabled the collector keeps it disabled."""

import contextlib
import gc


@contextlib.contextmanager
def gc_paused():
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
