"""Graph outputs that are views -- of a graph input, or of another output --
returned as real views, as eager PyTorch returns them: the graph's view
ops replayed on the real tensor (no kernel runs: views only set geometry).

Besides keeping aliasing (a write through one output reaches the other),
this is what makes such outputs right under dynamic shapes: AOTAutograd
rebuilds an aliased output from our tensor's geometry when the view has
symbolic arguments (it cannot replay those itself), so a copy at offset 0
would come back shifted."""

import operator

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


def _is_view(node):
    return (isinstance(node, torch.fx.Node) and node.op == "call_function"
            and isinstance(node.target, torch._ops.OpOverload) and node.target.is_view)


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
        if node.op == "call_function" and node.target is operator.getitem and _is_view(node.args[0]):
            chain.append(node)  # one piece of split / chunk / unbind
            node = node.args[0]
            continue
        if not _is_view(node):
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


class Replay:
    """One returned view, as a function (args, outputs) -> the real view of
    its root's real tensor (an input, or an output already in `outputs`):
    `chain` (the size arithmetic, then the view ops) evaluated on real
    values.  Where the root sits and which inputs the chain reads are worked
    out once, at build time (a training step's forward returns a dozen such
    views -- the weights' transposes -- on every call)."""

    __slots__ = ("root", "stands_for", "chain", "arg_index", "out_index", "reads", "steps")

    def __init__(self, view, placeholders, out_nodes):
        self.root, self.stands_for, self.chain = view
        self.arg_index = placeholders.index(self.root) if self.root in placeholders else None
        self.out_index = None if self.arg_index is not None else next(
            k for k, n in enumerate(out_nodes) if n is self.root
        )
        used = []
        for n in self.chain:
            torch.fx.node.map_arg((n.args, n.kwargs), used.append)
        self.reads = [(p, placeholders.index(p)) for p in dict.fromkeys(used) if p in placeholders]
        self.steps = _single_steps(self.chain, self.root, self.stands_for, self.reads)

    def __call__(self, args, outputs):
        base = args[self.arg_index] if self.arg_index is not None else outputs[self.out_index]
        if self.steps is not None:
            # (the usual chain: view ops on the root with constant arguments)
            for target, rest in self.steps:
                base = target(base, *rest)
            return base
        env = {p: args[i] for p, i in self.reads}
        env[self.root] = env[self.stands_for] = base
        for n in self.chain:
            call_args, call_kwargs = torch.fx.node.map_arg((n.args, n.kwargs), env.__getitem__)
            env[n] = n.target(*call_args, **call_kwargs)
        return env[self.chain[-1]]


def _single_steps(chain, root, stands_for, reads):
    """The chain as (op, constant arguments after the first) steps, each
    taking the previous result first, when it is that simple (no size
    arithmetic, no other input read, no keyword arguments); else None."""
    if any(p is not root for p, _ in reads):
        return None
    steps = []
    previous = (root, stands_for)
    for n in chain:
        if n.kwargs or not n.args or all(n.args[0] is not p for p in previous):
            return None
        used = []
        torch.fx.node.map_arg(n.args[1:], used.append)
        if used:
            return None
        steps.append((n.target, tuple(n.args[1:])))
        previous = (n,)
    return steps


def returned_view(node, placeholders, out_nodes):
    """`view_of_returned` as a Replay, or None."""
    view = view_of_returned(node, placeholders, out_nodes)
    return Replay(view, placeholders, out_nodes) if view is not None else None


def fill(outputs, sources, args):
    """Puts each ("view", Replay) entry of `sources` into `outputs`, after
    the tensors it views."""
    for i, (kind, ref) in enumerate(sources):
        if kind == "view":
            outputs[i] = ref(args, outputs)
