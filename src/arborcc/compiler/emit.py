"""IR emission and instance replication (GC3 section 5.1, "instances").

The scheduled thread blocks of one instance become :class:`~arborcc.ir.model.ThreadBlock`
objects; with ``instances=n`` each is replicated n times on 1/n of the data: thread
block ``id`` becomes ``id*n + i``, channel ``c`` becomes ``c + C*i`` (C: channels of one
instance), and every offset moves to instance i's copy of its chunk (see
:mod:`arborcc.compiler.layout`). Replicas touch disjoint chunks, so no dependency
crosses instances.

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

from dataclasses import fields

import arborcc.compiler.native as native
from arborcc.compiler.instructions import KIND_OP
from arborcc.compiler.layout import IR_BUFFERS, Layout
from arborcc.ir.model import Algorithm, Dependency, Op, RankProgram, Step, ThreadBlock

#: the IR classes the compiled code makes, their fields (it sets them as their generated
#: __init__ does), the Op of each instruction kind and of a nop step, the IR buffers
_CLASSES = (Step, ThreadBlock, Dependency)
_FIELDS = tuple(tuple(f.name for f in fields(c)) for c in _CLASSES)
_OPS = (*KIND_OP, Op.NOP)


def build_algorithm(prog, layout: Layout, a: native.Assignment, schedule: native.Schedule) -> Algorithm:
    """The IR of a scheduled program: its thread blocks with their steps, replicated for
    instances (compiled code, ``arborcc.compiler.native``, csrc/irobjects.cpp)."""
    n = layout.instances
    num_ranks = prog.num_ranks
    shifts = ([layout.shift(ib, r, i) for r in range(num_ranks) for i in range(n) for ib in range(3)]
              if n > 1 else [])
    per_rank = native.build_threadblocks(schedule, a, n, shifts, _CLASSES, _FIELDS, _OPS, IR_BUFFERS)
    ranks = [RankProgram(r, *layout.ir_sizes(r), tbs) for r, tbs in enumerate(per_rank)]
    col = prog.collective
    return Algorithm(
        name=prog.name,
        collective=col.ir_name,
        num_ranks=num_ranks,
        chunks_per_loop=layout.chunks_per_loop,
        ranks=ranks,
        protocol=prog.protocol,
        inplace=col.inplace,
        outofplace=not col.inplace,
        root=col.root,
    )
