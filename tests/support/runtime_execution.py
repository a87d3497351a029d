"""Running algorithms on the shared-memory runtime and comparing with numpy: every case of
one rank count in ONE launch (:func:`arborcc.runtime.launch.run_ranks`), each rank looping
over the cases; the parent compares every rank's buffers with the expected values and
reports per case.

The inputs are those of the reference executor (:func:`arborcc.ir.reference.make_inputs`,
``elems`` elements per chunk), so a call has ``P * elems`` elements per rank block
(``P``: the algorithm's chunks per block) and chunk ``c`` of a call buffer is elements
``c * elems`` onwards: the call buffers are the reference executor's, flattened. The
expected result is the collective's numpy reference (:func:`arborcc.ir.reference.reference`);
for a ``custom`` collective, which has none, the reference executor's send and receive
buffers after the same call.

Timeouts: a rank waits ``wait`` seconds at most for a peer's progress (a hung case fails
by itself, named, and the launch goes on), the whole launch ``timeout`` seconds at most;
:func:`launch_timeouts` sizes both from the steps and the ranks per CPU. After a launch,
nothing of it may be left in /dev/shm (:func:`left_in_shared_memory`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from arborcc.ir.aliasing import Mode, layouts
from arborcc.ir.model import Algorithm, Buffer
from arborcc.ir.reference import execute, make_inputs, reference

#: the call buffers the runtime addresses (the IR's scratch is the runtime's own)
CALL_BUFFERS = (Buffer.INPUT, Buffer.OUTPUT)


@dataclass(frozen=True)
class RuntimeCase:
    """One call to run: ``algo`` as a call in ``mode``, named ``label`` in failures."""

    label: str
    algo: Algorithm
    mode: Mode


def case_id(case: RuntimeCase) -> str:
    return f"{case.label} ({case.mode.label})"


def call_buffers(algo: Algorithm, mode: Mode, rank: int, inputs: list[np.ndarray], elems: int) -> dict:
    """Rank ``rank``'s call buffers for a call in ``mode`` ({Buffer: flat array}; in place
    one of them is empty), NaN where the call passes no data, the rank's data in place."""
    lay = layouts(algo, mode)[rank]
    bufs = {b: np.full(lay.size(b) * elems, np.nan) for b in CALL_BUFFERS}
    where, first, count = lay.data
    if lay.data_defined:
        bufs[where][first * elems:(first + count) * elems] = inputs[rank].ravel()
    return bufs


def run_call(comm, algo: Algorithm, mode: Mode, inputs: list[np.ndarray], elems: int) -> dict:
    """Run the call on this rank of ``comm``; returns its call buffers afterwards."""
    from arborcc.runtime.lowering import chunks_per_block

    lay = layouts(algo, mode)[comm.rank]
    bufs = call_buffers(algo, mode, comm.rank, inputs, elems)
    count = chunks_per_block(algo) * elems
    if mode is Mode.OUTOFPLACE or algo.collective == "custom":
        comm.run_algorithm(algo, bufs[Buffer.INPUT], bufs[Buffer.OUTPUT], count=count)
        return bufs
    # in place: one buffer, the send and receive buffers where the collective places them
    whole = bufs[lay.placement[Buffer.INPUT][0]]
    send_at, recv_at = lay.placement[Buffer.INPUT][1], lay.placement[Buffer.OUTPUT][1]
    send = whole[send_at * elems:(send_at + lay.sent_chunks) * elems]
    recv = whole[recv_at * elems:(recv_at + lay.received_chunks) * elems]
    comm.run_algorithm(algo, send, recv, count=count)
    return bufs


def run_cases_on_rank(cases: list[RuntimeCase], elems: int, seed: int, wait: float) -> tuple[int, dict]:
    """What one rank does: every case in turn, waiting ``wait`` seconds at most for a
    peer's progress; returns its pid (rank 0's names the shared-memory segment) and per
    case id, (True, call buffers) or (False, the error)."""
    from arborcc.runtime.communicator import Communicator

    out = {}
    comm = Communicator.from_env(timeout=wait)
    try:
        for case in cases:
            try:
                inputs = make_inputs(case.algo, elems, seed)
                out[case_id(case)] = (True, run_call(comm, case.algo, case.mode, inputs, elems))
            except Exception as e:  # reported per case by the parent
                out[case_id(case)] = (False, f"{type(e).__name__}: {e}")
    finally:
        comm.close()
    return os.getpid(), out


def expected_buffers(algo: Algorithm, mode: Mode, inputs: list[np.ndarray], elems: int) -> list[dict]:
    """Per rank, {Buffer: (first element, expected values)} of the call buffers that the
    call defines: the collective's result region (nothing where it is open), or for a
    ``custom`` collective the whole send and receive buffers as the reference executor
    leaves them."""
    if algo.collective == "custom":
        after = execute(algo, inputs, mode=mode)
        return [{b: (0, after[r][b].ravel()) for b in CALL_BUFFERS} for r in range(algo.num_ranks)]
    want = reference(algo, inputs)
    out = []
    for lay, exp in zip(layouts(algo, mode), want):
        where, first, _ = lay.result
        out.append({} if exp is None else {where: (first * elems, exp.ravel())})
    return out


def compare_results(case: RuntimeCase, per_rank: list[tuple[bool, object]], elems: int, seed: int) -> str:
    """What is wrong with the ranks' results of ``case`` (per rank, :func:`run_cases_on_rank`'s
    (ok, buffers or error)): "" where every rank's buffers equal the expected values."""
    want = expected_buffers(case.algo, case.mode, make_inputs(case.algo, elems, seed), elems)
    problems = []
    for rank, (ok, got) in enumerate(per_rank):
        if not ok:
            problems.append(f"rank {rank}: {got}")
            continue
        for buf, (first, values) in want[rank].items():
            have = got[buf][first:first + values.size]
            if have.shape != values.shape:
                problems.append(f"rank {rank}: {buf.value} has {have.size} elements from {first}, "
                                f"expected {values.size}")
            elif not np.allclose(have, values, equal_nan=True):
                bad = np.flatnonzero(~np.isclose(have, values, equal_nan=True)) + first
                problems.append(f"rank {rank}: {buf.value} elements {bad[:8].tolist()} differ from numpy")
    return "; ".join(problems[:4])


def case_steps(case: RuntimeCase) -> int:
    """The steps of every rank of ``case``'s algorithm."""
    return sum(len(tb.steps) for program in case.algo.ranks for tb in program.threadblocks)


#: seconds a rank of a launch that has a CPU to itself waits for a peer's progress
#: (:func:`launch_timeouts`); the snapshot set's launches take 0.02-0.06 ms of wall time
#: per step and rank per CPU on 2 CPUs busy with other work, :data:`SECONDS_PER_STEP` is
#: ~10 times that
WAIT_PER_CPU_SHARE = 30.0
SECONDS_PER_STEP = 3e-4


def launch_timeouts(cases: list[RuntimeCase], num_ranks: int) -> tuple[float, float]:
    """(a rank's wait for a peer's progress, the whole launch's hard timeout) for
    ``cases`` on ``num_ranks`` ranks, generous on a loaded machine: with more ranks than
    CPUs the ranks take turns, so both grow with the ranks per CPU; the launch's also
    with the steps, and it outlasts one hung case's wait."""
    from arborcc.runtime.launch import available_cpus

    share = max(1.0, num_ranks / available_cpus())
    wait = WAIT_PER_CPU_SHARE * share
    return wait, 2 * wait + 60.0 + SECONDS_PER_STEP * share * sum(map(case_steps, cases))


def left_in_shared_memory(pid: int) -> list[str]:
    """The shared-memory objects of process ``pid`` still in /dev/shm (its segment and
    shared arrays: ``arborcc-<pid>-...``)."""
    from arborcc.runtime.communicator import SEGMENT_PREFIX

    return sorted(e for e in os.listdir("/dev/shm") if e.startswith(f"{SEGMENT_PREFIX}{pid}-"))


def runtime_failures(cases: list[RuntimeCase], num_ranks: int, elems: int = 4, seed: int = 0,
                     timeout: float | None = None, wait: float | None = None) -> dict[str, str]:
    """Run every case (all of ``num_ranks`` ranks) in one launch, ``timeout`` seconds at
    most, each rank waiting ``wait`` seconds at most for a peer's progress (None:
    :func:`launch_timeouts`'); per case id (:func:`case_id`), what went wrong ("":
    nothing). A launch that leaves its segment in /dev/shm fails."""
    from arborcc.errors import ArborccError
    from arborcc.runtime.launch import run_ranks
    from arborcc.runtime.plan import require_verified

    default_wait, default_timeout = launch_timeouts(cases, num_ranks)
    wait = default_wait if wait is None else wait
    timeout = default_timeout if timeout is None else timeout
    for case in cases:  # verified once here: the forked ranks inherit the verdicts
        try:
            require_verified(case.algo)
        except ArborccError:
            pass  # every rank reports it for its case
    per_rank = run_ranks(run_cases_on_rank, num_ranks, (cases, elems, seed, wait), timeout=timeout)
    left = left_in_shared_memory(per_rank[0][0])  # rank 0 makes the segment
    assert not left, f"the launch left {left} in /dev/shm"
    return {case_id(c): compare_results(c, [results[case_id(c)] for _, results in per_rank], elems, seed)
            for c in cases}
