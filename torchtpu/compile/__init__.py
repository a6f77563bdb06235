"""`torch.compile(model, backend="tpu")`: whole graphs to XLA.

Dynamo captures the model, AOTAutograd produces functional aten graphs for
forward and backward (and the optimizer step, when it is compiled too), and
each graph becomes one `jax.jit` through the same lowering table as eager
mode (see backend.py, graph.py, runner.py).  The backend is registered under
the name "tpu" by the `torch_dynamo_backends` entry point and by importing
this module."""

from .backend import tpu_backend  # noqa: F401


def compile_stats() -> dict:
    """Totals and per-graph telemetry: requests, hits, compilations,
    persistent-cache hits, compile seconds, eager-fallback reasons."""
    from . import stats

    return stats.snapshot()


def reset_compile_stats() -> None:
    from . import stats

    stats.reset()


def _register():
    from torch._dynamo import list_backends, register_backend

    if "tpu" not in list_backends(exclude_tags=()):
        register_backend(compiler_fn=tpu_backend, name="tpu")


_register()
