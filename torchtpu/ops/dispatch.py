"""The boxed eager dispatcher: one Python entry point for every lowered op.

Per call (the hot path): drain storage events, build a cache key from the
op, each tensor argument's view geometry and box signature, and the static
arguments; on a hit, allocate the outputs, run the cached jitted kernel on
the box arrays and rebind the written boxes.

On a miss (`_build`): ATen's meta kernels give the exact output metadata
(dtypes with type promotion, shapes, strides, out= resizing); the kernel
reads every tensor through its view plan, calls the lowering and writes the
results through write plans, all inside one `jax.jit`.
"""

import sys

import jax
import jax.numpy as jnp
import numpy as np
import torch

from .. import _C
from ..runtime import boxes, checks, devices, executable_cache
from ..runtime.dtypes import convert, is_uint64_scalar, to_jax
from . import (aten_checks, host_fill, kernel_cache, meta_fixes, plans, promotion, row_offsets, scalar_overflow,
               sparse_layouts, written_checks)
from .context import LoweringContext, matmul_precision, matmul_scope
from .dtype_names import c10_name
from .registry import find_lowering
from .schema import (
    GENERATOR,
    OPT_TENSOR,
    OPT_TENSOR_LIST,
    SCALAR,
    SCALAR_LIST,
    STATIC,
    TENSOR,
    TENSOR_LIST,
    schema_of,
)

_tensor_info = _C._tensor_info
_is_wrapped = _C._is_wrapped_number
_next_rng = _C._next_rng
_drain = boxes.drain
_boxes = boxes.boxes

# Key -> _Kernel, bounded (least recently used kernels are evicted).
# Counted so tests and benchmarks can see compilations.
_cache = kernel_cache.KernelCache(kernel_cache.limit_from_env())
stats = {"calls": 0, "compiles": 0}


def wait_for(results):
    """TORCHTPU_LAUNCH_BLOCKING: every op waits for its kernel, and a failed
    device-side check is raised by the op that failed it."""
    jax.block_until_ready(results)
    checks.flush()


launch_blocking = False


def set_launch_blocking(enabled: bool) -> None:
    global launch_blocking
    launch_blocking = bool(enabled)
    _C._set_launch_blocking(wait_for if launch_blocking else None)


class Unsupported(Exception):
    """The generic path cannot run this call (no meta kernel, data-dependent
    output shape, ...); the caller falls back."""


class _OffsetsInOutputs(Exception):
    """A kernel whose output geometry follows an input's storage offset
    (as_strided_scatter keeps self's layout; an out= resize) cannot share
    one kernel across offsets: its op keys offsets statically."""


class Declined(Unsupported):
    """The op's lowering does not take these arguments (`Lowering.accepts`):
    ATen's own kernel decides, on the CPU (not a decomposition)."""


def device_mismatch(a, b):
    return RuntimeError(
        f"Expected all tensors to be on the same device, but found at least two devices, {a} and {b}!"
    )


def first_tpu_device(args, kwargs=None):
    """The tpu device of a call: its first tpu tensor's (or device=
    argument's), else the current device."""
    found = []

    def visit(x):
        if isinstance(x, torch.Tensor) and x.device.type == "tpu" or isinstance(x, torch.device) and x.type == "tpu":
            found.append(x.device if isinstance(x, torch.Tensor) else x)
        return x

    torch.utils._pytree.tree_map(visit, (args, kwargs or {}))
    if not found or found[0].index is None:
        return torch.device("tpu", _C._current_device())
    return found[0]


# ------------------------------------------------------------ per call


def host_scalar(t):
    """A CPU scalar tensor operand's value, as a kernel takes it (traced)."""
    return np.asarray(t.item(), dtype=to_jax(t.dtype))


class Call:
    """Runtime data gathered while building the key of one call."""

    __slots__ = ("addresses", "slot_of", "entries", "dyn", "infos", "traced_views", "device", "requested", "generator",
                 "operands")

    def __init__(self):
        self.addresses = []  # slot -> storage address
        self.slot_of = {}  # address -> slot
        self.entries = []  # slot -> box entry (array, sig) or None
        self.dyn = []  # traced non-array inputs, in argument order
        self.infos = {}  # id(tensor) -> _tensor_info
        self.traced_views = {}  # id(tensor) -> (dyn position of its index, dim, residual, span): read at a traced index (row_offsets.py)
        self.device = None
        self.requested = None  # device= argument of a factory
        self.generator = None
        self.operands = ()  # the call's values, for error messages

    def scalar_key(self, v, dynamic):
        """A Scalar's part of the key: its type (value traced) once its
        position has seen several values, else its value (baked in)."""
        if dynamic:
            if is_uint64_scalar(v):  # traced as uint64, a kernel of its own
                self.dyn.append(np.uint64(v))
                return np.uint64
            self.dyn.append(v)
            return type(v)
        return (float, v.hex()) if type(v) is float else (type(v), v)  # hex: -0.0, nan

    def tensor_key(self, t, trace_offsets=False):
        """A tensor's part of the key.  `trace_offsets`: a view at an offset is
        keyed by its place within the slice of its box it touches, the
        slice's start passed traced (row_offsets.py)."""
        if t.is_cpu:
            if t.dim() != 0:
                raise device_mismatch(self._tpu_device(), "cpu")
            self.dyn.append(host_scalar(t))
            return ("cpu", t.dtype, _is_wrapped(t))
        if t.device.type != "tpu":
            raise device_mismatch(self._tpu_device(), t.device)
        info = _tensor_info(t)
        address, nbytes, sizes, strides, offset, device = info
        if self.device is None:
            self.device = device
        elif device != self.device:
            raise device_mismatch(f"tpu:{self.device}", f"tpu:{device}")
        self.infos[id(t)] = info
        slot = self.slot_of.get(address)
        if slot is None:
            slot = self.slot_of[address] = len(self.addresses)
            self.addresses.append(address)
            self.entries.append(_boxes.get(address) if address else None)
        entry = self.entries[slot]
        sig = entry[1] if entry is not None else None
        bits = math_bits(t)
        traced = row_offsets.traced_index(sig, t.dtype, sizes, strides, offset) if trace_offsets else None
        if traced is not None:
            k, index, residual, span = traced
            self.traced_views[id(t)] = (len(self.dyn), k, residual, span)
            self.dyn.append(index)
            offset = ("at", k, residual, span)
        return (sizes, strides, offset, t.dtype, slot, sig, nbytes, bits)

    def _tpu_device(self):
        """The call's tpu device (for an error found before any tpu tensor)."""
        return f"tpu:{self.device}" if self.device is not None else first_tpu_device(self.operands)

    def key(self, sch, entry, values):
        self.operands = values
        parts = [sch.op]
        trace_offsets = entry.trace_offsets
        kinds = entry.kinds
        static = entry.static
        dynamic = entry.dynamic
        for i, v in enumerate(values):
            kind = kinds[i]
            if kind is TENSOR or kind is OPT_TENSOR:
                if v is None:
                    parts.append(None)
                elif isinstance(v, torch.Tensor):
                    if v.is_cpu and i in sch.mutated:  # (a CPU scalar may be read, never written)
                        raise device_mismatch(first_tpu_device(values), "cpu")
                    parts.append(self.tensor_key(v, trace_offsets))
                else:  # a wrapped number (`x + 2`) reaches Python kernels as a number
                    parts.append(self.scalar_key(v, i in dynamic))
            elif kind is SCALAR:
                if v is None or i in static:
                    parts.append(static_key(v))
                else:
                    parts.append(self.scalar_key(v, i in dynamic))
            elif kind is STATIC:
                if type(v) is torch.device and v.type == "tpu" and self.requested is None:
                    # a factory's device= (there are no tensors to say where)
                    self.requested = v.index if v.index is not None else _C._current_device()
                parts.append(static_key(v))
            elif kind is TENSOR_LIST or kind is OPT_TENSOR_LIST:
                parts.append(None if v is None else tuple(None if t is None else self.tensor_key(t, trace_offsets) for t in v))
            elif kind is SCALAR_LIST:
                parts.append(tuple(type(s) for s in v))
                self.dyn.extend(v)
            elif kind is GENERATOR:
                self.generator = v
                parts.append(None)
        if self.device is None:
            self.device = self.requested if self.requested is not None else _C._current_device()
        parts.append(self.device)  # kernels are compiled for one device
        # read at trace time: matmul precision, and the default dtype (a
        # factory or int->float promotion depends on it)
        parts.append(torch.get_float32_matmul_precision())
        parts.append(torch.get_default_dtype())
        return tuple(parts)


def static_key(v):
    """A value the kernel is specialised on, typed: 3, 3.0 and True are equal
    in Python but give different kernels (arange(3) is int64, arange(3.0)
    float32), and -0.0 == 0.0 (hex tells them apart, and NaN from itself)."""
    t = type(v)
    if t is float:
        return (float, v.hex())
    if t is int or t is bool:
        return (t, v)
    if t is list or t is tuple:
        return tuple(static_key(x) for x in v)
    return v


# A Scalar argument is baked into the kernel (a constant XLA folds, no
# host->device transfer per call) until its position has shown this many
# distinct values; then it is traced (a learning rate under a schedule
# costs this many compilations, not one per step).
MAX_BAKED_VALUES = 3

# Scalars whose values ATen checks on the host (histc: max >= min;
# softshrink: lambd >= 0; pow: no negative integer exponent of an integer
# tensor).  A traced value is not in the kernel key, so a cache hit re-runs
# the checks (in Python: such kernels stay out of the C++ cache).
META_CHECKED_SCALARS = {
    "aten::histc": ("min", "max"),
    "aten::softshrink": ("lambd",),
    "aten::pow": ("exponent",),
    "aten::pow_": ("exponent",),
}


class OpEntry:
    """An overload's schema, lowering and how its Scalars are passed."""

    __slots__ = ("schema", "lowering", "static", "kinds", "dynamic", "seen", "trace_offsets", "meta_checked",
                 "recheck")

    def __init__(self, op):
        self.schema = schema_of(op)
        self.lowering = find_lowering(op)
        names = self.lowering.static if self.lowering is not None else ()
        self.static = frozenset(self.schema.name_to_index[n] for n in names)
        # Argument kinds, with the lowering's traced floats made Scalars (a
        # tensor of the same name -- `lr` of the tensor_lr overloads -- stays a tensor).
        traced = self.lowering.traced if self.lowering is not None else ()
        self.kinds = [
            SCALAR if name in traced and kind not in (TENSOR, OPT_TENSOR) else kind
            for name, kind in zip(self.schema.names, self.schema.kinds)
        ]
        self.dynamic = set()  # Scalar positions now traced
        self.seen = {}  # position -> distinct values baked so far
        self.trace_offsets = True  # views at offsets read at a traced index (row_offsets.py); off for ops whose outputs sit at their input's offset
        names = META_CHECKED_SCALARS.get(self.schema.op._schema.name, ())
        self.meta_checked = frozenset(self.schema.name_to_index[n] for n in names)
        self.recheck = False  # a meta-checked Scalar is traced: hits re-run the meta kernel

    def pin_offsets(self):
        """Key this op's views by their offsets from now on (here and in C++)."""
        self.trace_offsets = False
        op = self.schema.op
        _C._set_static_offsets(op._schema.name, op._schema.overload_name)

    def note_scalars(self, values) -> bool:
        """Record the baked Scalar values of a cache miss; True if a position
        just became traced (the call's key must then be rebuilt)."""
        promoted = False
        for i, (kind, v) in enumerate(zip(self.kinds, values)):
            if i in self.static or i in self.dynamic or v is None:
                continue
            if kind is SCALAR or ((kind is TENSOR or kind is OPT_TENSOR) and not isinstance(v, torch.Tensor)):
                seen = self.seen.setdefault(i, set())
                seen.add((float, v.hex()) if type(v) is float else (type(v), v))
                if len(seen) > MAX_BAKED_VALUES:
                    self.dynamic.add(i)
                    self.recheck = self.recheck or i in self.meta_checked
                    op = self.schema.op
                    _C._set_dynamic_scalar(op._schema.name, op._schema.overload_name, i)
                    promoted = True
        return promoted


_entries: dict = {}


def entry_of(op) -> OpEntry:
    e = _entries.get(op)
    if e is None:
        e = _entries[op] = OpEntry(op)
    return e


# ------------------------------------------------------------- kernels


class _Kernel:
    """A compiled kernel and how to wire one call to it."""

    __slots__ = (
        "jitted",
        "input_slots",
        "random",
        "fresh",  # [(sizes, strides, dtype)] outputs to allocate
        "resized",  # [(arg position, sizes, strides)] out= args to resize first
        "writes",  # [("fresh", k) | ("slot", slot) | ("resized", position)] per kernel output
        "sigs",  # box signature per kernel output (filled on first run)
        "donating",  # (executable donating written inputs, flat positions) or None
        "sharding",  # where outputs live
        "checks",  # device-side check table when the last output is a check code
        "returns",  # how to assemble the op's return value
        "key",  # keys the executable on disk (the in-memory key, or UNCACHEABLE)
        "recheck",  # its calls re-run the meta kernel's value checks (OpEntry.recheck)
        "__weakref__",  # (tests see evicted kernels freed)
    )

    def fastpath_spec(self):
        """This kernel as csrc/fastpath.cpp caches it, or None if its calls
        need Python (out= resizing, view returns)."""
        if self.resized or self.sigs is None or self.recheck:
            return None
        returns = []
        for kind, ref in self.returns:
            if kind == "fresh":
                returns.append((0, [ref]))
            elif kind == "arg":
                returns.append((1, [ref]))
            elif kind == "none":
                returns.append((2, []))
            elif kind == "fresh_list":
                returns.append((3, list(ref)))
            elif kind == "int" and -(2**31) <= ref < 2**31:
                returns.append((4, [ref]))
            else:
                return None
        writes = [(0 if kind == "fresh" else 1, ref) for kind, ref in self.writes]
        donating, donated = self.donating if self.donating is not None else (None, [])
        return (
            self.jitted,
            list(self.input_slots),
            list(self.fresh),
            writes,
            list(self.sigs),
            returns,
            self.random,
            donating,
            donated,
            self.checks,
        )

    def _check_donation(self, entries):
        """After the first run: a buffer is worth donating only when the
        new value has the box's shape and dtype.  In-place writes keep both
        unless they rewrite a whole storage through a reshaped view; such a
        kernel stops donating (the box is rebound either way, so the one
        donated run was still correct)."""
        if self.donating is None:
            return
        sig_of = dict(zip(self.writes, self.sigs))
        for position in self.donating[1]:
            slot = self.input_slots[position]
            if sig_of.get(("slot", slot)) != entries[slot][1]:
                self.donating = None
                return


def run(op, args, kwargs):
    """One eager call of a lowered op (Python path)."""
    return run_with_kernel(op, args, kwargs)[0]


def run_with_kernel(op, args, kwargs):
    """One eager call of a lowered op: (result, the kernel that ran, or
    None when no kernel ran: a fill served from the host)."""
    _drain()
    entry = entry_of(op)
    sch = entry.schema
    values = sch.normalize(args, kwargs)
    call = Call()
    key = call.key(sch, entry, values)
    kernel = _cache.get(key)
    if kernel is None and entry.note_scalars(values):
        call = Call()
        key = call.key(sch, entry, values)
        kernel = _cache.get(key)
    if kernel is not None and entry.recheck:
        _run_meta(entry, values, call)
    if kernel is None:
        served = host_fill.serve(op, values, call, key)
        if served is not None:
            stats["calls"] += 1
            return served, None
        try:
            kernel = _build(entry, values, call, key)
        except _OffsetsInOutputs:
            entry.pin_offsets()
            return run_with_kernel(op, args, kwargs)
        _cache[key] = kernel
        stats["compiles"] += 1
    stats["calls"] += 1
    return _execute(kernel, sch, values, call), kernel


def _execute(kernel, sch, values, call):
    device = torch.device("tpu", call.device)
    fresh = [torch.empty_strided(s, st, dtype=dt, device=device) for s, st, dt in kernel.fresh]
    resized_addresses = {}
    for position, sizes, strides in kernel.resized:
        t = values[position]
        t.resize_(sizes)
        if t.stride() != strides:
            t.as_strided_(sizes, strides)
        resized_addresses[position] = _tensor_info(t)[0]
    if kernel.resized:
        # Apply the resizes' storage moves now: drained after the results
        # are bound, a move would overwrite them with the old bytes.
        _drain()
    entries = call.entries
    flat = [entries[s][0] for s in kernel.input_slots]
    flat.extend(call.dyn)
    if kernel.random:
        seed, offset = _next_rng(call.generator, call.device, 1)
        flat.extend((seed >> 32, seed & 0xFFFFFFFF, offset >> 32, offset & 0xFFFFFFFF))
    try:
        results = _executable_for(kernel, flat)(*flat)
    except TypeError as e:  # JAX refused an operand while tracing the lowering
        raise _not_implemented_for(sch, values, e) from e
    if kernel.checks is not None:
        checks.pending.append((results[-1], kernel.checks))
        checks.maybe_fold()
    if launch_blocking:
        wait_for(results)
    if kernel.sigs is None:
        kernel.sigs = [None if r is None else boxes.signature(tuple(r.shape), np.dtype(r.dtype)) for r in results]
        kernel._check_donation(entries)
    addresses = call.addresses
    bind = _boxes.__setitem__
    for (kind, ref), result, sig in zip(kernel.writes, results, kernel.sigs):
        if result is None:
            continue
        if kind == "fresh":
            address = fresh[ref].data_ptr()
        elif kind == "slot":
            address = addresses[ref]
        else:
            address = resized_addresses[ref]
        if address:
            bind(address, (result, sig))
    return _assemble(kernel.returns, values, fresh)


def _executable_for(kernel, flat):
    """The donating executable when every donated buffer's only holders
    are its box entry and `flat` (the rule csrc/fastpath.cpp applies),
    else the plain one.  (getrefcount counts its own argument too.)"""
    if kernel.donating is not None:
        executable, positions = kernel.donating
        if all(sys.getrefcount(flat[p]) == 3 for p in positions):
            return executable
    return kernel.jitted


def _assemble(returns, values, fresh):
    out = []
    for kind, ref in returns:
        if kind == "fresh":
            out.append(fresh[ref])
        elif kind == "fresh_list":
            out.append([fresh[k] for k in ref])
        elif kind == "fresh_view":
            k, sizes, strides, offset = ref
            out.append(fresh[k].as_strided(sizes, strides, offset))
        elif kind == "arg":
            out.append(values[ref])
        elif kind == "view":
            position, sizes, strides, delta = ref
            out.append(values[position].as_strided(sizes, strides, values[position].storage_offset() + delta))
        elif kind == "int":
            out.append(ref)
        else:
            out.append(None)
    if len(out) == 1:
        return out[0]
    if not out:
        return None
    return tuple(out)


# --------------------------------------------------------- cache misses


def _meta_storage(nbytes, cache, address):
    storage = cache.get(address)
    if storage is None:
        storage = cache[address] = torch.UntypedStorage(nbytes, device="meta")
    return storage


def _to_meta(t, call, storages):
    if not isinstance(t, torch.Tensor):
        return t
    if t.is_cpu:
        # A CPU scalar tensor mixes with device tensors in PyTorch; meta
        # kernels reject it next to meta tensors, so it becomes a meta
        # scalar of its dtype (same promotion rank: a 0-dim tensor).
        return torch.empty((), dtype=t.dtype, device="meta")
    address, nbytes, sizes, strides, offset, _ = call.infos[id(t)]
    m = torch.empty(0, dtype=t.dtype, device="meta")
    m.set_(_meta_storage(nbytes, storages, address), offset, sizes, strides)
    return m


def _meta_values(sch, values, call):
    """Arguments as meta tensors that share storage like the real ones do."""
    storages = {}
    out = []
    for kind, v in zip(sch.kinds, values):  # schema kinds: meta kernels take floats as floats
        if v is None:
            out.append(None)
        elif kind is TENSOR or kind is OPT_TENSOR:
            out.append(_to_meta(v, call, storages))
        elif kind is TENSOR_LIST or kind is OPT_TENSOR_LIST:
            out.append([None if t is None else _to_meta(t, call, storages) for t in v])
        elif kind is GENERATOR:
            out.append(None)
        elif type(v) is torch.device and v.type == "tpu":
            out.append(torch.device("meta"))
        else:
            out.append(v)
    return out


def _lowering_view(meta_values):
    """Meta values as lowerings see them: wrapped numbers back to Python
    numbers, so promotion helpers treat them as scalars."""
    out = []
    for v in meta_values:
        if isinstance(v, torch.Tensor) and v.is_cpu and _is_wrapped(v):
            v = v.item()
        out.append(v)
    return out


def _flatten_outputs(meta_out, sch):
    """Meta outputs per schema return, each a tensor, None or list."""
    if sch.num_returns == 0:
        return []
    if sch.num_returns == 1:
        return [meta_out]
    return list(meta_out)


def _geometry(t):
    return tuple(t.shape), tuple(t.stride()), t.storage_offset()


def _run_meta(entry, values, call):
    """ATen's checks and output metadata for a call: (meta values, meta
    outputs), raising what ATen raises."""
    sch = entry.schema
    lowering = entry.lowering
    aten_checks.before_meta(sch, values)
    meta_values = aten_checks.meta_arguments(sch, _meta_values(sch, values, call))
    margs, mkwargs = sch.split(meta_values)
    if lowering.accepts is not None and not lowering.accepts(*margs, **mkwargs):
        raise Declined(f"the lowering of {sch.op} does not take these arguments")
    try:
        meta_op = meta_fixes.meta_kernel(sch.op)
        meta_out = aten_checks.in_place_meta(sch, values, meta_values, lambda: meta_op(*margs, **mkwargs))
    except (NotImplementedError, AttributeError, torch._subclasses.fake_tensor.DynamicOutputShapeException) as e:
        # (AttributeError: a broken meta kernel in PyTorch itself)
        if lowering.meta is None or not isinstance(e, NotImplementedError):
            raise Unsupported(f"no meta kernel for {sch.op}: {e}") from e
        meta_out = lowering.meta(*margs, **mkwargs)
    except RuntimeError as e:
        if "data-dependent" in str(e) or "meta" in str(e).lower() and "not implemented" in str(e).lower():
            raise Unsupported(str(e)) from e
        raise
    return meta_values, meta_out


def _build(entry, values, call, key):
    sch = entry.schema
    lowering = entry.lowering
    if lowering is None:
        raise Unsupported(f"no lowering for {sch.op}")

    meta_values, meta_out = _run_meta(entry, values, call)
    if any(isinstance(m, torch.Tensor) and m.layout != torch.strided for m in torch.utils._pytree.tree_leaves(meta_out)):
        sparse_layouts.unsupported(sch.op)  # (a sparse result: embedding_bag's gradient with sparse=True)
    meta_out = meta_fixes.masked_outputs(sch, values, meta_out)
    meta_fixes.output_layout(sch, values, meta_out)
    scalar_checks = scalar_overflow.traced_checks(sch, values, meta_out, entry.dynamic)
    kernel = _Kernel()
    kernel.recheck = entry.recheck
    kernel.random = lowering.is_random(*sch.split(meta_values))
    kernel.sigs = None
    kernel.fresh = []
    kernel.resized = []
    kernel.writes = []
    kernel.returns = []

    # Expected kernel outputs: the op's own (non-aliased) returns, then the
    # new values of mutated arguments (the functional convention).
    expected = []  # (meta tensor or None, target)
    per_return = _flatten_outputs(meta_out, sch)
    for r, (alias, m) in enumerate(zip(sch.return_alias, per_return)):
        if alias is not None:
            if sch.op._schema.returns[r].alias_info.is_write:
                kernel.returns.append(("arg", alias))
            else:  # (its offset relative to the input's, which a traced row moves)
                sizes, strides, offset = _geometry(m)
                kernel.returns.append(("view", (alias, sizes, strides, offset - meta_values[alias].storage_offset())))
            continue
        if sch.return_is_list[r]:
            refs = []
            for item in m:
                refs.append(_add_fresh(kernel, item, expected))
            kernel.returns.append(("fresh_list", refs))
        elif m is None:
            kernel.returns.append(("none", None))
            expected.append((None, None))
        elif isinstance(m, int):  # a size (attention's max_q/max_k): known from the meta kernel
            kernel.returns.append(("int", m))
            expected.append((None, None))
        elif m.storage_offset() != 0:
            # (as_strided_scatter keeps self's storage layout): the kernel
            # writes a whole fresh storage, the op returns its view
            if call.traced_views:
                raise _OffsetsInOutputs()
            k = _add_fresh(kernel, m, expected, whole_storage=True)
            kernel.returns.append(("fresh_view", (k,) + _geometry(m)))
        else:
            kernel.returns.append(("fresh", _add_fresh(kernel, m, expected)))

    written_checks.after_meta(sch, values, meta_values)
    _match_resized_out_layout(sch, values, meta_values, call)
    # A written tensor with a lazy conjugate / negative bit (`x.conj().fill_(v)`)
    # stores the value with the bit undone: reading it back applies the bit.
    stored_bits = {}
    for position in sch.mutated:
        real = values[position]
        meta = meta_values[position]
        if isinstance(real, (list, tuple)):
            for t, m in zip(real, meta):
                expected.append((m, _mutation_target(kernel, call, position, t, m, single=False)))
                stored_bits[len(expected) - 1] = math_bits(t)
        else:
            expected.append((meta, _mutation_target(kernel, call, position, real, meta, single=True)))
            stored_bits[len(expected) - 1] = math_bits(real)

    input_slots = [s for s, e in enumerate(call.entries) if e is not None]
    kernel.input_slots = input_slots
    readers = _readers(entry, values, call)
    lowering_positions = sch.lowering_positions
    ctx_args = [_lowering_view(meta_values)[i] for i in sch.lowering_positions]
    out_meta = _computed_metas(sch, meta_values, [m for m, _ in expected])
    precision = matmul_precision()
    n_in = len(input_slots)
    op = sch.op
    write_targets = [t for _, t in expected]
    written_slots = sorted({t[1] for t in write_targets if t is not None and t[0] == "slot"})

    def kernel_fn(*flat):
        arrays = dict(zip(input_slots, flat[:n_in]))
        dyn = flat[n_in:]
        rng = dyn[-4:] if kernel.random else None
        ctx = LoweringContext(op, ctx_args, out_meta, precision, rng)
        lowered = [readers[i](arrays, dyn) for i in lowering_positions]
        for position, dtype in scalar_checks:
            scalar_overflow.device_check(ctx, readers[position](arrays, dyn), dtype)
        lowered = promotion.in_common_dtype(op, ctx, lowered, kernel.random)
        with matmul_scope(precision):
            result = lowering.fn(ctx, *lowered)
        flat_result = _flatten_result(result, len(expected), op)
        slots = dict(arrays)
        fresh_out = []
        for k, ((m, target), value) in enumerate(zip(expected, flat_result)):
            if target is None or m is None:
                continue
            value = apply_math_bits(_conform(value, m, op), stored_bits.get(k, 0))
            sizes, strides, offset = _geometry(m)
            if target[0] == "fresh" or target[0] == "resized":
                fresh_out.append(plans.write_view(None, target[2], sizes, strides, offset, value))
            elif target[3] is not None:  # a view at a traced index
                position, dim, residual, span = target[3]
                slot = target[1]
                slots[slot] = row_offsets.write_at(
                    slots[slot], dim, dyn[position], span, sizes, strides, residual, value)
            else:
                slot = target[1]
                slots[slot] = plans.write_view(slots.get(slot), target[2], sizes, strides, offset, value)
        outputs = tuple(fresh_out) + tuple(slots[s] for s in written_slots)
        if ctx.checks:
            kernel.checks = tuple((message, error, str(op)) for _, _, message, error in ctx.checks)
            outputs += (checks.check_code(ctx.checks),)
        return outputs

    kernel.checks = None
    kernel.writes = [t[:2] for t in write_targets if t is not None and t[0] != "slot"]
    kernel.writes += [("slot", s) for s in written_slots]
    # Outputs live on the call's device even when no input array says so
    # (factories, kernels reading only scalars).
    kernel.sharding = _sharding(call.device)
    # Compiled at the first call, from disk when another process compiled
    # this key before (the device-side check table is recorded while
    # tracing, so it travels with the executable).
    kernel.key = key if executable_cache.covers(lowering.fn) else (executable_cache.UNCACHEABLE,)
    aux = (lambda: kernel.checks, lambda checks: setattr(kernel, "checks", checks))
    options = {"out_shardings": kernel.sharding}
    kernel.jitted = executable_cache.LazyExecutable(kernel_fn, kernel.key, options, aux=aux)
    # In-place writes donate the written inputs' old buffers (XLA updates
    # them in place) when the box is their only holder.  Both variants
    # compile lazily, so a kernel whose buffers are never shared compiles
    # one executable, from its first call on.
    donated = [input_slots.index(s) for s in written_slots if s in input_slots]
    kernel.donating = None
    if donated:
        options = dict(options, donate_argnums=tuple(donated))
        kernel.donating = (executable_cache.LazyExecutable(kernel_fn, kernel.key, options, aux=aux), donated)
    return kernel


_shardings: dict = {}


def _sharding(index):
    sharding = _shardings.get(index)
    if sharding is None:
        sharding = _shardings[index] = jax.sharding.SingleDeviceSharding(devices.jax_device(index))
    return sharding


def _not_implemented_for(sch, values, error):
    """What CPU kernels raise for a dtype they lack (NotImplementedError,
    naming the op and dtypes), with JAX's reason."""
    dtypes = {c10_name(v.dtype) for v in values if isinstance(v, torch.Tensor)}
    name = sch.op._schema.name.split("::")[1]
    listed = ", ".join(f"'{d}'" for d in sorted(dtypes))
    return NotImplementedError(f'"{name}" not implemented on tpu for {listed}: {error}')


def _add_fresh(kernel, m, expected, whole_storage=False):
    """A fresh output to allocate; `whole_storage`: allocated as its whole
    storage (1-D), for an output that sits at a storage offset."""
    k = len(kernel.fresh)
    sizes, strides, offset = _geometry(m)
    nbytes = m.untyped_storage().nbytes()
    if whole_storage:
        sizes, strides = (nbytes // m.element_size(),), (1,)
    elif offset != 0:
        raise Unsupported("fresh output with a storage offset")
    kernel.fresh.append((sizes, strides, m.dtype))
    expected.append((m, ("fresh", k, nbytes)))
    return k


def _match_resized_out_layout(sch, values, meta_values, call):
    """An out= tensor that must be resized gets the layout the functional op
    would give its output (as TensorIterator does on CPU/CUDA: `mul(x.t(), 2,
    out=empty(0))` is transposed there), where ATen's meta kernel leaves it
    contiguous."""
    outs = [p for p in sch.mutated if sch.op._schema.arguments[p].is_out]
    resized = [
        p for p in outs
        if isinstance(values[p], torch.Tensor) and tuple(meta_values[p].shape) != call.infos[id(values[p])][2]
    ]
    if not resized:
        return
    func_out = written_checks.functional_meta_result(sch, meta_values)
    for p, f in zip(outs, func_out):
        m = meta_values[p]
        # (a dense layout only: the functional op may return a view of its
        # input -- conj_physical of a real x[::2] -- which out= is not)
        if (p in resized and isinstance(f, torch.Tensor) and f.shape == m.shape and f.stride() != m.stride()
                and written_checks.non_overlapping_and_dense(f)):
            m.as_strided_(f.shape, f.stride())


def _computed_metas(sch, meta_values, out_meta):
    """The outputs as the lowering computes them: a pointwise op's out=
    tensors carry the functional op's dtype (TensorIterator computes in the
    inputs' common dtype and casts on the store: `special.i1(x_f64,
    out=f32)` is i1 in float64, then rounded), the rest as they are."""
    outs = [p for p in sch.mutated if sch.op._schema.arguments[p].is_out]
    if not outs or torch.Tag.pointwise not in sch.op.tags or len(outs) != len(sch.mutated):
        return out_meta
    first = len(out_meta) - len(outs)  # (the mutated arguments' entries come last, in order)
    computed = list(out_meta)
    for k, f in enumerate(written_checks.functional_meta_result(sch, meta_values)):
        m = out_meta[first + k] if first + k < len(out_meta) else None
        if isinstance(f, torch.Tensor) and isinstance(m, torch.Tensor) and f.shape == m.shape and f.dtype != m.dtype:
            computed[first + k] = f
    return computed


def _mutation_target(kernel, call, position, real, meta, single):
    """Where the new value of a mutated argument goes: ("slot", slot,
    storage bytes, traced rows or None) or ("resized", position, bytes)."""
    address, nbytes, sizes, strides, offset, _ = call.infos[id(real)]
    post = _geometry(meta)
    if post != (sizes, strides, offset) and single:
        if call.traced_views:
            raise _OffsetsInOutputs()
        # out= that must resize: resize the real tensor now and on every call.
        kernel.resized.append((position, post[0], post[1]))
        real.resize_(post[0])
        if real.stride() != post[1]:
            real.as_strided_(post[0], post[1])
        new_address, new_nbytes = _tensor_info(real)[:2]
        if new_address != address:
            return ("resized", position, new_nbytes)
        nbytes = new_nbytes
    return ("slot", call.slot_of[address], nbytes, call.traced_views.get(id(real)))


def math_bits(t):
    """ATen's lazy conjugate / negative bits (1 | 2).  Most ops never see them
    (the Conjugate/Negative fallbacks resolve inputs first); the ops ATen lets
    through (copy_, clone, mm, dot, ... and views) read the logical value."""
    return int(t.is_conj()) | (int(t.is_neg()) << 1)


def apply_math_bits(x, bits):
    if bits & 1:
        x = jnp.conj(x)
    return -x if bits & 2 else x


def _baked_scalar(v):
    """A Scalar as a JAX value.  Python ints past int64 (up to 2**64 - 1) are
    c10 uint64 Scalars: kept as uint64, so that the lowering's cast to the
    compute dtype wraps them as ATen's static_cast does (2**63 is -2**63 in
    int64, 0 in int32, 9.2e18 in float)."""
    if is_uint64_scalar(v):
        return jnp.asarray(v, dtype=jnp.uint64)
    return jnp.asarray(v)


def _readers(entry, values, call):
    """Per argument, a function (arrays, dyn) -> the lowering's argument."""
    readers = []
    dyn_index = [0]

    def next_dyn():
        k = dyn_index[0]
        dyn_index[0] += 1
        return lambda arrays, dyn: dyn[k]

    def scalar_reader(i, v):
        if i in entry.dynamic:
            return next_dyn()
        # Baked in, but as a weak-typed JAX scalar: lowerings see the same
        # kind of value whether the position is baked or traced.
        return lambda arrays, dyn: _baked_scalar(v)

    def tensor_reader(t):
        if t.is_cpu:
            return next_dyn()
        address, nbytes, sizes, strides, offset, _ = call.infos[id(t)]
        slot = call.slot_of[address]
        dtype = to_jax(t.dtype)
        bits = math_bits(t)
        if id(t) in call.traced_views:
            position = dyn_index[0]  # (its index was appended to dyn while keying, in argument order)
            dyn_index[0] += 1
            _, dim, residual, span = call.traced_views[id(t)]
            read = lambda arrays, dyn: row_offsets.read_at(
                arrays[slot], dim, dyn[position], span, sizes, strides, residual, dtype)
        else:
            read = lambda arrays, dyn: plans.read_view(arrays.get(slot), sizes, strides, offset, dtype)
        if bits:
            return lambda arrays, dyn: apply_math_bits(read(arrays, dyn), bits)
        return read

    for i, (kind, v) in enumerate(zip(entry.kinds, values)):
        if v is None:
            readers.append(_const(None))
        elif kind is TENSOR or kind is OPT_TENSOR:
            readers.append(tensor_reader(v) if isinstance(v, torch.Tensor) else scalar_reader(i, v))
        elif kind is TENSOR_LIST or kind is OPT_TENSOR_LIST:
            items = [None if t is None else tensor_reader(t) for t in v]
            readers.append(lambda arrays, dyn, items=items: [None if r is None else r(arrays, dyn) for r in items])
        elif kind is SCALAR and i not in entry.static:
            readers.append(scalar_reader(i, v))
        elif kind is SCALAR_LIST:
            ks = list(range(dyn_index[0], dyn_index[0] + len(v)))
            dyn_index[0] += len(v)
            readers.append(lambda arrays, dyn, ks=ks: [dyn[k] for k in ks])
        elif kind is GENERATOR:
            readers.append(_const(None))
        else:
            readers.append(_const(v))
    return readers


def _const(v):
    return lambda arrays, dyn: v


def _flatten_result(result, n, op):
    if isinstance(result, (tuple, list)):
        flat = []
        for r in result:
            if isinstance(r, (tuple, list)):
                flat.extend(r)
            else:
                flat.append(r)
    else:
        flat = [result]
    if len(flat) != n:
        raise RuntimeError(f"torchtpu: lowering of {op} returned {len(flat)} values, expected {n}")
    return flat


def _conform(value, m, op):
    """Cast a lowering's result to the dtype ATen says; check its shape."""
    dtype = to_jax(m.dtype)
    value = jax.numpy.asarray(value)
    if value.dtype != dtype:
        value = convert(value, dtype)
    shape = tuple(m.shape)
    if value.shape != shape:
        if 0 in shape:  # nothing to get wrong: placeholder outputs may be scalars
            return jnp.zeros(shape, dtype)
        raise RuntimeError(f"torchtpu: lowering of {op} returned shape {value.shape}, ATen expects {shape}")
    return value
