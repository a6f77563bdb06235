"""`torch._assert_async` (also what decompositions such as one_hot's range
check put into compiled graphs): a device-side check, as on CUDA -- the
error surfaces at the next synchronization instead of stalling the stream."""

import jax.numpy as jnp
import torch

from ..registry import lower

aten = torch.ops.aten

_ZERO = "Expected Tensor with single nonzero value, but got zero"


def _check_single_value(x):
    # (the element count is static: ATen raises this eagerly on every device)
    if x.size != 1:
        amount = "no values" if x.size == 0 else "more than one value"
        raise RuntimeError(f"Boolean value of Tensor with {amount} is ambiguous")


@lower(aten._assert_async.default)
def assert_async(ctx, x):
    _check_single_value(x)
    ctx.check(x.reshape(()) != 0, _ZERO)
    return ()


@lower(aten._assert_async.msg)
def assert_async_msg(ctx, x, assert_msg):
    _check_single_value(x)
    ctx.check(x.reshape(()) != 0, assert_msg or _ZERO)
    return ()
