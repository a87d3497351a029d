"""Build of arborcc's C++ parts; everything else is in pyproject.toml.

Every package of arborcc with a ``csrc`` folder gets one extension module named
``arborcc.<package>.native``, built from every .cpp file in that folder (bindings.cpp
holds the module), six of them: ``runtime`` (the shared-memory data plane),
``compiler`` (the per-instruction passes), ``lang`` (the DSL's bulk copy and broadcast
traces), ``verify`` (the structure, pieces and symbolic runs), ``synth`` (the
packing's routes, arborescence oracle, rounding and orbits) and ``sim`` (the
simulator's max-min fair share). No
``-march=native``: vector kernels carry per-function target attributes and pick them at
run time (see runtime/csrc/kernels.cpp). ``ir/csrc`` holds only headers shared by the
modules (the step table, ``step_codes.hpp``). The .cpp files compile in parallel, one job per
CPU (``ARBORCC_BUILD_JOBS`` sets the number)."""

from glob import glob
from pathlib import Path

from pybind11.setup_helpers import ParallelCompile, Pybind11Extension
from setuptools import setup

ParallelCompile("ARBORCC_BUILD_JOBS").install()

#: headers every extension includes: the IR's step table (step_codes.hpp); no module of its own
STEP_HEADERS = Path("src/arborcc/ir/csrc")


def native_extension(csrc: Path) -> Pybind11Extension:
    """The extension ``arborcc.<package>.native`` built from the package's csrc folder."""
    package = csrc.parent.name
    return Pybind11Extension(
        f"arborcc.{package}.native",
        sorted(str(p) for p in csrc.glob("*.cpp")),
        depends=sorted(str(p) for p in (*csrc.glob("*.hpp"), *STEP_HEADERS.glob("*.hpp"))),
        include_dirs=[str(STEP_HEADERS)],
        cxx_std=17,
        extra_compile_args=["-O3", "-Wall", "-Wno-unused-function"],
    )


setup(ext_modules=[native_extension(Path(d)) for d in sorted(glob("src/arborcc/*/csrc")) if glob(f"{d}/*.cpp")])
