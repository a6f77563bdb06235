"""Small helpers shared by the lowering families."""

import jax.numpy as jnp

from ...runtime.dtypes import convert

# The 16-bit floats torch computes in float32 internally (its "opmath" type)
# in pointwise kernels, reductions and matmul accumulation.
LOW_PRECISION_FLOATS = (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))


def acc_dtype(dtype):
    """The dtype torch computes/accumulates values of `dtype` in."""
    dtype = jnp.dtype(dtype)
    return jnp.dtype(jnp.float32) if dtype in LOW_PRECISION_FLOATS else dtype


# x as `dtype`, converted as c10 converts (runtime/dtypes.py says how).
astype = convert
