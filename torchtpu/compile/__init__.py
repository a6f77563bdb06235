"""`torch.compile(model, backend="tpu")`.

Whole-graph lowering to one `jax.jit` per graph is issue 5.  Until then the
backend name is registered (code and `torch_dynamo_backends` entry point)
and runs the captured FX graph with eager `tpu` ops, so compiled models
already run correctly, at eager speed."""

import logging

log = logging.getLogger(__name__)
_announced = False


def tpu_backend(gm, example_inputs, **kwargs):
    global _announced
    if not _announced:
        log.info("torchtpu: backend='tpu' runs FX graphs op by op (graph-level XLA lowering is not built yet)")
        _announced = True
    return gm.forward
