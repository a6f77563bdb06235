"""PyTorch's OpInfo database (`op_db`) run against the `tpu` device.

Shared by tests/test_opinfo.py (the CI suite) and `python -m
torchtpu.tools.coverage` (docs/ops.md).  A *case* is one check of one OpInfo
entry:

    forward-<op>-<dtype>   every sample (up to a cap) on CPU and on tpu, compared
    backward-<op>          float32 gradients against CPU autograd
    inplace-<op>           the in-place variant (float32, or the op's first dtype)
    out-<op>               the out= variant
    noncontig-<op>         OpInfo's non-contiguous samples (tpu tensors with the
                           same strides and storage offsets as the CPU ones)

Random ops (their values cannot match the CPU's generator) are checked for
shape, dtype, range and reproducibility under a seed instead.  A case passes
only if nothing fell back to the CPU (`torchtpu.fallback_counts()`).

Samples are generated on the CPU (so both sides see the same values) and
copied to tpu with their exact layout (strides, storage offset, the whole
storage), so the tpu kernels read through the same views the CPU ones do.
"""

import contextlib
import itertools
import math
import warnings
from dataclasses import dataclass

import torch
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

import torchtpu

TPU = torch.device("tpu", 0)
CPU = torch.device("cpu")

# dtypes the suite covers (where the op supports them on CPU)
DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.bool)
DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16",
               torch.int64: "int64", torch.int32: "int32", torch.bool: "bool"}  # fmt: skip

# Samples per case: OpInfo gives up to dozens per op, each a distinct kernel
# signature (a compilation, ~0.1-0.5 s on the CPU); the first few cover the
# op's argument forms.  These caps keep the whole run (~4800 cases) inside
# CI's budget (2 cores, 25 minutes).
MAX_SAMPLES = {torch.float32: 2}
MAX_SAMPLES_OTHER = 1
MAX_SAMPLES_VARIANT = 1  # in-place, out=, non-contiguous
MAX_SAMPLES_BACKWARD = 1
MAX_SAMPLES_RANDOM = 1  # random kernels (threefry) are slow to compile

# Base tolerances (tests/utils.py's): XLA's math library and reduction order
# differ from ATen's CPU kernels by a few ulps.  OpInfo's own overrides widen them.
TOLERANCES = {
    torch.float32: (1e-5, 1.3e-5),
    torch.float64: (1e-7, 1e-7),
    torch.complex64: (1e-5, 1.3e-5),
    torch.complex128: (1e-7, 1e-7),
    torch.bfloat16: (1e-2, 1.6e-2),
    torch.float16: (1e-3, 1e-3),
}

# OpInfo tests whose tolerance overrides apply to a device-vs-CPU comparison.
_TOL_TESTS = {
    None, "test_compare_cpu", "test_variant_consistency_eager", "test_noncontiguous_samples",
    "test_comprehensive", "test_out", "test_reference_numerics_normal", "test_numpy_ref",
    "test_reference_numerics_small", "test_fn_grad", "test_python_ref", "test_reference_testing",
}  # fmt: skip


class Skip(Exception):
    """Nothing to check (no sample runs on the CPU, ...)."""


class FellBack(AssertionError):
    """The op ran, but (part of it) on the CPU."""


# ------------------------------------------------------------------ op_db


_DB = None


def op_db():
    global _DB
    if _DB is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from torch.testing._internal.common_methods_invocations import op_db as db
        _DB = {op_name(op): op for op in db}
    return _DB


def op_name(op):
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


# Ops whose results depend on the random generator.  Value: a check of the
# tpu result (input sample, output) beyond shape/dtype/reproducibility, or None.
def _binary(sample, out):
    for t in _tensors(out):
        assert bool(((t == 0) | (t == 1)).all()), "bernoulli values must be 0 or 1"


def _subset_of_input(sample, out):
    """max pooling with random windows: every output value is an input value."""
    values = sample.input.detach().float().reshape(-1)
    res = _tensors(out)[0].detach().float().reshape(-1)
    assert bool(torch.isin(res, values).all()), "pooled values not in the input"


def _dropout_like(sample, out):
    """Each output element is 0 or the input scaled by one common factor."""
    x = sample.input.detach().float()
    y = _tensors(out)[0].detach().float()
    kept = y != 0
    if bool(kept.any()):
        ratio = y[kept] / x[kept]
        torch.testing.assert_close(ratio, ratio[:1].expand_as(ratio), atol=1e-3, rtol=1e-3)


def _nonnegative(sample, out):
    for t in _tensors(out):
        if t.dtype.is_floating_point:
            assert bool((t.float() >= 0).all()), "negative values"


def _geometric(sample, out):
    for t in _tensors(out):
        assert bool((t.float() >= 1).all()), "geometric values must be >= 1"


def _lowrank(sample, out):
    """svd/pca_lowrank: singular values are nonnegative and sorted."""
    s = _tensors(out)[1].float()
    assert bool((s >= -1e-4).all())


def _randint_range(sample, out):
    args = [a for a in sample.args if isinstance(a, int)]
    t = _tensors(out)[0]
    if t.numel() and args:
        lo, hi = (0, args[0]) if len(args) == 1 else (args[0], args[1])
        if sample.input is not None and isinstance(sample.input, int) and len(args) == 1:
            lo, hi = sample.input, args[0]
        assert int(t.min()) >= lo and int(t.max()) < hi, f"values outside [{lo}, {hi})"


RANDOM_OPS = {
    "bernoulli": _binary,
    "cauchy": None,
    "exponential": _nonnegative,
    "geometric": _geometric,
    "log_normal": _nonnegative,
    "normal": None,
    "normal.in_place": None,
    "normal.number_mean": None,
    "uniform": None,
    "multinomial": _nonnegative,
    "rand_like": None,  # (OpInfo's rand_like entry calls torch.randn_like)
    "randn": None,
    "randn_like": None,
    "randint": None,
    "randint_like": None,
    "nn.functional.dropout": _dropout_like,
    "nn.functional.dropout2d": _dropout_like,
    "nn.functional.dropout3d": _dropout_like,
    "nn.functional.alpha_dropout": None,
    "nn.functional.feature_alpha_dropout.with_train": None,
    "nn.functional.rrelu": None,
    "nn.functional.fractional_max_pool2d": _subset_of_input,
    "nn.functional.fractional_max_pool3d": _subset_of_input,
    "svd_lowrank": _lowrank,
    "pca_lowrank": _lowrank,
}

# Ops that may return the index of any of several equal elements (an
# unstable sort, topk, kthvalue: CUDA's choice differs from the CPU's too).
# Value: the position of `dim` in their arguments.  Their index output is
# compared by the input values it selects, and must not repeat an index.
TIED_INDEX_OPS = {"sort": 0, "argsort": 0, "topk": 1, "kthvalue": 1}


def _indices_as_values(name, inputs, out):
    """`out` with its index tensor (the last output) replaced by the input
    values it selects along the op's dim."""
    x, args, kwargs = inputs
    if kwargs.get("stable") or not isinstance(x, torch.Tensor) or x.dim() == 0:
        return out  # a stable sort's order is defined: compared as is
    position = TIED_INDEX_OPS[name]
    dim = kwargs.get("dim", args[position] if len(args) > position else -1)
    flat, spec = tree_flatten(out)
    index = flat[-1]
    keepdim = name != "kthvalue" or kwargs.get("keepdim", args[2] if len(args) > 2 else False)
    if not keepdim:
        index = index.unsqueeze(dim)
    if name != "kthvalue" and index.shape[dim] > 1:
        ordered = index.sort(dim).values.cpu()
        assert bool((ordered.diff(dim=dim) != 0).all()), f"{name}: an index repeats along dim {dim}"
    picked = x.gather(dim, index)
    flat[-1] = picked if keepdim else picked.squeeze(dim)
    return tree_unflatten(flat, spec)


def _eigenvector_signs(out):
    """linalg.eigh's (L, Q) with each eigenvector scaled so that its largest
    component is positive (an eigenvector's sign is LAPACK's choice)."""
    values, vectors = out
    if vectors.numel() == 0:
        return out
    biggest = vectors.abs().argmax(dim=-2, keepdim=True)
    return values, vectors * vectors.gather(-2, biggest).sign()


def _canonical(name, inputs, out):
    """`out` in the form both devices must agree on, for ops whose result is
    defined only up to a choice (which tied element, which sign)."""
    if name in TIED_INDEX_OPS:
        return _indices_as_values(name, inputs, out)
    if name == "linalg.eigh":
        return _eigenvector_signs(out)
    return out


CHOICE_OPS = set(TIED_INDEX_OPS) | {"linalg.eigh"}

# Ops whose result is uninitialized memory: only metadata is compared.
UNINITIALIZED = {"empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided", "empty_permuted"}


# ------------------------------------------------------------------ cases


@dataclass(frozen=True)
class Case:
    kind: str  # forward | backward | inplace | out | noncontig
    op: str
    dtype: torch.dtype

    @property
    def id(self):
        if self.kind == "forward":
            return f"forward-{self.op}-{DTYPE_NAMES[self.dtype]}"
        return f"{self.kind}-{self.op}"


def supported(op, dtype):
    return dtype in op.supported_dtypes("cpu")


def _variant_dtype(op):
    for dt in DTYPES:
        if supported(op, dt):
            return dt
    return None


def cases():
    out = []
    for name, op in op_db().items():
        for dt in DTYPES:
            if supported(op, dt):
                out.append(Case("forward", name, dt))
        if supports_backward(op):
            out.append(Case("backward", name, torch.float32))
        vdt = _variant_dtype(op)
        if vdt is None:
            continue
        if op.inplace_variant is not None and name not in UNINITIALIZED:
            out.append(Case("inplace", name, vdt))
        if op.supports_out and name not in UNINITIALIZED:
            out.append(Case("out", name, vdt))
        if name not in RANDOM_OPS and name not in UNINITIALIZED:
            out.append(Case("noncontig", name, vdt))
    return out


def supports_backward(op):
    return op.supports_autograd and torch.float32 in op.supported_backward_dtypes("cpu") and supported(
        op, torch.float32
    )


# ------------------------------------------------------------------ helpers


def _tensors(tree):
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


def tolerance(op, dtype, out_dtype=None):
    """(atol, rtol) for comparing outputs of `op` at input dtype `dtype`."""
    atol, rtol = TOLERANCES.get(dtype, (0.0, 0.0))
    if out_dtype is not None and out_dtype in TOLERANCES:
        a2, r2 = TOLERANCES[out_dtype]
        atol, rtol = max(atol, a2), max(rtol, r2)
    from torch.testing._internal.common_device_type import toleranceOverride
    from torch.testing._internal.opinfo.core import DecorateInfo

    def merge(d):
        nonlocal atol, rtol
        t = d.get(dtype)
        if t is not None:
            atol, rtol = max(atol, t.atol), max(rtol, t.rtol)

    for dec in op.decorators or ():
        if isinstance(dec, DecorateInfo):
            if dec.device_type not in (None, "cpu", "cuda") or dec.test_name not in _TOL_TESTS:
                continue
            if dec.dtypes is not None and dtype not in dec.dtypes:
                continue
            for d in dec.decorators:
                if isinstance(d, toleranceOverride):
                    merge(d.d)
        elif isinstance(dec, toleranceOverride):
            merge(dec.d)
    return atol, rtol


def _copy_to(t, device):
    """`t` on `device` with the same sizes, strides and storage offset (its
    whole storage is copied), requires_grad kept."""
    if not isinstance(t, torch.Tensor):
        return t
    if t.layout != torch.strided:
        raise Skip(f"{t.layout} sample")
    requires_grad = t.requires_grad
    t = t.detach()
    n = t.untyped_storage().nbytes() // t.element_size() if t.element_size() else 0
    if t.is_contiguous() and t.storage_offset() == 0 and n == t.numel():
        r = t.to(device, copy=True)
    else:
        flat = t.as_strided((n,), (1,), 0)
        r = flat.to(device, copy=True).as_strided(t.shape, t.stride(), t.storage_offset())
    return r.requires_grad_(requires_grad) if requires_grad else r


def _device_arg(v, device):
    if isinstance(v, torch.device) and v.type == "cpu":
        return device
    if isinstance(v, str) and v == "cpu":
        return str(device)
    return v


# Arguments PyTorch requires on the CPU even for device ops: op -> positions in args.
CPU_ARGS = {"tensor_split": (0,)}


def _move(tree, device, op=None):
    """A sample's (input, args, kwargs) on `device`, tensors with their exact layout."""
    keep = set()
    if op is not None:
        x, args, kwargs = tree
        for i in CPU_ARGS.get(op_name(op), ()):
            if i < len(args) and isinstance(args[i], torch.Tensor):
                keep.add(id(args[i]))

    def move(v):
        if isinstance(v, torch.Tensor):
            return _copy_to(v, CPU if id(v) in keep else device)
        return _device_arg(v, device)

    return tree_map(move, tree)


def _clone_cpu(tree):
    def copy(v):
        if isinstance(v, torch.Tensor):
            r = _copy_to(v, CPU)
            return r
        return v

    return tree_map(copy, tree)


def _split(sample):
    return sample.input, tuple(sample.args), dict(sample.kwargs)


_fell_back: dict = {}


@contextlib.contextmanager
def no_fallback():
    """Records the ops that ran on the CPU inside the block; run_case raises
    FellBack at the end (after the values were compared, so a case that is
    both wrong and falls back reports the wrong value)."""
    before = torchtpu.fallback_counts()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
    after = torchtpu.fallback_counts()
    for k, v in after.items():
        if v != before.get(k, 0):
            _fell_back[k] = _fell_back.get(k, 0) + v - before.get(k, 0)


def compare(actual, expected, atol, rtol, what="output", metadata_only=False):
    a_flat, _ = tree_flatten(actual)
    e_flat, _ = tree_flatten(expected)
    assert len(a_flat) == len(e_flat), f"{what}: {len(a_flat)} values, CPU gives {len(e_flat)}"
    for i, (a, e) in enumerate(zip(a_flat, e_flat)):
        if isinstance(e, torch.Tensor):
            assert isinstance(a, torch.Tensor), f"{what}[{i}]: {type(a)} instead of a tensor"
            assert a.device.type == "tpu", f"{what}[{i}] on {a.device}"
            assert a.dtype == e.dtype, f"{what}[{i}]: dtype {a.dtype}, CPU gives {e.dtype}"
            assert a.shape == e.shape, f"{what}[{i}]: shape {tuple(a.shape)}, CPU gives {tuple(e.shape)}"
            if metadata_only:
                continue
            a = a.detach().cpu()
            e = e.detach()
            if e.is_floating_point() or e.is_complex():
                torch.testing.assert_close(
                    a, e, atol=atol, rtol=rtol, equal_nan=True, check_device=False, check_stride=False,
                    msg=lambda m, i=i: f"{what}[{i}]: {m}",
                )
            else:
                torch.testing.assert_close(
                    a, e, atol=0, rtol=0, check_device=False, check_stride=False,
                    msg=lambda m, i=i: f"{what}[{i}]: {m}",
                )
        elif isinstance(e, float) and isinstance(a, float):
            assert math.isclose(a, e, rel_tol=max(rtol, 1e-6), abs_tol=atol) or (a != a and e != e), (
                f"{what}[{i}]: {a} != {e}"
            )
        else:
            assert a == e, f"{what}[{i}]: {a!r} != {e!r}"


def samples(op, dtype, limit, requires_grad=False):
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gen = op.sample_inputs("cpu", dtype, requires_grad=requires_grad)
        return list(itertools.islice(gen, limit))


def _cpu_run(fn, sample):
    """fn on a copy of a CPU sample; None if the CPU rejects it."""
    x, args, kwargs = _clone_cpu(_split(sample))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ("ok", fn(x, *args, **kwargs), (x, args, kwargs))
    except Exception as e:  # noqa: BLE001  (the CPU rejects this sample)
        return ("error", e, None)


def _tpu_run(fn, sample, op=None):
    x, args, kwargs = _move(_split(sample), TPU, op)
    with no_fallback():
        out = fn(x, *args, **kwargs)
        torchtpu_sync(out)
    return out, (x, args, kwargs)


def torchtpu_sync(out):
    """Wait for the kernels (so device-side check failures surface here)."""
    torch.tpu.synchronize()


# ------------------------------------------------------------------ checks


def run_case(case):
    """Run one case: raises Skip, FellBack, or the comparison's error."""
    op = op_db()[case.op]
    fn = {
        "forward": check_forward,
        "backward": check_backward,
        "inplace": check_inplace,
        "out": check_out,
        "noncontig": check_noncontig,
    }[case.kind]
    _fell_back.clear()
    torch.tpu.set_device(0)
    fn(op, case.dtype)
    if _fell_back:
        raise FellBack(f"ops fell back to the CPU: {dict(_fell_back)}")


def _samples_for(op, dtype, kind):
    if op_name(op) in RANDOM_OPS:
        limit = MAX_SAMPLES_RANDOM
    elif kind == "forward":
        limit = MAX_SAMPLES.get(dtype, MAX_SAMPLES_OTHER)
    elif kind == "backward":
        limit = MAX_SAMPLES_BACKWARD
    else:
        limit = MAX_SAMPLES_VARIANT
    return samples(op, dtype, limit, requires_grad=kind == "backward")


def check_forward(op, dtype, kind="forward", transform=None):
    name = op_name(op)
    if name in RANDOM_OPS:
        return check_random(op, dtype)
    ran = 0
    for i, sample in enumerate(_samples_for(op, dtype, kind)):
        if transform is not None:
            sample = transform(sample)
        status, expected, cpu_inputs = _cpu_run(op, sample)
        if status != "ok":
            continue
        actual, tpu_inputs = _tpu_run(op, sample, op)
        out_dtypes = [t.dtype for t in _tensors(expected)]
        atol, rtol = tolerance(op, dtype, out_dtypes[0] if out_dtypes else None)
        if name in CHOICE_OPS:
            compare(actual, expected, atol, rtol, what=f"sample {i}", metadata_only=True)
            actual = _canonical(name, tpu_inputs, actual)
            expected = _canonical(name, cpu_inputs, expected)
        compare(actual, expected, atol, rtol, what=f"sample {i}", metadata_only=name in UNINITIALIZED)
        ran += 1
    if not ran:
        raise Skip("no sample runs on the CPU")


def check_noncontig(op, dtype):
    return check_forward(op, dtype, kind="noncontig", transform=lambda s: s.noncontiguous())


def check_inplace(op, dtype):
    fn = op.get_inplace()
    ran = 0
    for i, sample in enumerate(_samples_for(op, dtype, "inplace")):
        if sample.broadcasts_input:
            continue
        status, expected, cpu_in = _cpu_run(fn, sample)
        if status != "ok":
            continue
        x, args, kwargs = _move(_split(sample), TPU, op)
        with no_fallback():
            actual = fn(x, *args, **kwargs)
            torchtpu_sync(actual)
        assert actual is x, f"sample {i}: the in-place variant did not return its input"
        atol, rtol = tolerance(op, dtype, x.dtype)
        compare(actual, expected, atol, rtol, what=f"sample {i}", metadata_only=op_name(op) in RANDOM_OPS)
        ran += 1
    if not ran:
        raise Skip("no sample runs in place on the CPU")


def check_out(op, dtype):
    ran = 0
    for i, sample in enumerate(_samples_for(op, dtype, "out")):
        status, expected, _ = _cpu_run(op, sample)
        if status != "ok":
            continue
        exp_flat = expected if isinstance(expected, (tuple, list)) else (expected,)
        if not all(isinstance(t, torch.Tensor) for t in exp_flat):
            continue

        def fn_with_out(out_tensors):
            def fn(x, *args, **kwargs):
                out = out_tensors if isinstance(expected, (tuple, list)) else out_tensors[0]
                return op(x, *args, out=out, **kwargs)

            return fn

        # The CPU must accept out= for this sample too.
        cpu_outs = [torch.empty_like(t) for t in exp_flat]
        status, cpu_res, cpu_inputs = _cpu_run(fn_with_out(cpu_outs), sample)
        if status != "ok":
            continue
        tpu_outs = [torch.empty(t.shape, dtype=t.dtype, device=TPU) for t in exp_flat]
        actual, tpu_inputs = _tpu_run(fn_with_out(tpu_outs), sample, op)
        if cpu_res is not None:  # (some out= overloads return nothing)
            act_flat = actual if isinstance(actual, (tuple, list)) else (actual,)
            for a, o in zip(act_flat, tpu_outs):
                assert a is o, f"sample {i}: out= variant did not return its out tensor"
        atol, rtol = tolerance(op, dtype, exp_flat[0].dtype)
        random = op_name(op) in RANDOM_OPS
        name = op_name(op)
        expected_outs = _canonical(name, cpu_inputs, list(cpu_outs))
        compare(_canonical(name, tpu_inputs, list(tpu_outs)), expected_outs, atol, rtol, what=f"sample {i} out",
                metadata_only=random)
        ran += 1
        if ran == 1:  # once more into zero-size outs, which must be resized
            tpu_outs = [torch.empty(0, dtype=t.dtype, device=TPU) for t in exp_flat]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                actual, tpu_inputs = _tpu_run(fn_with_out(tpu_outs), sample, op)
            compare(_canonical(name, tpu_inputs, list(tpu_outs)), expected_outs, atol, rtol,
                    what=f"sample {i} resized out", metadata_only=random)
    if not ran:
        raise Skip("no sample runs with out= on the CPU")


def _grad_inputs(tree):
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor) and t.requires_grad]


def _differentiable(out):
    return [t for t in _tensors(out) if t.requires_grad and (t.is_floating_point() or t.is_complex())]


def check_backward(op, dtype=torch.float32):
    name = op_name(op)
    random = name in RANDOM_OPS
    ran = 0
    for i, sample in enumerate(_samples_for(op, torch.float32, "backward")):

        def fn(x, *args, **kwargs):
            return sample.output_process_fn_grad(op.gradcheck_wrapper(op.get_op(), x, *args, **kwargs))

        status, expected, cpu_in = _cpu_run(fn, sample)
        if status != "ok":
            continue
        e_out = _differentiable(expected)
        e_in = _grad_inputs(cpu_in)
        if not e_out or not e_in:
            continue
        gen = torch.Generator().manual_seed(1234)
        weights = [torch.randn(t.shape, generator=gen, dtype=t.dtype) for t in e_out]
        try:
            e_grads = torch.autograd.grad(e_out, e_in, weights, allow_unused=True)
        except Exception:  # noqa: BLE001  (CPU autograd rejects it)
            continue
        x, args, kwargs = _move(_split(sample), TPU, op)
        with no_fallback():
            if random:
                torch.manual_seed(0)
            actual = fn(x, *args, **kwargs)
            a_out = _differentiable(actual)
            a_in = _grad_inputs((x, args, kwargs))
            assert len(a_out) == len(e_out), "differentiable outputs differ from CPU"
            a_grads = torch.autograd.grad(a_out, a_in, [w.to(TPU) for w in weights], allow_unused=True)
            torchtpu_sync(a_grads)
        atol, rtol = tolerance(op, torch.float32)
        for j, (a, e) in enumerate(zip(a_grads, e_grads)):
            if e is None or a is None:
                assert (a is None) == (e is None) or (
                    (a if a is not None else e).abs().max() == 0
                ), f"sample {i} grad[{j}]: {a is None=}, {e is None=}"
                continue
            compare(a, e, atol, rtol, what=f"sample {i} grad[{j}]", metadata_only=random)
        ran += 1
    if not ran:
        raise Skip("no sample has a differentiable output on the CPU")


def check_random(op, dtype):
    """Random ops: shape and dtype as the CPU's, per-op range checks, and the
    same values again under the same seed."""
    name = op_name(op)
    extra = RANDOM_OPS.get(name)
    ran = 0
    for i, sample in enumerate(_samples_for(op, dtype, "forward")):
        status, expected, _ = _cpu_run(op, sample)
        if status != "ok":
            continue
        results = []
        for _ in range(2):
            torch.manual_seed(1)
            torch.tpu.manual_seed(1)
            actual, _ = _tpu_run(op, sample, op)
            results.append(actual)
        compare(results[0], expected, 0, 0, what=f"sample {i}", metadata_only=True)
        compare(results[0], results[1], 0, 0, what=f"sample {i} reproducibility")
        if extra is not None:
            cpu_sample = sample
            extra(cpu_sample, tree_map(lambda t: t.cpu() if isinstance(t, torch.Tensor) else t, results[0]))
        ran += 1
    if not ran:
        raise Skip("no sample runs on the CPU")


# ------------------------------------------------------------------ expected failures


def load_expected_failures(path):
    """{case id: reason} from lines `case-id  # reason`."""
    out = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            case_id, _, reason = line.partition("#")
            out[case_id.strip()] = reason.strip() or "known failure"
    return out
