"""The verifier's fast representations against plain per-slot models.

The symbolic run keeps values as runs of slots, memory as segments of slots with the
same history, rank-local order as bitsets and postconditions as runs; each must answer
exactly what the one-value-per-slot definitions (the verifier's model, docs/ir.md
section 5) answer.
"""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arborcc.verify.memory import RankMemory
from arborcc.verify.postconditions import expected_runs
from arborcc.verify.races import HappensBefore
from arborcc.verify.values import (
    Mixed,
    add,
    add_runs,
    first_uninitialized,
    fit_runs,
    merge_runs,
    run_values,
)


def slots(runs):
    out = []
    for length, v in runs:
        vals = run_values(length, v)
        assert len(vals) == length
        out.extend(vals)
    return out


def random_runs(rng, total):
    """A run list of ``total`` slots mixing uninitialized, chunk and explicit runs."""
    runs = []
    while total:
        n = rng.randint(1, min(total, 4))
        kind = rng.randrange(4)
        if kind == 0:
            runs.append((n, None))
        elif kind == 1:
            runs.append((n, (rng.randrange(3), rng.choice([1, 2, 3, 4]))))
        else:
            runs.append((n, [rng.choice([None, (rng.randrange(3), rng.choice([1, 2, 4])), Mixed({0: 1, 1: 2}, False),
                                         Mixed({2: 1}, True)]) for _ in range(n)]))
        total -= n
    return runs


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_run_operations_match_slot_by_slot_values(seed):
    rng = random.Random(seed)
    total = rng.randint(1, 12)
    a, b = random_runs(rng, total), random_runs(rng, total)
    assert slots(add_runs(a, b)) == [add(x, y) for x, y in zip(slots(a), slots(b))]
    assert slots(merge_runs(a)) == slots(a)
    values = slots(a)
    assert first_uninitialized(a) == (values.index(None) if None in values else None)
    count = rng.randint(1, 16)
    assert slots(fit_runs(a, count)) == (values + [None] * count)[:count]


class PerSlot:
    """The per-slot model: value, last writer and readers since of every slot."""

    def __init__(self, start, end, gid_tb):
        self.start = start
        self.mem = [None] * (end - start)
        self.last = [-1] * (end - start)
        self.readers = [None] * (end - start)
        self.gid_tb = gid_tb
        self.pairs = []

    def conflict(self, prev, gid, g, addr, prev_writes, writes, received):
        if self.gid_tb[prev] != g:
            self.pairs.append((prev, gid, addr, prev_writes, writes, received))

    def read(self, a, count, gid, g):
        for s in range(a - self.start, a - self.start + count):
            if self.last[s] >= 0:
                self.conflict(self.last[s], gid, g, s + self.start, True, False, False)
            rd = self.readers[s]
            if rd is None:
                self.readers[s] = gid
            elif type(rd) is int:
                tg = self.gid_tb[rd]
                self.readers[s] = gid if tg == g else {tg: rd, g: gid}
            else:
                rd[g] = gid
        return self.mem[a - self.start:a - self.start + count]

    def write(self, a, values, gid, g, received):
        for j, s in enumerate(range(a - self.start, a - self.start + len(values))):
            if self.last[s] >= 0:
                self.conflict(self.last[s], gid, g, s + self.start, True, True, received)
            rd = self.readers[s]
            if type(rd) is int:
                self.conflict(rd, gid, g, s + self.start, False, True, received)
            elif rd is not None:
                for rg in rd.values():
                    self.conflict(rg, gid, g, s + self.start, False, True, received)
            self.readers[s] = None
            self.last[s] = gid
            self.mem[s] = values[j]


class Recorder:
    """A conflict log that keeps every pair it is shown, in order."""

    def __init__(self, gid_tb):
        self.gid_tb = gid_tb
        self.pairs = []

    def check(self, prev, gid, addr, prev_writes, writes, received):
        self.pairs.append((prev, gid, addr, prev_writes, writes, received))


def first_seen(pairs):
    """Each (x, y, received) once, where it was first found: what the race check keeps."""
    seen, out = set(), []
    for p in pairs:
        key = (p[0], p[1], p[5])
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_segments_find_what_slots_find(seed):
    rng = random.Random(seed)
    start, size = rng.randrange(5), rng.randint(1, 20)
    gid_tb = [g % 3 for g in range(400)]  # three thread blocks take turns
    accesses = []
    for gid in range(rng.randint(1, 60)):
        count = rng.randint(1, size)
        a = start + rng.randint(0, size - count)
        accesses.append((gid, a, count, rng.random() < 0.5, random_runs(rng, count), rng.random() < 0.5))
    # cut as initial_memory does: at the ends of the memory, of the data and of every access
    first = start + rng.randint(0, size - 1)
    cuts = sorted({start, start + size, first} | {a for _, a, _, _, _, _ in accesses}
                  | {a + n for _, a, n, _, _, _ in accesses})
    mem = RankMemory(cuts, first, start + size, 1)
    ref = PerSlot(start, start + size, gid_tb)
    ref.mem[first - start:] = slots([(start + size - first, (0, 1))])
    conflicts = Recorder(gid_tb)
    for gid, a, count, reads, runs, received in accesses:
        g = gid_tb[gid]
        if reads:
            assert slots(mem.read(a, count, gid, g, conflicts)) == ref.read(a, count, gid, g)
        else:
            mem.write(a, runs, count, gid, g, received, conflicts)
            ref.write(a, slots(runs), gid, g, received)
        assert first_seen(conflicts.pairs) == first_seen(ref.pairs)
    lo = start + rng.randint(0, size - 1)  # pieces of any range, cut or not
    hi = rng.randint(lo + 1, start + size)
    got_values, got_writers = [], []
    for at, length, v, w in mem.pieces(lo, hi):
        assert at == lo + len(got_values)
        got_values.extend(run_values(length, v))
        got_writers.extend([w] * length)
    assert got_values == ref.mem[lo - start:hi - start] and got_writers == ref.last[lo - start:hi - start]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_known_steps_are_the_dependency_paths(seed):
    """known/ordered_locally against a search over program order and dependencies."""
    rng = random.Random(seed)
    ntb = rng.randint(2, 5)
    lengths = [rng.randint(1, 6) for _ in range(ntb)]
    tb_base = [0]
    for n in lengths:
        tb_base.append(tb_base[-1] + n)
    hb = HappensBefore(tb_base, [0] * ntb)
    deps = {}
    done = [0] * ntb  # steps run so far per thread block; a step only waits for a finished one
    while any(done[g] < lengths[g] for g in range(ntb)):
        g = rng.choice([t for t in range(ntb) if done[t] < lengths[t]])
        i = done[g]
        targets = [(t, k) for t in range(ntb) if t != g for k in range(done[t])]
        if targets and rng.random() < 0.6:
            deps[(g, i)] = rng.choice(targets)
            hb.on_dependency(g, i, *deps[(g, i)])
        done[g] += 1

    def before(g, i):
        """Every step with a path to step i of tb g."""
        out, todo = set(), [(g, i)]
        while todo:
            t, s = todo.pop()
            preds = ([(t, s - 1)] if s else []) + ([deps[(t, s)]] if (t, s) in deps else [])
            for p in preds:
                if p not in out:
                    out.add(p)
                    todo.append(p)
        return out

    for b in range(ntb):
        for j in range(lengths[b]):
            earlier = before(b, j)
            for a in range(ntb):
                for i in range(lengths[a]):
                    assert hb.ordered_locally(tb_base[a] + i, tb_base[b] + j) == ((a, i) in earlier)


def table(coll, n, k, r, root, x):
    """docs/ir.md section 2, output chunk x of rank r: (input chunk, rank bitmask)."""
    b = k // n
    everyone = (1 << n) - 1
    return {
        "allreduce": (x, everyone), "reduce": (x, everyone), "allgather": (x % b, 1 << (x // b)),
        "reducescatter": (r * b + x, everyone), "alltoall": (r * b + x % b, 1 << (x // b)),
        "broadcast": (x, 1 << root), "gather": (x % k, 1 << (x // k)), "scatter": (r * k + x, 1 << root),
    }[coll]


@pytest.mark.parametrize("coll", ["allreduce", "reduce", "allgather", "reducescatter", "alltoall", "broadcast",
                                  "gather", "scatter"])
def test_expected_runs_are_the_postcondition_table(coll):
    for n in range(1, 5):
        for k in (n, 2 * n, 3 * n):
            for r in range(n):
                root = n - 1
                full = {"allgather": k, "reducescatter": k // n, "gather": n * k}.get(coll, k)
                for size in range(full + 1):
                    got = []
                    for first, length, chunk, mask in expected_runs(coll, n, k, r, root, size):
                        assert first == len(got)
                        got.extend((chunk + j, mask) for j in range(length))
                    assert got == [table(coll, n, k, r, root, x) for x in range(size)]
