"""One mode's run: forward, backward and N optimizer steps from the
workload's initial weights, timed step by step (each step ends with the
loss read back, which waits for the device, as `.item()` does on CUDA).

Modes: "cpu" (the reference), "eager" (`tpu`), "compiled"
(`torch.compile(forward + loss, backend="tpu")`; backward is AOTAutograd's
compiled graph; the optimizer step runs eagerly on `tpu`).

What is recorded: the loss at every step, the outputs of the first forward
and the gradients of the first backward (copied to the CPU outside the
timed region), step times, the ops of the first step (ops.Recorder, so the
steady steps are timed without it), CPU fallbacks, peak device memory and,
when compiled, graph breaks, recompilations and compile telemetry.

Warm cache: after the run, the in-process caches (torchtpu's eager kernels,
dynamo's graphs, JAX's executables) are dropped and one more step runs on a
fresh copy of the model, so its compilations load from the persistent
compilation cache the run has just filled: that step's time is the warm-up a
second process would see (less Python start-up and imports).
"""

import contextlib
import gc
import statistics
import time
import traceback

import torch

from . import ops as ops_mod

MODES = ("cpu", "eager", "compiled")


def make_optimizer(name, params, lr):
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    raise ValueError(f"unknown optimizer {name!r}")


def _sync(device):
    if device.type == "tpu":
        torch.tpu.synchronize()


def _to_cpu_list(output):
    from torch.utils._pytree import tree_flatten

    return [t.detach().cpu() for t in tree_flatten(output)[0] if isinstance(t, torch.Tensor)]


def _fallback_counts():
    import torchtpu

    return torchtpu.fallback_counts()


def _delta(after, before):
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0) > 0}


class _Step:
    """forward + loss, backward, optimizer step for one model copy."""

    def __init__(self, mode, workload, device, optimizer, lr):
        self.model, self.inputs, self.target = workload.to(device)
        self.device = device
        self.opt = make_optimizer(optimizer, self.model.parameters(), lr)
        model, loss_of = self.model, workload.loss

        def forward_loss(inputs, target):
            out = model(*inputs)
            return out, loss_of(out, target)

        self.forward_loss = torch.compile(forward_loss, backend="tpu") if mode == "compiled" else forward_loss
        self.compiled = mode == "compiled"

    def __call__(self, recorder=None):
        """One step; returns (outputs, loss tensor).  `recorder` sees the
        eager parts of the step: all of it, or only the optimizer's part
        when forward and backward are compiled graphs."""
        whole = recorder if recorder is not None and not self.compiled else contextlib.nullcontext()
        eager_part = recorder if recorder is not None and self.compiled else contextlib.nullcontext()
        with whole:
            out, loss = self.forward_loss(self.inputs, self.target)
            with eager_part:
                self.opt.zero_grad(set_to_none=True)
            loss.backward()
            with eager_part:
                self.opt.step()
        return out, loss


def run_mode(mode, workload, steps, optimizer="adamw", lr=1e-3, device="tpu", seed=0, warm_cache=True,
             progress=None) -> dict:
    """Run one mode; returns its record.  A tpu mode that raises returns a
    record with `error` set; the CPU reference lets the exception through."""
    dev = torch.device("cpu" if mode == "cpu" else device)
    if dev.type == "tpu" and dev.index is None:
        dev = torch.device("tpu", torch.tpu.current_device())
    record = dict(mode=mode, device=str(dev), steps=steps, losses=[], step_times=[], outputs=[], gradients={})
    try:
        _run(mode, workload, steps, optimizer, lr, dev, seed, warm_cache, progress, record)
    except Exception as e:
        if mode == "cpu":
            raise
        record["error"] = f"{type(e).__name__}: {e}"
        record["traceback"] = traceback.format_exc(limit=-8)
    finally:
        gc.collect()
    return record


def _run(mode, workload, steps, optimizer, lr, dev, seed, warm_cache, progress, record):
    import torchtpu

    on_tpu = dev.type == "tpu"
    if on_tpu:
        torch.tpu._lazy_init()
        record["peak_memory_since_process_start"] = not _reset_peak(dev)
        record["memory_baseline_bytes"] = torch.tpu.memory_allocated(dev)
    if mode == "compiled":
        from torch import _dynamo

        _dynamo.reset()
        _dynamo.utils.counters.clear()
        from ..compile import reset_compile_stats

        reset_compile_stats()
    torch.manual_seed(seed)
    step = _Step(mode, workload, dev, optimizer, lr)
    fallbacks_before = _fallback_counts()
    recorder = ops_mod.Recorder() if on_tpu else None
    kernels_before = torchtpu.kernel_cache_stats()["compiles"]
    for i in range(steps):
        first = i == 0
        before_step = _fallback_counts() if first else None
        t0 = time.perf_counter()
        out, loss = step(recorder if first else None)
        loss_value = loss.item()
        _sync(dev)
        record["step_times"].append(time.perf_counter() - t0)
        record["losses"].append(loss_value)
        if first:
            record["first_step_fallbacks"] = _delta(_fallback_counts(), before_step)
            if mode == "compiled":
                after_first = torchtpu.compile_stats()
                first_graphs = after_first["per_graph"]
                first_frames = _dynamo_frames()
            record["outputs"] = _to_cpu_list(out)
            record["gradients"] = {
                n: p.grad.detach().cpu() for n, p in step.model.named_parameters() if p.grad is not None
            }
        del out, loss
        if progress:
            progress(mode, i + 1, steps)
    record["fallbacks"] = _delta(_fallback_counts(), fallbacks_before)
    _timing(record, workload)
    if on_tpu:
        record["peak_memory_bytes"] = torch.tpu.max_memory_allocated(dev)
    if mode == "compiled":
        graphs = torchtpu.compile_stats()
        record["compile"] = {k: v for k, v in graphs.items() if k != "per_graph"}
        record["compile"]["per_graph"] = [
            {k: g[k] for k in ("name", "ops", "requests", "compilations", "compile_seconds", "fallback")}
            for g in graphs["per_graph"]
        ]
        record.update(_dynamo_counters())
        # Recompilations: what had to compile after the first step (a steady
        # training loop compiles nothing more): dynamo frames and XLA executables.
        record["dynamo_recompilations"] = _dynamo_frames() - first_frames
        record["xla_recompilations"] = graphs["compilations"] - after_first["compilations"]
        record["recompilations"] = record["dynamo_recompilations"] + record["xla_recompilations"]
        record["ops"] = ops_mod.compiled_table(first_graphs, recorder, record["first_step_fallbacks"])
    elif on_tpu:
        record["ops"] = ops_mod.eager_table(recorder, record["first_step_fallbacks"])
        record["eager_kernels_compiled"] = torchtpu.kernel_cache_stats()["compiles"] - kernels_before
    del step
    gc.collect()
    if on_tpu and warm_cache:
        record["warm_cache_first_step_s"], record["warm_cache_persistent_hits"] = _warm_cache_step(
            mode, workload, optimizer, lr, dev, seed
        )


def _reset_peak(dev) -> bool:
    """Start a new peak-memory window; False if the runtime cannot."""
    reset = getattr(torch.tpu, "reset_peak_memory_stats", None)
    try:
        if reset is not None:
            reset(dev)
        else:
            torch.accelerator.reset_peak_memory_stats(dev)
        return True
    except (AttributeError, RuntimeError):
        return False


def _timing(record, workload):
    times = record["step_times"]
    record["first_step_s"] = times[0]
    # The later half of the steps: the first ones still compile (optimizer
    # state appears at step 1, scalars that change are promoted to traced).
    steady = statistics.median(times[max(1, len(times) // 2):]) if len(times) > 1 else times[0]
    record["steady_step_s"] = steady
    record["throughput"] = workload.per_step / steady if steady > 0 else 0.0
    record["throughput_unit"] = workload.unit + "/s"


def _dynamo_counters():
    from torch._dynamo.utils import counters

    breaks = counters.get("graph_break", {})
    stats = counters.get("stats", {})
    return dict(
        graph_breaks=sum(breaks.values()),
        graph_break_reasons=sorted(str(k).split("\n")[0] for k in breaks)[:10],
        dynamo_graphs=stats.get("unique_graphs", 0),
    )


def _dynamo_frames():
    from torch._dynamo.utils import counters

    return counters.get("frames", {}).get("total", 0)


def forget_compiled():
    """Drop every in-process compilation cache (torchtpu's eager kernels and
    the C++ entry point's copy of them, dynamo's graphs, JAX's executables);
    the persistent compilation cache on disk stays."""
    import jax
    from torch import _dynamo

    from .. import _C
    from ..ops import dispatch

    _dynamo.reset()
    dispatch._cache.clear()
    _C._clear_fastpath_cache()
    jax.clear_caches()


def _warm_cache_step(mode, workload, optimizer, lr, dev, seed):
    from ..runtime import compile_cache

    forget_compiled()
    torch.manual_seed(seed)
    step = _Step(mode, workload, dev, optimizer, lr)
    hits = compile_cache.persistent_hits()
    t0 = time.perf_counter()
    out, loss = step()
    loss.item()
    _sync(dev)
    elapsed = time.perf_counter() - t0
    hits = compile_cache.persistent_hits() - hits
    del step, out, loss
    gc.collect()
    return elapsed, hits
