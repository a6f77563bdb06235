"""Builds torchtpu and its C++ runtime extension torchtpu._C.

Build without isolation so the extension compiles against the installed
torch (an isolated build environment would fetch another torch):
    pip install --no-build-isolation -e .
"""

import glob

from setuptools import find_packages, setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

setup(
    packages=find_packages(include=["torchtpu", "torchtpu.*"]),
    ext_modules=[
        CppExtension(
            name="torchtpu._C",
            sources=sorted(glob.glob("csrc/*.cpp")),
            extra_compile_args=["-O2", "-std=c++20", "-Wall", "-Wno-unused-parameter"],
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
