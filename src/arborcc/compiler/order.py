"""The global instruction order every thread block follows (GC3 section 5.2, step 4).

Instructions are sorted by dependency depth (earlier-ready first), then by reverse
dependency depth (instructions with more hops still ahead first), then by program
order. Every DAG edge (processing or communication) goes from a smaller to a strictly
larger depth, so this is a topological order; thread blocks executing their
instructions in one such order, with cross-thread-block dependencies pointing backwards
in it, cannot wait on each other in a cycle (deadlock freedom by construction).
Fusion keeps the pre-fusion depths valid: a fused instruction takes its receive's depth,
and everything after its send had a larger depth already.

The runtime matches the messages of a connection in FIFO order, so the receives of a
connection must come in the order of its sends. The priority order usually has that
property; :func:`fifo_consistent` checks it (per sender, receiver and parallel lane,
which covers every channel split). When it fails, :func:`repair_order` re-sorts with
Kahn's algorithm, keeping the priority where it can, under extra edges that chain the
sends - and in the same order the receives - of each rank pair: first in priority
order, and if that has a cycle, in program order (a fused instruction counting at its
receive's place), which never has one since every edge goes forward in program order.
"""

from __future__ import annotations

import heapq

import numpy as np

from arborcc.compiler.instructions import InstrTable


def global_order(t: InstrTable, depth: list[int], rdepth: list[int] | None) -> list[int]:
    """Alive instructions in priority order."""
    alive = np.fromiter(t.alive, dtype=bool, count=len(t))
    idx = np.flatnonzero(alive)
    d = np.fromiter(depth, dtype=np.int64, count=len(t))[idx]
    rd = (np.zeros(len(idx), dtype=np.int64) if rdepth is None
          else np.fromiter(rdepth, dtype=np.int64, count=len(t))[idx])
    # one packed key (depth, -rdepth, index) sorts faster than three
    bits_i = max(int(len(t)).bit_length(), 1)
    span = int(rd.max()) + 1 if len(rd) else 1
    bits_r = max(span.bit_length(), 1)
    if len(idx) and int(d.max()).bit_length() + bits_r + bits_i <= 62:
        key = (d << (bits_r + bits_i)) | ((span - 1 - rd) << bits_i) | idx
        order = np.argsort(key, kind="stable")
    else:
        order = np.lexsort((idx, -rd, d))
    return idx[order].tolist()


def _messages(t: InstrTable) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pair key, sending instruction, receiving instruction) of every message."""
    n = len(t)
    msg_out = np.fromiter(t.msg_out, dtype=np.int64, count=n)
    alive = np.fromiter(t.alive, dtype=bool, count=n)
    senders = np.flatnonzero((msg_out >= 0) & alive)
    receivers = msg_out[senders]
    rank = np.fromiter(t.rank, dtype=np.int64, count=n)
    nr = int(rank.max()) + 1 if n else 1
    pair = rank[senders] * nr + rank[receivers]
    if any(q != 0 for q in set(t.lane)):
        lane = np.fromiter(t.lane, dtype=np.int64, count=n)
        pair = pair * (int(lane.max()) + 1) + lane[senders]
    return pair, senders, receivers


def fifo_consistent(t: InstrTable, order: list[int]) -> bool:
    """Whether, for every rank pair, receives follow ``order`` in the order of the sends."""
    pair, senders, receivers = _messages(t)
    if len(senders) == 0:
        return True
    pos = np.empty(len(t), dtype=np.int64)
    pos[np.asarray(order, dtype=np.int64)] = np.arange(len(order))
    s = np.lexsort((pos[senders], pair))
    same = pair[s][1:] == pair[s][:-1]
    rpos = pos[receivers][s]
    return bool(np.all(rpos[1:][same] > rpos[:-1][same]))


def repair_order(t: InstrTable, order: list[int], preds: list, rep: list[int]) -> list[int]:
    """A priority-preserving order in which every pair's receives follow its sends."""
    for chain_by in ("priority", "program"):
        result = _kahn(t, order, preds, rep, chain_by)
        if result is not None:
            return result
    raise AssertionError("program order must satisfy the FIFO constraints")  # pragma: no cover


def _kahn(t: InstrTable, order: list[int], preds: list, rep: list[int], chain_by: str) -> list[int] | None:
    n = len(t)
    pos = [0] * n
    for p, i in enumerate(order):
        pos[i] = p
    succs: list[list[int]] = [[] for _ in range(n)]
    indeg = [0] * n
    for i in order:
        seen = set()
        for p in preds[i]:
            p = rep[p]
            if p not in seen:
                seen.add(p)
                succs[p].append(i)
                indeg[i] += 1
        m = t.msg_in[i]
        if m >= 0:
            m = rep[m]
            if m not in seen:
                succs[m].append(i)
                indeg[i] += 1
    pair, senders, receivers = _messages(t)
    key = np.asarray(pos, dtype=np.int64)[senders] if chain_by == "priority" else senders
    s = np.lexsort((key, pair))
    pair_s, snd, rcv = pair[s].tolist(), senders[s].tolist(), receivers[s].tolist()
    for k in range(1, len(pair_s)):
        if pair_s[k] == pair_s[k - 1]:
            for a, b in ((snd[k - 1], snd[k]), (rcv[k - 1], rcv[k])):
                if a != b:
                    succs[a].append(b)
                    indeg[b] += 1
    heap = [pos[i] for i in order if indeg[i] == 0]
    heapq.heapify(heap)
    out: list[int] = []
    while heap:
        i = order[heapq.heappop(heap)]
        out.append(i)
        for j in succs[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                heapq.heappush(heap, pos[j])
    return out if len(out) == len(order) else None
