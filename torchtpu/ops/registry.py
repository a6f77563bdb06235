"""The lowering table: aten overload -> JAX function with torch's semantics.

One table serves eager dispatch and torch.compile.  A lowering is called as
`fn(ctx, *args)` with the op's arguments in schema order: tensors as JAX
arrays (already read through their views), Scalars as traced JAX scalars
(unless named `static`), everything else as Python values.  It returns the
op's *functional* results: its own returns, followed by the new values of
the arguments the op mutates (torchgen's convention for functional
variants), so `add_`, `add.out` and `add` share one lowering.

Lowerings are grouped by op family in torchtpu/ops/lowerings/.
"""

from dataclasses import dataclass, field

import torch

aten = torch.ops.aten


@dataclass(frozen=True)
class Lowering:
    fn: object
    static: frozenset = field(default_factory=frozenset)  # Scalar args baked into the kernel
    random: object = False  # needs ctx.rng_key(): True, or fn(*meta args) -> bool for some calls only
    traced: frozenset = field(default_factory=frozenset)  # float args passed traced, like Scalars
    meta: object = None  # output metadata where ATen has no meta kernel: fn(*meta args) -> meta tensor(s)
    accepts: object = None  # fn(*meta args) -> False for calls it cannot lower (they fall back to the CPU)

    def is_random(self, args, kwargs):
        """Whether this call draws random numbers (gets a PRNG key)."""
        return bool(self.random(*args, **kwargs)) if callable(self.random) else self.random


LOWERINGS: dict = {}

# Lowerings of view ops, for graphs only (torch.compile).  In eager mode views
# are ATen's own metadata kernels (they must alias); inside a compiled graph
# a view is just a value computed from its input.
VIEW_LOWERINGS: dict = {}


def known_to_dispatcher(op) -> bool:
    """False for TorchScript-only overloads (e.g. `index.Tensor_hacked_twin`)."""
    try:
        torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CPU")
        return True
    except RuntimeError:
        return False


def _overloads(target):
    if isinstance(target, torch._ops.OpOverloadPacket):
        return [getattr(target, name) for name in target.overloads()]
    return [target]


def lower(*targets, static=(), random=False, traced=(), meta=None, accepts=None):
    """Register `fn` as the lowering of these overloads (a packet means all of
    its overloads that have no lowering of their own).

    static: Scalar arguments whose values the lowering needs in Python (baked
    into the kernel).  traced: `float` arguments that change from call to call
    (e.g. a momentum) and so are passed traced instead of baked in.  meta:
    the output's metadata from the (meta) arguments, for the few ops ATen
    has no meta kernel for (some backward ops).  accepts: a predicate on the
    (meta) arguments; a call it rejects runs on the CPU in eager mode and op
    by op in a compiled graph (ATen kernels with their own dtype rules).
    random: True when the op draws random numbers, or a predicate on the
    (meta) arguments for ops that draw only for some calls (attention with
    dropout)."""

    def deco(fn):
        entry = Lowering(fn, frozenset(static), random, frozenset(traced), meta, accepts)
        for target in targets:
            explicit = not isinstance(target, torch._ops.OpOverloadPacket)
            for op in _overloads(target):
                if explicit or op not in LOWERINGS:
                    LOWERINGS[op] = entry
        return fn

    return deco


def lower_view(*targets, random=False, accepts=None):
    """Register `fn` as the graph lowering of these overloads (views, and
    ops eager mode runs as composites).  accepts: as for `lower` (a graph
    with a call it rejects runs op by op)."""

    def deco(fn):
        entry = Lowering(fn, random=random, accepts=accepts)
        for target in targets:
            for op in _overloads(target):
                VIEW_LOWERINGS.setdefault(op, entry)
        return fn

    return deco


def find_graph_lowering(op):
    """The lowering of `op` inside a compiled graph (views included)."""
    return VIEW_LOWERINGS.get(op) or find_lowering(op)


def _signature(op):
    """Argument names and types, without mutability and out= arguments."""
    return [(a.name, str(a.type)) for a in op._schema.arguments if not a.is_out]


def _functional_candidates(op):
    """Overloads whose lowering can serve a mutating or out= overload: same
    arguments in `foo` (for `foo_` / `foo.out`) or `foo_functional`."""
    name = op._schema.name.split("::")[1]
    base = name[:-1] if name.endswith("_") else name
    mutating = name.endswith("_") or any(a.is_out for a in op._schema.arguments) or any(
        a.alias_info is not None and a.alias_info.is_write for a in op._schema.arguments
    )
    if not mutating:
        return
    signature = _signature(op)
    for packet_name in (base, base + "_functional"):
        packet = getattr(aten, packet_name, None)
        if packet is None:
            continue
        for candidate in _overloads(packet):
            schema = candidate._schema
            if candidate is op or any(a.is_out for a in schema.arguments):
                continue
            if _signature(candidate) == signature:
                yield candidate


def find_lowering(op):
    """The lowering for `op`, directly or through its functional variant."""
    entry = LOWERINGS.get(op)
    if entry is not None:
        return entry
    for candidate in _functional_candidates(op):
        entry = LOWERINGS.get(candidate)
        if entry is not None:
            return entry
    return None


def variants(op):
    """`op` and the in-place, out= and non-functional overloads it serves."""
    name = op._schema.name.split("::")[1]
    base = name[: -len("_functional")] if name.endswith("_functional") else name
    out = []
    for packet_name in (base, base + "_"):
        packet = getattr(aten, packet_name, None)
        if packet is not None:
            out.extend(_overloads(packet))
    return [v for v in out if v is op or (v not in LOWERINGS and op in _functional_candidates(v))]
