"""A compiled graph's arguments that are not tpu tensors: how they key its
executables and which of them are traced inputs.

A torch.Generator argument comes from activation checkpointing's graph-safe
random ops (graph.GRAPHSAFE_RNG): its state advances every call, so it is an
input -- one (seed, offset) draw per call -- never a constant."""

import numpy as np
import torch

from .. import _C
from ..ops.dispatch import static_key
from ..runtime.dtypes import torch_to_numpy


def tensor_key(call, t, trace_offsets=False):
    """A tensor argument's part of the signature.  A CPU tensor that is not
    a scalar (a model's plain tensor attribute: class weights moved with
    `.to(x.device)`) is a host input, sent with each call.  `trace_offsets`:
    a tpu view is read at a traced index (ops/row_offsets.py)."""
    if t.is_cpu and t.dim() > 0:
        call.dyn.append(torch_to_numpy(t.detach()).copy())  # (the values at the call, not later ones)
        return ("cpu", t.dtype, tuple(t.shape))
    return call.tensor_key(t, trace_offsets)


def rng_words(seed, offset):
    """A (seed, offset) draw as the four 32-bit words a graph takes."""
    return [seed >> 32, seed & 0xFFFFFFFF, offset >> 32, offset & 0xFFFFFFFF]


def generator_draws(args):
    """One draw per torch.Generator argument (the graph-safe random ops of
    activation checkpointing), taken once per call."""
    words = []
    for a in args:
        if isinstance(a, torch.Generator):
            words += rng_words(*_C._next_rng(a, a.device.index, 1))
    return words


def argument_key(a):
    """A non-tensor argument's part of the signature: a generator by its
    device (its state is an input, not a constant)."""
    if isinstance(a, torch.Generator):
        return ("generator", a.device.type, a.device.index)
    return static_key(a)


class ScalarPacking:
    """How an executable takes a call's traced values (`Call.dyn`): the CPU
    scalar tensors among them as one array per dtype, the rest one argument
    each.  Every argument of an executable is a host-to-device transfer of
    its own (~3 us each): a compiled optimizer step's step counts, one per
    parameter, cost ~100 us a call unpacked.

    Built from the traced values of the call that compiles the executable
    (dispatch.Call's: a CPU scalar as a 0-d array, host_scalar); its later
    calls have the same layout (the key holds each scalar's dtype), and may
    give the scalars as plain Python numbers (`_C._graph_call_key`'s)."""

    __slots__ = ("groups", "single", "size", "width")

    def __init__(self, dyn):
        by_dtype, dtypes = {}, {}
        for k, value in enumerate(dyn):
            if isinstance(value, np.ndarray) and value.ndim == 0:
                by_dtype.setdefault(value.dtype, []).append(k)
                dtypes[k] = value.dtype
        self.groups = [(dtype, ks) for dtype, ks in by_dtype.items() if len(ks) > 1]
        grouped = {k for _, ks in self.groups for k in ks}
        self.single = [(k, dtypes.get(k)) for k in range(len(dyn)) if k not in grouped]
        self.size = len(dyn)  # traced values
        self.width = len(self.groups) + len(self.single)  # executable arguments they take

    def pack(self, dyn):
        """The executable's arguments for these traced values."""
        return [np.array([dyn[k] for k in ks], dtype) for dtype, ks in self.groups] + [
            dyn[k] if dtype is None else np.asarray(dyn[k], dtype) for k, dtype in self.single
        ]

    def unpack(self, arguments):
        """Inside the trace: the traced values, in order, from `arguments`
        (the `width` executable arguments `pack` made)."""
        dyn = [None] * self.size
        for packed, (_, ks) in zip(arguments, self.groups):
            for j, k in enumerate(ks):
                dyn[k] = packed[j]
        for value, (k, _) in zip(arguments[len(self.groups):], self.single):
            dyn[k] = value
        return dyn
