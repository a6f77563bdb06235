"""Pinpointing: which op makes eager `tpu` deviate from the CPU.

The eager run is replayed from the same initial weights under a
TorchDispatchMode.  For each aten op that touches a `tpu` tensor its inputs
are copied to the CPU *before* it runs, the op runs on `tpu`, the same op runs
on the CPU copies, and the op's results (returns and mutated arguments) are
compared with the qualify tolerance.  Each op gets identical inputs on both
sides, so small differences do not accumulate from op to op: the first op
beyond tolerance is the culprit.  Ops whose results legitimately differ are
not compared: random ops (ATen's `nondeterministic_seeded` tag, e.g.
dropout), uninitialised allocations (`empty*`) and storage-level ops
(`as_strided`, `set_`, `resize_`), whose CPU copy has a different storage.

Where: for forward ops the innermost stack frame in user code (outside torch,
torchtpu and the standard library; the built-in models count as user code);
for backward ops the autograd node and the forward line that created it
(anomaly mode records those tracebacks during the replay).
"""

import os
import re
import sysconfig
import traceback

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from .compare import deviation
from .ops import _touches_tpu
from .runner import make_optimizer

_SKIP_NAMES = ("empty", "as_strided", "set_", "resize_", "_local_scalar_dense")


def _skip(func) -> bool:
    if torch.Tag.nondeterministic_seeded in func.tags:
        return True
    base = func._schema.name.split("::")[1]
    return any(base.startswith(prefix) or base.startswith("new_" + prefix) for prefix in _SKIP_NAMES)


def _internal_dirs():
    import jax

    import torchtpu

    dirs = [os.path.dirname(torch.__file__), os.path.dirname(torchtpu.__file__), os.path.dirname(jax.__file__),
            sysconfig.get_paths()["stdlib"]]
    return tuple(os.path.realpath(d) + os.sep for d in dirs)


def _user_files():
    import torchtpu

    root = os.path.dirname(os.path.realpath(torchtpu.__file__))
    return {os.path.join(root, "models.py"), os.path.join(root, "qualify", "workload.py")}


class _Where:
    def __init__(self):
        self.internal = _internal_dirs()
        self.user = _user_files()

    def is_user(self, filename) -> bool:
        path = os.path.realpath(filename)
        return path in self.user or not path.startswith(self.internal) and not filename.startswith("<frozen")

    def innermost(self, frames):
        """frames: [(filename, lineno, name, line)], outermost first.  Only
        frames the replay called count (not whoever called qualify)."""
        here = os.path.realpath(__file__)
        starts = [i for i, f in enumerate(frames) if f[2] == "pinpoint" and os.path.realpath(f[0]) == here]
        if starts:
            frames = frames[starts[-1] + 1:]
        for filename, lineno, name, line in reversed(frames):
            if self.is_user(filename):
                return f"{_short(filename)}:{lineno} in {name}: {(line or '').strip()}"
        return None


def _short(filename):
    cwd = os.getcwd() + os.sep
    return filename[len(cwd):] if filename.startswith(cwd) else filename


_FRAME = re.compile(r'File "(.+?)", line (\d+), in (.+?)\n\s*(.*)')


def _parse_formatted(lines):
    frames = []
    for chunk in lines:
        for m in _FRAME.finditer(chunk):
            frames.append((m.group(1), int(m.group(2)), m.group(3), m.group(4)))
    return frames


def _cpu(x):
    if isinstance(x, torch.Tensor) and x.device.type == "tpu":
        return x.detach().cpu()
    if isinstance(x, torch.device) and x.type == "tpu":
        return torch.device("cpu")
    return x


def _tensors(x):
    return [t for t in tree_flatten(x)[0] if isinstance(t, torch.Tensor)]


def _mutated(func, args, kwargs):
    """The arguments `func` writes to, as a list."""
    out = []
    for i, arg in enumerate(func._schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            value = args[i] if i < len(args) else kwargs.get(arg.name)
            if value is not None:
                out.append(value)
    return out


class Replayer(TorchDispatchMode):
    def __init__(self, rtol, atol):
        super().__init__()
        self.rtol, self.atol = rtol, atol
        self.where = _Where()
        self.phase, self.step = "forward", 0
        self.outside_user_code = "(no frame outside torch/torchtpu)"  # what to say when no user frame is found
        self.compared = 0
        self.first = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.first is not None or _skip(func) or not _touches_tpu(args, kwargs):
            return func(*args, **kwargs)
        cpu_args, cpu_kwargs = tree_map(_cpu, (args, kwargs))
        out = func(*args, **kwargs)
        try:
            ref = func(*cpu_args, **cpu_kwargs)
        except Exception:  # an op the CPU cannot run this way: nothing to compare
            return out
        actual = _tensors(out) + _tensors(_mutated(func, args, kwargs))
        expected = _tensors(ref) + _tensors(_mutated(func, cpu_args, cpu_kwargs))
        actual_cpu = [t.detach().cpu() for t in actual]
        expected = [t.detach() for t in expected]
        if [t.dtype for t in actual_cpu] != [t.dtype for t in expected]:
            dev = dict(max_abs=float("inf"), max_rel=float("inf"), score=float("inf"),
                       error=f"dtypes {[str(t.dtype) for t in actual_cpu]} vs CPU {[str(t.dtype) for t in expected]}")
        else:
            dev = deviation(actual_cpu, expected, self.rtol, self.atol)
        self.compared += 1
        if dev["score"] > 1.0:
            self.first = dict(op=str(func), step=self.step, phase=self.phase, where=self._where(), **dev)
        return out

    def _where(self):
        node = torch._C._current_autograd_node()
        if node is not None:  # a backward op: where its forward ran
            forward = self.where.innermost(_parse_formatted(node.metadata.get("traceback_", [])))
            return f"backward of {node.name()}" + (f", forward at {forward}" if forward else "")
        frames = [(f.filename, f.lineno, f.name, f.line) for f in traceback.extract_stack()]
        return self.where.innermost(frames) or self.outside_user_code


def pinpoint(workload, steps, optimizer, lr, device, seed, rtol, atol) -> dict:
    """Replay the eager run op by op; {op, step, phase, where, deviation...}
    of the first op beyond tolerance, or {op: None, compared: n}."""
    torch.manual_seed(seed)
    model, inputs, target = workload.to(device)
    opt = make_optimizer(optimizer, model.parameters(), lr)
    rp = Replayer(rtol, atol)
    with torch.autograd.set_detect_anomaly(True, check_nan=False):
        for i in range(steps):
            rp.step = i
            with rp:
                rp.phase = "forward"
                out = model(*inputs)
                loss = workload.loss(out, target)
                rp.phase = "backward"
                opt.zero_grad(set_to_none=True)
                loss.backward()
                rp.phase = "optimizer step"
                rp.outside_user_code = f"{type(opt).__module__}.{type(opt).__name__}.step()"
                opt.step()
                rp.outside_user_code = "(no frame outside torch/torchtpu)"
            if rp.first is not None:
                break
    if rp.first is not None:
        return dict(rp.first, compared=rp.compared)
    return dict(op=None, compared=rp.compared)
