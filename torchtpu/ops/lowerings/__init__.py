"""The lowering table, one module per op family.  Importing this package
fills torchtpu.ops.registry.LOWERINGS."""

from . import elementwise  # noqa: F401
