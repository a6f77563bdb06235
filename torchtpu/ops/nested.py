"""Nested tensors on tpu: what nn.TransformerEncoder's inference fast path
needs, as CUDA runs it.

In eval mode with a `src_key_padding_mask` the encoder packs its padded
batch into a nested tensor (`_nested_tensor_from_mask`), runs every layer on
it (`_transformer_encoder_layer_fwd`) and pads the result back
(`to_padded_tensor`).  A nested tensor built here from a padded batch keeps
that batch's layout: component i is the first len_i rows of batch row i,
*inside* the (N, L, D) buffer (sizes (len_i, D), strides (D, 1), offsets
i*L*D; ATen's nested tensors may view their storage so).  Each layer is then
the dense fused kernel with a key-padding mask -- the shapes of the padded
path whatever the lengths, so no new kernels per batch -- and repacking is
free.  The positions past len_i are zeroed on entry: a masked key weighs
exactly 0, but 0 * NaN is NaN, and the CPU's packed path never reads them.

Nested tensors built otherwise (`torch.nested.nested_tensor([...])` of tpu
tensors) are padded component by component.  Other ops on nested tpu
tensors raise PyTorch's "Could not run ... 'NestedTensortpu' backend".
"""

import functools

import torch
import torch.nn.functional as F

from .. import _C

aten = torch.ops.aten
_library = None


# ---- layout ---------------------------------------------------------------

def _components(parts):
    """The components as views of the nested tensor's storage (`parts`:
    _C._nested_parts of it)."""
    storage, sizes, strides, offsets = parts
    return [storage.as_strided(size, stride, offset)
            for size, stride, offset in zip(sizes.tolist(), strides.tolist(), offsets.tolist())]


def _padded_batch(parts):
    """(the (N, L, D) batch the components lie in, their lengths), or None
    when they are not laid out as rows of a padded batch."""
    storage, sizes, strides, offsets = parts
    n = sizes.size(0)
    if n == 0 or sizes.dim() != 2 or sizes.size(1) != 2:
        return None
    lengths, widths = sizes[:, 0].tolist(), sizes[:, 1].tolist()
    d = widths[0]
    if any(w != d for w in widths) or strides.tolist() != [[d, 1]] * n:
        return None
    offsets = offsets.tolist()
    step = offsets[1] - offsets[0] if n > 1 else max(lengths) * d
    if d == 0 or step % d or any(b - a != step for a, b in zip(offsets, offsets[1:])):
        return None
    rows = step // d
    if rows < max(lengths) or offsets[0] + n * step > storage.numel():
        return None
    return storage.as_strided((n, rows, d), (step, d, 1), offsets[0]), lengths


@functools.lru_cache(maxsize=64)
def _masks(lengths, rows, device):
    """(tokens, padding), (N, rows) bool on `device`: position j of row i is
    a token when j < len_i.  Cached: every layer of an encoder call, and a
    batch of the same lengths again, reuses them (nothing writes them)."""
    tokens = torch.arange(rows)[None] < torch.tensor(lengths)[:, None]
    return tokens.to(device), (~tokens).to(device)


def _valid(lengths, rows, device):
    return _masks(tuple(lengths), rows, device)[0]


def _padding(lengths, rows, device):
    return _masks(tuple(lengths), rows, device)[1]


def _wrap_batch(batch, lengths):
    """A nested tensor over the rows of a contiguous (N, L, D) batch."""
    n, rows, d = batch.shape
    return _C._nested_wrap(
        batch.reshape(-1),
        torch.tensor([[length, d] for length in lengths], dtype=torch.long),
        torch.tensor([[d, 1]] * n, dtype=torch.long).reshape(n, 2),
        torch.arange(n, dtype=torch.long) * (rows * d),
    )


def _as_batch(nested):
    """(N, L, D) batch with zeros past each length, and the lengths."""
    parts = _C._nested_parts(nested)
    found = _padded_batch(parts)
    if found is not None:
        return found
    pieces = _components(parts)
    if not pieces:
        raise RuntimeError("torchtpu: expected a nested tensor with at least one component")
    if any(p.dim() != 2 or p.size(1) != pieces[0].size(1) for p in pieces):
        raise RuntimeError("torchtpu: expected a nested tensor of (length, features) components")
    return _pad_components(pieces, 0.0, None), [p.size(0) for p in pieces]


def _pad_components(pieces, padding, shape):
    """Pad each component to `shape` (default: the largest per dim), stacked."""
    if shape is None:
        shape = [max(p.size(k) for p in pieces) for k in range(pieces[0].dim())]
    padded = []
    for p in pieces:
        pads = []
        for k in reversed(range(p.dim())):
            pads += [0, shape[k] - p.size(k)]
        padded.append(F.pad(p, pads, value=padding))
    return torch.stack(padded)


# ---- dense -> nested --------------------------------------------------------

def _check_mask(t, mask):
    """ATen's checks of `_nested_tensor_from_mask(_left_aligned)`."""
    if mask.dtype != torch.bool:
        from .dtype_names import c10_name  # (not at import: it loads JAX, and `import torch` loads this module)

        raise RuntimeError(f"Expected mask to be of ScalarType Bool, but got {c10_name(mask.dtype)} instead.")
    if mask.dim() != 2:
        raise RuntimeError("Padding mask should be 2D")
    if t.dim() != 3:
        raise RuntimeError("Input should be a 3D tensor, N * L * D")
    if tuple(t.shape[:2]) != tuple(mask.shape):
        raise RuntimeError("Mask size should match input size")


def _left_aligned(mask, lengths):
    """Every row of `mask` (True = token) is len_i Trues, then Falses."""
    rows = mask.size(1)
    return bool((mask == (torch.arange(rows, device=mask.device)[None] < lengths[:, None])).all())


def nested_tensor_from_mask(t, mask, mask_check=True):
    """`t`'s leading sum(mask[i]) tokens of each row i, as ATen takes them
    (with mask_check, the mask must be left-aligned)."""
    _check_mask(t, mask)
    lengths = mask.sum(1)
    if mask_check and not _left_aligned(mask, lengths):
        raise RuntimeError("Mask must be left-aligned without gaps")
    lengths = lengths.tolist()
    keep = _valid(lengths, t.size(1), t.device)
    return _wrap_batch(torch.where(keep[..., None], t, torch.zeros((), dtype=t.dtype, device=t.device)), lengths)


def nested_tensor_from_mask_left_aligned(t, mask):
    _check_mask(t, mask)
    return _left_aligned(mask, mask.sum(1))


# ---- kernels of the NestedTensorPrivateUse1 key -----------------------------

def transformer_encoder_layer(src, embed_dim, num_heads, *weights_and_flags, mask=None, mask_type=None):
    """The dense fused layer over the padded batch, keys past each length
    masked out; the result keeps the nested layout."""
    if len(weights_and_flags) > 15:  # (mask and mask_type passed positionally)
        weights_and_flags, (mask, mask_type) = weights_and_flags[:15], weights_and_flags[15:17]
    if mask is not None:
        raise RuntimeError("torchtpu: _transformer_encoder_layer_fwd of a nested tensor takes no mask "
                           "(the nested tensor's lengths are its padding mask)")
    batch, lengths = _as_batch(src)
    padding = _padding(lengths, batch.size(1), batch.device)
    out = torch._transformer_encoder_layer_fwd(batch, embed_dim, num_heads, *weights_and_flags, padding, 1)
    return _wrap_batch(out.contiguous(), lengths)


def _output_shape(sizes, output_size):
    """The padded shape past the batch dim: the largest of the components'
    `sizes` per dim, or `output_size`'s when it is no smaller."""
    largest = sizes.max(0).values.tolist() if sizes.size(0) else [0] * sizes.size(1)
    if output_size is None:
        return largest
    if len(output_size) != len(largest) + 1:
        raise RuntimeError("Length of output_size does not match NestedTensor dims. Broadcasting is not supported.")
    if any(o < s for o, s in zip(output_size[1:], largest)):
        raise RuntimeError("Value in output_size is less than NestedTensor padded size. Truncation is not supported.")
    return list(output_size[1:])


def to_padded_tensor(nested, padding, output_size=None):
    parts = _C._nested_parts(nested)
    shape = _output_shape(parts[1], output_size)
    found = _padded_batch(parts)
    if found is None:
        return _pad_components(_components(parts), padding, shape)
    batch, lengths = found
    out = torch.where(_valid(lengths, batch.size(1), batch.device)[..., None], batch, padding)
    rows, width = shape
    if rows < out.size(1):
        out = out[:, :rows].contiguous()
    if rows > out.size(1) or width > out.size(2):
        out = F.pad(out, [0, width - out.size(2), 0, rows - out.size(1)], value=padding)
    return out


def unbind(nested, dim=0):
    if dim != 0:
        raise RuntimeError(f"NestedTensor can only be unbound along dimension 0 got dimension {dim} instead.")
    return _components(_C._nested_parts(nested))


_NESTED_KERNELS = {
    "_transformer_encoder_layer_fwd": transformer_encoder_layer,
    "to_padded_tensor": to_padded_tensor,
    "unbind.int": unbind,
}


def install():
    """Registers the NestedTensorPrivateUse1 kernels (cheap: no JAX)."""
    global _library
    if _library is None:
        _library = torch.library.Library("aten", "IMPL")
        for name, kernel in _NESTED_KERNELS.items():
            _library.impl(name, kernel, "NestedTensorPrivateUse1")
