"""Convolutions (every rank, transposed) and their backward.

`aten.convolution` is lowered to one `lax.conv_general_dilated` in torch's
own layouts (input NC..., weight OI... or IO... when transposed), so no
transposes are needed around it.  A transposed convolution is the
convolution whose input gradient it is: the input is dilated by the stride,
padded by dilation*(k-1) - padding (plus output_padding at the end), and
convolved with the spatially flipped kernel whose in/out channels are
swapped within each group.

The backward is the exact VJP of that forward (grad_input, grad_weight) and
a sum of grad_output (grad_bias).  bfloat16/float16 accumulate in float32
and round once, as torch's CPU (oneDNN) and CUDA (cuDNN) kernels do.
"""

import jax
import jax.numpy as jnp
import torch
from jax import lax

from ..registry import lower
from .common import acc_dtype

aten = torch.ops.aten





def _precision(ctx, dtype):
    dtype = jnp.dtype(dtype)
    if dtype == jnp.float32:
        return ctx.precision
    if dtype == jnp.bfloat16:
        return lax.Precision.DEFAULT  # bf16 products are exact in one pass
    return lax.Precision.HIGHEST


def _dn(nd):
    layout = tuple(range(nd + 2))
    return lax.ConvDimensionNumbers(layout, layout, layout)


def _transposed_weight(weight, groups):
    """(C_in, C_out/g, *k) weight of a transposed conv -> the (C_out, C_in/g, *k)
    flipped kernel of the equivalent direct convolution."""
    c_in, c_out_g = weight.shape[:2]
    k = weight.shape[2:]
    w = weight.reshape((groups, c_in // groups, c_out_g) + k)
    w = jnp.swapaxes(w, 1, 2).reshape((groups * c_out_g, c_in // groups) + k)
    return jnp.flip(w, axis=tuple(range(2, 2 + len(k))))


def _conv(x, weight, stride, padding, dilation, transposed, output_padding, groups, precision, acc=None):
    """The convolution without bias; `acc` is the accumulation dtype
    (preferred_element_type) or None for the operands' dtype."""
    nd = x.ndim - 2
    stride, padding, dilation = _expand(stride, nd), _expand(padding, nd), _expand(dilation, nd)
    if not transposed:
        return lax.conv_general_dilated(
            x,
            weight,
            window_strides=stride,
            padding=[(p, p) for p in padding],
            rhs_dilation=dilation,
            dimension_numbers=_dn(nd),
            feature_group_count=groups,
            precision=precision,
            preferred_element_type=acc,
        )
    output_padding = _expand(output_padding, nd)
    k = weight.shape[2:]
    pads = [
        (d * (kk - 1) - p, d * (kk - 1) - p + op) for kk, d, p, op in zip(k, dilation, padding, output_padding)
    ]
    return lax.conv_general_dilated(
        x,
        _transposed_weight(weight, groups),
        window_strides=(1,) * nd,
        padding=pads,
        lhs_dilation=stride,
        rhs_dilation=dilation,
        dimension_numbers=_dn(nd),
        feature_group_count=groups,
        precision=precision,
        preferred_element_type=acc,
    )


def _expand(v, nd):
    v = tuple(v)
    return v * nd if len(v) == 1 else v


def _sizes(x):
    return list(x.shape)


def _check_shapes(input, weight, bias, transposed, groups):
    """ATen's check_shape_forward on the channels (the meta kernel skips it
    for transposed convolutions and for the groups), in its order."""
    w = _sizes(weight)
    if transposed:
        if input.shape[1] != w[0]:
            raise RuntimeError(
                f"Given transposed=1, weight of size {w}, expected input{_sizes(input)} to have {w[0]} "
                f"channels, but got {input.shape[1]} channels instead"
            )
    if w[0] % groups != 0:
        raise RuntimeError(
            f"Given groups={groups}, expected weight to be divisible by {groups} at dimension 0, "
            f"but got weight of size [{w}] instead"
        )
    if transposed:
        out_channels = w[1] * groups
        if bias is not None and (bias.ndim != 1 or bias.shape[0] != out_channels):
            raise RuntimeError(
                f"Given transposed=1, weight of size {w}, expected bias to be 1-dimensional with "
                f"{out_channels} elements, but got bias of size {_sizes(bias)} instead"
            )


_DIM_NAMES = ("depth", "height", "width")


def _check_output_padding(output_padding, stride, dilation, nd):
    """The slow transposed kernels' check (1d runs as 2d with a leading unit
    dim, so its message names height and width)."""
    if any(op < 0 for op in output_padding):
        raise RuntimeError("negative output_padding is not supported")
    lead = (1,) * max(0, 2 - nd)
    op = (0,) * len(lead) + tuple(output_padding)
    st, dil = lead + tuple(stride), lead + tuple(dilation)
    if all(o < s or o < d for o, s, d in zip(op, st, dil)):
        return
    names = _DIM_NAMES[-len(op) :]
    labelled = (("output_padding", op), ("stride", st), ("dilation", dil))
    parts = [f"{label}_{n}: {v}" for label, vals in labelled for n, v in zip(names, vals)]
    raise RuntimeError("output padding must be smaller than either stride or dilation, but got " + " ".join(parts))


@lower(aten.convolution)
def convolution(ctx, input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    _check_shapes(input, weight, bias, transposed, groups)
    if transposed:
        nd = input.ndim - 2
        _check_output_padding(_expand(output_padding, nd), _expand(stride, nd), _expand(dilation, nd), nd)
    acc = acc_dtype(input.dtype)
    precision = _precision(ctx, input.dtype)
    out = _conv(input, weight, stride, padding, dilation, transposed, output_padding, groups, precision, acc=acc)
    if bias is not None:
        out = out + bias.astype(acc).reshape((1, -1) + (1,) * (out.ndim - 2))
    return out


@lower(aten.convolution_backward)
def convolution_backward(
    ctx,
    grad_output,
    input,
    weight,
    bias_sizes,
    stride,
    padding,
    dilation,
    transposed,
    output_padding,
    groups,
    output_mask,
):
    dtype = input.dtype
    acc = acc_dtype(dtype)
    # In the accumulation dtype: low-precision values convert exactly, so the
    # VJP's products are exact and its sums are float32, like torch's.
    x, w, g = input.astype(acc), weight.astype(acc), grad_output.astype(acc)
    need_input, need_weight, need_bias = output_mask

    # Precision follows the operands' original dtype (bf16 values are exact in one pass).
    precision = _precision(ctx, dtype)

    def fwd(x, w):
        return _conv(x, w, stride, padding, dilation, transposed, output_padding, groups, precision)

    grad_input = grad_weight = grad_bias = None
    if need_input or need_weight:
        _, vjp = jax.vjp(fwd, x, w)
        gx, gw = vjp(g)
        grad_input = gx if need_input else None
        grad_weight = gw if need_weight else None
    if need_bias:
        grad_bias = jnp.sum(g, axis=(0,) + tuple(range(2, g.ndim)))
    return grad_input, grad_weight, grad_bias

