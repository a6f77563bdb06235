"""The two ops torch.amp.GradScaler runs on the device: unscale-and-check
the gradients, then update the loss scale.  Semantics of ATen's CUDA kernels
(aten/src/ATen/native/cuda/AmpKernels.cu), one jitted kernel per call.
"""

import jax.numpy as jnp
import torch

from ..registry import lower
from .common import acc_dtype

aten = torch.ops.aten


@lower(aten._amp_foreach_non_finite_check_and_unscale.default)
def amp_foreach_non_finite_check_and_unscale(ctx, grads, found_inf, inv_scale):
    """Each grad times `inv_scale` (in its opmath type; untouched when the
    scale is 1); `found_inf` becomes 1.0 if any grad held an inf or NaN before
    scaling, and keeps its value otherwise."""
    inv = inv_scale.reshape(()).astype(jnp.float32)
    any_bad = jnp.zeros((), jnp.bool_)
    out = []
    for g in grads:
        acc = g.astype(acc_dtype(g.dtype))
        any_bad = any_bad | ~jnp.all(jnp.isfinite(acc))
        scaled = jnp.where(inv == 1.0, acc, acc * inv.astype(acc.dtype))
        out.append(scaled.astype(g.dtype))
    found = jnp.where(any_bad, jnp.ones_like(found_inf), found_inf)
    return out, found


@lower(aten._amp_update_scale.default)
def amp_update_scale(ctx, scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval):
    """After an inf/NaN step: scale *= backoff, tracker = 0.  Otherwise the
    tracker counts successful steps; at `growth_interval` of them the scale
    grows by `growth_factor` (if that stays finite) and the tracker resets."""
    found = found_inf != 0
    successful = growth_tracker + 1
    grow = successful == growth_interval
    grown = (scale * jnp.float32(growth_factor)).astype(scale.dtype)
    backed = (scale * jnp.float32(backoff_factor)).astype(scale.dtype)
    new_scale = jnp.where(found, backed, jnp.where(grow & jnp.isfinite(grown), grown, scale))
    new_tracker = jnp.where(found | grow, jnp.zeros_like(growth_tracker), successful)
    return new_scale, new_tracker
