"""Calls that disagree fail on every rank, naming the rank and the field: the collective,
the element type, the operator, the count (4 KB, 1 MB, 4 MB and 64 MB all-reduces), the root,
in place or not, on every path the data plane has (the staged one-shot and owner
all-reduce, the staged reduce-scatter and all-gather, interpreted programs with one thread or a thread per thread block,
collectives on shared arrays, the direct built-ins, avg), on 2 and 3 ranks.

Each world size runs every case once, in the same forked ranks (a fresh communicator per
case, the ranks' hard timeout bounding the whole); rank 1 is the one whose call differs.
A rank that finishes its call without reading from the rank that differs (a broadcast's
root) fails at its next call: each case makes one more, matching call."""

from __future__ import annotations

import numpy as np
import pytest
from support.segments import leftovers, segments
from support.shared_work import once

from arborcc.runtime.launch import run_ranks

KB, MB = 1024, 1024 * 1024


def _allreduce(count: int, dtype: str = "float32", op: str = "sum", inplace: bool = True):
    def call(comm):
        x = np.ones(count, dtype)
        comm.allreduce(x, None if inplace else np.empty_like(x), op=op)
    return call


def _allgather(count: int):
    def call(comm):
        comm.allgather(np.ones(count, np.float32), np.empty(count * comm.world_size, np.float32))
    return call


def _broadcast(count: int, root: int):
    def call(comm):
        comm.broadcast(np.ones(count, np.float32), root=root)
    return call


def _reduce_scatter(count: int):
    def call(comm):
        comm.reduce_scatter(np.ones(count * comm.world_size, np.float32), np.empty(count, np.float32))
    return call


def _shared_allgather(count: int):
    def call(comm):
        shared = comm.shared_array(4096, "float32")  # the same array on every rank
        comm.allgather(shared[:count], np.empty(count * comm.world_size, np.float32))
    return call


def _shared_broadcast(count: int):
    def call(comm):
        shared = comm.shared_array(4096, "float32")
        comm.broadcast(shared[:count], np.empty(count, np.float32), root=0)
    return call


#: case -> (options, every rank's call, rank 1's call, what every rank's error must name)
CASES = {
    "collective": ({}, _allreduce(KB), _allgather(KB // 4), ("allgather", "allreduce")),
    "dtype": ({}, _allreduce(KB), _allreduce(KB, "int32"), ("float32", "int32")),
    "op": ({}, _allreduce(KB), _allreduce(KB, op="max"), ("max", "sum")),
    "avg": ({}, _allreduce(KB), _allreduce(KB, op="avg"), ("avg", "sum")),
    "count 4 KB": ({}, _allreduce(KB), _allreduce(KB // 4), ("elements", "256", "1024")),  # the staged one-shot
    "count 4 KB, interpreted one-shot": ({"staged_bytes": 0}, _allreduce(KB), _allreduce(KB // 4),
                                         ("elements", "256", "1024")),
    "op, staged one-shot out of place": ({}, _allreduce(KB, inplace=False), _allreduce(KB, op="max", inplace=False),
                                         ("max", "sum")),
    "count 1 MB, staged owner": ({}, _allreduce(MB // 4), _allreduce(MB // 8), ("elements", "131072", "262144")),
    "count 4 MB": ({}, _allreduce(MB), _allreduce(MB // 4), ("elements", "262144", "1048576")),
    "count 64 MB": ({}, _allreduce(16 * MB), _allreduce(4 * MB), ("elements", "4194304", "16777216")),
    "count, a thread per thread block": ({"workers": 0}, _allreduce(MB), _allreduce(MB // 4),
                                         ("elements", "262144", "1048576")),
    "count, staged reduce-scatter": ({}, _reduce_scatter(KB), _reduce_scatter(KB // 2), ("elements", "512", "1024")),
    "count, built-in all-gather": ({"staged_bytes": 0}, _allgather(KB), _allgather(KB // 2),
                                   ("elements", "512", "1024")),
    "count, staged all-gather": ({}, _allgather(KB // 8), _allgather(KB // 16), ("elements", "64", "128")),
    "root": ({}, _broadcast(KB, 0), _broadcast(KB, 1), ("root 1", "root 0")),
    "root, large messages": ({}, _broadcast(MB, 0), _broadcast(MB, 1), ("root 1", "root 0")),
    "in place": ({}, _allreduce(MB), _allreduce(MB, inplace=False), ("out of place", "in place")),
    "count on shared arrays": ({}, _shared_allgather(1024), _shared_allgather(512), ("elements", "512", "1024")),
    "collective on shared arrays": ({}, _shared_allgather(1024), _shared_broadcast(1024),
                                    ("broadcast", "allgather")),
}


def _run_cases(names: list[str]) -> list[tuple[int, str]]:
    """This rank's (call that failed: 1 the mismatched one, 2 the next; 0 none, message) per case."""
    import os

    from arborcc.runtime import Communicator, CommunicationError

    rank = int(os.environ["RANK"])
    said = []
    for name in names:
        options, everyone, rank_1, _ = CASES[name]
        comm = Communicator.from_env(timeout=20, **options)
        failed = (0, "no error")
        for k, call in enumerate((rank_1 if rank == 1 else everyone, _allreduce(1)), start=1):
            try:
                call(comm)
            except CommunicationError as e:
                failed = (k, str(e))
                break
        comm.close()
        said.append(failed)
    return said


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    """world size -> case -> every rank's (failed call, message); run once in the session,
    whichever xdist worker the tests go to."""
    def run() -> dict:
        before = segments()
        made = {}
        for world in (2, 3):
            ranks = run_ranks(_run_cases, world, (list(CASES),), timeout=240)
            made[world] = {name: [ranks[r][i] for r in range(world)] for i, name in enumerate(CASES)}
        assert leftovers(before) == set(), "an arborcc shared-memory segment was left in /dev/shm"
        return made

    return once(tmp_path_factory, "runtime-call-agreement", run)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("case", list(CASES))
def test_every_rank_names_the_rank_and_the_field_that_differ(outcomes, world, case):
    fields = CASES[case][3]
    for rank, (call, message) in enumerate(outcomes[world][case]):
        assert call in (1, 2), f"rank {rank} raised nothing: {message}"
        mismatch = message.partition("call mismatch: ")[2]
        assert "rank 1 " in mismatch, (rank, message)  # the rank whose call differs (and the one that found it)
        assert all(f in mismatch for f in fields), (rank, message)
        assert "timed out" not in message, (rank, message)


@pytest.mark.parametrize("world", [2, 3])
def test_the_ranks_that_read_from_the_differing_rank_fail_in_that_call(outcomes, world):
    # in every case but the broadcast's (whose root only sends, and whose other ranks read
    # only from their root) every rank fails in the mismatched call itself
    for case, said in outcomes[world].items():
        for rank, (call, message) in enumerate(said):
            if case.startswith("root"):
                continue
            assert call == 1, (case, rank, message)


# -- random calls: the same call gives the right result, any field that differs a mismatch --

COLLECTIVES = ("allreduce", "allgather", "reducescatter", "broadcast", "reduce")


def _random_call(comm, spec: tuple) -> bool:
    """Make the call ``spec`` (collective, dtype, op, count, root) with input rank + 1;
    whether this rank's result is right."""
    collective, dtype, op, count, root = spec
    n, rank = comm.world_size, comm.rank
    x = np.full(count * (n if collective == "reducescatter" else 1), rank + 1, dtype)
    reduced = n * (n + 1) // 2 if op == "sum" else n
    if collective == "allreduce":
        comm.allreduce(x, op=op)
        return bool((x == reduced).all())
    if collective == "allgather":
        out = np.zeros(count * n, dtype)
        comm.allgather(x, out)
        return bool((out == np.repeat(np.arange(1, n + 1), count).astype(dtype)).all())
    if collective == "reducescatter":
        out = np.zeros(count, dtype)
        comm.reduce_scatter(x, out, op=op)
        return bool((out == reduced).all())
    if collective == "broadcast":
        comm.broadcast(x, root=root)
        return bool((x == root + 1).all())
    out = np.zeros(count, dtype)
    comm.reduce(x, out, root=root, op=op)
    return rank != root or bool((out == reduced).all())


def _run_random(pairs: list[tuple[tuple, tuple]]) -> list[str]:
    import os

    from arborcc.runtime import Communicator, CommunicationError

    rank = int(os.environ["RANK"])
    said = []
    for everyone, rank_1 in pairs:
        comm = Communicator.from_env(timeout=20)
        outcome = "no error"
        try:
            right = _random_call(comm, rank_1 if rank == 1 else everyone)
            comm.allreduce(np.ones(1, np.float32))  # a rank that only sent fails here at the latest
            outcome = "right" if right else "wrong"
        except CommunicationError as e:
            outcome = str(e)
        comm.close()
        said.append(outcome)
    return said




@pytest.mark.timeout(300)
@pytest.mark.parametrize("world", [2, 3])
def test_random_calls_agree_or_fail_on_every_rank_naming_the_field(world):
    from hypothesis import given, settings, strategies as st

    values = {0: st.sampled_from(COLLECTIVES), 1: st.sampled_from(("float32", "float64", "int32")),
              2: st.sampled_from(("sum", "max")), 3: st.sampled_from((1, 7, 256, 1024, 70_000, 300_000)),
              4: st.integers(0, world - 1)}
    names = {0: ("calls",), 1: ("float32", "float64", "int32"), 2: ("reduces with",), 3: ("elements",),
             4: ("root",)}

    @st.composite
    def pairs(draw):
        spec = tuple(draw(values[f]) for f in range(5))
        # the fields the call has: an all-gather has no operator, only rooted calls a root
        fields = [0, 1, 3] + ([2] if spec[0] in ("allreduce", "reducescatter", "reduce") else []) \
            + ([4] if spec[0] in ("broadcast", "reduce") else [])
        field = draw(st.sampled_from([None] + fields))
        if field is None:
            return spec, spec, None
        other = list(spec)
        while tuple(other) == spec:
            other[field] = draw(values[field])
        return spec, tuple(other), field

    # a few lists of calls, each run in one set of forked ranks (the first list hypothesis
    # draws is its simplest: the same small all-reduce throughout)
    @settings(max_examples=4, deadline=None, database=None, derandomize=True)
    @given(st.lists(pairs(), min_size=10, max_size=10))
    def check(cases):
        before = segments()
        said = run_ranks(_run_random, world, ([(a, b) for a, b, _ in cases],), timeout=240)
        assert leftovers(before) == set()
        for i, (a, b, field) in enumerate(cases):
            for rank in range(world):
                message = said[rank][i]
                if field is None:
                    assert message == "right", (a, rank, message)
                else:
                    mismatch = message.partition("call mismatch: ")[2]
                    assert mismatch and any(w in mismatch for w in names[field]), (a, b, rank, message)

    check()


@pytest.mark.timeout(120)
def test_a_reduce_whose_other_ranks_only_send_is_cut_into_the_same_slices():
    # 1.2 MB out of place: the root reduces, the other ranks' programs only copy; they used
    # to send each chunk whole while the root expected slices (found by the random calls)
    said = run_ranks(_run_random, 2, ([(("reduce", "float32", "sum", 300_000, 0),) * 2],), timeout=60)
    assert said == [["right"], ["right"]]
