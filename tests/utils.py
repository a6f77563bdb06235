"""Helpers to check tpu results against the same program on the CPU."""

import torch
import torchtpu
from torch.utils._pytree import tree_flatten, tree_map

TPU = torch.device("tpu", 0)

# Default tolerances per dtype (float32 matches CPU closely: matmul precision
# is HIGHEST by default).
TOLERANCES = {
    torch.float32: dict(atol=1e-5, rtol=1.3e-5),
    torch.float64: dict(atol=1e-7, rtol=1e-7),
    torch.bfloat16: dict(atol=1e-2, rtol=1.6e-2),
    torch.float16: dict(atol=1e-3, rtol=1e-3),
}


def to_tpu(tree):
    """Copies of every tensor on tpu:0 (leaf-ness and requires_grad kept)."""

    def move(x):
        if isinstance(x, torch.Tensor):
            y = x.detach().to(TPU)
            return y.requires_grad_(x.requires_grad)
        return x

    return tree_map(move, tree)


def clone_cpu(tree):
    def copy(x):
        if isinstance(x, torch.Tensor):
            return x.detach().clone().requires_grad_(x.requires_grad)
        return x

    return tree_map(copy, tree)


def to_cpu(tree):
    return tree_map(lambda x: x.detach().cpu() if isinstance(x, torch.Tensor) else x, tree)


def assert_close(actual, expected, **tol):
    """Compare a tpu result tree with a CPU one (dtype, shape and values)."""
    a_flat, _ = tree_flatten(actual)
    e_flat, _ = tree_flatten(expected)
    assert len(a_flat) == len(e_flat), (len(a_flat), len(e_flat))
    for a, e in zip(a_flat, e_flat):
        if isinstance(e, torch.Tensor):
            assert isinstance(a, torch.Tensor), type(a)
            assert a.device.type == "tpu", a.device
            kw = dict(TOLERANCES.get(e.dtype, {}))
            kw.update(tol)
            torch.testing.assert_close(a.cpu(), e, **kw)
        else:
            assert a == e or (a != a and e != e), (a, e)


def check(fn, *args, grad=False, allow_fallback=False, **tol):
    """Run fn on CPU copies and on tpu copies of args; compare outputs and,
    with grad=True, gradients of every floating input that requires grad
    (outputs are reduced with fixed random weights).  Returns the tpu output.
    """
    cpu_args = clone_cpu(args)
    tpu_args = to_tpu(cpu_args)
    before = torchtpu.fallback_counts()
    expected = fn(*cpu_args)
    actual = fn(*tpu_args)
    assert_close(actual, expected, **tol)
    if grad:
        e_out = [t for t in tree_flatten(expected)[0] if isinstance(t, torch.Tensor) and t.requires_grad]
        a_out = [t for t in tree_flatten(actual)[0] if isinstance(t, torch.Tensor) and t.requires_grad]
        gen = torch.Generator().manual_seed(1234)
        weights = [torch.randn(t.shape, generator=gen, dtype=t.dtype) for t in e_out]
        torch.autograd.backward(e_out, weights)
        torch.autograd.backward(a_out, [w.to(TPU) for w in weights])
        e_leaves = [t for t in tree_flatten(cpu_args)[0] if isinstance(t, torch.Tensor) and t.requires_grad]
        a_leaves = [t for t in tree_flatten(tpu_args)[0] if isinstance(t, torch.Tensor) and t.requires_grad]
        for a, e in zip(a_leaves, e_leaves):
            if e.grad is None:
                assert a.grad is None
            else:
                assert_close(a.grad, e.grad, **tol)
    if not allow_fallback:
        after = torchtpu.fallback_counts()
        new = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
        assert not new, f"ops fell back to the CPU: {new}"
    return actual
