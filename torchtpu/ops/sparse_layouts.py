"""Sparse tensors on `tpu`: not supported, with an error that says so.

XLA has no sparse layouts.  Without a kernel for the Sparse/SparseCsr
PrivateUse1 dispatch keys a user would see PyTorch's generic "Could not run
'aten::_sparse_coo_tensor_with_dims_and_tensors' ... 'Sparsetpu' backend"
(most often from `nn.Embedding(sparse=True)`'s backward); this fallback
names the op and what to do instead."""

import functools

import torch

_library = None
_constructors = None


def unsupported(op, *args, **kwargs):
    raise NotImplementedError(
        f"torchtpu: sparse tensors are not supported on the tpu device ('{op.name()}' was called with a "
        "sparse layout on tpu). Keep sparse tensors on the CPU, or use dense ones: for example "
        "nn.Embedding(..., sparse=False), whose gradient is dense, with a dense optimizer."
    )


# Constructors of compressed sparse tensors from tpu component tensors
# (`torch.sparse_csr_tensor(..., device="tpu")`, and a CPU CSR tensor's
# `.to("tpu")`): they dispatch on their dense inputs, never reaching the
# fallback above, and built a tensor no op could use.
_COMPRESSED_CONSTRUCTORS = (
    "sparse_compressed_tensor.comp_plain_value_size",
    "sparse_compressed_tensor.comp_plain_value",
    "_sparse_compressed_tensor_unsafe",
    "_sparse_compressed_tensor_with_dims",
)


def install():
    global _library, _constructors
    if _library is None:
        _library = torch.library.Library("_", "IMPL")
        for key in ("SparsePrivateUse1", "SparseCsrPrivateUse1"):
            _library.fallback(unsupported, key)
        _constructors = torch.library.Library("aten", "IMPL")
        for name in _COMPRESSED_CONSTRUCTORS:
            op = getattr(torch.ops.aten, name.split(".")[0])
            overload = getattr(op, name.split(".")[1] if "." in name else "default")
            for key in ("PrivateUse1", "SparseCsrPrivateUse1"):  # (by its inputs, by its layout=)
                _constructors.impl(name, functools.partial(unsupported, overload), key)
