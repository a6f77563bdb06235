"""torch.tpu.FloatTensor and the other legacy tensor types, as torch.cuda has
them: old code picks `Tensor = torch.cuda.FloatTensor if cuda else
torch.FloatTensor` and then builds tensors with `Tensor(2, 3)`,
`Tensor(data)` or checks `isinstance(x, Tensor)`.

Each is a class whose instances are the tpu tensors of its dtype (an
isinstance check, as with torch's own legacy types).  Its C-level name is
the dotted one (`torch.tpu.FloatTensor`), so `x.type(torch.tpu.FloatTensor)`
converts as `x.type("torch.tpu.FloatTensor")` does."""

import torch

_DTYPES = {
    "FloatTensor": torch.float32, "DoubleTensor": torch.float64, "HalfTensor": torch.float16,
    "BFloat16Tensor": torch.bfloat16, "ByteTensor": torch.uint8, "CharTensor": torch.int8,
    "ShortTensor": torch.int16, "IntTensor": torch.int32, "LongTensor": torch.int64, "BoolTensor": torch.bool,
}  # fmt: skip


class _LegacyTensorType(type):
    """The metaclass: isinstance checks and the legacy constructor."""

    def __instancecheck__(cls, obj):
        return isinstance(obj, torch.Tensor) and obj.device.type == "tpu" and obj.dtype == cls.dtype

    def __call__(cls, *args, device=None):
        """`T()` (empty), `T(2, 3)` / `T(torch.Size)` (uninitialised),
        `T(data)` (a sequence or an array), `T(tensor)` (the same storage,
        which must already be a tpu tensor of this dtype)."""
        device = torch.device("tpu") if device is None else torch.device(device)
        if not args:
            return torch.empty(0, dtype=cls.dtype, device=device)
        if len(args) == 1 and isinstance(args[0], torch.Tensor):
            (t,) = args
            if t.device.type != "tpu" or t.dtype != cls.dtype:
                raise TypeError(f"expected a tpu tensor of dtype {cls.dtype}, got {t.dtype} on {t.device}")
            return t.detach()
        if all(isinstance(a, int) for a in args) or (len(args) == 1 and isinstance(args[0], torch.Size)):
            return torch.empty(*args, dtype=cls.dtype, device=device)
        if len(args) == 1:
            return torch.tensor(args[0], dtype=cls.dtype, device=device)
        raise TypeError(f"{cls.__qualname__}(): expected sizes, a sequence or a tensor, got {args!r}")


def _make(name, dtype):
    cls = _LegacyTensorType(f"torch.tpu.{name}", (), {"dtype": dtype, "is_cuda": False, "is_sparse": False})
    cls.__qualname__ = name
    cls.__module__ = "torch.tpu"
    return cls


globals().update({name: _make(name, dtype) for name, dtype in _DTYPES.items()})

__all__ = list(_DTYPES)
