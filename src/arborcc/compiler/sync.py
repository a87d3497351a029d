"""Synchronization insertion: steps and cross-thread-block dependencies (GC3 section 5.2).

Instructions go to their thread blocks in the global order, becoming IR steps. Within a
thread block instructions run in sequence, so a processing edge between two of them
needs nothing. An edge from another thread block of the same rank becomes a dependency
on that block's step - only the latest step per block, and only when this block has not
already waited for that step or a later one. The IR carries one dependency per step; the
others become ``nop`` steps placed right before it. A step others wait on gets
``has_dep``. Communication edges need nothing: a receive waits for its send.

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

import arborcc.compiler.native as native
from arborcc.compiler.instructions import InstrTable


def emit_steps(t: InstrTable, order: list[int], pred_rows, a: native.Assignment) -> native.Schedule:
    """Every instruction (and its nops) as a step of its thread block, offsets of instance 0
    (compiled code, ``arborcc.compiler.native``, csrc/sync.cpp); ``nops`` of the result
    counts the nops added. Per instruction in ``order``, the latest step of each other
    thread block among its predecessors (``pred_rows``, mapped through the alias map) that its
    block has not waited for yet, by thread block id: the last becomes the step's
    dependency, the others nop steps before it; each step waited on gets ``has_dep``.
    """
    return native.emit_steps(t, order, pred_rows, a)
