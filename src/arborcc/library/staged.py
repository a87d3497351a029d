"""Staged all-reduce: reduce-scatter stages over groups of ranks, then the all-gather
stages in reverse (BlueConnect's decomposed all-reduce; GC3's hierarchical all-reduce is
its two-level case).

Source: Cho, Finkler, Kung & Hunter, "BlueConnect: Decomposing All-Reduce for Deep
Learning on Heterogeneous Network Hierarchy", SysML 2019
(https://proceedings.mlsys.org/paper_files/paper/2019/hash/0c8abcf158ed12d0dd94480681186fda-Abstract.html),
section 3.1 (eq. 8: the rank count factored as ``p0 x p1 x ... x p_{k-1}``), section
3.2.2 (Figure 4: the reduce-scatter stages, "reverse steps with all-gather shall be
taken to complete all-reduce") and Algorithm 1 (lines 7-16: the per-learner offsets
``g`` and sizes ``N / n``). A stage runs, in each of its groups, the library's ring
reduce-scatter or all-gather (:func:`~arborcc.library.ring.ring_reduce_scatter`, GC3
Figure 3b) or recursive halving / doubling
(:func:`~arborcc.library.halving_doubling.recursive_halving`, BlueConnect eq. 2).

This is the one home of the staged trace: the synthesizer's ``blueconnect`` and
``hierarchical`` strategies choose the stages (:mod:`arborcc.synth.blueconnect`) and
trace them here (:func:`arborcc.synth.lower_stages.blueconnect_program`), keeping only
what is synthesis: the plan, the routes and the connectivity the program checks.

Chunk ownership (Algorithm 1, lines 6-11). The buffer of an all-reduce over ``n`` ranks
is split into ``n`` chunks. Before stage 0 every rank owns the whole buffer (offset
``g = 0``, size ``n``). Reduce-scatter stage i runs, in each of its groups, a
reduce-scatter of the block the group's members own together (they must own the same
block: they agree on every earlier stage's coordinate); the block is cut into ``p_i``
contiguous sub-blocks and the member at position ``l`` of the group ends owning
sub-block ``l`` (line 10: ``g = g + N l[i] / n``). After stage i, rank r owns the
chunks whose mixed-radix digits (stage 0 the most significant) equal r's positions in
its groups of stages 0..i - Figure 4: after stage 0 GPU 0 owns partitions .00-.03 of
12, after stage 1 .00-.01, after stage 2 .00. After the last stage every rank owns one
distinct chunk, fully reduced. All-gather stages run the same groups in reverse order
(lines 12-16), each member broadcasting its sub-block to the group.

Transfers. A ring moves one chunk per step (the MSCCL runtimes' pieces, see
:func:`~arborcc.library.ring.ring_reduce_scatter`); halving-doubling moves contiguous
ranges of chunks (GC3's aggregation, multi-count references), cut by the caller's
``transfers`` (the synthesizer: :func:`~arborcc.library.halving_doubling.near_equal_transfers`
of at most 64 chunks), so its step count is that of the schedule, not of the chunk count.

Channels. Every stage has its own channels, reduce-scatter stages first, then the
all-gather stages (GC3's hierarchical all-reduce likewise gives each phase its
channel); one per stage, more for long rings (:func:`channel_splits`). Instruction
fusion joins only transfers of one channel, so it chains receives and sends inside a
stage (a ring's ``rrs``/``rcs`` pipeline) but never across stages. Two reasons: with
one channel for everything, a receive of a reduce-scatter gets fused with a send of an
all-gather far later in the program, and the compiler's FIFO repair
(``compiler/order.py``, which chains a fused instruction at its receive's program
position) finds no order and raises AssertionError (e.g. halving-doubling on 16 ranks
with one-chunk transfers); and with one channel per phase, a chain from a stage's last
receive into the next stage's first send would need one thread block with two send
peers.
"""

from __future__ import annotations

import math
from typing import Protocol, Sequence

from arborcc.errors import SynthesisError
from arborcc.ir.limits import MAX_CHANNELS
from arborcc.ir.model import Buffer
from arborcc.library.halving_doubling import Transfers, recursive_doubling, recursive_halving, whole_transfers
from arborcc.library.ring import ring_all_gather, ring_reduce_scatter

IN = Buffer.INPUT

#: the algorithms a stage runs in its groups
RING, HALVING_DOUBLING = "ring", "halving-doubling"
#: ring steps (one chunk each) per channel in one stage (executor runtimes: 64 steps per
#: thread block, room left for the compiler's dependency steps)
RING_STEPS_PER_CHANNEL = 60

#: per reduce-scatter stage: [(group, offset of the group's block)], sub-block size
Layout = list[tuple[list[tuple[Sequence[int], int]], int]]


class Stage(Protocol):
    """One stage: concurrent reduce-scatters (or all-gathers), one per group of ``factor``
    ranks (ranks by position: ring order, or for halving-doubling position k pairs with
    ``k xor 2^s``), each running ``algorithm``
    (:class:`arborcc.synth.blueconnect.Stage` is one)."""

    @property
    def groups(self) -> Sequence[Sequence[int]]: ...

    @property
    def algorithm(self) -> str: ...

    @property
    def factor(self) -> int: ...


class StagedAllReduce:
    """The all-reduce of ``stages`` over ranks 0..num_ranks-1: the reduce-scatter stages
    (the first half), then the all-gather stages (the second half, mirroring them:
    all-gather stage i runs the groups of reduce-scatter stage ``k - 1 - i``).

    Built once the stages are checked: raises SynthesisError when the stages are not
    halves of equal length, need more than MSCCL's channels, or when a stage's groups do
    not share a block (module doc).
    The groups are taken as given (a partition of the ranks, sizes equal to the factors:
    :meth:`arborcc.synth.blueconnect.BlueConnectPlan.validate` checks that).
    """

    def __init__(self, stages: Sequence[Stage], num_ranks: int):
        k = len(stages) // 2
        if len(stages) % 2:
            raise SynthesisError(f"{len(stages)} stages: a staged all-reduce has an all-gather stage for "
                                 f"each reduce-scatter stage")
        if 2 * k > MAX_CHANNELS:
            raise SynthesisError(f"{k} levels need {2 * k} channels, more than MSCCL's {MAX_CHANNELS}")
        self.stages = list(stages)
        #: per reduce-scatter stage, its groups' blocks and the sub-block size
        self.layout = ownership(self.stages[:k], num_ranks)
        #: channels per stage, and the first channel of each
        self.splits = channel_splits(self.stages, self.layout)
        self.first_channels = [sum(self.splits[:i]) for i in range(2 * k)]

    def trace(self, buffer: Buffer = IN, transfers: Transfers = whole_transfers) -> None:
        """Trace the stages into the current program, reducing in ``buffer`` (the input,
        or the output of an out-of-place program that copied its input there first);
        ``transfers`` cuts a halving-doubling stage's ranges into transfers."""
        k = len(self.layout)
        for i, (st, (blocks, m)) in enumerate(zip(self.stages[:k], self.layout)):  # going up: lines 7-11
            if st.factor < 2:
                continue
            for g, off in blocks:
                if st.algorithm == HALVING_DOUBLING:
                    recursive_halving(g, off, m, buffer, self.first_channels[i], transfers)
                else:
                    ring_reduce_scatter(g, off, m, self.first_channels[i], buffer, self.splits[i])
        for i, st in enumerate(self.stages[k:]):  # coming down: lines 12-16
            blocks, m = self.layout[k - 1 - i]
            if st.factor < 2:
                continue
            for g, off in blocks:
                if st.algorithm == HALVING_DOUBLING:
                    recursive_doubling(g, off, m, buffer, self.first_channels[k + i], transfers)
                else:
                    ring_all_gather(g, off, m, self.first_channels[k + i], buffer, self.splits[k + i])


def ownership(reduce_scatters: Sequence[Stage], n: int) -> Layout:
    """Per reduce-scatter stage: [(group, offset of the group's block)], sub-block size.

    Algorithm 1, lines 6-11 (module doc). Raises SynthesisError when a group's members
    do not own the same block (the groups do not form the mixed-radix grid of eq. 8).
    """
    offset = [0] * n
    size = n
    out = []
    for i, st in enumerate(reduce_scatters):
        p = st.factor
        if size % p:
            raise SynthesisError(f"stage {i}: a block of {size} chunks cannot be cut into {p} parts")
        m = size // p
        blocks = []
        for g in st.groups:
            off = offset[g[0]]
            if any(offset[r] != off for r in g):
                owners = {r: offset[r] for r in g}
                raise SynthesisError(f"stage {i}: group {g} spans ranks owning different blocks after the "
                                     f"earlier stages (chunk offsets {owners}); the stages' groups must "
                                     f"differ in one coordinate of the rank grid (BlueConnect eq. 8)")
            blocks.append((g, off))
        for g, off in blocks:
            for pos, r in enumerate(g):
                offset[r] = off + pos * m
        out.append((blocks, m))
        size = m
    if size != 1 or len(set(offset)) != n:
        raise SynthesisError("the reduce-scatter stages do not leave every rank one distinct chunk")
    return out


def channel_splits(stages: Sequence[Stage], layout: Layout) -> list[int]:
    """Channels per stage (reduce-scatter stages, then all-gather stages): a ring stage
    puts one step per chunk of its sub-block on each member's thread block, so a ring
    of more than :data:`RING_STEPS_PER_CHANNEL` steps is spread over several channels
    to stay within the executor runtimes' 64 steps per thread block; one channel per
    stage otherwise, or when the spreads would need more than MSCCL's channels."""
    k = len(layout)
    blocks = [layout[i][1] for i in range(k)] + [layout[k - 1 - i][1] for i in range(k)]
    splits = [1 if st.algorithm == HALVING_DOUBLING or st.factor < 2 else
              math.ceil(st.factor * m / RING_STEPS_PER_CHANNEL)
              for st, m in zip(stages, blocks)]
    return splits if sum(splits) <= MAX_CHANNELS else [1] * len(splits)
