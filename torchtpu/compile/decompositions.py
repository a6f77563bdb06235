"""The decomposition table compiled graphs are traced with: PyTorch's
core-aten decompositions for ops we do not lower (addmm, convolution, the
norms, ... stay whole for XLA), a few of PyTorch's others, and ours for ops
eager mode runs through their composite kernels but no PyTorch table
decomposes -- without one, a graph holding them ran op by op."""

import torch

from ..ops.registry import LOWERINGS, VIEW_LOWERINGS, find_graph_lowering

aten = torch.ops.aten

# Outside core aten, from PyTorch's table (torch.dist; _batch_norm_with_update called directly)
_FROM_PYTORCH = (aten.dist.default, aten.batch_norm_backward.default,
                 aten._batch_norm_with_update_functional.default)


def _cholesky_solve(B, L, upper=False):
    """ATen's cholesky_solve: the batch dimensions broadcast, then the
    helper (which we lower) solves."""
    batch = torch.broadcast_shapes(B.shape[:-2], L.shape[:-2])
    return aten._cholesky_solve_helper(B.expand(batch + B.shape[-2:]), L.expand(batch + L.shape[-2:]), upper)


def _trilinear(i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1):
    """F.bilinear's op: each input unsqueezed at its expand dims (in
    increasing order), multiplied, summed over sumdim (unroll_dim only
    chooses ATen's loop order)."""
    def expanded(x, dims):
        for d in sorted(dims):
            x = x.unsqueeze(d)
        return x

    product = expanded(i1, expand1) * expanded(i2, expand2) * expanded(i3, expand3)
    return product.sum(list(sumdim)) if sumdim else product


def _pinv(A, atol=None, rtol=None, hermitian=False):
    """ATen's linalg_pinv: singular values (|eigenvalues| for hermitian A)
    above max(atol, rtol * the largest) inverted, the rest dropped; rtol
    defaults to eps * max(m, n), or 0 where a positive atol is given."""
    m, n = A.shape[-2:]
    if A.numel() == 0:
        return A.new_zeros(A.shape[:-2] + (n, m))
    real = A.real.dtype if A.is_complex() else A.dtype
    zero = torch.zeros((), dtype=torch.float64, device=A.device)
    if rtol is None:
        rtol = torch.full((), torch.finfo(real).eps * max(m, n), dtype=torch.float64, device=A.device)
        if atol is not None:
            rtol = torch.where(atol > 0, zero, rtol)
    atol = zero if atol is None else atol
    if hermitian:
        S, U = torch.linalg.eigh(A)
        size = S.abs()
        tol = torch.maximum(atol.unsqueeze(-1), rtol.unsqueeze(-1) * size.amax(-1, keepdim=True))
        inverse = torch.where(size > tol, S.reciprocal(), torch.zeros((), dtype=S.dtype, device=A.device))
        return (U * inverse.to(A.dtype).unsqueeze(-2)) @ U.mH
    U, S, Vh = torch.linalg.svd(A, full_matrices=False)
    tol = torch.maximum(atol.unsqueeze(-1), rtol.unsqueeze(-1) * S[..., :1])
    inverse = torch.where(S > tol, S.reciprocal(), torch.zeros((), dtype=S.dtype, device=A.device))
    return (Vh.mH * inverse.to(A.dtype).unsqueeze(-2)) @ U.mH


_OURS = {aten.cholesky_solve.default: _cholesky_solve, aten._trilinear.default: _trilinear,
         aten.linalg_pinv.atol_rtol_tensor: _pinv}

_table = {}


def decompositions():
    """The table, built once per state of the lowering tables (building it
    costs ~0.15 s, which every graph of a cold or warm start paid)."""
    from torch._decomp import core_aten_decompositions, decomposition_table

    version = (len(LOWERINGS), len(VIEW_LOWERINGS))
    if version not in _table:
        table = dict(core_aten_decompositions())
        table.update((op, decomposition_table[op]) for op in _FROM_PYTORCH if op in decomposition_table)
        table.update(_OURS)
        _table.clear()
        _table[version] = {op: fn for op, fn in table.items() if find_graph_lowering(op) is None}
    return _table[version]
