"""The chunk slots of one rank during the symbolic run, kept as segments.

Steps read and write contiguous chunk ranges, mostly the same ranges over and over.
Before the run, a rank's memory is cut at both ends of every range any of its steps
accesses (:func:`initial_memory`): every access then covers whole *segments*, and
the slots of a segment always share

* their values, as a list of runs (:mod:`arborcc.verify.values`; usually one run:
  consecutive input chunks of the same ranks, or uninitialized), or ``None`` while
  they still hold what they held at the start (made on demand: a big program that
  moves single chunks has one segment per slot);
* the step that last wrote them (its global step id, -1 for none), for the race check
  and for naming the writer of a wrong output chunk;
* the steps that read them since that write (for the race check): ``None``, one gid,
  or ``{thread block: gid}`` with the latest read of each thread block, in the order
  the thread blocks first read.

So the work of a step is the number of segments in its range (one, nearly always),
not its chunk count, and every conflicting access pair a per-slot check would find is
found here too, at the first slot of the range where it occurs. Run lists and reader
dicts are never changed in place once stored (they are shared with messages and
between reads).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

from arborcc.ir.model import Algorithm, Buffer
from arborcc.verify.layout import MemoryMap
from arborcc.verify.values import merge_runs, run_head, run_tail


class RankMemory:
    """The slots ``cuts[0] .. cuts[-1]-1`` (flat addresses, :class:`arborcc.verify.layout.MemoryMap`)
    in segments ``cuts[k] .. cuts[k+1]-1``; at the start, slot ``data + j`` of
    ``data .. data_end-1`` holds ``(j, data_ranks)`` and every other slot nothing."""

    __slots__ = ("data", "data_end", "data_ranks", "readers", "starts", "values", "writers")

    def __init__(self, cuts: list[int], data: int, data_end: int, data_ranks: int):
        self.starts = cuts
        self.data, self.data_end, self.data_ranks = data, data_end, data_ranks
        self.values: list = [None] * (len(cuts) - 1)
        self.writers: list[int] = [-1] * (len(cuts) - 1)
        self.readers: list = [None] * (len(cuts) - 1)

    def _initial(self, k: int) -> list:
        """The runs of segment ``k`` at the start."""
        a, b = self.starts[k], self.starts[k + 1]
        if self.data <= a < self.data_end:
            return [(b - a, (a - self.data, self.data_ranks))]
        return [(b - a, None)]

    def read(self, a: int, count: int, gid: int, g: int, conflicts) -> list:
        """The runs of slots ``a .. a+count-1``, read by step ``gid`` of thread block ``g``.

        With ``conflicts`` (a :class:`arborcc.verify.races.ConflictLog`) the read is
        checked against the last writer of each segment and recorded as a reader.
        """
        starts = self.starts
        i = bisect_left(starts, a)
        j = i + 1 if starts[i + 1] == a + count else bisect_left(starts, a + count, i)
        if conflicts is not None:
            writers, readers = self.writers, self.readers
            gid_tb = conflicts.gid_tb
            for k in range(i, j):
                w = writers[k]
                if w >= 0 and gid_tb[w] != g:
                    conflicts.check(w, gid, starts[k], True, False, False)
                rd = readers[k]
                if rd is None:
                    readers[k] = gid
                elif type(rd) is int:
                    tg = gid_tb[rd]
                    readers[k] = gid if tg == g else {tg: rd, g: gid}
                elif rd.get(g) != gid:
                    rd = dict(rd)
                    rd[g] = gid
                    readers[k] = rd
        if j == i + 1:
            return self.values[i] or self._initial(i)
        return [run for k in range(i, j) for run in self.values[k] or self._initial(k)]

    def write(self, a: int, runs: list, count: int, gid: int, g: int, received: bool, conflicts) -> None:
        """Step ``gid`` of thread block ``g`` writes ``runs`` (``count`` slots) from ``a`` on.

        With ``conflicts`` the write is checked against the last writer and the readers
        of each segment it overwrites; ``received``: the data comes from a receive.
        """
        starts = self.starts
        i = bisect_left(starts, a)
        j = i + 1 if starts[i + 1] == a + count else bisect_left(starts, a + count, i)
        writers, readers = self.writers, self.readers
        if conflicts is not None:
            gid_tb = conflicts.gid_tb
            for k in range(i, j):
                addr = starts[k]
                w = writers[k]
                if w >= 0 and gid_tb[w] != g:
                    conflicts.check(w, gid, addr, True, True, received)
                rd = readers[k]
                if rd is None:
                    continue
                if type(rd) is int:
                    if gid_tb[rd] != g:
                        conflicts.check(rd, gid, addr, False, True, received)
                else:
                    for tg, rg in rd.items():
                        if tg != g:
                            conflicts.check(rg, gid, addr, False, True, received)
        if len(runs) > 1:
            runs = merge_runs(runs)
        if j == i + 1:
            self.values[i] = runs
            writers[i] = gid
            readers[i] = None
            return
        self.values[i:j] = _cut_runs(runs, [starts[k + 1] - starts[k] for k in range(i, j)])
        writers[i:j] = [gid] * (j - i)
        readers[i:j] = [None] * (j - i)

    def pieces(self, a: int, b: int):
        """``(first slot, length, run value, writer)`` of each run of the slots ``a .. b-1``."""
        starts, values, writers = self.starts, self.values, self.writers
        k = bisect_right(starts, a) - 1
        while starts[k] < b:
            pos = starts[k]
            runs = values[k] or self._initial(k)
            if len(runs) == 1 and pos >= a and starts[k + 1] <= b:  # the common case: a whole segment
                yield pos, runs[0][0], runs[0][1], writers[k]
            else:
                for length, v in runs:
                    first, end = max(pos, a), min(pos + length, b)
                    if first < end:
                        if first > pos:
                            v = run_tail(v, first - pos)
                        yield first, end - first, run_head(v, end - first), writers[k]
                    pos += length
            k += 1


def _cut_runs(runs: list, lengths: list[int]) -> list[list]:
    """``runs`` cut into consecutive run lists of the given lengths (which add up to theirs)."""
    out = []
    pos = 0
    length, v = runs[0]
    for want in lengths:
        piece = []
        while want:
            n = min(want, length)
            piece.append((n, run_head(v, n)))
            want -= n
            length -= n
            if length:
                v = run_tail(v, n)
            elif pos + 1 < len(runs):
                pos += 1
                length, v = runs[pos]
        out.append(piece)
    return out


def initial_memory(algo: Algorithm, mm: MemoryMap, cuts: dict[int, dict[Buffer, set[int]]]) -> list[RankMemory]:
    """Each rank's memory at the start of a call, by rank id: input chunk ``j`` of rank
    ``r`` holds ``(j, 1 << r)``; inputs that hold no data (non-root broadcast/scatter)
    and everything else start uninitialized.

    The memory is cut into segments at the ends of the buffers and at ``cuts`` (by rank
    and buffer: the chunk offsets where ranges the steps access start or end, see
    :class:`arborcc.verify.structure.StructureResult`).
    """
    memory = []
    for prog in sorted(algo.ranks, key=lambda p: p.rank):
        r = prog.rank
        start, end = mm.spans[r]
        base = mm.bases[r]
        data, data_end = mm.data(r)
        result, result_end = mm.result(r)
        at = {start, end, data, data_end, result, result_end, *mm.call_bases[r].values(),
              base[Buffer.INPUT] + prog.input_chunks, base[Buffer.OUTPUT] + prog.output_chunks,
              base[Buffer.SCRATCH] + prog.scratch_chunks, *base.values()}
        for buf, offsets in cuts[r].items():
            b = base[buf]
            at.update([b + off for off in offsets])
        defined = mm.layouts[r].data_defined
        memory.append(RankMemory(sorted(a for a in at if start <= a <= end), data, data_end if defined else data,
                                 1 << r))
    return memory
