"""The staged all-reduce (BlueConnect's decomposition; GC3's hierarchical all-reduce is
its two-level case) is traced once, in the library, on the library's ring and
halving-doubling helpers: it runs right on any grid of groups, makes the same copies
and reductions as the library's hierarchical all-reduce, and refuses stages that are
not a decomposition."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arborcc.errors import SynthesisError
from arborcc.ir.limits import MAX_CHANNELS
from arborcc.ir.model import Buffer
from arborcc.lang import AllReduce, Program, chunk
from arborcc.library import hierarchical_allreduce
from arborcc.library.halving_doubling import near_equal_transfers
from arborcc.library.ring import ring_all_gather, ring_reduce_scatter
from arborcc.library.staged import HALVING_DOUBLING, RING, RING_STEPS_PER_CHANNEL, StagedAllReduce
from arborcc.verify import verify_algorithm
from support.execution import assert_executes

IN, OUT = Buffer.INPUT, Buffer.OUTPUT


@dataclass(frozen=True)
class Stage:
    groups: list[list[int]]
    algorithm: str

    @property
    def factor(self) -> int:
        return len(self.groups[0])


def grid_stages(factors: list[int], algorithms: list[str], order: list[int] | None = None) -> list[Stage]:
    """Reduce-scatter stages along the axes of a mixed-radix grid of ranks (axis 0 the
    fastest-varying digit, as BlueConnect's plans), then the mirrored all-gathers; ``order``
    renumbers the ranks (a rank's grid position is its index in ``order``)."""
    n = math.prod(factors)
    order = order or list(range(n))
    stride = [math.prod(factors[:i]) for i in range(len(factors))]
    up = []
    for axis, (p, algorithm) in enumerate(zip(factors, algorithms)):
        groups = []
        for base in range(n):
            if (base // stride[axis]) % p == 0:
                groups.append([order[base + j * stride[axis]] for j in range(p)])
        up.append(Stage(groups, algorithm))
    return up + up[::-1]


def traced(stages: list[Stage], n: int, inplace: bool = True, transfers=None) -> Program:
    staged = StagedAllReduce(stages, n)
    with Program("staged", AllReduce(n, n, inplace)) as prog:
        buffer = IN
        if not inplace:
            for r in range(n):
                chunk(r, IN, 0, n).copy(r, OUT, 0)
            buffer = OUT
        staged.trace(buffer, *([transfers] if transfers else []))
    return prog


def moves(prog: Program) -> list[tuple]:
    """Every traced operation as (kind, source rank, buffer, index, destination rank, buffer, index, count)."""
    return [(op.kind, op.src_rank, op.src_buf, op.src_idx, op.dst_rank, op.dst_buf, op.dst_idx, op.count)
            for op in (prog.op(i) for i in range(prog.num_ops))]


GRIDS = [
    ([3, 2], [RING, RING]),
    ([2, 4], [HALVING_DOUBLING, RING]),
    ([4, 2], [RING, HALVING_DOUBLING]),
    ([2, 2, 2], [HALVING_DOUBLING] * 3),
    ([3, 2, 2], [RING, HALVING_DOUBLING, RING]),
    ([8], [HALVING_DOUBLING]),
    ([1, 4], [RING, RING]),  # a level of single members does nothing
]


@pytest.mark.parametrize("factors, algorithms", GRIDS, ids=[str(g[0]) + "-" + "-".join(g[1]) for g in GRIDS])
@pytest.mark.parametrize("inplace", [True, False])
def test_staged_allreduce_verifies_and_executes(factors, algorithms, inplace):
    n = math.prod(factors)
    algo = traced(grid_stages(factors, algorithms), n, inplace).compile()
    assert verify_algorithm(algo).ok
    assert_executes(algo)


@pytest.mark.parametrize("nodes, gpus", [(3, 2), (2, 4), (2, 8)])
def test_staged_trace_makes_the_hierarchical_allreduces_copies_and_reductions(nodes, gpus):
    """Two levels (the GPUs of a node, then those of equal local index across nodes)
    are the library's hierarchical all-reduce, traced in another order."""
    order = [g * nodes + n for n in range(nodes) for g in range(gpus)]  # node n holds ranks n, n+N, ...
    groups = [[g * nodes + n for g in range(gpus)] for n in range(nodes)]
    stages = grid_stages([gpus, nodes], [RING, RING], order)
    assert stages[0].groups == groups
    hierarchical = hierarchical_allreduce(nodes, gpus, groups=groups).program
    staged = traced(stages, nodes * gpus)
    assert sorted(moves(staged)) == sorted(moves(hierarchical))
    assert moves(staged) != moves(hierarchical)  # the inter-node all-gathers wait for every reduce-scatter


def test_stages_have_channels_of_their_own_and_long_rings_several():
    """Stage i's transfers run on its own channels; a ring of more than
    RING_STEPS_PER_CHANNEL steps per member spreads its blocks over several."""
    n = 2 * 64
    stages = grid_stages([2, 64], [RING, RING])
    staged = StagedAllReduce(stages, n)
    # stage 0: 2 members x 64 chunks each; stage 1: 64 members x 1 chunk; then the mirror
    want = [math.ceil(2 * 64 / RING_STEPS_PER_CHANNEL), math.ceil(64 / RING_STEPS_PER_CHANNEL)]
    assert staged.splits == want + want[::-1]
    assert staged.first_channels == [0, 3, 5, 7]
    prog = traced(stages, n)
    channels = {op.ch for op in (prog.op(i) for i in range(prog.num_ops))}
    assert channels == {0, 1} | {3, 4} | {5, 6} | {7, 8}  # stage 0's 2 blocks use 2 of its 3


def test_halving_doubling_transfers_are_cut_as_asked():
    prog = traced(grid_stages([16], [HALVING_DOUBLING]), 16, transfers=near_equal_transfers(3))
    counts = {op.count for op in (prog.op(i) for i in range(prog.num_ops))}
    assert counts == {1, 2, 3}  # ranges of 8, 4, 2, 1 chunks in transfers of at most 3
    assert_executes(prog.compile())


def test_ring_blocks_spread_over_split_channels():
    with Program("ring", AllReduce(4, 8)) as prog:
        ring_reduce_scatter([0, 1, 2, 3], 0, 2, ch=4, split=2)
        ring_all_gather([0, 1, 2, 3], 0, 2, ch=6, split=3)
    by_index = {}
    for op in (prog.op(i) for i in range(prog.num_ops)):
        by_index.setdefault(op.dst_idx, set()).add(op.ch)
    # reduce-scatter block i (chunks 2i, 2i+1) on 4 + i % 2; all-gather block i on 6 + i % 3
    assert by_index == {c: {4 + (c // 2) % 2, 6 + (c // 2) % 3} for c in range(8)}


@given(st.lists(st.sampled_from([1, 2, 3, 4]), min_size=1, max_size=3),
       st.randoms(use_true_random=False), st.booleans())
@settings(max_examples=12, deadline=None)
def test_any_grid_of_groups_reduces_everywhere(factors, rnd, inplace):
    n = math.prod(factors)
    if n < 2:
        return
    algorithms = [rnd.choice([RING, HALVING_DOUBLING]) if p in (1, 2, 4) else RING for p in factors]
    order = list(range(n))
    rnd.shuffle(order)
    assert_executes(traced(grid_stages(factors, algorithms, order), n, inplace).compile())


# ------------------------------------------------------------- refused stages ---
def test_groups_off_the_rank_grid_are_refused():
    """Stage-1 groups must join ranks that own the same block after stage 0."""
    stages = grid_stages([4, 2], [RING, RING])
    skew = Stage([[0, 5], [1, 4], [2, 6], [3, 7]], RING)
    with pytest.raises(SynthesisError, match="different blocks"):
        StagedAllReduce([stages[0], skew, skew, stages[3]], 8)


def test_a_block_that_does_not_divide_is_refused():
    stages = grid_stages([3, 2], [RING, RING])
    with pytest.raises(SynthesisError, match="cannot be cut into 3 parts"):
        StagedAllReduce(stages, 8)


def test_stages_that_leave_a_rank_more_than_one_chunk_are_refused():
    stages = grid_stages([2], [RING])
    with pytest.raises(SynthesisError, match="one distinct chunk"):
        StagedAllReduce(stages, 4)


def test_an_all_gather_stage_missing_is_refused():
    stages = grid_stages([2, 2], [RING, RING])
    with pytest.raises(SynthesisError, match="3 stages"):
        StagedAllReduce(stages[:3], 4)


def test_more_levels_than_channels_are_refused():
    level = Stage([[0], [1]], RING)
    k = MAX_CHANNELS // 2 + 1
    with pytest.raises(SynthesisError, match=f"{k} levels need {2 * k} channels"):
        StagedAllReduce([level] * (2 * k), 2)
