"""An AOTAutograd (aten, functional) FX graph as one JAX function, through the
same lowering table as eager dispatch.

`GraphLowering(gm)` checks once that every node can be lowered (else
`Unlowerable` names the op) and is then called inside `jax.jit` with the
graph inputs as JAX values; it returns the graph outputs and the new values
of graph inputs the graph mutates (`copy_` into a placeholder: BatchNorm
running stats, an optimizer step under compile)."""

import hashlib
import operator

import jax.numpy as jnp
import numpy as np
import torch
from torch.fx.node import map_aggregate, map_arg

from ..ops import aten_checks, promotion, scalar_overflow, transfer
from ..ops.context import LoweringContext, matmul_scope
from ..ops.registry import find_graph_lowering
from ..ops.schema import schema_of
from ..runtime import devices, executable_cache
from ..runtime.dtypes import convert, to_jax, torch_to_numpy
from . import control_flow
from .dynamic import SIZE_QUERIES, SYMBOLIC_OPS, MaskRules, Unpaddable
from .dynamic import node_meta as _meta

aten = torch.ops.aten
# A random op inside activation checkpointing: `graphsafe_run_with_rng_state(op,
# *args, rng_state=<generator input>)`, in the forward graph and again in the
# backward's recomputation, each with its own generator; AOTAutograd seeds the
# two alike and advances them alike, so both draw the same numbers.
GRAPHSAFE_RNG = torch._prims.rng_prims.graphsafe_run_with_rng_state


WITH_EFFECTS = torch.ops.higher_order.with_effects


def _inline_effect_tokens(gm):
    """AOTAutograd threads an effect token through ops with side effects
    (`with_effects(token, aten._linalg_check_errors, info, ...)`, from every
    non-`_ex` linalg op): the executable runs its nodes in order anyway, so
    each becomes a plain call of its op, and the token it returns the token
    it was given -- the graph hands AOTAutograd's runtime its own token
    placeholder back."""
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not WITH_EFFECTS:
            continue
        token, op, *args = node.args
        with gm.graph.inserting_before(node):
            call = gm.graph.call_function(op, tuple(args), dict(node.kwargs))
        call.meta["val"] = node.meta["val"][1] if len(node.meta["val"]) == 2 else tuple(node.meta["val"][1:])
        single = len(node.meta["val"]) == 2
        for user in list(node.users):
            if user.target is not operator.getitem:
                raise Unlowerable("with_effects used other than through getitem")
            if user.args[1] == 0:
                user.replace_all_uses_with(token)
            elif single:
                user.replace_all_uses_with(call)
            else:
                with gm.graph.inserting_after(call):
                    item = gm.graph.call_function(operator.getitem, (call, user.args[1] - 1))
                item.meta["val"] = user.meta.get("val")
                user.replace_all_uses_with(item)
            gm.graph.erase_node(user)
        gm.graph.erase_node(node)
    gm.recompile()


def _unwrapped(node):
    """(op, args, kwargs) a node computes: a graph-safe random op's own."""
    if node.target is GRAPHSAFE_RNG:
        return node.args[0], node.args[1:], {k: v for k, v in node.kwargs.items() if k != "rng_state"}
    return node.target, node.args, node.kwargs


class Unlowerable(Exception):
    """A node this backend cannot lower (the graph then runs op by op)."""


def _reject_bool_views_written_back_as_bytes(gm):
    """`x.view(torch.bool)[...] = True` on a tensor of another dtype: the
    functional graph computes a bool value from x's bytes and views it back
    as x's dtype, but a JAX bool holds only 0/1, so every other byte of x
    would be lost -- in the executable and op by op alike.  Eager mode keeps
    the bytes (it writes into the storage), so raise and say so."""
    from_bytes = set()  # bool values made from another dtype's bytes
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        if node.target in (aten.view.dtype, aten.view_copy.dtype):
            source, target = _meta(node.args[0]).dtype, node.args[1]
            if target == torch.bool and source != torch.bool:
                from_bytes.add(node)
            elif source == torch.bool and target != torch.bool and node.args[0] in from_bytes:
                raise NotImplementedError(
                    f"torchtpu: writing through a bool view of a {target} tensor (x.view(torch.bool)[...] = ...) "
                    "inside torch.compile would lose the tensor's other bytes; do that write outside the "
                    "compiled region (eager mode keeps them)"
                )
        elif any(i in from_bytes for i in node.all_input_nodes) and getattr(_meta(node), "dtype", None) == torch.bool:
            from_bytes.add(node)


def _flat_meta(val):
    if isinstance(val, (tuple, list)):
        return [v if isinstance(v, torch.Tensor) or v is None else None for v in val]
    return [val]


def _is_tpu_or_scalar(val):
    return not isinstance(val, torch.Tensor) or val.device.type == "tpu" or val.dim() == 0


class GraphLowering:
    def __init__(self, gm: torch.fx.GraphModule):
        _inline_effect_tokens(gm)
        self.gm = gm
        self.placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.output_node = next(n for n in gm.graph.nodes if n.op == "output")
        self.random = False
        self.checks = []
        self.ops = []  # aten overloads, in order (for dumps and stats)
        self.mutated_placeholders = []  # indices of inputs the graph copy_s into
        self.generator_inputs = set()  # placeholders holding a torch.Generator (GRAPHSAFE_RNG)
        self._fingerprint = None
        self.external_lowerings = False  # registered outside torchtpu (not cached on disk)
        self.constants = {}  # get_attr node -> host array (a tensor literal in the model's code)
        self.subgraphs = {}  # get_attr node -> GraphLowering (torch.cond branches, while_loop bodies)
        # Returned `.cpu()` copies of device values (`lengths.cpu()` for
        # pack_padded_sequence, a metric): computed here, copied to the host
        # after the call.
        self.host_outputs = set()
        # CPU values computed from constants or CPU inputs only
        # (`torch.tensor([..]).to(x.device)` lifts a CPU copy first; a plain
        # tensor attribute of the model, such as class weights, is a CPU
        # input): inside the executable they are arrays like any other, as
        # long as none is returned.
        self.from_constants = {p for p in self.placeholders if not _is_tpu_or_scalar(_meta(p))}
        # Sizes of CPU inputs stay exact under dynamic shapes (the host value
        # is sent as it is, unpadded).
        self.host_input_symbols = set()
        for p in self.from_constants:
            if _meta(p).device.type != "cpu":
                raise Unlowerable(f"graph input on {_meta(p).device}")
            for n in _meta(p).shape:
                if isinstance(n, torch.SymInt):
                    self.host_input_symbols |= n.node.expr.free_symbols
        for node in gm.graph.nodes:
            if node.op == "call_function":
                self._check(node)
            elif node.op == "get_attr":
                value = _attribute(gm, node.target)
                if isinstance(value, torch.fx.GraphModule):
                    self.subgraphs[node] = control_flow.subgraph(value)
                    continue
                self.constants[node] = _constant(value, node.target)
                self.from_constants.add(node)
            elif node.op in ("call_module", "call_method"):
                raise Unlowerable(f"FX node kind {node.op} ({node.target})")
        if self.subgraphs and self.symbolic:
            raise Unlowerable("torch.cond / while_loop in a dynamic-shape graph")
        self.device = _single_device(gm)
        _reject_bool_views_written_back_as_bytes(gm)
        returned = []
        map_arg(self.output_node.args[0], returned.append)
        # (a CPU input returned as it is, an effect token, is the caller's own tensor)
        if any(n in self.from_constants and n.op != "placeholder" and not _is_tpu_or_scalar(_meta(n))
               for n in returned):
            raise Unlowerable("the graph returns a CPU tensor")

    def fingerprint(self):
        """What this graph computes, independent of the process: its code
        and every node's metadata (lowerings read shapes, strides and dtypes
        from it).  Keys compiled executables on disk."""
        if self._fingerprint is None:
            external = self.external_lowerings or any(sub.external_lowerings for sub in self.subgraphs.values())
            code = self.gm.code if not external else executable_cache.UNCACHEABLE
            constants = tuple((str(a.dtype), a.shape, hashlib.sha256(a.tobytes()).hexdigest())
                              for a in self.constants.values())
            subgraphs = tuple(sub.fingerprint() for sub in self.subgraphs.values())
            self._fingerprint = (code, tuple(_describe(n.meta.get("val")) for n in self.gm.graph.nodes), constants,
                                 subgraphs)
        return self._fingerprint

    @property
    def symbolic(self) -> bool:
        """Whether dynamo made some sizes symbolic (dynamic=True, mark_dynamic)."""
        return any(_has_symbols(_meta(p)) for p in self.placeholders)

    def _is_returned_host_copy(self, node, host_only):
        """A `_to_copy` of a device value to the CPU that only the graph's
        output uses (not under dynamic shapes: its runner pads outputs)."""
        if node.target is not aten._to_copy.default or host_only or not _moves_device(node):
            return False
        if _meta(node).device.type != "cpu" or self.symbolic:
            return False
        return all(user is self.output_node for user in node.users)

    def _check(self, node):
        target = node.target
        if target is operator.getitem or target in SYMBOLIC_OPS or target in SIZE_QUERIES:
            return
        if target in control_flow.HIGHER_ORDER_OPS:
            control_flow.check(self, node)
            self.ops.append(target)
            return
        if target is GRAPHSAFE_RNG:
            generator = node.kwargs.get("rng_state")
            if not isinstance(generator, torch.fx.Node) or generator.op != "placeholder":
                raise Unlowerable("graphsafe_run_with_rng_state without a generator input")
            self.generator_inputs.add(self.placeholders.index(generator))
            if "val" not in node.meta:  # (the partitioner made the node without one)
                node.meta["val"] = _inferred_meta(*_unwrapped(node))
        target, node_args, node_kwargs = _unwrapped(node)
        if not isinstance(target, torch._ops.OpOverload):
            raise Unlowerable(f"{target} is not an aten op")
        inputs = []
        map_arg((node_args, node_kwargs), inputs.append)
        host_only = all(n in self.from_constants for n in inputs)
        if self._is_returned_host_copy(node, host_only):
            self.host_outputs.add(node)
            self.ops.append(target)
            return
        for val in _flat_meta(_meta(node)):
            if not _is_tpu_or_scalar(val):
                if not host_only:
                    raise Unlowerable(f"{target} produces a tensor on {val.device}")
                self.from_constants.add(node)
        if target is aten._to_copy.default and _moves_device(node) and not host_only:
            raise Unlowerable(f"{target} moves a tensor to another device")
        if target is aten.copy_.default:
            if node.args[0].op != "placeholder":
                raise Unlowerable("copy_ into an intermediate")
            index = self.placeholders.index(node.args[0])
            if index not in self.mutated_placeholders:
                self.mutated_placeholders.append(index)
            return
        lowering = find_graph_lowering(target)
        if lowering is None:
            raise Unlowerable(f"no lowering for {target}")
        if lowering.accepts is not None:
            args, kwargs = map_arg((node_args, node_kwargs), _meta)
            if not lowering.accepts(*args, **kwargs):
                raise Unlowerable(f"the lowering of {target} does not take these arguments")
        if schema_of(target).mutated:
            raise Unlowerable(f"in-place {target} in a functional graph")
        if node.target is not GRAPHSAFE_RNG:  # (which draws from its generator input)
            self.random = self.random or lowering.is_random(*map_arg((node_args, node_kwargs), _meta))
        self.external_lowerings = self.external_lowerings or not executable_cache.covers(lowering.fn)
        self.ops.append(target)

    def __call__(self, inputs, rng, precision, shapes=None, input_masks=None):
        """inputs: one value per placeholder (JAX arrays, Python scalars).
        With `shapes` (dynamic graphs) symbols take their padded values and
        `input_masks` say which input elements are real (dynamic.py).
        Returns (outputs, {placeholder index: new value})."""
        env = {}
        masks = {} if input_masks is not None else None
        self.shapes = shapes
        self.rules = MaskRules(shapes) if input_masks is not None else None  # (the runner ran check_merged)
        self.checks = []  # device-side checks of the lowered nodes: (ok, value, message, error, op)
        for i, (node, value) in enumerate(zip(self.placeholders, inputs)):
            env[node] = value
            if masks is not None:
                masks[node] = input_masks[i]
        self.masks = masks
        for node, value in self.constants.items():
            env[node] = jnp.asarray(value)  # (embedded in the executable)
        mutations = {}
        for index, node in enumerate(self.gm.graph.nodes):
            if node.op != "call_function":
                continue
            target = node.target
            if target is operator.getitem:
                env[node] = env[node.args[0]][node.args[1]]
                if masks is not None:
                    parent = masks.get(node.args[0])
                    masks[node] = parent[node.args[1]] if isinstance(parent, (list, tuple)) else parent
            elif target in SYMBOLIC_OPS:
                env[node] = target(*map_arg(node.args, lambda n: env[n]))
            elif target in SIZE_QUERIES:
                env[node] = _size_query(target, env, node, self.shapes, self.masks is not None)
            elif target in control_flow.HIGHER_ORDER_OPS:
                with matmul_scope(precision):
                    env[node] = control_flow.lower(self, node, env, precision)
            elif target is aten.copy_.default:
                dst = node.args[0]
                meta = self._concrete(_meta(dst))
                value = jnp.broadcast_to(jnp.asarray(env[node.args[1]]).astype(to_jax(meta.dtype)), tuple(meta.shape))
                mutations[self.placeholders.index(dst)] = value
                env[node] = value
                env[dst] = value
            else:
                with matmul_scope(precision):
                    env[node] = self._lower(node, env, rng, index, precision)
        outputs = map_arg(self.output_node.args[0], lambda n: env[n])
        return outputs, mutations

    def _lower(self, node, env, rng, index, precision):
        op, node_args, node_kwargs = _unwrapped(node)
        stream = index  # each random node draws its own key
        if node.target is GRAPHSAFE_RNG:
            # Its generator's own draw, not the node's place: the forward and
            # the backward's recomputation must agree.
            rng, stream = env[node.kwargs["rng_state"]], 0
        sch = schema_of(op)
        lowering = find_graph_lowering(op)
        values = sch.normalize(map_arg(node_args, lambda n: env[n]), map_arg(node_kwargs, lambda n: env[n]))
        metas = sch.normalize(map_arg(node_args, self._meta_of), map_arg(node_kwargs, self._meta_of))
        positions = sch.lowering_positions
        node_meta = self._meta_of(node)
        out_meta = _flat_meta(node_meta)
        # What ATen's kernels check and the meta kernels dynamo traced with do
        # not (an out-of-range softmax dim; Scalars ATen converts with an
        # overflow check, int8 x.clamp(max=1000)): checked now, as eager does.
        aten_checks.before_meta(sch, metas, padded=self.masks is not None)
        scalar_overflow.traced_checks(sch, values, node_meta, dynamic=())
        random = lowering.is_random(*map_arg((node_args, node_kwargs), self._meta_of))
        ctx = LoweringContext(op, [metas[i] for i in positions], out_meta, precision, rng if random else None)
        if random:
            ctx.stream = stream
        if self.shapes is not None:
            # A symbolic size used as a number (not as a size) is its true value.
            arg_nodes = sch.normalize(list(node_args), dict(node_kwargs))
            for i in positions:
                a = arg_nodes[i]
                if isinstance(a, torch.fx.Node) and isinstance(_meta(a), (torch.SymInt, torch.SymFloat)) and sch.kinds[i] in (
                    "scalar", "tensor", "opt_tensor"
                ):
                    try:
                        values[i] = self.shapes.true_value(_meta(a))
                    except Unpaddable:
                        if self.masks is not None:
                            raise
                        # (exact shapes: the value computed in the graph is the true one)
        args = promotion.in_common_dtype(op, ctx, [values[i] for i in positions], random)
        if self.masks is None:
            result = lowering.fn(ctx, *args)
        else:
            arg_nodes = sch.normalize(list(node_args), dict(node_kwargs))
            arg_masks = [self._mask_of(arg_nodes[i]) for i in positions]
            # (masks come from the symbolic metadata: which dims are padded)
            symbolic_in = sch.normalize(map_arg(node_args, _meta), map_arg(node_kwargs, _meta))
            in_metas = [symbolic_in[i] for i in positions]
            try:
                result, out_masks = self.rules.prepare(
                    node, op, args, arg_masks, in_metas, _flat_meta(_meta(node)), lowering.fn, ctx
                )
            except (ValueError, TypeError) as e:
                if "shape" not in str(e):
                    raise
                # Operands whose true sizes agree, padded to different sizes:
                # related symbols of which only some were kept exact (a
                # target's B*T against one_hot logits' B*T).  Their symbols
                # are kept exact too.
                raise Unpaddable(f"{op}: operands padded to different sizes ({e})", self._symbols_of(in_metas)) from e
            self.masks[node] = out_masks if isinstance(node_meta, (tuple, list)) else out_masks[0]
        self.checks.extend((ok, value, message, error, str(op)) for ok, value, message, error in ctx.checks)
        try:
            return _conform(result, node_meta, op)
        except _ShapeMismatch as e:
            if self.masks is None:
                raise
            # A size the graph knows statically that padding changes: dynamo
            # specialised `n // 2` to 1 for n = 3 (a guard n in [2, 3]), the
            # padded n = 4 slices 2.  The operands' symbols are kept exact.
            raise Unpaddable(str(e), self._symbols_of(in_metas)) from None

    def _symbols_of(self, metas):
        """The bucketed symbols in the sizes of these (lists of) metas."""
        flat = [m for v in metas for m in (v if isinstance(v, (list, tuple)) else [v])]
        return self.shapes.padded_symbols(flat)

    def _mask_of(self, arg):
        """An argument's mask: a list of them for a list of tensors (cat's
        pieces) when any piece has one."""
        if isinstance(arg, torch.fx.Node):
            return self.masks.get(arg)
        if isinstance(arg, (list, tuple)):
            masks = [self.masks.get(a) if isinstance(a, torch.fx.Node) else None for a in arg]
            if any(m is not None for m in masks):
                return masks
        return None

    def _concrete(self, meta):
        """A symbolic meta value at this call's padded sizes."""
        if self.shapes is None or not isinstance(meta, torch.Tensor) or not _has_symbols(meta):
            return meta
        shapes = self.shapes
        return torch.empty_strided(shapes.shape(meta.shape), shapes.shape(meta.stride()), dtype=meta.dtype,
                                   device="meta")

    def _meta_of(self, node):
        meta = _meta(node)
        if self.shapes is None:
            return meta
        if isinstance(meta, (tuple, list)):
            return type(meta)(self._concrete(m) for m in meta)
        if isinstance(meta, torch.SymInt):
            return self.shapes.size(meta)
        return self._concrete(meta)


def _attribute(gm, target):
    value = gm
    for name in target.split("."):
        value = getattr(value, name)
    return value


def _constant(value, target):
    """A tensor constant the graph reads (`get_attr`), as a host array."""
    if not isinstance(value, torch.Tensor):
        raise Unlowerable(f"FX get_attr of a {type(value).__name__} ({target})")
    # (read without dispatching: the backend runs under AOTAutograd's fake mode)
    if value.device.type == "tpu":
        return np.asarray(transfer.materialize(value))
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    try:
        with unset_fake_temporarily():  # a CPU literal (`x + torch.tensor(2.0)`): numpy() dispatches detach
            return torch_to_numpy(value.detach()).copy()
    except (TypeError, RuntimeError) as e:  # a dtype numpy lacks (bfloat16)
        raise Unlowerable(f"constant {target} on {value.device}: {e}") from e


def _inferred_meta(op, args, kwargs):
    """What `op` returns for the nodes' metadata (fake tensors), computed
    under their fake mode."""
    args, kwargs = map_arg((args, kwargs), _meta)
    flat = []
    map_aggregate((args, kwargs), flat.append)
    mode = torch._guards.detect_fake_mode(flat)
    if mode is None:
        raise Unlowerable(f"{op} without metadata")
    with mode:
        return op(*args, **kwargs)


def _single_device(gm):
    """The index of the one tpu device every tensor of the graph is on (a
    factory's `device="tpu:2"` included), or None when no tensor is on a
    tpu.  One executable runs on one device: a graph spanning several, or
    naming one that does not exist, runs op by op (eager places each op
    and raises eager's error)."""
    found = set()
    for node in gm.graph.nodes:
        for val in _flat_meta(node.meta.get("val")):
            if isinstance(val, torch.Tensor) and val.device.type == "tpu":
                found.add(val.device.index)
    if len(found) > 1:
        raise Unlowerable(f"tensors on several devices ({', '.join(f'tpu:{i}' for i in sorted(found))})")
    index = next(iter(found), None)
    if index is not None and index >= devices.count():
        raise Unlowerable(f"tensors on tpu:{index}, which does not exist")
    return index


def _moves_device(node):
    """A `_to_copy` onto another device (a CPU scalar becoming a device
    scalar is a graph input like any other: not a move)."""
    src, out = _meta(node.args[0]), _meta(node)
    if not isinstance(src, torch.Tensor) or not isinstance(out, torch.Tensor):
        return False
    return src.device != out.device and not (src.device.type == "cpu" and src.dim() == 0)


def _describe(val):
    """A node's metadata as plain values (tensors by their geometry)."""
    if isinstance(val, torch.Tensor):
        return ("tensor", _describe(tuple(val.shape)), _describe(tuple(val.stride())),
                _describe(val.storage_offset()), val.dtype, val.device.type)
    if isinstance(val, (tuple, list)):
        return tuple(_describe(v) for v in val)
    if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return ("symbolic", type(val).__name__, str(val.node.expr))
    if isinstance(val, torch.Generator):  # (an input: its state is not part of the graph)
        return ("generator", val.device.type)
    return val


def _has_symbols(meta) -> bool:
    if isinstance(meta, torch.SymInt):
        return True
    return isinstance(meta, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in meta.shape)


def _size_query(target, env, node, shapes, padded):
    x = env[node.args[0]]
    if target is aten.sym_size.int:
        return x.shape[node.args[1]]
    if target is aten.sym_numel.default:
        return int(x.size)
    # A stride or storage offset: JAX arrays have none; the symbolic one
    # evaluated at exact sizes (at padded ones it would be the padded
    # layout's, so its symbols are kept exact).
    meta = _meta(node)
    if not isinstance(meta, torch.SymInt):
        return meta
    symbols = meta.node.expr.free_symbols & shapes.bucketed if padded else set()
    if symbols:
        raise Unpaddable(f"{target} inside a dynamic graph", symbols)
    return shapes.size(meta)


def _conform(result, meta, op):
    """Cast a lowering's results to ATen's dtypes; check shapes."""
    if isinstance(meta, (tuple, list)):
        flat = list(result) if isinstance(result, (tuple, list)) else [result]
        if len(flat) == 1 and isinstance(flat[0], (tuple, list)):
            flat = list(flat[0])
        out = [_conform_one(r, m, op) for r, m in zip(flat, meta)]
        return type(meta)(out) if isinstance(meta, tuple) else out
    if isinstance(result, (tuple, list)):
        result = result[0] if result else None  # (an op returning nothing: an assertion)
    return _conform_one(result, meta, op)


def _conform_one(value, meta, op):
    if not isinstance(meta, torch.Tensor) or value is None:
        return value
    dtype = to_jax(meta.dtype)
    value = jnp.asarray(value)
    if value.dtype != dtype:
        value = convert(value, dtype)
    shape = tuple(meta.shape)
    if value.shape != shape:
        if 0 in shape:
            return jnp.zeros(shape, dtype)
        raise _ShapeMismatch(f"torchtpu: lowering of {op} returned shape {value.shape}, ATen expects {shape}")
    return value


class _ShapeMismatch(RuntimeError):
    pass
