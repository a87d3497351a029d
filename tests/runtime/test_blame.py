"""A rank that stops (SIGSTOP) is named by every rank that waits for it, directly or
through others, as stopped: never a healthy rank, never a thread block of the waiting
rank; so is a rank that blocks outside its calls. Rank 2 of 3 stops itself after its second call; ranks 0 and 1 make a third and
report its error; the parent then kills rank 2. Six repetitions, run at once (each its own
job of 3 ranks: most of a repetition is the wait for the 2 s timeout), over the paths a call
can take (the staged one-shot all-reduce, the staged owner all-reduce, an interpreted
all-reduce with a thread per thread block, an interpreted and a staged all-gather,
shared arrays),
since a wrong name came in about one run in four."""

from __future__ import annotations

import multiprocessing
import os
import re
import signal

import numpy as np
import pytest
from support.segments import leftovers, segments

from arborcc.runtime.launch import free_port_pair, rank_env

HARD_TIMEOUT = 60

def _shared_allgather(comm):
    shared = comm.shared_array(1024, "float32")
    return lambda comm: comm.allgather(shared, np.empty(3072, np.float32))


#: repetition -> (options, a function of the communicator that returns the call)
CALLS = [
    ({}, lambda comm: lambda comm: comm.allreduce(np.ones(1024, np.float32))),  # 4 KB: the staged one-shot
    ({}, lambda comm: lambda comm: comm.allreduce(np.ones(1 << 16, np.float32))),  # 256 KB: the staged owner
    ({"workers": 0}, lambda comm: lambda comm: comm.allreduce(np.ones(1 << 20, np.float32))),
    ({"staged_bytes": 0}, lambda comm: lambda comm: comm.allgather(np.ones(1024, np.float32),
                                                                   np.empty(3072, np.float32))),
    ({}, lambda comm: lambda comm: comm.allgather(np.ones(256, np.float32), np.empty(768, np.float32))),  # staged
    ({}, _shared_allgather),
]


def _rank(rank: int, port: int, which: int, conn, stop: bool = True) -> None:
    os.environ.update(rank_env(rank, 3, port, {}))
    from arborcc.runtime import Communicator, CommunicationError

    options, make_call = CALLS[which]
    comm = Communicator.from_env(timeout=2, **options)
    call = make_call(comm)
    for _ in range(2):
        call(comm)
    if rank == 2:
        conn.send("stopping")
        if stop:
            os.kill(os.getpid(), signal.SIGSTOP)
        else:  # blocked outside the data plane until the parent kills it
            import threading

            threading.Event().wait()
        return
    try:
        call(comm)
        conn.send("no error")
    except CommunicationError as e:
        conn.send(str(e))


def _distinct_port_pairs(n: int) -> list[int]:
    """``n`` free port pairs, no two sharing a port."""
    ports: list[int] = []
    while len(ports) < n:
        port = free_port_pair()
        if all(abs(port - p) > 1 for p in ports):
            ports.append(port)
    return ports


def _start(which: int, port: int, stop: bool):
    ctx = multiprocessing.get_context("fork")
    pipes = [ctx.Pipe(duplex=False) for _ in range(3)]
    procs = [ctx.Process(target=_rank, args=(r, port, which, pipes[r][1], stop), daemon=True) for r in range(3)]
    for p in procs:
        p.start()
    return procs, [receiving for receiving, _ in pipes]


def _stop_rank_2_in(repetitions: list[int], stop: bool = True) -> list[list[str]]:
    """The repetitions run at once (each its own job of 3 ranks, on its own ports: most of
    a repetition is the wait for the 2 s timeout); per repetition, what each rank said."""
    jobs = [_start(which, port, stop) for which, port in zip(repetitions, _distinct_port_pairs(len(repetitions)))]
    try:
        said = []
        for _, receiving in jobs:
            said.append([])
            for r in range(3):
                assert receiving[r].poll(HARD_TIMEOUT), f"rank {r} said nothing within {HARD_TIMEOUT} s"
                said[-1].append(receiving[r].recv())
        return said
    finally:
        for procs, _ in jobs:
            for p in procs:
                if p.is_alive():
                    p.kill()  # SIGKILL ends a stopped process too
                p.join(10)


@pytest.mark.timeout(2 * HARD_TIMEOUT)
def test_a_stopped_rank_is_named_by_every_rank_that_waits_for_it():
    before = segments()
    for which, said in enumerate(_stop_rank_2_in(list(range(len(CALLS))))):
        assert said[2] == "stopping"
        for rank in (0, 1):
            assert re.search(r"waiting for rank 2 \(rank 2 made no progress for [\d.]+ s; it is alive, process \d+, "
                             r"but not running: stopped\?", said[rank]), (which, rank, said[rank])
    assert leftovers(before) == set(), "an arborcc shared-memory segment was left in /dev/shm"


@pytest.mark.timeout(2 * HARD_TIMEOUT)
def test_a_rank_blocked_outside_its_calls_is_named_by_every_rank_that_waits_for_it():
    before = segments()
    [said] = _stop_rank_2_in([0], stop=False)
    for rank in (0, 1):
        assert re.search(r"waiting for rank 2 \(rank 2 made no progress for [\d.]+ s; it is alive, process \d+, "
                         r"sleeping outside its collective calls", said[rank]), (rank, said[rank])
    assert leftovers(before) == set(), "an arborcc shared-memory segment was left in /dev/shm"
