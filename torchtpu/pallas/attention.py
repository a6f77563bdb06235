"""Flash attention forward as a Pallas kernel, for TPU and GPU.

One program per (batch, head, block of queries) walks the keys block by
block with an online softmax (running max, running sum, rescaled
accumulator), so the (L, S) score matrix never exists in memory.  It returns
the output and the per-row log-sum-exp that the backward in
ops/lowerings/attention.py rebuilds the probabilities from.

Semantics are the XLA reference's (ops/lowerings/attention.py): additive
bias broadcast by the block index maps (a (L, S) mask is never expanded to
(B, H, L, S)), top-left causal mask, grouped-query heads through the
key/value index map, zeros for a fully masked row.

The kernel is used only where its blocks fit the hardware's tiling (see
`usable`) and only after it compiled for that signature once on the side:
on a platform whose Pallas lowering rejects it, attention falls back to the
XLA reference with one warning instead of failing.  On the CPU, tests run it
in interpret mode against the reference."""

import functools
import logging
import os

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

log = logging.getLogger("torchtpu.pallas")

_KERNEL_DTYPES = (jnp.float32, jnp.bfloat16, jnp.float16)


def mode(platform):
    """TORCHTPU_PALLAS: unset -> the kernels run on TPU/GPU; "0" -> never
    (the XLA reference everywhere); "interpret" -> everywhere, in Pallas's
    interpret mode (how the CPU tests exercise them)."""
    setting = os.environ.get("TORCHTPU_PALLAS", "")
    if setting == "0":
        return None
    if setting == "interpret":
        return "interpret"
    return "compiled" if platform in ("tpu", "gpu") else None
_BLOCKS = (128, 64, 32, 16, 8)


def _block(n, platform):
    """The largest block that tiles n (TPU: multiples of 8 sublanes; GPU
    (Triton): powers of two, which n itself must be)."""
    if platform == "gpu" and (n < 16 or n & (n - 1)):
        return None
    for b in _BLOCKS:
        if n % b == 0:
            return b
    return None


def usable(platform, query, key, value, bias):
    """Whether the kernel's blocks tile these (4-d) operands on `platform`
    (interpret mode takes what TPU takes)."""
    if query.ndim != 4 or jnp.dtype(query.dtype) not in map(jnp.dtype, _KERNEL_DTYPES):
        return False
    if bias is not None and bias.ndim > 4:
        return False
    dims = (query.shape[-2], key.shape[-2])
    if platform == "gpu" and any(d < 16 or d & (d - 1) for d in (query.shape[-1], value.shape[-1])):
        return False
    return all(_block(d, platform) is not None for d in dims)


def _kernel(q_ref, k_ref, v_ref, *refs, has_bias, bias_rows, bias_cols, is_causal, scale, block_q, block_k,
            n_blocks, precision):
    bias_ref = refs[0] if has_bias else None
    o_ref, lse_ref = refs[-2:]
    first_row = pl.program_id(2) * block_q
    q = q_ref[...].astype(jnp.float32)
    rows = first_row + lax.broadcasted_iota(jnp.int32, (block_q, block_k), 0)

    def step(j, carry):
        row_max, total, acc = carry
        start = j * block_k
        k = k_ref[pl.ds(start, block_k), :].astype(jnp.float32)
        v = v_ref[pl.ds(start, block_k), :].astype(jnp.float32)
        s = lax.dot_general(q, k, (((1,), (1,)), ((), ())), precision=precision) * scale
        if has_bias:
            b = bias_ref[:, pl.ds(start, block_k)] if bias_cols > 1 else bias_ref[...]
            s = s + jnp.broadcast_to(b.astype(jnp.float32), s.shape)
        if is_causal:
            cols = start + lax.broadcasted_iota(jnp.int32, (block_q, block_k), 1)
            s = jnp.where(cols <= rows, s, -jnp.inf)
        new_max = jnp.maximum(row_max, jnp.max(s, axis=1, keepdims=True))
        safe_max = jnp.where(jnp.isneginf(new_max), 0.0, new_max)
        p = jnp.exp(s - safe_max)
        rescale = jnp.exp(row_max - safe_max)  # 0 while the row has seen only -inf
        total = rescale * total + jnp.sum(p, axis=1, keepdims=True)
        acc = rescale * acc + lax.dot_general(p, v, (((1,), (0,)), ((), ())), precision=precision)
        return new_max, total, acc

    init = (
        jnp.full((block_q, 1), -jnp.inf, jnp.float32),
        jnp.zeros((block_q, 1), jnp.float32),
        jnp.zeros((block_q, o_ref.shape[-1]), jnp.float32),
    )
    row_max, total, acc = lax.fori_loop(0, n_blocks, step, init)
    seen = total > 0
    o_ref[...] = jnp.where(seen, acc / jnp.where(seen, total, 1.0), 0.0).astype(o_ref.dtype)
    lse_ref[...] = jnp.where(seen, jnp.log(jnp.where(seen, total, 1.0)) + row_max, -jnp.inf)


def _bias_4d(bias):
    return bias.reshape((1,) * (4 - bias.ndim) + bias.shape)


def flash_attention_forward(query, key, value, bias, is_causal, scale, precision, platform, interpret=False):
    """(output (B, H, L, Dv) in query's dtype, log-sum-exp (B, H, L) float32)."""
    batch, heads, length, _ = query.shape
    source, dv = key.shape[-2], value.shape[-1]
    group = heads // key.shape[1]
    block_q, block_k = _block(length, platform), _block(source, platform)
    squeeze = pl.Squeezed() if hasattr(pl, "Squeezed") else None
    in_specs = [
        pl.BlockSpec((squeeze, squeeze, block_q, query.shape[-1]), lambda b, h, i: (b, h, i, 0)),
        pl.BlockSpec((squeeze, squeeze, source, key.shape[-1]), lambda b, h, i: (b, h // group, 0, 0)),
        pl.BlockSpec((squeeze, squeeze, source, dv), lambda b, h, i: (b, h // group, 0, 0)),
    ]
    operands = [query, key, value]
    bias_rows = bias_cols = 0
    if bias is not None:
        bias = _bias_4d(bias)
        nb, nh, bias_rows, bias_cols = bias.shape

        def bias_index(b, h, i, nb=nb, nh=nh, rows=bias_rows):
            return (b if nb > 1 else 0, h if nh > 1 else 0, i if rows > 1 else 0, 0)

        in_specs.append(pl.BlockSpec((squeeze, squeeze, block_q if bias_rows > 1 else 1, bias_cols), bias_index))
        operands.append(bias)
    kernel = functools.partial(
        _kernel, has_bias=bias is not None, bias_rows=bias_rows, bias_cols=bias_cols, is_causal=is_causal,
        scale=float(scale), block_q=block_q, block_k=block_k, n_blocks=source // block_k, precision=precision,
    )
    out, lse = pl.pallas_call(
        kernel,
        grid=(batch, heads, length // block_q),
        in_specs=in_specs,
        out_specs=[
            pl.BlockSpec((squeeze, squeeze, block_q, dv), lambda b, h, i: (b, h, i, 0)),
            pl.BlockSpec((squeeze, squeeze, block_q, 1), lambda b, h, i: (b, h, i, 0)),
        ],
        out_shape=[
            jax.ShapeDtypeStruct((batch, heads, length, dv), query.dtype),
            jax.ShapeDtypeStruct((batch, heads, length, 1), jnp.float32),
        ],
        interpret=interpret,
        name="torchtpu_flash_attention",
    )(*operands)
    return out, lse[..., 0]


_compiled = {}


def attention(query, key, value, bias, is_causal, scale, precision, platform):
    """(output, log-sum-exp) from the kernel, or None where it does not
    apply (the caller computes the XLA reference)."""
    how = mode(platform)
    if how is None:
        return None
    tiling = platform if how == "compiled" else "tpu"
    if not usable(tiling, query, key, value, bias):
        return None
    if how == "interpret":
        return flash_attention_forward(query, key, value, bias, is_causal, scale, precision, tiling, interpret=True)
    if not compiles(query, key, value, bias, is_causal, scale, precision, platform):
        return None
    return flash_attention_forward(query, key, value, bias, is_causal, scale, precision, platform)


def compiles(query, key, value, bias, is_causal, scale, precision, platform):
    """Whether the kernel compiles for this signature on this platform
    (tried once on the side, cached); a failure logs one warning."""
    shapes = tuple(None if x is None else (x.shape, jnp.dtype(x.dtype)) for x in (query, key, value, bias))
    signature = (shapes, is_causal, float(scale), str(precision), platform)
    if signature not in _compiled:
        specs = [None if x is None else jax.ShapeDtypeStruct(x.shape, x.dtype) for x in (query, key, value, bias)]
        fn = functools.partial(flash_attention_forward, is_causal=is_causal, scale=scale, precision=precision,
                               platform=platform)
        try:
            jax.jit(lambda q, k, v, b: fn(q, k, v, b)).lower(*specs).compile()
            _compiled[signature] = True
        except Exception as e:  # a Pallas lowering this platform does not take
            log.warning("torchtpu: the Pallas attention kernel does not compile for %s on %s (%s); "
                        "using the XLA reference", shapes, platform, e)
            _compiled[signature] = False
    return _compiled[signature]
