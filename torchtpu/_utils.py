"""`torch.tpu._utils`: the helper torch.serialization looks up on a backend's
device module (`_get_device_index`) to map a location such as "tpu" or
"tpu:1" to a device index, as `torch.cuda._utils` does for CUDA."""

import torch


def _get_device_index(device, optional: bool = False, allow_cpu: bool = False) -> int:
    """The index of a tpu device given as a torch.device, str or int.

    A device without an index (`"tpu"`) means the current device when
    `optional`; otherwise it is an error, as for CUDA.  `allow_cpu` accepts a
    CPU device and returns -1."""
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if allow_cpu and device.type == "cpu":
            return -1
        if device.type != "tpu":
            raise ValueError(f"Expected a tpu device, but got: {device}")
        index = device.index
    elif isinstance(device, int):
        index = device
    elif device is None:
        index = None
    else:
        raise ValueError(f"Expected a tpu device, but got: {device!r}")
    if index is None:
        if not optional:
            raise ValueError(f"Expected a tpu device with a specified index or an integer, but got: {device}")
        return torch.tpu.current_device()
    return index
