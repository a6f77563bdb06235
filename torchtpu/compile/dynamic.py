"""dynamic=True: symbolic sizes are padded up to buckets, so a sweep of
sequence lengths costs one compilation per bucket, not per length.

Padding is only correct if no real element ever reads a padded one.  Each
value in the graph therefore carries a validity mask (bool, broadcastable):
element-wise ops and views pass masks through (a reshape that would put
padding between real elements -- a padded dim split in two -- gathers them
by true flat index instead); reductions, softmax and contractions over
padded dims first replace padded elements by the op's identity (0 for sums
and contractions, -inf for max/softmax/logsumexp);
losses and embeddings neutralise padded rows (ignore_index, index 0).  An op
with no rule that touches padded data makes the graph `Unpaddable`: it is
then compiled per exact shape, with a log line saying why.

A dim is padded when its symbolic size involves a bucketed symbol; a pure
symbol's valid elements are a prefix (`iota < true size`), the mask of a
merged dim (`s0*s1`) comes from the view that merged it."""

import math
import operator

import jax.numpy as jnp
import sympy
import torch
from jax import lax

from ..ops.lowerings.interpolation import UPSAMPLE
from ..ops.registry import VIEW_LOWERINGS
from . import dynamic_gather, dynamic_positions

aten = torch.ops.aten


class Unpaddable(Exception):
    """The graph cannot run on padded inputs.  `symbols`: the symbols whose
    padding is at fault -- the graph is retried with those kept exact (one
    executable per value) and the others still bucketed; without any, every
    size is exact (one executable per shape)."""

    def __init__(self, reason, symbols=()):
        super().__init__(reason)
        self.symbols = frozenset(symbols)


def bucket(n: int, policy) -> int:
    """The padded size of a symbolic dim of true size n."""
    if policy == "exact" or n <= 1:
        return n  # 0 and 1 are specialised by dynamo anyway
    if policy == "pow2":
        return 1 << (n - 1).bit_length()
    step = int(policy)
    return -(-n // step) * step


def _expr(x):
    return x.node.expr if isinstance(x, torch.SymInt) else sympy.Integer(int(x))


class Shapes:
    """Symbol values of one call: true sizes, and the bucket sizes the
    executable is compiled for.  Inside the executable `true` holds traced
    scalars (one executable serves every true size of its bucket)."""

    def __init__(self, true_values: dict, padded_values: dict, bucketed=None, merged=({}, set(), {})):
        self.true = true_values  # sympy.Symbol -> int (or traced int)
        self.padded = padded_values  # sympy.Symbol -> int
        self.bucketed = set(padded_values) if bucketed is None else bucketed  # symbols padded up
        # merged size -> its factors, outer first; merged sizes that cannot be
        # padded; FX node -> the layouts of its value's merged sizes (merged_layouts)
        self.layouts, self.unpaddable_merged, self.value_layouts = merged

    @classmethod
    def for_call(cls, true_values: dict, policy, bucketed, merged=({}, set(), {})):
        """The symbols in `bucketed` go up to their bucket -- sizes of tensor
        inputs, and integer arguments (a position, a count), which become
        sizes of values inside the graph (`cache[:, : pos + 1]`) or positions
        traced at their true value (dynamic_positions.py); where one cannot
        be (an index into a padded dim) the graph is Unpaddable for it and
        it keeps its value.  The others keep their value."""
        padded = {s: bucket(v, policy) if s in bucketed else v for s, v in true_values.items()}
        return cls(true_values, padded, {s for s in true_values if s in bucketed}, merged)

    def traced(self, true_values: dict):
        """These shapes inside the executable: bucketed symbols' true values
        traced (`true_values`), the others known."""
        known = {s: v for s, v in self.padded.items() if s not in self.bucketed}
        merged = (self.layouts, self.unpaddable_merged, self.value_layouts)
        return Shapes({**true_values, **known}, self.padded, self.bucketed, merged)

    def check_merged(self):
        """Unpaddable if a padded merged size is in two layouts or read by
        position, or shrinks as a symbol grows (merged_layouts): its symbols
        are kept exact."""
        symbols = set()
        for expr in self.unpaddable_merged:
            symbols |= expr.free_symbols & self.bucketed
        if symbols:
            raise Unpaddable("a merged dim (B*T) in two layouts or read by position, or a size that shrinks "
                             "as a symbol grows (n - p)", symbols)

    def key(self):
        """Padded sizes, and which are bucketed: an executable for true size 4
        kept exact must not serve sizes 3..4 padded to 4 (it has no masks)."""
        return tuple(sorted((str(s), v, s in self.bucketed) for s, v in self.padded.items()))

    def true_value(self, x):
        """A symbolic scalar's true value (traced inside the executable)."""
        if not isinstance(x, (torch.SymInt, torch.SymFloat)):
            return x
        return _evaluate(x.node.expr, self.true)

    def host_value(self, x):
        """A symbolic graph output's true value on the host: a size (int), a
        float, or a size comparison (`x.shape[0] > 2`, bool)."""
        value = x.node.expr.xreplace(self.true)
        kind = bool if isinstance(x, torch.SymBool) else float if isinstance(x, torch.SymFloat) else int
        return kind(value)

    def size(self, x, padded=True):
        if not isinstance(x, torch.SymInt):
            return x
        env = self.padded if padded else self.true
        return int(x.node.expr.xreplace(env))

    def shape(self, shape, padded=True):
        return tuple(self.size(d, padded) for d in shape)

    def is_padded_dim(self, x) -> bool:
        return isinstance(x, torch.SymInt) and bool(_expr(x).free_symbols & self.bucketed)

    def is_prefix(self, x) -> bool:
        """Whether a symbolic size, padded, holds its real elements first: a
        symbol, or a sum no view splits into factors (`p + 1`); not a merged
        B*T (or a static size)."""
        expr = _expr(x)
        return isinstance(expr, sympy.Symbol) or self.layouts.get(expr) == (expr,)

    def padded_dims(self, meta):
        return [d for d, n in enumerate(meta.shape) if self.is_padded_dim(n)]

    def padded_symbols(self, metas, dims=None):
        """The bucketed symbols in the sizes of these tensor metas (of `dims`
        only, when given)."""
        found = set()
        for meta in metas:
            if isinstance(meta, torch.Tensor):
                for d, n in enumerate(meta.shape):
                    if dims is None or d in dims:
                        found |= _expr(n).free_symbols & self.bucketed
        return found

    def prefix_mask(self, meta, dims=None):
        """Validity of a graph input or a fresh value (None if it has no
        padded dim): each padded dim (or those of `dims`) holds its real
        elements first -- a merged dim (B*T) per factor, in the layout
        merged_layouts found; Unpaddable for a merged dim with none."""
        dims = self.padded_dims(meta) if dims is None else dims
        if not dims:
            return None
        shape = self.shape(meta.shape)
        mask = None
        for d in dims:
            m = self._dim_mask(meta.shape, d).reshape(tuple(n if i == d else 1 for i, n in enumerate(shape)))
            mask = m if mask is None else mask & m
        return mask

    def _dim_mask(self, shape, d):
        """Which of dim d's padded positions are real (1-d)."""
        expr = _expr(shape[d])
        factors = (expr,) if isinstance(expr, sympy.Symbol) else self.layouts.get(expr)
        if factors is None:
            raise Unpaddable(f"a value of size {tuple(shape)} has no mask (merged dims in no single layout)",
                             expr.free_symbols & self.bucketed)
        grid = tuple(self.size_of(f) for f in factors)
        mask = None
        for i, f in enumerate(factors):
            m = lax.broadcasted_iota(jnp.int32, grid, i) < _evaluate(f, self.true)
            mask = m if mask is None else mask & m
        return mask.reshape(-1)

    def size_of(self, expr, padded=True):
        return int(expr.xreplace(self.padded if padded else self.true))

    def factor_shape(self, shape, padded=True):
        """`shape` with each merged dim split into its layout's factors
        (inputs are padded per factor in this shape)."""
        out = []
        for n in shape:
            expr = _expr(n)
            factors = self.layouts.get(expr) if expr.free_symbols & self.bucketed else None
            if factors is None or isinstance(expr, sympy.Symbol):
                out.append(self.size_of(expr, padded))
            else:
                out.extend(self.size_of(f, padded) for f in factors)
        return tuple(out)


def _evaluate(expr, env):
    """A sympy size expression with (possibly traced) values for its symbols."""
    if isinstance(expr, sympy.Symbol):
        return env[expr]
    if isinstance(expr, sympy.Integer):
        return int(expr)
    if isinstance(expr, (sympy.Float, sympy.Rational)):
        return float(expr)
    args = [_evaluate(a, env) for a in expr.args]
    name = type(expr).__name__
    if name == "ToFloat":  # (a size used in float arithmetic: var's 1 / (N - 1))
        return args[0] * 1.0
    if name in ("FloatTrueDiv", "IntTrueDiv"):
        return args[0] / args[1]
    if isinstance(expr, sympy.Add):
        return sum(args[1:], args[0])
    if isinstance(expr, sympy.Mul):
        out = args[0]
        for a in args[1:]:
            out = out * a
        return out
    if isinstance(expr, sympy.Pow) and isinstance(expr.args[1], sympy.Integer) and int(expr.args[1]) >= 0:
        return args[0] ** int(expr.args[1])
    if type(expr).__name__ in ("FloorDiv",):
        return args[0] // args[1]
    raise Unpaddable(f"size expression {expr}", expr.free_symbols)


# ------------------------------------------------------------ op rules

SOFTMAX_LIKE = {aten._softmax.default, aten._log_softmax.default, aten._safe_softmax.default, aten.logsumexp.default}
SUM_LIKE = {aten.sum.dim_IntList, aten.sum.default}
MAX_LIKE = {aten.amax.default: -jnp.inf, aten.amin.default: jnp.inf,
            aten.max.default: -jnp.inf, aten.min.default: jnp.inf}
MEAN = {aten.mean.dim, aten.mean.default}
PROD = {aten.prod.dim_int, aten.prod.default}
# variance family over a padded dim: the masked two-pass formula with the
# true count (along other dims they work row by row: ROW_BY_ROW)
VAR_LIKE = {aten.var.correction, aten.std.correction, aten.var_mean.correction}
# all/any over any dims: padding filled with the neutral truth value (the
# checks some decompositions add: one_hot's `all(0 <= idx)`)
ANY_ALL = {aten.all.default: True, aten.all.dim: True, aten.all.dims: True,
           aten.any.default: False, aten.any.dim: False, aten.any.dims: False}
# Ops that work row by row along `dim`: op -> (position of the dim argument,
# of keepdim or None for outputs that keep the dim).  Along a dim that is not
# padded each row is real or padding as a whole; along a padded one only the
# arg-extremes have a rule (ARG_EXTREMES).
ROW_BY_ROW = {
    aten.argmax.default: (1, 2), aten.argmin.default: (1, 2), aten.max.dim: (1, 2), aten.min.dim: (1, 2),
    aten.sort.default: (1, None), aten.sort.stable: (2, None), aten.topk.default: (2, None),
    aten.cummax.default: (1, None), aten.cummin.default: (1, None),
    aten.kthvalue.default: (2, 3), aten.median.dim: (1, 2), aten.nanmedian.dim: (1, 2), aten.mode.default: (1, 2),
    aten.var.correction: (1, 3), aten.std.correction: (1, 3), aten.var_mean.correction: (1, 3),
    aten.std_mean.correction: (1, 3), aten.prod.dim_int: (1, 2), aten.linalg_vector_norm.default: (2, 3),
}  # fmt: skip
# along a padded dim whose real elements are a prefix, padding never wins
# (filled with the lowest value for a max): the index found is the true one
ARG_EXTREMES = {aten.argmax.default: -jnp.inf, aten.argmin.default: jnp.inf, aten.max.dim: -jnp.inf,
                aten.min.dim: jnp.inf}
# Along a padded dim whose real elements are a prefix, a stable sort keeps
# the real elements first when the padding sorts last (ties stay in input
# order): op -> position of its `descending` argument.  A running max/min
# needs nothing: the prefix never sees what follows it.
PREFIX_SORTS = {aten.sort.default: 2, aten.sort.stable: 3}
# The k-th smallest / k largest of a padded prefix, for a k that is not a
# size (so k <= the true length): op -> (position of k, of `largest` and its
# default), padding sorted last as for PREFIX_SORTS.
PREFIX_SELECTIONS = {aten.topk.default: (1, 3, True), aten.kthvalue.default: (1, None, False)}
PREFIX_SCANS = {aten.cummax.default, aten.cummin.default}
SOFTMAX_BACKWARD = {aten._softmax_backward_data.default, aten._log_softmax_backward_data.default}
CONTRACTIONS = {aten.mm.default, aten.bmm.default, aten.addmm.default}
PASS_THROUGH = {aten._to_copy.default, aten.clone.default, aten.copy.default, aten.lift_fresh_copy.default,
                torch.ops.prims.convert_element_type.default}
# Factories lowered with the views (graph_only.py): a *_like output is as
# real as the input it takes its shape from; a new_* one (sizes given) is
# fresh.  (Not views: their value does not come from the input's elements.)
LIKE_FACTORIES = {aten.zeros_like.default, aten.ones_like.default, aten.full_like.default, aten.empty_like.default,
                  aten.fill.Scalar, aten.fill.Tensor, aten.rand_like.default, aten.randn_like.default,
                  aten.rand_like.generator, aten.randn_like.generator, aten.randint_like.default,
                  aten.randint_like.generator, aten.randint_like.Tensor, aten.randint_like.Tensor_generator,
                  aten.randint_like.low_dtype, aten.randint_like.low_generator_dtype}
NEW_FACTORIES = {aten.new_zeros.default, aten.new_ones.default, aten.new_full.default, aten.new_empty.default,
                 aten.new_empty_strided.default, aten.rand.default, aten.randn.default, aten.rand.generator,
                 aten.randn.generator, aten.randint.default, aten.randint.generator, aten.randint.low,
                 aten.randint.low_generator, aten.empty.memory_format, aten.empty_strided.default}
# Element-wise ops without ATen's pointwise tag (some lowered with the views,
# graph_only.py): their masks combine like a pointwise op's.
ELEMENTWISE = {
    aten.complex.default, aten.polar.default, aten.true_divide.Scalar, aten.floor_divide.default,
    aten.floor_divide.Scalar, aten.masked_fill.Tensor, aten.hardswish.default, aten.hardswish_backward.default,
    aten.hardtanh_backward.default, aten.elu_backward.default, aten.softplus_backward.default,
    aten.leaky_relu_backward.default, aten.hardsigmoid_backward.default, aten.hardshrink_backward.default,
    aten.softshrink_backward.default, aten.mish_backward.default,
}  # fmt: skip
# Each output element depends only on elements at smaller-or-equal indices
# (or its own position): padding at the end never reaches a real element.
PREFIX_SAFE = {
    aten.tril.default,
    aten.triu.default,
    aten.cumsum.default,
    aten.cumprod.default,
    aten.logcumsumexp.default,
}


# Output sample n reads input sample n only (and weights): padding along
# dim 0 -- the batch -- never reaches a real sample.  Their outputs keep
# the rows' mask.  (Ops that also sum over the batch -- weight gradients,
# batch statistics -- have rules of their own below.)
PER_SAMPLE = {
    aten.convolution.default,
    aten.max_pool2d_with_indices.default,
    aten.max_pool2d_with_indices_backward.default,
    aten.max_pool3d_with_indices.default,
    aten.max_pool3d_with_indices_backward.default,
    aten.avg_pool2d.default,
    aten.avg_pool2d_backward.default,
    aten.avg_pool3d.default,
    aten.avg_pool3d_backward.default,
    aten._adaptive_avg_pool2d.default,
    aten._adaptive_avg_pool2d_backward.default,
    aten._adaptive_avg_pool3d.default,
    aten._adaptive_avg_pool3d_backward.default,
    aten.adaptive_max_pool2d.default,
    aten.adaptive_max_pool2d_backward.default,
    aten.upsample_nearest2d.default,
    aten.upsample_nearest2d_backward.default,
    aten.upsample_bilinear2d.default,
    aten.upsample_bilinear2d_backward.default,
    aten.native_group_norm.default,
}
BATCH_NORMS = {aten._native_batch_norm_legit_functional.default, aten._native_batch_norm_legit_no_training.default,
               aten._native_batch_norm_legit.no_stats}
# The arguments of a per-sample op that hold samples in dim 0; the others
# (weights, biases, running statistics) are per channel, and a padded one
# (F.conv1d(x, w) with w a graph input under dynamic=True) would pad the
# output's channels, which the rows' mask does not cover: Unpaddable.
# Ops not listed take samples in every tensor argument (pooling and its
# backward: grad_output, input, indices).
SAMPLE_ARGS = {
    aten.convolution.default: (0,),
    aten.convolution_backward.default: (0, 1),
    aten.native_group_norm.default: (0,),
    aten.native_group_norm_backward.default: (0, 1, 2, 3),
    aten.native_batch_norm_backward.default: (0, 1),
    **{op: (0,) for op in BATCH_NORMS},
}


ATTENTION = {aten._scaled_dot_product_fused_attention_overrideable.default,
             aten._scaled_dot_product_fused_attention_overrideable_backward.default}


# ------------------------------------------------------------ merged dims
#
# A merged dim (B*T rows from viewing (B, T, C) as (B*T, C)) has no prefix
# of real elements: viewed from padded (Bp, Tp, C), real row (b, t) sits at
# b*Tp + t.  Values that come from such a view carry that in their mask.
# Graph inputs of a merged size (activations saved by the forward for the
# backward) and fresh values have no view to learn it from, so the runner
# pads them the same way -- per factor -- when the graph's views agree on
# the factors, and the graph only moves whole elements along such dims
# (positions within them -- slices, arange, cumsum -- would see the
# interleaved padding).

RESHAPES = {aten.view.default, aten._unsafe_view.default, aten.reshape.default}
# Ops that never read a position within a dim: a merged dim may be laid out
# per factor through them.
ORDER_FREE = (
    RESHAPES | SUM_LIKE | MEAN | set(MAX_LIKE) | SOFTMAX_LIKE | SOFTMAX_BACKWARD | CONTRACTIONS | PASS_THROUGH
    | LIKE_FACTORIES | NEW_FACTORIES | ATTENTION | PER_SAMPLE | BATCH_NORMS
    | {aten.native_batch_norm_backward.default, aten.convolution_backward.default,
       aten.native_group_norm_backward.default}
    | {aten.t.default, aten.transpose.int, aten.permute.default, aten.expand.default, aten.unsqueeze.default,
       aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.detach.default, aten.alias.default,
       aten.native_layer_norm.default, aten.native_layer_norm_backward.default, aten.nll_loss_forward.default,
       aten.nll_loss_backward.default, aten.embedding.default, aten.embedding_dense_backward.default,
       aten.copy_.default, aten.full.default, aten.zeros.default, aten.ones.default, aten.empty.memory_format}
)


def _merged(expr):
    return bool(expr.free_symbols) and not isinstance(expr, sympy.Symbol)


def _consecutive_factors(shape, expr):
    """The run of consecutive dims of `shape` whose product is `expr` (size-1
    dims dropped), or None."""
    exprs = [_expr(n) for n in shape]
    for i in range(len(exprs)):
        product = sympy.Integer(1)
        for j in range(i, len(exprs)):
            product = product * exprs[j]
            if j > i and sympy.expand(product - expr) == 0:
                run = tuple(e for e in exprs[i : j + 1] if e != 1)
                return run if len(run) > 1 else None
    return None


# Ops that read positions along one dim (their `dim` argument, after the
# tensor): fine on a merged dim's neighbours, not on the merged dim.
ALONG_DIM = {aten.slice.Tensor: 1, aten.select.int: 1, aten.narrow.default: 1, aten.split.Tensor: 2,
             aten.split_with_sizes.default: 2, aten.cat.default: 1, aten.native_dropout.default: None,
             aten.native_dropout_backward.default: None}


def _reads_positions(node, merged):
    """Whether `node` may read positions within one of the `merged` dims."""
    target = node.target
    if target in ORDER_FREE or target in SIZE_QUERIES or torch.Tag.pointwise in getattr(target, "tags", ()):
        return False
    if target not in ALONG_DIM:
        return True
    position = ALONG_DIM[target]
    if position is None:  # (element-wise: dropout draws per element, independently)
        return False
    first = node.args[0]
    meta = _meta(first[0] if isinstance(first, (list, tuple)) else first)
    dim = node.args[position] if len(node.args) > position else node.kwargs.get("dim", 0)
    return not isinstance(dim, int) or _expr(meta.shape[dim % meta.dim()]) in merged


def merged_layouts(gm):
    """({merged size: its factors, outer first}, {merged sizes padding
    cannot serve}, {node: the layouts of its value's merged sizes}) for this
    graph.  A value's merged dim has the layout of
    the view that made it, or of its operands; the graph's inputs and fresh
    values of a merged size take the layout every view of that size agrees
    on (the size itself -- a plain prefix -- when no view touches it).
    Padding cannot serve a size laid out per factor and read by position (a
    slice of B*T rows viewed from (B, T)), one
    whose values meet in two layouts (B*T rows added to T*B rows), or one
    that shrinks as a symbol grows (`grows`)."""
    consensus = {}
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in RESHAPES:
            for e, run in _view_runs(node).items():
                consensus[e] = run if consensus.get(e, run) == run else None
    layouts = {e: consensus.get(e, (e,)) for e in _all_merged(gm)}
    layouts = {e: run for e, run in layouts.items() if run is not None}
    of_value, blocked = {}, {e for e in _all_merged(gm) if not grows(e)}
    for node in gm.graph.nodes:
        own = _merged_sizes(_meta(node))
        if node.op == "placeholder":
            of_value[node] = {e: layouts[e] for e in own if e in layouts}
            continue
        if node.op != "call_function":
            continue
        if node.target is operator.getitem:
            of_value[node] = {e: run for e, run in of_value.get(node.args[0], {}).items() if e in own}
            continue
        args = [a for a in node.args if isinstance(a, torch.fx.Node)]
        args += [a for arg in node.args if isinstance(arg, (list, tuple)) for a in arg if isinstance(a, torch.fx.Node)]
        merged = own.union(*(_merged_sizes(_meta(a)) for a in args))
        if not merged:
            continue
        if _reads_positions(node, merged):
            # (a size no view splits into factors -- p + 1, or B*T never
            # viewed -- is a plain prefix everywhere: positions are right)
            blocked |= {e for e in merged if layouts.get(e) != (e,)}
        if node.target in RESHAPES:
            of_value[node] = _view_runs(node)
            continue
        seen = {}
        for a in args:
            for e, run in of_value.get(a, {}).items():
                if seen.setdefault(e, run) != run:
                    blocked.add(e)  # two layouts meet
        if not args:  # a factory: the size's layout, as for inputs
            seen = {e: layouts[e] for e in own if e in layouts}
        of_value[node] = {e: run for e, run in seen.items() if e in own}
    return layouts, blocked, of_value


def grows(expr):
    """Whether a size never shrinks as its symbols grow (p + 1, B*T, the
    (n - 3) // 2 + 1 of a convolution): padded up, it is at least its true
    size.  `n - p` (a slice from a position to the end) is not."""
    if not expr.free_symbols or isinstance(expr, sympy.Symbol):
        return True
    if isinstance(expr, sympy.Add):
        return all(grows(term) for term in expr.args)
    if isinstance(expr, sympy.Mul):
        coefficient, rest = expr.as_coeff_Mul()
        return coefficient >= 0 and all(grows(f) for f in sympy.Mul.make_args(rest))
    if isinstance(expr, sympy.Pow):
        return isinstance(expr.exp, sympy.Integer) and expr.exp > 0 and grows(expr.base)
    name = type(expr).__name__
    if name in ("FloorDiv", "CeilDiv", "CleanDiv", "IntTrueDiv"):
        return grows(expr.args[0]) and isinstance(expr.args[1], sympy.Integer) and expr.args[1] > 0
    if name in ("Max", "Min"):
        return all(grows(a) for a in expr.args)
    return False


def _view_runs(node):
    """{merged size: its factors} for the merged dims a view makes or splits."""
    src, dst = _meta(node.args[0]), _meta(node)
    runs = {}
    for whole, parts in ((dst, src), (src, dst)):
        for n in whole.shape:
            e = _expr(n)
            run = _consecutive_factors(parts.shape, e) if _merged(e) else None
            if run is not None:
                runs[e] = run
    return runs


def _merged_sizes(meta):
    """The merged sizes among the dims of a tensor meta (or a tuple of them)."""
    metas = meta if isinstance(meta, (list, tuple)) else [meta]
    return {_expr(n) for m in metas if isinstance(m, torch.Tensor) for n in m.shape if _merged(_expr(n))}


def _all_merged(gm):
    return set().union(*(_merged_sizes(_meta(node)) for node in gm.graph.nodes))


def node_meta(node):
    """An FX node's value metadata (a meta/fake tensor, SymInt, ...); a
    non-node argument is its own value."""
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else node


_meta = node_meta


def _full(mask, shape):
    return None if mask is None else jnp.broadcast_to(mask, shape)


def _neutral(x, mask, fill):
    if mask is None:
        return x
    return jnp.where(mask, x, jnp.asarray(fill).astype(x.dtype))


def _in_range(fill, dtype):
    """+-inf as the largest/smallest value of `dtype` (bool and integers
    have no infinity: -inf cast to bool would be True)."""
    if dtype == jnp.bool_:
        return fill > 0
    if jnp.issubdtype(dtype, jnp.integer):
        info = jnp.iinfo(dtype)
        return info.max if fill > 0 else info.min
    return fill


def _sorts_last(dtype, descending):
    """The value a stable sort puts after every other (NaN is the largest
    float in torch's order)."""
    if descending:
        return _in_range(-jnp.inf, dtype)
    return jnp.nan if jnp.issubdtype(dtype, jnp.floating) else _in_range(jnp.inf, dtype)


def _any(mask, dims, keepdim, shape):
    if mask is None:
        return None
    out = jnp.any(_full(mask, shape), axis=tuple(dims), keepdims=keepdim)
    return out


def _masked_variance(op, values, mask, ctx):
    """var/std/var_mean(x, dim, correction, keepdim) over real elements only:
    mean and squared deviations summed where the mask is set, divided by the
    true count (less the correction, at least 0, as ATen)."""
    x = values[0]
    dims = tuple(_dims(values[1], x.ndim))
    correction = 1 if values[2] is None else values[2]
    keepdim = bool(values[3])
    full = _full(mask, x.shape)
    acc = jnp.float32 if x.dtype in (jnp.bfloat16, jnp.float16) else x.dtype
    real = _neutral(x, full, 0).astype(acc)
    count = jnp.sum(full, axis=dims, keepdims=True).astype(acc)
    mean = jnp.sum(real, axis=dims, keepdims=True) / count
    deviation = jnp.where(full, real - mean, 0)
    squares = jnp.real(deviation * jnp.conj(deviation)) if jnp.iscomplexobj(deviation) else deviation * deviation
    divisor = jnp.maximum(count - correction, 0).real
    var = jnp.sum(squares, axis=dims, keepdims=True) / divisor
    if not keepdim:
        var, mean = jnp.squeeze(var, dims), jnp.squeeze(mean, dims)
    out_mask = _any(mask, dims, keepdim, x.shape)
    real_dtype = jnp.real(jnp.zeros((), x.dtype)).dtype
    if op == aten.var_mean.correction:
        return (var.astype(real_dtype), mean.astype(x.dtype)), [out_mask, out_mask]
    result = jnp.sqrt(var) if op == aten.std.correction else var
    return result.astype(real_dtype), [out_mask]


def _dims(dim, ndim):
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(ndim))
    if isinstance(dim, int):
        dim = [dim]
    return [d % max(ndim, 1) for d in dim]


# Arguments that are positions along a dim, not sizes: evaluated at padded
# sizes they point elsewhere (x[n // 2] would read the padded n's middle,
# split's later pieces would start late), so their symbols are kept exact
# (unless dynamic_positions traces them).  So are integer arguments that are
# values, not sizes: an ignore_index, a padding_idx, randint's bounds, k
# (topk's k padded past the dim's size has no elements to take).
POSITION_ARGS = {
    aten.slice.Tensor: (2,), aten.narrow.default: (2,), aten.select.int: (2,), aten.split.Tensor: (1,),
    aten.split_with_sizes.default: (1,), aten.slice_scatter.default: (3,), aten.select_scatter.default: (3,),
    aten.diagonal.default: (1,), aten.roll.default: (1,), aten.constant_pad_nd.default: (1,),
    aten.as_strided.default: (3,), aten.tril.default: (1,), aten.triu.default: (1,),
    aten.as_strided_scatter.default: (4,), aten.kthvalue.default: (1,), aten.multinomial.default: (1,),
    aten.randperm.default: (0,), aten.randperm.generator: (0,),
    aten.randint.default: (0,), aten.randint.generator: (0,), aten.randint.low: (0, 1),
    aten.randint.low_generator: (0, 1), aten.randint_like.default: (1,), aten.randint_like.generator: (1,),
    aten.randint_like.low_dtype: (1, 2), aten.randint_like.low_generator_dtype: (1, 2),
    aten.embedding.default: (2,), aten.embedding_dense_backward.default: (3,),
    aten.nll_loss_forward.default: (4,), aten.nll_loss_backward.default: (5,),
    aten.nll_loss2d_forward.default: (4,), aten.nll_loss2d_backward.default: (5,), aten.topk.default: (1,),
    # resampling: the taps follow the ratio of the true sizes (a backward
    # whose gradient is static has nothing else marking them)
    **{getattr(aten, name).default: (1,) for name in UPSAMPLE},
    **{getattr(aten, name + "_backward").default: (1, 2) for name in UPSAMPLE},
}  # fmt: skip

# Where a slice ends (narrow: its length), at this argument: along a padded
# dim, the slice's mask is the input's mask sliced, which counts the padded
# size's real elements, not the true end's (x[:, :n - 1] would keep all n
# real ones), so a symbolic end there is kept exact -- unless it is the dim's
# whole size (x[:, :n]).  Along a dim that is not padded a symbolic end is
# a length like any other size.
END_ARGS = {aten.slice.Tensor: 3, aten.narrow.default: 3, aten.slice_scatter.default: 4}


class MaskRules:
    """Applies the masking rule of one node: returns (inputs to give the
    lowering, a function from its output(s) to their mask(s))."""

    def __init__(self, shapes: Shapes):
        self.shapes = shapes

    def prepare(self, node, op, values, masks, in_metas, out_meta, lowering_fn, ctx):
        """values: schema-normalised args (tensors as arrays); masks: same
        positions, a mask or None.  Returns (result, out_masks)."""
        # A value with no padded dim is real throughout, whatever mask it
        # carries (a contraction over a padded dim leaves a trivial one).
        masks = [None if isinstance(meta, torch.Tensor) and not self.shapes.padded_dims(meta) else m
                 for m, meta in zip(masks, in_metas)]
        if dynamic_positions.applies(self.shapes, op, in_metas, masks):
            return dynamic_positions.lower(self.shapes, op, values, masks, in_metas, out_meta)
        self._check_positions(op, in_metas)
        if any(isinstance(m, list) for m in masks):
            return self._tensor_list(op, values, masks, in_metas, out_meta, lowering_fn, ctx)
        tensor_masks = [m for m in masks if m is not None]
        if not tensor_masks:
            result = lowering_fn(ctx, *values)
            return result, self._fresh_masks(out_meta)
        if op in (aten.bucketize.Tensor, aten.bucketize.Scalar):
            return self._bucketize(op, values, masks, in_metas, lowering_fn, ctx)
        if op in PASS_THROUGH or op in PREFIX_SAFE or op in ELEMENTWISE or torch.Tag.pointwise in op.tags:
            self._check_layouts_agree(op, [m for m, k in zip(in_metas, masks) if k is not None])
            result = lowering_fn(ctx, *values)
            shape = tuple(jnp.shape(result if not isinstance(result, (tuple, list)) else result[0]))
            combined = None
            for m in tensor_masks:
                m = jnp.broadcast_to(m, jnp.broadcast_shapes(jnp.shape(m), shape)) if m.ndim <= len(shape) else m
                combined = m if combined is None else combined & m
            return result, [combined]
        if op in LIKE_FACTORIES:
            return lowering_fn(ctx, *values), [masks[0]]
        if op in NEW_FACTORIES:
            return lowering_fn(ctx, *values), self._fresh_masks(out_meta)
        if op in (aten.view_as_complex.default, aten.view_as_real.default):
            # (their static last dim of 2 is the complex parts: Llama's RoPE)
            full = _full(masks[0], jnp.shape(values[0]))
            mask = full[..., 0] if op == aten.view_as_complex.default else jnp.stack([full, full], axis=-1)
            return lowering_fn(ctx, *values), [mask]
        if op in VIEW_LOWERINGS and op not in (aten.view.dtype, aten.view_as_real.default, aten.view_as_complex.default):
            # A view moves elements around: the same view of the mask says
            # which moved elements are real -- unless it counts from the end
            # of a padded dim (x[..., :-1]), where padding is.
            end_cut = self._check_from_end(op, values, in_metas)
            if op in RESHAPES and not self._reshape_keeps_layout(node, in_metas[0], out_meta[0]):
                return self._reshape_by_gather(node, values[0], in_metas[0], out_meta[0])
            result = lowering_fn(ctx, *values)
            x = values[0]
            mask = lowering_fn(ctx, _full(masks[0], jnp.shape(x)), *values[1:])
            if op == aten.unfold.default:  # a window is real only if all its elements are
                mask = jnp.all(mask, axis=-1, keepdims=True)
            if op == aten.expand.default:
                mask = self._expanded_to_a_padded_size(mask, in_metas[0], out_meta[0])
            if end_cut is not None:  # the real elements the cut leaves: a prefix of its true size
                mask = mask & self.shapes.prefix_mask(out_meta[0], dims=[end_cut])
            return result, list(mask) if isinstance(mask, (tuple, list)) else [mask]
        if op == aten.repeat.default:
            return self._repeat(op, values, masks, in_metas, out_meta, lowering_fn, ctx)
        if op in SUM_LIKE or op in MEAN or op in MAX_LIKE or op in SOFTMAX_LIKE or op in ANY_ALL or op in PROD:
            return self._reduction(op, values, masks, lowering_fn, ctx)
        if op == aten.linalg_vector_norm.default and masks[0] is not None and values[1] >= 0:
            # (|0|**ord adds nothing for ord >= 0, and the inf-norm's max of |x| >= 0 ignores zeros)
            x, mask = values[0], masks[0]
            dims, keepdim = _dims(values[2], x.ndim), bool(values[3])
            return lowering_fn(ctx, _neutral(x, mask, 0), *values[1:]), [_any(mask, dims, keepdim, x.shape)]
        if op in VAR_LIKE and masks[0] is not None and set(_dims(values[1], values[0].ndim)) & set(
                self.shapes.padded_dims(in_metas[0])):
            return _masked_variance(op, values, masks[0], ctx)
        if op in SOFTMAX_BACKWARD:
            grad, output = values[0], values[1]
            fill = 0 if op == aten._softmax_backward_data.default else -jnp.inf
            values = [_neutral(grad, masks[0], 0), _neutral(output, masks[1], fill)] + list(values[2:])
            return lowering_fn(ctx, *values), [masks[0]]
        if op in CONTRACTIONS:
            return self._contraction(op, values, masks, lowering_fn, ctx)
        if op in (aten.native_layer_norm.default, aten.native_layer_norm_backward.default):
            return self._layer_norm(op, values, masks, in_metas, lowering_fn, ctx)
        if op in (aten.nll_loss_forward.default, aten.nll_loss_backward.default):
            return self._nll(op, values, masks, in_metas, lowering_fn, ctx)
        if op in (aten.embedding.default, aten.embedding_dense_backward.default):
            return self._embedding(op, values, masks, in_metas, out_meta, lowering_fn, ctx)
        if op in PER_SAMPLE and (op != aten.convolution.default or values[0].ndim == values[1].ndim):
            rows = self._rows(op, masks, in_metas)
            result = lowering_fn(ctx, *values)
            return result, [_rows_of(rows, m) for m in out_meta]
        if op == aten.convolution_backward.default:
            return self._convolution_backward(op, values, masks, in_metas, out_meta, lowering_fn, ctx)
        if op == aten.native_group_norm_backward.default:
            # per sample, but grad_weight/grad_bias sum over the batch
            rows = self._rows(op, masks, in_metas)
            values = [_neutral(values[0], _rows_of(rows, in_metas[0]), 0)] + list(values[1:])
            return lowering_fn(ctx, *values), [_rows_of(rows, out_meta[0]), None, None]
        if op in BATCH_NORMS or op == aten.native_batch_norm_backward.default:
            return self._batch_norm(op, values, masks, in_metas, out_meta, lowering_fn, ctx)
        if op in ATTENTION:
            return self._attention(op, values, masks, in_metas, ctx)
        if op in ROW_BY_ROW and masks[0] is not None and not any(m is not None for m in masks[1:]):
            return self._row_by_row(op, values, masks[0], in_metas, out_meta, lowering_fn, ctx)
        masked = [meta for meta, m in zip(in_metas, masks) if m is not None]
        if dynamic_gather.applies(op):
            try:
                return dynamic_gather.lower(self.shapes, op, values, masks, in_metas, lowering_fn, ctx)
            except dynamic_gather.NoRule as reason:
                symbols = set().union(*(_expr(n).free_symbols for n in reason.sizes)) & self.shapes.bucketed
                raise Unpaddable(f"{op}: {reason}", symbols or self.shapes.padded_symbols(masked)) from None
        raise Unpaddable(f"no padding rule for {op} on padded data", self.shapes.padded_symbols(masked))

    def _check_positions(self, op, in_metas):
        symbols = self._padded_dim_end(op, in_metas)
        for i in POSITION_ARGS.get(op, ()):
            arg = in_metas[i] if i < len(in_metas) else None
            for v in arg if isinstance(arg, (list, tuple)) else (arg,):
                if isinstance(v, torch.SymInt):
                    symbols |= _expr(v).free_symbols & self.shapes.bucketed
        if symbols:
            raise Unpaddable(f"{op} at a position computed from a padded size", symbols)

    def _bucketize(self, op, values, masks, in_metas, fn, ctx):
        """Element-wise in its input; padded boundaries would be searched as
        real ones, so their size is kept exact."""
        if masks[1] is not None:
            raise Unpaddable(f"{op} with padded boundaries", self.shapes.padded_symbols([in_metas[1]]))
        return fn(ctx, *values), [masks[0]]

    def _expanded_to_a_padded_size(self, mask, meta, out):
        """A dim of size 1 (or a new one) expanded to a padded size (a sum's
        gradient spread over the summed dim): its positions past the true
        size are padding, though the input's mask says they are real."""
        offset = out.dim() - meta.dim()
        dims = [d for d in self.shapes.padded_dims(out) if d < offset or meta.shape[d - offset] == 1]
        if not dims:
            return mask
        return mask & self.shapes.prefix_mask(out, dims=dims)

    def _repeat(self, op, values, masks, in_metas, out_meta, fn, ctx):
        """x.repeat(sizes): a padded dim of x repeated once keeps its mask;
        tiled more often, its padding would land between real copies, so
        its size is kept exact.  A dim of size 1 (or a new one) repeated to
        a padded size (T5's causal mask: `ids[None, None].repeat(b, s, 1)`)
        is real up to its true size, as for expand."""
        x, meta, repeats = values[0], in_metas[0], in_metas[1]
        offset = len(repeats) - meta.dim()
        once = [type(r) is int and r == 1 for r in repeats]
        tiled = [d + offset for d in self.shapes.padded_dims(meta) if not once[d + offset]]
        tiled += [d for d in self.shapes.padded_dims(out_meta[0])
                  if d >= offset and not once[d] and meta.shape[d - offset] != 1]  # (m copies of a padded count)
        if tiled:
            raise Unpaddable(f"{op} tiling a padded dim", self.shapes.padded_symbols([out_meta[0]], tiled))
        mask = fn(ctx, _full(masks[0], jnp.shape(x)), *values[1:])
        return fn(ctx, *values), [self._expanded_to_a_padded_size(mask, meta, out_meta[0])]

    def _padded_dim_end(self, op, in_metas):
        """The bucketed symbols of a slice's end (END_ARGS) along a padded dim,
        unless it is the dim's whole size (x[:, :n]); along a dim that is not
        padded, of a strided slice (dynamic_positions takes the others)."""
        i = END_ARGS.get(op)
        if i is None or i >= len(in_metas) or not isinstance(in_metas[i], torch.SymInt):
            return set()
        meta, dim = in_metas[0], in_metas[i - 2] if in_metas[i - 2] is not None else 0
        size = meta.shape[dim % max(meta.dim(), 1)]
        if self.shapes.is_padded_dim(size) and _expr(in_metas[i]) == _expr(size):
            return set()
        return _expr(in_metas[i]).free_symbols & self.shapes.bucketed

    def _tensor_list(self, op, values, masks, in_metas, out_meta, fn, ctx):
        """cat and stack of padded values (other ops taking a list of
        tensors -- index, index_put -- have no rule)."""
        pieces, metas = values[0], in_metas[0]
        if op not in (aten.cat.default, aten.stack.default) or any(isinstance(m, list) for m in masks[1:]):
            flat = [m for meta in in_metas for m in (meta if isinstance(meta, (list, tuple)) else [meta])]
            raise Unpaddable(f"no padding rule for {op} on a list of padded values", self.shapes.padded_symbols(flat))
        full = [jnp.ones(jnp.shape(t), bool) if m is None else _full(m, jnp.shape(t)) for t, m in zip(pieces, masks[0])]
        dim = values[1] if len(values) > 1 else 0
        if op == aten.stack.default:
            return fn(ctx, *values), [jnp.stack(full, axis=dim % (jnp.ndim(pieces[0]) + 1))]
        out = out_meta[0]
        d = dim % out.dim()
        keep = [i for i, m in enumerate(metas) if not (m.dim() == 1 and m.shape[0] == 0)]  # (cat skips these)
        if not keep:  # (every piece empty: an empty result)
            result = fn(ctx, *values)
            return result, [jnp.zeros(jnp.shape(result), bool)]
        if not any(self.shapes.is_padded_dim(metas[i].shape[d]) for i in keep):
            return fn(ctx, *values), [jnp.concatenate([full[i] for i in keep], axis=d)]
        # Along a padded dim, each piece goes right after the previous one's
        # true end, so the real elements stay a prefix of the padded result
        # -- which a view splitting that size into factors (`cat([x, x], 1)
        # .reshape(2, n)`) would read per factor: kept exact then.
        if not self.shapes.is_prefix(out.shape[d]):
            raise Unpaddable(f"{op} along a padded dim that a view splits into factors",
                             self.shapes.padded_symbols([out], [d]))
        shape = self.shapes.shape(out.shape)
        result, mask = jnp.zeros(shape, ctx.out_dtype), jnp.zeros(shape, bool)
        start = [jnp.int32(0)] * len(shape)
        for i in keep:
            piece, piece_mask = pieces[i], full[i]
            size = metas[i].shape[d]
            if self.shapes.is_padded_dim(size) and not self.shapes.is_prefix(size):
                # (a merged B*T piece holds padding between its rows: its
                # real elements moved first, in order, before it is placed)
                order = jnp.argsort(~piece_mask, axis=d, stable=True)
                piece = jnp.take_along_axis(piece, order, axis=d)
                piece_mask = jnp.take_along_axis(piece_mask, order, axis=d)
            result = lax.dynamic_update_slice(result, piece.astype(ctx.out_dtype), start)
            mask = lax.dynamic_update_slice(mask, piece_mask, start)
            start[d] = start[d] + jnp.asarray(self.shapes.true_value(metas[i].shape[d]), jnp.int32)
        return result, [mask]

    def _rows(self, op, masks, in_metas):
        """Which samples (dim 0) are real, for an op that is per sample:
        Unpaddable (naming those symbols) when another dim is padded."""
        rows = None
        samples = SAMPLE_ARGS.get(op, range(len(in_metas)))
        for i, (meta, m) in enumerate(zip(in_metas, masks)):
            if m is None or not isinstance(meta, torch.Tensor):
                continue
            if i not in samples:
                raise Unpaddable(f"{op} with a padded per-channel argument", self.shapes.padded_symbols([meta]))
            others = self.shapes.padded_symbols([meta], dims=set(range(1, meta.dim())))
            if others:
                raise Unpaddable(f"{op} on data padded beyond its batch dim", others)
            r = jnp.any(m, axis=tuple(range(1, m.ndim))) if m.ndim > 1 else m
            rows = r.reshape(-1) if rows is None else rows & r.reshape(-1)
        return rows

    def _convolution_backward(self, op, values, masks, in_metas, out_meta, fn, ctx):
        # grad_weight and grad_bias sum over the batch: padded samples of
        # grad_output and input are zeroed first
        rows = self._rows(op, masks, in_metas)
        values = list(values)
        for i in (0, 1):
            values[i] = _neutral(values[i], _rows_of(rows, in_metas[i]), 0)
        return fn(ctx, *values), [_rows_of(rows, out_meta[0]), None, None]

    def _batch_norm(self, op, values, masks, in_metas, out_meta, fn, ctx):
        """Batch statistics over the real samples only (normalization.py's
        functions take the validity); the outputs' samples keep the rows'
        mask, the per-channel statistics need none."""
        from ..ops.lowerings import normalization

        x_pos = 1 if op == aten.native_batch_norm_backward.default else 0
        rows = self._rows(op, masks, in_metas)
        valid = _rows_of(rows, in_metas[x_pos])
        out_masks = [_rows_of(rows, out_meta[0])] + [None] * (len(out_meta) - 1)
        if op == aten._native_batch_norm_legit_functional.default:
            return normalization.batch_norm_functional(*values, valid=valid), out_masks
        if op == aten._native_batch_norm_legit.no_stats:
            input, weight, bias, training, momentum, eps = values
            return normalization.batch_norm_train(input, weight, bias, eps, valid=valid)[:3], out_masks
        if op == aten.native_batch_norm_backward.default:
            return normalization.batch_norm_backward(*values, valid=valid), out_masks
        return fn(ctx, *values), out_masks  # eval: per sample

    def _attention(self, op, values, masks, in_metas, ctx):
        """Fused attention with padded batch or sequence dims: padded keys
        get no probability (the score is -inf), padded query rows are
        garbage in the forward and contribute nothing to the backward.
        Padded heads or head dims are Unpaddable."""
        from ..ops.lowerings import attention

        forward = op == aten._scaled_dot_product_fused_attention_overrideable.default
        q_pos = 0 if forward else 1
        q_meta, k_meta = in_metas[q_pos], in_metas[q_pos + 1]
        inner = self.shapes.padded_symbols([q_meta, k_meta, in_metas[q_pos + 2]], dims={1, 3})
        if inner:
            raise Unpaddable(f"{op} with padded heads or head dims", inner)
        conform = self._check_attention_mask(op, q_meta, k_meta, in_metas[q_pos + 3])
        if conform:
            values = list(values)
            values[q_pos + 3] = self._conform_attention_mask(op, ctx, values[q_pos + 3], conform)

        def validity(position):  # (B or 1, 1, n, 1): which rows of q/k/v are real
            m = masks[position]
            if m is None:
                return None
            return jnp.any(_full(m, values[position].shape), axis=(1, 3), keepdims=True)

        q_rows, k_rows = validity(q_pos), validity(q_pos + 1)
        v_rows = validity(q_pos + 2)
        if v_rows is not None:
            k_rows = v_rows if k_rows is None else k_rows & v_rows
        key_valid = None if k_rows is None else jnp.swapaxes(k_rows, -1, -2)  # (B, 1, 1, S)
        if forward:
            query, key, value, bias, dropout_p, is_causal, _, scale = values
            dropout = attention.forward_dropout(ctx, dropout_p)  # (its mask drawn at the padded shape)
            out, lse = attention.attention_forward(ctx, query, key, value, bias, is_causal, scale,
                                                   key_valid=key_valid, dropout=dropout)
            result = attention.forward_returns(ctx, query, key, out, lse, dropout)
            lse_mask = None if q_rows is None else q_rows[..., 0]
            return result, [q_rows, lse_mask] + [None] * 7
        grad_out, query, key, value, bias = values[:5]
        out, lse, dropout_p, is_causal, philox_seed = values[6], values[7], values[12], values[13], values[14]
        scale = values[16] if len(values) > 16 else None
        rows = q_rows
        if masks[0] is not None:
            g_rows = jnp.any(_full(masks[0], grad_out.shape), axis=(1, 3), keepdims=True)
            rows = g_rows if rows is None else rows & g_rows
        grads = attention.attention_backward(ctx, grad_out, query, key, value, bias, out, lse.reshape(query.shape[:-1]),
                                             is_causal, scale, query_valid=rows, key_valid=key_valid,
                                             dropout=attention.backward_dropout(dropout_p, philox_seed))
        if conform and grads[3] is not None:  # (the mask's gradient at the mask's own padded size)
            grads = (*grads[:3], self._conform_attention_mask(op, ctx, grads[3], conform, to_scores=False), *grads[4:])
        return grads, [q_rows, k_rows, k_rows, masks[4]]

    def _check_attention_mask(self, op, q_meta, k_meta, bias_meta):
        """The fused op's meta does not check that its mask broadcasts
        against the scores, so dynamo may leave a mask dim static (its size
        never changed) where the scores' dim is symbolic: the graph only runs
        at that size, and padding the scores alone cannot work."""
        if not isinstance(bias_meta, torch.Tensor):
            return []
        scores = (q_meta.shape[0], q_meta.shape[1], q_meta.shape[2], k_meta.shape[2])
        conform = []
        for d, (b, n) in enumerate(zip(reversed(bias_meta.shape), reversed(scores))):
            if b != 1 and self.shapes.size(b) != self.shapes.size(n):
                if self.shapes.is_prefix(b) and self.shapes.is_prefix(n):
                    conform.append((bias_meta.dim() - 1 - d, b, n))
                    continue
                symbols = (_expr(b).free_symbols | _expr(n).free_symbols) & self.shapes.bucketed
                raise Unpaddable(f"{op}: its mask's size {b} against the scores' padded {n}", symbols)
        return conform

    def _conform_attention_mask(self, op, ctx, bias, conform, to_scores=True):
        """A mask dim whose own symbol pads differently from the scores' size
        it equals at run time (HF's 2-D attention mask, length s, against a
        concatenated cache, past + 1): both hold their real elements first,
        so the mask is cut or zero-padded to the scores' padded size (or, for
        its gradient, back); their true sizes are checked equal."""
        for dim, b, n in conform:
            if to_scores:
                true_b, true_n = self.shapes.true_value(b), self.shapes.true_value(n)
                ctx.check(jnp.asarray(true_b) == jnp.asarray(true_n),
                          f"{op}: the attention mask's size {b} does not match the scores' {n}")
            size = self.shapes.size(n if to_scores else b)
            if bias.shape[dim] > size:
                bias = lax.slice_in_dim(bias, 0, size, axis=dim)
            elif bias.shape[dim] < size:
                widths = [(0, 0)] * bias.ndim
                widths[dim] = (0, size - bias.shape[dim])
                bias = jnp.pad(bias, widths)
        return bias

    def _reshape_keeps_layout(self, node, src, dst):
        """Whether reshaping the padded array reshapes the real one: the dims
        regroup (by padded sizes) into groups that are static, or one padded
        dim passing through whole, or a merged size (B*T) and the run of
        dims its layout says it merges (merged_layouts).  Not so a padded
        dim split in two ((2, n // 2)) or regrouped with static dims
        ((n, 4) -> (2 * n, 2)): the padding would land between real elements."""
        a = [n for n in src.shape if _expr(n) != 1]
        b = [n for n in dst.shape if _expr(n) != 1]
        if 0 in self.shapes.shape(a) or 0 in self.shapes.shape(b):
            return True  # (nothing to move)
        layouts = self._layouts_of(node.args[0])
        i = j = 0
        while i < len(a) and j < len(b):
            ga, gb = [a[i]], [b[j]]
            pa, pb = self.shapes.size(a[i]), self.shapes.size(b[j])
            i, j = i + 1, j + 1
            while pa != pb:
                if pa < pb and i < len(a):
                    ga.append(a[i])
                    pa, i = pa * self.shapes.size(a[i]), i + 1
                elif pb < pa and j < len(b):
                    gb.append(b[j])
                    pb, j = pb * self.shapes.size(b[j]), j + 1
                else:
                    return False
            if not self._group_keeps_layout(layouts, [_expr(n) for n in ga], [_expr(n) for n in gb]):
                return False
        return i == len(a) and j == len(b)

    def _group_keeps_layout(self, layouts, ga, gb):
        """`layouts`: those of the input value's merged sizes."""
        if not any(e.free_symbols & self.shapes.bucketed for e in ga + gb):
            return True
        if ga == gb and len(ga) == 1:
            return True
        if all(self._prefix_then_static(g, layouts) for g in (ga, gb)):
            return True  # ((n, 12) -> (3 * n, 4): real elements are a prefix of the group on both sides)
        for one, run, splits in ((ga, gb, True), (gb, ga, False)):
            if len(one) == 1 and len(run) > 1 and _merged(one[0]) and sympy.expand(math.prod(run) - one[0]) == 0:
                # Merging padded dims lays the merged one out per factor (its
                # mask says so); splitting it back is right when the value is
                # laid out in those factors (not as a prefix, nor in others).
                if not splits or layouts.get(one[0]) == tuple(run):
                    return True
        return False

    def _layouts_of(self, value):
        """{merged size: factors} of an FX value: its own (merged_layouts
        followed it through views), else the graph's."""
        own = self.shapes.value_layouts.get(value, {}) if isinstance(value, torch.fx.Node) else {}
        return {**self.shapes.layouts, **own}

    def _prefix_then_static(self, group, layouts):
        """Padded (a prefix) at most in the group's first dim."""
        bucketed = self.shapes.bucketed
        first = group[0]
        prefix = isinstance(first, sympy.Symbol) or layouts.get(first) == (first,)
        return (prefix or not first.free_symbols & bucketed) and not any(e.free_symbols & bucketed for e in group[1:])

    def _reshape_by_gather(self, node, x, src, dst):
        """A reshape that moves real elements across padding: each output
        position takes the element at its true flat index (counted in true
        sizes, placed by padded ones -- per factor for a merged dim)."""
        in_true, in_padded = self._factor_sizes(src.shape, self._layouts_of(node.args[0]))
        out_true, out_padded = self._factor_sizes(dst.shape, self._layouts_of(node))
        flat, valid = 0, True
        for k, n in enumerate(out_true):
            position = lax.broadcasted_iota(jnp.int32, out_padded, k)
            flat, valid = flat * n + position, valid & (position < n)
        source, stride = 0, 1
        for n, padded in zip(reversed(in_true), reversed(in_padded)):
            n = jnp.maximum(n, 1)
            source, flat, stride = source + (flat % n) * stride, flat // n, stride * padded
        shape = self.shapes.shape(dst.shape)
        taken = jnp.take(jnp.reshape(x, (-1,)), jnp.where(valid, source, 0).reshape(-1), mode="clip")
        return taken.reshape(shape), [jnp.reshape(valid, shape)]

    def _factor_sizes(self, shape, layouts):
        """(true, padded) sizes of `shape`'s dims, a merged dim as its
        layout's factors."""
        true, padded = [], []
        for n in shape:
            expr = _expr(n)
            factors = (expr,)
            if _merged(expr) and expr.free_symbols & self.shapes.bucketed:
                factors = layouts.get(expr)
                if factors is None:
                    raise Unpaddable(f"a reshape of a value of size {tuple(shape)} (a merged dim in no single "
                                     "layout)", expr.free_symbols & self.shapes.bucketed)
            true += [_evaluate(f, self.shapes.true) for f in factors]
            padded += [self.shapes.size_of(f) for f in factors]
        return true, tuple(padded)

    def _check_from_end(self, op, values, in_metas):
        """Unpaddable for a view counting from the end of a padded dim; the
        dim for a step-1 slice from a start >= 0 to a negative end along a
        padded prefix dim (`logits[:, :-1]`, the shift of every causal-LM
        loss): its real elements are a prefix of the slice, masked by the
        caller.  None otherwise."""
        indices = {aten.slice.Tensor: (2, 3), aten.narrow.default: (2,), aten.select.int: (2,)}.get(op)
        if indices is None:
            return None
        meta = in_metas[0]
        dim = values[1] % max(meta.dim(), 1)
        if not self.shapes.is_padded_dim(meta.shape[dim]):
            return None
        if op == aten.slice.Tensor and self.shapes.is_prefix(meta.shape[dim]):
            start, end = values[2], values[3] if len(values) > 3 else None
            step = values[4] if len(values) > 4 else 1
            if (start is None or (isinstance(start, int) and start >= 0)) and isinstance(end, int) and end < 0 and step == 1:
                return dim
        for i in indices:
            v = values[i] if i < len(values) else None
            if isinstance(v, int) and v < 0:
                raise Unpaddable(f"{op} counts from the end of a padded dim",
                                 self.shapes.padded_symbols([meta], dims={dim}))

    def _fresh_masks(self, out_meta):
        return [self.shapes.prefix_mask(m) if isinstance(m, torch.Tensor) else None for m in out_meta]

    def _reduction(self, op, values, masks, fn, ctx):
        x, mask = values[0], masks[0]
        if op in ANY_ALL:
            dim = values[1] if len(values) > 1 else None
            keepdim = bool(values[2]) if len(values) > 2 else False
            values = [_neutral(x, mask, ANY_ALL[op])] + list(values[1:])
            return fn(ctx, *values), [_any(mask, _dims(dim, x.ndim), keepdim, x.shape)]
        if op in SUM_LIKE:
            dims = _dims(values[1] if op == aten.sum.dim_IntList else None, x.ndim)
            keepdim = bool(values[2]) if op == aten.sum.dim_IntList else False
            values = [_neutral(x, mask, 0)] + list(values[1:])
            return fn(ctx, *values), [_any(mask, dims, keepdim, x.shape)]
        if op in MAX_LIKE:  # (max()/min() of everything have no dim arguments)
            dims = _dims(values[1] if len(values) > 1 else None, x.ndim)
            keepdim = bool(values[2]) if len(values) > 2 else False
            values = [_neutral(x, mask, _in_range(MAX_LIKE[op], x.dtype))] + list(values[1:])
            return fn(ctx, *values), [_any(mask, dims, keepdim, x.shape)]
        if op in PROD:
            dims = _dims(values[1] if op == aten.prod.dim_int else None, x.ndim)
            keepdim = bool(values[2]) if op == aten.prod.dim_int else False
            values = [_neutral(x, mask, 1)] + list(values[1:])
            return fn(ctx, *values), [_any(mask, dims, keepdim, x.shape)]
        if op in MEAN:
            dims = _dims(values[1] if op == aten.mean.dim else None, x.ndim)
            keepdim = bool(values[2]) if op == aten.mean.dim else False
            full = _full(mask, x.shape)
            acc = jnp.float32 if x.dtype in (jnp.bfloat16, jnp.float16) else x.dtype
            total = jnp.sum(_neutral(x, full, 0).astype(acc), axis=tuple(dims), keepdims=keepdim)
            count = jnp.sum(full, axis=tuple(dims), keepdims=keepdim).astype(acc)
            # (a mean over no real element is nan, as on the CPU: 0 / 0)
            return (total / count).astype(ctx.out_dtype), [_any(mask, dims, keepdim, x.shape)]
        # softmax family and logsumexp: padded entries are -inf (in the
        # float type an integer or bool input is promoted to)
        dim = values[1]
        dims = _dims(dim, x.ndim)
        if not jnp.issubdtype(x.dtype, jnp.floating):
            x = x.astype(ctx.out_dtype)
        values = [_neutral(x, _full(mask, x.shape), -jnp.inf)] + list(values[1:])
        if op == aten.logsumexp.default:
            keepdim = bool(values[2])
            return fn(ctx, *values), [_any(mask, dims, keepdim, x.shape)]
        return fn(ctx, *values), [mask]

    def _row_by_row(self, op, values, mask, in_metas, out_meta, fn, ctx):
        """Row-by-row ops (ROW_BY_ROW): the rows keep their mask; along a
        padded prefix dim the arg-extremes, sorts and selections, with
        padding made to lose, and running extremes."""
        meta = in_metas[0]
        dim_at, keepdim_at = ROW_BY_ROW[op]
        x = values[0]
        dims = _dims(values[dim_at] if dim_at < len(values) else None, x.ndim)
        keepdim = True if keepdim_at is None else bool(values[keepdim_at]) if keepdim_at < len(values) else False
        padded = [d for d in dims if d in self.shapes.padded_dims(meta)]
        along_prefix = padded and len(dims) == 1 and self.shapes.is_prefix(meta.shape[dims[0]])
        if along_prefix and (op in PREFIX_SORTS or op in PREFIX_SCANS):
            if op in PREFIX_SORTS:
                at = PREFIX_SORTS[op]
                descending = bool(values[at]) if at < len(values) else False
                values = [_neutral(x, _full(mask, x.shape), _sorts_last(x.dtype, descending))] + list(values[1:])
            return fn(ctx, *values), [mask if isinstance(m, torch.Tensor) else None for m in out_meta]
        if along_prefix and op in PREFIX_SELECTIONS and isinstance(in_metas[PREFIX_SELECTIONS[op][0]], int):
            _, largest_at, largest = PREFIX_SELECTIONS[op]
            if largest_at is not None and largest_at < len(values):
                largest = bool(values[largest_at])
            values = [_neutral(x, _full(mask, x.shape), _sorts_last(x.dtype, largest))] + list(values[1:])
            out = _any(mask, dims, keepdim, x.shape)
            return fn(ctx, *values), [out if isinstance(m, torch.Tensor) else None for m in out_meta]
        if padded:
            if op not in ARG_EXTREMES or len(dims) != 1 or not self.shapes.is_prefix(meta.shape[dims[0]]):
                raise Unpaddable(f"{op} along a padded dim", self.shapes.padded_symbols([meta], padded))
            values = [_neutral(x, _full(mask, x.shape), _in_range(ARG_EXTREMES[op], x.dtype))] + list(values[1:])
        out = _any(mask, dims, keepdim, x.shape)
        return fn(ctx, *values), [out if isinstance(m, torch.Tensor) else None for m in out_meta]

    def _contraction(self, op, values, masks, fn, ctx):
        a_pos, b_pos = (1, 2) if op == aten.addmm.default else (0, 1)
        a, b = values[a_pos], values[b_pos]
        ma, mb = _full(masks[a_pos], a.shape), _full(masks[b_pos], b.shape)
        values = list(values)
        values[a_pos] = _neutral(a, ma, 0)
        values[b_pos] = _neutral(b, mb, 0)
        rows = None if ma is None else jnp.any(ma, axis=-1, keepdims=True)
        cols = None if mb is None else jnp.any(mb, axis=-2, keepdims=True)
        out = None
        for m in (rows, cols):
            if m is not None:
                out = m if out is None else out & m
        if op == aten.addmm.default and masks[0] is not None:
            out = masks[0] if out is None else out & masks[0]
        return fn(ctx, *values), [out]

    def _layer_norm(self, op, values, masks, in_metas, fn, ctx):
        x_pos = 0 if op == aten.native_layer_norm.default else 1
        normalized = values[1] if op == aten.native_layer_norm.default else values[2]
        x_meta = in_metas[x_pos]
        k = len(normalized)
        normalized_dims = set(range(x_meta.dim() - k, x_meta.dim()))
        if normalized_dims & set(self.shapes.padded_dims(x_meta)):
            raise Unpaddable("layer_norm over a padded dim", self.shapes.padded_symbols([x_meta], normalized_dims))
        row_mask = None
        for m in masks:
            if m is not None:
                row_mask = m if row_mask is None else row_mask & m
        x = values[x_pos]
        if op == aten.native_layer_norm.default:
            out = fn(ctx, *values)
            stats_mask = jnp.any(_full(row_mask, x.shape), axis=tuple(range(x.ndim - k, x.ndim)), keepdims=True)
            return out, [row_mask, stats_mask, stats_mask]
        # backward: padded rows contribute nothing to grad_weight/grad_bias
        grad, mean, rstd = values[0], values[3], values[4]
        full = _full(row_mask, x.shape)
        rows = jnp.any(full, axis=tuple(range(x.ndim - k, x.ndim)), keepdims=True)
        values = list(values)
        values[0] = _neutral(grad, full, 0)
        values[1] = _neutral(x, full, 0)
        values[3] = _neutral(mean, rows, 0)
        values[4] = _neutral(rstd, rows, 0)
        return fn(ctx, *values), [row_mask, None, None]

    def _nll(self, op, values, masks, in_metas, fn, ctx):
        inputs, target = in_metas[0:2] if op == aten.nll_loss_forward.default else in_metas[1:3]
        self._check_rows_align(op, inputs, target)
        if op == aten.nll_loss_forward.default:
            self_, target, weight, reduction, ignore_index = values
            rows = masks[1] if masks[1] is not None else _row_mask(masks[0])
            target = jnp.where(rows, target, ignore_index) if rows is not None else target
            out = fn(ctx, self_, target, weight, reduction, ignore_index)
            return out, [rows if reduction == 0 else None, None]
        grad, self_, target, weight, reduction, ignore_index, total = values
        rows = masks[2] if masks[2] is not None else _row_mask(masks[1])
        target = jnp.where(rows, target, ignore_index) if rows is not None else target
        out = fn(ctx, grad, self_, target, weight, reduction, ignore_index, total)
        return out, [masks[1]]

    def _check_rows_align(self, op, a, b):
        """Row i of `a` meets row i of `b` (nll's log-probabilities and
        targets): see _sizes_align."""
        if a.dim() and b.dim() and not self._sizes_align(a.shape[0], b.shape[0]):
            raise Unpaddable(f"{op}: rows of its operands padded in different layouts",
                             self.shapes.padded_symbols([a, b], dims=[0]))

    def _check_layouts_agree(self, op, metas):
        """Element-wise operands meet position by position (dims aligned from
        the right, as they broadcast): see _sizes_align."""
        metas = [m for m in metas if isinstance(m, torch.Tensor)]
        for i, a in enumerate(metas):
            for b in metas[i + 1:]:
                for da, db in zip(reversed(a.shape), reversed(b.shape)):
                    if not self._sizes_align(da, db):
                        raise Unpaddable(f"{op}: operands padded in different layouts",
                                         self.shapes.padded_symbols([a, b]))

    def _sizes_align(self, a, b):
        """Whether two sizes that meet hold their real elements at the same
        padded places: not padded, the same expression, both a plain prefix,
        or one of them 1 (broadcast).  A backward graph's saved targets (B*T
        rows no view in that graph splits: a prefix) against
        log-probabilities it views per factor paired misplaced rows (wrong
        gradients; found by a dynamic probe)."""
        padded_a, padded_b = self.shapes.is_padded_dim(a), self.shapes.is_padded_dim(b)
        if not (padded_a or padded_b) or _expr(a) == _expr(b):
            return True
        if (not padded_a and a == 1) or (not padded_b and b == 1):
            return True
        return self.shapes.is_prefix(a) and self.shapes.is_prefix(b)

    def _embedding(self, op, values, masks, in_metas, out_meta, fn, ctx):
        values = list(values)
        if op == aten.embedding.default:
            weight_mask, idx_mask = masks[0], masks[1]
            values[1] = _neutral(values[1], idx_mask, 0)
            out = None if idx_mask is None else idx_mask[..., None]
            if weight_mask is not None:  # (a padded embedding dim: its columns' validity)
                columns = jnp.any(_full(weight_mask, values[0].shape), axis=0)
                out = columns if out is None else out & columns
            return fn(ctx, *values), [out]
        grad_mask, idx_mask = masks[0], masks[1]
        if idx_mask is not None and len(values) > 4 and values[4]:
            # (padded indices, read as row 0, would count in its frequency)
            raise Unpaddable(f"{op} with scale_grad_by_freq over padded indices",
                             self.shapes.padded_symbols([in_metas[1]]))
        rows = idx_mask[..., None] if idx_mask is not None else None
        values[0] = _neutral(values[0], _full(rows, values[0].shape) if rows is not None else grad_mask, 0)
        values[1] = _neutral(values[1], idx_mask, 0)
        return fn(ctx, *values), self._fresh_masks(out_meta)  # (a new (num_weights, dim) value)


def _rows_of(rows, meta):
    """A per-sample mask shaped to broadcast against a value like `meta`."""
    if rows is None or not isinstance(meta, torch.Tensor) or meta.dim() == 0:
        return None
    return rows.reshape((-1,) + (1,) * (meta.dim() - 1))


def _row_mask(mask):
    """The per-row validity of an (N, C) input's mask."""
    if mask is None:
        return None
    return jnp.any(mask, axis=-1) if mask.ndim > 1 else mask


# --------------------------------------------------- symbolic scalars

SYMBOLIC_OPS = {
    operator.add,
    operator.sub,
    operator.mul,
    operator.floordiv,
    operator.truediv,
    operator.mod,
    operator.neg,
    operator.pow,
    operator.eq,
    operator.ne,
    operator.lt,
    operator.le,
    operator.gt,
    operator.ge,
    operator.abs,
    operator.not_,
    operator.and_,
    operator.or_,
    operator.xor,
    math.ceil,
    math.floor,
    math.trunc,
    torch.sym_float,
    torch.sym_int,
    torch.sym_max,
    torch.sym_min,
    torch.sym_sum,
    torch.sym_not,
    torch.sym_ite,
}
SIZE_QUERIES = {aten.sym_size.int, aten.sym_stride.int, aten.sym_numel.default, aten.sym_storage_offset.default}

