"""_foreach_* calls whose tensor lists span several tpu devices.

One kernel runs on one device, so such a call runs once per device on the
elements that live there, and the results go back in list order.  CUDA takes
its per-tensor slow path in this case; PyTorch's optimizers group by device
themselves, but a compiled `opt.step()` over a model split across devices
issues one foreach call over all of its parameters.
"""

import torch


def spans_devices(args, kwargs) -> bool:
    """Whether the tpu tensors in the call's lists are on several devices."""
    found = set()
    for value in (*args, *kwargs.values()):
        if isinstance(value, (list, tuple)):
            found.update(t.device.index for t in value if isinstance(t, torch.Tensor) and t.device.type == "tpu")
    return len(found) > 1


def run_per_device(op, args, kwargs):
    """Calls `op` once per device with every per-element argument (a list
    of the lists' length, or the per-element `scalars` tensor of
    `_foreach_addcmul.Tensor`) narrowed to that device's elements."""
    first = next(v for v in (*args, *kwargs.values()) if _is_tensor_list(v))
    n = len(first)
    groups = {}
    for i, t in enumerate(first):
        groups.setdefault(t.device, []).append(i)
    names = [a.name for a in op._schema.arguments]
    results = [None] * n
    for indices in groups.values():
        narrowed_args = [_narrow(v, indices, n, name) for v, name in zip(args, names)]
        narrowed_kwargs = {k: _narrow(v, indices, n, k) for k, v in kwargs.items()}
        out = op(*narrowed_args, **narrowed_kwargs)
        if out is None or out == ():
            continue
        for i, r in zip(indices, out):
            results[i] = r
    return None if all(r is None for r in results) else results


def _is_tensor_list(value):
    return isinstance(value, (list, tuple)) and len(value) > 0 and isinstance(value[0], torch.Tensor)


def _narrow(value, indices, n, name):
    if isinstance(value, (list, tuple)) and len(value) == n:
        return [value[i] for i in indices]
    if name == "scalars" and isinstance(value, torch.Tensor):
        return value[torch.tensor(indices, device=value.device)]
    return value
