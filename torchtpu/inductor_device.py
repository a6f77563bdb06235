"""`torch.compile(model)` with the default backend on tpu tensors: a clear error.

PyTorch's inductor hands the device name "tpu" to its Pallas code generator
for Google's torch_tpu runtime; the code it generates imports `torch_tpu`, so
on our tensors the default `torch.compile` failed with "No module named
'torch_tpu'" -- which reads as "install torch_tpu".  Inductor has no code
generator for our device (ours compiles whole graphs: backend="tpu"), so we
register, through inductor's own `register_backend_for_device`, a scheduling
for "tpu" that says so and what to do (inductor asks for it as soon as it
generates a tpu kernel).

Inductor registers its generators lazily, and only for devices that have none
yet, so ours must come first.  Importing inductor at `import torchtpu` costs
~1.3 s, so the registration runs right after inductor's wrapper module is
first imported (which inductor's registration itself does first): a
post-import hook on `sys.meta_path`, Python's public import machinery.
"""

import importlib.abc
import importlib.util
import sys

_WRAPPER_MODULE = "torch._inductor.codegen.wrapper"

MESSAGE = (
    "torchtpu: torch.compile's default backend, inductor, has no code generator for the tpu device "
    "(PyTorch's inductor generates Pallas kernels for Google's torch_tpu runtime, not for torchtpu). "
    'Compile with torch.compile(model, backend="tpu"): whole graphs, forward and backward, through XLA.'
)


class NoInductorKernelsForTpu:
    """The scheduling inductor instantiates to generate tpu kernels."""

    def __init__(self, *args, **kwargs):
        raise RuntimeError(MESSAGE)


def _register(wrapper_module):
    from torch._inductor.codegen import common

    if common.get_scheduling_for_device("tpu") is None:
        common.register_backend_for_device("tpu", NoInductorKernelsForTpu, wrapper_module.PythonWrapperCodegen)


class _RegisterAfterExec(importlib.abc.Loader):
    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _register(module)


class _WrapperImportHook(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != _WRAPPER_MODULE:
            return None
        sys.meta_path.remove(self)  # once; and so that find_spec below finds the real module
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _RegisterAfterExec(spec.loader)
        return spec


def install():
    """Register now if inductor's wrapper is already imported, else on its import."""
    module = sys.modules.get(_WRAPPER_MODULE)
    if module is not None:
        _register(module)
    elif not any(isinstance(f, _WrapperImportHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _WrapperImportHook())
