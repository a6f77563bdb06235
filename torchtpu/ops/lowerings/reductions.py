"""Reductions: sum/mean/prod, min/max, arg-reductions, var/std, norms, logsumexp, any/all, softmax family.

Conventions shared by every lowering here:
- `dim` lists are normalised by `_axes`: None or [] means every dimension
  (except for `any.dims`/`all.dims`, where [] means none), negative dims wrap,
  and a 0-d tensor accepts dim 0 / -1 but has nothing to reduce.
- bfloat16/float16 accumulate in float32 (as ATen's CPU kernels do) and the
  result is cast back to ATen's output dtype (the dispatcher checks it).
- Index-returning reductions follow torch: the first occurrence wins, and a
  NaN counts as larger (max) / smaller (min) than every number.
"""

import math

import jax.numpy as jnp
from jax import lax
import numpy as np
import torch

from ..registry import lower
from .common import acc_dtype, astype

aten = torch.ops.aten



# ------------------------------------------------------------------ helpers




def _is_float(dtype):
    return jnp.issubdtype(dtype, jnp.floating)


def _is_complex(dtype):
    return jnp.issubdtype(dtype, jnp.complexfloating)


def _wrap(d, ndim):
    return d % max(ndim, 1)


def _axes(dim, ndim, empty_means_all=True):
    """Reduced axes as a sorted tuple."""
    if dim is None:
        return tuple(range(ndim))
    if isinstance(dim, int):
        dim = [dim]
    if len(dim) == 0:
        return tuple(range(ndim)) if empty_means_all else ()
    if ndim == 0:
        return ()
    return tuple(sorted({_wrap(d, ndim) for d in dim}))


# ATen's names for dtypes, for error messages.
_TORCH_NAMES = {
    "bool": "Bool",
    "uint8": "Byte",
    "int8": "Char",
    "int16": "Short",
    "int32": "Int",
    "int64": "Long",
    "float16": "Half",
    "bfloat16": "BFloat16",
    "float32": "Float",
    "float64": "Double",
    "complex64": "ComplexFloat",
    "complex128": "ComplexDouble",
}


def _kind(dtype):
    dtype = jnp.dtype(dtype)
    if dtype == jnp.bool_:
        return "bool"
    if jnp.issubdtype(dtype, jnp.integer):
        return "int"
    return "complex" if jnp.issubdtype(dtype, jnp.complexfloating) else "float"


def reject(op_name, dtype, kinds, exc=NotImplementedError):
    """Raise ATen's CPU error for dtypes its kernel does not implement (the
    meta kernels accept them, so the lowering has to say no)."""
    if _kind(dtype) in kinds:
        name = _TORCH_NAMES.get(jnp.dtype(dtype).name, jnp.dtype(dtype).name)
        raise exc(f'"{op_name}" not implemented for \'{name}\'')


def require_nonempty(op_name, shape, axes):
    """ATen's error for reducing a size-0 dim with an op that has no identity."""
    for a in axes:
        if shape[a] == 0:
            raise IndexError(f"{op_name}(): Expected reduction dim {a} to have non-zero size.")


def _numel(shape, axes):
    return int(np.prod([shape[a] for a in axes], dtype=np.int64)) if axes else 1


def _sum(x, axes, keepdim, out_dtype):
    """torch.sum semantics: cast to the output dtype (as c10 casts: -2.0 to
    uint8 is 254), accumulate (in float32 for the 16-bit floats), cast back."""
    x = astype(x, out_dtype)
    return jnp.sum(x.astype(acc_dtype(out_dtype)), axis=axes, keepdims=keepdim).astype(out_dtype)


def _as_1d(x):
    """0-d tensors reduce along their single implicit dim of size 1."""
    return x.reshape(1) if x.ndim == 0 else x


def _arg_extreme(x, axis, largest):
    """First index of the max (min) along `axis`, NaN winning."""
    if x.dtype == jnp.bool_:
        x = x.astype(jnp.int8)
    return jnp.argmax(x, axis=axis) if largest else jnp.argmin(x, axis=axis)


def _extreme(x, axes, keepdim, largest):
    if x.dtype == jnp.bool_:
        return (jnp.any if largest else jnp.all)(x, axis=axes, keepdims=keepdim)
    return (jnp.max if largest else jnp.min)(x, axis=axes, keepdims=keepdim)


# ---------------------------------------------------------------- sum / mean / prod
# Out variants with a CompositeExplicitAutograd(NonFunctional) kernel are
# named explicitly in the decorators: otherwise that kernel, not the
# lowering, would run on tpu (e.g. logsumexp.out decomposes into amax,
# masked_fill_, sub, exp, ...).  The others reach the lowering through the
# boxed fallback (registry.find_lowering).


@lower(aten.sum.default, aten.sum.out)
def sum_all(ctx, self, dtype=None):
    return _sum(self, tuple(range(self.ndim)), False, ctx.out_dtype)


@lower(aten.sum.dim_IntList)
def sum_dim(ctx, self, dim, keepdim=False, dtype=None):
    return _sum(self, _axes(dim, self.ndim), keepdim, ctx.out_dtype)


@lower(aten.nansum.default)
def nansum(ctx, self, dim=None, keepdim=False, dtype=None):
    reject("nansum", self.dtype, ("complex",), RuntimeError)
    reject("nansum_cpu", ctx.out_dtype, ("complex",))  # (a complex dtype= of a real input)
    if _is_float(self.dtype) or _is_complex(self.dtype):
        self = jnp.where(jnp.isnan(self), jnp.zeros((), self.dtype), self)
    return _sum(self, _axes(dim, self.ndim), keepdim, ctx.out_dtype)


def _mean(ctx, self, axes, keepdim):
    """ATen's mean_out: the sum in the result's dtype -- float32 for a
    float16/bfloat16 result -- divided, then cast to the result's dtype.  So
    an out= wider than the input averages at the out='s precision, and a
    float32 input into a float16 out= averages in float32 (a complex input
    into a real out= drops the imaginary part, as the cast does)."""
    out = jnp.dtype(ctx.out_dtype)
    compute = jnp.dtype(jnp.float32) if out in (jnp.float16, jnp.bfloat16) else out
    acc = acc_dtype(compute)
    n = _numel(self.shape, axes)
    s = jnp.sum(astype(self, compute).astype(acc), axis=axes, keepdims=keepdim)
    return (s / jnp.asarray(n, acc)).astype(compute).astype(out)


@lower(aten.mean.default, aten.mean.dtype_out)
def mean_all(ctx, self, dtype=None):
    return _mean(ctx, self, tuple(range(self.ndim)), False)  # (`dtype` is ctx.out_dtype)


@lower(aten.mean.dim)
def mean_dim(ctx, self, dim, keepdim=False, dtype=None):
    return _mean(ctx, self, _axes(dim, self.ndim), keepdim)


def _prod(x, axes, keepdim, out_dtype):
    x = astype(x, out_dtype)  # (as c10 casts, like _sum)
    return jnp.prod(x.astype(acc_dtype(out_dtype)), axis=axes, keepdims=keepdim).astype(out_dtype)


@lower(aten.prod.default, aten.prod.out)
def prod_all(ctx, self, dtype=None):
    return _prod(self, tuple(range(self.ndim)), False, ctx.out_dtype)


@lower(aten.prod.dim_int)
def prod_dim(ctx, self, dim, keepdim=False, dtype=None):
    return _prod(self, _axes(dim, self.ndim), keepdim, ctx.out_dtype)


# ---------------------------------------------------------------- min / max


def _amax_amin(self, dim, keepdim, largest):
    name = "amax" if largest else "amin"
    reject(name, self.dtype, ("complex",))
    axes = _axes(dim, self.ndim)
    require_nonempty(name, self.shape, axes)
    return _extreme(self, axes, keepdim, largest)


@lower(aten.amax.default)
def amax(ctx, self, dim=(), keepdim=False):
    return _amax_amin(self, dim, keepdim, True)


@lower(aten.amin.default)
def amin(ctx, self, dim=(), keepdim=False):
    return _amax_amin(self, dim, keepdim, False)


def _max_min_all(self, largest):
    name = "max" if largest else "min"
    reject(name, self.dtype, ("complex",))
    if self.size == 0:
        raise RuntimeError(
            f"{name}(): Expected reduction dim to be specified for input.numel() == 0. "
            "Specify the reduction dim with the 'dim' argument."
        )
    return _extreme(self, None, False, largest)


@lower(aten.max.default)
def max_all(ctx, self):
    return _max_min_all(self, True)


@lower(aten.min.default)
def min_all(ctx, self):
    return _max_min_all(self, False)


def _value_index(self, dim, keepdim, largest):
    """(values, indices) of max/min along one dim, torch's tie/NaN rules."""
    ndim = self.ndim
    x = _as_1d(self)
    axis = _wrap(dim, ndim)
    idx = jnp.expand_dims(_arg_extreme(x, axis, largest), axis)
    values = jnp.take_along_axis(x, idx, axis=axis)
    if ndim == 0:
        return values.reshape(()), idx.reshape(())
    if not keepdim:
        values, idx = values.squeeze(axis), idx.squeeze(axis)
    return values, idx


def _max_min_dim(self, dim, keepdim, largest):
    name = "max" if largest else "min"
    reject(name, self.dtype, ("complex",), RuntimeError)
    require_nonempty(name, self.shape, _axes([dim], self.ndim))
    return _value_index(self, dim, keepdim, largest)


@lower(aten.max.dim)
def max_dim(ctx, self, dim, keepdim=False):
    return _max_min_dim(self, dim, keepdim, True)


@lower(aten.min.dim)
def min_dim(ctx, self, dim, keepdim=False):
    return _max_min_dim(self, dim, keepdim, False)


def _arg(ctx, self, dim, keepdim, largest):
    reject("argmax" if largest else "argmin", self.dtype, ("bool", "complex"), RuntimeError)
    if dim is None:
        return _arg_extreme(self.reshape(-1), 0, largest).reshape(ctx.out_shape)
    return _value_index(self, dim, keepdim, largest)[1]


@lower(aten.argmax.default)
def argmax(ctx, self, dim=None, keepdim=False):
    return _arg(ctx, self, dim, keepdim, True)


@lower(aten.argmin.default)
def argmin(ctx, self, dim=None, keepdim=False):
    return _arg(ctx, self, dim, keepdim, False)


def _aminmax(self, dim, keepdim):
    reject("aminmax", self.dtype, ("complex",))
    if dim is None:
        if self.size == 0:
            raise RuntimeError(
                "aminmax(): cannot compute aminmax over an empty dimension as the operation has no identity."
            )
        axes = tuple(range(self.ndim))
        mn, mx = _extreme(self, axes, False, False), _extreme(self, axes, False, True)
        if keepdim:
            shape = (1,) * self.ndim
            mn, mx = mn.reshape(shape), mx.reshape(shape)
        return mn, mx
    axes = _axes([dim], self.ndim)
    require_nonempty("aminmax", self.shape, axes)
    return _extreme(self, axes, keepdim, False), _extreme(self, axes, keepdim, True)


@lower(aten.aminmax.default)
def aminmax(ctx, self, dim=None, keepdim=False):
    return _aminmax(self, dim, keepdim)


# ---------------------------------------------------------------- var / std


def _var_mean(self, dim, correction, keepdim):
    """(var, mean) in the accumulation dtype, torch's `correction` rule:
    divide by max(0, N - correction)."""
    if _kind(self.dtype) in ("bool", "int"):
        raise RuntimeError("std and var only support floating point and complex dtypes")
    axes = _axes(dim, self.ndim)
    acc = acc_dtype(self.dtype)
    x = self.astype(acc)
    n = _numel(self.shape, axes)
    real = jnp.finfo(acc).dtype if _is_complex(acc) else acc
    mean = jnp.sum(x, axis=axes, keepdims=True) / jnp.asarray(n, real).astype(acc)
    d = x - mean
    sq = jnp.real(d * jnp.conj(d)) if _is_complex(acc) else d * d
    ss = jnp.sum(sq, axis=axes, keepdims=keepdim)
    corr = jnp.asarray(1 if correction is None else correction).astype(real)
    var = ss / jnp.maximum(jnp.asarray(n, real) - corr, jnp.zeros((), real))
    if not keepdim:
        mean = jnp.squeeze(mean, axis=axes) if axes else mean
    return var, mean


@lower(aten.var.correction)
def var(ctx, self, dim=None, correction=None, keepdim=False):
    return _var_mean(self, dim, correction, keepdim)[0]


@lower(aten.std.correction)
def std(ctx, self, dim=None, correction=None, keepdim=False):
    return jnp.sqrt(_var_mean(self, dim, correction, keepdim)[0])


@lower(aten.var_mean.correction, aten.var_mean.correction_out)
def var_mean(ctx, self, dim=None, correction=None, keepdim=False):
    return _var_mean(self, dim, correction, keepdim)


@lower(aten.std_mean.correction, aten.std_mean.correction_out)
def std_mean(ctx, self, dim=None, correction=None, keepdim=False):
    v, m = _var_mean(self, dim, correction, keepdim)
    return jnp.sqrt(v), m


# ---------------------------------------------------------------- norms


def _vector_norm(x, ord, axes, keepdim, out_dtype):
    """torch.linalg.vector_norm; `ord` is a Python number (static)."""
    acc = acc_dtype(x.dtype)
    x = x.astype(acc)
    a = jnp.abs(x)  # real for complex input
    real = a.dtype
    ord = float(ord)
    if ord == 0:
        r = jnp.sum((x != 0).astype(real), axis=axes, keepdims=keepdim)
    elif ord == math.inf:
        r = jnp.max(a, axis=axes, keepdims=keepdim)
    elif ord == -math.inf:
        r = jnp.min(a, axis=axes, keepdims=keepdim)
    elif ord == 1:
        r = jnp.sum(a, axis=axes, keepdims=keepdim)
    elif ord == 2:
        r = jnp.sqrt(jnp.sum(a * a, axis=axes, keepdims=keepdim))
    else:
        p = jnp.asarray(ord, real)
        r = jnp.power(jnp.sum(jnp.power(a, p), axis=axes, keepdims=keepdim), 1 / p)
    return r.astype(out_dtype)


@lower(aten.linalg_vector_norm.default, static=("ord",))
def linalg_vector_norm(ctx, self, ord=2, dim=None, keepdim=False, dtype=None):
    if dtype is not None:
        self = _in_norm_dtype(self, ctx.out_dtype)
    return _vector_norm(self, ord, _axes(dim, self.ndim), keepdim, ctx.out_dtype)


def _in_norm_dtype(x, out_dtype):
    """A norm's input in its dtype= (the real result's dtype; a complex input
    keeps its imaginary part, in the complex type of that precision)."""
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        return x.astype(jnp.result_type(out_dtype, jnp.complex64))
    return x.astype(out_dtype)


def _p(p):
    return 2 if p is None else p


@lower(aten.norm.Scalar, aten.norm.Scalar_out, static=("p",))
def norm_scalar(ctx, self, p=2):
    return _vector_norm(self, _p(p), tuple(range(self.ndim)), False, ctx.out_dtype)


@lower(aten.norm.ScalarOpt_dtype, aten.norm.ScalarOpt_dtype_out, static=("p",))
def norm_dtype(ctx, self, p, dtype):
    self = _in_norm_dtype(self, ctx.out_dtype)
    return _vector_norm(self, _p(p), tuple(range(self.ndim)), False, ctx.out_dtype)


@lower(aten.norm.ScalarOpt_dim, static=("p",))
def norm_dim(ctx, self, p, dim, keepdim=False):
    return _vector_norm(self, _p(p), _axes(dim, self.ndim), keepdim, ctx.out_dtype)


@lower(aten.norm.ScalarOpt_dim_dtype, static=("p",))
def norm_dim_dtype(ctx, self, p, dim, keepdim, dtype):
    self = self.astype(ctx.out_dtype)
    return _vector_norm(self, _p(p), _axes(dim, self.ndim), keepdim, ctx.out_dtype)


# ---------------------------------------------------------------- logsumexp


def _logsumexp(x, axes, keepdim, rounded=lambda v: v):
    """log(sum(exp(x))) along axes, stable; +-inf maxima are not subtracted
    (as ATen does), so all -inf gives -inf and any +inf gives +inf.
    `rounded` is applied after each step (ATen's composite rounds 16-bit
    values op by op; CUDA runs the same composite)."""
    # (shifted by the real parts' maximum, as ATen: a complex max would put
    # the imaginary part on another branch of the log)
    m = jnp.max(jnp.real(x), axis=axes, keepdims=True, initial=-jnp.inf)
    m = jnp.where(jnp.isinf(m), jnp.zeros((), m.dtype), m)
    s = rounded(jnp.sum(rounded(jnp.exp(rounded(x - m))), axis=axes, keepdims=True))
    r = rounded(rounded(jnp.log(s)) + m)
    if not keepdim:
        r = jnp.squeeze(r, axis=axes) if axes else r
    return r


@lower(aten.logsumexp.default, aten.logsumexp.out)
def logsumexp(ctx, self, dim, keepdim=False):
    out = ctx.out_dtype
    acc = acc_dtype(out)
    x = self.astype(out).astype(acc)
    rounded = (lambda v: v.astype(out).astype(acc)) if acc != jnp.dtype(out) else (lambda v: v)
    return _logsumexp(x, _axes(dim, self.ndim), keepdim, rounded)


# ---------------------------------------------------------------- any / all / count_nonzero


def _truth(x):
    return x if x.dtype == jnp.bool_ else x != 0


@lower(aten.any.default)
def any_all(ctx, self):
    return jnp.any(_truth(self))


@lower(aten.any.dim)
def any_dim(ctx, self, dim, keepdim=False):
    return jnp.any(_truth(self), axis=_axes([dim], self.ndim), keepdims=keepdim)


@lower(aten.any.dims, aten.any.dims_out)
def any_dims(ctx, self, dim=None, keepdim=False):
    return jnp.any(_truth(self), axis=_axes(dim, self.ndim, empty_means_all=False), keepdims=keepdim)


@lower(aten.all.default)
def all_all(ctx, self):
    return jnp.all(_truth(self))


@lower(aten.all.dim)
def all_dim(ctx, self, dim, keepdim=False):
    return jnp.all(_truth(self), axis=_axes([dim], self.ndim), keepdims=keepdim)


@lower(aten.all.dims, aten.all.dims_out)
def all_dims(ctx, self, dim=None, keepdim=False):
    return jnp.all(_truth(self), axis=_axes(dim, self.ndim, empty_means_all=False), keepdims=keepdim)


@lower(aten.hash_tensor.default, aten.hash_tensor.out)
def hash_tensor(ctx, self, dim=(), keepdim=False, mode=0):
    """ATen's mode 0 (xor_sum): each element widened to float64 (floating
    dtypes) or int64 (integers, bool), its 64 bits XORed along `dim`."""
    if mode != 0:
        raise RuntimeError(f"Unknown hash_tensor mode: {mode}")
    reject("xor_sum_cpu", self.dtype, ("complex",))
    axes = _axes(dim, self.ndim)
    require_nonempty("hash_tensor", self.shape, axes)
    wide = self.astype(jnp.float64 if _kind(self.dtype) == "float" else jnp.int64)
    bits = lax.bitcast_convert_type(wide, jnp.uint64)
    out = lax.reduce(bits, np.uint64(0), lax.bitwise_xor, axes)
    return jnp.expand_dims(out, axes) if keepdim else out


@lower(aten.count_nonzero.default, aten.count_nonzero.out)
def count_nonzero(ctx, self, dim=None):
    axes = tuple(range(self.ndim)) if dim is None else _axes([dim], self.ndim)
    return jnp.sum(_truth(self).astype(jnp.int64), axis=axes)


@lower(aten.count_nonzero.dim_IntList, aten.count_nonzero.dim_IntList_out)
def count_nonzero_dims(ctx, self, dim):
    return jnp.sum(_truth(self).astype(jnp.int64), axis=_axes(dim, self.ndim))


# ---------------------------------------------------------------- softmax family


def _float_only(op_name, dtype):
    reject(op_name, dtype, ("bool", "int", "complex"))


def _softmax_parts(self, dim, acc):
    x = _as_1d(self).astype(acc)
    axis = _wrap(dim, self.ndim)
    m = jnp.max(x, axis=axis, keepdims=True, initial=-jnp.inf)
    shifted = x - m  # all -inf (or +inf) rows give NaN, as in ATen
    return shifted, axis


def _softmax(self, dim, acc):
    shifted, axis = _softmax_parts(self, dim, acc)
    e = jnp.exp(shifted)
    return (e / jnp.sum(e, axis=axis, keepdims=True)).reshape(self.shape)


def _log_softmax(self, dim, acc):
    shifted, axis = _softmax_parts(self, dim, acc)
    lse = jnp.log(jnp.sum(jnp.exp(shifted), axis=axis, keepdims=True))
    return (shifted - lse).reshape(self.shape)


@lower(aten._softmax.default)
def softmax(ctx, self, dim, half_to_float):
    _float_only("softmax", self.dtype)
    return _softmax(self, dim, acc_dtype(ctx.out_dtype))


@lower(aten._log_softmax.default)
def log_softmax(ctx, self, dim, half_to_float):
    _float_only("log_softmax", self.dtype)
    return _log_softmax(self, dim, acc_dtype(ctx.out_dtype))


@lower(aten._safe_softmax.default)
def safe_softmax(ctx, self, dim, dtype=None):
    """softmax that gives 0 (not NaN) on rows that are entirely -inf."""
    _float_only("softmax", ctx.out_dtype)
    x = self.astype(ctx.out_dtype)
    out = _softmax(x, dim, acc_dtype(ctx.out_dtype))
    axis = _wrap(dim, self.ndim)
    masked = jnp.all(_as_1d(self) == -jnp.inf, axis=axis, keepdims=True).reshape(
        tuple(1 if i == axis else s for i, s in enumerate(self.shape))
    )
    return jnp.where(masked, jnp.zeros((), out.dtype), out)


@lower(aten._softmax_backward_data.default)
def softmax_backward(ctx, grad_output, output, dim, input_dtype):
    _float_only("softmax_backward", grad_output.dtype)
    acc = acc_dtype(ctx.out_dtype)
    g = _as_1d(grad_output).astype(acc)
    y = _as_1d(output).astype(acc)
    axis = _wrap(dim, output.ndim)
    r = y * (g - jnp.sum(g * y, axis=axis, keepdims=True))
    return r.reshape(output.shape)


@lower(aten._log_softmax_backward_data.default)
def log_softmax_backward(ctx, grad_output, output, dim, input_dtype):
    _float_only("log_softmax_backward", grad_output.dtype)
    acc = acc_dtype(ctx.out_dtype)
    g = _as_1d(grad_output).astype(acc)
    y = _as_1d(output).astype(acc)
    axis = _wrap(dim, output.ndim)
    r = g - jnp.exp(y) * jnp.sum(g, axis=axis, keepdims=True)
    return r.reshape(output.shape)


# ------------------------------------------------------------------ histc


@lower(aten.histc)
def histc(ctx, self, bins=100, min=0, max=0):
    """ATen's: the data's range when min == max, widened by 1 each side if
    still empty (a non-finite range is an error); bin = trunc((x - lo) * bins /
    (hi - lo)) in the input dtype, x == hi in the last bin, values outside
    [lo, hi] (and NaN) not counted."""
    x = self.reshape(-1)
    dt = x.dtype
    lo, hi = jnp.asarray(min, dt), jnp.asarray(max, dt)
    use_data = lo == hi
    if x.size:
        lo = jnp.where(use_data, jnp.min(x), lo)
        hi = jnp.where(use_data, jnp.max(x), hi)
    if jnp.issubdtype(dt, jnp.floating):  # (ATen prints the two edges; a device check cannot)
        ctx.check(jnp.isfinite(lo) & jnp.isfinite(hi), "torch.histc: range of [min, max] is not finite")
    empty = lo == hi
    lo, hi = jnp.where(empty, lo - 1, lo), jnp.where(empty, hi + 1, hi)
    inside = (x >= lo) & (x <= hi)
    pos = jnp.trunc((x - lo) * jnp.asarray(bins, dt) / (hi - lo)).astype(jnp.int64)
    pos = jnp.clip(jnp.where(pos == bins, bins - 1, pos), 0, bins - 1)
    return jnp.zeros((bins,), dt).at[pos].add(inside.astype(dt))
