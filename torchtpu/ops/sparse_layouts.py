"""Sparse tensors on `tpu`: not supported, with an error that says so.

XLA has no sparse layouts.  Without a kernel for the Sparse/SparseCsr
PrivateUse1 dispatch keys a user would see PyTorch's generic "Could not run
'aten::_sparse_coo_tensor_with_dims_and_tensors' ... 'Sparsetpu' backend"
(most often from `nn.Embedding(sparse=True)`'s backward); this fallback
names the op and what to do instead."""

import torch

_library = None


def _unsupported(op, *args, **kwargs):
    raise NotImplementedError(
        f"torchtpu: sparse tensors are not supported on the tpu device ('{op.name()}' was called with a "
        "sparse layout on tpu). Keep sparse tensors on the CPU, or use dense ones: for example "
        "nn.Embedding(..., sparse=False), whose gradient is dense, with a dense optimizer."
    )


def install():
    global _library
    if _library is None:
        _library = torch.library.Library("_", "IMPL")
        for key in ("SparsePrivateUse1", "SparseCsrPrivateUse1"):
            _library.fallback(_unsupported, key)
