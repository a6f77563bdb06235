"""Complex numbers: the real/complex views and physical conjugation.

`view_as_real` / `view_as_complex` are views (they share storage with their
input; autograd's view tracking relies on it), and ATen's own kernels for
them are CPU/CUDA ones.  Here they are metadata only: a tensor of the other
dtype `set_` onto the same storage with the doubled/halved strides, which the
box read plans already serve (a complex box read as float pairs is a bitcast).
"""

import jax.numpy as jnp
import torch

from ..registry import lower
from ..special import special

aten = torch.ops.aten

_REAL = {torch.complex64: torch.float32, torch.complex128: torch.float64, torch.complex32: torch.float16}
_COMPLEX = {v: k for k, v in _REAL.items()}


def _on_storage(base, dtype, sizes, strides, offset):
    out = torch.empty(0, dtype=dtype, device=base.device)
    out = out.set_(base.untyped_storage(), offset, sizes, strides)
    # (ATen's view keeps its input's negative bit: `z.conj().imag` is one)
    return torch._neg_view(out) if base.is_neg() else out


@special(aten.view_as_real.default)
def view_as_real(self):
    if not self.is_complex():
        raise RuntimeError("view_as_real is only supported for complex tensors")
    if self.is_conj():
        raise RuntimeError(
            "view_as_real doesn't work on unresolved conjugated tensors.  To resolve the conjugate tensor so you "
            "can view it as real, use self.resolve_conj(); however, be warned that the resulting tensor will NOT "
            "alias the original."
        )
    sizes = list(self.shape) + [2]
    strides = [2 * s for s in self.stride()] + [1]
    return _on_storage(self, _REAL[self.dtype], sizes, strides, 2 * self.storage_offset())


@special(aten.view_as_complex.default)
def view_as_complex(self):
    if self.dtype not in _COMPLEX:
        raise RuntimeError(
            "view_as_complex is only supported for float, double and half tensors, but got a tensor of scalar "
            f"type: {str(self.dtype).replace('torch.', '').capitalize()}"
        )
    if self.dim() == 0 or self.shape[-1] != 2:
        raise RuntimeError("Tensor must have a last dimension of size 2")
    if self.stride(-1) != 1:
        raise RuntimeError("Tensor must have a last dimension with stride 1")
    if any(s % 2 for s in self.stride()[:-1]):
        raise RuntimeError("Tensor must have a stride divisible by 2 for all but last dimension")
    if self.storage_offset() % 2:
        raise RuntimeError("Tensor must have a storage_offset divisible by 2")
    sizes = list(self.shape[:-1])
    strides = [s // 2 for s in self.stride()[:-1]]
    return _on_storage(self, _COMPLEX[self.dtype], sizes, strides, self.storage_offset() // 2)


@lower(aten._conj_physical, aten.conj_physical)
def conj_physical(ctx, self):
    return jnp.conj(self) if jnp.iscomplexobj(self) else self
