"""The "tpu" dynamo backend: AOTAutograd for forward and backward graphs,
each lowered to one `jax.jit` through the eager lowering table.

A graph with a node that cannot be lowered runs op by op on `tpu` (eager
dispatch, CPU fallback included) with a log line naming the op: slow,
never wrong."""

import itertools
import logging

import torch

from ..ops.registry import LOWERINGS, VIEW_LOWERINGS, find_graph_lowering
from ..runtime.gc_pause import gc_paused
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


_decomposition_table = {}
# Ops outside core aten that eager mode runs through their composite kernels
# and PyTorch has decompositions for: without one a graph holding them ran
# op by op (torch.dist; _batch_norm_with_update called directly)
_MORE_DECOMPOSED = (torch.ops.aten.dist.default, torch.ops.aten.batch_norm_backward.default,
                    torch.ops.aten._batch_norm_with_update_functional.default)


def decompositions():
    """PyTorch's core-aten decompositions for ops we do not lower; ops we
    lower (addmm, convolution, the norms, ...) stay whole for XLA.

    Built once per state of the lowering tables: building it costs ~0.15 s,
    which every graph (each graph break) of a cold or warm start paid."""
    from torch._decomp import core_aten_decompositions, decomposition_table

    version = (len(LOWERINGS), len(VIEW_LOWERINGS))
    if version not in _decomposition_table:
        table = dict(core_aten_decompositions())
        table.update((op, decomposition_table[op]) for op in _MORE_DECOMPOSED if op in decomposition_table)
        table = {op: fn for op, fn in table.items() if find_graph_lowering(op) is None}
        _decomposition_table.clear()
        _decomposition_table[version] = table
    return _decomposition_table[version]


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
