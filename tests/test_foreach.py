"""_foreach_* lowerings (torchtpu/ops/lowerings/foreach.py) against the CPU."""

import pytest
import torch
import torchtpu
from utils import TPU
from utils import check as _check

NAN = float("nan")


def check(fn, *args, **kw):
    """utils.check, with NaN == NaN (many cases here produce NaN on purpose)."""
    kw.setdefault("equal_nan", True)
    return _check(fn, *args, **kw)


def rand(*shape, dtype=torch.float32, low=-2.0, high=2.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=g, dtype=torch.float64) * (high - low) + low).to(dtype)


SHAPES = [(3, 4), (5,), (2, 3, 2), ()]


def tensors(seed=0, low=-2.0, high=2.0, dtype=torch.float32):
    return [rand(*s, low=low, high=high, seed=seed + k, dtype=dtype) for k, s in enumerate(SHAPES)]


def mixed(seed=0):
    """Different dtypes in one list (torch allows it; each element promotes on its own)."""
    return [
        rand(3, 4, seed=seed),
        rand(5, seed=seed + 1, dtype=torch.bfloat16),
        rand(2, 2, seed=seed + 2, dtype=torch.float64),
    ]


def inplace(fn):
    """Run an in-place foreach op and return the updated list."""

    def run(xs, *rest):
        fn(xs, *rest)
        return xs

    return run


def count_calls(fn):
    """Lowered dispatcher calls made by fn (a foreach call must be one kernel call)."""

    def total():
        s = torchtpu.kernel_cache_stats()
        return s["calls"] + s.get("fast_hits", 0)

    before = total()
    fn()
    return total() - before


# --------------------------------------------------------------------- unary

UNARY = ["abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "erfc", "exp", "expm1", "floor", "frac",
         "lgamma", "log", "log10", "log1p", "log2", "neg", "reciprocal", "round", "rsqrt", "sigmoid", "sign",
         "sin", "sinh", "sqrt", "tan", "tanh", "trunc"]  # fmt: skip
POSITIVE = {"log", "log10", "log2", "sqrt", "rsqrt", "lgamma", "reciprocal"}


@pytest.mark.parametrize("name", UNARY)
def test_unary(name):
    fn = getattr(torch, "_foreach_" + name)
    fn_ = getattr(torch, "_foreach_" + name + "_")
    low, high = (0.2, 3.0) if name in POSITIVE else (-0.9, 0.9)
    xs = tensors(low=low, high=high)
    check(fn, xs)
    check(inplace(fn_), xs)


def test_unary_mixed_dtypes_noncontiguous_and_single_call():
    xs = mixed()
    check(torch._foreach_exp, xs)
    check(inplace(torch._foreach_neg_), xs)
    check(lambda ts: torch._foreach_sqrt([t.t() for t in ts]), [rand(3, 4, low=0, high=2), rand(4, 2, low=0, high=2)])
    check(torch._foreach_abs, [torch.tensor([-3, 4]), rand(3)])  # an integer element keeps its dtype
    ys = [t.to(TPU) for t in tensors()]
    assert count_calls(lambda: torch._foreach_sqrt_(ys)) == 1


# -------------------------------------------------------------------- binary

BINARY = ["add", "sub", "mul", "div", "maximum", "minimum", "clamp_min", "clamp_max", "pow"]


@pytest.mark.parametrize("name", BINARY)
def test_binary_overloads(name):
    fn = getattr(torch, "_foreach_" + name)
    fn_ = getattr(torch, "_foreach_" + name + "_")
    positive = name == "pow"
    xs = tensors(low=0.2 if positive else -2.0)
    ys = tensors(seed=10, low=0.5, high=2.0)
    scalars = [1.5, -0.5, 2.0, 0.25]
    check(fn, xs, ys)  # List
    check(inplace(fn_), xs, ys)
    check(lambda a: fn(a, 0.75), xs)  # Scalar
    check(inplace(lambda a: fn_(a, 0.75)), xs)
    check(lambda a: fn(a, scalars), xs)  # ScalarList
    check(inplace(lambda a: fn_(a, scalars)), xs)
    if name in ("add", "mul", "div"):
        # Tensor overload: a 0-dim tensor on the tpu, or on the CPU
        check(lambda a, s: fn(a, s), xs, torch.tensor(1.25))
        x_tpu = [t.to(TPU) for t in xs]
        for s in (torch.tensor(1.25), torch.tensor(-0.5, dtype=torch.float64)):
            got = fn(x_tpu, s)
            want = fn(xs, s)
            for g, w in zip(got, want):
                torch.testing.assert_close(g.cpu(), w)


def test_add_sub_alpha():
    xs = tensors()
    ys = tensors(seed=10)
    check(lambda a, b: torch._foreach_add(a, b, alpha=-0.3), xs, ys)
    check(inplace(lambda a, b: torch._foreach_sub_(a, b, alpha=2)), xs, ys)
    check(lambda a, s: torch._foreach_add(a, s, alpha=3), xs, torch.tensor(0.5))
    check(inplace(lambda a, s: torch._foreach_add_(a, s, alpha=3)), xs, torch.tensor(0.5))


def test_binary_promotion_and_int():
    ints = [torch.tensor([1, 2, 3]), torch.tensor([[4, -5]])]
    check(lambda a: torch._foreach_add(a, 2), ints)
    check(lambda a: torch._foreach_mul(a, 1.5), ints)  # int list * float -> float results
    check(lambda a: torch._foreach_div(a, 2), ints)
    check(lambda a: torch._foreach_pow(a, 2), ints)
    check(lambda a, b: torch._foreach_add(a, b), mixed(), mixed(seed=5))
    check(lambda a, b: torch._foreach_mul(a, b), mixed(), [rand(3, 4, seed=7), rand(5, seed=8), rand(2, 2, seed=9)])


def test_maximum_nan():
    xs = [torch.tensor([1.0, NAN, 3.0]), torch.tensor([NAN])]
    ys = [torch.tensor([NAN, 2.0, 1.0]), torch.tensor([0.0])]
    check(torch._foreach_maximum, xs, ys)
    check(torch._foreach_minimum, xs, ys)
    check(lambda a: torch._foreach_maximum(a, 2.0), xs)
    check(lambda a: torch._foreach_clamp_max(a, [0.0, 1.0]), xs)


def test_pow_scalar_and_tensor():
    exps = tensors(low=-1, high=2)
    check(lambda e: torch._foreach_pow(2.0, e), exps)
    check(lambda e: torch._foreach_pow(0.9, e), exps)


# ------------------------------------------------------------------- ternary


@pytest.mark.parametrize("name", ["addcmul", "addcdiv"])
def test_pointwise_ternary(name):
    fn = getattr(torch, "_foreach_" + name)
    fn_ = getattr(torch, "_foreach_" + name + "_")
    xs = tensors()
    t1 = tensors(seed=10)
    t2 = tensors(seed=20, low=0.5, high=2.0)
    check(fn, xs, t1, t2)
    check(lambda a, b, c: fn(a, b, c, 0.3), xs, t1, t2)
    check(inplace(lambda a, b, c: fn_(a, b, c, value=-2)), xs, t1, t2)
    check(lambda a, b, c: fn(a, b, c, [0.1, 0.2, -0.3, 4.0]), xs, t1, t2)
    check(inplace(lambda a, b, c: fn_(a, b, c, [0.1, 0.2, -0.3, 4.0])), xs, t1, t2)
    # Tensor overload: a 1-d CPU tensor of scalars (what torch.optim passes)
    scalars = torch.tensor([0.1, 0.2, -0.3, 4.0])
    xt, t1t, t2t = ([t.to(TPU) for t in ts] for ts in (xs, t1, t2))
    before = torchtpu.fallback_counts()
    want = fn(xs, t1, t2, scalars)
    got = fn(xt, t1t, t2t, scalars)
    fn_(xt, t1t, t2t, scalars)
    assert torchtpu.fallback_counts() == before
    for g, gi, w in zip(got, xt, want):
        torch.testing.assert_close(g.cpu(), w)
        torch.testing.assert_close(gi.cpu(), w)
    with pytest.raises(RuntimeError, match="on CPU"):  # as torch: the scalars must be on the CPU
        fn(xt, t1t, t2t, scalars.to(TPU))


def test_lerp():
    xs = tensors()
    ys = tensors(seed=10)
    ws = tensors(seed=20, low=0, high=1)
    check(torch._foreach_lerp, xs, ys, ws)
    check(lambda a, b: torch._foreach_lerp(a, b, 0.3), xs, ys)
    check(inplace(lambda a, b: torch._foreach_lerp_(a, b, 0.9)), xs, ys)
    if "ScalarList" in torch.ops.aten._foreach_lerp.overloads():
        check(lambda a, b: torch._foreach_lerp(a, b, [0.1, 0.6, 0.5, 1.2]), xs, ys)
    check(lambda a, b: torch._foreach_lerp(a, b, 0.3), mixed(), mixed(seed=3))


# ------------------------------------------------------------ data movement


def test_zero_copy_clone():
    xs = tensors()
    check(inplace(torch._foreach_zero_), xs)
    check(lambda a, b: inplace(torch._foreach_copy_)(a, b), xs, tensors(seed=10))
    # copy with broadcasting and a dtype change
    src = [rand(4, seed=1, dtype=torch.bfloat16), rand(2, 2, dtype=torch.float64)]
    check(lambda a, b: inplace(torch._foreach_copy_)(a, b), [rand(3, 4), rand(2, 2)], src)
    # sources on the CPU (e.g. loading a state dict)
    dst = [t.to(TPU) for t in tensors()]
    src = tensors(seed=10)
    torch._foreach_copy_(dst, src)
    for d, s in zip(dst, src):
        torch.testing.assert_close(d.cpu(), s)
    check(lambda a: torch._foreach_clone(a) if hasattr(torch, "_foreach_clone") else a, xs)


# ---------------------------------------------------------------- reductions


@pytest.mark.parametrize("ord", [2, 1, float("inf"), float("-inf"), 0, 3.0])
def test_norm(ord):
    xs = tensors()
    check(lambda a: torch._foreach_norm(a, ord), xs)
    halves = [rand(64, dtype=torch.bfloat16), rand(3, 3, dtype=torch.bfloat16, seed=1)]
    check(lambda a: torch._foreach_norm(a, ord), halves)
    check(lambda a: torch._foreach_norm(a, ord, dtype=torch.float64), xs)


def test_max_and_powsum():
    xs = tensors()
    check(torch._foreach_max, xs)
    check(torch._foreach_max, [torch.tensor([1.0, NAN]), torch.tensor([3, -4])])
    if hasattr(torch, "_foreach_powsum"):
        for ord in (0, 1, 2, 3):
            check(lambda a: torch._foreach_powsum(a, ord), xs)


def test_clip_grad_norm_foreach():
    """torch.nn.utils.clip_grad_norm_(foreach=True): _foreach_norm, then _foreach_mul_ by a tpu 0-dim tensor."""
    grads = [rand(4, 3, seed=1) * 5, rand(7, seed=2) * 5]

    def clip(gs):
        params = [torch.zeros_like(g).requires_grad_(True) for g in gs]
        for p, g in zip(params, gs):
            p.grad = g.clone()
        norm = torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        return norm, [p.grad for p in params]

    check(clip, grads)


FOREACH_WRITES = [
    ("add_", lambda a, b: torch._foreach_add_(a, 1.5)),
    ("mul_.List", lambda a, b: torch._foreach_mul_(a, b)),
    ("addcmul_", lambda a, b: torch._foreach_addcmul_(a, b, b, value=0.5)),
    ("exp_", lambda a, b: torch._foreach_exp_(a)),
    ("zero_", lambda a, b: torch._foreach_zero_(a)),
    ("copy_", lambda a, b: torch._foreach_copy_(a, b)),
    ("lerp_", lambda a, b: torch._foreach_lerp_(a, b, 0.3)),
    ("add.Scalar_out", lambda a, b: torch.ops.aten._foreach_add.Scalar_out(b, 2.0, out=a)),
]


@pytest.mark.parametrize("name,op", FOREACH_WRITES, ids=[n for n, _ in FOREACH_WRITES])
def test_written_lists_bump_version_counters_as_on_cpu(name, op):
    """Foreach ops have no ADInplaceOrView kernel: unless the kernel bumps
    the lists it writes, autograd misses the write and a saved tensor's
    change gives a silently wrong gradient instead of its error."""
    bumps = {}
    for device in ("cpu", TPU):
        a, b = [t.to(device) for t in tensors()], [t.to(device) for t in tensors(seed=5)]
        before = [t._version for t in a + b]
        op(a, b)
        bumps[device] = [t._version - v for t, v in zip(a + b, before)]
    assert bumps[TPU] == bumps["cpu"]
    assert all(n == 1 for n in bumps[TPU][: len(SHAPES)])

    errors = {}
    for device in ("cpu", TPU):
        w = torch.ones(3, device=device, requires_grad=True)
        saved = (w * 1).exp()  # exp's backward reads its result
        with pytest.raises(RuntimeError) as error:  # ("modified by an inplace operation", mostly)
            op([saved], [torch.ones(3, device=device)])
            saved.sum().backward()
        errors[device] = str(error.value).split(":")[0]  # (before the tensor's type name)
    assert errors[TPU] == errors["cpu"]


def test_optimizer_foreach_step_bumps_parameter_versions():
    p = torch.nn.Parameter(torch.ones(4, device=TPU))
    opt = torch.optim.Adam([p], foreach=True)
    p.grad = torch.ones(4, device=TPU)
    before = p._version
    opt.step()
    assert p._version == before + 1


def test_lists_spanning_two_devices_run_per_device():
    """CUDA's slow path: a list over tpu:0 and tpu:1 works element by element
    (a compiled opt.step over a model split across devices issues these)."""
    cpu_a, cpu_b, cpu_c = tensors(seed=0), tensors(seed=10), tensors(seed=20)
    places = ["tpu:0", "tpu:1", "tpu:1", "tpu:0"]
    a, b, c = ([t.to(d) for t, d in zip(ts, places)] for ts in (cpu_a, cpu_b, cpu_c))
    scalars = [0.5, 2.0, -1.0, 3.0]

    torch._foreach_add_(a, b, alpha=2)
    torch._foreach_add_(cpu_a, cpu_b, alpha=2)
    torch._foreach_addcmul_(a, b, c, torch.tensor(scalars))
    torch._foreach_addcmul_(cpu_a, cpu_b, cpu_c, torch.tensor(scalars))
    results = [a, torch._foreach_mul(a, scalars), torch._foreach_norm(a), torch._foreach_sqrt(torch._foreach_abs(a))]
    expected = [cpu_a, torch._foreach_mul(cpu_a, scalars), torch._foreach_norm(cpu_a),
                torch._foreach_sqrt(torch._foreach_abs(cpu_a))]
    for got, want in zip(results, expected):
        assert [t.device for t in got] == [torch.device(d) for d in places]
        for g, w in zip(got, want):
            torch.testing.assert_close(g.cpu(), w)
