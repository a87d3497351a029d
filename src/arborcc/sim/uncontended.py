"""The engine's run for programs whose transfers never contend, computed in rounds over
numpy arrays instead of event by event.

When every connection runs at its fixed uncontended rate (no link can be
oversubscribed, :mod:`arborcc.sim.engine`), nothing one transfer does changes another's
speed, and the event-driven run reduces to a longest-path recurrence over the pieces of
work: a piece starts when its thread block finished the previous one, its dependency
(that step of the same iteration) is complete and, if it receives, the matching
transfer has arrived; it then reduces or copies for ``bytes / bandwidth``; if it sends,
it waits for a free FIFO slot (the receive ``depth`` sends back) and drains at the
connection's rate; the data arrives after the connection's latency. These are the
engine's rules with the same floating-point operations in the same order, so the times
are identical, not approximations.

Each round takes, for every thread block at once, the next piece whose predecessors
are all computed, so a run costs a few dozen numpy operations per round, and there are
about as many rounds as pieces in the longest thread block: on a 1024-rank ring of
2 million steps this replaces millions of Python-level events by a few thousand rounds.
Small programs stay with the event engine, which is faster on them.
"""

from __future__ import annotations

import itertools

import numpy as np

from arborcc.sim.program import COPY, RECV, REDUCE, SEND, CompiledAlgorithm

#: below this many steps of work (steps x iterations) the event engine is faster
MIN_STEPS = 20_000


def flat_pieces(prog: CompiledAlgorithm, m: int) -> dict:
    """Every thread block's pieces of one iteration, concatenated: ``flags``, chunk
    counts (``chunks``), whether the piece is a step's ``last`` and its dependency
    (``dep_tb``, ``dep_step``: thread block and step + 1, or -1); per thread block its
    number of steps (``lengths``) and of pieces (``pieces``). Kept on ``prog`` per ``m``."""
    kept = prog.kept.get(("pieces", m))
    if kept is not None:
        return kept
    lengths = np.fromiter(map(len, prog.tb_flags), dtype=np.int64, count=prog.num_tbs)
    total = int(lengths.sum())
    flags = np.fromiter(itertools.chain.from_iterable(prog.tb_flags), dtype=np.int8, count=total)
    counts = np.fromiter(itertools.chain.from_iterable(prog.tb_counts), dtype=np.int32, count=total)
    deps = any(d is not None for d in prog.tb_deps)
    if not total or int(counts.max()) <= m:  # one piece per step
        out = {"lengths": lengths, "pieces": lengths, "flags": flags, "chunks": counts,
               "last": None if not deps else np.ones(total, dtype=bool), "dep_tb": None, "dep_step": None}
        step_of_piece, within = None, None
    else:
        per_step = (counts + m - 1) // m
        step_of_piece = np.repeat(np.arange(total, dtype=np.int32), per_step)
        first = np.cumsum(per_step) - per_step  # the index of each step's first piece
        within = (np.arange(len(step_of_piece)) - np.repeat(first, per_step)).astype(np.int32)
        pieces_before = np.concatenate(([0], np.cumsum(per_step)))  # pieces before each step
        step_bounds = np.concatenate(([0], np.cumsum(lengths)))
        out = {"lengths": lengths, "pieces": pieces_before[step_bounds[1:]] - pieces_before[step_bounds[:-1]],
               "flags": flags[step_of_piece], "chunks": np.minimum(m, counts[step_of_piece] - within * m),
               "last": within == per_step[step_of_piece] - 1, "dep_tb": None, "dep_step": None}
    if deps:
        step_dep_tb = np.full(total, -1, dtype=np.int32)
        step_dep_step = np.zeros(total, dtype=np.int32)
        start = np.cumsum(lengths) - lengths
        for t, tdeps in enumerate(prog.tb_deps):
            if tdeps is None:
                continue
            for p, d in enumerate(tdeps):
                if d is not None:
                    step_dep_tb[start[t] + p] = d[0]
                    step_dep_step[start[t] + p] = d[1] + 1
        if step_of_piece is None:
            out["dep_tb"], out["dep_step"] = step_dep_tb, step_dep_step
        else:  # only a step's first piece waits for its dependency
            firsts = within == 0
            out["dep_tb"] = np.where(firsts, step_dep_tb[step_of_piece], -1)
            out["dep_step"] = np.where(firsts, step_dep_step[step_of_piece], 0)
    prog.kept[("pieces", m)] = out
    return out


def run_uncontended(prog: CompiledAlgorithm, iters: int, tile: float, m: int, depth: int,
                    free_rate: list[float], latency: list[float], inv_reduce: float,
                    inv_copy: float) -> list[float] | None:
    """Every thread block's finish time, as the engine's run would give them (module
    doc); None when the program cannot finish (the engine then finds what waits)."""
    fp = flat_pieces(prog, m)
    n = prog.num_tbs
    nconn = len(prog.conn_keys)
    pieces = fp["pieces"]
    offset = np.cumsum(pieces) - pieces
    flags, chunks, last = fp["flags"], fp["chunks"], fp["last"]
    dep_tb, dep_step = fp["dep_tb"], fp["dep_step"]
    has_deps = dep_tb is not None
    # connections: index nconn is a dummy for thread blocks that do not send / receive
    send_conn = np.array([c if c >= 0 else nconn for c in prog.tb_send], dtype=np.int64)
    recv_conn = np.array([c if c >= 0 else nconn for c in prog.tb_recv], dtype=np.int64)
    drain = np.append(np.asarray(free_rate, dtype=np.float64), 1.0)
    delay = np.append(np.asarray(latency, dtype=np.float64), 0.0)
    sent = np.zeros(nconn + 1, dtype=np.int64)
    consumed = np.zeros(nconn + 1, dtype=np.int64)
    arrival = np.zeros((nconn + 1) * depth)  # per connection a ring of the last depth arrivals
    freed = np.full((nconn + 1) * depth, -np.inf)  # ... and of the last depth receive times
    lengths = fp["lengths"]
    # completion times of every step of the thread blocks others depend on
    if has_deps:
        steps_done = np.zeros(n, dtype=np.int64)
        is_target = np.zeros(n, dtype=bool)
        is_target[dep_tb[dep_tb >= 0]] = True
        sizes = np.where(is_target, lengths * iters, 0)
        step_base = np.cumsum(sizes) - sizes
        step_time = np.zeros(int(sizes.sum()))
    ptr = np.zeros(n, dtype=np.int64)
    it = np.zeros(n, dtype=np.int64)
    finish = np.zeros(n)
    alive = pieces > 0
    it[~alive] = iters
    while True:
        live = np.flatnonzero(alive)
        if not len(live):
            break
        cur = offset[live] + ptr[live]
        f = flags[cur]
        rc, sc = recv_conn[live], send_conn[live]
        recv = (f & RECV) != 0
        send = (f & SEND) != 0
        ok = ~recv | (sent[rc] > consumed[rc])
        ok &= ~send | (sent[sc] - consumed[sc] < depth)
        if has_deps:
            dt = dep_tb[cur]
            waits = dt >= 0
            dtw = dt[waits]
            need = it[live][waits] * lengths[dtw] + dep_step[cur][waits]
            dep_ok = np.ones(len(live), dtype=bool)
            dep_ok[waits] = steps_done[dtw] >= need
            ok &= dep_ok
        if not ok.any():
            return None  # a deadlock: the event engine names who waits
        t = live[ok]
        cur, rc, sc, f, r, s = cur[ok], rc[ok], sc[ok], f[ok], recv[ok], send[ok]
        at = finish[t]
        if has_deps:
            dt = dep_tb[cur]
            waits = dt >= 0
            if waits.any():
                dtw = dt[waits]
                need = it[t][waits] * lengths[dtw] + dep_step[cur][waits]
                at[waits] = np.maximum(at[waits], step_time[step_base[dtw] + need - 1])
        if r.any():
            c = rc[r]
            slot = c * depth + consumed[c] % depth
            got = np.maximum(at[r], arrival[slot])
            at[r] = got
            freed[slot] = got
            consumed[c] += 1
        nbytes = chunks[cur] * tile
        red = (f & REDUCE) != 0
        cpy = ((f & COPY) != 0) & ~red
        if red.any():
            dur = nbytes[red] * inv_reduce
            at[red] = np.where(dur > 0, at[red] + dur, at[red])
        if cpy.any():
            dur = nbytes[cpy] * inv_copy
            at[cpy] = np.where(dur > 0, at[cpy] + dur, at[cpy])
        if s.any():
            c = sc[s]
            slot = c * depth + sent[c] % depth
            end = np.maximum(at[s], freed[slot]) + nbytes[s] / drain[c]
            at[s] = end
            arrival[slot] = end + delay[c]
            sent[c] += 1
        finish[t] = at
        if has_deps:
            done = last[cur]
            td = t[done]
            steps_done[td] += 1
            rec = is_target[td]
            step_time[step_base[td[rec]] + steps_done[td[rec]] - 1] = at[done][rec]
        nxt = ptr[t] + 1
        wrap = nxt == pieces[t]
        nxt[wrap] = 0
        ptr[t] = nxt
        tw = t[wrap]
        it[tw] += 1
        alive[tw[it[tw] == iters]] = False
    return finish.tolist()
