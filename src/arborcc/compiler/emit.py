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

from arborcc.compiler.layout import Layout
from arborcc.compiler.threadblocks import Assignment
from arborcc.ir.model import Algorithm, Buffer, Dependency, Op, RankProgram, Step, ThreadBlock

_IB = {Buffer.INPUT: 0, Buffer.OUTPUT: 1, Buffer.SCRATCH: 2}


def _shifted(steps: list[Step], n: int, i: int, local, send_shift, recv_shift) -> list[Step]:
    out = []
    for s in steps:
        dep = Dependency(s.dep.tb * n + i, s.dep.step) if s.dep is not None else None
        if s.op is Op.NOP:
            out.append(Step(Op.NOP, None, -1, None, -1, 0, dep, s.has_dep))
            continue
        s_sh = recv_shift if s.op is Op.RECV else local  # a receive names the remote source
        d_sh = send_shift if s.op is Op.SEND else local  # a send names the remote destination
        out.append(Step(s.op, s.src_buf, s.src_off + s_sh[_IB[s.src_buf]], s.dst_buf,
                        s.dst_off + d_sh[_IB[s.dst_buf]], s.count, dep, s.has_dep))
    return out


def build_algorithm(prog, layout: Layout, a: Assignment) -> Algorithm:
    n = layout.instances
    width = max((tb.ch for tbs in a.tbs for tb in tbs), default=0) + 1
    ranks = []
    num_ranks = prog.num_ranks
    shifts = [[[layout.shift(ib, r, i) for ib in range(3)] for i in range(n)] for r in range(num_ranks)]
    for r in range(num_ranks):
        ic, oc, sc = layout.ir_sizes(r)
        out: list[ThreadBlock] = []
        for tb in sorted(a.tbs[r], key=lambda x: x.id):
            if n == 1:
                out.append(ThreadBlock(tb.id, tb.send, tb.recv, tb.ch, tb.steps))
                continue
            for i in range(n):
                local = shifts[r][i]
                send_shift = shifts[tb.send][i] if tb.send >= 0 else local
                recv_shift = shifts[tb.recv][i] if tb.recv >= 0 else local
                steps = _shifted(tb.steps, n, i, local, send_shift, recv_shift)
                out.append(ThreadBlock(tb.id * n + i, tb.send, tb.recv, tb.ch + width * i, steps))
        ranks.append(RankProgram(r, ic, oc, sc, out))
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
