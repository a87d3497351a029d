"""Build of arborcc's C++ data plane (``arborcc.runtime.native``); everything else is in
pyproject.toml. Every .cpp file under src/arborcc/runtime/csrc is a source of the one
extension (bindings.cpp holds the module). No ``-march=native``: the vector kernels carry
per-function target attributes and the extension picks them at run time (see
csrc/kernels.cpp)."""

from glob import glob

from pybind11.setup_helpers import Pybind11Extension
from setuptools import setup

CSRC = "src/arborcc/runtime/csrc"

setup(
    ext_modules=[
        Pybind11Extension(
            "arborcc.runtime.native",
            sorted(glob(f"{CSRC}/*.cpp")),
            depends=sorted(glob(f"{CSRC}/*.hpp")),
            cxx_std=17,
            extra_compile_args=["-O3", "-Wall", "-Wno-unused-function"],
        )
    ]
)
