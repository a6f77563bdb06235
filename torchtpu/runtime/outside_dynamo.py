"""Our Python code runs outside dynamo.

A `torch.compile`d function that graph-breaks runs the eager code between
its graphs with dynamo's frame hook still set, so every Python frame called
from there -- including our kernels, which the C++ dispatcher calls with
tensors in their locals -- is a candidate for dynamo to compile.  Dynamo
would then trace our dispatcher and JAX's tracing under it (failing inside
JAX).  The entry points the C++ side calls, and compilations started outside
them, therefore run through `torch.compiler.disable` once dynamo is loaded
(before that there is no hook to escape, and importing dynamo costs
seconds)."""

import sys

_trampoline = None


def dynamo_loaded() -> bool:
    return "torch._dynamo" in sys.modules


def wrap(fn):
    """`fn` with dynamo's frame hook off while it runs (recursively)."""
    import torch

    return torch.compiler.disable(fn, recursive=True)


def _call_through(fn, *args):
    return fn(*args)


def call(fn, *args):
    """fn(*args), outside dynamo if dynamo is loaded."""
    global _trampoline
    if not dynamo_loaded():
        return fn(*args)
    if _trampoline is None:
        _trampoline = wrap(_call_through)
    return _trampoline(fn, *args)
