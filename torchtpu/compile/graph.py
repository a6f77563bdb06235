"""An AOTAutograd (aten, functional) FX graph as one JAX function, through the
same lowering table as eager dispatch.

`GraphLowering(gm)` checks once that every node can be lowered (else
`Unlowerable` names the op) and is then called inside `jax.jit` with the
graph inputs as JAX values; it returns the graph outputs and the new values
of graph inputs the graph mutates (`copy_` into a placeholder: BatchNorm
running stats, an optimizer step under compile)."""

import operator

import jax.numpy as jnp
import torch
from torch.fx.node import map_arg

from ..ops.context import LoweringContext
from ..ops.registry import find_graph_lowering
from ..ops.schema import schema_of
from ..runtime.dtypes import to_jax

aten = torch.ops.aten


class Unlowerable(Exception):
    """A node this backend cannot lower (the graph then runs op by op)."""


def _meta(node):
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else node


def _flat_meta(val):
    if isinstance(val, (tuple, list)):
        return [v if isinstance(v, torch.Tensor) or v is None else None for v in val]
    return [val]


def _is_tpu_or_scalar(val):
    return not isinstance(val, torch.Tensor) or val.device.type == "tpu" or val.dim() == 0


class GraphLowering:
    def __init__(self, gm: torch.fx.GraphModule):
        self.gm = gm
        self.placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.output_node = next(n for n in gm.graph.nodes if n.op == "output")
        self.random = False
        self.checks = []
        self.ops = []  # aten overloads, in order (for dumps and stats)
        self.mutated_placeholders = []  # indices of inputs the graph copy_s into
        for node in gm.graph.nodes:
            if node.op == "call_function":
                self._check(node)
            elif node.op in ("call_module", "call_method", "get_attr"):
                raise Unlowerable(f"FX node kind {node.op} ({node.target})")

    def _check(self, node):
        target = node.target
        if target is operator.getitem:
            return
        if not isinstance(target, torch._ops.OpOverload):
            raise Unlowerable(f"{target} is not an aten op")
        for val in _flat_meta(_meta(node)):
            if not _is_tpu_or_scalar(val):
                raise Unlowerable(f"{target} produces a tensor on {val.device}")
        if target is aten.copy_.default:
            if node.args[0].op != "placeholder":
                raise Unlowerable("copy_ into an intermediate")
            index = self.placeholders.index(node.args[0])
            if index not in self.mutated_placeholders:
                self.mutated_placeholders.append(index)
            return
        lowering = find_graph_lowering(target)
        if lowering is None:
            raise Unlowerable(f"no lowering for {target}")
        if schema_of(target).mutated:
            raise Unlowerable(f"in-place {target} in a functional graph")
        self.random = self.random or lowering.random
        self.ops.append(target)

    def __call__(self, inputs, rng, precision):
        """inputs: one value per placeholder (JAX arrays, Python scalars).
        Returns (outputs, {placeholder index: new value})."""
        env = {}
        self.checks = []  # device-side checks of the lowered nodes: (ok, value, message, error, op)
        for node, value in zip(self.placeholders, inputs):
            env[node] = value
        mutations = {}
        for index, node in enumerate(self.gm.graph.nodes):
            if node.op != "call_function":
                continue
            target = node.target
            if target is operator.getitem:
                env[node] = env[node.args[0]][node.args[1]]
            elif target is aten.copy_.default:
                dst = node.args[0]
                meta = _meta(dst)
                value = jnp.broadcast_to(jnp.asarray(env[node.args[1]]).astype(to_jax(meta.dtype)), tuple(meta.shape))
                mutations[self.placeholders.index(dst)] = value
                env[node] = value
                env[dst] = value
            else:
                env[node] = self._lower(node, env, rng, index, precision)
        outputs = map_arg(self.output_node.args[0], lambda n: env[n])
        return outputs, mutations

    def _lower(self, node, env, rng, index, precision):
        op = node.target
        sch = schema_of(op)
        lowering = find_graph_lowering(op)
        values = sch.normalize(map_arg(node.args, lambda n: env[n]), map_arg(node.kwargs, lambda n: env[n]))
        metas = sch.normalize(map_arg(node.args, _meta), map_arg(node.kwargs, _meta))
        positions = sch.lowering_positions
        out_meta = _flat_meta(_meta(node))
        ctx = LoweringContext(op, [metas[i] for i in positions], out_meta, precision, rng if lowering.random else None)
        if lowering.random:
            ctx.stream = index  # each random node draws its own key
        result = lowering.fn(ctx, *[values[i] for i in positions])
        self.checks.extend((ok, value, message, error, str(op)) for ok, value, message, error in ctx.checks)
        return _conform(result, _meta(node), op)


def _conform(result, meta, op):
    """Cast a lowering's results to ATen's dtypes; check shapes."""
    if isinstance(meta, (tuple, list)):
        flat = list(result) if isinstance(result, (tuple, list)) else [result]
        if len(flat) == 1 and isinstance(flat[0], (tuple, list)):
            flat = list(flat[0])
        out = [_conform_one(r, m, op) for r, m in zip(flat, meta)]
        return type(meta)(out) if isinstance(meta, tuple) else out
    if isinstance(result, (tuple, list)):
        result = result[0]
    return _conform_one(result, meta, op)


def _conform_one(value, meta, op):
    if not isinstance(meta, torch.Tensor) or value is None:
        return value
    dtype = to_jax(meta.dtype)
    value = jnp.asarray(value)
    if value.dtype != dtype:
        value = value.astype(dtype)
    shape = tuple(meta.shape)
    if value.shape != shape:
        if 0 in shape:
            return jnp.zeros(shape, dtype)
        raise RuntimeError(f"torchtpu: lowering of {op} returned shape {value.shape}, ATen expects {shape}")
    return value
