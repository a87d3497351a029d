"""Lowering staged all-reduce plans (BlueConnect, hierarchical) to DSL programs.

Source: Cho, Finkler, Kung & Hunter, "BlueConnect: Decomposing All-Reduce for Deep
Learning on Heterogeneous Network Hierarchy", SysML 2019
(https://proceedings.mlsys.org/paper_files/paper/2019/hash/0c8abcf158ed12d0dd94480681186fda-Abstract.html),
section 3 and Algorithm 1. The plans (:mod:`arborcc.synth.blueconnect`, and here the
hierarchical baseline's, :func:`hierarchical_plan`) are synthesis; the program they
stand for - chunk ownership, the ring and halving-doubling stages, their channels - is
the library's staged all-reduce (:mod:`arborcc.library.staged`), which
:func:`blueconnect_program` traces into a program checked against the plan's routes.

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
from arborcc.ir.model import Buffer
from arborcc.lang import AllReduce
from arborcc.library.halving_doubling import near_equal_transfers
from arborcc.library.staged import StagedAllReduce
from arborcc.synth.blueconnect import RING, RS, BlueConnectPlan, GridAxis, Stage, build_plan, stage_algorithms
from arborcc.synth.hosts import ranks_by_host
from arborcc.synth.lower_blocks import MAX_COUNT
from arborcc.synth.lower_channels import ChannelMap, PlannedPairs
from arborcc.synth.lower_emit import Lowered, accumulating_buffer, finish, local_copy, lowering_program
from arborcc.topology.model import Topology

IN = Buffer.INPUT

__all__ = ["lower_blueconnect", "blueconnect_program", "describe", "hierarchical_plan", "host_dims", "level_times",
           "sequential_algbw", "stage_pairs"]


# ------------------------------------------------------------------ program ---
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


def blueconnect_program(topology: Topology, plan: BlueConnectPlan, name: str | None = None, path=None):
    """The traced DSL program of :func:`lower_blueconnect` and its channel map (not yet
    compiled): ``(program, channels)``. Same checks as :func:`lower_blueconnect`.

    The stages are the library's staged all-reduce (:class:`arborcc.library.staged.StagedAllReduce`:
    chunk ownership, one channel per stage, more for long rings), checked before any
    route is asked for; halving-doubling transfers are cut at MAX_COUNT chunks. This
    adds the plan's routes: the device path of every rank pair a stage uses, which the
    channel map and the program's connectivity follow.
    """
    n = topology.num_ranks
    plan.validate(n)
    staged = StagedAllReduce(plan.stages, n)
    name = name or f"{plan.name}-allreduce-" + "x".join(map(str, plan.factors))

    hops, paths = [], {}
    for st in plan.stages:
        for a, b in stage_pairs(st):
            if (a, b) not in paths:
                paths[(a, b)] = path(a, b) if path else topology.route(topology.ranks[a], topology.ranks[b]).path
                hops.append((a, b, paths[(a, b)]))
    channels = ChannelMap(hops)

    connectivity = PlannedPairs(paths, n) if path else topology
    acc = accumulating_buffer()
    with lowering_program(name, AllReduce(n, n, inplace=acc is IN), connectivity, channels) as prog:
        if acc is not IN:  # out of place: the stages work in the output, the input copied there first
            for r in range(n):
                local_copy(r, (IN, 0), (acc, 0), n)
        staged.trace(acc, near_equal_transfers(MAX_COUNT))
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
