"""``msccl.language``: the public GC3 tools' DSL surface, implemented on :mod:`arborcc.lang`.

``MSCCLProgram(name, topo, collective, instances, protocol=..., threadblock_policy=...,
interleaved_replication=True, instr_fusion=True, ...)`` is an arborcc
:class:`~arborcc.lang.program.Program`; ``chunk``, references with ``copy``/``reduce``/
``split``/``group``, ``XML()`` (print the compiled, verified MSCCL XML) and ``Check()``
(evaluate the postcondition) behave as in the public tools. Differences worth knowing:

* a misuse raises :class:`~arborcc.errors.ProgramError` naming the program's line instead
  of an ``AssertionError``;
* ``reduce`` returns the reference it was called on, which stays usable (as there);
  every other reference to an overwritten slot is stale and refused;
* ``XML()`` writes the executor dialect (all attributes; the legacy dialect for custom
  collectives); ``ARBORCC_MSCCL_DIALECT=legacy|executor`` chooses.

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

import os

from arborcc.compat.msccl.language.collectives import (
    AllGather,
    AllReduce,
    AllToAll,
    Chunk,
    Collective,
    ReduceChunk,
    ReduceScatter,
)
from arborcc.compat.msccl.language.ir import Buffer, ChannelType, Instruction, ThreadblockPolicy
from arborcc.lang.program import Program, chunk, create_scratch, current_program, open_program, parallelize
from arborcc.lang.ref import Ref
from arborcc.lang.where import program_error, user_location

_arborcc_compat = True
ChunkRef = Ref


class MSCCLProgram(Program):
    """A program with the public GC3 tools' constructor signature."""

    def __init__(self, name, topo, collective, instances, protocol="Simple",
                 threadblock_policy=ThreadblockPolicy.auto, interleaved_replication=True,
                 instr_fusion=True, check_xml=True, dependence_nop=False):
        num_nodes = getattr(topo, "num_nodes", None)
        if callable(num_nodes) and num_nodes() != collective.num_ranks:
            raise program_error(f"the topology has {num_nodes()} ranks but the collective has "
                                f"{collective.num_ranks}", user_location(1))
        super().__init__(name, collective, topo, instances=instances, protocol=protocol,
                         threadblock_policy=threadblock_policy, instr_fusion=instr_fusion,
                         replication="interleaved" if interleaved_replication else "batched")
        self.check_xml = check_xml
        self.dependence_nop = dependence_nop

    def __enter__(self):
        if open_program() is not None:
            raise program_error("there is already a program in context")
        return super().__enter__()

    def lower(self):
        """The compiled IR (:class:`~arborcc.ir.model.Algorithm`)."""
        return self.compile()

    def dialect(self) -> str:
        chosen = os.environ.get("ARBORCC_MSCCL_DIALECT")
        if chosen:
            return chosen
        return "legacy" if self.collective.ir_name == "custom" else "executor"

    def generate_xml(self) -> str:
        """Compile, verify (unless ``check_xml=False``) and write MSCCL XML."""
        from arborcc.ir.msccl_xml import write_msccl_xml

        algo = self.compile()
        dialect = self.dialect()
        if self.check_xml:
            from arborcc.verify import check_algorithm

            check_algorithm(algo, dialect)
        return write_msccl_xml(algo, dialect)


def XML() -> None:
    """Print the open program's MSCCL XML."""
    prog = current_program()
    if isinstance(prog, MSCCLProgram):
        print(prog.generate_xml(), end="")
    else:
        from arborcc.ir.msccl_xml import write_msccl_xml

        print(write_msccl_xml(prog.compile()), end="")


def Check() -> bool:
    """Evaluate the open program's postcondition; True when it holds."""
    return current_program().check()


__all__ = ["MSCCLProgram", "chunk", "create_scratch", "XML", "Check", "Buffer", "ThreadblockPolicy",
           "ChannelType", "Instruction", "Chunk", "ReduceChunk", "Ref", "ChunkRef", "Collective", "AllReduce",
           "AllGather", "ReduceScatter", "AllToAll", "parallelize"]
