"""Scalars ATen converts with an overflow check (ops/scalar_overflow.py):
`uint8.fill_(300)`, `masked_fill(m, 300)`, `half.clamp(max=1e5)` raise on
CPU, and must raise on tpu too -- not wrap or saturate -- whether the Scalar
is baked into the kernel or traced."""

import math

import jax.numpy as jnp
import pytest
import torch

from torchtpu.ops import scalar_overflow
from torchtpu.runtime.dtypes import to_jax

OVERFLOW = "without overflow"
M = torch.tensor([True, False, True])
IDX = torch.tensor([0])

# name -> fn(device, dtype, value): one call converting `value` with a check.
CASES = {
    "fill_": lambda d, dt, v: torch.zeros(3, dtype=dt, device=d).fill_(v),
    "full": lambda d, dt, v: torch.full((3,), v, dtype=dt, device=d),
    "full_like": lambda d, dt, v: torch.full_like(torch.zeros(3, dtype=dt, device=d), v),
    "masked_fill": lambda d, dt, v: torch.zeros(3, dtype=dt, device=d).masked_fill(M.to(d), v),
    # a 0-d value tensor on the device: ATen reads it as a Scalar
    "masked_fill value tensor": lambda d, dt, v: torch.zeros(3, dtype=dt, device=d).masked_fill(
        M.to(d), torch.tensor(v, device=d)),
    "index_fill_": lambda d, dt, v: torch.zeros(3, dtype=dt, device=d).index_fill_(0, IDX.to(d), v),
    "scatter": lambda d, dt, v: torch.zeros(3, dtype=dt, device=d).scatter(0, IDX.to(d), v),
    "clamp_min": lambda d, dt, v: torch.zeros(3, dtype=dt, device=d).clamp(min=v),
    "clamp_max": lambda d, dt, v: torch.zeros(3, dtype=dt, device=d).clamp_max(v),
    "threshold": lambda d, dt, v: torch.nn.functional.threshold(torch.zeros(3, dtype=dt, device=d), 1, v),
    "hardtanh": lambda d, dt, v: torch.nn.functional.hardtanh(torch.zeros(3, dtype=dt, device=d), -abs(v), abs(v)),
    "add_alpha": lambda d, dt, v: torch.add(torch.ones(3, dtype=dt, device=d), torch.ones(3, dtype=dt, device=d),
                                            alpha=v),
    "where": lambda d, dt, v: torch.where(M.to(d), torch.zeros(3, dtype=dt, device=d), v),
    "setitem": lambda d, dt, v: _setitem(torch.zeros(3, dtype=dt, device=d), v),
}  # fmt: skip


def _setitem(t, v):
    t[1] = v
    return t


def _outcome(fn):
    try:
        return "ok", fn().cpu()
    except (RuntimeError, TypeError) as e:
        return type(e).__name__, str(e)


def _same(cpu, tpu, where):
    assert tpu[0] == cpu[0], f"{where}: cpu {cpu}, tpu {tpu}"
    if cpu[0] == "ok":
        torch.testing.assert_close(tpu[1], cpu[1], equal_nan=True, msg=where)
    else:  # (a device-side check adds where it was raised)
        assert tpu[1].startswith(cpu[1]), where


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize(
    "dtype, value",
    [(torch.uint8, 300), (torch.uint8, -1), (torch.uint8, -256), (torch.int8, -129), (torch.int8, 127),
     (torch.int32, 2**31), (torch.float16, 1e5), (torch.float16, 65504.0), (torch.bfloat16, 1e39),
     (torch.float32, 1e300), (torch.float32, float("inf"))],
)  # fmt: skip
def test_baked_scalar_raises_as_on_cpu(name, dtype, value):
    fn = CASES[name]
    if name in ("hardtanh", "threshold") and not (dtype.is_floating_point or dtype in (torch.int8, torch.int32)):
        pytest.skip("no CPU kernel for this dtype")
    _same(_outcome(lambda: fn("cpu", dtype, value)), _outcome(lambda: fn("tpu", dtype, value)), f"{name} {value}")


@pytest.mark.parametrize("name", ["fill_", "masked_fill", "clamp_min", "add_alpha"])
def test_traced_scalar_raises_at_the_next_synchronization(name):
    """Past dispatch.MAX_BAKED_VALUES distinct values the Scalar is traced: the
    kernel checks it on the device."""
    fn = CASES[name]
    for value in range(1, 7):  # the position turns traced
        _same(_outcome(lambda: fn("cpu", torch.uint8, value)), _outcome(lambda: fn("tpu", torch.uint8, value)),
              f"{name} {value}")
    out = fn("tpu", torch.uint8, 300)  # eager ops do not wait for the check
    with pytest.raises(RuntimeError, match="value cannot be converted to type uint8_t without overflow"):
        out.cpu()
    torch.testing.assert_close(fn("tpu", torch.uint8, 200).cpu(), fn("cpu", torch.uint8, 200))


VALUES = [0, 1, -1, 127, 128, -128, -129, 255, 256, -255, -256, 65504, 65505, 65519.0, 65520.0, 1e5, -1e5, 2**31,
          -(2**31) - 1, 2**63 - 1, -(2**63), 1e300, -1e300, math.inf, -math.inf, math.nan, 0.5, -0.5, 255.5, -1.0,
          448.0, 449.0, 57344.0, 3.5e38, True, False, 1 + 0j, 1 + 1j, 1e300 + 0j, complex(0, 1e300)]  # fmt: skip


@pytest.mark.parametrize("dtype", sorted(scalar_overflow.CPP_NAMES, key=str))
def test_device_rules_agree_with_atens_conversion(dtype):
    """`overflows` (the traced check) against ATen's checked conversion, and
    the message's type name against ATen's."""
    for value in VALUES:
        try:
            torch.empty(2, dtype=dtype).fill_(value)
            expected = False
        except RuntimeError as e:
            if OVERFLOW not in str(e):
                continue  # (a dtype without a CPU fill)
            assert f"type {scalar_overflow.CPP_NAMES[dtype]} without" in str(e)
            expected = True
        got = bool(scalar_overflow.overflows(jnp.asarray(value), to_jax(dtype)))
        assert got == expected, f"{dtype} {value!r}: ATen overflows={expected}"


@pytest.mark.parametrize(
    "self_dtype, value_dtype, value",
    [(torch.int64, torch.int32, -3), (torch.int16, torch.int8, 5), (torch.uint8, torch.uint8, 0),
     (torch.uint8, torch.uint8, 255), (torch.float16, torch.float32, 1.5)],
)  # fmt: skip
def test_masked_fill_with_a_narrow_value_tensor_is_not_an_overflow(self_dtype, value_dtype, value):
    # The value tensor is read as a Scalar (item()): compared in its own
    # narrow dtype, uint8's 0 < -255 wrapped (found by an eager fuzzer).
    mask = torch.tensor([True, False, True])
    want = torch.zeros(3, dtype=self_dtype).masked_fill_(mask, torch.tensor(value, dtype=value_dtype))
    got = torch.zeros(3, dtype=self_dtype, device="tpu").masked_fill_(
        mask.to("tpu"), torch.tensor(value, dtype=value_dtype, device="tpu"))
    assert torch.equal(got.cpu(), want)


# The checked Scalar's in-place and out= variants: `pow` was checked, `pow_`
# not (the table is keyed by schema name; out= overloads share the functional
# name).  Half/bfloat16 lerp, addcmul, addcdiv and softplus convert to float
# (their opmath type): 7e4 is fine there, 1e39 is not.
VARIANTS = {
    "pow_": lambda d, dt, v: torch.ones(2, dtype=dt, device=d).pow_(v),
    "pow out=": lambda d, dt, v: torch.pow(torch.ones(2, dtype=dt, device=d), v, out=torch.ones(2, dtype=dt, device=d)),
    "clamp_": lambda d, dt, v: torch.ones(2, dtype=dt, device=d).clamp_(max=v),
    "add_": lambda d, dt, v: torch.ones(2, dtype=dt, device=d).add_(torch.ones(2, dtype=dt, device=d), alpha=v),
    "addcmul_": lambda d, dt, v: torch.ones(2, dtype=dt, device=d).addcmul_(
        torch.ones(2, dtype=dt, device=d), torch.ones(2, dtype=dt, device=d), value=v),
    "lerp_": lambda d, dt, v: torch.ones(2, dtype=dt, device=d).lerp_(torch.ones(2, dtype=dt, device=d), v),
    "lerp out=": lambda d, dt, v: torch.lerp(torch.ones(2, dtype=dt, device=d), torch.ones(2, dtype=dt, device=d), v,
                                             out=torch.ones(2, dtype=dt, device=d)),
    "addcdiv": lambda d, dt, v: torch.addcdiv(torch.ones(2, dtype=dt, device=d), torch.ones(2, dtype=dt, device=d),
                                              torch.ones(2, dtype=dt, device=d), value=v),
    "softplus": lambda d, dt, v: torch.nn.functional.softplus(torch.ones(2, dtype=dt, device=d), beta=v),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(VARIANTS))
@pytest.mark.parametrize("dtype, value", [(torch.int16, 70000), (torch.float16, 7e4), (torch.float16, 1e39),
                                          (torch.bfloat16, 1e39), (torch.float32, 1e39)])
def test_in_place_and_out_variants_check_as_on_cpu(name, dtype, value):
    fn = VARIANTS[name]
    if not dtype.is_floating_point and name in ("lerp_", "lerp out=", "addcdiv", "softplus"):
        pytest.skip("no integer kernel")
    _same(_outcome(lambda: fn("cpu", dtype, value)), _outcome(lambda: fn("tpu", dtype, value)), f"{name} {value}")


# Meta kernels check some Scalars' values (histc: max >= min; softshrink:
# lambd >= 0).  Once a Scalar is traced its value is not in the kernel key:
# a cache hit must still raise.
META_CHECKED = {
    "histc": lambda d, v: torch.histc(torch.tensor([1.0, 2.0], device=d), 4, min=v, max=v + 10),
    "histc bad": lambda d, v: torch.histc(torch.tensor([1.0, 2.0], device=d), 4, min=v + 3, max=v + 1),
    "histc out=": lambda d, v: torch.histc(torch.tensor([1.0, 2.0], device=d), 4, min=v, max=v + 10,
                                           out=torch.empty(4, device=d)),
    "histc out= bad": lambda d, v: torch.histc(torch.tensor([1.0, 2.0], device=d), 4, min=v + 3, max=v + 1,
                                               out=torch.empty(4, device=d)),
    "softshrink": lambda d, v: torch.nn.functional.softshrink(torch.tensor([1.0, 2.0], device=d), float(v)),
    "softshrink bad": lambda d, v: torch.nn.functional.softshrink(torch.tensor([1.0, 2.0], device=d), -1.0 - v),
}


@pytest.mark.parametrize("name, message", [("histc", "max must be larger than min"),
                                           ("histc out=", "max must be larger than min"),
                                           ("softshrink", "lambda must be in range")])
def test_meta_value_checks_hold_once_the_scalar_is_traced(name, message):
    import torchtpu

    fn, bad = META_CHECKED[name], META_CHECKED[name + " bad"]
    for v in range(5):  # past dispatch.MAX_BAKED_VALUES: traced
        torch.testing.assert_close(fn("tpu", v).cpu(), fn("cpu", v))
    compiles = torchtpu.kernel_cache_stats()["compiles"]
    for v in range(5, 8):
        # (PyTorch's meta kernels word the messages slightly differently)
        with pytest.raises(RuntimeError, match=message):
            bad("cpu", v)
        with pytest.raises(RuntimeError, match=message):
            bad("tpu", v)
        torch.testing.assert_close(fn("tpu", v).cpu(), fn("cpu", v))  # and valid values still run
    assert torchtpu.kernel_cache_stats()["compiles"] == compiles  # (still one traced kernel)
