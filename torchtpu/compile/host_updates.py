"""CPU graph inputs a compiled graph updates from host values only (a
non-capturable optimizer's step count: `step += 1` under a compiled
`opt.step()`): their new values are computed on the host with ATen's CPU
kernels, as inductor's CPU code would, instead of being copied back from the
executable -- a copy that waits for the device, which made every compiled
optimizer step synchronous.

The executable still reads the old values (traced inputs) and computes what
it needs from them itself; it just does not return these.

The usual update, one foreach op over the step counts (`_foreach_add(steps,
1)`), runs as its pointwise op on one vector (`VectorUpdate`): CPU has no
fused foreach kernels, so the foreach op and the copies back cost a dispatch
per parameter each (~100 us a step for 28 parameters, more than the
executable's own launch)."""

import operator

import torch
from torch.fx import GraphModule

from .. import _C

aten = torch.ops.aten


class HostUpdates:
    """`indices`: the mutated placeholders whose new value is computed on the
    host; `run(args)`: those values, from the call's (old) arguments;
    `write(args, values)`: puts them into the arguments."""

    def __init__(self, gm, placeholders, mutated):
        self.indices = []
        self._forward = None
        values = {n.args[0]: n.args[1] for n in gm.graph.nodes
                  if n.op == "call_function" and n.target is aten.copy_.default}
        chosen = []
        for index in mutated:
            value = values.get(placeholders[index])
            if _on_host(placeholders[index]) and _computable_on_host(value):
                self.indices.append(index)
                chosen.append(value)
        if chosen:
            # (its generated code, called without nn.Module's call machinery:
            # this runs on every call of a compiled optimizer step)
            self._forward = _subgraph(gm, placeholders, chosen).forward
        self._vector = VectorUpdate.of(placeholders, self.indices, chosen)

    def run(self, args):
        vector = self._vector
        if vector is None:
            return self._forward(*args) if self._forward is not None else ()
        if vector.checked:
            return vector.run(args)
        values, new = self._forward(*args), vector.run(args)
        if vector.agrees(new, values):
            vector.checked = True
            return new
        self._vector = None
        return values

    def write(self, args, values):
        if self._vector is not None:
            self._vector.write(args, values)
        elif values:  # (one call: an optimizer's step counts are one scalar per parameter)
            torch._foreach_copy_([args[i] for i in self.indices], list(values))


class VectorUpdate:
    """Host values that are the elements of one foreach op over 0-d CPU
    placeholders of one dtype, with constant other arguments, and are written
    back to those placeholders: computed as the op's pointwise counterpart
    on the gathered vector (`_foreach_add(steps, 1)` -> `add(vector, 1)`)
    and scattered back in place.  Its first call checks it against the
    graph's own computation (`agrees`); a disagreement keeps the graph's."""

    __slots__ = ("positions", "order", "op", "rest", "kwargs", "dtype", "checked")

    @classmethod
    def of(cls, placeholders, indices, values):
        """The vector form of these host values, or None."""
        if not values or any(v.op != "call_function" or v.target is not operator.getitem for v in values):
            return None
        foreach = values[0].args[0]
        if (foreach.op != "call_function" or not isinstance(foreach.target, torch._ops.OpOverload)
                or any(v.args[0] is not foreach for v in values)):
            return None
        name = foreach.target._schema.name
        op = getattr(torch.ops.aten, name[len("aten::_foreach_"):], None) if name.startswith("aten::_foreach_") else None
        if op is None or not any(torch.Tag.pointwise in getattr(op, o).tags for o in op.overloads()):
            return None
        operands, *rest = foreach.args
        if (not isinstance(operands, (list, tuple)) or _reads_nodes((rest, foreach.kwargs))
                or any(isinstance(r, (list, tuple)) for r in rest)):
            return None
        # element k of the result goes back to operands[k]: each written once, all of them
        written = {v.args[1]: (placeholders[i], j) for j, (v, i) in enumerate(zip(values, indices))}
        if len(written) != len(operands) or any(written.get(k, (None,))[0] is not p for k, p in enumerate(operands)):
            return None
        metas = [p.meta.get("val") for p in operands]
        if any(not isinstance(m, torch.Tensor) or m.dim() != 0 or m.dtype != metas[0].dtype for m in metas):
            return None
        update = cls()
        update.positions = [placeholders.index(p) for p in operands]
        update.order = [written[k][1] for k in range(len(operands))]  # graph value of element k
        update.op, update.rest, update.kwargs = op, tuple(rest), dict(foreach.kwargs)
        update.dtype = metas[0].dtype
        update.checked = False
        return update

    def run(self, args):
        old = _C._gather_cpu_scalars([args[i] for i in self.positions])
        return self.op(old, *self.rest, **self.kwargs).to(self.dtype)

    def write(self, args, new):
        _C._scatter_cpu_scalars([args[i] for i in self.positions], new)

    def agrees(self, new, graph_values):
        """Whether the vector `new` holds what the graph computes, bit for
        bit (`graph_values`: the graph's, in the HostUpdates' order)."""
        want = torch.stack([graph_values[j] for j in self.order]).to(self.dtype)
        return new.shape == want.shape and new.dtype == want.dtype and torch.equal(new, want)


def _reads_nodes(arguments):
    found = []
    torch.fx.map_arg(arguments, found.append)
    return bool(found)


def _on_host(node):
    """Whether the node's value is CPU tensors (one, or a foreach op's list)."""
    val = node.meta.get("val")
    tensors = list(val) if isinstance(val, (list, tuple)) else [val]
    return all(isinstance(t, torch.Tensor) and t.device.type == "cpu" for t in tensors)


def _computable_on_host(node, seen=None):
    """Whether `node` depends on CPU placeholders, CPU constants and
    deterministic ops with CPU results only (a step count's `_foreach_add`)."""
    seen = set() if seen is None else seen
    if not isinstance(node, torch.fx.Node) or node in seen:
        return True
    seen.add(node)
    if node.op in ("placeholder", "get_attr"):
        return _on_host(node)
    if node.op != "call_function":
        return False
    if node.target is not operator.getitem:  # (of a foreach op's list)
        if not isinstance(node.target, torch._ops.OpOverload):
            return False
        if torch.Tag.nondeterministic_seeded in node.target.tags or node.target._schema.is_mutable:
            return False
    if not _on_host(node):
        return False
    inputs = []
    torch.fx.map_arg((node.args, node.kwargs), inputs.append)
    return all(_computable_on_host(n, seen) for n in inputs)


def _subgraph(gm, placeholders, values):
    """A module taking the graph's arguments and returning `values`,
    computed by the nodes they depend on (in the graph's order)."""
    needed = set()

    def collect(node):
        if isinstance(node, torch.fx.Node) and node not in needed:
            needed.add(node)
            torch.fx.map_arg((node.args, node.kwargs), collect)

    for value in values:
        collect(value)
    graph = torch.fx.Graph()
    copies = {}
    for p in placeholders:
        copies[p] = graph.placeholder(p.name)
    for node in gm.graph.nodes:
        if node in needed and node.op != "placeholder":
            copies[node] = graph.node_copy(node, copies.__getitem__)
    graph.output(tuple(copies[v] for v in values))
    return GraphModule(gm, graph)
