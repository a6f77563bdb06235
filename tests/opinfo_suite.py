"""The OpInfo suite's test body, shared by tests/test_opinfo*.py.

PyTorch's OpInfo database against `tpu`: every entry, in float32, bfloat16,
float16, int64, int32 and bool where its CPU kernel supports the dtype.  Each
sample runs on the CPU and on tpu and the results are compared (OpInfo's
tolerances where it declares them); also the in-place and out= variants,
non-contiguous samples, and float32 gradients against CPU autograd.  Random
ops are checked for shape, dtype, range and reproducibility.  A case passes
only if nothing fell back to the CPU.  The checks live in
torchtpu/tools/opinfo.py (shared with `python -m torchtpu.tools.coverage`,
which writes docs/ops.md).

The cases are split over SHARDS test files by op name (all cases of one op
in one file, so they share compiled kernels): CI runs
`pytest -n 2 --dist loadfile`, which hands whole files to workers.

Known failures are listed in tests/opinfo_expected_failures.txt, one case id
a line with a reason.  The list is strict: a listed case that passes fails,
so the list only shrinks -- except a reason starting "machine-dependent",
a case whose CPU reference differs between CPU models (native bf16/fp16).
"""

import os
import zlib

import pytest

from torchtpu.tools import opinfo

SHARDS = 4
EXPECTED_FAILURES_FILE = os.path.join(os.path.dirname(__file__), "opinfo_expected_failures.txt")
EXPECTED = opinfo.load_expected_failures(EXPECTED_FAILURES_FILE)
CASES = opinfo.cases()


def shard_of(case):
    return zlib.crc32(case.op.encode()) % SHARDS


def make_test(shard):
    """A parametrized test over this shard's cases."""
    cases = [c for c in CASES if shard_of(c) == shard]

    @pytest.mark.parametrize("case", cases, ids=[c.id for c in cases])
    def test_opinfo(case):
        check(case)

    return test_opinfo


def check(case):
    reason = EXPECTED.get(case.id)
    try:
        opinfo.run_case(case)
    except opinfo.Skip as e:
        if reason:
            pytest.fail(f"{case.id} is listed as an expected failure ({reason}) but has nothing to run")
        pytest.skip(str(e))
    except Exception:
        if reason:
            pytest.xfail(reason)
        raise
    if reason and not reason.startswith("machine-dependent"):  # (those pass on some CPUs)
        pytest.fail(
            f"{case.id} passes but is listed in tests/opinfo_expected_failures.txt ({reason}): remove the line"
        )
