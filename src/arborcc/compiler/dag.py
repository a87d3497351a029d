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

The scan tracks *atoms* rather than chunks (:func:`_atoms`): the runs of chunks that
every access covers whole, so a multi-count transfer costs what a single chunk does.

Cost: one pass, O(atoms touched) - nothing is recomputed.

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from arborcc.compiler.instructions import CPY, RE, RECV, RRC, SEND, InstrTable


@dataclass
class Dag:
    preds: list  #: per instruction: sequence of same-rank predecessor instructions
    depth: list[int]  #: dependency depth
    readers: list[int]  #: per instruction: how many instructions read what it wrote
    forwards: dict[int, list[int]]  #: receive -> sends that forward exactly what it wrote
    last_writer: list  #: per rank, per IR buffer: last writer of each atom at the end
    multi_forwards: bool = False  #: some receive is forwarded by several sends
    rdepth: list[int] | None = field(default=None)
    _final: set[int] | None = field(default=None, repr=False)

    def final_writers(self) -> set[int]:
        """The instructions that wrote what some slot holds at the end."""
        if self._final is None:
            self._final = set().union(*(slots for bufs in self.last_writer for slots in bufs))
        return self._final


def _atoms(t: InstrTable, sizes: list[tuple[int, int, int]]) -> tuple[list, list, list, list, list]:
    """Instruction ranges in *atoms*: the pieces every buffer is cut into at each offset
    where some access starts or ends. An access covers whole atoms, and all slots of an
    atom share their history, so the scan can track atoms instead of chunks: a
    64-chunk transfer of a tree algorithm is one atom, not 64 slots.

    Returns (source atom, source atoms, destination atom, destination atoms) per
    instruction and the atom count of every buffer (``[rank][IR buffer]``).
    """
    if max(t.cnt, default=1) == 1:  # every access is one chunk: atoms are chunks
        return t.soff, t.cnt, t.doff, t.cnt, sizes
    n = len(t)

    def array(column: list[int]) -> np.ndarray:
        return np.fromiter(column, dtype=np.int64, count=n)

    rank, kind, cnt = array(t.rank), array(t.kind), array(t.cnt)
    sbuf, dbuf = rank * 3 + array(t.sbuf), rank * 3 + array(t.dbuf)  # buffers numbered globally
    # every buffer gets its own stretch of one coordinate line: base + offset
    width = np.array([s + 1 for sz in sizes for s in sz], dtype=np.int64)
    base = np.concatenate(([0], np.cumsum(width)[:-1]))
    s0, d0 = base[sbuf] + array(t.soff), base[dbuf] + array(t.doff)
    reads = (kind == SEND) | (kind == CPY) | (kind == RE)  # source accessed on this rank
    writes = kind != SEND
    # sorted and deduplicated by hand: numpy 2's np.unique hashes first, 10x slower here
    cuts = np.sort(np.concatenate((base, base + width - 1, s0[reads], (s0 + cnt)[reads], d0[writes],
                                   (d0 + cnt)[writes])))
    cuts = cuts[np.concatenate(([True], cuts[1:] != cuts[:-1]))]
    first = np.searchsorted(cuts, base)  # number of each buffer's first atom
    atoms = (np.searchsorted(cuts, base + width - 1) - first).reshape(len(sizes), 3).tolist()
    sa, da = np.searchsorted(cuts, s0), np.searchsorted(cuts, d0)
    scnt, dcnt = np.searchsorted(cuts, s0 + cnt) - sa, np.searchsorted(cuts, d0 + cnt) - da
    sa -= first[sbuf]
    da -= first[dbuf]
    return sa.tolist(), scnt.tolist(), da.tolist(), dcnt.tolist(), atoms


def build_dag(t: InstrTable, sizes: list[tuple[int, int, int]]) -> Dag:
    """Scan the instructions; ``sizes[rank]`` = physical (input, output, scratch) chunks."""
    n = len(t)
    soff, scnt, doff, dcnt, atoms = _atoms(t, sizes)
    lw = [[[-1] * s for s in sz] for sz in atoms]  # last writer per atom
    rd = [[[None] * s for s in sz] for sz in atoms]  # readers since the last write
    preds: list = [()] * n
    depth = [0] * n
    readers = [0] * n
    forwards: dict[int, list[int]] = {}
    rank, kind, sbuf, dbuf = t.rank, t.kind, t.sbuf, t.dbuf
    msg_in, msg_out = t.msg_in, t.msg_out
    done = -1  # a receive already handled together with its send
    multi = False  # some receive has several forwarding sends
    for i in range(n):
        if i == done:
            continue
        r, k = rank[i], kind[i]
        # Fast paths: single-atom sends, receives and rrc's are nearly all instructions of
        # large programs; they do exactly what the general code below does. A send and its
        # receive, adjacent in program order, are handled in one go.
        if k == SEND:
            if scnt[i] == 1:
                b, o = sbuf[i], soff[i]
                lwb, rdb = lw[r][b], rd[r][b]
                lst = rdb[o]
                if lst is None:
                    rdb[o] = i  # one reader is kept as an int, several as a list
                elif type(lst) is int:
                    rdb[o] = [lst, i]
                else:
                    lst.append(i)
                w = lwb[o]
                ds = 0
                if w >= 0:
                    preds[i] = (w,)
                    readers[w] += 1
                    ds = depth[w] + 1
                    depth[i] = ds
                    kw = kind[w]
                    if (kw == RECV or kw == RRC) and dbuf[w] == b and doff[w] == o and dcnt[w] == 1:
                        fw = forwards.get(w)
                        if fw is None:
                            forwards[w] = [i]
                        else:
                            fw.append(i)
                            multi = True
                j = i + 1
                if msg_out[i] != j or dcnt[j] != 1:
                    continue
                # --- its receive (recv or rrc), on the destination rank ---
                done = j
                kj = kind[j]
                b, o = dbuf[j], doff[j]
                rj = rank[j]
                lwb, rdb = lw[rj][b], rd[rj][b]
                w = lwb[o]
                lst = rdb[o]
                d = ds + 1
                if w >= 0:
                    if kj == RRC:
                        readers[w] += 1
                    p = [w]
                    if depth[w] >= d:
                        d = depth[w] + 1
                else:
                    p = []
                if lst is not None:
                    if type(lst) is int:
                        if lst not in p:
                            p.append(lst)
                            if depth[lst] >= d:
                                d = depth[lst] + 1
                    else:
                        for q in lst:
                            if q not in p:
                                p.append(q)
                                if depth[q] >= d:
                                    d = depth[q] + 1
                rdb[o] = None
                lwb[o] = j
                depth[j] = d
                if p:
                    preds[j] = p
                continue
        elif k == RECV or k == RRC:
            if dcnt[i] == 1:
                b, o = dbuf[i], doff[i]
                lwb, rdb = lw[r][b], rd[r][b]
                w = lwb[o]
                lst = rdb[o]
                d = depth[msg_in[i]] + 1
                if w >= 0:
                    if k == RRC:
                        readers[w] += 1
                    p = [w]
                    if depth[w] >= d:
                        d = depth[w] + 1
                else:
                    p = []
                if lst is not None:
                    for q in ((lst,) if type(lst) is int else lst):
                        if q not in p:
                            p.append(q)
                            if depth[q] >= d:
                                d = depth[q] + 1
                rdb[o] = None
                lwb[o] = i
                depth[i] = d
                if p:
                    preds[i] = p
                continue
        p: list[int] = []
        # --- reads ---
        if k == SEND or k == CPY or k == RE:
            b, o, c = sbuf[i], soff[i], scnt[i]
            lwb, rdb = lw[r][b], rd[r][b]
            if c == 1:
                w = lwb[o]
                writers = (w,) if w >= 0 else ()
                lst = rdb[o]
                if lst is None:
                    rdb[o] = [i]
                elif type(lst) is int:
                    rdb[o] = [lst, i]
                else:
                    lst.append(i)
            else:
                ws = []
                for x in range(o, o + c):
                    w = lwb[x]
                    if w >= 0 and w not in ws:
                        ws.append(w)
                    lst = rdb[x]
                    if lst is None:
                        rdb[x] = [i]
                    elif type(lst) is int:
                        rdb[x] = [lst, i]
                    else:
                        lst.append(i)
                writers = ws
            for w in writers:
                p.append(w)
                readers[w] += 1
            if k == SEND and len(writers) == 1:
                w = writers[0]
                kw = kind[w]
                if ((kw == RECV or kw == RRC) and dbuf[w] == b and doff[w] == o and dcnt[w] == c
                        and all(lwb[x] == w for x in range(o, o + c))):
                    fw = forwards.get(w)
                    if fw is None:
                        forwards[w] = [i]
                    else:
                        fw.append(i)
                        multi = True
        c = dcnt[i]
        if k == RE or k == RRC:  # the destination is read too
            b, o = dbuf[i], doff[i]
            lwb, rdb = lw[r][b], rd[r][b]
            for x in range(o, o + c):
                w = lwb[x]
                if w >= 0 and w not in p:
                    p.append(w)
                    readers[w] += 1
                lst = rdb[x]
                if lst is None:
                    rdb[x] = [i]
                elif type(lst) is int:
                    rdb[x] = [lst, i]
                else:
                    lst.append(i)
        # --- writes ---
        if k != SEND:
            b, o = dbuf[i], doff[i]
            lwb, rdb = lw[r][b], rd[r][b]
            for x in range(o, o + c):
                w = lwb[x]
                if w >= 0 and w not in p:
                    p.append(w)
                lst = rdb[x]
                if lst is not None:
                    for q in ((lst,) if type(lst) is int else lst):
                        if q != i and q not in p:
                            p.append(q)
                    rdb[x] = None
                lwb[x] = i
        # --- depth ---
        d = 0
        for q in p:
            if depth[q] >= d:
                d = depth[q] + 1
        m = msg_in[i]
        if m >= 0 and depth[m] >= d:
            d = depth[m] + 1
        depth[i] = d
        if p:
            preds[i] = p
    return Dag(preds, depth, readers, forwards, lw, multi)


def reverse_depths(t: InstrTable, dag: Dag, rep: list[int] | None = None) -> list[int]:
    """Longest path from each instruction to the end (GC3 section 5.2, step 3).

    With ``rep`` (the fusion alias map) it is computed on the fused DAG, whose alive
    instructions are fewer; reverse program order is reverse-topological either way.
    """
    n = len(t)
    rdepth = [0] * n
    preds, msg_in = dag.preds, t.msg_in
    if rep is None:
        for i in range(n - 1, -1, -1):
            d = rdepth[i] + 1
            for q in preds[i]:
                if rdepth[q] < d:
                    rdepth[q] = d
            m = msg_in[i]
            if m >= 0 and rdepth[m] < d:
                rdepth[m] = d
    else:
        alive = t.alive
        for i in range(n - 1, -1, -1):
            if not alive[i]:
                continue
            d = rdepth[i] + 1
            for q in preds[i]:
                q = rep[q]
                if rdepth[q] < d:
                    rdepth[q] = d
            m = msg_in[i]
            if m >= 0 and rdepth[m] < d:
                rdepth[m] = d
    dag.rdepth = rdepth
    return rdepth
