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

from arborcc.compiler.dag import Dag, reverse_depths
from arborcc.compiler.instructions import RCS, RECV, RRCS, RRS, InstrTable


class _Channels:
    """Union-find over messages (named by their send instruction) with a channel hint."""

    def __init__(self, hints: list[int]) -> None:
        self.parent = list(range(len(hints)))
        self.hint = list(hints)  #: valid at roots

    def find(self, m: int) -> int:
        parent = self.parent
        root = m
        while parent[root] != root:
            root = parent[root]
        while parent[m] != root:
            parent[m], m = root, parent[m]
        return root

    def join(self, a: int, b: int) -> bool:
        ha, hb = self.hint[a], self.hint[b]
        if ha != -1 and hb != -1 and ha != hb:
            return False
        self.parent[b] = a
        self.hint[a] = ha if ha != -1 else hb
        return True


def fuse_instructions(t: InstrTable, dag: Dag, significant: set[int], manual: bool) -> list[int]:
    """Fuse in place; returns the alias map: ``alias[i]`` is the instruction that now does
    what ``i`` did (``i`` itself unless ``i`` was a send fused into a receive).

    ``significant``: IR buffers whose final contents are the collective's result.
    """
    rep = list(range(len(t)))
    if not dag.forwards:
        return rep
    rdepth = dag.rdepth
    if rdepth is None and dag.multi_forwards:
        rdepth = reverse_depths(t, dag)
    kind, ch, msg_in, msg_out, lane = t.kind, t.ch, t.msg_in, t.msg_out, t.lane
    sbuf, soff, dbuf, doff, speer, sendtb, alive = t.sbuf, t.soff, t.dbuf, t.doff, t.speer, t.sendtb, t.alive
    readers = dag.readers
    # channel hints only matter when they differ; then whole chains must agree
    chans = _Channels(ch) if len(set(ch)) > 1 else None
    forwards = dag.forwards
    fusions = t.fusions
    for r, sends in (sorted(forwards.items()) if chans is not None else forwards.items()):
        s = sends[0] if len(sends) == 1 else max(sends, key=lambda x: rdepth[x])
        if lane[s] != lane[r]:
            continue
        if manual and (t.recvtb[r] != sendtb[s] or max(ch[r], 0) != max(ch[s], 0)):
            continue
        if chans is not None:
            m_in, m_out = chans.find(msg_in[r]), chans.find(s)
            if m_in == m_out or not chans.join(m_in, m_out):
                continue
        q = msg_out[s]  # the receive on the next rank
        k = kind[r]
        fusions[r] = (s, k, sbuf[r], soff[r], sendtb[r], ch[r])
        if k == RECV:
            kind[r] = RCS
            sbuf[r] = dbuf[r]
            soff[r] = doff[r]
        elif readers[r] != 1:
            kind[r] = RRCS
        elif dbuf[r] not in significant:
            kind[r] = RRS  # the reduced value is only forwarded
        else:  # ... and the slot's final value does not matter unless it stays there
            kind[r] = RRCS if r in dag.final else RRS
        speer[r] = speer[s]
        sendtb[r] = sendtb[s]
        if ch[r] == -1:  # keep every hint of a chain on some member (they all agree)
            ch[r] = ch[s]
        msg_out[r] = q
        msg_in[q] = r
        alive[s] = False
        rep[s] = r
    return rep


def unfuse(t: InstrTable, rep: list[int], receives) -> None:
    """Undo the fusion of each of ``receives`` (fused instructions): the receive gets its
    own kind back and the send it absorbed is alive again, right before its receive on
    the next rank. Depths need no update (they are the pre-fusion ones); ``rep`` does.
    """
    kind, sbuf, soff, sendtb, ch, speer = t.kind, t.sbuf, t.soff, t.sendtb, t.ch, t.speer
    msg_in, msg_out, alive, fusions = t.msg_in, t.msg_out, t.alive, t.fusions
    for r in receives:
        s, kind[r], sbuf[r], soff[r], sendtb[r], ch[r] = fusions.pop(r)
        q = msg_out[r]
        speer[r] = -1
        msg_out[r] = -1
        msg_in[q] = s
        msg_out[s] = q
        alive[s] = True
        rep[s] = s
