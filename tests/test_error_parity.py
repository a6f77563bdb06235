"""Bad calls raise on tpu what they raise on the CPU: the ATen checks that
PyTorch's meta kernels skip (torchtpu/ops/aten_checks.py), found by the
randomized programs."""

import re
import warnings

import pytest
import torch
import torch.nn.functional as F

def _into(dtype, fn):
    """fn(device, out) with an out= of `dtype` (the result's dtype is another)."""
    return lambda d: fn(d, torch.empty(0, dtype=dtype, device=d))


def _floats(d):
    return torch.tensor([[0.5, -1.5], [2.0, 3.0]], device=d)


CASES = {
    "cross_entropy weight of the wrong size": lambda d: F.cross_entropy(
        torch.randn(3, 5, device=d), torch.tensor([1, 2, 3], device=d), weight=torch.ones(4, device=d)),
    "2-d cross_entropy weight of the wrong size": lambda d: F.cross_entropy(
        torch.randn(2, 5, 3, 3, device=d), torch.zeros(2, 3, 3, dtype=torch.long, device=d),
        weight=torch.ones(4, device=d)),
    "nextafter of ints": lambda d: torch.nextafter(torch.ones(2, dtype=torch.int32, device=d),
                                                    torch.zeros(2, dtype=torch.int32, device=d)),
    "copy_ partial overlap": lambda d: _shared(d, lambda a: a[1:5].copy_(a[:4])),
    "add_ partial overlap": lambda d: _shared(d, lambda a: a[1:5].add_(a[:4])),
    "out= partial overlap": lambda d: _shared(d, lambda a: torch.add(a[:4], 1, out=a[2:6])),
    "int mul_ by float": lambda d: torch.ones(3, dtype=torch.int32, device=d).mul_(0.5),
    "int mul_ by float tensor": lambda d: torch.ones(3, dtype=torch.int32, device=d).mul_(torch.ones(3, device=d)),
    "bool add_ int": lambda d: torch.ones(3, dtype=torch.bool, device=d).add_(1),
    "mm int @ float": lambda d: torch.ones(2, 3, dtype=torch.int32, device=d) @ torch.ones(3, 2, device=d),
    "mv int @ float": lambda d: torch.ones(2, 3, dtype=torch.int32, device=d) @ torch.ones(3, device=d),
    "addmm mixed": lambda d: torch.addmm(torch.ones(2, 2, device=d), torch.ones(2, 3, device=d),
                                         torch.ones(3, 2, dtype=torch.int32, device=d)),
    "mm bool": lambda d: torch.ones(2, 3, dtype=torch.bool, device=d) @ torch.ones(3, 2, dtype=torch.bool, device=d),
    # adaptive pooling is floating-point only in ATen (CPU and CUDA): a
    # uint8 image raises instead of overflowing a sum
    "adaptive_avg_pool2d uint8": lambda d: F.adaptive_avg_pool2d(torch.ones(1, 2, 4, 4, dtype=torch.uint8, device=d), 2),
    "area interpolate uint8": lambda d: F.interpolate(torch.ones(1, 2, 4, 4, dtype=torch.uint8, device=d), size=2, mode="area"),
    "adaptive_max_pool2d int64": lambda d: F.adaptive_max_pool2d(torch.ones(1, 2, 4, 4, dtype=torch.int64, device=d), 2),
    "adaptive_avg_pool3d bool": lambda d: F.adaptive_avg_pool3d(torch.ones(1, 2, 2, 2, 2, dtype=torch.bool, device=d), 1),
    "bmm bool": lambda d: torch.bmm(torch.ones(1, 2, 2, dtype=torch.bool, device=d), torch.ones(1, 2, 2, dtype=torch.bool, device=d)),
    "cat zero-dim": lambda d: torch.cat([torch.tensor(1.0, device=d), torch.tensor(2.0, device=d)]),
    "int add with float alpha": lambda d: torch.add(torch.ones(3, dtype=torch.int64, device=d), 2, alpha=1.5),
    "bool alpha on ints": lambda d: torch.add(torch.ones(3, dtype=torch.int64, device=d), 1, alpha=True),
    # a device-side assertion on tpu (as on CUDA): raised at the next sync
    "assert_async zero": lambda d: _synced(d, lambda: torch._assert_async(torch.tensor(0.0, device=d))),
    "assert_async msg": lambda d: _synced(d, lambda: torch._assert_async(torch.tensor(False, device=d), "no")),
    "assert_async two values": lambda d: torch._assert_async(torch.ones(2, device=d)),
    # PyTorch's decomposition scatters with an unchecked index_put: tpu used to drop the value silently
    "max_unpool2d index past the plane": lambda d: _synced(d, lambda: _unpool(d, 2, bad=16)),
    "max_unpool3d negative index": lambda d: _synced(d, lambda: _unpool(d, 3, bad=-1)),
    # source dtype != self dtype: ATen refuses to cast (the meta kernels cast silently)
    "index_add_ long into float": lambda d: torch.zeros(3, device=d).index_add_(0, _zero(d), torch.ones(1, dtype=torch.long, device=d)),
    "index_add float into long": lambda d: torch.zeros(3, dtype=torch.long, device=d).index_add(0, _zero(d), torch.ones(1, device=d)),
    "index_copy_ long into float": lambda d: torch.zeros(3, device=d).index_copy_(0, _zero(d), torch.ones(1, dtype=torch.long, device=d)),
    "put_ long into float": lambda d: torch.zeros(3, device=d).put_(_zero(d), torch.ones(1, dtype=torch.long, device=d)),
    "maximum complex": lambda d: torch.maximum(torch.tensor([1j], device=d), torch.tensor([2j], device=d)),
    "minimum int and complex scalar": lambda d: torch.minimum(torch.tensor([1, 2], device=d), torch.tensor(1j, device=d)),
    "fmax complex": lambda d: torch.fmax(torch.tensor([1j], device=d), torch.tensor([2j], device=d)),
    "atan2 complex": lambda d: torch.atan2(torch.tensor([1.0], device=d), torch.tensor([2j], device=d)),
    # (found by a numeric edge-case probe: computed a value, or raised JAX's ValueError)
    "relu of complex": lambda d: torch.relu(torch.tensor([1 + 2j, -3 - 1j], device=d)),
    "clamp of complex": lambda d: torch.clamp(torch.tensor([1 + 2j], device=d), 0),
    "round of complex": lambda d: torch.round(torch.tensor([1 + 2j], device=d)),
    "heaviside of complex": lambda d: torch.heaviside(torch.tensor([1 + 2j], device=d), torch.tensor([1j], device=d)),
    "hypot of complex": lambda d: torch.hypot(torch.tensor([1 + 2j], device=d), torch.tensor([1j], device=d)),
    "clamp without bounds": lambda d: torch.clamp(torch.ones(2, device=d)),
    "int floor_divide by 0": lambda d: _synced(d, lambda: torch.arange(3, device=d) // 0),
    "int remainder by 0": lambda d: _synced(d, lambda: torch.arange(3, device=d) % 0),
    "int fmod by 0": lambda d: _synced(d, lambda: torch.fmod(torch.arange(3, device=d), 0)),
    # (found by an nn probe: computed)
    "embedding_bag offsets not from 0": lambda d: _synced(d, lambda: F.embedding_bag(
        torch.tensor([1, 2, 4, 5], device=d), torch.ones(10, 2, device=d), torch.tensor([1, 3], device=d))),
    "embedding_bag offsets past the input": lambda d: _synced(d, lambda: F.embedding_bag(
        torch.tensor([1, 2, 4, 5], device=d), torch.ones(10, 2, device=d), torch.tensor([0, 5], device=d))),
    # out= of another dtype, which these kernels refuse (found by an eager fuzzer)
    **{f"{name} into an out= of another dtype": fn for name, fn in {
        "all": lambda d: torch.all(torch.ones(2, 3, device=d), 1, out=torch.empty(0, device=d)),
        "sort": lambda d: torch.sort(torch.ones(2, 3, device=d), 1, out=(torch.empty(0, dtype=torch.float64, device=d), torch.empty(0, dtype=torch.long, device=d))),
        "kthvalue": lambda d: torch.kthvalue(torch.ones(2, 3, dtype=torch.int32, device=d), 1, out=(torch.empty(0, dtype=torch.float16, device=d), torch.empty(0, dtype=torch.long, device=d))),
        "amax": lambda d: torch.amax(torch.ones(2, 3, device=d), 1, out=torch.empty(0, dtype=torch.float64, device=d)),
        "cummax": lambda d: torch.cummax(torch.ones(2, 3, device=d), 1, out=(torch.empty(0, dtype=torch.float64, device=d), torch.empty(0, dtype=torch.long, device=d))),
        "tril": lambda d: torch.tril(torch.ones(2, 3, device=d), out=torch.empty(0, dtype=torch.float64, device=d)),
        "index_select": lambda d: torch.index_select(torch.ones(2, 3, device=d), 0, torch.tensor([0], device=d), out=torch.empty(0, dtype=torch.float64, device=d)),
    }.items()},
    # (found by a model probe: computed nan or a number)
    "binary_cross_entropy of an input past 1": lambda d: _synced(d, lambda: F.binary_cross_entropy(
        torch.tensor([0.5, 1.5], device=d), torch.tensor([0.0, 1.0], device=d))),
    "binary_cross_entropy of a target past 1": lambda d: _synced(d, lambda: F.binary_cross_entropy(
        torch.tensor([0.5, 0.7], device=d), torch.tensor([0.0, 2.0], device=d))),
    "embedding_bag of an index past the table": lambda d: _synced(d, lambda: F.embedding_bag(
        torch.tensor([1, 7, 2], device=d), torch.ones(5, 2, device=d), torch.tensor([0, 2], device=d), mode="max")),
    # out= sharing memory with an input of a non-pointwise op (found by a fuzzer: computed)
    "cat out= an input": lambda d: _shared(d, lambda a: torch.cat([a[:3], a[:3]], out=a[:3])),
    "cumsum out= a transposed input": lambda d: _shared(d, lambda a: torch.cumsum(a.view(2, 4), 0, out=a.view(4, 2).t())),
    "index_select out= part of the input": lambda d: _shared(d, lambda a: torch.index_select(a.view(4, 2), 0, torch.tensor([1, 0, 2], device=d), out=a.view(4, 2)[:3])),
    "index_put_ of values that do not broadcast": lambda d: torch.zeros(4, 4, device=d).index_put_(
        (torch.tensor([0, 1], device=d),), torch.ones(3, device=d)),
}  # fmt: skip

# In-place ops whose other operand broadcasts past self: PyTorch's meta
# kernels of these resize self (found by an eager fuzzer: a view grew and was
# written past, into its base).  Each is called on a (1, 4) view of a (2, 4)
# base with a (3, 1) operand.
_GROWING_IN_PLACE = {
    name: call for name, call in {
        "clamp_min_": lambda v, o: v.clamp_min_(o), "clamp_max_": lambda v, o: v.clamp_max_(o),
        "remainder_": lambda v, o: v.remainder_(o), "fmod_": lambda v, o: v.fmod_(o),
        "floor_divide_": lambda v, o: v.floor_divide_(o), "pow_": lambda v, o: v.pow_(o),
        "atan2_": lambda v, o: v.atan2_(o), "hypot_": lambda v, o: v.hypot_(o),
        "copysign_": lambda v, o: v.copysign_(o), "xlogy_": lambda v, o: v.xlogy_(o),
        "eq_": lambda v, o: v.eq_(o), "lt_": lambda v, o: v.lt_(o), "heaviside_": lambda v, o: v.heaviside_(o),
        "nextafter_": lambda v, o: v.nextafter_(o), "ldexp_": lambda v, o: v.ldexp_(o),
        "igamma_": lambda v, o: v.igamma_(o), "lerp_": lambda v, o: v.lerp_(o, 0.5),
        "bitwise_and_": lambda v, o: v.long().bitwise_and_(o.long()),
        "__ilshift__": lambda v, o: v.long().__ilshift__(o.long()),
        "gcd_": lambda v, o: v.long().gcd_(o.long()),
    }.items()
}  # fmt: skip


_INF, _NAN = float("inf"), float("nan")


def _t(values, dtype, device):
    return torch.tensor(values, dtype=dtype, device=device)


# Found by an eager fuzzer (stop 25): each raised on tpu where the CPU
# computes, returned another dtype, or raised another error.
_FUZZER_CASES = {
    "nansum over dim=()": lambda d: torch.nansum(_t([[1.0], [float("nan")], [3.0]], torch.float32, d), dim=()),
    "nanmean over dim=() keepdim": lambda d: torch.nanmean(_t([[1.0], [float("nan")], [3.0]], torch.float32, d), dim=(), keepdim=True),
    "bucketize with no boundaries": lambda d: torch.bucketize(_t([1.0, 2.0], torch.float32, d), _t([], torch.float32, d)),
    "bucketize of a 0-dim input": lambda d: torch.bucketize(_t(2.0, torch.float32, d), _t([1.0, 2.0, 3.0], torch.float32, d), right=True),
    "bucketize with 2-d boundaries": lambda d: torch.bucketize(_t([1.0], torch.float32, d), _t([[1.0]], torch.float32, d)),
    "take_along_dim of an empty tensor": lambda d: torch.take_along_dim(torch.zeros(3, 0, device=d), torch.zeros(3, 0, dtype=torch.int64, device=d), dim=1),
    "empty int floor division by 0": lambda d: torch.div(torch.zeros(0, dtype=torch.int64, device=d), 0, rounding_mode="floor"),
    "int64 >> bool": lambda d: _t([5, -8], torch.int64, d) >> _t(True, torch.bool, d),
    "bool << int16": lambda d: _t([True, False], torch.bool, d) << _t([1, 2], torch.int16, d),
    "bool >> 1": lambda d: _t([True, False], torch.bool, d) >> 1,
    "index into a zero-size dim": lambda d: torch.zeros(3, 0, device=d)[:, [-1]],
    "index_put_ into an empty tensor": lambda d: torch.zeros(0, device=d).index_put_((_t([0], torch.int64, d),), _t([1.0], torch.float32, d), accumulate=True),
    # (stop 25's leftovers, fixed in stop 26)
    "nan_to_num_ of complex": lambda d: _t([1 + 2j, complex(float("inf"), 1), complex(float("nan"), -float("inf"))], torch.complex64, d).nan_to_num_(),
    "abs of complex into complex out=": lambda d: torch.abs(_t([3 + 4j], torch.complex64, d), out=torch.empty(0, dtype=torch.complex64, device=d)),
    "abs of complex64 into complex128 out=": lambda d: torch.abs(_t([3 + 4j], torch.complex64, d), out=torch.empty(0, dtype=torch.complex128, device=d)),
    "trace of bool": lambda d: torch.trace(torch.ones(2, 2, dtype=torch.bool, device=d)),
    "signbit of complex": lambda d: torch.signbit(_t([1j], torch.complex64, d)),
    "nonzero into int32 out=": lambda d: torch.nonzero(_t([1.0, 0.0], torch.float32, d), out=torch.empty(0, dtype=torch.int32, device=d)),
    "masked_select into another dtype": lambda d: torch.masked_select(_t([1.0], torch.float32, d), _t([True], torch.bool, d), out=torch.empty(0, dtype=torch.float64, device=d)),
    # (the shift loop ran ceil(-x) times: -inf hung, -1e30 too)
    "polygamma at -inf and far below 0": lambda d: torch.special.polygamma(3, _t([-float("inf"), -1e30, -2.25, -40.75, -1000.3, float("inf"), float("nan")], torch.float64, d)),
    # (TensorIterator converts integer operands to the float result first: -5 stayed 251)
    "copysign by a 0-dim int8 of a uint8": lambda d: torch.copysign(_t([37, 232], torch.uint8, d), _t(-5, torch.int8, d)),
    "atan2 of uint8 by a 0-dim int8": lambda d: torch.atan2(_t([37, 232], torch.uint8, d), _t(-5, torch.int8, d)),
    "logcumsumexp of complex infinities": lambda d: torch.logcumsumexp(_t([complex(float("inf"), -0.2), 1 + 1j, complex(-float("inf"), 0), complex(float("nan"), 1)], torch.complex64, d), 0),
    "logcumsumexp of a 0-dim complex inf": lambda d: torch.logcumsumexp(_t(complex(float("inf"), -0.2), torch.complex64, d), 0),
    "logcumsumexp of complex from -inf": lambda d: torch.logcumsumexp(_t([complex(-float("inf"), 0), 1 + 1j], torch.complex128, d), 0),
    "mvlgamma at and below (p - 1) / 2": lambda d: torch.mvlgamma(_t([0.0, 0.4, 0.6, float("nan"), -3.5, -2.0], torch.float32, d), 2),
    # alpha == 0 ignores the product as BLAS does (ATen's baddbmm and addr do not)
    "addmm alpha=0 of an inf product": lambda d: torch.addmm(torch.ones(2, 2, device=d), torch.full((2, 2), float("inf"), device=d), torch.ones(2, 2, device=d), alpha=0, beta=0.5),
    "addmv alpha=0 of an inf product": lambda d: torch.addmv(torch.ones(2, device=d), torch.full((2, 2), float("inf"), device=d), torch.ones(2, device=d), alpha=0),
    "addbmm alpha=0 of an inf product": lambda d: torch.addbmm(torch.ones(2, 2, device=d), torch.full((1, 2, 2), float("inf"), device=d), torch.ones(1, 2, 2, device=d), alpha=0),
    "baddbmm alpha=0 of an inf product": lambda d: torch.baddbmm(torch.ones(1, 2, 2, device=d), torch.full((1, 2, 2), float("inf"), device=d), torch.ones(1, 2, 2, device=d), alpha=0),
    # NaN in distances: p = 0 counts it as NaN, cdist's running max for p = inf skips it, pdist's keeps it
    **{f"{name} p={p} with NaN": (lambda fn, p: lambda d: fn(_t([[float("nan"), 1.0, 2.0], [0.0, float("nan"), 1.0]], torch.float32, d), p))(fn, p)
       for name, fn in (("cdist", lambda x, p: torch.cdist(x, x.flip(0) * 2, p=p)),
                        ("pdist", lambda x, p: torch.pdist(torch.cat([x, x * 0]), p=p)))
       for p in (0.0, float("inf"))},
    "conj_physical of a strided real into out=": lambda d: torch.conj_physical(torch.arange(6.0, device=d)[::2], out=torch.empty(0, device=d)),
    "multilabel_margin_loss of one sample unreduced": lambda d: F.multilabel_margin_loss(
        _t([0.1, 0.9, -0.3, 0.4, 0.2], torch.float32, d), _t([3, 0, -1, 1, 2], torch.int64, d), reduction="none"),
    "linalg.cross of float32 and int64": lambda d: torch.linalg.cross(torch.ones(3, device=d), torch.ones(3, dtype=torch.int64, device=d)),
    "cdist of float64 and float32": lambda d: torch.cdist(torch.ones(1, 2, 2, dtype=torch.float64, device=d), torch.ones(1, 2, 2, device=d)),
    "index_fill with an int32 index": lambda d: torch.zeros(4, device=d).index_fill(0, _t([1], torch.int32, d), 7),
    "addcdiv of integer tensors": lambda d: torch.addcdiv(_t([1, 2], torch.int64, d), _t([True, True], torch.bool, d), _t([1, 1], torch.int32, d)),
    "frac_ of bool": lambda d: _t([True], torch.bool, d).frac_(),
    "bool ** True": lambda d: _t([True, False], torch.bool, d) ** True,
    "bool ** False": lambda d: _t([True, False], torch.bool, d) ** False,
    "cummax of an empty complex tensor": lambda d: torch.cummax(torch.zeros(0, 4, dtype=torch.complex64, device=d), 0)[0],
    "cummin of a 0-dim complex tensor": lambda d: torch.cummin(_t(1 + 1j, torch.complex64, d), 0)[0],
    "index tensors that do not broadcast": lambda d: torch.zeros(4, 4, device=d)[_t([0, 1], torch.int64, d), _t([0, 1, 2], torch.int64, d)],
    "kthvalue of a 0-dim bool": lambda d: torch.kthvalue(_t(True, torch.bool, d), 1)[0],
    # complex sqrt on the branch cut keeps the sign of a -0.0 imaginary part; C99's infinities
    "sqrt of complex with signed zeros and infinities": lambda d: torch.sqrt(_t(
        [complex(-4, -0.0), complex(-4, 0.0), complex(-0.0, -0.0), complex(float("inf"), float("nan")),
         complex(-float("inf"), 1), complex(1, -float("inf")), complex(3e38, 3e38), -2 + 3j], torch.complex64, d)),
    "sqrt of a conjugated negative real": lambda d: torch.sqrt(_t([-4 + 0j], torch.complex128, d).conj()),
    "put of fewer values than indices": lambda d: torch.zeros(4, device=d).put(_t([0, 1, 2], torch.int64, d), torch.ones(1, device=d), accumulate=True),
    "repeat_interleave into int32 out=": lambda d: torch.ops.aten.repeat_interleave.Tensor_out(_t([1, 2], torch.int64, d), out=torch.empty(0, dtype=torch.int32, device=d)),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(_FUZZER_CASES))
def test_fuzzer_found_results_match_cpu(name):
    _assert_same_outcome(_FUZZER_CASES[name])


def _assert_same_outcome(fn):
    """fn(device) returns the same tensor on both, or raises the same error."""
    def outcome(device):
        try:
            return fn(device).cpu()
        except Exception as e:  # noqa: BLE001
            return type(e), str(e)

    cpu, tpu = outcome("cpu"), outcome("tpu")
    if isinstance(cpu, tuple):
        assert tpu == cpu
    else:
        assert isinstance(tpu, torch.Tensor), tpu
        assert tpu.dtype == cpu.dtype
        torch.testing.assert_close(tpu, cpu, equal_nan=True)


def _setitem(x, index, value=1.0):
    x[index] = value
    return x


def _randn(device, *shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0)).to(device)


def _nll(device, input_shape, target, weight=None, op=torch.ops.aten.nll_loss_forward, reduction=1):
    """nll_loss_forward's (or nll_loss2d_forward's) loss; `target` a tensor on CPU."""
    weight = None if weight is None else weight.to(device)
    return op(_randn(device, *input_shape), target.to(device), weight, reduction, -100)[0]


def _sdpa(device, mask_shape, q_shape=(1, 2, 4, 8), k_shape=None, **kwargs):
    q, k = _randn(device, *q_shape), _randn(device, *(k_shape or q_shape))
    mask = torch.ones(mask_shape, dtype=torch.bool, device=device)
    return F.scaled_dot_product_attention(q, k, k, attn_mask=mask, **kwargs)


_U8 = torch.tensor([1, 5, 3], dtype=torch.uint8)

# Reported: tpu raised another error (an AssertionError of a decomposition,
# a gather() or JAX message), or computed where the CPU raises, or the reverse.
REPORTED = {
    # index_put_'s indices broadcast (JAX's ValueError before); masked_fill's mask is bool
    "index_put_ of indices that do not broadcast": lambda d: torch.zeros(5, 5, device=d).index_put_(
        (_t([0, 1, 2], torch.long, d), _t([0, 1], torch.long, d)), torch.tensor(1.0, device=d)),
    "setitem with a mask and an index that do not broadcast": lambda d: _setitem(
        torch.zeros(5, 5, device=d), (_t([True, False, True, True, False], torch.bool, d), _t([0, 1], torch.long, d))),
    **{f"masked_fill_ with a {dtype} mask": (lambda dtype: lambda d: torch.zeros(3, device=d).masked_fill_(
        torch.ones(3, dtype=dtype, device=d), 5.0))(dtype) for dtype in (torch.float32, torch.int64, torch.uint8,
                                                                         torch.float16)},
    "masked_fill with a uint8 mask": lambda d: torch.zeros(3, device=d).masked_fill(
        torch.ones(3, dtype=torch.uint8, device=d), torch.tensor(5.0, device=d)),
    # nll_loss: ATen's checks in ATen's order (see aten_checks._nll_checks)
    "nll_loss of a 2-d target": lambda d: F.nll_loss(_randn(d, 3, 5), torch.zeros(3, 4, dtype=torch.long, device=d)),
    "cross_entropy of a 2-d float target of other classes": lambda d: F.cross_entropy(_randn(d, 3, 5), _randn(d, 3, 4)),
    "cross_entropy of float class indices": lambda d: F.cross_entropy(_randn(d, 3, 5), _t([0.0, 2.0, 1.0], torch.float32, d)),
    "2-d cross_entropy of float class indices": lambda d: F.cross_entropy(_randn(d, 2, 5, 3, 3), torch.zeros(2, 3, 3, device=d)),
    "nll_loss of int32 class indices": lambda d: _nll(d, (3, 5), torch.zeros(3, dtype=torch.int32)),
    "nll_loss of a 3-d input": lambda d: _nll(d, (2, 3, 4), torch.zeros(2, 3, 4, dtype=torch.long)),
    "nll_loss float target of the wrong size": lambda d: _nll(d, (3, 5), torch.zeros(4)),
    "nll_loss target of the wrong size": lambda d: _nll(d, (3, 5), torch.zeros(4, dtype=torch.long)),
    "nll_loss of a long input": lambda d: F.nll_loss(torch.ones(3, 5, dtype=torch.long, device=d), torch.zeros(3, dtype=torch.long, device=d)),
    "nll_loss weight of another dtype": lambda d: _nll(d, (3, 5), torch.zeros(3, dtype=torch.long), torch.ones(5, dtype=torch.float64)),
    "nll_loss of a uint8 target": lambda d: _nll(d, (3, 5), torch.tensor([0, 2, 1], dtype=torch.uint8)),
    "nll_loss of a uint8 target, ignore_index 258": lambda d: torch.ops.aten.nll_loss_forward(
        _randn(d, 3, 5), _t([0, 2, 1], torch.uint8, d), None, 1, 258)[0],
    "nll_loss of one sample, a (1,) target": lambda d: _nll(d, (5,), torch.tensor([3]), reduction=0),
    "nll_loss of one sample, a (2,) target": lambda d: _nll(d, (5,), torch.tensor([3, 1])),
    "nll_loss2d of a uint8 target": lambda d: _nll(d, (2, 5, 3, 3), torch.zeros(2, 3, 3, dtype=torch.uint8),
                                                   op=torch.ops.aten.nll_loss2d_forward),
    "nll_loss2d of a 2-d target": lambda d: _nll(d, (2, 5, 3, 3), torch.zeros(2, 3), op=torch.ops.aten.nll_loss2d_forward),
    "nll_loss2d target of the wrong size": lambda d: _nll(d, (2, 5, 3, 3), torch.zeros(2, 3, 4, dtype=torch.long),
                                                          op=torch.ops.aten.nll_loss2d_forward),
    "nll_loss2d weight of shape (C, 1)": lambda d: _nll(d, (2, 5, 3, 3), torch.ones(2, 3, 3, dtype=torch.long),
                                                        torch.arange(5.0).reshape(5, 1), torch.ops.aten.nll_loss2d_forward),
    "cross_entropy of a uint8 target, backward": lambda d: (lambda x: (F.cross_entropy(
        x, _t([0, 2, 1], torch.uint8, d), ignore_index=2).backward(), x.grad)[1])(_randn(d, 3, 5).requires_grad_()),
    # attention masks that do not broadcast to the (..., L, S) scores (JAX's ValueError)
    "sdpa mask (3, 3) for L = S = 4": lambda d: _sdpa(d, (3, 3)),
    "sdpa mask of other queries": lambda d: _sdpa(d, (3, 6), k_shape=(1, 2, 6, 8)),
    "sdpa mask of other heads": lambda d: _sdpa(d, (3, 4, 4)),
    "sdpa mask of more dims": lambda d: _sdpa(d, (5, 1, 2, 4, 4)),
    "sdpa 1-d mask": lambda d: _sdpa(d, (4,)),
    "sdpa causal with a mask that does not fit": lambda d: _sdpa(d, (3, 3), is_causal=True),
    "sdpa mask that broadcasts": lambda d: _sdpa(d, (2, 1, 4, 6), q_shape=(2, 2, 4, 8), k_shape=(2, 2, 6, 8)),
    # a uint8 condition (the reference kernel takes bool only)
    "where of a uint8 condition": lambda d: torch.where(_t([1, 0, 2], torch.uint8, d), 1.0, 0.0),
    "where of a uint8 condition into out=": lambda d: torch.where(
        _t([1, 0, 2], torch.uint8, d), _randn(d, 3), _randn(d, 2, 1), out=torch.empty(0, device=d)),
    "where of an int8 condition": lambda d: torch.where(_t([1, 0, 2], torch.int8, d), 1.0, 0.0),
    # clamp's Scalar-bound out= overloads want the result's dtype; the Tensor-bound ones cast
    **{f"{name} into an out= of another dtype": (lambda fn: lambda d: fn(_U8.to(d), out=torch.zeros(3, dtype=torch.int64, device=d)))(fn)
       for name, fn in {
           "clamp": lambda x, out: torch.clamp(x, 0, 2, out=out),
           "clamp without max": lambda x, out: torch.clamp(x, 0, out=out),
           "clamp_min": lambda x, out: torch.clamp_min(x, 2, out=out),
           "clamp_max": lambda x, out: torch.clamp_max(x, 2, out=out),
           "clamp with Tensor bounds": lambda x, out: torch.clamp(x, x * 0, x * 0 + 2, out=out),
           "clamp_min with a Tensor bound": lambda x, out: torch.clamp_min(x, x * 0 + 2, out=out),
           "clamp_max with a Tensor bound": lambda x, out: torch.clamp_max(x, x * 0 + 2, out=out),
           "clamp with a float bound": lambda x, out: torch.clamp(x, 0.5, out=out),
       }.items()},
    "neg of float into a long out=": lambda d: torch.neg(_randn(d, 3), out=torch.empty(0, dtype=torch.int64, device=d)),
    # nextafter computes in the promoted dtype
    "nextafter of long and float": lambda d: torch.nextafter(_t([28], torch.int64, d), _t([0.0], torch.float32, d)),
    "nextafter of int32 and a 0-dim double": lambda d: torch.nextafter(_t([28], torch.int32, d), _t(0.0, torch.float64, d)),
    "nextafter of long and bfloat16": lambda d: torch.nextafter(_t([28], torch.int64, d), _t([0.0], torch.bfloat16, d)),
    "nextafter of longs": lambda d: torch.nextafter(_t([28], torch.int64, d), _t([0], torch.int64, d)),
    "nextafter of long and complex": lambda d: torch.nextafter(_t([28], torch.int64, d), _t([0j], torch.complex64, d)),
    "nextafter_ of a long self": lambda d: _t([28], torch.int64, d).nextafter_(_t([0.0], torch.float32, d)),
    # in-place broadcast past self: ATen's wording (the meta kernels print torch.Size)
    "add_ broadcast past self": lambda d: torch.ones(1, 2, device=d).add_(torch.ones(3, 1, 2, device=d)),
    # grid_sample's argument checks (the meta kernel asserted, unpacked or computed)
    **{f"grid_sample, {what}": (lambda x, g: lambda d: F.grid_sample(_randn(d, *x), _randn(d, *g),
                                                                     align_corners=False))(x, g)
       for what, x, g in [("grid's last dim 3 for 4D", (1, 1, 4, 4), (1, 2, 2, 3)),
                          ("batch sizes differ", (1, 1, 4, 4), (2, 2, 2, 2)),
                          ("empty spatial dim", (1, 1, 0, 4), (1, 2, 2, 2)),
                          ("5D grid for 4D input", (1, 1, 4, 4), (1, 2, 2, 2, 2)),
                          ("grid's last dim 2 for 5D", (1, 1, 2, 4, 4), (1, 2, 2, 2, 2)),
                          ("valid 5D", (1, 1, 2, 4, 4), (1, 2, 2, 2, 3))]},
    "grid_sampler_2d of 3D input": lambda d: torch.grid_sampler_2d(_randn(d, 1, 4, 4), _randn(d, 1, 2, 2), 0, 0, False),
    "grid_sample, double grid": lambda d: F.grid_sample(_randn(d, 1, 1, 4, 4), _randn(d, 1, 2, 2, 2).double()),
    # reflection/replication pads have no bool kernel
    **{f"{mode} pad of bool {n}d": (lambda mode, n: lambda d: F.pad(
        torch.ones((1, 2) + (3,) * n, dtype=torch.bool, device=d), (1, 1) * n, mode=mode))(mode, n)
       for mode in ("reflect", "replicate") for n in (1, 2, 3)},
    "frexp into a double mantissa": lambda d: torch.frexp(_randn(d, 3), out=(
        torch.empty(3, dtype=torch.float64, device=d), torch.empty(3, dtype=torch.int32, device=d)))[1],
    "frexp into a long exponent": lambda d: torch.frexp(_randn(d, 3), out=(
        torch.empty(3, device=d), torch.empty(3, dtype=torch.int64, device=d)))[1],
    **{f"ctc_loss of empty log_probs {shape}": (lambda shape: lambda d: F.ctc_loss(
        _randn(d, *shape).log_softmax(-1), torch.ones(shape[1], 3, dtype=torch.long, device=d),
        torch.full((shape[1],), shape[0], dtype=torch.long, device=d),
        torch.ones(shape[1], dtype=torch.long, device=d)))(shape) for shape in ((5, 0, 4), (0, 2, 4))},
    "frexp into valid outs": lambda d: torch.frexp(_randn(d, 3), out=(
        torch.empty(3, device=d), torch.empty(3, dtype=torch.int32, device=d)))[1],
    # clamp's Python-number bounds: a floating self converts them to its dtype, others refuse complex ones,
    # bool has no kernel for bool bounds (the meta kernels promote them like tensors)
    **{f"clamp {name}": fn for name, fn in {
        "float by a complex min": lambda d: _t([0.5, 3.0], torch.float32, d).clamp(min=1 + 2j),
        "float by a real complex min": lambda d: _t([0.5, 3.0], torch.float32, d).clamp(min=1 + 0j),
        "float by a complex max, in place": lambda d: _t([0.5, 3.0], torch.float32, d).clamp_(None, 2 + 1j),
        "long by a complex min": lambda d: _t([1, 3], torch.int64, d).clamp(min=1 + 2j),
        "clamp_min of float by a complex": lambda d: torch.clamp_min(_t([0.5, 3.0], torch.float32, d), 1j),
        "clamp_max of float by a complex": lambda d: torch.clamp_max(_t([0.5, 3.0], torch.float32, d), 1j),
        "bool by a bool min": lambda d: _t([True, False], torch.bool, d).clamp(min=True),
        "bool by a bool max": lambda d: _t([True, False], torch.bool, d).clamp(max=True),
        "bool by bool bounds, in place": lambda d: _t([True, False], torch.bool, d).clamp_(False, True),
        "clamp_min of bool by a bool": lambda d: torch.clamp_min(_t([True, False], torch.bool, d), True),
        "bool by an int min": lambda d: _t([True, False], torch.bool, d).clamp(min=1),
        "bool by a bool tensor": lambda d: _t([True, False], torch.bool, d).clamp(_t([True, True], torch.bool, d)),
    }.items()},
    "bool ** True in place": lambda d: _t([True, False], torch.bool, d).pow_(True),
    "bool ** False into a bool out=": lambda d: torch.pow(_t([True, False], torch.bool, d), False,
                                                          out=torch.empty(0, dtype=torch.bool, device=d)),
    "long ** -1": lambda d: _t([2, 3], torch.int64, d).pow(-1),
    "bool ** -2 in place": lambda d: _t([True], torch.bool, d).pow_(-2),
    "long ** a -1 tensor": lambda d: _t([2, 3], torch.int64, d).pow(_t(-1, torch.int64, d)),
    "xlogy of complex": lambda d: torch.xlogy(_t([1 + 1j, 2], torch.complex64, d), _t([2, 3], torch.float32, d)),
    "xlogy by a complex scalar": lambda d: torch.xlogy(_t([1.0, 2.0], torch.float32, d), 1j),
    "xlogy_ of float by a complex scalar": lambda d: _t([1.0, 2.0], torch.float32, d).xlogy_(1j),
    "atan2_ of float by complex": lambda d: _t([1.0, 2.0], torch.float32, d).atan2_(_t([1j, 1], torch.complex64, d)),
    "xlog1py of complex": lambda d: torch.special.xlog1py(_t([1j, 2], torch.complex64, d), _t([2, 3], torch.float32, d)),
    "addcmul of bools": lambda d: torch.addcmul(*[_t([True, False], torch.bool, d)] * 3),
    "addcmul of bool self and floats": lambda d: torch.addcmul(_t([True, False], torch.bool, d),
                                                               *[_t([0.5, 2.0], torch.float32, d)] * 2),
    "nansum into complex": lambda d: _t([1.0, 2.0], torch.float32, d).nansum(dtype=torch.complex64),
    "mean of complex into a real out=": lambda d: torch.mean(_t([[1 + 1j, 2], [3, 0.5j]], torch.complex64, d), 1,
                                                             out=torch.empty(0, device=d)),
    "mean of half into a float out=": lambda d: torch.mean(_t([60000.0, 1.5, 3.25], torch.float16, d), 0,
                                                           out=torch.empty((), device=d)),
    "mean of bfloat16 into a double out=": lambda d: torch.mean(_t([60000.0, 1.5, 3.25], torch.bfloat16, d), 0,
                                                                out=torch.empty((), dtype=torch.float64, device=d)),
    "mean of float into half, past half's range": lambda d: torch.mean(_t([70000.0, 1.5, 3.25], torch.float32, d),
                                                                       dtype=torch.float16),
    # complex inputs ATen has no kernel for
    **{f"{name} of complex": (lambda fn: lambda d: fn(_t([1 + 1j, 2, 1 + 1j], torch.complex64, d)))(fn)
       for name, fn in {
           "unique": torch.unique,
           "unique with counts": lambda c: torch.unique(c, sorted=False, return_counts=True)[1],
           "unique along a dim": lambda c: torch.unique(c[None], dim=1),
           "unique_consecutive": torch.unique_consecutive,
           "nearest 1d interpolate": lambda c: F.interpolate(c[None, None], scale_factor=2),
           "nearest-exact 2d interpolate": lambda c: F.interpolate(c.reshape(1, 1, 1, 3), scale_factor=2,
                                                                   mode="nearest-exact"),
           "nearest 3d interpolate": lambda c: F.interpolate(c.reshape(1, 1, 1, 1, 3), scale_factor=2),
           "floor division": lambda c: c // 2,
           "floor division in place": lambda c: c.floor_divide_(c),
           "div with rounding_mode='floor'": lambda c: torch.div(c, 2, rounding_mode="floor"),
           "div_ with rounding_mode='trunc'": lambda c: c.div_(c, rounding_mode="trunc"),
           "plain div": lambda c: torch.div(c, 2),
           "logsumexp": lambda c: torch.logsumexp(torch.stack([c, c * (3 - 5j)]), 0),
       }.items()},
    "logsumexp of complex with -inf": lambda d: torch.logsumexp(_t([[1 + 2j, float("-inf")]], torch.complex64, d), 1),
    # torch's (Cephes') conventions where JAX's special functions give nan
    "gammainc at a = 0": lambda d: torch.special.gammainc(_t([0.0, 0, 0, 0, 1], torch.float32, d),
                                                          _t([0.5, 1e-3, 0, float("inf"), 0], torch.float32, d)),
    "zeta at large x": lambda d: torch.special.zeta(_t([1e4, 1e4, 1e4, 3, 1e8], torch.float32, d),
                                                    _t([2.0, 1, 0.5, 2, 3], torch.float32, d)),
    **{f"{fn.__name__} at a = inf": (lambda fn: lambda d: fn(_t([_INF] * 5 + [2.0], torch.float64, d),
                                                             _t([2.0, 0, _INF, -1, 1e300, _INF], torch.float64, d)))(fn)
       for fn in (torch.igamma, torch.igammac)},
    # large a near x: Temme's expansion (JAX's iterations drifted, and never returned at 1e20)
    **{f"{fn.__name__} of {dtype} at large a": (lambda fn, dtype: lambda d: fn(
        _t([1e3, 1e3, 1e5, 1e7, 1e12, 1e12, 1e20, 1e20, 1e20], dtype, d),
        # (1e12 - 1e6: float32's own rounding of it moves Q by 1e-2, and CPU's float32 kernel is that far off)
        _t([999.0, 1003, 1e5, 1e7 + 3e3, 1e12, 1e12 - (1e6 if dtype == torch.float64 else 1e7), 1e20, 0, 5e20],
           dtype, d)))(fn, dtype)
       for fn in (torch.igamma, torch.igammac) for dtype in (torch.float32, torch.float64)},
    # (the small-argument series clipped x at 1e-30: K1(1e-300) was 1e30)
    **{f"{name} below 1e-30": (lambda fn: lambda d: fn(_t([1e-300, 1e-200, 1e-35, 0.5, 0], torch.float64, d)))(
        getattr(torch.special, name))
       for name in ("bessel_y0", "bessel_y1", "modified_bessel_k0", "modified_bessel_k1",
                    "scaled_modified_bessel_k0", "scaled_modified_bessel_k1")},
    # a pointwise op's out= of a narrower dtype: computed in the inputs' dtype, then rounded
    **{f"{name} of float64 into a float32 out=": (lambda fn: lambda d: fn(
        _t([1e100, -1e-300, 0.5, 3.0, -2.5], torch.float64, d), out=torch.empty(5, device=d)))(
        getattr(torch.special, name))
       for name in ("i1", "entr", "bessel_j0", "ndtri", "modified_bessel_k0", "erfcx", "log_ndtr")},
    "logit with eps above 0.5": lambda d: torch.logit(_t([0.0, 0.3, 0.5, 0.9, 1.0, _NAN], torch.float64, d), eps=0.6),
    "matrix_exp of an all-inf matrix": lambda d: torch.linalg.matrix_exp(torch.full((2, 2), _INF, device=d)),
    **{f"lstsq of {tuple(a)} by {tuple(b)}": (lambda a, b: lambda d: torch.linalg.lstsq(
        torch.ones(a, device=d), torch.ones(b, device=d)).solution)(a, b)
       for a, b in [((6, 3), (5, 2)), ((2, 6, 3), (3, 6, 2)), ((2, 1, 6, 3), (3, 6, 2, 1)), ((3,), (3,)),
                    ((6, 3), (2, 6, 2)), ((2, 6, 3), (6,)), ((6, 3), (2, 6))]},
    "nonzero_static of an empty input": lambda d: torch.nonzero_static(torch.ones(5, 0, 5, device=d), size=4),
    # LAPACK's gels solves by QR, without rcond
    "lstsq gels ignores rcond": lambda d: torch.linalg.lstsq(
        _t([[3.0, 0, 0], [0, 1.2, 0], [0, 0, 0.5], [1, 1, 1]], torch.float64, d),
        _t([[1.0], [2], [3], [4]], torch.float64, d), rcond=0.5, driver="gels").solution,
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(REPORTED))
def test_reported_calls_match_cpu(name):
    _assert_same_outcome(REPORTED[name])


def test_where_of_a_uint8_condition_warns_once_like_cpu(monkeypatch):
    from torchtpu.ops import warn_once

    monkeypatch.setattr(warn_once, "given", set())
    condition = _t([[1, 0, 2, 0, 0, 7, 1]], torch.uint8, "tpu")  # (a shape of its own: a kernel is built)
    with pytest.warns(UserWarning, match="where received a uint8 condition tensor. This behavior is deprecated"):
        torch.where(condition, 1.0, 0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (ATen warns once per process)
        torch.where(condition.t(), 1.0, 0.0)


@pytest.mark.parametrize("name", sorted(_GROWING_IN_PLACE))
def test_in_place_op_does_not_grow_self(name):
    results = {}
    for d in ("cpu", "tpu"):
        base = torch.ones(2, 4, device=d)
        view = base[:1]
        with pytest.raises(RuntimeError, match="output with shape .*1, 4.* doesn't match the broadcast shape"):
            _GROWING_IN_PLACE[name](view, torch.full((3, 1), 2.0, device=d))
        results[d] = (tuple(view.shape), base.cpu())
    assert results["tpu"][0] == (1, 4)
    torch.testing.assert_close(results["tpu"][1], results["cpu"][1])

# the same shapes of call that are fine
VALID = {
    # a complex out= of real inputs: the real result is cast into it
    "maximum into a complex out": _into(torch.complex64, lambda d, o: torch.maximum(_floats(d), -_floats(d), out=o)),
    "hypot into a complex out": _into(torch.complex64, lambda d, o: torch.hypot(_floats(d), _floats(d), out=o)),
    "bernoulli into an int64 out": _into(torch.int64, lambda d, o: torch.bernoulli(
        torch.tensor([0.0, 1.0, 1.0], device=d), out=o)),
    "add_ same elements": lambda d: _shared(d, lambda a: a[:4].add_(a[:4])),
    "copy_ same elements": lambda d: _shared(d, lambda a: a.view(2, 4)[:, :2].copy_(a.view(2, 4)[:, :2].t().t())),
    "mul_ disjoint halves": lambda d: _shared(d, lambda a: a.view(2, 4)[:, :2].mul_(a.view(2, 4)[:, 2:])),
    "int eq_": lambda d: torch.arange(3, device=d).eq_(1),
    "copy_ of an expanded tensor onto itself": lambda d: (lambda e: e.copy_(e))(_arange(d)[:3].expand(2, 3)),
    "float add_ double": lambda d: torch.ones(3, device=d).add_(torch.ones(3, dtype=torch.float64, device=d)),
    "bool add int alpha": lambda d: torch.add(torch.ones(3, dtype=torch.bool, device=d), True, alpha=2),
    "int floor div_": lambda d: torch.arange(6, device=d).div_(4, rounding_mode="floor"),
    "assert_async nan": lambda d: _synced(d, lambda: torch._assert_async(torch.tensor(float("nan"), device=d), "x")),
    "max_unpool2d of max_pool2d's indices": lambda d: _unpool(d, 2),
    "max_unpool3d of max_pool3d's indices": lambda d: _unpool(d, 3),
    "index_add_ bool into bool": lambda d: torch.zeros(3, dtype=torch.bool, device=d).index_add_(0, _zero(d), torch.ones(1, dtype=torch.bool, device=d)),
    "cumsum out= its input": lambda d: _shared(d, lambda a: torch.cumsum(a, 0, out=a)),
    "cat out= a disjoint part": lambda d: _shared(d, lambda a: torch.cat([a[:2]], out=a[4:6])),
    "atan2 of ints": lambda d: torch.atan2(torch.tensor([1], device=d), torch.tensor([2], device=d)),
    # (found by a numeric edge-case probe: crashed or raised another error)
    "searchsorted of empty rows": lambda d: torch.searchsorted(torch.empty(3, 0, device=d), torch.ones(3, 2, device=d)),
    "searchsorted of no rows": lambda d: torch.searchsorted(torch.empty(0, 3, device=d), torch.empty(0, 2, device=d)),
    "inf norm over dim -1 of an empty tensor": lambda d: torch.linalg.vector_norm(
        torch.ones(2, 0, 3, device=d), float("inf"), dim=-1),
    "nan_to_num of complex": lambda d: torch.nan_to_num(
        torch.tensor([complex(0, float("inf")), complex(float("nan"), 0), complex(-float("inf"), 1)], device=d)),
}  # fmt: skip


def _zero(device):
    return torch.tensor([0], device=device)


def _arange(device):
    return torch.arange(8.0, device=device)


def _synced(device, fn):
    fn()
    return torch.ones(1, device=device).cpu()


def _unpool(device, nd, bad=None):
    """max_unpool of max_pool's own output, optionally one index replaced
    by `bad`; the output plane is 4 wide per dim."""
    x = torch.arange(2.0 * 4**nd, device=device).reshape((1, 2) + (4,) * nd)
    pool, unpool = (F.max_pool2d, F.max_unpool2d) if nd == 2 else (F.max_pool3d, F.max_unpool3d)
    values, indices = pool(x, 2, return_indices=True)
    if bad is not None:
        indices = indices.clone()
        indices.view(-1)[-1] = bad
    return unpool(values, indices, 2)


def _shared(device, fn):
    a = _arange(device)
    fn(a)
    return a


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_call_raises_like_cpu(name, no_fallback):
    with pytest.raises(RuntimeError) as cpu:
        CASES[name]("cpu")
    with pytest.raises(type(cpu.value)):
        CASES[name]("tpu")


@pytest.mark.parametrize("name", sorted(VALID))
def test_valid_call_matches_cpu(name, no_fallback):
    torch.testing.assert_close(VALID[name]("tpu").cpu(), VALID[name]("cpu"))


@pytest.mark.parametrize(
    "name, fn",
    [("add_ on an expanded empty tensor", lambda d: torch.empty(0, 3, device=d).expand(2, 0, 3).add_(1)),
     ("sign of complex", lambda d: torch.sign(torch.ones(2, dtype=torch.complex64, device=d))),
     ("ordering complex", lambda d: torch.ones(2, dtype=torch.complex64, device=d) > 0),
     ("gelu of int", lambda d: torch.nn.functional.gelu(torch.ones(2, dtype=torch.int64, device=d))),
     ("leaky_relu of int", lambda d: torch.nn.functional.leaky_relu(torch.ones(2, dtype=torch.int64, device=d))),
     ("multinomial of zeros", lambda d: torch.multinomial(torch.zeros(2, device=d), 1)),
     ("multinomial of nan", lambda d: torch.multinomial(torch.tensor([1.0, float("nan")], device=d), 1))],
)  # fmt: skip
def test_fuzzer_found_error_parity(name, fn):
    """Each ran (or raised another type) on tpu where the CPU raises, or the
    reverse (found by a randomized-program fuzzer)."""
    def outcome(device):
        try:
            out = fn(device)
            if isinstance(out, torch.Tensor):
                out.cpu()  # (device-side checks report at the synchronization)
            return None
        except Exception as e:  # noqa: BLE001
            return type(e), str(e)

    cpu, tpu = outcome("cpu"), outcome("tpu")
    assert (cpu is None) == (tpu is None), (cpu, tpu)
    if cpu is not None:
        assert tpu[0] is cpu[0] and tpu[1].startswith(cpu[1][:40]), (cpu, tpu)


@pytest.mark.parametrize(
    "fn",
    [lambda g: torch.empty((), dtype=torch.int64).random_(generator=g),  # (DataLoader's shuffle seed)
     lambda g: torch.empty(3).uniform_(generator=g),
     lambda g: torch.randperm(5, generator=g),
     lambda g: torch.randn(3, generator=g),
     lambda g: torch.multinomial(torch.ones(3), 2, generator=g)],
)  # fmt: skip
def test_tpu_generator_for_a_cpu_op_raises_cudas_error(fn):
    # (a bare KeyError, or a mixed-devices message, before)
    with pytest.raises(RuntimeError, match="Expected a 'cpu' device type for generator but found 'tpu'"):
        fn(torch.Generator("tpu"))
    g = torch.Generator("tpu").manual_seed(3)
    assert torch.randn(3, generator=g, device="tpu").device.type == "tpu"


@pytest.mark.parametrize(
    "fn",
    [torch.linalg.inv, torch.linalg.cholesky, lambda a: torch.linalg.solve(a, torch.ones(2, 3, 1, device=a.device))],
)
def test_linalg_errors_are_raised_at_the_call_like_cuda(fn):
    # `try: inv(A) except LinAlgError: ...` works (the error surfaced at the
    # next synchronization, from an unrelated op)
    def message(device):
        a = torch.zeros(2, 3, 3, device=device)
        a[0] = torch.eye(3)
        with pytest.raises(torch.linalg.LinAlgError) as info:
            fn(a)
        return str(info.value)

    assert message("tpu") == message("cpu")
    assert torch.ones(2, device="tpu").sum().item() == 2.0  # (nothing left pending)


# ATen wraps these ops' dim with a range check their meta kernels skip: an
# out-of-range dim computed along a wrapped one (softmax(2) of a matrix ran
# over dim 0), in eager mode and in compiled graphs.
DIM_OUT_OF_RANGE = {
    "softmax(2)": lambda x: x.softmax(2),
    "log_softmax(-3)": lambda x: x.log_softmax(-3),
    "softmin(5)": lambda x: F.softmin(x, 5),
    "sort(2)": lambda x: x.sort(2).values,
    "argsort(-3)": lambda x: x.argsort(-3),
    "cummax(1) of a scalar": lambda x: x[0, 0].cummax(1).values,
    "softmax(1) of a scalar": lambda x: x[0, 0].softmax(1),
    "searchsorted of a scalar": lambda x: torch.searchsorted(x[0, 0], x[0, 0]),
}


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("name", sorted(DIM_OUT_OF_RANGE))
def test_dim_out_of_range_raises_like_cpu(name, compiled):
    fn = DIM_OUT_OF_RANGE[name]
    x = torch.arange(12.0).reshape(3, 4)
    with pytest.raises((IndexError, RuntimeError)) as cpu:
        fn(x)
    run = torch.compile(fn, backend="tpu") if compiled else fn
    with pytest.raises(type(cpu.value), match=re.escape(str(cpu.value)[:40])):
        run(x.to("tpu"))


# Reductions without an identity over no elements: the meta kernels raised
# JAX's "reducing over zero-size dimension" or another message.  (Compiled,
# dynamo's fake-tensor tracing raises first, as with any backend.)
EMPTY_REDUCTIONS = {
    "amax(0)": lambda x: x.amax(0),
    "amin((1, 0))": lambda x: x.amin((1, 0)),
    "amax(-2)": lambda x: x.amax(-2),
    "amax()": lambda x: x.amax(),
    "argmax(0)": lambda x: x.argmax(0),
    "argmin()": lambda x: x.argmin(),
    "kthvalue(1, 0)": lambda x: x.kthvalue(1, 0).values,
    "aminmax(dim=0)": lambda x: torch.aminmax(x, dim=0).min,
    "aminmax()": lambda x: torch.aminmax(x).max,
    "topk(4, 1)": lambda x: x.topk(4, 1).values,
}


@pytest.mark.parametrize("name", sorted(EMPTY_REDUCTIONS))
def test_empty_reduction_raises_like_cpu(name):
    fn = EMPTY_REDUCTIONS[name]
    x = torch.empty(0, 3)
    with pytest.raises((IndexError, RuntimeError)) as cpu:
        fn(x)
    with pytest.raises(type(cpu.value), match=re.escape(str(cpu.value))):
        fn(x.to("tpu"))


NAN, INF = float("nan"), float("inf")
SVD_OF_NON_FINITE = {
    "svdvals of a NaN matrix": lambda d: torch.linalg.svdvals(torch.tensor([[NAN, 1.0], [1.0, 1.0]], device=d)),
    "svd of a batch, NaN in element 1": lambda d: torch.linalg.svd(
        torch.tensor([[[1.0, 1.0], [1.0, 1.0]], [[NAN, 1.0], [1.0, 1.0]]], device=d)).S,
    "pinv of a NaN matrix": lambda d: torch.linalg.pinv(torch.tensor([[NAN, 1.0], [1.0, 1.0]], device=d)),
    "2-norm of a NaN matrix": lambda d: torch.linalg.matrix_norm(torch.tensor([[NAN, 1.0], [1.0, 1.0]], device=d), 2),
    "svdvals of an inf matrix (no error: NaNs)": lambda d: torch.linalg.svdvals(
        torch.tensor([[INF, 1.0], [1.0, 1.0]], device=d)),
    "svdvals of a finite matrix": lambda d: torch.linalg.svdvals(torch.tensor([[3.0, 1.0], [1.0, 1.0]], device=d)),
}


@pytest.mark.parametrize("name", sorted(SVD_OF_NON_FINITE))
def test_svd_of_nan_raises_at_the_call_like_cpu(name):
    # (found by a linalg probe: tpu returned NaNs where LAPACK reports info -4)
    fn = SVD_OF_NON_FINITE[name]
    try:
        want = fn("cpu")
    except torch.linalg.LinAlgError as e:
        with pytest.raises(torch.linalg.LinAlgError, match=re.escape(str(e))):
            fn("tpu")
    else:
        torch.testing.assert_close(fn("tpu").cpu(), want, equal_nan=True)


@pytest.mark.parametrize("name, fn", [
    ("var", lambda t: torch.var(t)), ("std over a dim of 1", lambda t: torch.std(t.view(1, 1), 1)),
    ("std_mean", lambda t: torch.std_mean(t)), ("var with a large correction", lambda t: torch.var(t, correction=2))])
def test_no_degrees_of_freedom_warns_like_cpu(name, fn):
    # (found by a fuzzer: NaN with no warning)
    with pytest.warns(UserWarning, match="degrees of freedom is <= 0"):
        fn(torch.ones(1, device="tpu"))


def test_mean_into_a_narrower_out_averages_in_the_input_dtype():
    # ATen averages a float32 input in float32, then casts to the float16
    # out=; tpu cast first (found by a fuzzer: 1-ulp differences)
    x = torch.randn(64, 300, generator=torch.Generator().manual_seed(0))
    want = torch.mean(x, 1, out=torch.empty(0, dtype=torch.float16))
    got = torch.mean(x.to("tpu"), 1, out=torch.empty(0, dtype=torch.float16, device="tpu"))
    assert torch.equal(got.cpu(), want)


WRONG_OUT_DTYPE = {
    "neg int -> long": _into(torch.int64, lambda d, o: torch.neg(torch.ones(2, dtype=torch.int32, device=d), out=o)),
    "bitwise_not": _into(torch.int64, lambda d, o: torch.bitwise_not(
        torch.ones(2, dtype=torch.int32, device=d), out=o)),
    "gelu bf16 -> float": _into(torch.float32, lambda d, o: torch._C._nn.gelu(_floats(d).bfloat16(), out=o)),
    "nan_to_num": _into(torch.float64, lambda d, o: torch.nan_to_num(_floats(d), out=o)),
    "take": _into(torch.float64, lambda d, o: torch.take(_floats(d), torch.tensor([0, 3], device=d), out=o)),
    "sort values": _into(torch.float64, lambda d, o: torch.sort(
        _floats(d), out=(o, torch.empty(0, dtype=torch.int64, device=d)))),
    "median values": _into(torch.float64, lambda d, o: torch.median(
        _floats(d), 0, out=(o, torch.empty(0, dtype=torch.int64, device=d)))),
    "amax": _into(torch.float64, lambda d, o: torch.amax(_floats(d), 0, out=o)),
    "all into float": _into(torch.float32, lambda d, o: torch.all(_floats(d), out=o)),
    "cummax": _into(torch.float64, lambda d, o: torch.cummax(
        _floats(d), 0, out=(o, torch.empty(0, dtype=torch.int64, device=d)))),
    "linalg_cross (decomposed)": _into(torch.float64, lambda d, o: torch.linalg.cross(
        torch.ones(2, 3, device=d), torch.ones(2, 3, device=d), out=o)),
    "isin (decomposed)": _into(torch.float32, lambda d, o: torch.isin(_floats(d), _floats(d), out=o)),
    "searchsorted (decomposed)": _into(torch.float32, lambda d, o: torch.searchsorted(
        torch.tensor([1.0, 2.0], device=d), _floats(d), out=o)),
}


def _raises_the_cpu_message(fn):
    with pytest.raises(RuntimeError) as cpu:
        fn("cpu")
    with pytest.raises(RuntimeError, match=f"^{re.escape(str(cpu.value))}$"):
        fn("tpu")


@pytest.mark.parametrize("name", sorted(WRONG_OUT_DTYPE))
def test_out_of_the_wrong_dtype_raises_cpu_message(name):
    """ATen refuses these outs (the meta kernels and decompositions cast)."""
    _raises_the_cpu_message(WRONG_OUT_DTYPE[name])


def _ones(d, *shape):
    return torch.ones(*shape, device=d)


SHAPE_MISMATCH = {
    "add": lambda d: _ones(d, 6) + _ones(d, 3),
    "mul_ in place": lambda d: _ones(d, 6).mul_(_ones(d, 3)),
    "mul 2-d": lambda d: _ones(d, 2, 6) * _ones(d, 4, 1),
    "where": lambda d: torch.where(_ones(d, 6) > 0, _ones(d, 3), 0.0),
    "addcmul": lambda d: torch.addcmul(_ones(d, 3), _ones(d, 2, 1), _ones(d, 4)),
    "masked_fill": lambda d: _ones(d, 2, 3).masked_fill(_ones(d, 3, 2).bool(), 1),
    "matmul 2-d": lambda d: _ones(d, 5, 3) @ _ones(d, 4, 2),
    "linear": lambda d: F.linear(_ones(d, 5, 3), _ones(d, 2, 4), _ones(d, 2)),
    "matmul 3-d @ 2-d": lambda d: _ones(d, 2, 5, 3) @ _ones(d, 4, 2),
    "bmm": lambda d: torch.bmm(_ones(d, 2, 5, 3), _ones(d, 2, 4, 2)),
    "baddbmm": lambda d: torch.baddbmm(_ones(d, 2, 5, 2), _ones(d, 2, 5, 3), _ones(d, 2, 4, 2)),
    "mv": lambda d: torch.mv(_ones(d, 5, 3), _ones(d, 4)),
    "dot": lambda d: _ones(d, 3) @ _ones(d, 4),
}


@pytest.mark.parametrize("name", sorted(SHAPE_MISMATCH))
def test_shape_mismatch_raises_cpu_message(name):
    """The commonest user error gets ATen's message, not the reference kernels'."""
    _raises_the_cpu_message(SHAPE_MISMATCH[name])
