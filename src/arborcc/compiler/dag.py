"""The instruction DAG: processing edges within each rank (GC3 sections 4.1-4.2).

Instructions arrive in program order, which is a topological order of the DAG (the
program was traced sequentially). One scan over buffer slots per rank finds each
instruction's predecessors on its rank:

* a read depends on the slot's last writer (true dependency);
* a write depends on the last writer and on every reader since (false dependencies:
  write-after-write, write-after-read).

The same scan gathers what fusion needs (which receive each send forwards, how often a
received value is read) and the *dependency depth* (longest path from the start,
counting communication edges), GC3's scheduling priority (section 5.2, step 2).
:func:`reverse_depths` gives the *reverse dependency depth* (step 3).

The scan tracks *atoms* rather than chunks: the pieces every buffer is cut into at each
offset where some access starts or ends. An access covers whole atoms, and all slots of
an atom share their history, so a 64-chunk transfer of a tree algorithm is one atom,
not 64 slots.

Cost: one pass, O(atoms touched) - nothing is recomputed. The scan and the reverse
depths run in compiled code (``arborcc.compiler.native``, csrc/dag.cpp).

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

from functools import cached_property

import arborcc.compiler.native as native
from arborcc.compiler.instructions import InstrTable


class Dag:
    """The scan's results (:class:`arborcc.compiler.native.DagScan`): the compiled passes
    read them there; the lists below are made on first use."""

    def __init__(self, scan: native.DagScan) -> None:
        self.scan = scan
        self.pred_rows = scan.pred_rows  #: ``preds`` as the compiled passes read them (``native.PredRows``)
        self.has_forwards: bool = scan.has_forwards  #: some send forwards what a receive wrote
        self.multi_forwards: bool = scan.multi_forwards  #: some receive is forwarded by several sends

    @cached_property
    def preds(self) -> list[tuple[int, ...]]:
        """Per instruction: its same-rank predecessor instructions."""
        return self.scan.preds

    @cached_property
    def depth(self) -> list[int]:
        """Dependency depth of each instruction."""
        return self.scan.depth

    @cached_property
    def readers(self) -> list[int]:
        """Per instruction: how many instructions read what it wrote."""
        return self.scan.readers

    @cached_property
    def forwards(self) -> dict[int, list[int]]:
        """Receive -> the sends that forward exactly what it wrote."""
        return self.scan.forwards

    @property
    def has_rdepth(self) -> bool:
        """Whether :func:`reverse_depths` computed them."""
        return self.scan.has_rdepth

    @cached_property
    def final(self) -> set[int]:
        """The last writer of every slot at the end (-1: a slot nobody wrote)."""
        return self.scan.final


def build_dag(t: InstrTable, sizes: list[tuple[int, int, int]]) -> Dag:
    """Scan the instructions; ``sizes[rank]`` = physical (input, output, scratch) chunks.

    The scan runs in compiled code (``arborcc.compiler.native``, dag.cpp): per
    instruction, in program order, its reads (the source on this rank; the destination
    too for ``re`` and ``rrc``) depend on each atom's last writer and register as
    readers, its write depends on the last writer and every reader since and becomes
    the last writer; a send reading exactly the atoms a receive wrote forwards it.
    """
    return Dag(native.scan_dependencies(t, [s for sz in sizes for s in sz]))


def reverse_depths(t: InstrTable, dag: Dag, fused: bool = False) -> None:
    """Longest path from each instruction to the end (GC3 section 5.2, step 3), in
    compiled code (dag.cpp): reverse program order is reverse-topological. The result
    stays with the scan (``dag.has_rdepth`` tells whether it is there; the global order uses it).

    With ``fused`` it is computed on the fused DAG (the table's alias map), whose alive
    instructions are fewer: a send fused into a receive counts as that receive.
    """
    native.reverse_depths(dag.scan, t, fused)
