"""Which aten ops a run used, how many times, and how each ran.

`Recorder` is a TorchDispatchMode: it sees every aten op below autograd (the
ops a backend actually has to run) and counts it by overload.  How an op ran
on `tpu` comes from the lowering table and the dispatcher's registrations;
whether it fell back to the CPU comes from `torchtpu.fallback_counts()`
(taken before and after), which is the authority: an op that fell back is
reported as such even when it ran inside another op's decomposition.
"""

from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

NATIVE = "native"
CPU_FALLBACK = "cpu-fallback"
HOST = "host"  # only CPU tensors involved (e.g. the optimizer's step counters)


class Recorder(TorchDispatchMode):
    """Counts aten overloads; `tpu` ops and host-only ops apart."""

    def __init__(self):
        super().__init__()
        self.counts = Counter()
        self.host = Counter()
        self.ops = {}
        self.random = set()  # ops that drew random numbers on tpu in some call

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.namespace == "profiler":  # record_function markers, not computation
            return func(*args, **kwargs)
        name = str(func)
        self.ops[name] = func
        if _touches_tpu(args, kwargs):
            self.counts[name] += 1
            if draws_random(func, (args, kwargs)):
                self.random.add(name)
        else:
            self.host[name] += 1
        return func(*args, **kwargs)


def _find_lowering(op):
    from ..ops.registration import ensure_loaded
    from ..ops.registry import find_lowering

    ensure_loaded()  # (the lowering table loads with the first tpu op)
    return find_lowering(op)


def draws_random(op, call=None) -> bool:
    """ATen's `nondeterministic_seeded` tag, except for ops that draw only
    for some calls on tpu (fused attention: only with dropout), which ask
    their lowering about `call`, (args, kwargs); for calls not seen one by
    one (inside compiled graphs, falling back inside another op) those
    count as not drawing."""
    if op is None or torch.Tag.nondeterministic_seeded not in op.tags:
        return False
    lowering = _find_lowering(op)
    if lowering is not None and callable(lowering.random):
        return call is not None and lowering.is_random(*call)
    return True


def _touches_tpu(args, kwargs):
    for x in tree_flatten((args, kwargs))[0]:
        if isinstance(x, torch.Tensor) and x.device.type == "tpu":
            return True
        if isinstance(x, torch.device) and x.type == "tpu":
            return True
    return False


def how_it_runs(op) -> str:
    """How `tpu` serves this overload when it does not fall back."""
    from ..ops import special

    if op is None:
        return "unknown"
    if op in special.HANDLERS:
        return "special handler"
    if _find_lowering(op) is not None:
        return "lowered"
    name = op.name()
    if torch._C._dispatch_has_kernel_for_dispatch_key(name, "PrivateUse1"):
        return "native kernel"  # metadata-only (views, empty) and transfer kernels in C++
    if any(
        torch._C._dispatch_has_kernel_for_dispatch_key(name, key)
        for key in ("CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional")
    ):
        return "composite"  # ATen's kernel made of other tpu ops (e.g. a structured op calling its out= variant)
    return "decomposed"  # PyTorch's decomposition into other tpu ops


def _resolve(name):
    try:
        namespace, op, overload = name.split(".", 2)
        return getattr(getattr(getattr(torch.ops, namespace), op), overload)
    except (AttributeError, ValueError):
        return None


def eager_table(recorder: Recorder, fallback_delta: dict) -> list:
    """Rows {op, count, path, how, cpu_calls} for an eager run."""
    rows = []
    for name, count in sorted(recorder.counts.items()):
        op = recorder.ops.get(name)
        falls = fallback_delta.get(name, 0)
        rows.append(
            dict(op=name, count=count, path=CPU_FALLBACK if falls else NATIVE, how=how_it_runs(op), cpu_calls=falls,
                 random=name in recorder.random)
        )
    seen = {r["op"] for r in rows}
    for name, falls in sorted(fallback_delta.items()):
        if name not in seen:  # fell back inside another op (decomposition or composite)
            rows.append(dict(op=name, count=falls, path=CPU_FALLBACK, how="inside another op", cpu_calls=falls,
                             random=draws_random(_resolve(name))))
    for name, count in sorted(recorder.host.items()):
        if name not in seen:
            rows.append(dict(op=name, count=count, path=HOST, how="CPU tensors only", cpu_calls=0))
    return rows


def compiled_table(graphs: list, recorder: Recorder, fallback_delta: dict) -> list:
    """Rows for a compiled run: the ops of the compiled graphs (executed
    count = occurrences x graph calls), then the ops that ran eagerly around
    them (the optimizer step) or inside graphs that fell back to eager."""
    counts, how = Counter(), {}
    for g in graphs:
        for name, n in g.get("op_counts", {}).items():
            counts[name] += n * g["requests"]  # requests: calls during the first step
            if g["fallback"]:
                how.setdefault(name, "eager (its graph runs op by op)")
            else:
                how[name] = "compiled graph"
    rows = []
    for name, count in sorted(counts.items()):
        falls = fallback_delta.get(name, 0)
        rows.append(dict(op=name, count=count, path=CPU_FALLBACK if falls else NATIVE, how=how[name], cpu_calls=falls,
                         random=draws_random(_resolve(name))))
    graph_ops = {r["op"] for r in rows}
    eager_rows = eager_table(recorder, {k: v for k, v in fallback_delta.items() if k not in graph_ops})
    for r in eager_rows:
        if r["how"] not in ("CPU tensors only",):
            r["how"] = "eager: " + r["how"]
    return rows + eager_rows


def summary(rows) -> dict:
    native = [r for r in rows if r["path"] == NATIVE]
    fallback = [r for r in rows if r["path"] == CPU_FALLBACK]
    return dict(
        distinct=len([r for r in rows if r["path"] != HOST]),
        calls=sum(r["count"] for r in rows if r["path"] != HOST),
        native=len(native),
        cpu_fallback=len(fallback),
        cpu_fallback_calls=sum(r["cpu_calls"] for r in fallback),
    )
