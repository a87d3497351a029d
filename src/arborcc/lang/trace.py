"""The trace: the chunk operations a program performed, in program order.

GC3 section 4.1: a program is traced sequentially; every copy and reduce becomes a node
of the Chunk DAG, whose edges are the dependencies through buffer slots. The trace keeps
the nodes in program order (which is a topological order of that DAG); the compiler
derives the edges (:mod:`arborcc.compiler.dag`).

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840

An operation is a plain tuple (millions are recorded for 1024-rank programs, so no
per-operation object). Its fields, by index:
"""

from __future__ import annotations

from typing import NamedTuple

KIND, SRC_RANK, SRC_BUF, SRC_IDX, DST_RANK, DST_BUF, DST_IDX, COUNT, SENDTB, RECVTB, CH, LANES, WHERE = range(13)

#: operation kinds: ``dst = src`` and ``dst = dst (+) src``
COPY, REDUCE = 0, 1


class OpView(NamedTuple):
    """A readable view of one traced operation (for tools and tests, not the hot path)."""

    kind: int
    src_rank: int
    src_buf: int
    src_idx: int
    dst_rank: int
    dst_buf: int
    dst_idx: int
    count: int
    sendtb: int
    recvtb: int
    ch: int
    lanes: int
    where: tuple
