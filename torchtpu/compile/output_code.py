"""Compiled graphs that PyTorch's compile caches can keep.

With `TORCH_CACHING_PRECOMPILE=1` (dynamo's precompile: a process saves with
`torch.compiler.save_cache_artifacts()`, the next loads on its first call) or
`torch._functorch.config.bundled_autograd_cache = True`, PyTorch stores what
the backend's graph compilers return inside its own cache entries.  Then each
graph is a `TpuGraphCode`: it serializes its FX graph, and a process that
loads it skips dynamo's and AOTAutograd's tracing and only rebuilds the
runner (whose XLA executables come from torchtpu's persistent cache).
Otherwise the compilers return the runner itself, as before."""

import contextlib
import contextvars
import dataclasses
import logging
from typing import Any

import torch
from torch._inductor.output_code import OutputCode

from . import stats
from .graph import GraphLowering, Unlowerable
from .options import Options
from .runner import CompiledGraph

log = logging.getLogger("torchtpu.compile")

# The options of the torch.compile call being compiled.  AOTAutograd's cache
# key leaves them out, so a graph it loads for that call runs with these,
# not with those it was saved with; a graph that dynamo's precompile loads
# (no backend call) keeps its saved ones.
_calling_options = contextvars.ContextVar("torchtpu_compile_options", default=None)


@contextlib.contextmanager
def compiling_with(options):
    token = _calling_options.set(options)
    try:
        yield
    finally:
        _calling_options.reset(token)


def caches_keep_graphs() -> bool:
    """Whether PyTorch will put compiled graphs in its caches (they must serialize then)."""
    import torch._functorch.config  # noqa: F401

    return bool(torch._functorch.config.bundled_autograd_cache or torch._dynamo.config.caching_precompile)


def prepare():
    """What compiling or loading a graph needs: the device, the lowerings of
    views and factories inside graphs, the persistent executable cache."""
    import torchtpu.ops.lowerings.graph_only  # noqa: F401

    from ..runtime import compile_cache

    torch.tpu._lazy_init()
    compile_cache.configure()


def graph_runner(gm, name, options):
    """The boxed callable AOTAutograd runs for one graph: one XLA executable
    per input signature, or op by op on tpu where a node has no lowering."""
    from torch._functorch.aot_autograd import make_boxed_func

    try:
        lowering = GraphLowering(gm)
    except Unlowerable as reason:
        log.warning("torchtpu.compile: %s runs op by op in eager mode: %s", name, reason)
        targets = [n.target for n in gm.graph.nodes if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)]
        graph_stats = stats.register(name, fallback=str(reason), ops=targets)

        def op_by_op(*args):
            graph_stats.requests += 1
            return gm.forward(*args)

        return make_boxed_func(op_by_op)
    return make_boxed_func(CompiledGraph(lowering, name, options))


# FX node metadata that neither the runner nor a reloaded graph needs (and
# that does not pickle: dynamo's example values, module stacks).
_UNPICKLED_META = ("nn_module_stack", "source_fn_stack", "example_value")


@dataclasses.dataclass
class TpuGraphCode(OutputCode):
    """One forward/backward/inference graph as PyTorch's caches keep it."""

    gm: torch.fx.GraphModule | None = None
    name: str = ""
    options: dict = dataclasses.field(default_factory=dict)
    _serialized_gm: bytes | None = dataclasses.field(default=None, init=False)
    _run: Any = dataclasses.field(default=None, init=False, repr=False)

    def __post_init__(self):
        # AOTAutograd calls it with the list of inputs.  (An instance
        # attribute: the wrappers AOTAutograd puts around it copy __dict__.)
        self._boxed_call = True
        if self.gm is not None:
            self._run = graph_runner(self.gm, self.name, Options(self.options))

    def __call__(self, inputs):
        return self._run(inputs)

    def prepare_for_serialization(self) -> None:
        from torch.fx._graph_pickler import GraphPickler, Options as PicklerOptions

        for node in self.gm.graph.nodes:
            for key in _UNPICKLED_META:
                node.meta.pop(key, None)
        self._serialized_gm = GraphPickler.dumps(self.gm, PicklerOptions(ops_filter=None))
        self.gm = None
        self._run = None

    def post_compile(self, example_inputs, constants, graph_kwargs) -> None:
        """After loading from a cache: the FX graph back (with fake values in
        its metadata, as the lowering reads them), and its runner."""
        if self._run is not None:
            return
        from torch._subclasses import FakeTensorMode
        from torch.fx._graph_pickler import GraphPickler
        from torch.fx.experimental.symbolic_shapes import ShapeEnv

        gm = GraphPickler.loads(self._serialized_gm, FakeTensorMode(shape_env=ShapeEnv()))
        gm.recompile()
        prepare()
        options = _calling_options.get() or Options(self.options)
        options.dump_graph(self.name, gm)
        self._run = graph_runner(gm, self.name, options)

    def set_triton_bundle(self, triton_bundle: Any) -> None:
        pass
