"""Build of arborcc's C++ parts; everything else is in pyproject.toml.

Every package of arborcc with a ``csrc`` folder gets one extension module named
``arborcc.<package>.native``, built from every .cpp file in that folder (bindings.cpp
holds the module): today ``arborcc.runtime.native``, the shared-memory data plane. No
``-march=native``: vector kernels carry per-function target attributes and pick them at
run time (see runtime/csrc/kernels.cpp)."""

from glob import glob
from pathlib import Path

from pybind11.setup_helpers import Pybind11Extension
from setuptools import setup


def native_extension(csrc: Path) -> Pybind11Extension:
    """The extension ``arborcc.<package>.native`` built from the package's csrc folder."""
    package = csrc.parent.name
    return Pybind11Extension(
        f"arborcc.{package}.native",
        sorted(str(p) for p in csrc.glob("*.cpp")),
        depends=sorted(str(p) for p in csrc.glob("*.hpp")),
        cxx_std=17,
        extra_compile_args=["-O3", "-Wall", "-Wno-unused-function"],
    )


setup(ext_modules=[native_extension(Path(d)) for d in sorted(glob("src/arborcc/*/csrc"))])
