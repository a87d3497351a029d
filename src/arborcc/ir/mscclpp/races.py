"""Races in a plan's own semantics: a write landing in memory that another thread block
(of any rank) still reads or writes, with nothing ordering the two.

The translation to the IR (:mod:`.translate`) delivers a put at the wait its signal
releases, so the IR verifier cannot see a put that lands while the receiver still reads
the old contents (the slot reuse that the writer's semaphore credits prevent). This
check works on the plan itself: every operation is an event; *happens-before* is program
order within a thread block, the ``n``-th signal on a link before the ``n``-th wait on it,
a semaphore's release before the acquire it satisfies, and a packet write before the
packet read of the same scratch chunk (the flag), and a barrier. Two accesses to one chunk of one rank's
buffer, at least one a write, from different thread blocks and ordered neither way, are
a race. Vector clocks give the order (one column per thread block).

The same order finds the credit a writer did not wait for where no race shows it: a put
into a peer's scratch chunk that a later write overwrites before any read of the chunk
comes between them, while a read after the overwrite shows the chunk is a slot the peer
reads - the first message is lost (``unmatched``). (Where the peer's read and the
overwrite are unordered, that is the race above.)

Approximations, both on the side of reporting less: relaxed signals (``rlxsignal``) order
like signals, and an in-place plan's input and output buffers are not aliased. A
``barrier`` orders every member's operations before it before every member's after it.
"""

from __future__ import annotations

from collections import defaultdict

from arborcc.ir.mscclpp import rules
from arborcc.ir.mscclpp.plan import ExecutionPlan
from arborcc.ir.report import Violation

SIGNALS = ("signal", "rlxsignal", "pws", "pwsf")
WAITS = ("wait", "rlxwait")
#: vector clocks beyond this many entries (events x thread blocks) are not built
MAX_CLOCK_ENTRIES = 50_000_000


def plan_races(plan: ExecutionPlan, source: str, most: int = 10) -> list[Violation]:
    """At most ``most`` races of ``plan`` (empty: none found, or too large to check)."""
    from arborcc.ir.mscclpp.translate import normalize_plan

    original = plan.gpus[0].input_chunks or plan.gpus[0].output_chunks
    plan, places = normalize_plan(plan, source)
    cut = (plan.gpus[0].input_chunks or plan.gpus[0].output_chunks) // original
    columns = {(g.id, tb.id): c for c, (g, tb) in enumerate((g, tb) for g in plan.gpus for tb in g.threadblocks)}
    events = [(g.id, tb.id, o) for g in plan.gpus for tb in g.threadblocks for o in range(len(tb.ops))]
    if len(events) * max(len(columns), 1) > MAX_CLOCK_ENTRIES:
        return []
    index = {e: i for i, e in enumerate(events)}
    edges: dict[int, list[int]] = defaultdict(list)  # event -> events that must come first (besides program order)
    signals: dict[tuple, list[int]] = defaultdict(list)
    waits: dict[tuple, list[int]] = defaultdict(list)
    releases: dict[tuple[int, int], list[int]] = defaultdict(list)
    acquires: dict[tuple[int, int], list[int]] = defaultdict(list)
    packet_writes: dict[tuple[int, int], list[int]] = defaultdict(list)
    packet_reads: list[tuple[int, int, int]] = []  # (event, rank, chunk)
    accesses: dict[tuple[int, str, int], list[tuple[int, bool]]] = defaultdict(list)
    puts: dict[tuple[int, str, int], list[int]] = defaultdict(list)  # peer scratch chunk -> writes into it
    barriers: dict[tuple[int, int, int], list[tuple[int, int]]] = defaultdict(list)  # (rank, id, n) -> (event, op)
    for g in plan.gpus:
        for tb in g.threadblocks:
            seen: dict[int, int] = defaultdict(int)
            for o, op in enumerate(tb.ops):
                e = index[(g.id, tb.id, o)]
                if op.name == "barrier":
                    barriers[(g.id, op.barrier_id, seen[op.barrier_id])].append((e, o))
                    seen[op.barrier_id] += 1
                ctype = op.channel_type or "memory"
                peers = g.channel_peers(ctype) if ctype in ("memory", "port") else []
                for c in op.channel_ids if op.name in SIGNALS + WAITS else ():
                    channel = tb.channels[ctype][c]
                    peer = peers[channel]
                    k = peers[:channel].count(peer)
                    if op.name in SIGNALS:
                        signals[(ctype, g.id, peer, k)].append(e)
                    else:
                        waits[(ctype, peer, g.id, k)].append(e)
                for sem in op.semaphore_ids:
                    (releases if op.name == "sem_release" else acquires)[(g.id, sem)].append(e)
                for refs, writes in ((op.src, False), (op.dst, True)):
                    for n, ref in enumerate(refs):
                        if ref.kind == "S":
                            continue
                        rank, btype = g.id, ref.type
                        if ref.kind == "R":
                            rb = g.remote_buffers[tb.buffer_refs[ctype][ref.ref]]
                            rank, btype = rb.rank, rb.type
                        for j in range(ref.index, ref.index + ref.size):
                            accesses[(rank, btype, j)].append((e, writes))
                            if writes and ref.kind == "R" and btype == "s":
                                puts[(rank, btype, j)].append(e)
                            if plan.protocol == "LL" and btype == "s":
                                if writes and op.name in rules.PACKET_WRITES and n >= rules.PACKET_WRITES[op.name]:
                                    packet_writes[(rank, j)].append(e)
                                if not writes and op.name in rules.PACKET_READS \
                                        and n >= rules.PACKET_READS[op.name]:
                                    packet_reads.append((e, rank, j))
    for link, sent in signals.items():
        for s, w in zip(sent, waits.get(link, [])):
            edges[w].append(s)
    for key, acq in acquires.items():
        init = plan.gpus[key[0]].semaphores[key[1]]
        rel = releases.get(key, [])
        for n, a in enumerate(acq):
            if 0 <= n - init < len(rel):
                edges[a].append(rel[n - init])
    for members in barriers.values():  # a member passes its barrier after every member's operations before it
        for e, _ in members:
            edges[e].extend(f - 1 for f, o in members if f != e and o > 0)
    for e, rank, j in packet_reads:
        edges[e].extend(w for w in packet_writes.get((rank, j), []) if w != e)
    clocks = _vector_clocks(events, columns, edges)
    if clocks is None:
        return []  # a cycle: the plan deadlocks (plan_deadlocks says where)
    found: list[Violation] = []
    for key, written in puts.items():  # a slot overwritten before anything read what was put there
        found.extend(_overwritten(plan, places, events, columns, clocks, key, written, accesses[key]))
        if len(found) >= most:
            return found[:most]
    for (rank, btype, j), acc in accesses.items():
        for x in range(len(acc)):
            ex, wx = acc[x]
            for y in range(x + 1, len(acc)):
                ey, wy = acc[y]
                if not (wx or wy) or events[ex][:2] == events[ey][:2]:
                    continue
                if _before(clocks, events, columns, ex, ey) or _before(clocks, events, columns, ey, ex):
                    continue
                first, second = (ex, ey) if wx else (ey, ex)
                verb = "writes" if (wy if first == ex else wx) else "reads"
                r, t, o = events[first]
                finer = f" (chunks cut {cut}-fold for thread-block groups)" if cut > 1 else ""
                found.append(Violation(r, t, o, "race", f"{_describe(plan, places, events[first])} writes {btype} "
                                                        f"chunk {j}{finer} of rank {rank}, which "
                                                        f"{_describe(plan, places, events[second])} {verb}, and "
                                                        f"neither is ordered before the other (no signal/wait, "
                                                        f"semaphore, barrier or packet path between them)"))
                if len(found) >= most:
                    return found
    return found


def _overwritten(plan, places, events, columns, clocks, key, written, acc) -> list[Violation]:
    """Puts into the scratch chunk ``key`` of a peer that a later write overwrites before any
    read of the chunk comes between them (an operation that reads and writes the chunk
    reads first) - the credit the writer did not wait for - while a later read shows the
    chunk is a slot someone reads (one violation at most per chunk)."""
    def before(a: int, b: int) -> bool:
        return _before(clocks, events, columns, a, b)

    rank, btype, j = key
    reads = [e for e, w in acc if not w]
    writes = [e for e, w in acc if w]
    for first in written:
        later = [w for w in writes if w != first and before(first, w)]
        if not later:
            continue
        nxt = min(later, key=lambda w: sum(before(x, w) for x in later))  # the first overwrite
        consumed = any(before(first, r) and (r == nxt or not before(nxt, r)) for r in reads)
        if consumed or not any(r != nxt and before(nxt, r) for r in reads):
            continue
        r, t, o = events[first]
        return [Violation(r, t, o, "unmatched", f"{_describe(plan, places, events[first])} writes {btype} chunk {j} "
                                               f"of rank {rank}, which {_describe(plan, places, events[nxt])} "
                                               f"overwrites before anything reads it: the message is lost (no "
                                               f"credit - a signal/wait after the peer's read - orders the "
                                               f"overwrite after it)")]
    return []


def _describe(plan: ExecutionPlan, places: dict, event: tuple[int, int, int]) -> str:
    """``gpus[1].threadblocks[0].ops[5] (put)``: where the event's operation is in the file."""
    r, t, o = event
    tb = next(tb for tb in plan.gpus[r].threadblocks if tb.id == t)
    return f"{places.get(event, f'gpus[{r}].threadblocks[{t}].ops[{o}]')} ({tb.ops[o].name})"


def _before(clocks, events, columns, a: int, b: int) -> bool:
    """Whether event ``a`` happens before event ``b``."""
    r, t, o = events[a]
    return clocks[b, columns[(r, t)]] >= o + 1


def _vector_clocks(events, columns, edges):
    """Per event (a numpy array's rows), how many operations of each thread block happen
    before or at it; None when the order has a cycle."""
    import numpy as np

    n, width = len(events), len(columns)
    clocks = np.zeros((n, width), dtype=np.int32)
    preds: list[list[int]] = [[] for _ in range(n)]
    for i, (r, t, o) in enumerate(events):
        if o > 0:
            preds[i].append(i - 1)  # events of a thread block are consecutive, in order
        preds[i].extend(edges.get(i, ()))
    waiting = [len(p) for p in preds]
    succs: list[list[int]] = [[] for _ in range(n)]
    for i, p in enumerate(preds):
        for q in p:
            succs[q].append(i)
    ready = [i for i in range(n) if waiting[i] == 0]
    done = 0
    while ready:
        i = ready.pop()
        done += 1
        for q in preds[i]:
            np.maximum(clocks[i], clocks[q], out=clocks[i])
        r, t, o = events[i]
        clocks[i, columns[(r, t)]] = o + 1
        for s in succs[i]:
            waiting[s] -= 1
            if waiting[s] == 0:
                ready.append(s)
    return clocks if done == n else None
