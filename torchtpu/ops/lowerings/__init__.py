"""The lowering table, one module per op family.  Importing this package
fills torchtpu.ops.registry.LOWERINGS (and special.HANDLERS)."""

from . import (  # noqa: F401
    activations,
    amp,
    conv,
    core,
    creation,
    data_dependent,
    dropout,
    elementwise,
    embedding,
    foreach,
    indexing,
    linalg,
    losses,
    normalization,
    pooling,
    random,
    reductions,
    shape,
    sorting,
)
