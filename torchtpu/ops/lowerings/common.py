"""Small helpers shared by the lowering families."""

import jax.numpy as jnp

# The 16-bit floats torch computes in float32 internally (its "opmath" type)
# in pointwise kernels, reductions and matmul accumulation.
LOW_PRECISION_FLOATS = (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))


def acc_dtype(dtype):
    """The dtype torch computes/accumulates values of `dtype` in."""
    dtype = jnp.dtype(dtype)
    return jnp.dtype(jnp.float32) if dtype in LOW_PRECISION_FLOATS else dtype


def astype(x, dtype):
    """x as `dtype`, converted as c10 converts.  A bool array becomes a float or complex one through a
    select of constants, not a convert: XLA rewrites `y * convert(mask)` into
    `select(mask, y, 0)`, so inf * False and nan * False gave 0 instead of
    torch's nan, wherever the cast fuses into a product (every compiled graph)."""
    x = jnp.asarray(x)
    dtype = jnp.dtype(dtype)
    if x.dtype == jnp.bool_ and jnp.issubdtype(dtype, jnp.inexact):
        return jnp.where(x, jnp.ones((), dtype), jnp.zeros((), dtype))
    if dtype == _E4M3FN and x.dtype != dtype and not jnp.issubdtype(x.dtype, jnp.complexfloating):
        # c10 saturates to the largest finite value (+-inf too: the type has
        # none); XLA's convert gives NaN.  NaN stays NaN (clip keeps it).
        x = jnp.clip(x.astype(jnp.promote_types(x.dtype, jnp.float32)), -448.0, 448.0)
    return x.astype(dtype)


_E4M3FN = jnp.dtype(jnp.float8_e4m3fn)
