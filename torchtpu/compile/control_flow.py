"""torch.cond and torch._higher_order_ops.while_loop inside compiled graphs:
their branch / body graphs (FX submodules the graph reads with get_attr)
are lowered like any graph and run under `lax.cond` / `lax.while_loop`, so
the whole graph stays one executable.

A subgraph is lowered only when it is self-contained: no randomness, no
input mutation, no device-side checks (their flags cannot leave a traced
branch); otherwise the graph runs op by op, as for any unlowerable node."""

import jax
import jax.numpy as jnp
import torch
from jax import lax

from ..ops.context import matmul_precision
from ..runtime.dtypes import to_jax

COND = torch.ops.higher_order.cond
WHILE_LOOP = torch.ops.higher_order.while_loop
HIGHER_ORDER_OPS = (COND, WHILE_LOOP)


def subgraph(gm):
    """A branch or loop-body GraphModule as a GraphLowering, or Unlowerable."""
    from .graph import GraphLowering, Unlowerable, _has_symbols
    from .dynamic import node_meta

    sub = GraphLowering(gm)
    metas = [node_meta(p) for p in sub.placeholders]
    if sub.random or sub.generator_inputs or sub.mutated_placeholders or sub.from_constants & set(sub.placeholders):
        raise Unlowerable("a control-flow subgraph with random ops, mutations or CPU inputs")
    if not all(isinstance(m, torch.Tensor) and not _has_symbols(m) for m in metas):
        raise Unlowerable("a control-flow subgraph with non-tensor or dynamic-shape inputs")
    # Trace it once abstractly: device-side checks (index bounds, ...) would
    # need their flags carried out of the traced branch.
    example = [jax.ShapeDtypeStruct(tuple(m.shape), to_jax(m.dtype)) for m in metas]
    try:
        jax.eval_shape(lambda *inputs: _run(sub, inputs, matmul_precision()), *example)
    except Exception as e:  # (a lowering that rejects its arguments, ...)
        raise Unlowerable(f"a control-flow subgraph does not lower: {type(e).__name__}: {e}") from e
    if sub.checks:
        raise Unlowerable("a control-flow subgraph with device-side checks")
    return sub


def check(graph, node):
    """At graph build: the node's subgraphs were lowered (get_attr nodes)."""
    from .graph import Unlowerable

    names = node.args[1:3] if node.target is COND else node.args[0:2]
    if not all(n in graph.subgraphs for n in names):
        raise Unlowerable(f"{node.target} without lowered subgraphs")


def lower(graph, node, env, precision):
    if node.target is COND:
        pred, on_true, on_false, operands = node.args
        branches = [graph.subgraphs[on_true], graph.subgraphs[on_false]]
        values = tuple(jnp.asarray(env[n]) for n in operands)
        predicate = jnp.asarray(env[pred] if isinstance(pred, torch.fx.Node) else pred).reshape(())
        return tuple(lax.cond(predicate, *(_runner(b, precision) for b in branches), values))
    cond_fn, body_fn, carried, additional = node.args
    condition, body = graph.subgraphs[cond_fn], graph.subgraphs[body_fn]
    extra = tuple(jnp.asarray(env[n]) for n in additional)
    start = tuple(jnp.asarray(env[n]) for n in carried)

    def keep_going(state):
        (flag,) = _run(condition, state + extra, precision)
        return jnp.asarray(flag).reshape(())

    def step(state):
        return tuple(_run(body, state + extra, precision))

    return tuple(lax.while_loop(keep_going, step, start))


def _run(sub, values, precision):
    outputs, _ = sub(list(values), None, precision)
    if not isinstance(outputs, (list, tuple)):  # (a subgraph returning one tensor bare)
        outputs = [outputs]
    return [None if o is None else jnp.asarray(o) for o in outputs]


def _runner(sub, precision):
    return lambda values: tuple(_run(sub, values, precision))
