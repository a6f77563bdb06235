"""A compiled graph's tpu inputs as their storages' arrays (the executable
reads each storage once, through the inputs' view plans): the arrays for a
call, and the new contents of the storages the graph writes."""

import sys

import jax.numpy as jnp

from ..ops import plans, row_offsets
from ..ops.dispatch import apply_math_bits, math_bits


class FastCall:
    """What a run reads of a Call (dispatch.Call), from `_C._graph_call_key`:
    the storages' box entries and addresses per slot, the device, and the
    traced non-array inputs (the generators' draws)."""

    __slots__ = ("entries", "addresses", "device", "dyn")

    def __init__(self, entries, addresses, device, dyn=()):
        self.entries = entries
        self.addresses = addresses
        self.device = device
        self.dyn = dyn


def written(args, call, arrays, dyn, mutations, written_slots, host_writes):
    """Inside the executable: the new contents of each written storage, each
    new value written through its input's view into the storage's array
    (at its traced index, for a view read at one)."""
    slots = dict(arrays)
    for index, value in mutations.items():
        if index in host_writes:
            continue
        address, nbytes, sizes, strides, offset, _ = call.infos[id(args[index])]
        slot = call.slot_of[address]
        value = apply_math_bits(value, math_bits(args[index]))  # (a conjugate view stores the conjugate)
        traced = call.traced_views.get(id(args[index]))
        if traced is not None:
            position, dim, residual, span = traced
            slots[slot] = row_offsets.write_at(slots[slot], dim, dyn[position], span, sizes, strides, residual, value)
        else:
            slots[slot] = plans.write_view(slots.get(slot), nbytes, sizes, strides, offset, value)
    return [slots[s] for s in written_slots]


def donation_candidates(input_slots, call, written_slots):
    """(position, slot, shape and dtype before) of each written storage the
    executable reads: in-place updates reuse its buffer when the new value
    has the old one's shape and dtype (the runner's _compile)."""
    return [(input_slots.index(s), s, call.entries[s][1]) for s in written_slots if s in input_slots]


def input_arrays(input_slots, donated, call):
    """The storages' arrays for a call; a donated one that someone besides
    its box holds (entry tuple, `array`, getrefcount's argument) is copied."""
    flat = []
    for position, s in enumerate(input_slots):
        array = call.entries[s][0]
        if position in donated and sys.getrefcount(array) > 3:
            array = jnp.array(array, copy=True)
        flat.append(array)
    return flat
