"""CPU graph inputs a compiled graph updates from host values only (a
non-capturable optimizer's step count: `step += 1` under a compiled
`opt.step()`): their new values are computed on the host with ATen's CPU
kernels, as inductor's CPU code would, instead of being copied back from the
executable -- a copy that waits for the device, which made every compiled
optimizer step synchronous.

The executable still reads the old values (traced inputs) and computes what
it needs from them itself; it just does not return these."""

import operator

import torch
from torch.fx import GraphModule

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

    def run(self, args):
        return self._forward(*args) if self._forward is not None else ()

    def write(self, args, values):
        if values:  # (one call: an optimizer's step counts are one scalar per parameter)
            torch._foreach_copy_([args[i] for i in self.indices], list(values))


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
