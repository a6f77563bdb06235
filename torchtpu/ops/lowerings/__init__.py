"""The lowering table, one module per op family.  Importing this package
fills torchtpu.ops.registry.LOWERINGS (and special.HANDLERS)."""

from . import (  # noqa: F401
    activations,
    amp,
    complex_ops,
    conv,
    core,
    creation,
    data_dependent,
    dropout,
    elementwise,
    embedding,
    fft,
    foreach,
    indexing,
    interpolation,
    linalg,
    linalg_decomp,
    losses,
    normalization,
    pooling,
    random,
    reductions,
    shape,
    sorting,
    special_functions,
)
