"""Streams and events of `torch.tpu` (mirrors `torch.cuda.Stream`/`Event`).

Re-exported by torch.tpu (torchtpu/device.py).  No JAX import here."""

__all__: list = []
