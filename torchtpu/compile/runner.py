"""A compiled FX graph as a callable on real `tpu` tensors.

Per input signature -- each tensor's view geometry, dtype, storage slot and
box signature, exactly the eager kernel key (dispatch.Call) -- one `jax.jit`:
read every input through its view plan, run the lowered graph, write the
outputs into fresh storages and the graph's input mutations back into the
inputs' boxes (donating the old buffers when the box is their only holder).
"""

import logging
import time

import jax
import jax.numpy as jnp
import numpy as np
import torch

from .. import _C
from ..ops import plans, row_offsets
from ..ops.context import matmul_precision
from ..ops.dispatch import Call, apply_math_bits, math_bits
from ..ops.transfer import to_host
from ..runtime import boxes, checks, devices
from ..runtime.dtypes import to_jax
from ..runtime.gc_pause import gc_paused
from . import output_views, stats, storages
from .dynamic_runner import DynamicCalls, write_back
from .graph_inputs import ScalarPacking, argument_key, generator_draws, rng_words, tensor_key
from .host_updates import HostUpdates
from .input_views import ChurningViews

log = logging.getLogger("torchtpu.compile")


class _Executable:
    __slots__ = ("jitted", "donated", "input_slots", "fresh", "writes", "sigs", "checks", "arg_sources", "host_writes",
                 "host_outputs", "packing")


class CompiledGraph(DynamicCalls):
    """What the backend hands AOTAutograd for one forward/backward graph."""

    def __init__(self, graph, name, options):
        self.graph = graph
        self.name = name
        self.options = options
        self.executables = {}
        self.by_fast_key = {}  # the same executables by their C++ key (__call__)
        self.stats = stats.register(name, graph)
        self.last_key = None
        out_node = graph.output_node
        self.out_meta = [n.meta.get("val") if isinstance(n, torch.fx.Node) else n for n in out_node.args[0]]
        self.out_nodes = list(out_node.args[0])
        self.symbolic = graph.symbolic
        self.exact = False  # a dynamic graph that cannot be padded: one executable per shape
        self.exact_symbols = set()  # symbols kept exact because padding them cannot work
        self.merged = None  # merged sizes' padded layouts (dynamic.merged_layouts), at the first dynamic call
        self.dynamic_inputs = None  # how a dynamic call reads each placeholder (dynamic_runner), at the first
        self.churning = ChurningViews(graph, self.out_nodes)  # inputs copied compact (input_views.py)
        self.host_updates = HostUpdates(graph.gm, graph.placeholders, graph.mutated_placeholders)

    def __call__(self, *args):
        if devices._forked_after_start:
            devices.check_not_forked()
        if self.churning.positions:
            args = self.churning.compact(args)
        if self.symbolic:
            return self._call_dynamic(args, generator_draws(args))
        # Steady state: every argument a tpu tensor or a CPU scalar, keyed
        # in C++ (a training step's graphs take dozens of them; keying them
        # in Python cost ~10 us each).
        traced = self.churning.traced
        fast = _C._graph_call_key(args, traced or None)
        if fast is not None:
            fast_key = (fast[0], fast[3], matmul_precision(), torch.get_default_dtype())
            exe = self.by_fast_key.get(fast_key)
            if exe is not None:
                self.stats.requests += 1
                self.stats.hits += 1
                return self._run(exe, args, storages.FastCall(*fast[1:4], dyn=fast[4]))
        boxes.drain()
        call = Call()
        key = [matmul_precision(), torch.get_default_dtype()]
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor):
                key.append(tensor_key(call, a, i in traced))
            else:
                key.append(argument_key(a))
        call.dyn.extend(generator_draws(args))  # (after the CPU scalars: see _readers)
        key, exe = self._lookup(key, call)
        if exe is None:
            if self.churning.note_compile(args, self.name):
                self.stats.requests -= 1  # (the retry counts the call)
                return self(*args)
            with gc_paused():
                exe = self._build(args, call, key)
        if fast is not None:
            self.by_fast_key[fast_key] = exe
        return self._run(exe, args, call)

    def _lookup(self, key, call):
        """Completes an input-signature key with the device the call runs on
        and looks it up: (key, the executable or None), counted in the stats."""
        if call.device is None:  # (no tpu input: where the graph's factories put their tensors)
            call.device = self.graph.device if self.graph.device is not None else _C._current_device()
        key = tuple(key) + (call.device,)
        self.stats.requests += 1
        exe = self.executables.get(key)
        if exe is not None:
            self.stats.hits += 1
        return key, exe

    # ------------------------------------------------------------------ run

    def _run(self, exe, args, call):
        flat = storages.input_arrays(exe.input_slots, exe.donated, call)
        flat.extend(exe.packing.pack(call.dyn))
        if self.graph.random:
            flat.extend(rng_words(*_C._next_rng(None, call.device, 1)))
        results = exe.jitted(*flat)
        updated = self.host_updates.run(args)  # (before any write-back: from the old values)
        if exe.checks is not None:
            checks.pending.append((results[-1], exe.checks))
            checks.maybe_fold()
        if type(results) is not tuple:
            results = tuple(results)
        fresh = _C._bind_fresh(exe.fresh, call.device, results, exe.sigs)
        n_fresh = len(fresh)
        host_outputs = []
        for (kind, ref), result, sig in zip(exe.writes[n_fresh:], results[n_fresh:], exe.sigs[n_fresh:]):
            if kind == "host":
                write_back(args[ref], result)
                continue
            if kind == "host output":
                host_outputs.append(_host_tensor(result, exe.host_outputs[ref]))
                continue
            address = call.addresses[ref]
            if address and result is not None:
                boxes.boxes[address] = (result, sig)
        self.host_updates.write(args, updated)
        outputs = []
        for kind, ref in exe.arg_sources:
            if kind == "fresh":
                outputs.append(fresh[ref])
            elif kind == "host":
                outputs.append(host_outputs[ref])
            elif kind == "input":
                outputs.append(args[ref])
            elif kind == "view":
                outputs.append(None)  # after the tensors it views (below)
            else:
                outputs.append(ref)
        output_views.fill(outputs, exe.arg_sources, args)
        return outputs

    # ---------------------------------------------------------------- build

    def _build(self, args, call, key):
        if self.last_key is not None:
            log.info("torchtpu.compile: recompiling %s: %s", self.name, _diff(self.last_key, key))
        self.last_key = key
        t0 = time.perf_counter()
        exe = _Executable()
        exe.input_slots = [s for s, e in enumerate(call.entries) if e is not None]
        n_in = len(exe.input_slots)
        packing = exe.packing = ScalarPacking(call.dyn)
        readers = self._readers(args, call)
        precision = matmul_precision()
        graph = self.graph
        placeholders = {p: i for i, p in enumerate(graph.placeholders)}

        # Outputs: a placeholder is returned as the input tensor itself; a
        # tensor value goes to a fresh storage with ATen's strides.
        exe.fresh = []
        exe.arg_sources = []
        exe.host_outputs = []  # metadata of each returned `.cpu()` copy
        fresh_values, host_values = [], []
        for i, (node, meta) in enumerate(zip(self.out_nodes, self.out_meta)):
            view = output_views.returned_view(node, graph.placeholders, self.out_nodes)
            if isinstance(node, torch.fx.Node) and node in graph.host_outputs:
                exe.arg_sources.append(("host", len(exe.host_outputs)))
                exe.host_outputs.append(meta)
                host_values.append(i)
            elif isinstance(node, torch.fx.Node) and node in placeholders:
                exe.arg_sources.append(("input", placeholders[node]))
            elif view is not None:
                exe.arg_sources.append(("view", view))
            elif isinstance(meta, torch.Tensor):
                exe.arg_sources.append(("fresh", len(exe.fresh)))
                exe.fresh.append((tuple(meta.shape), tuple(meta.stride()), meta.dtype))
                fresh_values.append(i)
            else:
                exe.arg_sources.append(("value", None if isinstance(node, torch.fx.Node) else node))

        written_slots, written_back = self._written_slots(args, call)
        # (the new values of host inputs the host computes are not returned: copying them back waits for the device)
        exe.host_writes = [i for i in written_back if i not in self.host_updates.indices]
        table = []

        def fn(*flat):
            arrays = dict(zip(exe.input_slots, flat[:n_in]))
            rng = tuple(flat[-4:]) if graph.random else None
            rest = packing.unpack(flat[n_in : n_in + packing.width])
            inputs = [read(arrays, rest) for read in readers]
            outputs, mutations = graph(inputs, rng, precision)
            results = []
            for k, i in enumerate(fresh_values):
                shape, strides, dtype = exe.fresh[k]
                box = plans.write_view(None, _nbytes(shape, strides, dtype), shape, strides, 0, outputs[i])
                # (an empty output has no box; a placeholder keeps results aligned with exe.writes)
                results.append(box if box is not None else jnp.zeros((0,), to_jax(dtype)))
            results.extend(storages.written(args, call, arrays, rest, mutations, written_slots, written_back))
            results.extend(mutations[index] for index in exe.host_writes)
            results.extend(outputs[i] for i in host_values)
            if graph.checks:
                table[:] = [(message, error, op) for _, _, message, error, op in graph.checks]
                results.append(checks.check_code([c[:4] for c in graph.checks]))
            return tuple(results)

        exe.donated = storages.donation_candidates(exe.input_slots, call, written_slots)
        example = self._example_flat(exe, call)
        # From disk when another process compiled this graph for this
        # signature (skips tracing and lowering); not when dumping HLO.
        entry = self.options.cache_entry("graph", self.graph, key, example, devices.jax_device(call.device))
        found = entry.load() if entry is not None else None
        if found is not None:
            exe.jitted, (out_avals, usable, table[:]) = found
            self.stats.persistent_hits += 1
        else:
            exe.jitted, out_avals, usable = self._compile(fn, exe.donated, call, example, written_slots, entry,
                                                          lambda: len(exe.fresh))
            if entry is not None:
                entry.store(exe.jitted, (out_avals, usable, list(table)))
        exe.donated = frozenset(usable)
        exe.writes = [("fresh", k) for k in range(len(exe.fresh))] + [("slot", s) for s in written_slots]
        exe.writes += [("host", index) for index in exe.host_writes]
        exe.writes += [("host output", k) for k in range(len(exe.host_outputs))]
        exe.checks = tuple(table) if table else None
        exe.sigs = [boxes.signature(shape, np.dtype(dtype)) for shape, dtype in out_avals]
        self.executables[key] = exe
        self.stats.compilations += 1
        self.stats.compile_seconds += time.perf_counter() - t0
        return exe

    def _compile(self, fn, donated, call, example, written_slots, entry, first_write):
        """Lower and compile `fn`, donating the inputs it overwrites with a
        value of the same shape and dtype (`donated`: candidates, from
        _donation_candidates; `first_write()`, once traced: where the written
        storages start among its results): (executable, output (shape,
        dtype) pairs, donated positions)."""
        sharding = jax.sharding.SingleDeviceSharding(devices.jax_device(call.device))
        options = self.options.jit_options()

        def lower(donated):
            return jax.jit(fn, out_shardings=sharding, donate_argnums=tuple(donated), **options).lower(*example)

        # Lowered once, donating every overwritten input; again without the
        # ones whose new value turned out to change shape or dtype (a whole
        # storage rewritten through a reshaped view).
        candidates = [position for position, _, _ in donated]
        lowered = lower(candidates)
        # (the dtype itself: `.str` is '<V2' for bfloat16, '<V1' for most float8 types)
        out_avals = [(tuple(a.shape), np.dtype(a.dtype)) for a in jax.tree_util.tree_leaves(lowered.out_info)]
        first = first_write()
        usable = []
        for position, slot, before in donated:
            shape, dtype = out_avals[first + written_slots.index(slot)]
            if (shape, np.dtype(dtype)) == before:
                usable.append(position)
        if usable != candidates:
            lowered = lower(usable)
        self.options.dump_hlo(self.name, len(self.executables), lowered)
        compiled = entry.compile(lowered) if entry is not None else lowered.compile()
        return compiled, out_avals, usable

    def _written_slots(self, args, call, copied=()):
        """The storages the graph mutates (copy_ into an input), in slot
        order, and the inputs whose new value is copied in instead (write_back):
        CPU inputs (an optimizer's step count) and those in `copied`."""
        written_slots, written_back = [], []
        for index in self.graph.mutated_placeholders:
            if args[index].is_cpu or index in copied:
                written_back.append(index)
                continue
            slot = call.slot_of[call.infos[id(args[index])][0]]
            if slot not in written_slots:
                written_slots.append(slot)
        return written_slots, written_back

    def _example_flat(self, exe, call):
        flat = [call.entries[s][0] for s in exe.input_slots] + exe.packing.pack(call.dyn)
        if self.graph.random:
            flat.extend((0, 0, 0, 0))
        return flat

    def _readers(self, args, call, skip=()):
        """Per argument, a function (input arrays, traced values) -> its
        value in the graph.  The traced values: each CPU tensor's value and
        each traced view index (in argument order, as keying appended them), then
        each generator's draw (4 words)."""
        readers = []
        dyn_index = 0
        draw_index = sum(isinstance(a, torch.Tensor) and (a.is_cpu or id(a) in call.traced_views)
                         for i, a in enumerate(args) if i not in skip)
        for i, a in enumerate(args):
            if i in skip:
                readers.append(None)
            elif isinstance(a, torch.Generator):
                readers.append(lambda arrays, dyn, k=draw_index: tuple(dyn[k : k + 4]))
                draw_index += 4
            elif isinstance(a, torch.Tensor) and a.is_cpu:
                readers.append(lambda arrays, dyn, k=dyn_index: jnp.asarray(dyn[k]))
                dyn_index += 1
            elif isinstance(a, torch.Tensor):
                address, nbytes, sizes, strides, offset, _ = call.infos[id(a)]
                slot = call.slot_of[address]
                dtype = to_jax(a.dtype)
                if id(a) in call.traced_views:
                    _, dim, residual, span = call.traced_views[id(a)]
                    read = (lambda arrays, dyn, slot=slot, k=dyn_index, g=(span, sizes, strides, residual, dtype),
                            dim=dim: row_offsets.read_at(arrays[slot], dim, dyn[k], *g))
                    dyn_index += 1
                else:
                    read = (lambda arrays, dyn, slot=slot, g=(sizes, strides, offset, dtype):
                            plans.read_view(arrays.get(slot), *g))
                bits = math_bits(a)
                if bits:  # (a lazy conjugate or negative view: the graph reads its logical value)
                    read = lambda arrays, dyn, read=read, bits=bits: apply_math_bits(read(arrays, dyn), bits)
                readers.append(read)
            else:
                readers.append(lambda arrays, dyn, a=a: a)
        return readers


def _nbytes(shape, strides, dtype):
    if 0 in shape:
        return 0
    extent = 1 + sum((n - 1) * s for n, s in zip(shape, strides))
    return extent * dtype.itemsize


def _diff(old, new):
    if len(old) != len(new):
        return f"{len(new)} inputs instead of {len(old)}"
    changes = [f"input {i - 2}: {a} -> {b}" for i, (a, b) in enumerate(zip(old, new)) if a != b]
    return "; ".join(changes[:3]) or "same signature"


def _host_tensor(value, meta):
    """A returned `.cpu()` copy: the device value on the host, with ATen's
    strides for it."""
    out = to_host(value).reshape(meta.shape)
    if out.stride() != meta.stride() and out.numel() > 1:
        out = torch.empty_strided(meta.shape, meta.stride(), dtype=meta.dtype).copy_(out)
    return out
