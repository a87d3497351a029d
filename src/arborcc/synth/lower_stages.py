"""Lowering staged all-reduce plans (BlueConnect, hierarchical) to DSL programs.

Source: Cho, Finkler, Kung & Hunter, "BlueConnect: Decomposing All-Reduce for Deep
Learning on Heterogeneous Network Hierarchy", SysML 2019
(https://proceedings.mlsys.org/paper_files/paper/2019/hash/0c8abcf158ed12d0dd94480681186fda-Abstract.html),
section 3.1 (eq. 8: the
rank count factored as ``p0 x p1 x ... x p_{k-1}``), section 3.2.2 (Figure 4: the
reduce-scatter stages, "reverse steps with all-gather shall be taken to complete
all-reduce") and Algorithm 1 (lines 7-16: the per-learner offsets ``g`` and sizes
``N / n``). The ring reduce-scatter and all-gather inside a group are GC3's (Cowan et
al., Figure 3b: ``ring_reduce_scatter``/``ring_all_gather``); halving-doubling is
Thakur, Rabenseifner and Gropp's recursive halving / doubling (BlueConnect eq. 2).

Chunk ownership (Algorithm 1, lines 6-11). The in-place buffer of an all-reduce over
``n`` ranks is split into ``n`` chunks. Before stage 0 every rank owns the whole buffer
(offset ``g = 0``, size ``n``). Reduce-scatter stage i runs, in each of its groups, a
reduce-scatter of the block the group's members own together (they must own the same
block: they agree on every earlier stage's coordinate); the block is cut into ``p_i``
contiguous sub-blocks and the member at position ``l`` of the group ends owning
sub-block ``l`` (line 10: ``g = g + N l[i] / n``). After stage i, rank r owns the
chunks whose mixed-radix digits (stage 0 the most significant) equal r's positions in
its groups of stages 0..i - Figure 4: after stage 0 GPU 0 owns partitions .00-.03 of
12, after stage 1 .00-.01, after stage 2 .00. After the last stage every rank owns one
distinct chunk, fully reduced. All-gather stages run the same groups in reverse order
(lines 12-16), each member broadcasting its sub-block to the group.

Every transfer moves a contiguous range of chunks (GC3's aggregation, multi-count
references), split into at most ``MAX_COUNT`` (64) chunks per transfer, so the step
count is that of the schedule, not of the chunk count.

Within a group, ``group[k]`` is position k (ring order for rings; for
halving-doubling, position k pairs with ``k xor 2^s``), as :class:`Stage` documents.

:func:`level_times` measures, per level, the time per byte the *emitted* algorithm
spends on its busiest link (reduce-scatter plus all-gather of that level); on
:func:`~arborcc.topology.cluster.build_hierarchy` topologies these are exactly the
bandwidth terms of eq. (9), whose sum is BlueConnect's stage-sequential time. The
steady-state estimate of :mod:`arborcc.sim.bandwidth` (``Lowered.estimate``) instead
lets the stages of different buffer tiles overlap (the runtime pipelines them), so its
time per byte is the busiest link's *total* - between the largest level term and their
sum.
"""

from __future__ import annotations

import math

from arborcc.errors import SynthesisError
from arborcc.ir.limits import MAX_CHANNELS
from arborcc.ir.model import Buffer
from arborcc.lang import AllReduce, chunk
from arborcc.library.halving_doubling import recursive_doubling, recursive_halving
from arborcc.synth.blueconnect import HD, RING, RS, BlueConnectPlan, GridAxis, Stage, build_plan, stage_algorithms
from arborcc.synth.hosts import ranks_by_host
from arborcc.synth.lower_blocks import MAX_COUNT
from arborcc.synth.lower_channels import ChannelMap, PlannedPairs
from arborcc.synth.lower_emit import Lowered, accumulating_buffer, finish, local_copy, lowering_program
from arborcc.topology.model import Topology

#: ring sub-block pieces per channel in one stage (executor runtimes: 64 steps per thread block)
_RING_STEPS_PER_CHANNEL = 60
#: chunks per ring transfer: a ring member sends its first piece and then forwards;
#: the MSCCL runtimes cut a step into one piece per chunk on large buffers and a Simple
#: FIFO holds two pieces, so a first send of more than one chunk fills the FIFO and
#: the ring deadlocks (:mod:`arborcc.verify.pieces`)
RING_PIECE = 1

IN = Buffer.INPUT

__all__ = ["lower_blueconnect", "blueconnect_program", "describe", "hierarchical_plan", "host_dims", "level_times",
           "sequential_algbw", "stage_pairs"]


# ----------------------------------------------------------------- ownership ---
def _pieces(start: int, count: int) -> list[tuple[int, int]]:
    """``count`` contiguous chunks from ``start`` as near-equal transfers of at most
    MAX_COUNT chunks each."""
    if count <= 0:
        return []
    parts = -(-count // MAX_COUNT)
    base, extra = divmod(count, parts)
    out, at = [], start
    for j in range(parts):
        size = base + (1 if j < extra else 0)
        out.append((at, size))
        at += size
    return out


def _layout(plan: BlueConnectPlan, n: int) -> list[tuple[list[tuple[list[int], int]], int]]:
    """Per reduce-scatter stage: [(group, offset of the group's block)], sub-block size.

    Algorithm 1, lines 6-11 (module doc). Raises SynthesisError when a group's members
    do not own the same block (the groups do not form the mixed-radix grid of eq. 8).
    """
    k = len(plan.factors)
    offset = [0] * n
    size = n
    out = []
    for i, st in enumerate(plan.stages[:k]):
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
    if size != 1 or len(set(offset)) != n:  # pragma: no cover - implied by validate + the grid check
        raise SynthesisError("the reduce-scatter stages do not leave every rank one distinct chunk")
    return out


def stage_pairs(stage: Stage) -> list[tuple[int, int]]:
    """The (sender, receiver) rank pairs a stage uses: ring neighbours, or every
    halving-doubling round's partners (both directions)."""
    pairs = []
    for g in stage.groups:
        p = len(g)
        if p < 2:
            continue
        if stage.algorithm == RING:
            pairs.extend((g[j], g[(j + 1) % p]) for j in range(p) if g[j] != g[(j + 1) % p])
        else:
            d = p // 2
            while d >= 1:
                pairs.extend((g[j], g[j ^ d]) for j in range(p))
                d //= 2
    return pairs


# ---------------------------------------------------------------- emission ---
def _ring_pieces(m: int) -> list[tuple[int, int]]:
    """A ring sub-block of ``m`` chunks as ``(offset in the sub-block, size)`` pieces of
    at most :data:`RING_PIECE` chunks."""
    return [(a, min(RING_PIECE, m - a)) for a in range(0, m, RING_PIECE)]


def _ring_reduce_scatter(g: list[int], off: int, m: int, ch: int, split: int = 1, buf: Buffer = IN) -> None:
    """GC3 Fig. 3b ring reduce-scatter: sub-block k starts at ``g[k+1]``, is reduced
    by every member in ring order and ends, fully reduced, on ``g[k]``. Sub-block k
    runs on channel ``ch + k % split``. The sub-blocks go round piece by piece
    (:func:`_ring_pieces`), every sub-block's first piece first. ``buf``: the buffer
    reduced in."""
    p = len(g)
    for a0, c in _ring_pieces(m):
        for k in range(p):
            a = off + k * m + a0
            ref = chunk(g[(k + 1) % p], buf, a, c)
            for s in range(2, p + 1):
                ref = chunk(g[(k + s) % p], buf, a, c).reduce(ref, ch=ch + k % split)


def _ring_all_gather(g: list[int], off: int, m: int, ch: int, split: int = 1, buf: Buffer = IN) -> None:
    """GC3 Fig. 3b ring all-gather: sub-block k leaves ``g[k]`` and goes once round,
    on channel ``ch + k % split``, piece by piece as in :func:`_ring_reduce_scatter`,
    within ``buf``."""
    p = len(g)
    for a0, c in _ring_pieces(m):
        for k in range(p):
            a = off + k * m + a0
            ref = chunk(g[k], buf, a, c)
            for s in range(1, p):
                ref = ref.copy(g[(k + s) % p], buf, a, ch=ch + k % split)


def _channel_splits(plan: BlueConnectPlan, layout) -> list[int]:
    """Channels per stage (reduce-scatter stages, then all-gather stages): a ring stage
    puts one step per sub-block piece on each member's thread block, so a ring of more
    than about 60 pieces is spread over several channels to stay within the executor
    runtimes' 64 steps per thread block (room left for the compiler's dependency
    steps); one channel per stage otherwise, or when the spreads would need more than
    MSCCL's channels."""
    k = len(plan.factors)
    blocks = [layout[i][1] for i in range(k)] + [layout[k - 1 - i][1] for i in range(k)]
    splits = [1 if st.algorithm == HD or st.factor < 2 else
              math.ceil(st.factor * len(_ring_pieces(m)) / _RING_STEPS_PER_CHANNEL)
              for st, m in zip(plan.stages, blocks)]
    return splits if sum(splits) <= MAX_CHANNELS else [1] * len(splits)


def blueconnect_program(topology: Topology, plan: BlueConnectPlan, name: str | None = None, path=None):
    """The traced DSL program of :func:`lower_blueconnect` and its channel map (not yet
    compiled): ``(program, channels)``. Same checks as :func:`lower_blueconnect`.

    Channels: every stage has its own channels, reduce-scatter stages first, then the
    all-gather stages (GC3's hierarchical all-reduce likewise gives each phase its
    channel); one per stage, more for long rings (:func:`_channel_splits`). Instruction fusion joins only transfers of one channel, so it chains
    receives and sends inside a stage (a ring's ``rrs``/``rcs`` pipeline) but never
    across stages. Two reasons: with one channel for everything, a receive of a
    reduce-scatter gets fused with a send of an all-gather far later in the program,
    and the compiler's FIFO repair (``compiler/order.py``, which chains a fused
    instruction at its receive's program position) finds no order and raises
    AssertionError (e.g. halving-doubling on 16 ranks with one-chunk transfers); and
    with one channel per phase, a chain from a stage's last receive into the next
    stage's first send would need one thread block with two send peers.
    """
    n = topology.num_ranks
    plan.validate(n)
    k = len(plan.factors)
    if 2 * k > MAX_CHANNELS:
        raise SynthesisError(f"{k} levels need {2 * k} channels, more than MSCCL's {MAX_CHANNELS}")
    layout = _layout(plan, n)
    name = name or f"{plan.name}-allreduce-" + "x".join(map(str, plan.factors))

    hops, paths = [], {}
    for st in plan.stages:
        for a, b in stage_pairs(st):
            if (a, b) not in paths:
                paths[(a, b)] = path(a, b) if path else topology.route(topology.ranks[a], topology.ranks[b]).path
                hops.append((a, b, paths[(a, b)]))
    channels = ChannelMap(hops)

    splits = _channel_splits(plan, layout)
    base = [sum(splits[:i]) for i in range(2 * k)]
    connectivity = PlannedPairs(paths, n) if path else topology
    acc = accumulating_buffer()
    with lowering_program(name, AllReduce(n, n, inplace=acc is IN), connectivity, channels) as prog:
        if acc is not IN:  # out of place: the stages work in the output, the input copied there first
            for r in range(n):
                local_copy(r, (IN, 0), (acc, 0), n)
        for i, (st, (blocks, m)) in enumerate(zip(plan.stages[:k], layout)):  # going up: lines 7-11
            if st.factor < 2:
                continue
            for g, off in blocks:
                if st.algorithm == HD:
                    recursive_halving(g, off, m, acc, base[i], _pieces)
                else:
                    _ring_reduce_scatter(g, off, m, base[i], splits[i], acc)
        for i, st in enumerate(plan.stages[k:]):  # coming down: lines 12-16
            blocks, m = layout[k - 1 - i]
            if st.factor < 2:
                continue
            for g, off in blocks:
                if st.algorithm == HD:
                    recursive_doubling(g, off, m, acc, base[k + i], _pieces)
                else:
                    _ring_all_gather(g, off, m, base[k + i], splits[k + i], acc)
    return prog, channels


def describe(plan: BlueConnectPlan) -> str:
    """``"RS 4x4 ring, RS 2x8 halving-doubling, ..."``: kind, group size x group count, algorithm."""
    return ", ".join(f"{'RS' if s.kind == RS else 'AG'} {s.factor}x{len(s.groups)} {s.algorithm}"
                     for s in plan.stages)


def lower_blueconnect(topology: Topology, plan: BlueConnectPlan, name: str | None = None, path=None) -> Lowered:
    """BlueConnect's decomposed all-reduce (Algorithm 1; Figure 4) as an ``AllReduce(n, n)``
    program, in place (out of place inside
    :func:`~arborcc.synth.lower_emit.out_of_place_lowering`: every rank copies its input
    into its output first and the stages work there): the plan's reduce-scatter stages in order, then its
    all-gather stages (which mirror them) - compiled and estimated; ``synthesize()``
    verifies what it returns.

    Raises SynthesisError when the plan is not a decomposition over the topology's
    ranks (:meth:`BlueConnectPlan.validate`: groups partitioning the ranks, sizes equal
    to the factors, halving-doubling only on power-of-two groups) or when a stage's
    groups do not share a block (module doc). ``path(a, b)``: the device path of a
    transfer (default: the topology's route), checked instead of the routes.
    """
    prog, channels = blueconnect_program(topology, plan, name, path)
    n = topology.num_ranks
    return finish(prog, topology, channels, n,
                   [f"{plan.name}: factors {'x'.join(map(str, plan.factors))}, {n} chunks; stages "
                    f"{describe(plan)} (BlueConnect Algorithm 1)"])


# -------------------------------------------------------------- hierarchical ---
def host_dims(topology: Topology) -> list[GridAxis]:
    """The two axes of the hierarchical baseline: a rank's position among its host's
    GPUs (in rank order) and its host's position among the hosts. Raises
    SynthesisError when the hosts hold different numbers of ranks."""
    n = topology.num_ranks
    by_host = ranks_by_host(topology)
    sizes = {len(v) for v in by_host.values()}
    if len(sizes) != 1:
        raise SynthesisError(f"{topology.name}: hosts hold different numbers of GPUs "
                             f"({sorted(sizes)}); the hierarchical decomposition needs equal nodes")
    local, node = [0] * n, [0] * n
    for h, ranks in enumerate(sorted(by_host.values())):
        for j, r in enumerate(ranks):
            local[r], node[r] = j, h
    gpn = sizes.pop()
    return [GridAxis(gpn, tuple(local), "gpu"), GridAxis(len(by_host), tuple(node), "node")]


def hierarchical_plan(topology: Topology, algorithm: str | None = RING, alpha: float | None = None,
                      name: str = "hierarchical", path=None) -> BlueConnectPlan:
    """The hierarchical baseline as a BlueConnect plan with factors (GPUs per node,
    nodes): reduce-scatter inside every node, reduce-scatter across nodes among the
    GPUs of equal local index, then the all-gathers in reverse (GC3 section 2's
    hierarchical all-reduce; BlueConnect eq. 8 with two levels).

    ``algorithm`` is every stage's (ring by default; ``None`` picks halving-doubling
    for power-of-two groups, eq. 3). Levels of a single group member are dropped.
    Unlike :func:`~arborcc.synth.blueconnect.blueconnect_plan` this routes only the
    stages' own transfers (no all-pairs reachability sweep), so it stays cheap on
    1024 ranks; ``path(a, b)`` gives transfers' device paths (default: the topology's
    routes).
    """
    dims = [d for d in host_dims(topology) if d.radix > 1] or [GridAxis(1, (0,) * topology.num_ranks, "one")]
    return build_plan(topology, dims, stage_algorithms(dims, algorithm), alpha, {}, name=name, path=path)


# ------------------------------------------------------------- model check ---
def level_times(lowered: Lowered, plan: BlueConnectPlan, topology: Topology) -> list[float]:
    """Per level i (reduce-scatter stage i and its all-gather), seconds per byte of the
    all-reduce buffer on the busiest link, counting only the emitted transfers of that
    level's groups - the measured counterpart of eq. (9)'s term
    ``2 Tr/c(p_i, N / prod p_j, 0, min_j w_j / prod p_k) / N`` (module doc).

    A connection belongs to level i when its two ranks share a stage-i group (two
    ranks differ in one grid coordinate, so in at most one level).
    """
    k = len(plan.factors)
    level_of: dict[tuple[int, int], int] = {}
    for i, st in enumerate(plan.stages[:k]):
        for g in st.groups:
            for a in g:
                for b in g:
                    if a != b:
                        level_of[(a, b)] = i
    algo = lowered.algorithm
    chunk_bytes = 1.0 / algo.chunks_per_loop
    loads: list[dict[tuple[str, str], float]] = [{} for _ in range(k)]
    for prog in algo.ranks:
        for tb in prog.threadblocks:
            sent = sum(s.count for s in tb.steps if s.op.sends)
            if not sent:
                continue
            level = level_of.get((prog.rank, tb.send))
            if level is None:
                raise SynthesisError(f"rank {prog.rank} sends to {tb.send}, which shares no stage group with it")
            path = lowered.routes.get((prog.rank, tb.send, tb.channel)) or topology.route(
                topology.ranks[prog.rank], topology.ranks[tb.send]).path
            for link in zip(path, path[1:]):
                loads[level][link] = loads[level].get(link, 0.0) + sent * chunk_bytes
    return [max((v / topology.links[l].bandwidth for l, v in ld.items()), default=0.0) for ld in loads]


def sequential_algbw(lowered: Lowered, plan: BlueConnectPlan, topology: Topology) -> float:
    """Algbw (B/s) when the levels run one after another, each at its busiest link's
    pace - eq. (9) without latency, measured on the emitted algorithm."""
    t = sum(level_times(lowered, plan, topology))
    return 1.0 / t if t > 0 else math.inf
