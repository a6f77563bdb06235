"""What qualify runs: a model, its inputs, a target and a loss.

MODEL is `package.module:factory` (or `path/to/file.py:factory`); calling the
factory with no arguments returns either

- `(model, example_batch, loss_fn)`: `example_batch` is `(inputs, target)`
  with `inputs` a tensor or a tuple of positional arguments; the loss is
  `loss_fn(model(*inputs), target)`.  A bare tensor batch means
  `loss_fn(model(batch))`.
- `(model, inputs)`: the loss is the mean of the squared outputs (summed over
  the output tensors), enough to drive backward and the optimizer.

Every tensor it returns (parameters, buffers, inputs, target) must be on one
device; qualify copies them to the CPU and to `tpu` itself.  Anything else is
bad input (exit code 2) with a message saying what is wrong.

The built-in models (`--model gpt|cnn`) have random weights, so qualify works
offline; they are built without dropout because CPU and `tpu` draw different
random streams, and dropout would make a numerical comparison meaningless.
"""

import copy
import importlib
import importlib.util
import os
import sys
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch.utils._pytree import tree_flatten, tree_map


class BadInput(Exception):
    """The model factory or its results are unusable (exit code 2)."""


@dataclass
class Workload:
    name: str
    model: torch.nn.Module  # on the CPU, initial weights
    inputs: tuple  # positional arguments of model(...), on the CPU
    target: object = None  # second argument of loss_fn (None: loss_fn(output))
    loss_fn: object = None  # None: mean of squared outputs
    unit: str = "samples"  # throughput unit
    per_step: int = 1  # units per step
    notes: list = field(default_factory=list)

    def loss(self, output, target):
        """The scalar loss of `output` (`target`: this workload's target on the run's device)."""
        if self.loss_fn is None:
            return default_loss(output)
        if target is None:
            return self.loss_fn(output)
        return self.loss_fn(output, target)

    def to(self, device):
        """A fresh copy: model (same initial weights), inputs and target on `device`."""
        move = lambda x: x.to(device) if isinstance(x, torch.Tensor) else x  # noqa: E731
        return (
            copy.deepcopy(self.model).to(device),
            tree_map(move, self.inputs),
            tree_map(move, self.target),
        )


def default_loss(output):
    tensors = [t for t in tree_flatten(output)[0] if isinstance(t, torch.Tensor) and t.is_floating_point()]
    if not tensors:
        raise BadInput("the model returned no floating-point tensor to build a default loss from; return a loss_fn")
    return sum(t.float().pow(2).mean() for t in tensors)


# ------------------------------------------------------------- built-ins


def gpt(batch=8, seq=32, vocab=128):
    """A small GPT-2-style decoder on a learnable token stream (next token =
    previous + 1 mod vocab)."""
    from ..models import GPT

    torch.manual_seed(0)
    model = GPT(vocab=vocab, d_model=64, n_heads=4, n_layers=2, max_len=seq)
    gen = torch.Generator().manual_seed(1)
    start = torch.randint(0, vocab, (batch, 1), generator=gen)
    stream = (start + torch.arange(seq + 1)) % vocab
    idx, tgt = stream[:, :-1].contiguous(), stream[:, 1:].contiguous()

    def loss_fn(logits, targets):
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    return model, (idx, tgt), loss_fn


def cnn(batch=16, size=16, classes=10):
    """A small CNN (conv/batchnorm/pool, twice, then a linear head) on random images."""
    from ..models import CNN

    torch.manual_seed(0)
    model = CNN(channels=3, classes=classes, width=16, dropout=0.0)
    gen = torch.Generator().manual_seed(1)
    images = torch.randn(batch, 3, size, size, generator=gen)
    labels = torch.randint(0, classes, (batch,), generator=gen)
    return model, (images, labels), F.cross_entropy


BUILTINS = {"gpt": gpt, "cnn": cnn}


# ------------------------------------------------------------- loading


def load_factory(spec: str):
    """`package.module:factory` or `file.py:factory` -> the callable."""
    if ":" not in spec:
        raise BadInput(f"MODEL must be 'package.module:factory' or 'file.py:factory', not {spec!r}")
    module_name, _, attr = spec.rpartition(":")
    if not module_name or not attr:
        raise BadInput(f"MODEL must be 'package.module:factory' or 'file.py:factory', not {spec!r}")
    try:
        if module_name.endswith(".py") or os.sep in module_name:
            if not os.path.exists(module_name):
                raise BadInput(f"no such file: {module_name}")
            mod_spec = importlib.util.spec_from_file_location("_qualify_model", module_name)
            module = importlib.util.module_from_spec(mod_spec)
            mod_spec.loader.exec_module(module)
        else:
            if "" not in sys.path and os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())  # as `python -m` would
            module = importlib.import_module(module_name)
    except BadInput:
        raise
    except Exception as e:
        raise BadInput(f"cannot import {module_name!r}: {type(e).__name__}: {e}") from e
    factory = getattr(module, attr, None)
    if factory is None:
        raise BadInput(f"{module_name!r} has no attribute {attr!r}")
    if not callable(factory):
        raise BadInput(f"{spec} is not callable")
    return factory


def build(spec=None, builtin="gpt") -> Workload:
    """Call the factory (or the built-in) and check what it returned."""
    if spec is None:
        if builtin not in BUILTINS:
            raise BadInput(f"unknown built-in model {builtin!r} (choose from {', '.join(BUILTINS)})")
        factory, name = BUILTINS[builtin], builtin
    else:
        factory, name = load_factory(spec), spec
    try:
        result = factory()
    except Exception as e:
        raise BadInput(f"the model factory {name} raised {type(e).__name__}: {e}") from e
    return _check(name, result)


def _check(name, result) -> Workload:
    if not isinstance(result, (tuple, list)) or len(result) not in (2, 3):
        raise BadInput(
            f"the model factory {name} must return (model, example_batch, loss_fn) or (model, inputs), "
            f"not {type(result).__name__}" + (f" of length {len(result)}" if isinstance(result, (tuple, list)) else "")
        )
    model = result[0]
    if not isinstance(model, torch.nn.Module):
        raise BadInput(f"the model factory {name} returned {type(model).__name__} where a torch.nn.Module belongs")
    if len(result) == 3:
        batch, loss_fn = result[1], result[2]
        if not callable(loss_fn):
            raise BadInput(f"the model factory {name} returned a loss_fn that is not callable ({type(loss_fn).__name__})")
        if isinstance(batch, torch.Tensor):
            inputs, target = (batch,), None
        elif isinstance(batch, (tuple, list)) and len(batch) == 2:
            inputs = tuple(batch[0]) if isinstance(batch[0], (tuple, list)) else (batch[0],)
            target = batch[1]
        else:
            raise BadInput(f"the model factory {name} must return example_batch as (inputs, target) or a tensor")
    else:
        inputs = tuple(result[1]) if isinstance(result[1], (tuple, list)) else (result[1],)
        target, loss_fn = None, None
    if not any(isinstance(x, torch.Tensor) for x in tree_flatten(inputs)[0]):
        raise BadInput(f"the model factory {name} returned inputs without a tensor")
    _check_devices(name, model, inputs, target)
    w = Workload(name=name, model=model, inputs=inputs, target=target, loss_fn=loss_fn)
    if w.model.training is False:
        w.notes.append("the factory returned the model in eval mode; it is trained in train mode")
    w.model.train()
    w.unit, w.per_step = _throughput_unit(inputs)
    return w


def _devices_of(tree):
    return {str(x.device) for x in tree_flatten(tree)[0] if isinstance(x, torch.Tensor)}


def _check_devices(name, model, inputs, target):
    where = {
        "model parameters and buffers": {str(t.device) for t in [*model.parameters(), *model.buffers()]},
        "inputs": _devices_of(inputs),
        "target": _devices_of(target),
    }
    devices = set().union(*where.values())
    if len(devices) > 1:
        detail = "; ".join(f"{what} on {', '.join(sorted(d))}" for what, d in where.items() if d)
        raise BadInput(
            f"the model factory {name} returned tensors on different devices ({detail}): "
            f"return everything on one device (the CPU is simplest; qualify moves copies to each device)"
        )
    if devices and next(iter(devices)).startswith("meta"):
        raise BadInput(f"the model factory {name} returned meta tensors, which have no values to compare")


def _throughput_unit(inputs):
    """tokens/s for integer (batch, seq, ...) inputs, else samples/s (first dim of the first tensor)."""
    first = next(x for x in tree_flatten(inputs)[0] if isinstance(x, torch.Tensor))
    if first.dim() >= 2 and not first.is_floating_point() and not first.is_complex():
        return "tokens", first.shape[0] * first.shape[1]
    return "samples", first.shape[0] if first.dim() else 1
