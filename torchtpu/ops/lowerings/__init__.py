"""The lowering table, one module per op family.  Importing this package
fills torchtpu.ops.registry.LOWERINGS (and special.HANDLERS)."""

from . import core  # noqa: F401
