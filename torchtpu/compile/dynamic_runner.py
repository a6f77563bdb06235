"""dynamic=True calls of a compiled graph: inputs padded to bucket sizes, one
executable per bucket, real elements extracted from the padded outputs
(see dynamic.py for which graphs can be padded, and how)."""

import logging
import time

import jax
import jax.numpy as jnp
import numpy as np
import torch

from .. import _C
from ..ops import plans
from ..ops.context import matmul_precision
from ..ops.dispatch import Call, apply_math_bits, math_bits
from ..runtime import boxes, checks, devices
from ..runtime.dtypes import to_jax, torch_to_numpy
from ..runtime.gc_pause import gc_paused
from . import output_views, storages
from .dynamic import Shapes, Unpaddable, merged_layouts
from .graph_inputs import ScalarPacking, argument_key, rng_words, tensor_key

log = logging.getLogger("torchtpu.compile")

class _DynamicExecutable:
    __slots__ = ("jitted", "input_slots", "checks", "arg_sources", "out_masks", "written_slots", "written_back",
                 "donated", "first_write", "sigs", "packing")


class _DynamicInputs:
    """How a dynamic graph's call reads each placeholder, found once from
    the placeholders' metadata (scanning it per call cost ~10 us per input)."""

    def __init__(self, graph):
        import sympy

        # per placeholder: "padded" (a tensor with a symbolic size), "tensor", "symint" or "other"
        self.kinds = []
        self.symbol_sources = []  # (placeholder index, dim or None for an int argument, symbol)
        for i, node in enumerate(graph.placeholders):
            meta = node.meta.get("val")
            if isinstance(meta, torch.SymInt):
                self.kinds.append("symint")
                if isinstance(meta.node.expr, sympy.Symbol):
                    self.symbol_sources.append((i, None, meta.node.expr))
            elif isinstance(meta, torch.Tensor):
                symbolic = [d for d, n in enumerate(meta.shape) if isinstance(n, torch.SymInt)]
                self.kinds.append("padded" if symbolic else "tensor")
                for d in symbolic:
                    if isinstance(meta.shape[d].node.expr, sympy.Symbol):
                        self.symbol_sources.append((i, d, meta.shape[d].node.expr))
            else:
                self.kinds.append("other")
        self.static_tensors = [i for i, kind in enumerate(self.kinds) if kind == "tensor"]
        self.symbols = sorted({s for _, _, s in self.symbol_sources}, key=str)  # the executable's order

    def symbol_values(self, args):
        """True value of every symbol that appears alone as a size of a
        tensor input or as an integer argument."""
        return {s: int(args[i]) if d is None else int(args[i].shape[d]) for i, d, s in self.symbol_sources}


_pad_kernels: dict = {}


def _pad_to(array, shape):
    """`array` zero-padded at the end of each dim up to `shape` (a small
    kernel per (true shape, padded shape, dtype))."""
    if tuple(array.shape) == tuple(shape):
        return array
    key = (tuple(array.shape), tuple(shape), str(array.dtype))
    fn = _pad_kernels.get(key)
    if fn is None:
        widths = [(0, p - n) for n, p in zip(array.shape, shape)]
        fn = _pad_kernels[key] = jax.jit(lambda x: jnp.pad(x, widths))
    return fn(array)


def _pad_input(array, meta, shapes):
    """A graph input padded to its bucket shape; merged dims (B*T) per
    factor, the layout the graph's masks assume (dynamic.merged_layouts)."""
    true_factors = shapes.factor_shape(meta.shape, padded=False)
    padded_factors = shapes.factor_shape(meta.shape)
    if len(true_factors) == array.ndim:
        return _pad_to(array, padded_factors)
    padded = _pad_to(array.reshape(true_factors), padded_factors)
    return padded.reshape(shapes.shape(meta.shape))


def _compact(array, mask, shape):
    """The real elements of a padded output (where `mask`), in order, as an
    array of the true `shape` -- right also for merged dims (B*T rows),
    where they are not a prefix."""
    if tuple(array.shape) == tuple(shape):
        return array
    key = ("compact", tuple(array.shape), tuple(shape), str(array.dtype))
    fn = _pad_kernels.get(key)
    if fn is None:
        size = int(np.prod(shape))

        def compact(x, m):
            (idx,) = jnp.nonzero(m.reshape(-1), size=size)
            return x.reshape(-1)[idx].reshape(shape)

        fn = _pad_kernels[key] = jax.jit(compact)
    return fn(array, mask)


def _bind_value(t, value):
    """Store `value` (t's logical value) as t's storage contents."""
    address, nbytes, sizes, strides, offset, _ = _C._tensor_info(t)
    order = plans.dense_order(sizes, strides, offset, t.element_size(), nbytes)
    if order is not None and order == sorted(order):
        boxes.bind(address, value)
    else:  # another dim order, gaps or broadcast (stride 0) dims: through the write plan
        boxes.bind(address, plans.write_view(None, nbytes, sizes, strides, offset, value))


def write_back(t, value):
    """Copies a graph input's new value (an in-place update inside the
    graph: BatchNorm's running stats, a step counter) into the input."""
    from ..ops.transfer import wrap

    if t.is_cpu:
        t.copy_(torch.from_numpy(np.array(value)).reshape(t.shape))
    else:
        t.copy_(wrap(value, t.dtype, t.device.index).reshape(t.shape))


class DynamicCalls:
    """Mixin of CompiledGraph for graphs with symbolic sizes."""

    def _call_dynamic(self, args, draws):
        """dynamic=True: inputs padded to bucket sizes, one executable per bucket
        (see dynamic.py); a graph that cannot be padded gets one per shape."""
        from ..ops.transfer import materialize

        graph = self.graph
        if self.dynamic_inputs is None:
            self.dynamic_inputs = _DynamicInputs(graph)
        inputs = self.dynamic_inputs
        true_values = inputs.symbol_values(args)
        policy = "exact" if self.exact else self.options.dynamic_buckets
        if self.merged is None:
            self.merged = merged_layouts(graph.gm)
        bucketed = set(true_values) - self.exact_symbols - graph.host_input_symbols
        shapes = Shapes.for_call(true_values, policy, bucketed, self.merged)
        try:
            # (before padding the inputs: an input whose size shrinks as its
            # symbol grows -- the backward's n - p -- is smaller padded)
            if not self.exact:
                shapes.check_merged()
        except Unpaddable as reason:
            self._keep_exact(reason, shapes)
            return self._call_dynamic(args, draws)
        # Steady state: the inputs of static shape keyed in C++ (a decode
        # step's graph takes every parameter), the rest here.
        fast = _C._graph_call_key(tuple(args[i] for i in inputs.static_tensors)) if inputs.static_tensors else None
        if fast is None:
            boxes.drain()
        call = Call()
        key = [matmul_precision(), torch.get_default_dtype(), self.exact, shapes.key()]
        padded = []  # placeholder index -> padded array, for inputs with symbolic dims
        for node, a, kind in zip(graph.placeholders, args, inputs.kinds):
            if kind == "padded":
                value = apply_math_bits(materialize(a), math_bits(a)) if not a.is_cpu else torch_to_numpy(a.detach()).copy()
                array = _pad_input(value, node.meta["val"], shapes)
                padded.append(array)
                key.append(("padded", a.dtype, a.device.index))
                if call.device is None:
                    call.device = a.device.index
            elif kind == "symint":
                key.append(("int", shapes.size(node.meta["val"])))
            elif kind == "other":
                key.append(argument_key(a))
        exe = None
        if fast is not None:
            fast_key = (fast[0], fast[3], *key)
            exe = self.by_fast_key.get(fast_key)
            if exe is not None:
                self.stats.requests += 1
                self.stats.hits += 1
                call = storages.FastCall(*fast[1:4], dyn=fast[4] + draws)
        if exe is None:  # keyed in Python (the first call of a signature: the executable is built from it)
            key += [tensor_key(call, args[i]) for i in inputs.static_tensors]
            call.dyn.extend(draws)  # (after the CPU scalars: see _readers)
            key, exe = self._lookup(key, call)
        if exe is None and self.churning.note_compile(args, self.name, trace_offsets=False):
            del call, padded
            self.stats.requests -= 1  # (the retry counts the call)
            return self._call_dynamic(self.churning.compact(args), draws)
        if exe is None:
            try:
                with gc_paused():
                    exe = self._build_dynamic(args, call, key, shapes)
            except Unpaddable as reason:
                self._keep_exact(reason, shapes)
            if exe is None:
                # (once the exception and this call's references to the input
                # buffers are gone: they would stop the retry's donation)
                del call, padded
                return self._call_dynamic(args, draws)
        if fast is not None:
            self.by_fast_key[fast_key] = exe
        flat = storages.input_arrays(exe.input_slots, exe.donated, call) + padded + exe.packing.pack(call.dyn)
        flat += [np.int64(shapes.true[s]) for s in inputs.symbols]
        if graph.random:
            flat.extend(rng_words(*_C._next_rng(None, call.device, 1)))
        results = exe.jitted(*flat)
        if exe.checks is not None:
            checks.pending.append((results[-1], exe.checks))
            checks.maybe_fold()
        # The storages the graph updates in place (inputs of static shape
        # only), after the fresh outputs and their masks: bound as they are
        # (their old buffers donated); then the inputs copied back.
        first = exe.first_write
        for k, slot in enumerate(exe.written_slots):
            address = call.addresses[slot]
            if address:
                boxes.boxes[address] = (results[first + k], exe.sigs[k])
        first += len(exe.written_slots)
        for k, index in enumerate(exe.written_back):
            write_back(args[index], results[first + k])
        device = torch.device("tpu", call.device)
        outputs = []
        k = 0
        for kind, ref in exe.arg_sources:
            if kind == "fresh":
                meta = ref
                true_shape = shapes.shape(meta.shape, padded=False)
                true_strides = shapes.shape(meta.stride(), padded=False)
                mask_index = exe.out_masks[k]
                value = results[k] if mask_index is None else _compact(results[k], results[mask_index], true_shape)
                k += 1
                out = torch.empty(true_shape, dtype=meta.dtype, device=device)
                if tuple(true_strides) != out.stride():
                    out = torch.empty_strided(true_shape, true_strides, dtype=meta.dtype, device=device)
                if out.numel():
                    _bind_value(out, value)
                outputs.append(out)
            elif kind == "input":
                outputs.append(args[ref])
            elif kind == "view":
                outputs.append(None)  # after the tensors it views (below)
            elif kind == "symbolic":
                outputs.append(shapes.host_value(ref))
            else:
                outputs.append(ref)
        output_views.fill(outputs, exe.arg_sources, args)
        return outputs

    def _keep_exact(self, reason, shapes):
        """After `reason` (Unpaddable): the symbols at fault keep their
        value from now on; without any, the graph compiles per shape."""
        if self.exact:
            raise reason
        at_fault = set(reason.symbols) & shapes.bucketed
        if at_fault:
            names = ", ".join(sorted(map(str, at_fault)))
            log.info("torchtpu.compile: %s keeps %s exact: %s", self.name, names, reason)
            self.exact_symbols |= at_fault
        else:
            log.info("torchtpu.compile: %s is compiled per shape: %s", self.name, reason)
            self.exact = True

    def _build_dynamic(self, args, call, key, shapes):
        t0 = time.perf_counter()
        graph = self.graph
        padded_positions = [i for i, kind in enumerate(self.dynamic_inputs.kinds) if kind == "padded"]
        mutated_metas = [graph.placeholders[i].meta.get("val") for i in graph.mutated_placeholders]
        if not self.exact and shapes.padded_symbols(mutated_metas):
            # (a padded new value would need its real elements picked out
            # first; inputs of static shape -- BatchNorm's running stats, an
            # optimizer's state -- are written back whole)
            raise Unpaddable("the graph mutates an input of padded shape", shapes.padded_symbols(mutated_metas))
        exe = _DynamicExecutable()
        # (an input of symbolic shape -- mutated under exact shapes -- is an
        # argument of its own, not read from its storage: copied back)
        exe.written_slots, exe.written_back = self._written_slots(args, call, copied=set(padded_positions))
        exe.input_slots = [s for s, e in enumerate(call.entries) if e is not None]
        n_in = len(exe.input_slots)
        packing = exe.packing = ScalarPacking(call.dyn)
        symbols = self.dynamic_inputs.symbols
        placeholders = {p: i for i, p in enumerate(graph.placeholders)}
        exe.arg_sources = []
        fresh_values = []
        for i, (node, meta) in enumerate(zip(self.out_nodes, self.out_meta)):
            view = output_views.returned_view(node, graph.placeholders, self.out_nodes)
            if isinstance(node, torch.fx.Node) and node in placeholders:
                exe.arg_sources.append(("input", placeholders[node]))
            elif view is not None:
                exe.arg_sources.append(("view", view))
            elif isinstance(meta, torch.Tensor):
                exe.arg_sources.append(("fresh", meta))
                fresh_values.append(i)
            elif isinstance(meta, (torch.SymInt, torch.SymFloat, torch.SymBool)):
                exe.arg_sources.append(("symbolic", meta))
            else:
                exe.arg_sources.append(("value", None if isinstance(node, torch.fx.Node) else node))
        table = []
        out_masks = []  # per fresh output: index of its mask among the results, or None
        exe.out_masks = out_masks
        precision = matmul_precision()
        exact = self.exact
        readers = self._readers(args, call, skip=set(padded_positions))

        def fn(*flat):
            arrays = dict(zip(exe.input_slots, flat[:n_in]))
            pos = n_in
            padded = dict(zip(padded_positions, flat[pos : pos + len(padded_positions)]))
            pos += len(padded_positions)
            dyn = packing.unpack(flat[pos : pos + packing.width])
            pos += packing.width
            true = dict(zip(symbols, flat[pos : pos + len(symbols)]))
            pos += len(symbols)
            rng = tuple(flat[pos : pos + 4]) if graph.random else None
            traced_shapes = shapes.traced(true)
            inputs, masks = [], []
            for i, (node, a) in enumerate(zip(graph.placeholders, args)):
                meta = node.meta.get("val")
                if i in padded:
                    inputs.append(padded[i])
                    masks.append(None if exact else traced_shapes.prefix_mask(meta))
                elif isinstance(meta, torch.SymInt):
                    inputs.append(shapes.size(meta))
                    masks.append(None)
                else:
                    inputs.append(readers[i](arrays, dyn))
                    masks.append(None)
            outputs, mutations = graph(inputs, rng, precision, shapes=traced_shapes, input_masks=None if exact else masks)
            results = [outputs[i] for i in fresh_values]
            # Which elements of each padded output are real: the host keeps those.
            out_masks.clear()
            for i in fresh_values:
                node = self.out_nodes[i]
                mask = None if exact else graph.masks.get(node)
                if mask is not None:
                    out_masks.append(len(results))
                    results.append(jnp.broadcast_to(mask, jnp.shape(outputs[i])))
                else:
                    out_masks.append(None)
            exe.first_write = len(results)
            results.extend(storages.written(args, call, arrays, (), mutations, exe.written_slots, exe.written_back))  # (no traced view indices)
            results.extend(mutations[index] for index in exe.written_back)
            if graph.checks:
                table[:] = [(message, error, op) for _, _, message, error, op in graph.checks]
                results.append(checks.check_code([c[:4] for c in graph.checks]))
            return tuple(results)

        example = [call.entries[s][0] for s in exe.input_slots]
        example += [
            jax.ShapeDtypeStruct(shapes.shape(graph.placeholders[i].meta["val"].shape), to_jax(args[i].dtype))
            for i in padded_positions
        ]
        example += packing.pack(call.dyn) + [np.int64(shapes.true[s]) for s in symbols]
        if graph.random:
            example += [0, 0, 0, 0]
        entry = self.options.cache_entry("dynamic graph", graph, key, example, devices.jax_device(call.device))
        found = entry.load() if entry is not None else None
        donated = storages.donation_candidates(exe.input_slots, call, exe.written_slots)
        if found is not None:
            exe.jitted, (out_masks[:], table[:], out_avals, usable, exe.first_write) = found
            self.stats.persistent_hits += 1
        else:
            exe.jitted, out_avals, usable = self._compile(fn, donated, call, example, exe.written_slots, entry,
                                                          lambda: exe.first_write)
            if entry is not None:
                entry.store(exe.jitted, (list(out_masks), list(table), out_avals, usable, exe.first_write))
        exe.donated = frozenset(usable)
        writes = out_avals[exe.first_write : exe.first_write + len(exe.written_slots)]
        exe.sigs = [boxes.signature(shape, np.dtype(dtype)) for shape, dtype in writes]
        exe.checks = tuple(table) if table else None
        self.executables[key] = exe
        self.stats.compilations += 1
        self.stats.compile_seconds += time.perf_counter() - t0
        return exe
