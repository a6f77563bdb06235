"""Test session setup: JAX on the CPU stands in for the TPU, with two host
devices so multi-device behaviour is testable."""

import os

os.environ.setdefault("TORCHTPU_PLATFORM", "cpu")
os.environ.setdefault("TORCHTPU_NUM_DEVICES", "2")
os.environ.setdefault("TORCHTPU_CPU_FALLBACK", "warn")

import pytest  # noqa: E402
import torch  # noqa: E402

import torchtpu  # noqa: E402,F401


@pytest.fixture(autouse=True)
def _fresh_state():
    """Each test starts on tpu:0 with a known seed and default precision."""
    torch.tpu.set_device(0)
    torch.manual_seed(0)
    yield
    torch.set_float32_matmul_precision("highest")


@pytest.fixture
def no_fallback():
    """Fails the test if any op ran on the CPU for lack of a lowering."""
    before = torchtpu.fallback_counts()
    yield
    after = torchtpu.fallback_counts()
    new = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
    assert not new, f"ops fell back to the CPU: {new}"
