"""Instruction fusion: peephole rewrites of a receive and the send forwarding it
(GC3 section 4.2, "Instruction Fusion").

* ``recv`` + ``send`` of the same chunks -> ``rcs`` (receive-copy-send);
* ``rrc`` + ``send`` -> ``rrcs`` (receive-reduce-copy-send);
* ``rrc`` + ``send`` -> ``rrs`` (receive-reduce-send) when the reduced value is only
  forwarded: no other instruction reads it and it is overwritten later or left in a
  buffer whose final contents do not matter (scratch, or input of an out-of-place
  collective). The slot then keeps its old value, which nothing looks at.

When several sends forward one receive, the one on the longest path to the end is
fused (GC3). A fused instruction sits where the receive was; it uses one thread block
for both connections, so both must be on the same channel: fusion only joins transfers
whose channel hints agree (a union-find over messages keeps whole fused chains
consistent), and in manual mode only when the receive and send name the same thread
block.

Later passes may undo a fusion (:func:`unfuse`; ``InstrTable.fusions`` keeps what it
replaced) when it leaves no FIFO-consistent order (:mod:`.order`) or its chain fits no
channel (:mod:`.threadblocks`).

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

import arborcc.compiler.native as native
from arborcc.compiler.dag import Dag, reverse_depths
from arborcc.compiler.instructions import InstrTable


def fuse_instructions(t: InstrTable, dag: Dag, significant: set[int], manual: bool) -> None:
    """Fuse in place: the table's columns rewritten, its alias map (``t.rep[i]``: the
    instruction that now does what ``i`` did - ``i`` itself unless ``i`` was a send fused
    into a receive) and ``t.fusions`` filled.

    ``significant``: IR buffers whose final contents are the collective's result. The
    pass runs in compiled code (``arborcc.compiler.native``, csrc/fusion.cpp): receives
    in the DAG's order (by index when channel hints differ), each fused with its
    forwarding send on the longest path to the end.
    """
    if not dag.has_forwards:
        return
    if not dag.has_rdepth and dag.multi_forwards:
        reverse_depths(t, dag)
    native.fuse_instructions(t, dag.scan, significant, manual)


def unfuse(t: InstrTable, receives) -> None:
    """Undo the fusion of each of ``receives`` (fused instructions): the receive gets its
    own kind back and the send it absorbed is alive again, right before its receive on
    the next rank. Depths need no update (they are the pre-fusion ones); the alias map
    does. Compiled code (fusion.cpp, which the thread-block assignment also uses).
    """
    native.unfuse(t, list(receives))
