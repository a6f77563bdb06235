"""Where PyTorch's meta kernels describe an op's outputs differently from
ATen's CPU/CUDA kernels -- layouts, undefined gradients, outs restrided,
arguments refused -- and the fixes the dispatcher applies (dispatch._build).
The checks that make bad calls raise as on the CPU are in aten_checks.py."""

import torch

from .dtype_names import c10_name, found_dtype_error
from .warn_once import warn_once


def output_layout(sch, values, meta_out):
    """Output layouts ATen's CPU/CUDA kernels choose where the meta kernel
    returns a contiguous tensor: set on `meta_out` (fresh outputs are
    allocated with its strides)."""
    fix = _OUTPUT_LAYOUTS.get(sch.op)
    if fix is not None:
        fix(values, meta_out)


def _convolution_layout(values, out):
    """A convolution with a channels-last input or weight returns a
    channels-last output (mkldnn and cudnn both do)."""
    from torch._prims_common import suggest_memory_format

    formats = {4: torch.channels_last, 5: torch.channels_last_3d}
    fmt = formats.get(out.dim()) if isinstance(out, torch.Tensor) else None
    if fmt is None or out.is_contiguous(memory_format=fmt):
        return
    if any(isinstance(t, torch.Tensor) and t.dim() == out.dim() and suggest_memory_format(t) == fmt for t in values[:2]):
        out.as_strided_(out.shape, torch.empty(out.shape, device="meta", memory_format=fmt).stride())


def _suggested_layout_of_input(out, input):
    """`out` in `input`'s suggested memory format: contiguous unless the
    input is channels-last (the meta kernels copy a dense input's strides,
    or return contiguous)."""
    from torch._prims_common import suggest_memory_format

    strides = torch.empty(out.shape, device="meta", memory_format=suggest_memory_format(input)).stride()
    if out.stride() != strides:
        out.as_strided_(out.shape, strides)


def _layout_of_input(position, output=None):
    """ATen allocates these ops' output (`output`: which of a tuple) in the
    input's suggested memory format: reflection and replication pads (forward
    and grad_input) and batch norm."""

    def fix(values, outs):
        out = outs if output is None else outs[output]
        if isinstance(out, torch.Tensor):
            _suggested_layout_of_input(out, values[position])

    return fix


def _roll_layout(values, out):
    # ATen rolls along a dim as a cat of two slices, which takes their
    # suggested format; without dims it rolls the flattened tensor
    # (contiguous, as the meta kernel says)
    if values[2] and out.numel():
        _suggested_layout_of_input(out, values[0])


_OUTPUT_LAYOUTS = {
    torch.ops.aten.convolution.default: _convolution_layout,
    **dict.fromkeys((torch.ops.aten._native_batch_norm_legit.default, torch.ops.aten._native_batch_norm_legit.no_stats,
                     torch.ops.aten._native_batch_norm_legit_no_training.default), _layout_of_input(0, output=0)),
    torch.ops.aten.roll.default: _roll_layout,
    **{getattr(torch.ops.aten, f"{kind}_pad{k}d").default: _layout_of_input(0)
       for kind in ("reflection", "replication") for k in (1, 2, 3)},
    **{getattr(torch.ops.aten, f"{kind}_pad{k}d_backward").default: _layout_of_input(1)  # (grad_output, self, ...)
       for kind in ("reflection", "replication") for k in (1, 2, 3)},
}


def masked_outputs(sch, values, meta_out):
    """`meta_out` with None for the gradients an `output_mask` leaves out,
    where the meta kernel returns a tensor but ATen's kernels return an
    undefined one (batch norm's backward: an input that needs no gradient,
    BatchNorm on raw data or after a frozen layer)."""
    if sch.op not in _META_IGNORES_OUTPUT_MASK:
        return meta_out
    output_mask = values[sch.names.index("output_mask")]
    return tuple(m if keep else None for m, keep in zip(meta_out, output_mask))


_META_IGNORES_OUTPUT_MASK = {torch.ops.aten.native_batch_norm_backward.default}


def meta_kernel(op):
    """The meta kernel to run for `op`: PyTorch's, or ours where PyTorch's
    refuses arguments ATen's CPU/CUDA kernels take."""
    return _META_KERNEL_FIXES.get(op, op)


def _nan_to_num_in_place(self, nan=None, posinf=None, neginf=None):
    # ATen replaces in the real and imaginary parts; the reference kernel
    # calls isneginf, which refuses complex (the functional op has a meta)
    if self.is_complex():
        return self
    return torch.ops.aten.nan_to_num_.default(self, nan, posinf, neginf)


def _abs_out(self, *, out):
    # ATen's abs_out casts the real result into a complex out=; the
    # reference kernel insists on the real dtype
    if not (self.is_complex() and out.is_complex()):
        return torch.ops.aten.abs.out(self, out=out)
    if out.dtype != self.dtype:
        raise found_dtype_error(out.dtype, self.dtype)
    if out.shape != self.shape:
        out.resize_(self.shape)
    return out


def _multilabel_margin_loss_forward(self, target, reduction):
    # ATen's unreduced loss of one sample (1-d input) is 0-dim; the meta
    # kernel's has shape (1,)
    out, is_target = torch.ops.aten.multilabel_margin_loss_forward.default(self, target, reduction)
    if reduction == 0 and self.dim() <= 1:
        out = out.reshape(())
    return out, is_target


def _empty_mean_as_sum(op):
    """A pointwise loss's backward over an empty input with mean reduction:
    the gradient is empty; the reference kernels divide by numel first
    (ZeroDivisionError).  Meta-wise, sum reduction is the same call."""

    def run(grad_output, self, target, reduction, *args):
        if reduction == 1 and self.numel() == 0:
            reduction = 2
        return op(grad_output, self, target, reduction, *args)

    return run


def _bool_power(self, exponent):
    # bool ** True / False: ATen copies the base or fills ones, in bool (the
    # reference kernel promotes to int64)
    return self.dtype == torch.bool and isinstance(exponent, bool)


def _pow_tensor_scalar(self, exponent):
    if _bool_power(self, exponent):
        return torch.empty_like(self)
    return torch.ops.aten.pow.Tensor_Scalar(self, exponent)


def _pow_tensor_scalar_in_place(self, exponent):
    if _bool_power(self, exponent):
        return self
    return torch.ops.aten.pow_.Scalar(self, exponent)


def _pow_tensor_scalar_out(self, exponent, *, out):
    if _bool_power(self, exponent) and out.dtype == torch.bool:
        if out.shape != self.shape:
            out.resize_(self.shape)
        return out
    return torch.ops.aten.pow.Tensor_Scalar_out(self, exponent, out=out)


def _mean_into_real_out(self, dim, keepdim=False, *, dtype=None, out):
    # ATen's mean_out (with a dim) sums in the out='s dtype: a complex input
    # into a real out= drops the imaginary part, with the lossy cast's
    # warning; the reference kernel refuses the cast
    if not (self.is_complex() and dtype is None and not out.is_complex()):
        return torch.ops.aten.mean.out(self, dim, keepdim, dtype=dtype, out=out)
    warn_once("Casting complex values to real discards the imaginary part", stacklevel=4)
    result = torch.ops.aten.mean.dim(self, dim, keepdim)
    if out.shape != result.shape:
        out.resize_(result.shape)
    return out


def _clamp_real_bounds(op):
    """A floating self converts a clamp's Scalar bounds to its dtype (a
    complex one with no imaginary part: aten_checks refuses the others); the
    meta kernel promotes to complex."""

    def run(self, min=None, max=None, **kwargs):
        if self.dtype.is_floating_point:
            min, max = (b.real if isinstance(b, complex) else b for b in (min, max))
        return op(self, min, max, **kwargs)

    return run


def _bernoulli_out(self, *, generator=None, out):
    # ATen draws into an out= of any dtype; the reference kernel refuses an
    # unsafe cast (float probabilities into an int64 out)
    if out.shape != self.shape:
        out.resize_(self.shape)
    return out


def _keeping_out_strides(op):
    """The meta kernel of an out= op that restrides its outs even when their
    sizes already fit (sort's); ATen restrides only the outs it resizes."""

    def run(*args, **kwargs):
        outs = [kwargs[name] for name in ("values", "indices")]
        before = [(tuple(t.shape), t.stride(), t.storage_offset()) for t in outs]
        result = op(*args, **kwargs)
        for t, (shape, stride, offset) in zip(outs, before):
            if tuple(t.shape) == shape:
                t.as_strided_(shape, stride, offset)
        return result

    return run


def _nll_as_aten_reads_target(op, self_at):
    """ATen's nll_loss kernels read a uint8 target as int64 and the (1,)
    target of one sample (1-d input) as its one label; the reference kernels
    gather with a uint8 index (refused) and find the sizes mismatched.  (The
    backward still compares sizes: aten_checks raises ATen's message.)"""

    def run(*args, **kwargs):
        args = list(args)
        self, target = args[self_at], args[self_at + 1]
        if target.dtype == torch.uint8:
            target = target.long()
        if self.dim() == 1 and target.shape == (1,):
            target = target.reshape(())
        args[self_at + 1] = target
        return op(*args, **kwargs)

    return run


def _where_of_uint8(op):
    """ATen's where takes a uint8 condition (nonzero is true), with a
    deprecation warning once per process; the reference kernel takes bool
    only, and words its refusal of other dtypes differently."""

    def run(condition, *args, **kwargs):
        if condition.dtype == torch.uint8:
            warn_once("where received a uint8 condition tensor. This behavior is deprecated and will be removed in "
                      "a future version of PyTorch. Use a boolean condition instead.")
            condition = condition.bool()
        elif condition.dtype != torch.bool:
            raise RuntimeError(f"where expected condition to be a boolean tensor, but got a tensor with dtype "
                               f"{c10_name(condition.dtype)}")
        return op(condition, *args, **kwargs)

    return run


_META_KERNEL_FIXES = {
    **{op: _where_of_uint8(op) for op in (torch.ops.aten.where.self, torch.ops.aten.where.self_out)},
    **{op: _nll_as_aten_reads_target(op, 0) for op in (torch.ops.aten.nll_loss_forward.default,
                                                       torch.ops.aten.nll_loss_forward.output)},
    **{op: _nll_as_aten_reads_target(op, 1) for op in (torch.ops.aten.nll_loss_backward.default,
                                                       torch.ops.aten.nll_loss_backward.grad_input)},
    torch.ops.aten.sort.values: _keeping_out_strides(torch.ops.aten.sort.values),
    torch.ops.aten.sort.values_stable: _keeping_out_strides(torch.ops.aten.sort.values_stable),
    torch.ops.aten.pow.Tensor_Scalar: _pow_tensor_scalar,
    torch.ops.aten.pow_.Scalar: _pow_tensor_scalar_in_place,
    torch.ops.aten.pow.Tensor_Scalar_out: _pow_tensor_scalar_out,
    torch.ops.aten.bernoulli.out: _bernoulli_out,
    **{op: _clamp_real_bounds(op) for op in (torch.ops.aten.clamp.default, torch.ops.aten.clamp_.default,
                                             torch.ops.aten.clamp.out)},
    torch.ops.aten.mean.out: _mean_into_real_out,
    torch.ops.aten.multilabel_margin_loss_forward.default: _multilabel_margin_loss_forward,
    torch.ops.aten.nan_to_num_.default: _nan_to_num_in_place,
    torch.ops.aten.abs.out: _abs_out,
    **{op: _empty_mean_as_sum(op) for op in (torch.ops.aten.mse_loss_backward.default,
                                             torch.ops.aten.smooth_l1_loss_backward.default,
                                             torch.ops.aten.huber_loss_backward.default)},
}
