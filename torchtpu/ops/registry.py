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
    random: bool = False  # needs ctx.rng_key()


LOWERINGS: dict = {}


def _overloads(target):
    if isinstance(target, torch._ops.OpOverloadPacket):
        return [getattr(target, name) for name in target.overloads()]
    return [target]


def lower(*targets, static=(), random=False):
    """Register `fn` as the lowering of these overloads (a packet means all of
    its overloads that have no lowering of their own)."""

    def deco(fn):
        entry = Lowering(fn, frozenset(static), random)
        for target in targets:
            explicit = not isinstance(target, torch._ops.OpOverloadPacket)
            for op in _overloads(target):
                if explicit or op not in LOWERINGS:
                    LOWERINGS[op] = entry
        return fn

    return deco


def _functional_candidates(op):
    """Overloads whose lowering can serve a mutating or out= overload."""
    schema = op._schema
    name = schema.name.split("::")[1]
    overload = schema.overload_name
    packet_name = name[:-1] if name.endswith("_") else name
    packet = getattr(aten, packet_name, None)
    if packet is not None and name.endswith("_"):
        if overload and hasattr(packet, overload):
            yield getattr(packet, overload)
        elif hasattr(packet, "default"):
            yield packet.default
    if packet is not None and any(a.is_out for a in schema.arguments):
        signature = [(a.name, str(a.type)) for a in schema.arguments if not a.is_out]
        for candidate in _overloads(packet):
            if candidate is op or any(a.is_out for a in candidate._schema.arguments):
                continue
            if [(a.name, str(a.type)) for a in candidate._schema.arguments] == signature:
                yield candidate
    functional = getattr(aten, packet_name + "_functional", None)
    if functional is not None:
        yield from _overloads(functional)


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
