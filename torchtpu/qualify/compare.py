"""Deviation of a run from the CPU reference.

Per quantity (outputs of the first forward, the loss at every step, the
gradients of the first backward): the largest absolute difference, the
largest relative one (over elements whose reference magnitude exceeds atol,
so near-zero references do not make it meaningless), and `score`, the
largest |a - b| / (atol + rtol * |b|) -- the same test as torch.allclose, so
PASS means score <= 1.  Non-finite mismatches (NaN where the reference is
finite) make the score infinite.
"""

import math

import torch

DEFAULT_RTOL = 1e-3
DEFAULT_ATOL = 1e-5


def deviation(actual, reference, rtol, atol) -> dict:
    """actual, reference: lists of CPU tensors (same structure)."""
    max_abs = max_rel = score = 0.0
    elements = 0
    for a, b in zip(actual, reference):
        if a.shape != b.shape:
            return dict(max_abs=math.inf, max_rel=math.inf, score=math.inf, elements=elements,
                        error=f"shape {tuple(a.shape)} vs reference {tuple(b.shape)}")
        a = a.detach().to(torch.float64)
        b = b.detach().to(torch.float64)
        elements += b.numel()
        if b.numel() == 0:
            continue
        both_nan = a.isnan() & b.isnan()
        same_inf = a.isinf() & (a == b)
        diff = (a - b).abs()
        diff = torch.where(both_nan | same_inf, torch.zeros_like(diff), diff)
        diff = torch.where(diff.isnan(), torch.full_like(diff, math.inf), diff)
        max_abs = max(max_abs, diff.max().item())
        big = b.abs() > atol
        if big.any():
            max_rel = max(max_rel, (diff[big] / b.abs()[big]).max().item())
        finite_b = torch.where(b.isfinite(), b.abs(), torch.zeros_like(b))
        score = max(score, (diff / (atol + rtol * finite_b)).max().item())
    if len(actual) != len(reference):
        return dict(max_abs=math.inf, max_rel=math.inf, score=math.inf, elements=elements,
                    error=f"{len(actual)} tensors vs reference {len(reference)}")
    return dict(max_abs=max_abs, max_rel=max_rel, score=score, elements=elements)


def compare_run(run, reference, rtol, atol) -> dict:
    """{outputs, losses, gradients: deviation} of one mode's record against the reference's."""
    return {
        "outputs": deviation(run["outputs"], reference["outputs"], rtol, atol),
        "losses": deviation([torch.tensor(run["losses"])], [torch.tensor(reference["losses"])], rtol, atol)
        if len(run["losses"]) == len(reference["losses"])
        else dict(max_abs=math.inf, max_rel=math.inf, score=math.inf, elements=0,
                  error=f"{len(run['losses'])} losses vs reference {len(reference['losses'])}"),
        "gradients": _grads(run["gradients"], reference["gradients"], rtol, atol),
    }


def _grads(actual: dict, reference: dict, rtol, atol):
    if set(actual) != set(reference):
        missing = sorted(set(reference) ^ set(actual))
        return dict(max_abs=math.inf, max_rel=math.inf, score=math.inf, elements=0,
                    error=f"gradients differ in which parameters have one: {', '.join(missing[:5])}")
    names = sorted(reference)
    result = deviation([actual[n] for n in names], [reference[n] for n in names], rtol, atol)
    worst = max(names, key=lambda n: deviation([actual[n]], [reference[n]], rtol, atol)["score"], default=None)
    if worst is not None:
        result["worst_parameter"] = worst
    return result


def passed(deviations: dict) -> bool:
    return all(d["score"] <= 1.0 for d in deviations.values())
