"""Explaining a deadlock: who waits on whom when no thread block can move.

Each blocked thread block waits on exactly one other: the sender of an empty
connection, the receiver of a full one, or the thread block whose step it depends
on. Following those edges from a blocked thread block ends either in a cycle (a true
deadlock cycle, reported with its members) or at a thread block that will never act
(finished, or absent: a connection without a sending or receiving thread block).
"""

from __future__ import annotations

from dataclasses import dataclass

from arborcc.ir.report import Violation


@dataclass
class Wait:
    """Why a thread block is blocked: ``kind`` is "recv", "send" or "dep"."""

    kind: str
    peer_rank: int = -1
    channel: int = 0
    on: int | None = None  #: global index of the thread block waited on (None: nobody)
    dep_tb: int = -1
    dep_step: int = -1
    slots: int = 0


@dataclass
class TbName:
    rank: int
    tb: int
    step: int
    op: str


def _what(w: Wait) -> str:
    if w.kind == "recv":
        return f"waits to receive from rank {w.peer_rank} on channel {w.channel} (connection empty)"
    if w.kind == "send":
        return f"waits to send to rank {w.peer_rank} on channel {w.channel} (all {w.slots} slots full)"
    return f"waits for step {w.dep_step} of tb {w.dep_tb} to signal"


def explain_deadlock(blocked: dict[int, Wait], names: dict[int, TbName], finished: set[int],
                     limit: int = 5) -> list[Violation]:
    """Violations describing the wait-for cycles (and dead ends) among ``blocked``."""
    out: list[Violation] = []
    state: dict[int, int] = {}  # 1 = on current walk, 2 = done
    for start in sorted(blocked):
        if start in state:
            continue
        path: list[int] = []
        g: int | None = start
        while g is not None and g in blocked and g not in state:
            state[g] = 1
            path.append(g)
            g = blocked[g].on
        if g is not None and state.get(g) == 1:  # a cycle: from g to the end of the path
            cycle = path[path.index(g):]
            out.append(_cycle_violation(cycle, blocked, names))
        elif g is None or g not in blocked:  # dead end: the last one waits on nobody able to act
            last = path[-1]
            w = blocked[last]
            nm = names[last]
            if w.on is None:
                why = "but no thread block is at the other end"
            elif w.on in finished:
                other = names[w.on]
                why = f"but rank {other.rank} tb {other.tb} has already finished"
            else:
                other = names[w.on]
                why = f"but rank {other.rank} tb {other.tb} never gets there"
            out.append(Violation(nm.rank, nm.tb, nm.step, "deadlock",
                                 f"deadlock: '{nm.op}' {_what(w)}, {why}"))
        for p in path:
            state[p] = 2
        if len(out) >= limit:
            break
    return out


def _cycle_violation(cycle: list[int], blocked: dict[int, Wait], names: dict[int, TbName]) -> Violation:
    first = names[cycle[0]]
    shown = cycle[:6]
    parts = []
    for g in shown:
        nm = names[g]
        parts.append(f"rank {nm.rank} tb {nm.tb} step {nm.step} ('{nm.op}') {_what(blocked[g])}")
    tail = f" -> ... ({len(cycle)} thread blocks in the cycle)" if len(cycle) > len(shown) else " -> back to the first"
    return Violation(first.rank, first.tb, first.step, "deadlock",
                     "deadlock cycle: " + " -> ".join(parts) + tail)
