"""Larger programs: structure and correctness at 64 ranks (timing lives in benchmarks/)."""

from arborcc.library import ring_allreduce
from arborcc.verify import check_algorithm
from support.ir_checks import dependency_count, op_counts
from support.execution import assert_executes


def test_64_rank_ring_allreduce():
    n = 64
    algo, prog = ring_allreduce(n)
    stats = prog.compile_stats
    assert stats.operations == 2 * n * (n - 1)
    # one thread block per rank; per chunk: send, n-2 rrs, rrcs, n-2 rcs, recv
    assert stats.thread_blocks == n and stats.steps == n * (2 * n - 1)
    assert op_counts(algo) == {"s": n, "rrs": n * (n - 2), "rrcs": n, "rcs": n * (n - 2), "r": n}
    assert dependency_count(algo) == 0 and not stats.reordered
    check_algorithm(algo, "legacy")  # 127 steps per thread block: above the executor's 64
    assert_executes(algo, elems=1)


def test_64_rank_ring_fits_the_executor_with_channels():
    algo, _ = ring_allreduce(64, channels=2, instances=2)
    check_algorithm(algo, "executor")
