"""Instruction generation: chunk operations -> instructions (GC3 section 4.2).

A remote copy becomes a ``send`` on the source rank and a ``recv`` on the destination;
a remote reduce becomes a ``send`` and a ``recv-reduce-copy`` (``rrc``); a local copy
is a ``cpy`` and a local reduce a ``re``. The two halves of a remote operation are
joined by a *communication edge* (``msg_out`` of the send, ``msg_in`` of the receive).

Instructions are kept as a table of columns (one entry per instruction) rather than
objects: programs of 1024 ranks have millions of them.

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

import arborcc.compiler.native as native
from arborcc.compiler.layout import Layout, op_pieces
from arborcc.ir.steps import OP_OF_CODE, Op, check_native_step_codes
from arborcc.lang import trace as T

check_native_step_codes(native)  # the passes compute on the step codes

#: instruction kinds: the step codes of the IR (:mod:`arborcc.ir.steps`); the fused ones
#: (GC3 section 4.2) are produced by the fusion pass
SEND, RECV, RRC, CPY, RE, RCS, RRCS, RRS = (op.code for op in (
    Op.SEND, Op.RECV, Op.RECV_REDUCE_COPY, Op.COPY, Op.REDUCE, Op.RECV_COPY_SEND, Op.RECV_REDUCE_COPY_SEND,
    Op.RECV_REDUCE_SEND))
#: the step type of each instruction kind (index: kind); a nop is no instruction
KIND_OP = tuple(op for op in OP_OF_CODE if op is not Op.NOP)
KIND_NAME = tuple(op.value for op in KIND_OP)


#: Instructions as columns, kept in compiled code between the passes
#: (``arborcc.compiler.native``, csrc/table.hpp); instruction ``i`` is index ``i`` of every
#: column, which Python reads as lists (``t.kind``, ... - each read makes a new list).
#: ``sbuf/soff`` and ``dbuf/doff`` are IR buffers (0 input, 1 output, 2 scratch) and
#: physical offsets of instance 0; ``cnt`` physical chunks. ``speer``/``rpeer`` are the
#: ranks sent to / received from (-1: none). ``ch``, ``sendtb``, ``recvtb`` are the
#: program's hints (-1: automatic). ``op`` is the traced operation it comes from.
#: ``alive`` is False for a send fused into a receive, ``rep`` the alias map, ``fusions``
#: fused receive -> (send fused into it, and the receive's own kind, sbuf, soff, sendtb,
#: ch before fusion): what :func:`~arborcc.compiler.fusion.unfuse` restores.
#: ``InstrTable(*columns)`` takes one list per name of ``InstrTable.FIELDS``.
InstrTable = native.InstrTable


def lower_operations(prog, layout: Layout) -> InstrTable:
    """Expand every traced operation of ``prog`` into instructions, in program order."""
    if layout.sub == 1 and layout.instances == 1 and prog.ops:
        return _lower_direct(prog, layout)
    return _lower_pieces(prog, layout)


def _lower_direct(prog, layout: Layout) -> InstrTable:
    """Without parallelize or instances a chunk index is a physical offset: one pass in
    compiled code (``arborcc.compiler.native``, csrc/instructions.cpp) expands the
    operations (named scratch regions shifted into the rank's scratch buffer)."""
    return native.lower_direct(prog.ops, layout.region_offset)


def _lower_pieces(prog, layout: Layout) -> InstrTable:
    """The general expansion: operations split into per-lane, per-block pieces."""
    columns: dict[str, list[int]] = {f: [] for f in InstrTable.FIELDS}
    rank, kind, sbuf, soff, dbuf, doff = (columns[f] for f in ("rank", "kind", "sbuf", "soff", "dbuf", "doff"))
    cnt, speer, rpeer, lane, chl, sendtb, recvtb = (columns[f] for f in ("cnt", "speer", "rpeer", "lane", "ch",
                                                                            "sendtb", "recvtb"))
    opl, msg_in, msg_out = columns["op"], columns["msg_in"], columns["msg_out"]
    for oi, op in enumerate(prog.ops):
        k, sr, sc, si, dr, dc, di, c, stb, rtb, ch, lanes, _ = op
        for sib, so, dib, do, n, q in op_pieces(op, layout):
            if sr != dr:
                i = len(rank)
                # the send half, on the source rank
                rank.append(sr); kind.append(SEND); sbuf.append(sib); soff.append(so)
                dbuf.append(dib); doff.append(do); cnt.append(n); speer.append(dr); rpeer.append(-1)
                lane.append(q); chl.append(ch); sendtb.append(stb); recvtb.append(-1); opl.append(oi)
                msg_in.append(-1); msg_out.append(i + 1)
                # the receive half, on the destination rank
                rank.append(dr); cnt.append(n); speer.append(-1); rpeer.append(sr); lane.append(q)
                chl.append(ch); sendtb.append(-1); recvtb.append(rtb); opl.append(oi)
                msg_in.append(i); msg_out.append(-1); dbuf.append(dib); doff.append(do)
                if k == T.COPY:
                    kind.append(RECV); sbuf.append(sib); soff.append(so)
                else:  # rrc: reduce the received data with the local chunk, in place
                    kind.append(RRC); sbuf.append(dib); soff.append(do)
            else:
                rank.append(sr); kind.append(CPY if k == T.COPY else RE); sbuf.append(sib)
                soff.append(so); dbuf.append(dib); doff.append(do); cnt.append(n)
                speer.append(-1); rpeer.append(-1); lane.append(q); chl.append(ch)
                sendtb.append(stb if stb != -1 else rtb); recvtb.append(-1); opl.append(oi)
                msg_in.append(-1); msg_out.append(-1)
    return InstrTable(*columns.values())
