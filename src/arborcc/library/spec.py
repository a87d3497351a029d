"""How a library algorithm describes itself: its parameters, for the CLI and for users.

A :class:`LibrarySpec` is plain data - the function that builds the algorithm is named,
not imported (``"arborcc.library.ring:ring_allreduce"``) - so listing the library, as
``arborcc compile --help`` does, costs no DSL or compiler import.

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from arborcc.ir.model import Algorithm


class Built(NamedTuple):
    """A library algorithm: the compiled IR and the traced program it came from."""

    algorithm: Algorithm
    program: Any


def built(prog) -> Built:
    """Compile a traced library program; the algorithm claims exactly the calls in which it
    is correct: the program's own mode (in-place or out-of-place, which the test suite
    verifies for every library algorithm) and the other one if the verifier proves it
    (:func:`arborcc.verify.claiming_supported_modes`)."""
    from arborcc.verify import claiming_supported_modes

    return Built(claiming_supported_modes(prog.compile()), prog)


@dataclass(frozen=True)
class Param:
    """One parameter of a library algorithm (``--name`` on the command line)."""

    name: str
    type: type
    default: Any
    help: str
    choices: tuple | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


@dataclass(frozen=True)
class LibrarySpec:
    """A named algorithm of the library; ``function`` is ``"module:function"``."""

    name: str
    collective: str
    summary: str
    function: str
    params: tuple[Param, ...] = field(default_factory=tuple)

    def defaults(self) -> dict[str, Any]:
        return {p.name: p.default for p in self.params}

    def build(self, **kwargs) -> Built:
        """Trace and compile the algorithm with these parameters."""
        module, name = self.function.split(":")
        return getattr(importlib.import_module(module), name)(**kwargs)

    __call__ = build


# parameters shared by most algorithms
RANKS = Param("ranks", int, 8, "number of ranks (GPUs)")
CHANNELS = Param("channels", int, 1, "channels one logical ring is spread over")
INSTANCES = Param("instances", int, 1, "replicate the algorithm on 1/n of the data each (GC3 instances)")
PROTOCOL = Param("protocol", str, "Simple", "NCCL protocol", choices=("Simple", "LL", "LL128"))
NODES = Param("nodes", int, 2, "number of nodes")
GPUS_PER_NODE = Param("gpus_per_node", int, 4, "GPUs per node")
INPLACE = Param("inplace", bool, True, "in-place (output aliases input)")
OUTOFPLACE = Param("inplace", bool, False, "in-place (output aliases input)")
