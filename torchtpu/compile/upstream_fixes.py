"""Rewrites of dynamo's graph, before AOTAutograd traces it, for torch
functions whose tracing in PyTorch gives a wrong result.

`F.multilabel_margin_loss`: torch._decomp registers its decomposition as a
`py_impl(DispatchKey.Autograd)` kernel of `multilabel_margin_loss_forward`,
which AOTAutograd's tracing always takes, whatever the backend's
decomposition table says. That decomposition ignores the "labels end at the
first -1" rule for the slots after the -1 (torch 2.13: aot_eager and
inductor give 6.23 where eager gives 1.79). The rewrite sends the call to
`torchtpu::multilabel_margin_loss_forward`, a custom op with the aten op's
schema that tracing keeps whole; the graph lowers it with the aten op's
lowering and its backward is the aten backward op, which is lowered too."""

import torch
import torch.nn.functional as F
from torch.nn import _reduction

from ..ops.lowerings import losses
from ..ops.registry import lower


@torch.library.custom_op("torchtpu::multilabel_margin_loss_forward", mutates_args=())
def multilabel_margin_loss_forward(
    self: torch.Tensor, target: torch.Tensor, reduction: int
) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.ops.aten.multilabel_margin_loss_forward(self, target, reduction)


@multilabel_margin_loss_forward.register_fake
def _(self, target, reduction):
    # ATen: a scalar unless reduction is none on a batch of frames.
    per_frame = reduction == _reduction.get_enum("none") and target.dim() > 1
    return self.new_empty(self.shape[:1] if per_frame else ()), torch.empty_like(self)


def _save_for_backward(ctx, inputs, output):
    self, target, reduction = inputs
    ctx.save_for_backward(self, target, output[1])
    ctx.reduction = reduction


def _backward(ctx, grad_output, _grad_is_target):
    self, target, is_target = ctx.saved_tensors
    grad = torch.ops.aten.multilabel_margin_loss_backward(grad_output, self, target, ctx.reduction, is_target)
    return grad, None, None


multilabel_margin_loss_forward.register_autograd(_backward, setup_context=_save_for_backward)
lower(torch.ops.torchtpu.multilabel_margin_loss_forward.default)(losses.multilabel_margin_loss_forward)


def multilabel_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """F.multilabel_margin_loss through the custom op (same arguments)."""
    if size_average is not None or reduce is not None:
        reduction = _reduction.legacy_get_string(size_average, reduce)
    return torch.ops.torchtpu.multilabel_margin_loss_forward(input, target, _reduction.get_enum(reduction))[0]


_REPLACEMENTS = {F.multilabel_margin_loss: multilabel_margin_loss}


def rewrite(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Points dynamo's calls of the functions above to their replacements."""
    changed = False
    for node in gm.graph.nodes:
        replacement = _REPLACEMENTS.get(node.target) if node.op == "call_function" else None
        if replacement is not None:
            node.target = replacement
            changed = True
    if changed:
        gm.recompile()
    return gm
