"""Graph outputs that are views -- of a graph input, or of another output --
returned as real views, as eager PyTorch returns them: the graph's view
ops replayed on the real tensor (no kernel runs: views only set geometry).

Besides keeping aliasing (a write through one output reaches the other),
this is what makes such outputs right under dynamic shapes: AOTAutograd
rebuilds an aliased output from our tensor's geometry when the view has
symbolic arguments (it cannot replay those itself), so a copy at offset 0
would come back shifted."""

import torch

from .dynamic import SIZE_QUERIES, SYMBOLIC_OPS


def _copied_into_inputs(graph, placeholders):
    """{value node: placeholder} for each `copy_(input, value)` of the same
    shape and dtype: after the write-back the real input holds that value."""
    copied = {}
    for n in graph.nodes:
        if n.op == "call_function" and n.target is torch.ops.aten.copy_.default and n.args[0] in placeholders:
            dst, src = n.args[0].meta.get("val"), n.args[1].meta.get("val") if isinstance(n.args[1], torch.fx.Node) else None
            if isinstance(dst, torch.Tensor) and isinstance(src, torch.Tensor) and dst.dtype == src.dtype and (
                [str(d) for d in dst.shape] == [str(d) for d in src.shape]
            ):
                copied[n.args[1]] = n.args[0]
    return copied


def view_of_returned(node, placeholders, out_nodes):
    """(root, the node its value stands for, nodes to evaluate in order) when
    output `node` is, through view ops only, a view of a graph input or of
    another returned output; else None (a view of an intermediate nobody
    returns is computed like any output).  A view of an input the graph
    mutates -- of the input itself, or of the new value copied into it -- is
    replayed on the input after the write-back: an alias shows the new
    values, as in eager (and under dynamic shapes, where AOTAutograd rebuilds
    such an alias from our tensor's geometry, gets the right offset)."""
    copied = _copied_into_inputs(node.graph, placeholders) if isinstance(node, torch.fx.Node) else {}
    chain = []
    while isinstance(node, torch.fx.Node) and node not in placeholders and node not in copied:
        target = node.target
        if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload) or not target.is_view:
            break
        chain.append(node)
        node = node.args[0]
    if not chain or not isinstance(node, torch.fx.Node):
        return None
    stands_for = node
    node = copied.get(node, node)
    if node in placeholders:
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor) or val.device.type != "tpu":
            return None
    elif not any(node is n for n in out_nodes):
        return None
    known = set(chain) | set(placeholders) | {node, stands_for}
    sizes = []  # size arithmetic the view arguments need (s0 * s1), in graph order
    pending = list(chain)
    while pending:
        n = pending.pop()
        used = []
        torch.fx.node.map_arg((n.args, n.kwargs), used.append)
        for u in used:
            if u in known:
                continue
            if u.op != "call_function" or (u.target not in SYMBOLIC_OPS and u.target not in SIZE_QUERIES):
                return None  # a view argument computed from tensor data
            known.add(u)
            sizes.append(u)
            pending.append(u)
    order = {n: i for i, n in enumerate(node.graph.nodes)}
    return node, stands_for, sorted(sizes, key=order.__getitem__) + chain[::-1]


def fill(outputs, sources, placeholders, out_nodes, args):
    """Replaces each ("view", (root, stands_for, chain)) entry of `sources` by the view
    of its root's real tensor (an input, or an output already in `outputs`):
    `chain` (the size arithmetic, then the view ops) evaluated on real values."""
    for i, (kind, ref) in enumerate(sources):
        if kind != "view":
            continue
        root, stands_for, chain = ref
        if root in placeholders:
            base = args[placeholders.index(root)]
        else:
            base = outputs[next(k for k, n in enumerate(out_nodes) if n is root)]
        env = dict(zip(placeholders, args))
        env[root] = env[stands_for] = base
        for n in chain:
            call_args, call_kwargs = torch.fx.node.map_arg((n.args, n.kwargs), env.__getitem__)
            env[n] = n.target(*call_args, **call_kwargs)
        outputs[i] = env[chain[-1]]
