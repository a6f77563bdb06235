"""Neural-network op lowerings against the CPU: matrix products, convolution,
pooling, normalization (weight_norm too), losses, embedding (values and gradients), and
dropout (statistics: it is random).

Composites and autograd formulas also run ops of other families (views,
sums, elementwise math); `check` fails if any op falls back to the CPU."""

import math

import pytest
import torch
import torch.nn.functional as F
import torchtpu
import torchtpu.compile
from utils import TPU, assert_close, check

NAN = float("nan")
INF = float("inf")


def randn(*shape, dtype=torch.float32, grad=False, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(*shape, generator=g, dtype=torch.float32) * scale).to(dtype)
    return x.requires_grad_(grad)


def rand(*shape, dtype=torch.float32, grad=False, seed=0, low=0.0, high=1.0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.rand(*shape, generator=g) * (high - low) + low).to(dtype)
    return x.requires_grad_(grad)


def randint(high, *shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, high, shape, generator=g)


def bf16_tol(dtype, **tol):
    """Looser tolerance for bfloat16 results of long reductions."""
    return dict(atol=2e-2, rtol=2e-2) if dtype == torch.bfloat16 else tol


FLOATS = [torch.float32, torch.bfloat16]


# ===================================================================== linalg


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shapes", [((3, 4), (4, 5)), ((1, 7), (7, 1)), ((16, 33), (33, 8))])
def test_mm(shapes, dtype):
    a = randn(*shapes[0], dtype=dtype, grad=True)
    b = randn(*shapes[1], dtype=dtype, grad=True, seed=1)
    check(torch.mm, a, b, grad=True)


def test_mm_noncontiguous():
    # x @ w.t() reads w transposed; a strided slice of x too.
    x = randn(6, 10)
    w = randn(5, 4, seed=1)
    check(lambda x, w: torch.mm(x[::2, 1:9:2], w.t()), x, w)


def test_mm_int64_and_float64():
    a = torch.randint(-5, 5, (3, 4))
    b = torch.randint(-5, 5, (4, 2))
    check(torch.mm, a, b)
    check(torch.mm, randn(3, 4).double(), randn(4, 2, seed=1).double())


def test_mm_out_and_bmm_grad():
    a, b = randn(3, 4), randn(4, 5, seed=1)
    out = torch.empty(3, 5)

    def fn(a, b, out):
        torch.mm(a, b, out=out)
        return out

    check(fn, a, b, out)
    x = randn(2, 3, 4, grad=True)
    y = randn(2, 4, 5, grad=True, seed=1)
    check(torch.bmm, x, y, grad=True)


@pytest.mark.parametrize("dtype", FLOATS)
def test_bmm_noncontiguous(dtype):
    x = randn(3, 5, 2, dtype=dtype)
    y = randn(3, 4, 5, dtype=dtype, seed=1)
    check(lambda x, y: torch.bmm(x.transpose(1, 2), y.transpose(1, 2)), x, y)


@pytest.mark.parametrize("dtype", FLOATS)
def test_addmm(dtype):
    bias = randn(5, dtype=dtype, grad=True, seed=2)
    a = randn(3, 4, dtype=dtype, grad=True)
    b = randn(4, 5, dtype=dtype, grad=True, seed=1)
    check(lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=-2.0), bias, a, b, grad=True)
    # grad formulas: mul/sum (elementwise, reductions)


@pytest.mark.parametrize("scale", [0.01, 1.0, 3.0, 10.0])
def test_matrix_exp_is_as_accurate_as_the_cpu(scale):
    # Against a float64 reference, per matrix: jax's float32 expm (a Pade
    # solve) was 10-100x less accurate than ATen's Taylor kernel at 1-norms
    # of 3-30 (3.6e-4 relative at 10, where the CPU is at 4e-6).
    torch.manual_seed(0)
    a = torch.randn(20, 4, 4) * scale
    ref = torch.matrix_exp(a.double())

    def error(t):
        return ((t.double() - ref).abs().amax((-2, -1)) / ref.abs().amax((-2, -1))).max().item()

    assert error(torch.matrix_exp(a.to("tpu")).cpu()) <= 2 * error(torch.matrix_exp(a)) + 1e-7
    assert error(torch.matrix_exp(a.double().to("tpu")).cpu()) < 1e-12
    check(torch.matrix_exp, (a / scale).requires_grad_(), grad=True, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.complex64])
def test_matrix_exp_other_dtypes(dtype):
    # half precision computes in float32 (jax's expm refused it)
    torch.manual_seed(1)
    a = torch.randn(3, 4, 4, dtype=dtype if dtype.is_complex else torch.float32)
    got = torch.matrix_exp(a.to(dtype).to("tpu"))
    want = torch.matrix_exp(a.to(dtype).to(torch.complex128 if dtype.is_complex else torch.float64))
    tol = 1e-5 if dtype.is_complex else 2e-2
    assert got.dtype == dtype
    torch.testing.assert_close(got.cpu().to(want.dtype), want, rtol=tol, atol=tol * want.abs().max().item())


def test_addmm_beta_zero_ignores_nan():
    c = torch.full((3, 5), NAN)
    a, b = randn(3, 4), randn(4, 5, seed=1)
    out = check(lambda c, a, b: torch.addmm(c, a, b, beta=0), c, a, b)
    assert not torch.isnan(out.cpu()).any()
    # beta != 0 propagates it
    out = check(lambda c, a, b: torch.addmm(c, a, b, beta=1e-3), c, a, b, equal_nan=True)
    assert torch.isnan(out.cpu()).all()


def test_addmm_inplace_and_int():
    c, a, b = randn(3, 5), randn(3, 4), randn(4, 5, seed=1)

    def fn(c, a, b):
        c.addmm_(a, b, alpha=3)
        return c

    check(fn, c, a, b)
    ci = torch.randint(-3, 3, (3, 5))
    ai, bi = torch.randint(-3, 3, (3, 4)), torch.randint(-3, 3, (4, 5))
    check(lambda c, a, b: torch.addmm(c, a, b, beta=2, alpha=3), ci, ai, bi)


@pytest.mark.parametrize("dtype", FLOATS)
def test_baddbmm_addbmm(dtype):
    c = randn(2, 3, 5, dtype=dtype, seed=2)
    x = randn(2, 3, 4, dtype=dtype)
    y = randn(2, 4, 5, dtype=dtype, seed=1)
    check(lambda c, x, y: torch.baddbmm(c, x, y, beta=0.5, alpha=2), c, x, y)
    check(lambda c, x, y: torch.baddbmm(c, x, y, beta=0), torch.full((2, 3, 5), NAN, dtype=dtype), x, y)
    check(lambda c, x, y: torch.addbmm(c[0], x, y, beta=-1, alpha=0.5), c, x, y, **bf16_tol(dtype))


@pytest.mark.parametrize("dtype", FLOATS)
def test_mv_addmv_dot_vdot(dtype):
    m = randn(4, 6, dtype=dtype)
    v = randn(6, dtype=dtype, seed=1)
    c = randn(4, dtype=dtype, seed=2)
    check(torch.mv, m, v)
    check(lambda c, m, v: torch.addmv(c, m, v, beta=2, alpha=0.5), c, m, v)
    check(torch.dot, v, v * 2)
    check(torch.vdot, v, v)
    check(lambda m, v: torch.mv(m.t()[1:5], v), randn(6, 6, dtype=dtype), v)


def test_dot_int():
    a, b = torch.randint(-9, 9, (7,)), torch.randint(-9, 9, (7,))
    check(torch.dot, a, b)


@pytest.mark.parametrize("use_gelu", [False, True])
def test_addmm_activation(use_gelu):
    c, a, b = randn(5, seed=2), randn(3, 4), randn(4, 5, seed=1)
    check(lambda c, a, b: torch.ops.aten._addmm_activation(c, a, b, beta=0.5, use_gelu=use_gelu), c, a, b)


def test_matmul_shapes():
    # matmul/linear decompose to mm/bmm plus views.
    cases = [((4,), (4, 3)), ((2, 3, 4), (4, 5)), ((2, 1, 3, 4), (5, 4, 2)), ((4,), (4,)), ((3, 4), (4,))]
    for sa, sb in cases:
        a = randn(*sa, grad=True)
        b = randn(*sb, grad=True, seed=1)
        check(torch.matmul, a, b, grad=True)


def test_float32_matmul_precision_setting():
    a, b = randn(8, 8), randn(8, 8, seed=1)
    torch.set_float32_matmul_precision("high")
    out = (a.to(TPU) @ b.to(TPU)).cpu()
    torch.testing.assert_close(out, a @ b, atol=1e-2, rtol=1e-2)


# ================================================================ convolution

CONV_CASES = [
    # (nd, in_shape, out_ch, kernel, kwargs)
    (1, (2, 4, 11), 6, 3, dict(stride=2, padding=1)),
    (1, (2, 4, 9), 4, 2, dict(dilation=3, groups=4)),
    (2, (2, 4, 9, 8), 6, 3, dict(stride=2, padding=1, dilation=2, groups=2)),
    (2, (1, 3, 7, 7), 5, (3, 1), dict(stride=(1, 2), padding=(0, 1))),
    (2, (2, 2, 6, 6), 4, 3, dict(padding="same", dilation=2)),
    (3, (1, 2, 5, 6, 5), 3, (3, 2, 3), dict(stride=(1, 2, 1), padding=(1, 0, 2))),
]


def _conv_fn(nd, transposed=False):
    if transposed:
        return {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[nd]
    return {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[nd]


@pytest.mark.parametrize("case", range(len(CONV_CASES)))
def test_conv(case):
    nd, in_shape, out_ch, k, kw = CONV_CASES[case]
    groups = kw.get("groups", 1)
    ks = (k,) * nd if isinstance(k, int) else k
    x = randn(*in_shape, grad=True)
    w = randn(out_ch, in_shape[1] // groups, *ks, grad=True, seed=1)
    b = randn(out_ch, grad=True, seed=2)
    fn = _conv_fn(nd)
    check(lambda x, w, b: fn(x, w, b, **kw), x, w, b, grad=True)


TRANSPOSED_CASES = [
    (1, (2, 4, 5), 3, 3, dict(stride=3, padding=4, output_padding=2)),
    (2, (2, 4, 5, 5), 6, 3, dict(stride=2, padding=1, output_padding=1, dilation=2, groups=2)),
    (2, (1, 2, 4, 3), 3, (2, 3), dict(stride=(2, 1), padding=(0, 1))),
    (3, (1, 2, 3, 4, 3), 2, 2, dict(stride=2, output_padding=(1, 0, 1))),
]


@pytest.mark.parametrize("case", range(len(TRANSPOSED_CASES)))
def test_conv_transpose(case):
    nd, in_shape, out_per_group, k, kw = TRANSPOSED_CASES[case]
    groups = kw.get("groups", 1)
    ks = (k,) * nd if isinstance(k, int) else k
    x = randn(*in_shape, grad=True)
    w = randn(in_shape[1], out_per_group, *ks, grad=True, seed=1)
    b = randn(out_per_group * groups, grad=True, seed=2)
    fn = _conv_fn(nd, transposed=True)
    check(lambda x, w, b: fn(x, w, b, **kw), x, w, b, grad=True)


def test_conv_no_bias_bf16_and_noncontiguous():
    x = randn(2, 3, 8, 8, dtype=torch.bfloat16, grad=True)
    w = randn(4, 3, 3, 3, dtype=torch.bfloat16, grad=True, seed=1)
    # Gradients are ~20 in magnitude; the CPU's bf16 conv backward rounds partial
    # sums (its error vs float64 is ~2x ours, which is float32-accumulated), so
    # allow a few bf16 ulps.
    check(lambda x, w: F.conv2d(x, w, padding=1), x, w, grad=True, atol=0.15, rtol=2e-2)
    # channels-last input and a transposed weight view
    xc = randn(2, 8, 8, 3).permute(0, 3, 1, 2)
    wt = randn(3, 4, 3, 3, seed=1)
    check(lambda x, w: F.conv2d(x, w.transpose(0, 1), stride=2), xc, wt)


def test_convolution_backward_output_mask():
    g = randn(2, 4, 6, 6)
    x = randn(2, 3, 8, 8)
    w = randn(4, 3, 3, 3, seed=1)
    for mask in ([True, False, False], [False, True, True], [True, True, False]):
        check(
            lambda g, x, w: torch.ops.aten.convolution_backward(
                g, x, w, [4], [1, 1], [0, 0], [1, 1], False, [0, 0], 1, mask
            ),
            g,
            x,
            w,
        )


# ==================================================================== pooling


@pytest.mark.parametrize(
    "kw",
    [
        dict(kernel_size=2),
        dict(kernel_size=3, stride=2, padding=1),
        dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 1), dilation=(2, 1), ceil_mode=True),
        dict(kernel_size=3, stride=2, ceil_mode=True),
    ],
)
def test_max_pool2d(kw):
    x = randn(2, 3, 9, 10, grad=True)
    check(lambda x: F.max_pool2d(x, return_indices=True, **kw), x, grad=True)


def test_max_pool2d_ties_nan_inf_unbatched():
    # Ties: the first maximum in window order wins; NaN propagates (last NaN wins).
    x = torch.tensor([[[1.0, 1.0, 0.0, 2.0], [1.0, NAN, 2.0, 2.0], [NAN, 3.0, -INF, -INF], [NAN, 0.0, -INF, -INF]]])
    check(lambda x: F.max_pool2d(x, 2, return_indices=True), x, equal_nan=True)
    check(lambda x: F.max_pool2d(x, 3, 1, 1, return_indices=True), x, equal_nan=True)
    xi = torch.tensor([[[3, 3, 1], [0, 3, 7], [7, 2, 7]]])
    check(lambda x: F.max_pool2d(x, 2, 1, return_indices=True), xi)


def test_max_pool2d_bf16_and_channels_last():
    x = randn(2, 3, 8, 8, dtype=torch.bfloat16, grad=True)
    check(lambda x: F.max_pool2d(x, 3, 2, 1), x, grad=True)
    xc = randn(2, 6, 6, 3).permute(0, 3, 1, 2)
    check(lambda x: F.max_pool2d(x, 2, return_indices=True), xc)


def test_max_pool1d_3d():
    x = randn(2, 3, 11, grad=True)
    check(lambda x: F.max_pool1d(x, 3, 2, 1, return_indices=True), x, grad=True)
    # max_pool1d reaches the backend as unsqueeze + max_pool2d_with_indices
    x3 = randn(1, 2, 5, 6, 7, grad=True)
    check(lambda x: F.max_pool3d(x, (2, 3, 2), (1, 2, 2), (1, 1, 0), return_indices=True), x3, grad=True)
    check(lambda x: F.max_pool3d(x, 2, ceil_mode=True, dilation=(1, 2, 1)), x3, grad=True)


@pytest.mark.parametrize(
    "kw",
    [
        dict(kernel_size=2),
        dict(kernel_size=3, stride=2, padding=1),
        dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
        dict(kernel_size=(3, 2), stride=(2, 3), padding=(1, 1), ceil_mode=True),
        dict(kernel_size=(3, 2), stride=(2, 3), padding=(1, 1), ceil_mode=True, count_include_pad=False),
        dict(kernel_size=3, stride=1, padding=1, divisor_override=4),
    ],
)
def test_avg_pool2d(kw):
    x = randn(2, 3, 9, 10, grad=True)
    check(lambda x: F.avg_pool2d(x, **kw), x, grad=True)


def test_avg_pool_1d_3d_bf16_int():
    x1 = randn(2, 3, 10, grad=True)
    check(lambda x: F.avg_pool1d(x, 3, 2, 1, ceil_mode=True), x1, grad=True)
    x3 = randn(1, 2, 5, 6, 7, grad=True)
    check(lambda x: F.avg_pool3d(x, (2, 3, 2), (1, 2, 2), (1, 1, 0), count_include_pad=False), x3, grad=True)
    check(lambda x: F.avg_pool3d(x, 2, ceil_mode=True, divisor_override=3), x3, grad=True)
    xb = randn(2, 3, 8, 8, dtype=torch.bfloat16, grad=True)
    check(lambda x: F.avg_pool2d(x, 3, 2, 1), xb, grad=True)
    xi = torch.arange(32).reshape(1, 2, 4, 4) - 13
    check(lambda x: F.avg_pool2d(x, 3, 1, 1), xi)


@pytest.mark.parametrize("dtype", FLOATS)
def test_adaptive_avg_pool(dtype):
    x = randn(2, 3, 10, 9, dtype=dtype, grad=True)
    check(lambda x: F.adaptive_avg_pool2d(x, (3, 4)), x, grad=True)
    check(lambda x: F.adaptive_avg_pool2d(x, 1), x, grad=True)
    if dtype == torch.float32:
        check(lambda x: F.adaptive_avg_pool2d(x, (10, 7)), x, grad=True)
        x3 = randn(1, 2, 5, 5, 7, grad=True)
        check(lambda x: F.adaptive_avg_pool3d(x, (3, 2, 4)), x3, grad=True)
        x1 = randn(2, 3, 11, grad=True)
        check(lambda x: F.adaptive_avg_pool1d(x, 4), x1, grad=True)


@pytest.mark.parametrize("dtype", FLOATS)
def test_adaptive_max_pool(dtype):
    x = randn(2, 3, 10, 9, dtype=dtype, grad=True)
    check(lambda x: F.adaptive_max_pool2d(x, (3, 4), return_indices=True), x, grad=True)
    if dtype == torch.float32:
        check(lambda x: F.adaptive_max_pool2d(x, (4, 9), return_indices=True), x, grad=True)
        x3 = randn(1, 2, 5, 5, 7, grad=True)
        check(lambda x: F.adaptive_max_pool3d(x, (3, 2, 4), return_indices=True), x3, grad=True)
        x1 = randn(2, 3, 11, grad=True)
        check(lambda x: F.adaptive_max_pool1d(x, 4), x1, grad=True)


# ============================================================== normalization


@pytest.mark.parametrize("dtype", FLOATS)
def test_batch_norm_train_running_stats(dtype):
    x = randn(4, 3, 5, 5, dtype=dtype, grad=True)
    w = randn(3, grad=True, seed=1)
    b = randn(3, grad=True, seed=2)
    rm = randn(3, seed=3)
    rv = rand(3, seed=4, low=0.5, high=2.0)

    def fn(x, w, b, rm, rv):
        y = F.batch_norm(x, rm, rv, w, b, training=True, momentum=0.3, eps=1e-3)
        return y, rm, rv  # running stats updated in place

    check(fn, x, w, b, rm, rv, grad=True, **bf16_tol(dtype))


def test_batch_norm_eval_and_no_stats():
    x = randn(4, 3, 6, grad=True)
    w, b = randn(3, grad=True, seed=1), randn(3, grad=True, seed=2)
    rm, rv = randn(3, seed=3), rand(3, seed=4, low=0.5, high=2.0)
    check(lambda x, w, b, rm, rv: (F.batch_norm(x, rm, rv, w, b, False, 0.1, 1e-5), rm, rv), x, w, b, rm, rv, grad=True)
    # running stats are read, not updated, in eval mode
    check(lambda x, w, b: F.batch_norm(x, None, None, w, b, True), x, w, b, grad=True)
    check(lambda x: F.batch_norm(x, None, None, training=True), randn(5, 2, grad=True), grad=True)


def test_batch_norm_aten_outputs():
    # save_mean / save_invstd exactly as torch returns them (train and eval).
    x = randn(4, 3, 2, 3)
    rm, rv = randn(3, seed=3), rand(3, seed=4, low=0.5, high=2.0)
    def stats(op):
        def fn(x, rm, rv):
            return op(x, None, None, rm, rv, True, 0.1, 1e-5) + (rm, rv)

        return fn

    check(stats(torch.ops.aten.native_batch_norm), x, rm, rv)
    # Eval mode: the CPU kernel returns empty save_mean/save_invstd; ATen's meta
    # kernels (and CUDA) return running_mean and 1/sqrt(running_var + eps).  The
    # tpu follows the meta kernels.
    for op in (torch.ops.aten.native_batch_norm, torch.ops.aten._native_batch_norm_legit):
        check(lambda x, rm, rv: op(x, None, None, rm, rv, False, 0.1, 1e-5)[0], x, rm, rv)
        _, save_mean, save_invstd = op(x.to(TPU), None, None, rm.to(TPU), rv.to(TPU), False, 0.1, 1e-5)
        torch.testing.assert_close(save_mean.cpu(), rm)
        torch.testing.assert_close(save_invstd.cpu(), torch.rsqrt(rv + 1e-5))
    check(stats(torch.ops.aten._native_batch_norm_legit), x, rm, rv)
    aten = torch.ops.aten
    check(lambda x, rm, rv: aten._native_batch_norm_legit_functional(x, None, None, rm, rv, True, 0.1, 1e-5), x, rm, rv)
    check(lambda x, rm, rv: aten._native_batch_norm_legit_no_training(x, None, None, rm, rv, 0.1, 1e-5)[0], x, rm, rv)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm(dtype, affine):
    x = randn(3, 4, 5, dtype=dtype, grad=True)
    w = randn(4, 5, dtype=dtype, grad=True, seed=1) if affine else None
    b = randn(4, 5, dtype=dtype, grad=True, seed=2) if affine else None
    check(lambda x, w, b: F.layer_norm(x, (4, 5), w, b, eps=1e-4), x, w, b, grad=True, **bf16_tol(dtype))
    if dtype == torch.float32:
        check(lambda x: torch.ops.aten.native_layer_norm(x, [5], None, None, 1e-5), x.detach())
    else:
        # bf16: the CPU kernel returns bf16 mean/rstd, ATen's meta kernels (and
        # CUDA) float32; the tpu follows the meta kernels.
        check(lambda x: torch.ops.aten.native_layer_norm(x, [5], None, None, 1e-5)[0], x.detach(), **bf16_tol(dtype))
        _, mean, rstd = torch.ops.aten.native_layer_norm(x.detach().to(TPU), [5], None, None, 1e-5)
        assert mean.dtype == rstd.dtype == torch.float32
        torch.testing.assert_close(mean.cpu(), x.detach().float().mean(-1, keepdim=True))


def test_layer_norm_noncontiguous():
    x = randn(5, 4, grad=True)
    w, b = randn(5, grad=True, seed=1), randn(5, grad=True, seed=2)
    check(lambda x, w, b: F.layer_norm(x.t(), (5,), w, b), x, w, b, grad=True)


@pytest.mark.parametrize("dtype", FLOATS)
def test_group_norm(dtype):
    x = randn(3, 6, 4, 5, dtype=dtype, grad=True)
    w, b = randn(6, dtype=dtype, grad=True, seed=1), randn(6, dtype=dtype, grad=True, seed=2)
    check(lambda x, w, b: F.group_norm(x, 3, w, b, eps=1e-4), x, w, b, grad=True, **bf16_tol(dtype))
    check(lambda x: F.group_norm(x, 2), randn(2, 4, 7, dtype=dtype, grad=True), grad=True, **bf16_tol(dtype))
    check(lambda x: torch.ops.aten.native_group_norm(x, None, None, 3, 6, 20, 3, 1e-5), x.detach(), **bf16_tol(dtype))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape, dim", [((4, 5), 0), ((4, 5), 1), ((4, 3, 2, 2), 0), ((4, 3, 2, 2), 3)])
def test_weight_norm_interface(shape, dim, dtype):
    # torch._weight_norm takes the fused path (_weight_norm_interface and its
    # backward) for the first or last dim; g has the shape of norm_except_dim.
    v = randn(*shape, dtype=dtype, grad=True)
    g_shape = [1] * len(shape)
    g_shape[dim] = shape[dim]
    g = randn(*g_shape, dtype=dtype, grad=True, seed=1, scale=2.0)
    check(lambda v, g: torch._weight_norm(v, g, dim), v, g, grad=True, **bf16_tol(dtype))


def test_weight_norm_interface_backward_direct():
    v, g = randn(3, 5, seed=0), randn(1, 5, seed=1)
    grad_w = randn(3, 5, seed=2)
    for dtype in (torch.float32, torch.bfloat16):
        # bf16: saved_norms is float32 (ATen keeps the norm in float for half g)
        norms = torch.linalg.vector_norm(v, dim=0, keepdim=True)
        args = (grad_w.to(dtype), v.to(dtype), g.to(dtype), norms)
        out = check(lambda *a: torch.ops.aten._weight_norm_interface_backward(*a, 1), *args, **bf16_tol(dtype))
        assert [t.dtype for t in out] == [dtype, dtype]


def _weight_norm_module(api, dim):
    torch.manual_seed(0)
    module = torch.nn.Linear(5, 4)
    if api == "parametrizations":
        return torch.nn.utils.parametrizations.weight_norm(module, dim=dim)
    with pytest.warns(FutureWarning):  # torch.nn.utils.weight_norm is deprecated
        return torch.nn.utils.weight_norm(module, dim=dim)


@pytest.mark.parametrize("api", ["parametrizations", "nn.utils"])
@pytest.mark.parametrize("dim", [0, 1])
def test_weight_norm_modules(api, dim, no_fallback):
    x = randn(3, 5, seed=3)
    cpu = _weight_norm_module(api, dim)
    tpu = _weight_norm_module(api, dim).to(TPU)
    for module, inp in ((cpu, x), (tpu, x.to(TPU))):
        module(inp).pow(2).sum().backward()
    assert_close(tpu(x.to(TPU)), cpu(x))
    for a, e in zip(tpu.parameters(), cpu.parameters()):
        assert_close(a.grad, e.grad)


def test_weight_norm_compiled(no_fallback):
    torch._dynamo.reset()
    torchtpu.compile.reset_compile_stats()
    try:
        tpu_module = _weight_norm_module("parametrizations", 0).to(TPU)
        cpu_module = _weight_norm_module("parametrizations", 0)
        x = randn(3, 5, seed=3)

        def step(module, x):
            loss = module(x).pow(2).sum()
            loss.backward()
            return loss

        got = torch.compile(step, backend="tpu")(tpu_module, x.to(TPU))
        assert_close(got, step(cpu_module, x))
        for a, e in zip(tpu_module.parameters(), cpu_module.parameters()):
            assert_close(a.grad, e.grad)
        stats = torchtpu.compile_stats()
        assert stats["graphs"] >= 1 and stats["eager_fallback_graphs"] == 0, stats["per_graph"]
    finally:
        torch._dynamo.reset()


# ===================================================================== losses


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_nll_loss(reduction):
    x = randn(6, 5, grad=True)
    t = torch.tensor([1, -100, 3, 0, 4, 3])
    w = rand(5, low=0.1, high=2.0)
    check(lambda x, t, w: F.nll_loss(x, t, w, reduction=reduction), x, t, w, grad=True)
    check(lambda x, t: F.nll_loss(x, t, ignore_index=3, reduction=reduction), x, t.clamp(min=0), grad=True)
    # one sample (1-d input, 0-d target): torch reports its weight as total_weight
    check(
        lambda x, t, w: torch.ops.aten.nll_loss_forward(x, t, w, {"none": 0, "mean": 1, "sum": 2}[reduction], -100),
        x[0].detach(),
        torch.tensor(2),
        w,
    )


def test_nll_loss_all_ignored_and_2d():
    x = randn(3, 4, grad=True)
    t = torch.full((3,), -100)
    out = check(lambda x, t: F.nll_loss(x, t), x, t, equal_nan=True)
    assert math.isnan(out.item())
    x4 = randn(2, 5, 3, 4, grad=True)
    t4 = randint(5, 2, 3, 4)
    t4[0, 1, 2] = -100
    w = rand(5, low=0.1, high=2.0)
    for reduction in ("none", "mean", "sum"):
        check(lambda x, t, w: F.nll_loss(x, t, w, reduction=reduction), x4, t4, w, grad=True)
    x3 = randn(2, 5, 7, grad=True)  # (N, C, d1): nll_loss_nd reshapes to 4-d
    check(lambda x, t: F.nll_loss(x, t), x3, randint(5, 2, 7), grad=True)


def test_nll_loss_bf16():
    x = randn(6, 5, dtype=torch.bfloat16, grad=True)
    t = torch.tensor([1, -100, 3, 0, 4, 3])
    check(lambda x, t: F.nll_loss(x, t), x, t, grad=True)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_pointwise_losses(reduction, dtype):
    x = randn(4, 5, dtype=dtype, grad=True)
    y = randn(4, 5, dtype=dtype, seed=1)
    # exact zeros and the beta/delta boundaries
    y.view(-1)[:3] = x.detach().view(-1)[:3]
    y.view(-1)[3] = x.detach().view(-1)[3] - 0.5
    y.view(-1)[4] = x.detach().view(-1)[4] + 0.5
    tol = bf16_tol(dtype)
    check(lambda x, y: F.mse_loss(x, y, reduction=reduction), x, y, grad=True, **tol)
    check(lambda x, y: F.smooth_l1_loss(x, y, reduction=reduction, beta=0.5), x, y, grad=True, **tol)
    check(lambda x, y: F.huber_loss(x, y, reduction=reduction, delta=0.5), x, y, grad=True, **tol)


def test_smooth_l1_beta_zero_and_target_grad():
    x = randn(3, 4, grad=True)
    y = randn(3, 4, seed=1, grad=True)
    y.data.view(-1)[0] = x.detach().view(-1)[0]
    check(lambda x, y: F.smooth_l1_loss(x, y, beta=0.0), x, y, grad=True)
    # target grads: the autograd formulas negate the input grad
    check(lambda x, y: F.mse_loss(x, y), x, y, grad=True)
    check(lambda x, y: F.huber_loss(x, y, delta=2.0, reduction="sum"), x, y, grad=True)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_binary_cross_entropy(reduction):
    x = rand(4, 5, grad=True, low=0.02, high=0.98)
    t = rand(4, 5, seed=1)
    w = rand(4, 5, seed=2)
    check(lambda x, t, w: F.binary_cross_entropy(x, t, w, reduction=reduction), x, t, w, grad=True)
    # log clamped at -100 for probabilities 0 and 1
    x0 = torch.tensor([0.0, 1.0, 0.5, 1e-30])
    t0 = torch.tensor([0.0, 1.0, 1.0, 0.0])
    check(lambda x, t: F.binary_cross_entropy(x, t, reduction=reduction), x0, t0)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_binary_cross_entropy_with_logits(reduction):
    x = randn(4, 5, scale=5.0)
    t = rand(4, 5, seed=1)
    w = rand(4, 5, seed=2)
    pw = rand(5, seed=3, low=0.5, high=3.0)
    bce = F.binary_cross_entropy_with_logits
    check(lambda x, t: bce(x, t, reduction=reduction), x, t)
    check(lambda x, t, w, pw: bce(x, t, w, reduction=reduction, pos_weight=pw), x, t, w, pw)
    xg = randn(4, 5, grad=True)
    # backward: a composite of sigmoid/sub/mul in the autograd formula
    check(lambda x, t, pw: bce(x, t, pos_weight=pw, reduction=reduction), xg, t, pw, grad=True)


def test_l1_loss_composite():
    x, y = randn(3, 4, grad=True), randn(3, 4, seed=1)
    check(lambda x, y: F.l1_loss(x, y), x, y, grad=True)


# ================================================================== embedding


@pytest.mark.parametrize("dtype", FLOATS)
def test_embedding(dtype):
    w = randn(10, 4, dtype=dtype, grad=True)
    idx = torch.tensor([[1, 2, 4, 5], [4, 3, 2, 9]])
    check(lambda w, i: F.embedding(i, w), w, idx, grad=True)
    check(lambda w, i: F.embedding(i, w, padding_idx=2), w, idx, grad=True)
    check(lambda w, i: F.embedding(i, w, padding_idx=-1, scale_grad_by_freq=True), w, idx, grad=True)
    check(lambda w, i: F.embedding(i, w), w, torch.tensor(3), grad=True)


def test_embedding_int32_indices_noncontiguous_weight():
    w = randn(4, 10, grad=True)
    idx = torch.tensor([3, 1, 3, 0], dtype=torch.int32)
    check(lambda w, i: F.embedding(i, w.t()), w, idx, grad=True)


def test_embedding_dense_backward_direct():
    g = randn(2, 3, 4)
    idx = torch.tensor([[1, 1, 0], [5, 1, 2]])
    for padding_idx, scale in ((-1, False), (1, False), (0, True)):
        check(lambda g, i: torch.ops.aten.embedding_dense_backward(g, i, 7, padding_idx, scale), g, idx)


def test_embedding_max_norm_renorms_in_place():
    w = randn(10, 4, scale=2.0)
    idx = torch.tensor([1, 2, 4, 1, 9])

    def fn(w, i):
        y = F.embedding(i, w, max_norm=1.5)
        return y, w  # the looked-up rows of w are renormalised in place

    check(fn, w, idx)
    check(fn, w, idx)  # second call: same kernel, already-normalised rows
    check(lambda w, i: (F.embedding(i, w, max_norm=0.5, norm_type=1.0), w), w, idx)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag(mode):
    w = randn(10, 3, grad=True)
    idx = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 0])
    offsets = torch.tensor([0, 2, 2, 6])  # bag 1 is empty
    fn = lambda w, i, o, **kw: F.embedding_bag(i, w, o, mode=mode, **kw)  # noqa: E731
    check(fn, w, idx, offsets, grad=True)
    check(lambda w, i, o: fn(w, i, o, padding_idx=4), w, idx, offsets, grad=True)
    check(lambda w, i, o: fn(w, i, o, include_last_offset=True), w, idx, torch.tensor([0, 2, 2, 6, 9]), grad=True)
    check(lambda w, i: F.embedding_bag(i, w, mode=mode), w, idx.reshape(3, 3), grad=True)  # 2-d input: fixed-size bags
    if mode == "sum":
        psw = rand(9, grad=True, seed=1)
        check(lambda w, i, o, p: fn(w, i, o, per_sample_weights=p), w, idx, offsets, psw, grad=True)
    if mode != "max":
        # scale_grad_by_freq: torch 2.13's CPU kernel divides by the wrong count
        # (pytorch/pytorch#190063); compare with the equivalent embedding + reduction.
        i2 = idx.reshape(3, 3)
        wt = w.detach().to(TPU).requires_grad_()
        out = F.embedding_bag(i2.to(TPU), wt, mode=mode, scale_grad_by_freq=True)
        wc = w.detach().clone().requires_grad_()
        emb = F.embedding(i2, wc, scale_grad_by_freq=True)
        ref = emb.sum(1) if mode == "sum" else emb.mean(1)
        g = randn(*ref.shape, seed=5)
        out.backward(g.to(TPU))
        ref.backward(g)
        torch.testing.assert_close(out.detach().cpu(), ref.detach())
        torch.testing.assert_close(wt.grad.cpu(), wc.grad)


def test_embedding_bag_bf16():
    w = randn(10, 3, dtype=torch.bfloat16, grad=True)
    idx = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 0])
    for mode in ("sum", "max"):
        check(lambda w, i, o: F.embedding_bag(i, w, o, mode=mode), w, idx, torch.tensor([0, 3, 7]), grad=True)


# ================================================================== distances


@pytest.mark.parametrize("p", [0.0, 1.0, 1.5, 2.0, 3.0, INF])
def test_cdist(p):
    x1 = randn(2, 4, 3, grad=True)
    x2 = randn(2, 5, 3, grad=True, seed=1)
    x2.data[0, 0] = x1.data[0, 0]  # a zero distance: its gradient is 0
    check(lambda a, b: torch.cdist(a, b, p=p, compute_mode="donot_use_mm_for_euclid_dist"), x1, x2, grad=True)


def test_cdist_broadcast_and_mm_path_pdist():
    a, b = randn(1, 4, 3, grad=True), randn(3, 5, 3, grad=True, seed=1)
    check(lambda a, b: torch.cdist(a, b, p=1.0), a, b, grad=True)
    # large inputs take the matmul-based Euclidean path
    check(torch.cdist, randn(30, 3, grad=True), randn(40, 3, grad=True, seed=1), grad=True, atol=1e-4, rtol=1e-4)
    for p in (2.0, 0.5, INF):
        check(lambda x: F.pdist(x, p=p), randn(5, 3, grad=True), grad=True)


# ==================================================================== dropout


def test_dropout_statistics():
    p = 0.3
    x = torch.ones(200, 500, device=TPU)
    torch.manual_seed(123)
    y, mask = torch.ops.aten.native_dropout(x, p, True)
    assert y.device.type == "tpu" and mask.dtype == torch.bool
    y, mask = y.cpu(), mask.cpu()
    kept = mask.float().mean().item()
    assert abs(kept - (1 - p)) < 0.01, kept
    # kept elements are scaled by 1/(1-p), dropped ones are zero
    torch.testing.assert_close(y[mask], torch.full_like(y[mask], 1 / (1 - p)))
    assert (y[~mask] == 0).all()
    # reproducible under torch.manual_seed, different for another seed
    torch.manual_seed(123)
    _, mask2 = torch.ops.aten.native_dropout(x, p, True)
    assert torch.equal(mask, mask2.cpu())
    torch.manual_seed(124)
    _, mask3 = torch.ops.aten.native_dropout(x, p, True)
    assert not torch.equal(mask, mask3.cpu())
    # two draws in a row differ (the generator advances)
    _, mask4 = torch.ops.aten.native_dropout(x, p, True)
    assert not torch.equal(mask3.cpu(), mask4.cpu())


def test_dropout_eval_edge_p_and_bf16():
    x = randn(50, 40)
    xt = x.to(TPU)
    y, mask = torch.ops.aten.native_dropout(xt, 0.5, False)
    assert torch.equal(y.cpu(), x) and mask.cpu().all()
    y, mask = torch.ops.aten.native_dropout(xt, 0.0, True)
    assert torch.equal(y.cpu(), x) and mask.cpu().all()
    y, mask = torch.ops.aten.native_dropout(xt, 1.0, True)
    assert (y.cpu() == 0).all() and not mask.cpu().any()
    xb = torch.ones(100, 100, dtype=torch.bfloat16, device=TPU)
    y, mask = torch.ops.aten.native_dropout(xb, 0.25, True)
    assert y.dtype == torch.bfloat16
    vals = torch.unique(y.cpu().float())
    torch.testing.assert_close(vals, torch.tensor([0.0, 4 / 3]).to(torch.bfloat16).float())


def test_dropout_module_grad():
    torch.manual_seed(7)
    x = torch.ones(64, 64, device=TPU, requires_grad=True)
    y = F.dropout(x, 0.4, training=True)
    g = torch.full((64, 64), 2.0)
    y.backward(g.to(TPU))
    y, grad = y.detach().cpu(), x.grad.cpu()
    mask = y != 0
    # gradient = g * mask / (1 - p), the same mask as the forward
    torch.testing.assert_close(grad, torch.where(mask, g / 0.6, torch.zeros(())))
    before = torchtpu.fallback_counts()
    torch.ops.aten.native_dropout_backward(g.to(TPU), mask.to(TPU), 2.5)
    assert torchtpu.fallback_counts() == before
    check(lambda g, m: torch.ops.aten.native_dropout_backward(g, m, 2.5), g, mask)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("size, align_corners", [((4, 5), False), ((3, 3), True), ((11, 13), False), ((7, 2), False)])
def test_antialiased_resampling(mode, size, align_corners):
    # Downsampling widens the filter by the scale (every input pixel under an
    # output pixel counts); upsampling is the plain filter.  Forward and
    # gradient on the device, none on the CPU.
    x = randn(2, 3, 9, 8, grad=True)
    check(lambda t: F.interpolate(t, size=size, mode=mode, antialias=True, align_corners=align_corners), x,
          grad=True)


def test_antialiased_resampling_scale_factor_and_bf16():
    x = randn(1, 2, 20, 17)
    check(lambda t: F.interpolate(t, scale_factor=0.3, mode="bilinear", antialias=True), x)
    # ATen's CPU kernel has no 16-bit version (CUDA's has): compare in float32
    out = F.interpolate(x.to(TPU).bfloat16(), size=(5, 6), mode="bilinear", antialias=True)
    torch.testing.assert_close(out.cpu().float(), F.interpolate(x, size=(5, 6), mode="bilinear", antialias=True),
                               atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("kwargs", [
    dict(scale_factor=1.3, mode="bilinear"), dict(size=(12, 14), mode="bilinear", align_corners=True),
    dict(size=(12, 14), mode="bicubic"), dict(size=(3, 4), mode="bicubic", antialias=True),
    dict(size=(3, 4), mode="bilinear", antialias=True)], ids=str)
def test_float64_resampling_weights_in_float64(kwargs):
    # ATen computes a double input's source positions and weights in double;
    # tpu used float32 ones (errors ~1e-6; found by an nn probe)
    x = torch.randn(1, 2, 9, 11, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(F.interpolate(x.to(TPU), **kwargs).cpu(), F.interpolate(x, **kwargs),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("antialias", [False, True])
def test_uint8_images_resample_like_the_cpu(antialias):
    # ATen resamples uint8 in 16-bit fixed point with rounding and clamping:
    # not lowered, ATen's kernel runs on the CPU; other integer inputs raise
    # there, as on the CPU.
    x = torch.randint(0, 256, (1, 3, 9, 11), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    for mode in ("bilinear", "bicubic"):
        expected = F.interpolate(x, size=(5, 7), mode=mode, antialias=antialias)
        out = F.interpolate(x.to(TPU), size=(5, 7), mode=mode, antialias=antialias).cpu()
        assert out.dtype == torch.uint8 and torch.equal(out, expected)
    with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):
        F.interpolate(x.long().to(TPU), size=(5, 7), mode="bilinear", antialias=antialias)


@pytest.mark.parametrize("dims, fmt", [(2, torch.channels_last), (3, torch.channels_last_3d)])
@pytest.mark.parametrize("which", ["input", "weight", "neither"])
def test_convolution_keeps_channels_last_as_the_cpu_does(dims, fmt, which):
    x = torch.randn((2, 3) + (5,) * dims)
    w = torch.randn((4, 3) + (3,) * dims)
    if which == "input":
        x = x.to(memory_format=fmt)
    elif which == "weight":
        w = w.to(memory_format=fmt)
    conv = F.conv2d if dims == 2 else F.conv3d
    want = conv(x, w, padding=1)
    got = conv(x.to("tpu"), w.to("tpu"), padding=1)
    assert got.stride() == want.stride()
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5)


_DENSE_LAYOUTS = {
    "contiguous": lambda t: t.contiguous(),
    "permuted": lambda t: t,  # (dense, not channels-last: ATen's outputs are contiguous)
    "channels_last": lambda t: t.contiguous(memory_format=torch.channels_last),
    "h and w swapped": lambda t: t.transpose(2, 3),
}


@pytest.mark.parametrize("layout", sorted(_DENSE_LAYOUTS))
@pytest.mark.parametrize("op", ["batch_norm train", "batch_norm eval", "batch_norm without stats", "roll", "roll 2 dims",
                                "flat roll"])
def test_output_layout_follows_the_inputs_suggested_format_as_on_cpu(layout, op):
    # A wrong layout shows as .view() raising on one device only
    fns = {
        "batch_norm train": lambda x: F.batch_norm(x, torch.zeros(3, device=x.device), torch.ones(3, device=x.device),
                                                   training=True),
        "batch_norm eval": lambda x: F.batch_norm(x, torch.zeros(3, device=x.device), torch.ones(3, device=x.device)),
        "batch_norm without stats": lambda x: F.batch_norm(x, None, None, training=True),
        "roll": lambda x: x.roll(1, 2),
        "roll 2 dims": lambda x: x.roll((1, -1), (2, 3)),
        "flat roll": lambda x: x.roll(1),
    }
    x = _DENSE_LAYOUTS[layout](torch.randn(4, 5, 2, 3, generator=torch.Generator().manual_seed(0)).permute(2, 3, 0, 1))
    want = fns[op](x)
    got = fns[op](x.to("tpu"))
    assert got.stride() == want.stride()
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("pool", [lambda x: F.max_pool1d(x[..., 0, 0], 2), lambda x: F.max_pool2d(x[..., 0], 2),
                                  lambda x: F.max_pool3d(x, 2), lambda x: F.adaptive_max_pool2d(x[..., 0], 2)],
                         ids=["max_pool1d", "max_pool2d", "max_pool3d", "adaptive_max_pool2d"])
def test_max_pool_backward_of_an_empty_batch(pool):
    for device in ("cpu", "tpu"):
        x = torch.zeros(0, 3, 4, 4, 4, device=device, requires_grad=True)
        pool(x).sum().backward()
        assert x.grad.shape == x.shape and x.grad.device.type == device


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("given_hx", [True, False])
def test_compiled_gru_cell_is_one_graph_each_way(bias, given_hx):
    # _thnn_fused_gru_cell and its backward had only eager handlers: a
    # compiled GRUCell ran op by op ("no lowering for ...")
    import copy

    torch._dynamo.reset()
    torchtpu.compile.reset_compile_stats()
    try:
        cell = torch.nn.GRUCell(5, 7, bias=bias)
        tcell = copy.deepcopy(cell).to(TPU)
        x, hx = randn(3, 5, seed=1), randn(3, 7, seed=2)
        xc, xt = x.clone().requires_grad_(), x.to(TPU).requires_grad_()
        hc = hx.clone().requires_grad_() if given_hx else None
        ht = hx.to(TPU).requires_grad_() if given_hx else None
        step = torch.compile(lambda m, a, h: m(a, h) * 2, backend="tpu")
        want, got = cell(xc, hc) * 2, step(tcell, xt, ht)
        want.square().sum().backward()
        got.square().sum().backward()
        assert_close(got, want, rtol=1e-4, atol=1e-5)
        assert_close(xt.grad, xc.grad, rtol=1e-4, atol=1e-5)
        if given_hx:
            assert_close(ht.grad, hc.grad, rtol=1e-4, atol=1e-5)
        for (name, p), q in zip(cell.named_parameters(), tcell.parameters()):
            assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5)
        graphs = torchtpu.compile_stats()["per_graph"]
        assert {g["name"].rsplit("_", 1)[1] for g in graphs} == {"forward", "backward"}
        assert [g["fallback"] for g in graphs if g["fallback"]] == []
    finally:
        torch._dynamo.reset()


@pytest.mark.parametrize("shape, n, replacement", [
    ((5,), 6, False), ((2, 4), 9, False), ((), 1, False), ((), 1, True), ((1, 1, 3), 1, False)], ids=str)
def test_multinomial_bad_sizes_raise_like_the_cpu(shape, n, replacement):
    # without replacement, more samples than categories raised JAX's top_k
    # ValueError; a 0-d / 3-d input raised the meta kernel's wording
    import re

    probs = rand(12, low=0.1)[: math.prod(shape)].reshape(shape)
    with pytest.raises(RuntimeError) as cpu:
        torch.multinomial(probs, n, replacement)
    message = str(cpu.value).split("\n")[0]
    assert "prob_dist" in message
    with pytest.raises(RuntimeError, match=f"^{re.escape(message)}"):
        torch.multinomial(probs.to(TPU), n, replacement).cpu()


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("shape, pad, fmt", [
    ((2, 4, 7, 8), (1, 1, 1, 1), torch.channels_last),
    ((2, 4, 5, 6, 7), (1, 2, 1, 1, 2, 1), torch.channels_last_3d),
    ((4, 5, 6, 7), (1, 1, 2, 1, 1, 1), torch.channels_last),  # (unbatched 3-d padding)
    ((2, 4, 7, 8), (2, 1, 1, 2), torch.contiguous_format),
    ((2, 1, 7, 8), (1, 1, 1, 1), torch.channels_last)], ids=str)
def test_padding_modes_keep_the_cpu_memory_format(mode, shape, pad, fmt):
    # ATen's reflection/replication pads allocate the output and grad_input in
    # the input's suggested memory format; tpu returned contiguous tensors
    x = randn(*shape).contiguous(memory_format=fmt)
    want = F.pad(x, pad, mode=mode)
    got = F.pad(x.to(TPU), pad, mode=mode)
    assert got.stride() == want.stride()
    assert torch.equal(got.cpu(), want)
    if mode == "circular":
        return  # (a composite: its backward is autograd's)
    op = {"reflect": "reflection", "replicate": "replication"}[mode] + f"_pad{len(pad) // 2}d_backward"
    backward = getattr(torch.ops.aten, op)
    grad = randn(*want.shape, seed=1)
    for g in (grad, grad.contiguous(memory_format=fmt)):
        want_grad = backward(g, x, list(pad))
        got_grad = backward(g.to(TPU), x.to(TPU), list(pad))
        assert got_grad.stride() == want_grad.stride()
        assert_close(got_grad, want_grad, rtol=1e-5, atol=1e-5)


def _raises_like_cpu(fn, *args):
    """fn on the CPU and on tpu raise the same error type and message."""
    with pytest.raises(Exception) as cpu:
        fn(*args)
    with pytest.raises(type(cpu.value)) as got:
        fn(*(a.to(TPU) for a in args))
    assert str(got.value) == str(cpu.value)


def _name(v):
    return getattr(v, "__name__", str(v))


@pytest.mark.parametrize("fn, x_shape, w_shape, kw", [
    (F.conv_transpose2d, (1, 3, 4, 4), (3, 2, 3, 3), dict(stride=2, output_padding=2)),
    (F.conv_transpose2d, (1, 3, 4, 4), (3, 2, 3, 3), dict(stride=1, output_padding=1)),
    (F.conv_transpose1d, (1, 3, 5), (3, 2, 3), dict(stride=2, dilation=2, output_padding=2)),
    (F.conv_transpose3d, (1, 3, 4, 4, 4), (3, 2, 3, 3, 3), dict(stride=2, output_padding=2)),
    (F.conv_transpose2d, (1, 3, 4, 4), (3, 2, 3, 3), dict(stride=2, output_padding=-1)),
    (F.conv_transpose1d, (1, 4, 5), (3, 2, 3), {}),
    (F.conv_transpose2d, (1, 4, 5, 5), (3, 2, 3, 3), {}),
    (F.conv_transpose3d, (1, 4, 5, 5, 5), (3, 2, 3, 3, 3), {}),
    (F.conv_transpose2d, (1, 4, 5, 5), (4, 2, 3, 3), dict(groups=3)),
    (F.conv2d, (1, 4, 5, 5), (3, 2, 3, 3), dict(groups=2))], ids=_name)
def test_conv_transpose_bad_arguments_raise_like_the_cpu(fn, x_shape, w_shape, kw):
    # the transposed path skipped ATen's checks: a too large output_padding
    # returned a tensor, wrong channels or groups raised JAX's errors
    _raises_like_cpu(lambda x, w: fn(x, w, **kw), randn(*x_shape), randn(*w_shape, seed=1))


def test_conv_transpose_bias_size_raises_like_the_cpu():
    _raises_like_cpu(lambda x, w, b: F.conv_transpose2d(x, w, b), randn(1, 3, 5, 5), randn(3, 2, 3, 3), randn(3))


def test_conv_transpose_output_padding_below_dilation_is_allowed():
    x, w = randn(1, 3, 5, 5), randn(3, 2, 3, 3, seed=1)
    check(lambda x, w: F.conv_transpose2d(x, w, stride=(2, 1), dilation=(1, 2), output_padding=1), x, w)


@pytest.mark.parametrize("fn, shape, size", [
    (F.adaptive_max_pool1d, (1, 1, 6), 0),
    (F.adaptive_max_pool2d, (1, 1, 6, 6), (0, 2)),
    (F.adaptive_max_pool3d, (1, 2, 6, 6, 6), (2, 0, 2))], ids=_name)
def test_adaptive_max_pool_empty_output(fn, shape, size):
    # np.max over no windows raised ValueError; the CPU returns empty tensors
    check(lambda x: fn(x, size, return_indices=True), randn(*shape))


@pytest.mark.parametrize("fn, shape", [
    (F.adaptive_avg_pool1d, (1, 1, 0)),
    (F.adaptive_avg_pool2d, (1, 1, 0, 6)),
    (F.adaptive_avg_pool2d, (2, 0, 6)),
    (F.adaptive_avg_pool3d, (1, 1, 2, 6, 0))], ids=_name)
def test_adaptive_avg_pool_empty_input_raises_like_the_cpu(fn, shape):
    # the empty windows returned NaN
    _raises_like_cpu(lambda x: fn(x, 2), randn(*shape))


def test_adaptive_avg_pool_empty_batch_is_allowed():
    check(lambda x: F.adaptive_avg_pool2d(x, 2), randn(0, 1, 6, 6))


@pytest.mark.parametrize("shape, size, mode", [
    ((1, 1, 0, 6), (2, 2), "nearest"),
    ((1, 1, 0, 6), (2, 2), "nearest-exact"),
    ((1, 1, 0, 6), (2, 2), "bilinear"),
    ((1, 1, 0, 6), (2, 2), "bicubic"),
    ((1, 1, 4, 6), (0, 2), "bilinear"),
    ((1, 1, 0), 2, "nearest"),
    ((1, 1, 0), 2, "linear"),
    ((1, 1, 0, 6, 6), (2, 2, 2), "nearest"),
    ((1, 1, 0, 6, 6), (2, 2, 2), "trilinear")], ids=str)
def test_interpolate_empty_sizes_raise_like_the_cpu(shape, size, mode):
    # the meta kernels and JAX's gathers raised TypeError/IndexError/ZeroDivisionError
    _raises_like_cpu(lambda x: F.interpolate(x, size=size, mode=mode), randn(*shape))


def test_interpolate_antialiased_empty_input_raises_like_the_cpu():
    _raises_like_cpu(lambda x: F.interpolate(x, size=(2, 2), mode="bilinear", antialias=True), randn(1, 1, 0, 6))


@pytest.mark.parametrize("loss", [F.binary_cross_entropy, F.mse_loss, F.smooth_l1_loss, F.huber_loss], ids=_name)
def test_loss_backward_of_an_empty_mean_is_empty(loss):
    # the lowering's 1 / numel and the meta kernels' (meta_fixes.py) raised ZeroDivisionError
    check(lambda x, t: loss(x, t), rand(0, grad=True), rand(0, seed=1), grad=True, equal_nan=True)


def _raises_at_sync_like_cpu(fn, *args):
    """fn on the CPU raises; on tpu a device-side check raises the same
    message (with its note appended) once the result is read."""
    import re

    with pytest.raises(Exception) as cpu:
        fn(*args)
    with pytest.raises(type(cpu.value), match=f"^{re.escape(str(cpu.value))}"):
        fn(*(a.to(TPU) for a in args)).cpu()


_aten = torch.ops.aten


@pytest.mark.parametrize("target", [[3, 0], [-1, 0]], ids=str)
def test_multi_margin_target_out_of_range_raises_like_the_cpu(target):
    x, t = randn(2, 3), torch.tensor(target)
    _raises_at_sync_like_cpu(lambda x, t: F.multi_margin_loss(x, t), x, t)
    _raises_at_sync_like_cpu(lambda x, t: F.multi_margin_loss(x[0], t[0]), x, t)
    _raises_at_sync_like_cpu(lambda x, t: _aten.multi_margin_loss_backward(
        torch.ones((), device=x.device), x, t, 1, 1.0, None, 1), x, t)


@pytest.mark.parametrize("target", [[[5, -1, 0], [0, 1, -1]], [[0, -1, 5], [0, 1, -1]], [[0, -2, 1], [0, 1, -1]]],
                         ids=str)
def test_multilabel_margin_target_out_of_range_raises_like_the_cpu(target):
    # ATen checks every slot, those after the first -1 too
    x, t = randn(2, 3), torch.tensor(target)
    _raises_at_sync_like_cpu(lambda x, t: F.multilabel_margin_loss(x, t), x, t)
    _raises_at_sync_like_cpu(lambda x, t: _aten.multilabel_margin_loss_backward(
        torch.ones((), device=x.device), x, t, 1, torch.zeros(2, 3, device=x.device)), x, t)


def test_margin_losses_in_range_targets_still_work():
    x = randn(2, 3, grad=True)
    check(lambda x: F.multi_margin_loss(x, torch.tensor([2, 0], device=x.device)), x, grad=True)
    check(lambda x: F.multilabel_margin_loss(x, torch.tensor([[2, -1, 1], [0, 1, -1]], device=x.device)), x, grad=True)


@pytest.mark.parametrize("beta", [-1.0, float("nan")], ids=str)
def test_smooth_l1_negative_beta_raises_like_the_cpu(beta):
    _raises_like_cpu(lambda x, y: F.smooth_l1_loss(x, y, beta=beta), randn(2, 3), randn(2, 3, seed=1))


@pytest.mark.parametrize("fn, dtype", [
    (lambda x: _aten.smooth_l1_loss(x, x), torch.int64),
    (lambda x: _aten.huber_loss(x, x), torch.int32),
    (lambda x: _aten.binary_cross_entropy(x, x), torch.uint8),
    (lambda x: _aten.mse_loss(x, x), torch.complex64),
    (lambda x: _aten.binary_cross_entropy_with_logits(x, x), torch.complex64),
    (lambda x: _aten.huber_loss_backward(torch.ones((), dtype=x.dtype, device=x.device), x, x, 1, 1.0), torch.int64),
    (lambda x: _aten.binary_cross_entropy_backward(torch.ones((), dtype=x.dtype, device=x.device), x, x), torch.int64),
    (lambda x: _aten.mse_loss_backward(torch.ones((), dtype=x.dtype, device=x.device), x, x, 1), torch.complex64),
], ids=["smooth_l1", "huber", "bce", "mse", "bce_with_logits", "huber_backward", "bce_backward", "mse_backward"])
def test_loss_kernel_dtypes_raise_like_the_cpu(fn, dtype):
    _raises_like_cpu(fn, torch.ones(3, dtype=dtype))


def test_loss_backward_integer_inputs_work_like_the_cpu():
    # (ATen's mse and smooth_l1 backward kernels take integers)
    x = torch.arange(6).reshape(2, 3)
    check(lambda x, y: _aten.mse_loss_backward(torch.ones((), dtype=x.dtype, device=x.device), x, y, 2), x, x.flip(0))
    check(lambda x, y: _aten.smooth_l1_loss_backward(torch.ones((), dtype=x.dtype, device=x.device), x, y, 2, 1.0),
          x, x.flip(0))


def test_loss_dtype_mismatches_raise_like_the_cpu():
    x, y = rand(2, 3), rand(2, 3, seed=1)
    _raises_like_cpu(lambda x, y: _aten.binary_cross_entropy(x, y.double()), x, y)
    _raises_like_cpu(lambda x, y: _aten.binary_cross_entropy_backward(torch.ones((), device=x.device), x, y.double()),
                     x, y)
    _raises_like_cpu(lambda x, y: _aten.binary_cross_entropy_backward(
        torch.ones((), dtype=torch.float64, device=x.device), x, y), x, y)
    t = torch.tensor([0, 1])
    _raises_like_cpu(lambda x, t, w: F.multi_margin_loss(x, t, weight=w), x, t, y[0].double())


def test_binary_cross_entropy_other_reduction_values_are_unreduced():
    # ATen's apply_loss_reduction leaves the loss unreduced for any value but 1 and 2
    check(lambda x, y: _aten.binary_cross_entropy(x, y, None, 3), rand(2, 3, low=0.1, high=0.9), rand(2, 3, seed=1))
