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
* ``XML()`` verifies the compiled algorithm (every mode it claims) and refuses a wrong
  one, naming the ``XML()`` line; it writes the executor dialect (all attributes), or the
  original (legacy) dialect - saying so on stderr - when the algorithm exceeds the
  executors' limits (64 steps per thread block...) or is a custom collective, which the
  executors cannot name; ``ARBORCC_MSCCL_DIALECT=legacy|executor`` forces one;
* as in the public tools, in-place collectives map ``copy(dst, buffer, index)``'s index
  with the copying rank's offset, and under the manual policy a transfer naming no
  thread block goes to one shared thread block of its rank (see
  :class:`~arborcc.lang.program.Program`).

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

import os
import sys

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
                         replication="interleaved" if interleaved_replication else "batched",
                         copy_index_by_source=True, unnamed_tb_shared=True)
        self.check_xml = check_xml
        self.dependence_nop = dependence_nop

    def __enter__(self):
        if open_program() is not None:
            raise program_error("there is already a program in context")
        return super().__enter__()

    def lower(self):
        """The compiled IR (:class:`~arborcc.ir.model.Algorithm`)."""
        return self.compile()

    def dialect(self) -> str | None:
        """The dialect ``ARBORCC_MSCCL_DIALECT`` forces, else None (chosen by :meth:`generate_xml`)."""
        return os.environ.get("ARBORCC_MSCCL_DIALECT") or None

    def generate_xml(self) -> str:
        """Compile, verify (unless ``check_xml=False``) and write MSCCL XML (see the module)."""
        from arborcc.ir.limits import check_dialect_limits
        from arborcc.ir.msccl_xml import write_msccl_xml
        from arborcc.verify import verify_algorithm

        algo = self.compile()
        forced = self.dialect()
        dialect = forced or ("legacy" if algo.collective == "custom" else "executor")
        if self.check_xml:
            report = verify_algorithm(algo)
            if not report.ok:
                raise program_error(f"XML(): program {self.name!r} compiles to an incorrect algorithm: "
                                    f"{report.violations[0]}")
            exceeded = check_dialect_limits(algo, dialect)
            if exceeded and not forced and dialect == "executor" and not check_dialect_limits(algo, "legacy"):
                more = f" (and {len(exceeded) - 1} more)" if len(exceeded) > 1 else ""
                print(f"arborcc: note: {self.name}: {exceeded[0]}{more}; writing the original MSCCL dialect "
                      "(legacy) instead", file=sys.stderr)
                dialect, exceeded = "legacy", []
            if exceeded:
                raise program_error(f"XML(): program {self.name!r} exceeds the {dialect} runtime's limits: "
                                    f"{exceeded[0]}")
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
