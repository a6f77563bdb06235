"""Graph inputs that are views of a storage whose geometry changes from
call to call, copied compact before the graph runs.

An executable reads each tpu input through its view plan from the whole
storage (DESIGN: views resolved inside the kernel), so it is compiled for
the storage's size, the view's strides and its offset.  A generation loop
passing `input_ids[:, -1:]` -- a (B, 1) view of a tensor that grows by a
column per token -- would compile the whole graph once per token.  Once a
position has shown two geometries for the same shape and dtype, its inputs
are copied into a compact tensor of their own before the call (a small
eager copy, compiled per geometry; the graph is then compiled once).  Only
inputs the graph neither writes nor returns a view of are copied: those
must stay the caller's tensor."""

import logging

import torch

from .output_views import view_of_returned

log = logging.getLogger("torchtpu.compile")


def _owns_its_storage(t):
    return (t.storage_offset() == 0 and t.is_contiguous()
            and t.untyped_storage().nbytes() == t.numel() * t.element_size())


def _geometry(t):
    return (t.stride(), t.storage_offset(), t.untyped_storage().nbytes())


class ChurningViews:
    """Per compiled graph: the input positions copied compact."""

    def __init__(self, graph, out_nodes):
        self.graph = graph
        self.out_nodes = out_nodes
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

    def note_compile(self, args, name):
        """Before compiling for `args`: True if an input turned out to churn
        (a view already seen with the same shape and dtype in another
        geometry) -- the call is then retried with it copied compact."""
        found = []
        for i in self.eligible():
            a = args[i]
            if not isinstance(a, torch.Tensor) or a.device.type != "tpu" or _owns_its_storage(a):
                continue
            shape, geometry = (a.dtype, tuple(a.shape)), _geometry(a)
            before = self.seen.setdefault(i, {}).setdefault(shape, geometry)
            if before != geometry:
                found.append(i)
        if found:
            log.info("torchtpu.compile: %s: inputs %s are views of storages that change between calls "
                     "(e.g. x[:, -1:] of a growing tensor); copied compact from now on instead of "
                     "compiling per storage", name, found)
            self.positions.update(found)
        return bool(found)

    def eligible(self):
        """Positions of inputs the graph neither mutates nor returns (or
        returns a view of)."""
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
