"""What a lowering may ask about the op it is lowering, beyond its arguments.

The same object is built by the eager dispatcher and by torch.compile, from
ATen's meta kernels (eager) or the FX node's fake values (compile)."""

import jax
import jax.numpy as jnp
import torch
from jax import lax
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

from ..runtime.dtypes import to_jax

_DEFAULT_PROMOTION = ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT

_PRECISION = {
    "highest": lax.Precision.HIGHEST,
    "high": lax.Precision.HIGH,
    "medium": lax.Precision.DEFAULT,
}


_SCOPE_NAMES = {lax.Precision.HIGHEST: "highest", lax.Precision.HIGH: "high", lax.Precision.DEFAULT: "default"}


def matmul_scope(precision):
    """Context for tracing lowerings: matmuls a lowering does not give a
    precision (inside jax.scipy/jnp.linalg helpers, e.g. expm's Pade
    products) follow PyTorch's setting too, not the backend's default
    (bf16 passes on TPU)."""
    return jax.default_matmul_precision(_SCOPE_NAMES[precision])


def matmul_precision():
    """XLA precision for float32 matmul/conv from PyTorch's own setting."""
    return _PRECISION.get(torch.get_float32_matmul_precision(), lax.Precision.HIGHEST)


class LoweringContext:
    __slots__ = ("op", "meta_args", "out_meta", "precision", "_rng", "_draws", "checks", "stream")

    def __init__(self, op, meta_args, out_meta, precision, rng=None):
        self.op = op
        self.meta_args = meta_args  # arguments as meta tensors / Python values
        self.out_meta = out_meta  # flat list of expected outputs (meta tensors)
        self.precision = precision
        self._rng = rng  # (seed_hi, seed_lo, offset_hi, offset_lo), traced
        self._draws = 0
        self.stream = 0  # distinguishes random ops sharing one (seed, offset) in a graph
        self.checks = []  # [(traced ok, traced value, message, error class)]

    @property
    def out_dtype(self):
        """JAX dtype of the first output, as ATen computes it."""
        return to_jax(self.out_meta[0].dtype)

    def out_dtype_of(self, i):
        return to_jax(self.out_meta[i].dtype)

    @property
    def out_shape(self):
        return tuple(self.out_meta[0].shape)

    def result_type(self, *indices):
        """torch's type promotion over some arguments (by position), as a JAX
        dtype: what `torch.result_type` gives, extended to n arguments."""
        vals = [self.meta_args[i] for i in indices if self.meta_args[i] is not None]
        _, dtype = elementwise_dtypes(*vals, type_promotion_kind=_DEFAULT_PROMOTION)
        return to_jax(dtype)

    def check(self, ok, message, error=RuntimeError, value=None):
        """A device-side assertion: `ok` (traced, all-true when fine) must
        hold, else `error(message)` is raised at the next synchronization
        (like CUDA's device-side asserts; eager ops never wait for it).
        `value` (a traced integer) fills `{value}` in the message."""
        ok = jnp.all(jnp.asarray(ok))
        value = jnp.zeros((), jnp.int64) if value is None else jnp.asarray(value).astype(jnp.int64).reshape(())
        self.checks.append((ok, value, message, error))

    def check_index(self, index, size, message, error=IndexError, negative_ok=True):
        """Device-side range check of an integer index array against a dim of
        `size` (negative indices from the end where `negative_ok`); the
        message may name the first bad index as `{value}`."""
        index = jnp.asarray(index)
        if index.size == 0:
            return
        low = -size if negative_ok else 0
        bad = ((index < low) | (index >= size)).reshape(-1)
        first = index.reshape(-1)[jnp.argmax(bad)]
        self.check(~jnp.any(bad), message, error, value=first)

    def rng_key(self):
        """A fresh JAX PRNG key for this op, from the generator's (seed, offset).

        Each call within one op gives an independent key."""
        if self._rng is None:
            raise RuntimeError(f"{self.op}: lowering asked for randomness but is not marked random")
        seed_hi, seed_lo, offset_hi, offset_lo = (jnp.asarray(v).astype(jnp.uint32) for v in self._rng)
        key = jax.random.wrap_key_data(jnp.stack([seed_hi, seed_lo]), impl="threefry2x32")
        key = jax.random.fold_in(key, offset_lo)
        key = jax.random.fold_in(key, offset_hi)
        if self.stream:
            key = jax.random.fold_in(key, self.stream)
        key = jax.random.fold_in(key, self._draws)
        self._draws += 1
        return key
