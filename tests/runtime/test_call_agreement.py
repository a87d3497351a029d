"""Calls that disagree fail on every rank, naming the rank and the field: the collective,
the element type, the operator, the count (4 KB, 4 MB and 64 MB all-reduces), the root,
in place or not, on every path the data plane has (the staged all-reduce and
reduce-scatter, interpreted programs with one thread or a thread per thread block,
collectives on shared arrays, the direct built-ins, avg), on 2 and 3 ranks.

Each world size runs every case once, in the same forked ranks (a fresh communicator per
case, the ranks' hard timeout bounding the whole); rank 1 is the one whose call differs.
A rank that finishes its call without reading from the rank that differs (a broadcast's
root) fails at its next call: each case makes one more, matching call."""

from __future__ import annotations

import numpy as np
import pytest
from support.segments import leftovers, segments

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
    "count 4 KB": ({}, _allreduce(KB), _allreduce(KB // 4), ("elements", "256", "1024")),
    "count 4 MB": ({}, _allreduce(MB), _allreduce(MB // 4), ("elements", "262144", "1048576")),
    "count 64 MB": ({}, _allreduce(16 * MB), _allreduce(4 * MB), ("elements", "4194304", "16777216")),
    "count, a thread per thread block": ({"workers": 0}, _allreduce(MB), _allreduce(MB // 4),
                                         ("elements", "262144", "1048576")),
    "count, staged reduce-scatter": ({}, _reduce_scatter(KB), _reduce_scatter(KB // 2), ("elements", "512", "1024")),
    "count, built-in all-gather": ({"staged_bytes": 0}, _allgather(KB), _allgather(KB // 2),
                                   ("elements", "512", "1024")),
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
def outcomes():
    """world size -> case -> every rank's (failed call, message)."""
    before = segments()
    made = {}
    for world in (2, 3):
        ranks = run_ranks(_run_cases, world, (list(CASES),), timeout=240)
        made[world] = {name: [ranks[r][i] for r in range(world)] for i, name in enumerate(CASES)}
    assert leftovers(before) == set(), "an arborcc shared-memory segment was left in /dev/shm"
    return made


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
