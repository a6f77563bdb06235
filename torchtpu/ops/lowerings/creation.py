"""Factory ops: arange, full, eye, linspace, scalar_tensor, ...

Most `*_like`/`zeros`/`ones`/`full` factories are CompositeExplicit in ATen and
reach the backend as `empty` + `fill_`, which already runs on the device; the
lowerings here are for the factories whose values are computed.
"""

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from ..context import LoweringContext, matmul_precision
from ..registry import LOWERINGS, lower
from ..schema import GENERATOR, SCALAR, schema_of
from ..special import special

aten = torch.ops.aten


# ------------------------------------------------------- factory runner
#
# A factory op (no tensor argument, a `device=` argument) cannot go through the
# generic dispatcher: it computes output metadata by calling the op again with
# the same `device=tpu` (which re-enters the backend, endlessly) and it would
# allocate on the current device rather than the requested one.  Factories are
# therefore run here: metadata from ATen's meta kernel (device="meta"), then
# the same lowering in a kernel cached per (op, static arguments).

_factory_kernels: dict = {}


def _device_index(device):
    if device is None:
        return torch.tpu.current_device()
    device = torch.device(device)
    if device.type != "tpu":
        raise RuntimeError(f"torchtpu: factory for device {device} reached the tpu backend")
    return device.index if device.index is not None else torch.tpu.current_device()


def run_factory(op, args, kwargs):
    """Eager call of factory `op` whose lowering is in the table."""
    from ... import _C
    from ...runtime import devices
    from ..transfer import wrap

    sch = schema_of(op)
    values = sch.normalize(args, kwargs)
    names = sch.names
    index = _device_index(values[names.index("device")] if "device" in names else None)
    meta_values = ["meta" if n == "device" else v for n, v in zip(names, values)]
    for i, kind in enumerate(sch.kinds):
        if kind is GENERATOR:
            meta_values[i] = None
    margs, mkwargs = sch.split(meta_values)
    meta_out = op(*margs, **mkwargs)
    lowering = LOWERINGS[op]
    traced = [i for i, k in enumerate(sch.kinds) if k is SCALAR and values[i] is not None and names[i] not in lowering.static]
    key_values = tuple(
        type(v) if i in traced else (tuple(v) if isinstance(v, list) else v)
        for i, v in enumerate(meta_values)
        if sch.kinds[i] is not GENERATOR
    )
    precision = matmul_precision()
    key = (op, key_values, index, precision)
    fn = _factory_kernels.get(key)
    if fn is None:
        static_values = list(meta_values)
        out_meta = [meta_out]

        def kernel(*dyn):
            vals = list(static_values)
            for i, d in zip(traced, dyn):
                vals[i] = d
            rng = (dyn[-2], dyn[-1]) if lowering.random else None
            ctx = LoweringContext(op, static_values, out_meta, precision, rng)
            out = lowering.fn(ctx, *vals)
            return jnp.asarray(out).astype(ctx.out_dtype).reshape(tuple(meta_out.shape))

        target = jax.sharding.SingleDeviceSharding(devices.jax_device(index))
        fn = _factory_kernels[key] = jax.jit(kernel, out_shardings=target)
    dyn = [values[i] for i in traced]
    if lowering.random:
        generator = next((values[i] for i, k in enumerate(sch.kinds) if k is GENERATOR), None)
        seed, offset = _C._next_rng(generator, index, 1)
        dyn += [np.uint64(seed), np.uint64(offset)]
    return wrap(fn(*dyn), meta_out.dtype, index)


def factory(*ops, static=(), random=False):
    """`lower` for factory overloads (no tensor inputs, a `device=` argument):
    the lowering serves torch.compile; eager calls go through run_factory."""

    def deco(fn):
        lower(*ops, static=static, random=random)(fn)
        for op in ops:
            special(op)(lambda *args, _op=op, **kwargs: run_factory(_op, args, kwargs))
        return fn

    return deco


def _is_float(dtype):
    return jnp.issubdtype(dtype, jnp.inexact)


def _acc_dtype(dtype):
    """The type ATen's CPU kernels compute factories in (acc_type<T, false>)."""
    if jnp.issubdtype(dtype, jnp.complexfloating):
        return jnp.complex128
    if _is_float(dtype):
        return jnp.float64
    return jnp.int64


def _iota(n, dtype):
    return lax.iota(dtype, n)


# arange's length depends on the values of start/end/step, so they are part of
# the kernel key (a traced Scalar would reuse a kernel of the wrong length).
@factory(aten.arange.default, static=("end",))
@lower(aten.arange.out, static=("end",))
def arange_end(ctx, end, *rest):
    return _arange(ctx, 0, 1)


@factory(aten.arange.start, static=("start", "end"))
def arange_start(ctx, start, end, *rest):
    return _arange(ctx, start, 1)


@factory(aten.arange.start_step, static=("start", "end", "step"))
@lower(aten.arange.start_out, static=("start", "end", "step"))
def arange_start_step(ctx, start, end, step=1, *rest):
    return _arange(ctx, start, step)


def _arange(ctx, start, step):
    dtype = ctx.out_dtype
    (n,) = ctx.out_shape
    acc = _acc_dtype(dtype)
    if not _is_float(acc):
        # ATen converts start/step to the integer accumulation type first.
        start, step = int(start), int(step)
    idx = _iota(n, acc)
    return (jnp.asarray(start, acc) + jnp.asarray(step, acc) * idx).astype(dtype)


@factory(aten.linspace.default)
@lower(aten.linspace.out)
def linspace(ctx, start, end, steps, *rest):
    return _linspace(ctx.out_dtype, start, end, steps)


def _linspace(dtype, start, end, steps):
    """ATen's linspace kernel: the first half counts up from start, the second
    half down from end (symmetric rounding).  Floating outputs compute in their
    own type (bf16/f16 through float32), integer outputs with a double step and
    truncation."""
    if steps == 0:
        return jnp.zeros((0,), dtype)
    if _is_float(dtype):
        compute = dtype if jnp.dtype(dtype).itemsize >= 4 else jnp.float32
        s = jnp.asarray(start).astype(dtype).astype(compute)
        e = jnp.asarray(end).astype(dtype).astype(compute)
    else:
        compute = jnp.float64
        s = jnp.asarray(start).astype(jnp.int64).astype(compute)
        e = jnp.asarray(end).astype(jnp.int64).astype(compute)
    if steps == 1:
        return jnp.reshape(s, (1,)).astype(dtype)
    idx = _iota(steps, compute)
    step = (e - s) / (steps - 1)
    up = s + step * idx
    down = e - step * (steps - 1 - idx)
    val = jnp.where(idx < steps // 2, up, down)
    if not _is_float(dtype):
        val = jnp.trunc(val)
    return val.astype(dtype)


@factory(aten.logspace.default)
@lower(aten.logspace.out)
def logspace(ctx, start, end, steps, base=10.0, *rest):
    """pow(base, exponent) in double, exponents as in linspace (the step is
    rounded to the output type for floating outputs, as ATen does)."""
    dtype = ctx.out_dtype
    if steps == 0:
        return jnp.zeros((0,), dtype)
    s = jnp.asarray(start).astype(jnp.float64)
    e = jnp.asarray(end).astype(jnp.float64)
    if steps == 1:
        return jnp.reshape(jnp.power(jnp.float64(base), s), (1,)).astype(dtype)
    step = (e - s) / (steps - 1)
    if _is_float(dtype):
        step = step.astype(dtype).astype(jnp.float64)
    idx = _iota(steps, jnp.float64)
    exps = jnp.where(idx < steps // 2, s + step * idx, e - step * (steps - 1 - idx))
    val = jnp.power(jnp.float64(base), exps)
    if not _is_float(dtype):
        val = jnp.trunc(val)
    return val.astype(dtype)


@factory(aten.eye.default)
@lower(aten.eye.out)
def eye(ctx, n, *rest):
    return jnp.eye(n, n, dtype=ctx.out_dtype)


@factory(aten.eye.m)
@lower(aten.eye.m_out)
def eye_m(ctx, n, m, *rest):
    return jnp.eye(n, m, dtype=ctx.out_dtype)


@factory(aten.scalar_tensor.default)
@lower(aten.scalar_tensor.out)
def scalar_tensor(ctx, s, *rest):
    return jnp.asarray(s).astype(ctx.out_dtype)


@factory(aten.full.default)
@lower(aten.full.out)
def full(ctx, size, fill_value, *rest):
    return jnp.full(tuple(size), jnp.asarray(fill_value).astype(ctx.out_dtype))


@factory(aten.zeros.default)
@lower(aten.zeros.out)
def zeros(ctx, size, *rest):
    return jnp.zeros(tuple(size), ctx.out_dtype)


@factory(aten.ones.default)
@lower(aten.ones.out)
def ones(ctx, size, *rest):
    return jnp.ones(tuple(size), ctx.out_dtype)


def _tri_indices(row, col, offset, lower_part):
    """Host-computed (row, col) coordinates of the lower/upper triangle, in
    row-major order (the sizes are static, so this is a constant)."""
    r, c = np.meshgrid(np.arange(row), np.arange(col), indexing="ij")
    mask = (c - r <= offset) if lower_part else (c - r >= offset)
    return np.stack([r[mask], c[mask]])


@factory(aten.tril_indices.default)
@lower(aten.tril_indices.out)
def tril_indices(ctx, row, col, offset=0, *rest):
    return jnp.asarray(_tri_indices(row, col, offset, True)).astype(ctx.out_dtype)


@factory(aten.triu_indices.default)
@lower(aten.triu_indices.out)
def triu_indices(ctx, row, col, offset=0, *rest):
    return jnp.asarray(_tri_indices(row, col, offset, False)).astype(ctx.out_dtype)
