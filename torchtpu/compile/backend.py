"""The "tpu" dynamo backend: AOTAutograd for forward and backward graphs,
each lowered to one `jax.jit` through the eager lowering table.

A graph with a node that cannot be lowered runs op by op on `tpu` (eager
dispatch, CPU fallback included) with a log line naming the op: slow,
never wrong."""

import itertools
import logging

import torch

from ..runtime.gc_pause import gc_paused
from .decompositions import decompositions
from .options import Options
from .output_code import TpuGraphCode, caches_keep_graphs, compiling_with, graph_runner, prepare

_counter = itertools.count()
log = logging.getLogger("torchtpu.compile")

_noted_modes = set()


def _check_mode(mode):
    """torch.compile's modes are inductor's (torch._inductor.list_mode_options):
    none changes what this backend does -- each graph is one XLA executable
    already -- so a known one is noted and ignored, an unknown one refused as
    inductor refuses it."""
    if mode is None or mode == "default":
        return
    from torch._inductor import list_mode_options  # (only when a mode is given)

    modes = list(list_mode_options())
    if mode not in modes:
        raise RuntimeError(f"Unrecognized mode={mode}, should be one of: {', '.join(modes)}")
    if mode not in _noted_modes:
        _noted_modes.add(mode)
        log.warning("torchtpu.compile: mode=%r has no effect with backend='tpu' (every graph is one XLA "
                    "executable already); use options={...} for this backend's settings", mode)


def _compiler(options, kind, graph_id):
    name = f"graph{graph_id}_{kind}"

    def compile_graph(gm, example_inputs):
        options.dump_graph(name, gm)
        return graph_runner(gm, name, options)

    def compile_serializable_graph(gm, example_inputs):
        options.dump_graph(name, gm)
        return TpuGraphCode(gm, name, options.raw)

    if caches_keep_graphs():
        from torch._functorch._aot_autograd.schemas import SerializableAOTDispatchCompiler

        return SerializableAOTDispatchCompiler(TpuGraphCode, compile_serializable_graph)
    return compile_graph


def tpu_backend(gm, example_inputs, options=None, mode=None, **kwargs):
    """torch.compile(model, backend="tpu", options={...}): see options.py."""
    from torch._dynamo.backends.common import aot_autograd

    from . import upstream_fixes

    _check_mode(mode)
    prepare()
    opts = Options(options)
    graph_id = next(_counter)
    backend = aot_autograd(
        fw_compiler=_compiler(opts, "forward", graph_id),
        bw_compiler=_compiler(opts, "backward", graph_id),
        inference_compiler=_compiler(opts, "inference", graph_id),
        decompositions=decompositions(),
        keep_inference_input_mutations=True,
    )
    with gc_paused(), compiling_with(opts):  # AOTAutograd's tracing and partitioning (or its cache)
        return backend(upstream_fixes.rewrite(gm), example_inputs)
