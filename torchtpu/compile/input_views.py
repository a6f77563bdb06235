"""Graph inputs that are views of a storage whose geometry changes from
call to call: read at a traced row, or copied compact before the graph runs.

An executable reads each tpu input through its view plan from the whole
storage (DESIGN: views resolved inside the kernel), so it is compiled for
the storage's size, the view's strides and its offset.  A training loop
over batches sliced from a device tensor (`model(X[i])`) would compile the
forward and backward graphs once per batch, and a generation loop passing
`input_ids[:, -1:]` -- a (B, 1) view of a tensor that grows by a column per
token -- once per token.  Once a position has shown two geometries for the
same shape and dtype:

- if the view can be read at a traced index (ops/row_offsets.py: `X[i]`,
  `x[:, t]`), it is from then on, and the graph compiles once more for all
  offsets;
- else, if the graph neither writes it nor returns it or a view of it (those
  must stay the caller's tensor), it is copied into a compact tensor of its
  own before each call (a small eager copy; the graph is then compiled once).
"""

import logging

import torch

from .. import _C
from ..ops import row_offsets
from ..runtime import boxes
from .output_views import view_of_returned

log = logging.getLogger("torchtpu.compile")


def _owns_its_storage(t):
    return (t.storage_offset() == 0 and t.is_contiguous()
            and t.untyped_storage().nbytes() == t.numel() * t.element_size())


def _geometry(t):
    return (t.stride(), t.storage_offset(), t.untyped_storage().nbytes())


def _at_traceable_index(t):
    address, _, sizes, strides, offset, _ = _C._tensor_info(t)
    entry = boxes.get(address) if address else None
    sig = entry[1] if entry is not None else None
    return row_offsets.traced_index(sig, t.dtype, sizes, strides, offset) is not None


class ChurningViews:
    """Per compiled graph: the input positions read at a traced index
    (row_offsets.py), and those copied compact."""

    def __init__(self, graph, out_nodes):
        self.graph = graph
        self.out_nodes = out_nodes
        self.traced = set()  # read at a traced index where the view allows
        self.positions = set()  # copied compact at every call
        self.seen = {}  # position -> {(dtype, shape): geometry}, at the calls that compiled
        self._eligible = None

    def compact(self, args):
        """`args` with the inputs at the churning positions copied compact."""
        args = list(args)
        for i in self.positions:
            a = args[i]
            if isinstance(a, torch.Tensor) and a.device.type == "tpu" and not _owns_its_storage(a):
                args[i] = a.clone(memory_format=torch.contiguous_format)
        return tuple(args)

    def note_compile(self, args, name, trace_offsets=True):
        """Before compiling for `args`: True if an input turned out to churn
        (a view already seen with the same shape and dtype in another
        geometry) -- the call is then retried with it read at a traced index
        (where the runner reads them so: `trace_offsets`) or copied compact."""
        traced, copied = [], []
        eligible = self.eligible()
        for i, a in enumerate(args):
            if i in self.traced or i in self.positions:
                continue
            if not isinstance(a, torch.Tensor) or a.device.type != "tpu" or _owns_its_storage(a):
                continue
            shape, geometry = (a.dtype, tuple(a.shape)), _geometry(a)
            before = self.seen.setdefault(i, {}).setdefault(shape, geometry)
            if before == geometry:
                continue
            if trace_offsets and _at_traceable_index(a):
                traced.append(i)
            elif i in eligible:
                copied.append(i)
        if traced:
            log.info("torchtpu.compile: %s: inputs %s are views at offsets that change between calls "
                     "(e.g. X[i] in a loop); read at a traced index from now on instead of compiling per "
                     "offset", name, traced)
            self.traced.update(traced)
        if copied:
            log.info("torchtpu.compile: %s: inputs %s are views of storages that change between calls "
                     "(e.g. x[:, -1:] of a growing tensor); copied compact from now on instead of "
                     "compiling per storage", name, copied)
            self.positions.update(copied)
        return bool(traced or copied)

    def eligible(self):
        """Positions of inputs the graph neither mutates nor returns (or
        returns a view of): those that may be copied."""
        if self._eligible is None:
            placeholders = self.graph.placeholders
            aliased = set()
            for node in self.out_nodes:
                if isinstance(node, torch.fx.Node) and node in placeholders:
                    aliased.add(node)
                view = view_of_returned(node, placeholders, self.out_nodes)
                if view is not None:
                    aliased.add(view[0])
            self._eligible = [
                i for i, p in enumerate(placeholders)
                if i not in self.graph.mutated_placeholders and p not in aliased
            ]
        return self._eligible
