"""The ``trees`` strategy: Blink's tree packing (MLSys 2020, sections 3.1-3.3) and
ForestColl's per-root packings, rounded to chunks and lowered; gather and scatter as a
single-sink flow split into paths (:mod:`arborcc.synth.gather`).

Sources: Blink (Wang et al., "Blink: Fast and Generic Collectives for Distributed ML",
MLSys 2020, https://arxiv.org/abs/1910.04940), ForestColl (Zhao et al., "ForestColl:
Efficient Collective Communications on Heterogeneous Network Fabrics", 2024,
https://arxiv.org/abs/2402.06787); each function's docstring says which part.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from arborcc.synth.result import SynthesisRequest, SynthesisResult
    from arborcc.synth.trees import Tree
    from arborcc.topology.model import Topology


def _apportion(topology: Topology, trees: list[Tree], target: float, both_ways: bool = False,
               chunks: int | None = None):
    from arborcc.synth.quantize import CHUNK_COUNTS, TOLERANCE, apportion

    roots = sorted({t.root for t in trees}, key=topology.ranks.index)
    groups = [[i for i, t in enumerate(trees) if t.root == r] for r in roots]
    share = [1.0 / len(roots)] * len(trees)
    uses = []
    for t in trees:
        use = t.link_use()
        if both_ways:
            use = use + t.reversed().link_use()
        uses.append(use)
    capacity = {k: l.bandwidth for k, l in topology.links.items()}
    return apportion(groups, [t.weight for t in trees], share, uses, capacity, target,
                     tolerance=TOLERANCE, candidates=(chunks,) if chunks else CHUNK_COUNTS)


def _with_capacities(topology: Topology, capacity: dict[tuple[str, str], float]) -> Topology:
    """The topology with each link's bandwidth replaced (links given none are dropped)."""
    from dataclasses import replace

    from arborcc.topology.model import TopologyBuilder

    b = TopologyBuilder(topology.name, source=topology.name, meta=topology.meta)
    for d in topology.devices.values():
        b.add_device(d)
    floor = 1e-6 * max(capacity.values())
    for key, l in topology.links.items():
        if capacity.get(key, 0.0) > floor:
            b.add_link(replace(l, bandwidth=capacity[key]))
    return b.build(ranks=topology.ranks)


def _tree_allreduce(request: SynthesisRequest, name: str, chunks: int | None = None,
                    scale: int = 1, routed: bool = False) -> SynthesisResult:
    """Reduce into one root and broadcast from it at once (Blink section 3.3): the LP of
    :func:`bounds.tree_allreduce_split` divides every link between the two halves, each
    half is packed on its share, and each chunk is reduced along a reduce tree then
    broadcast along a broadcast tree. The root is the bound's best one (rank 0 when
    the bound solved no tree LP because reduce-scatter + all-gather is better).
    ``chunks``: apportion exactly that many (default: the fewest that keep the rate),
    then give every tree ``scale`` times its count (:func:`_fastest_pipelined`);
    ``routed``: every hop on its pair's runtime route (:func:`_as_written_or_routed`)."""
    from arborcc.synth import bounds as B
    from arborcc.synth.flowgraph import flow_graph
    from arborcc.synth.lower_emit import lower_allreduce_reduce_broadcast
    from arborcc.synth.lower_search import within_limits
    from arborcc.synth.packing import pack_broadcast, pack_reduce
    from arborcc.synth.quantize import CHUNK_COUNTS, TOLERANCE
    from arborcc.synth.result import SynthesisResult

    topology, bound, links = request.topology, request.bound, request.links
    g = flow_graph(topology, links)
    if bound.tree_split is not None:
        root, rate, (cap_b, cap_r) = topology.ranks.index(bound.tree_root), bound.tree_algbw, bound.tree_split
    else:
        root = 0
        rate, cap_b, cap_r = B.tree_allreduce_split(g, int(g.ranks[0]))
    half_b = _with_capacities(topology, {g.original_link(i): c for i, c in enumerate(cap_b)})
    half_r = _with_capacities(topology, {g.original_link(i): c for i, c in enumerate(cap_r)})
    r = topology.ranks[root]
    # fractional weights are fine here: chunk rounding follows, and the integral-tree
    # search of the fewest-trees step costs seconds on clusters
    bcast = pack_broadcast(half_b, r, links, threshold=TOLERANCE, minimize_trees=False, routed=routed)
    red = pack_reduce(half_r, r, links, threshold=TOLERANCE, minimize_trees=False, routed=routed)
    # one shard: reduce trees and broadcast trees each carry the whole buffer once
    a_r = _apportion(half_r, list(red.trees), red.rate, chunks=chunks)
    a_b = _apportion(half_b, list(bcast.trees), bcast.rate, chunks=chunks)
    # both halves need the same chunk count: the first count where both keep their rate
    best = (a_r, a_b) if chunks else None
    for chunks in () if chunks else (c for c in CHUNK_COUNTS if c >= max(a_r.chunks, a_b.chunks)):
        r_, b_ = (_apportion(half_r, list(red.trees), red.rate, chunks=chunks),
                  _apportion(half_b, list(bcast.trees), bcast.rate, chunks=chunks))
        if best is None or min(r_.rate, b_.rate) > min(best[0].rate, best[1].rate):
            best = (r_, b_)
        if min(r_.rate / red.rate, b_.rate / bcast.rate) >= 1 - TOLERANCE:
            best = (r_, b_)
            break
    a_r, a_b = best
    chunks, counts_r, counts_b = a_r.chunks * scale, [c * scale for c in a_r.counts], [c * scale for c in a_b.counts]
    used_r = [(t, c) for t, c in zip(red.trees, counts_r) if c]
    used_b = [(t, c) for t, c in zip(bcast.trees, counts_b) if c]
    lowered = within_limits(lower_allreduce_reduce_broadcast, topology, used_r, used_b, name,
                            takes_rounds=True, takes_fuse=True, timed_at=_reference_size(request))
    return SynthesisResult.from_lowered(
        "trees", request, lowered,
        [f"reduce + broadcast through rank {root} (Blink 3.3) at {min(rate, red.rate, bcast.rate) / 1e9:.2f} GB/s"
         f"{' on the runtime routes' if routed else ''}: {len(used_r)} reduce and {len(used_b)} broadcast trees, "
         f"{chunks} chunks"],
        [t for t, _ in used_r + used_b], [c for _, c in used_r + used_b])


def _rs_ag_allreduce(request: SynthesisRequest, name: str, chunks: int | None = None,
                     scale: int = 1, routed: bool = False) -> SynthesisResult:
    """All-reduce as reduce-scatter on reversed per-root trees + all-gather on the
    per-root out-trees of one all-gather packing (ForestColl). ``chunks``, ``scale``,
    ``routed``: as :func:`_tree_allreduce` takes them, per rank."""
    from arborcc.synth.lower_emit import lower_allreduce_rs_ag
    from arborcc.synth.lower_search import within_limits
    from arborcc.synth.packing import pack_allgather
    from arborcc.synth.quantize import TOLERANCE
    from arborcc.synth.result import SynthesisResult

    topology = request.topology
    packing = pack_allgather(topology, request.links, threshold=TOLERANCE, routed=routed)
    a = _apportion(topology, list(packing.trees), packing.algbw / 2, both_ways=True, chunks=chunks)
    used = [t for t, c in zip(packing.trees, a.counts) if c]
    counts = [c * scale for c in a.counts if c]
    lowered = within_limits(lower_allreduce_rs_ag, topology, used, counts, name, takes_rounds=True,
                            takes_fuse=True, timed_at=_reference_size(request))
    return SynthesisResult.from_lowered(
        "trees", request, lowered,
        [f"reduce-scatter + all-gather on {len(used)} per-root trees{' on the runtime routes' if routed else ''}, "
         f"{a.chunks * scale} chunks per rank"],
        used, counts)


def synth_trees(request: SynthesisRequest) -> SynthesisResult:
    """Blink: pack arborescences to the bound, round to chunks, lower. Gather/scatter:
    trees that are paths, a single-sink flow decomposition (:mod:`.gather`)."""
    from arborcc.synth.gather import synth_gather
    from arborcc.synth.result import SynthesisResult

    topology, collective, links = request.topology, request.collective, request.links
    name = f"trees-{collective}"
    if collective in ("gather", "scatter"):
        lowered, notes, _ = synth_gather(topology, collective, request.root, links, name)
        return SynthesisResult.from_lowered("trees", request, lowered, notes)
    if collective == "broadcast":
        switch = _switch_broadcast(request, name)
        if switch is not None:
            return switch
    if collective in ("broadcast", "reduce"):
        result = _single_root_trees(request, name)
        return _as_written_single_root(request, result, name)
    if collective in ("allgather", "reducescatter"):
        return _as_written_or_routed(request, name, _per_root_trees)
    # all-reduce: reduce-scatter + all-gather on per-root trees, or reduce + broadcast
    # over trees from one root on a split of the links. The family with the higher
    # bound is built; the other only if rounding left the first short of 99%.
    result = _as_written_or_routed(request, name, _tree_allreduce_family)
    return _faster_as_written(request, result, _same_trees_builders(request, name),
                              "the {us:.0f} us of the trees above as written")


def _on_runtime_routes(topology: Topology, trees: list[Tree]) -> bool:
    """Whether every hop of ``trees`` takes its pair's runtime route (a file runs it as planned)."""
    return all(tuple(h.path) == topology.route(h.src, h.dst).path for t in trees for h in t.hops)


def _as_written_or_routed(request: SynthesisRequest, name: str,
                          family: Callable[..., SynthesisResult]) -> SynthesisResult:
    """``family``'s trees (the fastest of its pipelined candidates,
    :func:`_fastest_pipelined`) packed over every link, or - where some hop relays
    elsewhere than its pair's runtime route, which the file (MSCCL XML names no route)
    cannot express - the same packed with every hop on its runtime route (``routed``:
    at most the file bound, which a packing over every link may not reach as written)
    where the simulator times its file faster (:data:`PIPELINED_MARGIN`)
    at the request's size (:data:`~arborcc.synth.result.RANKING_SIZE` without one; calls above
    :data:`LOOPED_CALL` as 1 GiB). DGX-1V GPUs 0,1,2,5 all-gather at 64 MiB (1 GiB):
    32.9 (35.8) GB/s busbw over every link as written, 43.5 (49.9) on the runtime
    routes."""
    from functools import partial

    every_link = family(request, name)
    result = _fastest_pipelined(request, every_link, name, family)
    if request.links != "all" or _on_runtime_routes(request.topology, every_link.trees):
        return result
    on_routes = partial(family, routed=True)
    return _faster_as_written(request, result, [
        ("the trees on the runtime's routes", lambda: _fastest_pipelined(request, on_routes(request, name), name,
                                                                        on_routes))])


def _reference_size(request: SynthesisRequest) -> int:
    """The size the trees' candidates are timed at: the request's
    (:data:`~arborcc.synth.result.RANKING_SIZE` without one), calls above
    :data:`LOOPED_CALL` as 1 GiB (larger calls pipeline as it does)."""
    from arborcc.synth.result import RANKING_SIZE

    return min(request.size or RANKING_SIZE, LOOPED_CALL)


def _single_root_trees(request: SynthesisRequest, name: str, routed: bool = False) -> SynthesisResult:
    """Broadcast or reduce on one packing of out- or in-trees (Blink), rounded to chunks
    and lowered (``routed``: every hop on its pair's runtime route)."""
    from arborcc.synth.lower_emit import lower_broadcast, lower_reduce
    from arborcc.synth.lower_search import within_limits
    from arborcc.synth.packing import pack_broadcast, pack_reduce
    from arborcc.synth.quantize import TOLERANCE
    from arborcc.synth.result import SynthesisResult

    topology, collective = request.topology, request.collective
    pack = pack_broadcast if collective == "broadcast" else pack_reduce
    # Blink's fewest trees, except for routed trees across hosts: their search took 13.5 s
    # of a 14 s packing on 8 x DGX A100 (reduce), where the LP's trees take 0.5 s
    one_host = len({topology.devices[g].host for g in topology.ranks}) == 1
    packing = pack(topology, topology.ranks[request.root], request.links, threshold=TOLERANCE, routed=routed,
                   minimize_trees=one_host or not routed)
    a = _apportion(topology, list(packing.trees), packing.rate)
    lower = lower_broadcast if collective == "broadcast" else lower_reduce
    used = [t for t, c in zip(packing.trees, a.counts) if c]
    lowered = within_limits(lower, topology, used, [c for c in a.counts if c], name,
                            takes_rounds=True, takes_fuse=True, timed_at=_reference_size(request))
    return SynthesisResult.from_lowered(
        "trees", request, lowered,
        [f"packing {packing.rate / 1e9:.2f} GB/s with {packing.num_trees} trees ({packing.method}"
         f"{', on the runtime routes' if routed else ''}), "
         f"{a.chunks} chunks"], used, [c for c in a.counts if c])


def _as_written_single_root(request: SynthesisRequest, result: SynthesisResult, name: str) -> SynthesisResult:
    """``result`` (the broadcast or reduce trees over every link), or one of two packings
    whose hops a file takes as planned (:func:`_faster_as_written`): the trees over
    NVLink alone, where the machine has other links too, and the trees whose every hop
    takes its pair's runtime route (:func:`arborcc.synth.packing.pack_broadcast` with
    ``routed``), where ``result`` relays a hop elsewhere.

    A packing over every link routes hops over PCIe between GPUs an NVLink joins; MSCCL
    XML names no route, so the runtime sends them over the NVLink, which then carries
    more than its share (DGX-1P: planned 16,300 us at 1 GiB, 22,986 us as written), and
    its hundreds of chunks per loop pipeline only through the steps of one loop. The
    NVLink trees are few, with few chunks: DGX-1P at 64 MiB 42.4 GB/s busbw over every
    link, 54.1 over NVLink (NCCL's ring 37.5); at 1 GiB 46.7 and 66.0. The routed trees
    also use the routes between GPUs no NVLink joins (across the CPUs' link): DGX-1V
    GPUs 0,1,4,5 pack 70 GB/s that way against 50 over NVLink alone."""
    topology = request.topology
    if request.links != "all":
        return result
    builders = [("the trees over NVLink alone", build) for build in _over_nvlink(request, name, _single_root_trees)]
    if not _on_runtime_routes(topology, result.trees):
        builders.append(("the trees on the runtime's routes", lambda: _single_root_trees(request, name, True)))
    return _faster_as_written(request, result, builders)


def _over_nvlink(request: SynthesisRequest, name: str,
                 family: Callable[..., SynthesisResult]) -> list[Callable[[], SynthesisResult]]:
    """What builds ``family``'s trees over NVLink alone (judged against the bound over
    every link), where the machine has NVLink and other links; else nothing."""
    from dataclasses import replace

    from arborcc.synth.bounds import collective_bound
    from arborcc.synth.flowgraph import check_strongly_connected, flow_graph
    from arborcc.topology.model import LinkKind

    topology = request.topology
    kinds = {l.kind for l in topology.links.values()}
    if LinkKind.NVLINK not in kinds or kinds <= {LinkKind.NVLINK}:
        return []

    def build() -> SynthesisResult:
        check_strongly_connected(flow_graph(topology, "nvlink"), request.collective)
        bound = collective_bound(topology, request.collective, request.root, "nvlink")
        out = family(replace(request, links="nvlink", bound=bound), name)
        out.bound = request.bound.algbw
        return out
    return [build]


def _faster_as_written(request: SynthesisRequest, result: SynthesisResult,
                       builders: list[tuple[str, Callable[[], SynthesisResult]]],
                       than: str = "the {us:.0f} us of the trees over every link as written") -> SynthesisResult:
    """``result``, or the fastest of the candidates ``builders`` make ((label, build)
    each; one that cannot be built is skipped) whose file the simulator times faster
    (:data:`PIPELINED_MARGIN`) as written at the request's size
    (:data:`~arborcc.synth.result.RANKING_SIZE` without one; calls above :data:`LOOPED_CALL` as 1 GiB),
    with a note saying so and what it beat (``than``, given ``result``'s time as ``us``)."""
    from arborcc.errors import SynthesisError
    from arborcc.sim.protocol_choice import time_as_written

    if not builders:
        return result
    topology, size = request.topology, _reference_size(request)
    beaten = time_as_written(result.algorithm, topology, size)
    best, best_time, how = result, PIPELINED_MARGIN * beaten, ""
    for label, build in builders:
        try:
            candidate = build()
        except SynthesisError:  # e.g. NVLink alone does not reach every rank
            continue
        t = time_as_written(candidate.algorithm, topology, size)
        if t < best_time:
            best, best_time, how = candidate, t, label
    if best is not result:
        best.notes.append(f"{how}: simulated {best_time * 1e6:.0f} us at {size} bytes, faster than "
                          + than.format(us=beaten * 1e6))
    return best


#: chunks per tree the candidates of :func:`_switch_broadcast` carry, one chunk per transfer
SWITCH_BROADCAST_SCALES = (1, 4, 16, 64)
#: the most chunks per loop they may have (the largest count :mod:`.quantize` allows)
SWITCH_BROADCAST_MOST_CHUNKS = 1024


def _switch_broadcast(request: SynthesisRequest, name: str) -> SynthesisResult | None:
    """On a switch machine, the scatter-and-forward trees of
    :func:`arborcc.synth.trees.switch_broadcast_trees` (None elsewhere): they reach the
    switch ports' bound, the most any file can reach there (MSCCL XML names no route: a
    packing's PCIe hops run over the pair's NVSwitch route as written), so the packing is
    not built.

    Every tree carries ``s`` chunks, each its own transfer, relays unfused
    (:func:`~arborcc.synth.lower_emit.lower_broadcast`), for ``s`` in
    :data:`SWITCH_BROADCAST_SCALES`; the candidate the simulator times fastest as
    written at the request's size (:data:`~arborcc.synth.result.RANKING_SIZE` without one; calls
    above :data:`LOOPED_CALL` pipeline as 1 GiB does) is kept, fewer chunks unless
    more are faster by 0.5%. A relay forwards a transfer once it has all of it, so the
    pipeline fills and drains by a transfer per level: small transfers suit mid sizes,
    where a chunk is below the protocol's slice (DGX-2 at 64 MiB: 16 chunks 92.4 GB/s,
    512 chunks 114.1), few chunks small calls (1 MiB: 19.6 and 15.7 with Simple);
    from 1 GiB every slice is a full one and all are equal."""
    from functools import partial

    from arborcc.sim.protocol_choice import time_as_written
    from arborcc.synth.lower_emit import lower_broadcast
    from arborcc.synth.lower_search import within_limits
    from arborcc.synth.quantize import TOLERANCE
    from arborcc.synth.result import SynthesisResult
    from arborcc.synth.trees import switch_broadcast_trees

    topology = request.topology
    trees = switch_broadcast_trees(topology, topology.ranks[request.root], request.links)
    if trees is None:
        return None
    size = _reference_size(request)
    best, best_time = None, 0.0
    for scale in SWITCH_BROADCAST_SCALES:
        if scale > 1 and scale * len(trees) > SWITCH_BROADCAST_MOST_CHUNKS:
            break
        lower = partial(lower_broadcast, rounds=scale, fuse=False, balance=False)
        lowered = within_limits(lower, topology, trees, [scale] * len(trees), name)
        if best is not None and not (lowered.limits and lowered.limits[1]):
            break  # more chunks only lengthen the thread blocks
        t = time_as_written(lowered.algorithm, topology, size)
        if best is None or t < (1 - TOLERANCE) * best_time:
            best, best_time, best_scale = lowered, t, scale
    chunks = best_scale * len(trees)
    return SynthesisResult.from_lowered(
        "trees", request, best,
        [f"scatter over {len(trees)} trees through {len(topology.ranks) - 1} relays on the switch "
         f"({sum(t.weight for t in trees) / 1e9:.2f} GB/s), {chunks} chunks, one per transfer; relays forward "
         f"to all their children at once: simulated {best_time * 1e6:.0f} us at {size} bytes"],
        trees, [best_scale] * len(trees))


def _per_root_trees(request: SynthesisRequest, name: str, chunks: int | None = None,
                    scale: int = 1, routed: bool = False) -> SynthesisResult:
    """All-gather on one set of per-root out-trees (ForestColl), reduce-scatter on one
    set of per-root in-trees: the halves of :func:`_rs_ag_allreduce`. ``chunks``,
    ``scale``, ``routed``: as :func:`_tree_allreduce` takes them, per rank."""
    from arborcc.synth.lower_emit import lower_allgather, lower_reducescatter
    from arborcc.synth.lower_search import within_limits
    from arborcc.synth.packing import pack_allgather, pack_reducescatter
    from arborcc.synth.quantize import TOLERANCE
    from arborcc.synth.result import SynthesisResult

    topology, collective = request.topology, request.collective
    pack = pack_allgather if collective == "allgather" else pack_reducescatter
    packing = pack(topology, request.links, threshold=TOLERANCE, bound=request.bound, routed=routed)
    a = _apportion(topology, list(packing.trees), packing.algbw, chunks=chunks)
    lower = lower_allgather if collective == "allgather" else lower_reducescatter
    used = [t for t, c in zip(packing.trees, a.counts) if c]
    counts = [c * scale for c in a.counts if c]
    lowered = within_limits(lower, topology, used, counts, name, takes_rounds=True, takes_fuse=True,
                            timed_at=_reference_size(request))
    return SynthesisResult.from_lowered(
        "trees", request, lowered,
        [f"per-root packing {packing.algbw / 1e9:.2f} GB/s with {packing.num_trees} trees"
         f"{' on the runtime routes' if routed else ''}, "
         f"{a.chunks * scale} chunks per rank"], used, counts)


def _tree_allreduce_family(request: SynthesisRequest, name: str, chunks: int | None = None,
                           scale: int = 1, routed: bool = False) -> SynthesisResult:
    """The all-reduce family with the higher bound (reduce-scatter + all-gather, or reduce
    + broadcast through one root); the other only if rounding left the first short of
    99%. ``chunks``, ``scale``, ``routed``: as :func:`_tree_allreduce` takes them."""
    from arborcc.synth.quantize import TOLERANCE

    families = [lambda: _rs_ag_allreduce(request, name, chunks, scale, routed),
                lambda: _tree_allreduce(request, name, chunks, scale, routed)]
    if request.bound.best == "tree":
        families.reverse()
    result = families[0]()
    if result.ratio < 1 - 2 * TOLERANCE:
        result = max(result, families[1](), key=lambda c: c.algbw)
    return result


#: the most ranks on which :func:`_same_trees_builders` packs the trees of every root
SAME_TREES_MOST_RANKS = 8


def _same_trees_builders(request: SynthesisRequest, name: str) -> list[tuple[str, Callable[[], SynthesisResult]]]:
    """What builds the all-reduce through each rank on the same trees
    (:func:`_same_trees_allreduce`), on one machine of at most
    :data:`SAME_TREES_MOST_RANKS` ranks joined by direct links (no NVSwitch: there
    :func:`~arborcc.synth.trees.common_switch` routes every pair through the switch,
    whose ports a tree through one root leaves idle), over every link; else nothing.
    The root is the one whose file the simulator times fastest: the packings differ,
    and so does how well each pipelines. It replaces the trees of the link split
    wherever it is faster as written (:func:`_faster_as_written`)."""
    from arborcc.synth.trees import common_switch

    topology = request.topology
    hosts = {topology.devices[g].host for g in topology.ranks}
    if (request.links != "all" or len(hosts) > 1 or len(topology.ranks) > SAME_TREES_MOST_RANKS
            or common_switch(topology) is not None):
        return []
    return [(f"reduce + broadcast through rank {i} on the same trees",
             lambda r=r: _same_trees_allreduce(request, name, r)) for i, r in enumerate(topology.ranks)]


def _same_trees_allreduce(request: SynthesisRequest, name: str, root: str) -> SynthesisResult:
    """All-reduce through ``root`` on one packing of in-trees, each chunk reduced up its
    tree and broadcast back down the same tree (Blink section 3.3), every hop on its
    pair's runtime route: :func:`~arborcc.synth.packing.pack_reduce` with
    ``both_ways`` shares each link's capacity between a tree's two directions, so its
    rate (the best such trees reach) can be below :func:`_tree_allreduce`'s split of
    the links, yet its file runs faster on DGX-1V allocations: GPUs 0,1,2,5 at 1 GiB,
    53.3 GB/s of the split's 60.0, and 59.6 GB/s busbw simulated where the split's trees
    wrote 51.8 before; GPUs 0,1,2,5,6,7 71.2 where they wrote 53.1 (docs/synthesis.md)."""
    from arborcc.synth.lower_emit import lower_allreduce_reduce_broadcast
    from arborcc.synth.lower_search import within_limits
    from arborcc.synth.packing import pack_reduce
    from arborcc.synth.quantize import TOLERANCE
    from arborcc.synth.result import SynthesisResult

    topology = request.topology
    packing = pack_reduce(topology, root, request.links, threshold=TOLERANCE, minimize_trees=False, routed=True,
                          both_ways=True)
    a = _apportion(topology, list(packing.trees), packing.rate, both_ways=True)
    used = [(t, c) for t, c in zip(packing.trees, a.counts) if c]
    lowered = within_limits(lower_allreduce_reduce_broadcast, topology, used, [(t.reversed(), c) for t, c in used],
                            name, takes_rounds=True, takes_fuse=True, timed_at=_reference_size(request))
    trees = [t for t, _ in used]
    return SynthesisResult.from_lowered(
        "trees", request, lowered,
        [f"reduce + broadcast through rank {topology.ranks.index(root)} on the same {len(trees)} trees (Blink 3.3), "
         f"each used both ways, on the runtime routes: {a.rate / 1e9:.2f} GB/s, {a.chunks} chunks"],
        trees + [t.reversed() for t in trees], [c for _, c in used] * 2)


#: the fraction of the trees' simulated time a candidate's must be below to replace them:
#: 1, any faster candidate, since each is timed as its file runs at the size the file is
#: for (the steady-state rate the trees at full precision reach is a property of their
#: schedule, not their speed); the tests set 0 to keep the trees at full precision
PIPELINED_MARGIN = 1.0
#: the candidates are built only where a call of this size runs the program's loop once
#: (at most one Simple slice per chunk)
LOOPED_CALL = 1 << 30
#: chunks per shard the coarse candidates apportion ...
COARSE_CHUNKS = (1, 2)
#: ... each tree's count then multiplied until the loop holds about this many chunks
COARSE_LOOP = 256


def _fastest_pipelined(request: SynthesisRequest, result: SynthesisResult, name: str,
                       family: Callable[..., SynthesisResult]) -> SynthesisResult:
    """``result`` (the trees apportioned to within 0.5% of the packing's rate), or the
    candidate ``family`` builds (the all-reduce's; reduce-scatter's or all-gather's, the
    halves of its reduce-scatter + all-gather) that the simulator times faster
    (:data:`PIPELINED_MARGIN`) at the request's size (at most 1 GiB;
    :data:`~arborcc.synth.result.RANKING_SIZE` without one), when ``result`` needs so
    many chunks per loop that a 1 GiB call runs its loop once (:data:`LOOPED_CALL`).

    The candidates pipeline where ``result`` cannot. Its many light trees need many
    chunks per loop to apportion (DGX A100: 28 trees, 1024 chunks per loop), so a large
    call runs the program's loop once and all pipelining has to come from its steps: a
    relay's fused receive-send forwards piece by piece, but a step that waits on
    another thread block's step waits for all of it (a root broadcasting what it
    reduced, a rank reducing several children into one slot), and the 64 steps per
    thread block leave room for a few rounds only - and none once the trees' thread
    blocks must share channels. The candidates: the same packing apportioned to 1 or 2
    chunks per shard (:data:`COARSE_CHUNKS`: the heavy trees only, a few percent
    below the packing's rate), every count multiplied so the loop holds about
    :data:`COARSE_LOOP` chunks, which the rounds cut into single-chunk transfers; and,
    where the machine has links besides NVLink, the trees over NVLink alone (one star
    per root on a switch machine). Each program is timed as its file runs (no routes,
    its fastest protocol at the size: the time synth reports). Simulated busbw at 1 GiB (64 MiB),
    before -> after: DGX A100 129.5 (135.2) -> 239.4 (217.8), DGX-1V 94.3 as written -> 105.8 (87.9); the
    rest in ``benchmarks/synthesis/tree_pipelining.py``. A candidate's steady-state rate is below
    the packing's, which the result's ratio reports. The halves alone had none of this
    and stayed far below the all-reduce: DGX-2 reduce-scatter at 1 GiB 30.7 GB/s busbw
    (the all-reduce 121-125), now 115.7; 2 x DGX A100 94.3, now 247.6."""
    from arborcc.sim.protocols import PROTOCOL_MODELS

    looped = result.algorithm.chunks_per_loop * PROTOCOL_MODELS["Simple"].slice_bytes >= LOOPED_CALL
    if request.links != "all" or not looped:
        return result  # a large call runs the loop more than once: it pipelines over the loop
    shards = result.algorithm.chunks_per_loop // max(1, result.chunks)  # 1 for reduce + broadcast, else ranks
    builders = [(f"{c} chunk{'s' if c > 1 else ''} per shard x {max(1, COARSE_LOOP // (shards * c))}",
                 lambda c=c: family(request, name, c, max(1, COARSE_LOOP // (shards * c))))
                for c in COARSE_CHUNKS]
    builders += [("NVLink-only trees", build) for build in _over_nvlink(request, name, family)]
    return _faster_as_written(request, result, builders,
                              f"the trees at full precision ({result.chunks} chunks per shard, a loop too long to "
                              "pipeline at large sizes)")
