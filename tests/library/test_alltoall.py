"""The two-step all-to-all has one home, the library: both of its trace orders move the
same chunks and run right, and the synthesizer's ``two-step`` strategy is the library's
trace in the synthesizer's order."""

from __future__ import annotations

import pytest

from arborcc.ir.model import Buffer
from arborcc.ir.msccl_xml import write_msccl_xml
from arborcc.lang import AllToAll, Program
from arborcc.library.alltoall import trace_twostep_alltoall
from arborcc.library.spec import built
from arborcc.verify import check_algorithm
from support.execution import assert_executes

SHAPES = [(1, 3), (2, 1), (2, 2), (2, 3), (3, 2), (3, 3)]


def traced(nodes: int, gpus: int, transfers_last: bool, fusion: bool = True) -> Program:
    with Program("twostep", AllToAll(nodes * gpus, 1), instr_fusion=fusion) as prog:
        trace_twostep_alltoall(nodes, gpus, transfers_last=transfers_last)
    return prog


def moves(prog: Program) -> list[tuple]:
    """Every traced copy as (source rank, buffer, index, destination rank, buffer, index, count)."""
    return [(op.src_rank, op.src_buf, op.src_idx, op.dst_rank, op.dst_buf, op.dst_idx, op.count)
            for op in (prog.op(i) for i in range(prog.num_ops))]


@pytest.mark.parametrize("nodes, gpus", SHAPES)
def test_both_trace_orders_move_the_same_chunks(nodes, gpus):
    prog = traced(nodes, gpus, True)
    by_destination, transfers_last = moves(traced(nodes, gpus, False)), moves(prog)
    assert sorted(by_destination) == sorted(transfers_last)
    gathered = nodes * gpus * (nodes - 1) * gpus  # every block for another node, once into scratch
    assert sum(1 for m in transfers_last if m[4] == prog.code_of(Buffer.SCRATCH)) == gathered


@pytest.mark.parametrize("nodes, gpus", [(2, 2), (3, 2)])
def test_trace_orders_differ_when_there_are_several_nodes(nodes, gpus):
    assert moves(traced(nodes, gpus, False)) != moves(traced(nodes, gpus, True))


@pytest.mark.parametrize("nodes, gpus", SHAPES)
def test_transfers_last_order_verifies_and_executes(nodes, gpus):
    prog = traced(nodes, gpus, True, fusion=False)
    assert prog.check(), prog.check_errors
    algo = built(prog).algorithm
    check_algorithm(algo, "executor")
    assert_executes(algo)


@pytest.mark.parametrize("hosts", [2, 3])
def test_synthesizer_two_step_is_the_library_trace_in_its_order(hosts):
    from arborcc.synth.alltoall import lower_two_step
    from arborcc.synth.hosts import cluster_of
    from arborcc.topology.cluster import build_cluster

    cluster = cluster_of(build_cluster("dgx-a100", hosts))
    synthesized = lower_two_step(cluster, "twostep").algorithm
    library = traced(hosts, cluster.per_host, True, fusion=False).compile()
    assert write_msccl_xml(synthesized, dialect="executor") == write_msccl_xml(library, dialect="executor")
