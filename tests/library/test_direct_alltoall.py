"""The direct all-to-all has one home, the library: the runtime's built-in and the
synthesizer's ``direct`` strategy trace the same :func:`trace_direct_alltoall`."""

from __future__ import annotations

import pytest

from arborcc.ir.msccl_xml import write_msccl_xml
from arborcc.lang import AllToAll, Program
from arborcc.library.direct import build_direct_algorithm, trace_direct_alltoall
from support.execution import assert_executes


def traced(n: int, inplace: bool, fusion: bool = True) -> Program:
    with Program("direct", AllToAll(n, 1, inplace), instr_fusion=fusion) as prog:
        trace_direct_alltoall(n, inplace)
    return prog


@pytest.mark.parametrize("n", [1, 2, 3, 5])
@pytest.mark.parametrize("inplace", [True, False])
def test_direct_trace_executes_in_both_call_forms(n, inplace):
    algo = traced(n, inplace).compile()
    assert algo.inplace == inplace
    assert_executes(algo)


@pytest.mark.parametrize("n", [2, 4])
def test_out_of_place_moves_every_block_once_straight_to_its_destination(n):
    prog = traced(n, False)
    moves = sorted((op.src_rank, op.src_idx, op.dst_rank, op.dst_idx, op.count)
                   for op in (prog.op(i) for i in range(prog.num_ops)))
    assert moves == [(s, d, d, s, 1) for s in range(n) for d in range(n)]


@pytest.mark.parametrize("machine, nodes", [("dgx-a100", 1), ("dgx1v", 1), ("dgx-a100", 2)])
def test_synthesizer_direct_is_the_library_trace(machine, nodes):
    """``lower_direct`` checks the transfers against its rank pairs and pins their paths,
    but the program is the library's, out of place without instruction fusion."""
    from arborcc.synth.alltoall import lower_direct
    from arborcc.topology.cluster import build_cluster
    from arborcc.topology.machines import build_machine

    topology = build_cluster(machine, nodes) if nodes > 1 else build_machine(machine)
    synthesized = lower_direct(topology, "direct").algorithm
    library = traced(topology.num_ranks, False, fusion=False).compile()
    assert write_msccl_xml(synthesized, dialect="executor") == write_msccl_xml(library, dialect="executor")


def test_runtime_builtin_is_the_library_trace():
    built_in = build_direct_algorithm("alltoall", 4, False)
    library = traced(4, False).compile()
    assert [rp.threadblocks for rp in built_in.ranks] == [rp.threadblocks for rp in library.ranks]
