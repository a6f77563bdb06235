"""Operands of pointwise ops converted to their common dtype first.

ATen's TensorIterator converts every tensor operand of a pointwise op to the
operands' common dtype before the kernel reads it (then computes in the
opmath type: float32 for the 16-bit floats).  The lowerings cast operands
straight to the opmath type, which skips that rounding where it matters: a
0-dim float32 tensor meeting a float16 tensor (common dtype float16:
`tensor(70000.) - tensor([60000.], f16)` is inf on the CPU, not 10000), a
0-dim int64 meeting int8 (`tensor(300) > tensor([50], int8)`: 300 wraps to
44 first), an int64 tensor meeting a float16 one.  So both the eager and the
compiled path convert such operands here, for every lowering at once.

Ops whose TensorIterator promotes integer inputs to float (copysign, atan2,
true division, xlogy, ...) convert integer operands to the float result.

Only conversions that can change a value are made (`can_cast` "safe" ones
are exact; the lowering's own upcast does the same), and never from bool (a
condition or mask operand).  Random ops keep their parameters' own dtypes,
as ATen's kernels read them.
"""

import jax.numpy as jnp
import torch

from ..runtime.dtypes import convert


def in_common_dtype(op, ctx, args, random=False):
    """`args` with the lossy-to-convert tensor operands converted."""
    if random or torch.Tag.pointwise not in op.tags:
        return args
    tensors = [i for i, m in enumerate(ctx.meta_args) if isinstance(m, torch.Tensor) and m.dtype != torch.bool]
    if len(tensors) < 2 or len({ctx.meta_args[i].dtype for i in tensors}) < 2:
        return args
    common = ctx.result_type(*tensors)
    if op._schema.name in _INTEGERS_TO_FLOAT and not jnp.issubdtype(common, jnp.inexact) \
            and jnp.issubdtype(ctx.out_dtype, jnp.inexact):
        common = ctx.out_dtype  # (`copysign(uint8, tensor(-5, int8))`: -5, not 251)
    converted = list(args)
    for i in tensors:
        dtype = jnp.dtype(converted[i].dtype)
        if dtype != common and not jnp.can_cast(dtype, common, "safe"):
            converted[i] = convert(converted[i], common)
    return converted


# ATen builds these with promote_integer_inputs_to_float
_INTEGERS_TO_FLOAT = {
    "aten::copysign", "aten::atan2", "aten::div", "aten::true_divide", "aten::xlogy", "aten::special_xlog1py",
    "aten::special_zeta", "aten::igamma", "aten::igammac",
}
