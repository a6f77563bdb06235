"""Target of the `torch.backends` entry point: `import torch` imports torchtpu.

Kept in its own module so that `import torchtpu` before `import torch` works:
then torch's autoload runs while torchtpu is still being imported, and there
is nothing to do here (the outer import finishes the registration)."""


def load():
    import sys

    if "torchtpu" not in sys.modules:
        import torchtpu  # noqa: F401
