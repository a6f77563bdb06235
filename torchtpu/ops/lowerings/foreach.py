"""_foreach_* ops (what torch.optim's default foreach implementations call): the pointwise lowerings mapped over tensor lists, one kernel per call.

Each foreach overload is the elementwise lowering of one aten op applied to
the i-th element of every list argument (and the shared Scalar / Tensor
arguments), with a per-element LoweringContext so type promotion and output
dtypes are those of the i-th call.  In-place (`_foreach_add_.List`) and out=
overloads get the functional lowering (registry.variants, registered by the core), so
`_foreach_add_` is one kernel, not torch's per-tensor composite loop.
"""

import jax.numpy as jnp
import torch

from ..context import LoweringContext
from ..registry import lower
from ..special import special
from . import elementwise as ew

aten = torch.ops.aten


def _item(arg, i, per_element):
    return arg[i] if per_element else arg


def _foreach(elem, layout, extra=()):
    """A foreach lowering from the elementwise lowering `elem`.

    `layout` says, per foreach argument, whether it is indexed per element
    ("list": Tensor[] / Scalar[]) or shared ("shared": Scalar, Tensor);
    `extra` are trailing arguments of `elem` that the foreach op lacks
    (e.g. alpha=1 of add.Tensor for _foreach_add.Scalar)."""

    def lowering(ctx, *args):
        lengths = [len(a) for a, kind in zip(ctx.meta_args, layout) if kind == "list"]
        n = lengths[0]
        results = []
        for i in range(n):
            values = [_item(a, i, kind == "list") for a, kind in zip(args, layout)]
            metas = [_item(m, i, kind == "list") for m, kind in zip(ctx.meta_args, layout)]
            sub = LoweringContext(ctx.op, metas + list(extra), [ctx.out_meta[i]], ctx.precision)
            results.append(elem(sub, *values, *extra))
        return results

    return lowering


def _map_unary(fn):
    return _foreach(fn, ("list",))


def _lowering_of(op):
    from ..registry import LOWERINGS

    return LOWERINGS[op].fn


L, S = "list", "shared"

# ---------------------------------------------------------------- unary

_UNARY = {
    "abs": aten.abs.default,
    "acos": aten.acos.default,
    "asin": aten.asin.default,
    "atan": aten.atan.default,
    "ceil": aten.ceil.default,
    "cos": aten.cos.default,
    "cosh": aten.cosh.default,
    "erf": aten.erf.default,
    "erfc": aten.erfc.default,
    "exp": aten.exp.default,
    "expm1": aten.expm1.default,
    "floor": aten.floor.default,
    "frac": aten.frac.default,
    "lgamma": aten.lgamma.default,
    "log": aten.log.default,
    "log10": aten.log10.default,
    "log1p": aten.log1p.default,
    "log2": aten.log2.default,
    "neg": aten.neg.default,
    "reciprocal": aten.reciprocal.default,
    "round": aten.round.default,
    "rsqrt": aten.rsqrt.default,
    "sigmoid": aten.sigmoid.default,
    "sign": aten.sign.default,
    "sin": aten.sin.default,
    "sinh": aten.sinh.default,
    "sqrt": aten.sqrt.default,
    "tan": aten.tan.default,
    "tanh": aten.tanh.default,
    "trunc": aten.trunc.default,
}

for _name, _op in _UNARY.items():
    lower(getattr(aten, "_foreach_" + _name).default)(_map_unary(_lowering_of(_op)))


# ----------------------------------------------------------------- binary

# foreach name -> elementwise op for (List, Scalar / ScalarList / Tensor)
_BINARY = {
    "add": aten.add.Tensor,
    "sub": aten.sub.Tensor,
    "mul": aten.mul.Tensor,
    "div": aten.div.Tensor,
    "pow": aten.pow.Tensor_Tensor,
    "maximum": aten.maximum.default,
    "minimum": aten.minimum.default,
    "clamp_min": aten.clamp_min.Tensor,
    "clamp_max": aten.clamp_max.Tensor,
}
# Scalar operands go through these (clamp_min is torch's own kernel for
# _foreach_maximum.Scalar; NaN-propagating like maximum).
_BINARY_SCALAR = {
    "add": aten.add.Tensor,
    "sub": aten.sub.Tensor,
    "mul": aten.mul.Tensor,
    "div": aten.div.Tensor,
    "pow": aten.pow.Tensor_Scalar,
    "maximum": aten.clamp_min.default,
    "minimum": aten.clamp_max.default,
    "clamp_min": aten.clamp_min.default,
    "clamp_max": aten.clamp_max.default,
}
_HAS_ALPHA = {"add", "sub"}

for _name, _op in _BINARY.items():
    packet = getattr(aten, "_foreach_" + _name)
    tensor_fn = _lowering_of(_op)
    scalar_fn = _lowering_of(_BINARY_SCALAR[_name])
    alpha = (1,) if _name in _HAS_ALPHA else ()
    if "List" in packet.overloads():
        # _foreach_add.List(self, other, *, alpha) has its own alpha
        lower(packet.List)(_foreach(tensor_fn, (L, L, S) if alpha else (L, L)))
    if "Scalar" in packet.overloads():
        lower(packet.Scalar)(_foreach(scalar_fn, (L, S), extra=alpha))
    if "ScalarList" in packet.overloads():
        lower(packet.ScalarList)(_foreach(scalar_fn, (L, L), extra=alpha))
    if "Tensor" in packet.overloads():
        # _foreach_add.Tensor(self, Tensor other, *, alpha)
        lower(packet.Tensor)(_foreach(tensor_fn, (L, S, S) if alpha else (L, S)))

# _foreach_pow.ScalarAndTensor(Scalar self, Tensor[] exponent)
lower(aten._foreach_pow.ScalarAndTensor)(_foreach(_lowering_of(aten.pow.Scalar), (S, L)))


# ---------------------------------------------------------------- ternary

for _name, _op in (("addcmul", aten.addcmul.default), ("addcdiv", aten.addcdiv.default)):
    packet = getattr(aten, "_foreach_" + _name)
    fn = _lowering_of(_op)
    lower(packet.Scalar)(_foreach(fn, (L, L, L, S)))
    lower(packet.ScalarList)(_foreach(fn, (L, L, L, L)))

_lerp = _lowering_of(aten.lerp.Tensor)
lower(aten._foreach_lerp.List)(_foreach(_lerp, (L, L, L)))
lower(aten._foreach_lerp.Scalar)(_foreach(_lerp, (L, L, S)))
lower(aten._foreach_lerp.ScalarList)(_foreach(_lerp, (L, L, L)))


def _scalars_on_cpu(list_overload):
    """`_foreach_addcdiv_(..., scalars: Tensor)`: torch requires `scalars` to be
    a 1-d CPU tensor (torch.optim passes one) and uses its values as a Scalar
    list, which is what this does."""

    def handler(self, tensor1, tensor2, scalars):
        if scalars.device.type != "cpu":
            raise RuntimeError(f"Expected scalars to be on CPU, got {scalars.device} instead.")
        return list_overload(self, tensor1, tensor2, scalars.tolist())

    return handler


for _name in ("addcmul", "addcdiv"):
    for _suffix in ("", "_"):
        _packet = getattr(aten, "_foreach_" + _name + _suffix)
        special(_packet.Tensor)(_scalars_on_cpu(_packet.ScalarList))


# ------------------------------------------------------- data movement


@lower(aten._foreach_zero.default)
def foreach_zero(ctx, self):
    return [jnp.zeros_like(t) for t in self]


@lower(aten._foreach_copy.default)
def foreach_copy(ctx, self, src, non_blocking=False):
    return [jnp.broadcast_to(s.astype(t.dtype), t.shape) for t, s in zip(self, src)]


@special(aten._foreach_copy_.default)
def foreach_copy_(self, src, non_blocking=False):
    """Sources on another device (a state dict on the CPU) copy one by one,
    through the ordinary copy_ transfer; same-device lists take one kernel."""
    from .. import dispatch

    if all(s.device == t.device for s, t in zip(src, self)):
        try:
            return dispatch.run(aten._foreach_copy_.default, (self, src, non_blocking), {})
        except dispatch.Unsupported:
            pass
    for t, s in zip(self, src):
        t.copy_(s, non_blocking)


@lower(aten._foreach_clone.default)
def foreach_clone(ctx, self, memory_format=None):
    return list(self)


# ----------------------------------------------------------- reductions


def _norm_values(x, ord, out_dtype):
    """linalg.vector_norm of all elements (accumulated in at least float32)."""
    a = jnp.abs(x)
    acc = jnp.promote_types(ew.opmath(a.dtype), out_dtype)
    a = a.astype(acc)
    if ord == 2:
        r = jnp.sqrt(jnp.sum(a * a))
    elif ord == 1:
        r = jnp.sum(a)
    elif ord == float("inf"):
        r = jnp.max(a) if a.size else jnp.zeros((), acc)
    elif ord == float("-inf"):
        r = jnp.min(a)
    elif ord == 0:
        r = jnp.sum((a != 0).astype(acc))
    else:
        r = jnp.sum(a**ord) ** (1.0 / ord)
    return r


@lower(aten._foreach_norm.Scalar, static=("ord",))
def foreach_norm(ctx, self, ord=2, dtype=None):
    return [_norm_values(t, ord, ctx.out_dtype_of(i)) for i, t in enumerate(self)]


@lower(aten._foreach_powsum.Scalar, static=("ord",))
def foreach_powsum(ctx, self, ord=2, dtype=None):
    out = []
    for i, t in enumerate(self):
        a = jnp.abs(t)
        a = a.astype(jnp.promote_types(ew.opmath(a.dtype), ctx.out_dtype_of(i)))
        if ord == 0:
            out.append(jnp.sum((a != 0).astype(a.dtype)))
        elif ord == 1:
            out.append(jnp.sum(a))
        elif ord == 2:
            out.append(jnp.sum(a * a))
        else:
            out.append(jnp.sum(a**ord))
    return out


@lower(aten._foreach_max.default)
def foreach_max(ctx, self):
    out = []
    for t in self:
        m = jnp.max(t)
        if ew.is_inexact(t.dtype):
            m = jnp.where(jnp.any(jnp.isnan(t)), jnp.asarray(jnp.nan, t.dtype), m)
        out.append(m)
    return out
