"""The critical path of a simulated call: the chain of transfers, latencies and
reductions that ends when the last thread block finishes.

Starting from the piece of work that ends last, each step back follows what that piece
waited for last before it could start (:class:`arborcc.sim.engine.Piece`): the data
it received (then the sender's transfer and the latency between), the step it depends
on, its own thread block's previous piece, or the receiver that freed a FIFO slot.
Whatever is left between the pieces on the chain is waiting.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from arborcc.sim.engine import EngineResult
from arborcc.sim.program import CompiledAlgorithm


@dataclass(frozen=True)
class Segment:
    """One stretch of the critical path: ``kind`` is launch, transfer, latency or compute."""

    kind: str
    start: float
    end: float
    rank: int = -1
    tb: int = -1
    step: int = -1
    iteration: int = -1
    peer: int = -1  #: the receiving rank of a transfer, the sending rank of a latency

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass
class CriticalPath:
    """Segments in time order and the time they add up to per kind (seconds)."""

    segments: list[Segment] = field(default_factory=list)

    def total(self, kind: str) -> float:
        return sum(s.duration for s in self.segments if s.kind == kind)

    @property
    def end(self) -> float:
        return self.segments[-1].end if self.segments else 0.0

    @property
    def waiting(self) -> float:
        return max(0.0, self.end - sum(s.duration for s in self.segments))

    def runs(self) -> list[tuple[Segment, int]]:
        """Consecutive segments of the same kind, thread block, step and peer merged:
        (a segment spanning the run, how many it merged)."""
        out: list[tuple[Segment, int]] = []
        for seg in self.segments:
            if out:
                last, n = out[-1]
                if (last.kind, last.rank, last.tb, last.step, last.peer) == (seg.kind, seg.rank, seg.tb, seg.step,
                                                                               seg.peer):
                    out[-1] = (Segment(last.kind, last.start, seg.end, last.rank, last.tb, last.step, last.iteration,
                                       last.peer), n + 1)
                    continue
            out.append((seg, 1))
        return out

    def summary(self) -> dict[str, float]:
        """Seconds per kind along the path, plus ``waiting`` and ``transfers`` (a count)."""
        out = {kind: self.total(kind) for kind in ("launch", "transfer", "latency", "compute")}
        out["waiting"] = self.waiting
        out["transfers"] = sum(1 for s in self.segments if s.kind == "transfer")
        return out


def critical_path(prog: CompiledAlgorithm, result: EngineResult, offset: float) -> CriticalPath:
    """The critical path of a recorded run (module doc); times shifted by ``offset``,
    the launch latency, which the path starts with."""
    pieces = result.pieces
    segments: list[Segment] = []
    if pieces:
        r = max(range(len(pieces)), key=lambda i: (pieces[i].end, i))
        include = True
        seen = set()
        while r >= 0 and r not in seen:
            seen.add(r)
            rec = pieces[r]
            rank, tb = prog.tb_rank[rec.tb], prog.tb_id[rec.tb]
            where = dict(rank=rank, tb=tb, step=rec.step, iteration=rec.iteration)
            if include:
                if rec.send is not None:
                    peer = prog.conn_keys[prog.tb_send[rec.tb]][1]
                    segments.append(Segment("transfer", rec.send[0] + offset, rec.send[1] + offset, peer=peer,
                                            **where))
                if rec.compute is not None:
                    segments.append(Segment("compute", rec.compute[0] + offset, rec.compute[1] + offset, **where))
            if rec.cause == "data":
                sender = pieces[rec.ref]
                segments.append(Segment("latency", sender.send[1] + offset, rec.ready + offset,  # type: ignore[index]
                                        peer=prog.tb_rank[sender.tb], **where))
            include = rec.cause != "fifo"
            r = rec.ref if rec.cause != "start" else -1
    segments.append(Segment("launch", 0.0, offset))
    segments.sort(key=lambda s: (s.start, s.end))
    return CriticalPath(segments)
