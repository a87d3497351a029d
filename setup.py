"""Build of arborcc's C++ data plane (``arborcc.runtime.native``); everything else is in
pyproject.toml. No ``-march=native``: the vector kernels carry per-function target
attributes and the extension picks them at run time (see csrc/dataplane.cpp)."""

from pybind11.setup_helpers import Pybind11Extension
from setuptools import setup

setup(
    ext_modules=[
        Pybind11Extension(
            "arborcc.runtime.native",
            ["src/arborcc/runtime/csrc/dataplane.cpp"],
            depends=["src/arborcc/runtime/csrc/reduce_kernels.hpp"],
            cxx_std=17,
            extra_compile_args=["-O3", "-Wall", "-Wno-unused-function"],
        )
    ]
)
