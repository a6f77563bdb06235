"""Matrix decompositions and solvers: the aten ops under `torch.linalg.*`.

`lax.linalg` gives the factorizations (LU with partial pivoting, Cholesky,
QR, symmetric eigendecomposition, SVD, triangular solves, Householder QR);
everything else is composed from them, as ATen composes its LAPACK calls:

- `info` outputs (LAPACK's error codes) are computed from the factors: the
  first zero pivot of U (LU), the first non-positive pivot of the leading
  minors (Cholesky), so `*_ex` ops report failures exactly as on CPU.
- `_linalg_check_errors`, which the non-`_ex` ops call, reads `info` on
  the host and raises at the call, as CUDA does; `check_errors=True` (and
  the check inside compiled graphs) become device-side checks, raised at
  the next synchronisation like a CUDA device-side assert.
- Pivots follow LAPACK (1-based row interchanges, int32).  Where ATen factors
  A^T instead of A (`det`, `slogdet` of a contiguous real A) we do the same,
  because the backward formulas read those factors.

Low-precision floats are not supported by ATen's linalg kernels; float64 and
complex work where the platform has them.
"""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import lax

from ..registry import lower
from ..special import special
from ..transfer import materialize, wrap

aten = torch.ops.aten

LinAlgError = torch.linalg.LinAlgError


# ------------------------------------------------------------------ helpers


def _mT(x):
    return jnp.swapaxes(x, -1, -2)


def _mH(x):
    x = _mT(x)
    return jnp.conj(x) if jnp.iscomplexobj(x) else x


def _eye_like(x, n=None):
    n = x.shape[-1] if n is None else n
    return jnp.broadcast_to(jnp.eye(n, dtype=x.dtype), x.shape[:-2] + (n, n))


def _diag(x):
    return jnp.diagonal(x, axis1=-2, axis2=-1)


def _first_index(bad):
    """LAPACK-style info: 1 + index of the first True along the last dim, or 0."""
    n = bad.shape[-1]
    if n == 0:
        return jnp.zeros(bad.shape[:-1], jnp.int32)
    first = jnp.argmax(bad, axis=-1).astype(jnp.int32) + 1
    return jnp.where(jnp.any(bad, axis=-1), first, 0).astype(jnp.int32)


def _real_dtype(dt):
    return jnp.finfo(dt).dtype if jnp.issubdtype(dt, jnp.complexfloating) else jnp.dtype(dt)


def _is_contiguous(meta):
    return isinstance(meta, torch.Tensor) and meta.is_contiguous()


def _broadcast_batch(a, b):
    """Broadcast the batch dims (all but the last two) of two matrix stacks."""
    batch = jnp.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return jnp.broadcast_to(a, batch + a.shape[-2:]), jnp.broadcast_to(b, batch + b.shape[-2:])


def _tri_solve(a, b, *, left=True, lower=True, transpose=False, conj=False, unit=False):
    """op(a) x = b (left) or x op(a) = b, a triangular; batch dims broadcast."""
    a, b = _broadcast_batch(a, b)
    if a.shape[-1] == 0 or b.size == 0:
        return jnp.zeros(b.shape, b.dtype)
    return lax.linalg.triangular_solve(
        a, b, left_side=left, lower=lower, transpose_a=transpose, conjugate_a=conj, unit_diagonal=unit
    )


# ------------------------------------------------------------------ LU


def _lu(a):
    """(LU, 1-based int32 pivots, permutation, info) of a (*, m, n) stack."""
    m, n = a.shape[-2:]
    k = min(m, n)
    if k == 0:
        return (
            jnp.zeros(a.shape, a.dtype),
            jnp.zeros(a.shape[:-2] + (0,), jnp.int32),
            jnp.broadcast_to(jnp.arange(m, dtype=jnp.int32), a.shape[:-2] + (m,)),
            jnp.zeros(a.shape[:-2], jnp.int32),
        )
    lu, pivots, perm = lax.linalg.lu(a)
    info = _first_index(_diag(lu)[..., :k] == 0)
    return lu, pivots.astype(jnp.int32) + 1, perm.astype(jnp.int32), info


def _perm_from_pivots(pivots, m):
    """Row permutation (P^T A = A[perm]) from LAPACK's 1-based interchanges:
    apply the swaps (i, pivots[i] - 1) in order to arange(m).  A loop over
    the pivots (lax has no primitive for sequential swaps)."""
    batch = pivots.shape[:-1]
    k = pivots.shape[-1]
    nb = int(np.prod(batch))
    perm = jnp.broadcast_to(jnp.arange(m, dtype=jnp.int32), (nb, m))
    if k == 0 or nb == 0 or m == 0:
        return perm.reshape(batch + (m,))
    piv = pivots.astype(jnp.int32).reshape(nb, k) - 1
    rows = jnp.arange(perm.shape[0])

    def body(i, perm):
        j = piv[:, i]
        pi = perm[:, i]
        pj = perm[rows, j]
        return perm.at[:, i].set(pj).at[rows, j].set(pi)

    return lax.fori_loop(0, k, body, perm).reshape(batch + (m,))


def _perm_matrix(perm, dtype):
    """P with A = P @ (A[perm]): P[perm[i], i] = 1."""
    m = perm.shape[-1]
    onehot = (perm[..., :, None] == jnp.arange(m, dtype=perm.dtype)).astype(dtype)  # [i, j] = perm[i]==j
    return _mT(onehot)


def _lu_solve(lu, perm, b, adjoint):
    """Solve A x = b (adjoint: A^H x = b) for A = P L U, b (*, n, k)."""
    lu, b = _broadcast_batch(lu, b)
    perm = jnp.broadcast_to(perm, lu.shape[:-1])
    if not adjoint:
        pb = jnp.take_along_axis(b, perm[..., :, None], axis=-2)
        y = _tri_solve(lu, pb, lower=True, unit=True)
        return _tri_solve(lu, y, lower=False)
    conj = jnp.iscomplexobj(lu)
    y = _tri_solve(lu, b, lower=False, transpose=True, conj=conj)
    x = _tri_solve(lu, y, lower=True, transpose=True, conj=conj, unit=True)
    inv = jnp.argsort(perm, axis=-1)
    return jnp.take_along_axis(x, inv[..., :, None], axis=-2)


@lower(aten.linalg_lu_factor_ex)
def linalg_lu_factor_ex(ctx, A, pivot=True, check_errors=False):
    if not pivot:
        raise RuntimeError("linalg.lu_factor: LU without pivoting is not implemented on the CPU")
    lu, pivots, _, info = _lu(A)
    if check_errors:
        _check_info(ctx, info, "torch.linalg.lu_factor_ex", A.ndim == 2)
    return lu, pivots, info


@lower(aten.linalg_lu)
def linalg_lu(ctx, A, pivot=True):
    if not pivot:
        raise RuntimeError("linalg.lu: LU without pivoting is not implemented on the CPU")
    m, n = A.shape[-2:]
    k = min(m, n)
    lu, _, perm, _ = _lu(A)
    L = jnp.tril(lu[..., :, :k], -1) + jnp.eye(m, k, dtype=A.dtype)
    U = jnp.triu(lu[..., :k, :])
    return _perm_matrix(perm, A.dtype), L, U


@lower(aten.lu_unpack)
def lu_unpack(ctx, LU_data, LU_pivots, unpack_data=True, unpack_pivots=True):
    m, n = LU_data.shape[-2:]
    k = min(m, n)
    if unpack_data:
        L = jnp.tril(LU_data[..., :, :k], -1) + jnp.eye(m, k, dtype=LU_data.dtype)
        U = jnp.triu(LU_data[..., :k, :])
    else:
        L = U = jnp.zeros((0,), LU_data.dtype)
    if unpack_pivots:
        P = _perm_matrix(_perm_from_pivots(LU_pivots, m), LU_data.dtype)
        P = jnp.broadcast_to(P, LU_data.shape[:-2] + (m, m))
    else:
        P = jnp.zeros((0,), LU_data.dtype)
    return P, L, U


@lower(aten.linalg_lu_solve)
def linalg_lu_solve(ctx, LU, pivots, B, left=True, adjoint=False):
    m = LU.shape[-1]
    perm = _perm_from_pivots(pivots, m)
    if left:
        return _lu_solve(LU, perm, B, adjoint)
    # X A = B  <=>  A^H X^H = B^H
    return _mH(_lu_solve(LU, perm, _mH(B), not adjoint))


def _is_vector_rhs(A, B):
    return B.ndim == 1 or (A.ndim - 1 == B.ndim and tuple(B.shape) == tuple(A.shape[:-1]))


@lower(aten._linalg_solve_ex)
def linalg_solve_ex(ctx, A, B, left=True, check_errors=False):
    lu, pivots, perm, info = _lu(A)
    if check_errors:
        _check_info(ctx, info, "torch.linalg.solve_ex", A.ndim == 2)
    vector = _is_vector_rhs(A, B)
    b = B[..., None] if vector else B
    if left:
        x = _lu_solve(lu, perm, b, False)
    else:
        x = _mH(_lu_solve(lu, perm, _mH(b), True))
    if vector:
        x = x[..., 0]
    return x, lu, pivots, info


@lower(aten.linalg_inv_ex)
def linalg_inv_ex(ctx, A, check_errors=False):
    lu, _, perm, info = _lu(A)
    if check_errors:
        _check_info(ctx, info, "torch.linalg.inv_ex", A.ndim == 2)
    return _lu_solve(lu, perm, _eye_like(A), False), info


def _det_P(pivots):
    """det of the permutation: (-1)^(number of actual interchanges)."""
    n = pivots.shape[-1]
    swaps = jnp.sum(pivots != jnp.arange(1, n + 1, dtype=pivots.dtype), axis=-1)
    return 1 - 2 * (swaps % 2)


@lower(aten._linalg_det)
def linalg_det(ctx, A):
    use_T = _is_contiguous(ctx.meta_args[0]) and not jnp.iscomplexobj(A)
    lu, pivots, _, _ = _lu(_mH(A) if use_T else A)
    det = _det_P(pivots).astype(A.dtype) * jnp.prod(_diag(lu), axis=-1)
    return det, lu, pivots


@lower(aten._linalg_slogdet)
def linalg_slogdet(ctx, A):
    use_T = _is_contiguous(ctx.meta_args[0]) and not jnp.iscomplexobj(A)
    lu, pivots, _, _ = _lu(_mH(A) if use_T else A)
    d = _diag(lu)
    if jnp.iscomplexobj(d):
        mag = jnp.abs(d)
        sgn = jnp.where(mag == 0, 0, d / jnp.where(mag == 0, 1, mag).astype(d.dtype))
    else:
        sgn = jnp.sign(d)
    sign = jnp.prod(sgn, axis=-1) * _det_P(pivots).astype(A.dtype)
    logabsdet = jnp.sum(jnp.log(jnp.abs(d)), axis=-1)
    return sign, logabsdet, lu, pivots


# ------------------------------------------------------------------ Cholesky


def _cholesky_info(a):
    """LAPACK potrf's info: the order of the first leading minor that is not
    positive-definite (0 if none), from Gaussian elimination without pivoting
    (its k-th pivot is det(A_k) / det(A_k-1))."""
    n = a.shape[-1]
    if n == 0:
        return jnp.zeros(a.shape[:-2], jnp.int32)
    idx = jnp.arange(n)
    a = jnp.tril(a) + _mH(jnp.tril(a, -1))  # potrf reads the lower triangle

    def body(k, state):
        a, piv = state
        d = a[..., k, k]
        piv = piv.at[..., k].set(jnp.real(d))
        col = jnp.take(a, k, axis=-1)  # (*, n)
        row = jnp.take(a, k, axis=-2)
        safe = jnp.where(d == 0, 1, d)
        upd = col[..., :, None] * row[..., None, :] / safe[..., None, None]
        mask = (idx[:, None] > k) & (idx[None, :] > k)
        return a - jnp.where(mask, upd, 0), piv

    piv = jnp.zeros(a.shape[:-1], _real_dtype(a.dtype))
    _, piv = lax.fori_loop(0, n, body, (a, piv))
    return _first_index(~(piv > 0))


def _cholesky(a, upper):
    """Cholesky factor reading the lower (upper) triangle, and LAPACK's info."""
    if upper:
        a = _mH(a)
    if a.shape[-1] == 0:
        return a, jnp.zeros(a.shape[:-2], jnp.int32)
    L = lax.linalg.cholesky(a, symmetrize_input=False)
    ok = jnp.all(jnp.isfinite(L), axis=(-2, -1))
    info = jnp.where(ok, 0, _cholesky_info(a)).astype(jnp.int32)
    L = jnp.tril(L)
    return (_mH(L) if upper else L), info


@lower(aten.linalg_cholesky_ex)
def linalg_cholesky_ex(ctx, A, upper=False, check_errors=False):
    L, info = _cholesky(A, upper)
    if check_errors:
        _check_info(ctx, info, "torch.linalg.cholesky_ex", A.ndim == 2)
    return L, info


@lower(aten.cholesky)
def cholesky(ctx, A, upper=False):
    L, info = _cholesky(A, upper)
    _check_info(ctx, info, "cholesky", A.ndim == 2)
    return L


@lower(aten._cholesky_solve_helper)
def cholesky_solve_helper(ctx, B, L, upper):
    conj = jnp.iscomplexobj(L)
    if upper:  # A = U^H U
        y = _tri_solve(L, B, lower=False, transpose=True, conj=conj)
        return _tri_solve(L, y, lower=False)
    y = _tri_solve(L, B, lower=True)
    return _tri_solve(L, y, lower=True, transpose=True, conj=conj)


@lower(aten.cholesky_inverse)
def cholesky_inverse(ctx, L, upper=False):
    eye = _eye_like(L)
    return cholesky_solve_helper(ctx, eye, L, upper)


# ------------------------------------------------------------------ triangular


@lower(aten.linalg_solve_triangular)
def linalg_solve_triangular(ctx, A, B, upper, left=True, unitriangular=False):
    A = jnp.triu(A) if upper else jnp.tril(A)
    return _tri_solve(A, B, left=left, lower=not upper, unit=unitriangular)


@lower(aten.triangular_solve)
def triangular_solve(ctx, B, A, upper=True, transpose=False, unitriangular=False):
    A_b, B_b = _broadcast_batch(A, B)
    tri = jnp.triu(A_b) if upper else jnp.tril(A_b)
    x = _tri_solve(tri, B_b, lower=not upper, transpose=transpose, unit=unitriangular)
    return x, A_b


# ------------------------------------------------------------------ QR, eigh, SVD


@lower(aten.linalg_qr)
def linalg_qr(ctx, A, mode="reduced"):
    m, n = A.shape[-2:]
    if mode == "r":
        r = jnp.linalg.qr(A, mode="r") if min(m, n) else jnp.zeros(A.shape[:-2] + (min(m, n), n), A.dtype)
        return jnp.zeros((0,), A.dtype), r
    full = mode == "complete"
    if min(m, n) == 0:
        k = m if full else min(m, n)
        return _eye_like(A, m)[..., :, :k], jnp.zeros(A.shape[:-2] + (k, n), A.dtype)
    q, r = jnp.linalg.qr(A, mode="complete" if full else "reduced")
    return q, r


# geqrf and linalg_lstsq have no meta kernel (so no output metadata for the
# generic path): handlers run them as their own jitted kernels.


@jax.jit
def _geqrf_kernel(A):
    # LAPACK's compact QR (reflectors below the diagonal + scales); JAX has
    # the primitive but does not export it from jax.lax.linalg.
    from jax._src.lax.linalg import geqrf as lax_geqrf

    return lax_geqrf(A)


def _geqrf(A):
    a, tau = _geqrf_kernel(materialize(A))
    device = A.device.index
    return wrap(a, A.dtype, device), wrap(tau, A.dtype, device)


@special(aten.geqrf.default)
def geqrf(A):
    if A.dim() < 2:
        raise RuntimeError(f"torch.geqrf: The input tensor A must have at least 2 dimensions.")
    return _geqrf(A)


@special(aten.geqrf.a)
def geqrf_out(A, *, a, tau):
    ra, rtau = _geqrf(A)
    return _to_out(a, ra), _to_out(tau, rtau)


def _to_out(out, value):
    out.resize_(value.shape)
    return out.copy_(value)


def _householder_q(A, tau, cols):
    """The first `cols` columns of H_1 ... H_k (LAPACK orgqr) from the
    reflectors below A's diagonal and their scales `tau` (zero scales pad the
    product with identities)."""
    n = A.shape[-1]
    if n < cols:
        A = jnp.concatenate([A, jnp.zeros(A.shape[:-1] + (cols - n,), A.dtype)], axis=-1)
    elif n > cols:
        A = A[..., :, :cols]
    k = tau.shape[-1]
    if k < cols:
        tau = jnp.concatenate([tau, jnp.zeros(tau.shape[:-1] + (cols - k,), tau.dtype)], axis=-1)
    A, tau = jnp.broadcast_to(A, jnp.broadcast_shapes(A.shape[:-2], tau.shape[:-1]) + A.shape[-2:]), tau
    tau = jnp.broadcast_to(tau, A.shape[:-2] + tau.shape[-1:])
    return lax.linalg.householder_product(A, tau)


@lower(aten.linalg_householder_product)
def linalg_householder_product(ctx, A, tau):
    n = A.shape[-1]
    if A.shape[-2] == 0 or n == 0:
        return jnp.zeros(A.shape, A.dtype)
    return _householder_q(A, tau, n)


@lower(aten.ormqr)
def ormqr(ctx, A, tau, C, left=True, transpose=False):
    """op(Q) C or C op(Q), Q = H_1 ... H_k the full m x m orthogonal factor."""
    m = A.shape[-2]
    Q = _householder_q(A, tau, m)
    if transpose:
        Q = _mH(Q)
    Q, C = _broadcast_batch(Q, C)
    prec = ctx.precision
    return jnp.matmul(Q, C, precision=prec) if left else jnp.matmul(C, Q, precision=prec)


@lower(aten._linalg_eigh)
def linalg_eigh(ctx, A, UPLO="L", compute_v=True):
    if A.shape[-1] == 0:
        return jnp.zeros(A.shape[:-1], _real_dtype(A.dtype)), (A if compute_v else jnp.zeros((0,), A.dtype))
    v, w = lax.linalg.eigh(A, lower=UPLO.upper() == "L", symmetrize_input=False)
    return w.astype(_real_dtype(A.dtype)), (v if compute_v else jnp.zeros((0,), A.dtype))


@lower(aten._linalg_svd)
def linalg_svd(ctx, A, full_matrices=False, compute_uv=True, driver=None):
    m, n = A.shape[-2:]
    k = min(m, n)
    real = _real_dtype(A.dtype)
    if k == 0:
        s = jnp.zeros(A.shape[:-2] + (0,), real)
        if not compute_uv:
            return jnp.zeros((0,), A.dtype), s, jnp.zeros((0,), A.dtype)
        ku, kv = (m, n) if full_matrices else (k, k)
        return _eye_like(A, m)[..., :, :ku], s, _eye_like(A, n)[..., :kv, :]
    if not compute_uv:
        s = jnp.linalg.svd(A, compute_uv=False)
        return jnp.zeros((0,), A.dtype), s.astype(real), jnp.zeros((0,), A.dtype)
    u, s, vh = jnp.linalg.svd(A, full_matrices=full_matrices)
    return u, s.astype(real), vh


@special(aten._linalg_svd.default)
def linalg_svd_checked(A, full_matrices=False, compute_uv=True, *, driver=None):
    """ATen's SVD raises LinAlgError at the call for an input with a NaN
    (LAPACK's info -4, read on the host; an inf passes and gives NaNs); XLA's
    returns NaNs.  So do the same: one flag per matrix, read on the host by
    `_linalg_check_errors` (also svdvals, pinv, matrix_rank, the 2-norm)."""
    from .. import dispatch

    result = dispatch.run(aten._linalg_svd.default, (A, full_matrices, compute_uv), {"driver": driver})
    if A.numel():
        info = torch.where(torch.isnan(A).flatten(-2).any(-1), -4, 0).to(torch.int32)
        torch.ops.aten._linalg_check_errors(info, "linalg.svd", is_matrix=A.dim() == 2)
    return result


# ------------------------------------------------------------- matrix_exp

_EXP_DEGREE = 18  # of the Taylor polynomial (ATen's highest degree too)


def _taylor_radius(dtype):
    """The largest 1-norm at which the degree-18 Taylor remainder, about
    |A|^19 / 19!, stays under half an ulp of `dtype`."""
    return float((jnp.finfo(dtype).eps / 2 * math.factorial(_EXP_DEGREE + 1)) ** (1 / (_EXP_DEGREE + 1)))


def _taylor_exp(X, precision, degree=_EXP_DEGREE, block=5):
    """sum_k X^k / k!, k <= degree, by Paterson-Stockmeyer: the powers
    X^0..X^block once, then Horner in X^block (7 matrix products for 18)."""
    matmul = functools.partial(jnp.matmul, precision=precision)
    powers = [jnp.broadcast_to(jnp.eye(X.shape[-1], dtype=X.dtype), X.shape), X]
    for _ in range(block - 1):
        powers.append(matmul(powers[-1], X))
    result = None
    for j in reversed(range(degree // block + 1)):
        terms = range(min(block, degree - j * block + 1))
        chunk = sum(powers[i] / math.factorial(j * block + i) for i in terms)
        result = chunk if result is None else matmul(result, powers[block]) + chunk
    return result


@lower(aten.linalg_matrix_exp)
def linalg_matrix_exp(ctx, A):
    """Scaling and squaring around a Taylor polynomial, as ATen's kernel (jax's
    Pade 7 solve lost up to 1e-4 relative in float32 at 1-norms near 10).
    Each matrix of a batch is scaled by its own 2^-s and squared s times;
    half-precision inputs compute in float32."""
    if A.shape[-1] == 0:
        return A
    compute = jnp.promote_types(A.dtype, jnp.float32)
    X = A.astype(compute)
    norm = jnp.max(jnp.sum(jnp.abs(X), axis=-2), axis=-1)  # the 1-norm
    radius = _taylor_radius(compute)
    s = jnp.where(norm > radius, jnp.ceil(jnp.log2(norm / radius)), 0)
    s = jnp.where(jnp.isfinite(s), s, 0).astype(jnp.int32)
    X = X * jnp.exp2(-s.astype(norm.dtype))[..., None, None].astype(compute)

    def square(i, E):
        return jnp.where(i < s[..., None, None], jnp.matmul(E, E, precision=ctx.precision), E)

    result = lax.fori_loop(0, jnp.max(s, initial=0), square, _taylor_exp(X, ctx.precision))
    # (an inf or nan entry: ATen's scaling gives nan everywhere; all-inf squared stayed inf here)
    result = jnp.where(jnp.isfinite(norm)[..., None, None], result, jnp.nan)
    return result.astype(A.dtype)


# ------------------------------------------------------------------ lstsq


@functools.partial(jax.jit, static_argnums=(2, 3, 4))
def _lstsq_kernel(A, B, vector, rcond, precision):
    """Least squares through the SVD: the minimum-norm solution (what gelsd
    computes; gelsy's complete orthogonal factorization and gels's QR give the
    same solution for the full-rank inputs they are meant for)."""
    b = B[..., None] if vector else B
    A, b = _broadcast_batch(A, b)
    u, s, vh = jnp.linalg.svd(A, full_matrices=False)
    keep = s > rcond * jnp.max(s, axis=-1, keepdims=True, initial=0.0)
    s_inv = jnp.where(keep, 1 / jnp.where(keep, s, 1), 0).astype(A.dtype)
    x = jnp.matmul(_mH(vh), s_inv[..., :, None] * jnp.matmul(_mH(u), b, precision=precision), precision=precision)
    r = jnp.matmul(A, x, precision=precision) - b
    residuals = jnp.sum(jnp.abs(r) ** 2, axis=-2).astype(s.dtype)
    rank = jnp.sum(keep, axis=-1).astype(jnp.int64)
    if vector:
        x = x[..., 0]
    return x, residuals, rank, s


def _lstsq(A, B, rcond=None, driver=None):
    from ..context import matmul_precision

    device = A.device.index
    if B.device != A.device:
        raise RuntimeError(
            f"Expected all tensors to be on the same device, but found at least two devices, {A.device} and {B.device}!"
        )
    if A.dtype != B.dtype:
        raise RuntimeError(
            f"torch.linalg.lstsq: Expected input and other to have the same dtype, but got input's dtype "
            f"{A.dtype} and other's dtype {B.dtype}"
        )
    driver = driver or "gelsy"
    if driver not in ("gels", "gelsy", "gelsd", "gelss"):
        raise RuntimeError(f"parameter `driver` should be one of (gels, gelsy, gelsd, gelss)")
    vector = _lstsq_check_shapes(A, B)
    m, n = A.shape[-2:]
    if driver == "gels":
        rcond = 0.0  # (LAPACK's gels takes no rcond: a QR solve of the whole matrix)
    elif rcond is None:
        rcond = float(torch.finfo(A.dtype).eps) * max(m, n)
    x, residuals, rank, s = _lstsq_kernel(materialize(A), materialize(B), vector, float(rcond), matmul_precision())
    real = A.real.dtype if A.is_complex() else A.dtype
    batch = tuple(x.shape[: x.ndim - (1 if vector else 2)])
    empty = lambda dt: torch.empty(0, dtype=dt, device=A.device)  # noqa: E731
    solution = wrap(x, A.dtype, device)
    computes_rank = driver != "gels"
    rank_t = wrap(rank, torch.int64, device) if computes_rank else empty(torch.int64)
    sv_t = wrap(s, real, device) if driver in ("gelsd", "gelss") else empty(real)
    # Residuals: only for tall inputs of full rank (LAPACK leaves them in B),
    # and not from gelsy.  Whether every matrix has full rank is data: sync.
    res_t = empty(real)
    if m > n and driver != "gelsy":
        full = True if not computes_rank else bool(np.all(np.asarray(rank) == n))
        if full:
            res_t = wrap(residuals, real, device)
    return solution, res_t, rank_t, sv_t


def _lstsq_check_shapes(A, B):
    """ATen's shape checks, in its order, with its messages; whether B is a
    (batch of) vector(s): one dimension short, its leading sizes A's."""
    if A.dim() < 2:
        raise RuntimeError("torch.linalg.lstsq: input must have at least 2 dimensions.")
    if not 0 <= A.dim() - B.dim() <= 1:
        raise RuntimeError("torch.linalg.lstsq: input.dim() must be greater or equal to other.dim() and "
                           "(input.dim() - other.dim()) <= 1")
    vector = B.dim() == A.dim() - 1 and B.shape == A.shape[:-1]
    if vector:
        return True
    if B.shape[-2] != A.shape[-2]:
        raise RuntimeError("torch.linalg.lstsq: input.size(-2) should match other.size(-2)")
    if B.dim() == A.dim():  # the batch dimensions broadcast: PyTorch's own error when not
        flag = torch.zeros((), dtype=torch.bool)
        flag.expand(A.shape[:-2]) | flag.expand(B.shape[:-2])
    else:
        raise RuntimeError(f"torch.linalg.lstsq: other of shape {tuple(B.shape)} is neither a batch of vectors nor "
                           f"a batch of matrices for input of shape {tuple(A.shape)}; give it input.dim() dimensions")
    return False


@special(aten.linalg_lstsq.default)
def linalg_lstsq(A, B, rcond=None, *, driver=None):
    return _lstsq(A, B, rcond, driver)


@special(aten.linalg_lstsq.out)
def linalg_lstsq_out(A, B, rcond=None, *, driver=None, solution, residuals, rank, singular_values):
    r = _lstsq(A, B, rcond, driver)
    return tuple(_to_out(o, v) for o, v in zip((solution, residuals, rank, singular_values), r))


# ------------------------------------------------------------------ errors


_MESSAGES = {
    "inv": "The diagonal element {value} is zero, the inversion could not be completed because the "
    "input matrix is singular.",
    "solve": "The solver failed because the input matrix is singular.",
    "cholesky": "The factorization could not be completed because the input is not positive-definite "
    "(the leading minor of order {value} is not positive-definite).",
    "lu_factor": "U[{value},{value}] is zero and using it on lu_solve would result in a division by zero. "
    "If you still want to perform the factorization, consider calling linalg.lu(A, pivot) or "
    "linalg.lu_factor_ex(A, pivot)",
    "eigh": "The algorithm failed to converge because the input matrix is ill-conditioned or has too many "
    "repeated eigenvalues (error code: {value}).",
    "svd": "The algorithm failed to converge because the input matrix is ill-conditioned or has too many "
    "repeated singular values (error code: {value}).",
}


def _message(api_name):
    for key, msg in _MESSAGES.items():
        if key in api_name:
            return f"{api_name}: {msg}"
    return f"{api_name}: The factorization could not be completed (error code: {{value}})."


def _check_info(ctx, info, api_name, is_matrix):
    info = jnp.asarray(info).reshape(-1)
    if info.size == 0:
        return
    bad = info != 0
    first = info[jnp.argmax(bad)]
    msg = _message(api_name)
    if not is_matrix:
        msg = "(Batch element of a batch) " + msg
    ctx.check(~jnp.any(bad), msg, LinAlgError, value=first)


@lower(aten._linalg_check_errors)
def linalg_check_errors(ctx, info, api_name, is_matrix):
    """Inside compiled graphs: a device-side check."""
    _check_info(ctx, info, api_name, is_matrix)
    return ()


@special(aten._linalg_check_errors.default)
def linalg_check_errors_now(info, api_name, *, is_matrix):
    """Eager `torch.linalg.inv` & co. raise at the call, as on CUDA (whose
    check reads `info` on the host): `try: inv(A) except LinAlgError` is a
    common pattern.  The `_ex` variants stay asynchronous."""
    torch.ops.aten._linalg_check_errors(info.cpu(), api_name, is_matrix=is_matrix)
