"""Strategies: each turns a Topology and a collective into a verified Algorithm.

| strategy       | source                                   | collectives |
|----------------|------------------------------------------|-------------|
| trees          | Blink sections 3.1-3.3 (tree packing), ForestColl per-root packings; gather/scatter as a single-sink flow split into paths | all seven |
| binary-trees   | MXNet tree all-reduce proposal            | allreduce |
| blueconnect    | BlueConnect section 3, Algorithm 1        | allreduce |
| hierarchical   | two-level reduce-scatter / all-gather      | allreduce |
| three-phase    | Blink section 3.5 (multi-server trees)     | allreduce |
| nccl-ring      | NCCL's ring search (baselines reference)  | allreduce |
| double-binary-tree | NCCL's double binary trees (baselines reference) | allreduce |
| halving-doubling | recursive halving + doubling (Thakur et al.; power-of-two ranks) | allreduce |
| ring           | one ring in rank order (Patarasuk & Yuan) | allreduce |
| auto           | the fastest of the above by the bandwidth model | all seven |

Every result carries the collective's bound (:mod:`.bounds`, at the topology's link
bandwidths) and the algbw the lowered algorithm achieves in the steady-state
bandwidth model (:mod:`arborcc.sim.bandwidth`), so ``algbw / bound`` says how close to
optimal the *emitted* algorithm is, not just the schedule it came from.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable

from arborcc.errors import SynthesisError
from arborcc.ir.limits import check_dialect_limits
from arborcc.ir.model import Algorithm
from arborcc.synth import bounds as B
from arborcc.synth import lower as L
from arborcc.synth.bounds import collective_bound
from arborcc.synth.flowgraph import check_routable, flow_graph
from arborcc.synth.gather import synth_gather
from arborcc.synth.packing import pack_allgather, pack_broadcast, pack_reduce, pack_reducescatter
from arborcc.synth.quantize import CHUNK_COUNTS, TOLERANCE, apportion
from arborcc.synth.trees import Hop, Tree
from arborcc.topology.model import Topology, TopologyBuilder
from arborcc.verify import check_algorithm


COLLECTIVES = ("allreduce", "broadcast", "reduce", "allgather", "reducescatter", "gather", "scatter")
ROOTED = ("broadcast", "reduce", "gather", "scatter")
AnyBound = B.Bound | B.AllreduceBound
#: all-reduce strategies ``auto`` leaves out above this many ranks, where their cost
#: explodes while others reach the bound (DGX A100 fat trees, 2-core machine, measured
#: with ``arborcc synth --machine dgx-a100 --nodes N --strategy S``: trees
#: 0.3 s at 32 ranks, over its 30 s limit at 64; binary-trees 1.2 s at 32, 10 s at
#: 64, 194 s at 128; three-phase 3.8 s at 128, 28 s at 256; nccl-ring 4.3 s at 128
#: and minutes at 1024, where its rings hold millions of steps, as the plain ring's
#: two million); asking for them by name still runs them
AUTO_RANK_LIMITS = {"trees": 32, "binary-trees": 32, "three-phase": 128, "nccl-ring": 128, "ring": 128}


@dataclass
class SynthesisResult:
    """A verified algorithm with its bound and its predicted large-message algbw (B/s)."""

    strategy: str
    collective: str
    algorithm: Algorithm
    bound: float
    algbw: float
    trees: list[Tree] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)  #: chunks each tree carries (same order)
    routes: dict = field(default_factory=dict)
    chunks: int = 0
    synth_time: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.algbw / self.bound if self.bound else 0.0


def _algbw_bound(topology: Topology, collective: str, root: int, links: str, bound: AnyBound | None) -> float:
    """The bound's algbw (B/s), computed unless the caller has it."""
    return (collective_bound(topology, collective, root, links) if bound is None else bound).algbw


def _apportion(topology: Topology, trees: list[Tree], target: float, both_ways: bool = False,
               chunks: int | None = None):
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
    b = TopologyBuilder(topology.name, source=topology.name, meta=topology.meta)
    for d in topology.devices.values():
        b.add_device(d)
    floor = 1e-6 * max(capacity.values())
    for key, l in topology.links.items():
        if capacity.get(key, 0.0) > floor:
            b.add_link(replace(l, bandwidth=capacity[key]))
    return b.build(ranks=topology.ranks)


def _tree_allreduce(topology: Topology, bound: B.AllreduceBound, links: str, name: str) -> SynthesisResult:
    """Reduce into one root and broadcast from it at once (Blink section 3.3): the LP of
    :func:`bounds.tree_allreduce_split` divides every link between the two halves, each
    half is packed on its share, and each chunk is reduced along a reduce tree then
    broadcast along a broadcast tree. The root is the bound's best one (rank 0 when
    the bound solved no tree LP because reduce-scatter + all-gather is better)."""
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
    bcast = pack_broadcast(half_b, r, links, threshold=TOLERANCE, minimize_trees=False)
    red = pack_reduce(half_r, r, links, threshold=TOLERANCE, minimize_trees=False)
    # one shard: reduce trees and broadcast trees each carry the whole buffer once
    a_r = _apportion(half_r, list(red.trees), red.rate)
    a_b = _apportion(half_b, list(bcast.trees), bcast.rate)
    # both halves need the same chunk count: the first count where both keep their rate
    best = None
    for chunks in (c for c in CHUNK_COUNTS if c >= max(a_r.chunks, a_b.chunks)):
        r_, b_ = (_apportion(half_r, list(red.trees), red.rate, chunks=chunks),
                  _apportion(half_b, list(bcast.trees), bcast.rate, chunks=chunks))
        if best is None or min(r_.rate, b_.rate) > min(best[0].rate, best[1].rate):
            best = (r_, b_)
        if min(r_.rate / red.rate, b_.rate / bcast.rate) >= 1 - TOLERANCE:
            best = (r_, b_)
            break
    a_r, a_b = best
    chunks, counts_r, counts_b = a_r.chunks, list(a_r.counts), list(a_b.counts)
    used_r = [(t, c) for t, c in zip(red.trees, counts_r) if c]
    used_b = [(t, c) for t, c in zip(bcast.trees, counts_b) if c]
    lowered = L.within_limits(L.lower_allreduce_reduce_broadcast, topology, used_r, used_b, name)
    return _from_lowered("trees", "allreduce", lowered, bound.algbw, [t for t, _ in used_r + used_b],
                         [f"reduce + broadcast through rank {root} (Blink 3.3) at {rate / 1e9:.2f} GB/s: "
                          f"{len(used_r)} reduce and {len(used_b)} broadcast trees, {chunks} chunks"],
                         [c for _, c in used_r + used_b])


def _from_lowered(strategy: str, collective: str, lowered: L.Lowered, bound: float, trees: list[Tree],
                  notes: list[str], counts: list[int] | None = None) -> SynthesisResult:
    return SynthesisResult(strategy, collective, lowered.algorithm, bound, lowered.estimate.algbw, trees,
                           list(counts or []), lowered.routes, lowered.chunks, notes=notes + lowered.notes)


def synth_trees(topology: Topology, collective: str, root: int = 0, links: str = "all",
                bound: AnyBound | None = None, size: int | None = None) -> SynthesisResult:
    """Blink: pack arborescences to the bound, round to chunks, lower, verify."""
    bound = collective_bound(topology, collective, root, links) if bound is None else bound
    r, name = topology.ranks[root], f"trees-{collective}"
    if collective in ("gather", "scatter"):  # trees that are paths: a flow decomposition
        lowered, notes, _ = synth_gather(topology, collective, root, links, name)
        return _from_lowered("trees", collective, lowered, bound.algbw, [], notes)
    if collective in ROOTED:
        pack = pack_broadcast if collective == "broadcast" else pack_reduce
        packing = pack(topology, r, links, threshold=TOLERANCE)
        a = _apportion(topology, list(packing.trees), packing.rate)
        lower = L.lower_broadcast if collective == "broadcast" else L.lower_reduce
        used = [t for t, c in zip(packing.trees, a.counts) if c]
        lowered = L.within_limits(lower, topology, used, [c for c in a.counts if c], name)
        return _from_lowered("trees", collective, lowered, bound.algbw, used,
                             [f"packing {packing.rate / 1e9:.2f} GB/s with {packing.num_trees} trees "
                              f"({packing.method}), {a.chunks} chunks"], [c for c in a.counts if c])
    if collective in ("allgather", "reducescatter"):
        pack = pack_allgather if collective == "allgather" else pack_reducescatter
        packing = pack(topology, links, threshold=TOLERANCE)
        a = _apportion(topology, list(packing.trees), packing.algbw)
        lower = L.lower_allgather if collective == "allgather" else L.lower_reducescatter
        used = [t for t, c in zip(packing.trees, a.counts) if c]
        lowered = L.within_limits(lower, topology, used, [c for c in a.counts if c], name)
        return _from_lowered("trees", collective, lowered, bound.algbw, used,
                             [f"per-root packing {packing.algbw / 1e9:.2f} GB/s with {packing.num_trees} trees, "
                              f"{a.chunks} chunks per rank"], [c for c in a.counts if c])
    # all-reduce: reduce-scatter + all-gather on per-root trees, or reduce + broadcast
    # over trees from one root on a split of the links. The family with the higher
    # bound is built; the other only if rounding left the first short of 99%.
    families = [lambda: _rs_ag_allreduce(topology, links, bound.algbw, name),
                lambda: _tree_allreduce(topology, bound, links, name)]
    if bound.best == "tree":
        families.reverse()
    result = families[0]()
    if result.ratio < 1 - 2 * TOLERANCE:
        result = max(result, families[1](), key=lambda c: c.algbw)
    return result


def _rs_ag_allreduce(topology: Topology, links: str, bound: float, name: str) -> SynthesisResult:
    """All-reduce as reduce-scatter on reversed per-root trees + all-gather on the
    per-root out-trees of one all-gather packing (ForestColl)."""
    packing = pack_allgather(topology, links, threshold=TOLERANCE)
    a = _apportion(topology, list(packing.trees), packing.algbw / 2, both_ways=True)
    used = [t for t, c in zip(packing.trees, a.counts) if c]
    lowered = L.within_limits(L.lower_allreduce_rs_ag, topology, used, [c for c in a.counts if c], name)
    return _from_lowered("trees", "allreduce", lowered, bound, used,
                         [f"reduce-scatter + all-gather on {len(used)} per-root trees, "
                          f"{a.chunks} chunks per rank"], [c for c in a.counts if c])


def synth_binary_trees(topology: Topology, collective: str, root: int = 0, links: str = "all",
                       bound: AnyBound | None = None, size: int | None = None) -> SynthesisResult:
    """MXNet: one balanced max-weight binary tree per root, reduce + broadcast each; for a
    ``size`` below MXNet's threshold, only the first root's tree (latency-bound sizes)."""
    from arborcc.synth.binary_trees import binary_tree_schedule

    _only_allreduce("binary-trees", collective)
    bound = _algbw_bound(topology, collective, root, links, bound)
    schedule = binary_tree_schedule(topology)
    chosen = schedule.trees if size is None else schedule.trees_for(size)
    trees = [Tree(topology.ranks[bt.root],
                  tuple(Hop(topology.ranks[e.child], topology.ranks[e.parent], e.path) for e in bt.edges),
                  1.0, inward=True) for bt in chosen]
    lowered = L.within_limits(L.lower_allreduce_trees, topology, trees, [1] * len(trees), "binary-trees-allreduce")
    how = (f"one tree: {size} bytes is below MXNet's single-tree threshold of {schedule.threshold_bytes}"
           if len(chosen) == 1 and len(schedule.trees) > 1 else
           f"{len(trees)} binary trees, one per root (MXNet uses only the first below "
           f"{schedule.threshold_bytes} bytes)")
    return _from_lowered("binary-trees", collective, lowered, bound, trees, [how], [1] * len(trees))


def _only_allreduce(strategy: str, collective: str) -> None:
    if collective != "allreduce":
        raise SynthesisError(f"strategy {strategy} builds allreduce only, not {collective} "
                             f"(use --strategy trees)")


def synth_nccl_ring(topology: Topology, collective: str, root: int = 0, links: str = "all",
                    bound: AnyBound | None = None, size: int | None = None) -> SynthesisResult:
    """The rings NCCL would build (NVLink-only when possible), as MSCCL channels."""
    from arborcc.synth.nccl_rings import nccl_rings

    _only_allreduce("nccl-ring", collective)
    bound = _algbw_bound(topology, collective, root, links, bound)
    rings = nccl_rings(topology)
    lowered = L.lower_ring_allreduce(topology, rings.rings, rings.hops or None, "nccl-ring-allreduce")
    return _from_lowered("nccl-ring", collective, lowered, bound, [],
                         [f"{len(rings.rings)} rings over {rings.link_kind.value}"])


def synth_double_binary_tree(topology: Topology, collective: str, root: int = 0, links: str = "all",
                             bound: AnyBound | None = None, size: int | None = None) -> SynthesisResult:
    """NCCL's double binary tree (two complementary binary trees over the nodes, a chain
    inside each node), each tree reducing and broadcasting half of the buffer."""
    from arborcc.synth.double_binary_tree import double_binary_tree

    _only_allreduce("double-binary-tree", collective)
    bound = _algbw_bound(topology, collective, root, links, bound)
    dbt = double_binary_tree(topology)
    trees = []
    for parents in dbt.parents:
        top = next(r for r, p in parents.items() if p is None)
        hops = tuple(Hop(topology.ranks[c], topology.ranks[p],
                         topology.route(topology.ranks[c], topology.ranks[p]).path)
                     for c, p in sorted(parents.items()) if p is not None)
        trees.append(Tree(topology.ranks[top], hops, 1.0, inward=True))
    lowered = L.within_limits(L.lower_allreduce_trees, topology, trees, [1, 1], "double-binary-tree-allreduce")
    return _from_lowered("double-binary-tree", collective, lowered, bound, trees,
                         [f"two complementary binary trees over {dbt.nodes} node(s), chains inside nodes"],
                         [1, 1])


def synth_ring(topology: Topology, collective: str, root: int = 0, links: str = "all",
               bound: AnyBound | None = None, size: int | None = None) -> SynthesisResult:
    """One ring in rank order."""
    _only_allreduce("ring", collective)
    bound = _algbw_bound(topology, collective, root, links, bound)
    lowered = L.lower_ring_allreduce(topology, [list(range(topology.num_ranks))], None, "ring-allreduce")
    return _from_lowered("ring", collective, lowered, bound, [], ["one ring in rank order"])


def synth_blueconnect(topology: Topology, collective: str, root: int = 0, links: str = "all",
                      bound: AnyBound | None = None, size: int | None = None) -> SynthesisResult:
    """BlueConnect (Cho et al., SysML 2019, section 3): the rank count factored along the
    hierarchy, reduce-scatter stages up and all-gather stages down (Algorithm 1), ring or
    halving-doubling per stage as its model (eqs. 1-10) prefers for large messages."""
    from arborcc.synth.blueconnect import choose_blueconnect
    from arborcc.synth.lower_stages import describe, hierarchical_plan, lower_blueconnect

    _only_allreduce("blueconnect", collective)
    bound = _algbw_bound(topology, collective, root, links, bound)
    # the full factor search costs seconds per hundred ranks; beyond that follow the hosts
    plan = (choose_blueconnect(topology, 1 << 30) if topology.num_ranks <= 128
            else hierarchical_plan(topology, algorithm=None, name="blueconnect"))
    lowered = lower_blueconnect(topology, plan, "blueconnect-allreduce")
    return _from_lowered("blueconnect", collective, lowered, bound, [], [describe(plan)])


def synth_hierarchical(topology: Topology, collective: str, root: int = 0, links: str = "all",
                       bound: AnyBound | None = None, size: int | None = None) -> SynthesisResult:
    """The two-level baseline: reduce-scatter inside each node, reduce-scatter and
    all-gather across nodes between GPUs of equal local index, all-gather inside."""
    from arborcc.synth.lower_stages import hierarchical_plan, lower_blueconnect

    _only_allreduce("hierarchical", collective)
    bound = _algbw_bound(topology, collective, root, links, bound)
    lowered = lower_blueconnect(topology, hierarchical_plan(topology), "hierarchical-allreduce")
    return _from_lowered("hierarchical", collective, lowered, bound, [],
                         ["reduce-scatter in each node, then across nodes, all-gather back"])


def synth_three_phase(topology: Topology, collective: str, root: int = 0, links: str = "all",
                      bound: AnyBound | None = None, size: int | None = None) -> SynthesisResult:
    """Blink's multi-server all-reduce (section 3.5, Figure 10): per-server trees reduce
    each partition into a local root, the roots all-reduce it across servers over
    one-hop trees, and each root broadcasts it back over the server's trees."""
    from arborcc.synth.three_phase import synth_three_phase as three_phase

    _only_allreduce("three-phase", collective)
    bound = _algbw_bound(topology, collective, root, links, bound)
    tp = three_phase(topology, links)
    return _from_lowered("three-phase", collective, tp.lowered, bound, tp.trees, tp.notes, tp.counts)


def synth_halving_doubling(topology: Topology, collective: str, root: int = 0, links: str = "all",
                           bound: AnyBound | None = None, size: int | None = None) -> SynthesisResult:
    """Recursive halving reduce-scatter + recursive doubling all-gather (Thakur,
    Rabenseifner & Gropp; BlueConnect eq. 2) in rank order, from the algorithm library."""
    from arborcc.library.halving_doubling import hd_allreduce
    from arborcc.sim.bandwidth import steady_state_bandwidth

    _only_allreduce("halving-doubling", collective)
    n = topology.num_ranks
    if n & (n - 1):
        raise SynthesisError(f"halving-doubling needs a power-of-two rank count, {topology.name} has {n}")
    bound = _algbw_bound(topology, collective, root, links, bound)
    algo = hd_allreduce(n).algorithm
    estimate = steady_state_bandwidth(algo, topology)
    return SynthesisResult("halving-doubling", collective, algo, bound, estimate.algbw,
                           chunks=algo.chunks_per_loop, notes=["recursive halving-doubling in rank order"])


STRATEGIES: dict[str, Callable[..., SynthesisResult]] = {
    "trees": synth_trees,
    "binary-trees": synth_binary_trees,
    "blueconnect": synth_blueconnect,
    "hierarchical": synth_hierarchical,
    "three-phase": synth_three_phase,
    "nccl-ring": synth_nccl_ring,
    "double-binary-tree": synth_double_binary_tree,
    "halving-doubling": synth_halving_doubling,
    "ring": synth_ring,
}


def synthesize(topology: Topology, collective: str, strategy: str = "auto", root: int = 0,
               links: str = "all", progress: Callable[[str], None] | None = None,
               size: int | None = None, dialect: str = "executor") -> SynthesisResult:
    """Run one strategy (or, with ``auto``, every one that applies and keep the fastest).

    ``size``: the buffer size in bytes the algorithm is meant for, for strategies whose
    schedule depends on it (binary-trees: one tree below MXNet's threshold); ``None``
    means large, bandwidth-bound buffers. ``dialect``: the MSCCL runtime the algorithm
    is for; ``auto`` prefers candidates within its limits (steps per thread block,
    thread blocks per rank) over faster ones that are not.
    """
    if size is not None and size <= 0:
        raise SynthesisError(f"size must be a positive number of bytes, got {size}")
    if collective not in COLLECTIVES:
        raise SynthesisError(f"unknown collective {collective!r} (known: {', '.join(COLLECTIVES)})")
    if strategy != "auto" and strategy not in STRATEGIES:
        raise SynthesisError(f"unknown strategy {strategy!r} (known: auto, {', '.join(STRATEGIES)})")
    if topology.num_ranks < 2:
        raise SynthesisError(f"{topology.name} has {topology.num_ranks} GPU; a collective needs at least 2")
    if not 0 <= root < topology.num_ranks:
        raise SynthesisError(f"root {root} is not a rank (0-{topology.num_ranks - 1})")
    check_routable(topology, hub=0)
    t0 = time.perf_counter()
    if progress:
        progress(f"bound: the best {collective} rate the links of {topology.name} allow")
    bound = collective_bound(topology, collective, root, links)
    names = [strategy] if strategy != "auto" else [
        s for s in STRATEGIES if collective == "allreduce" or s == "trees"]
    results, skipped = [], []
    if strategy == "auto" and collective == "allreduce":
        for name, limit in AUTO_RANK_LIMITS.items():
            if topology.num_ranks > limit:
                names.remove(name)
                skipped.append(f"{name} (auto leaves it out above {limit} ranks; --strategy {name} runs it)")
    for name in names:
        if progress:
            progress(f"{name}: synthesizing {collective} on {topology.name}")
        try:
            results.append(STRATEGIES[name](topology, collective, root, links, bound=bound, size=size))
        except SynthesisError as e:
            if strategy != "auto":
                raise
            skipped.append(f"{name} ({e})")
    if not results:
        raise SynthesisError(f"no strategy can build {collective} on {topology.name}: " + "; ".join(skipped))
    fits = {id(r): not check_dialect_limits(r.algorithm, dialect) for r in results} if len(results) > 1 else {}
    best = max(results, key=lambda r: (fits.get(id(r), True), r.algbw))
    if progress:
        progress(f"verifying the {best.strategy} algorithm")
    check_algorithm(best.algorithm)  # every algorithm arborcc hands out is proved first
    best.synth_time = time.perf_counter() - t0
    if strategy == "auto":
        best.notes.append("auto chose " + best.strategy + " among " + ", ".join(
            f"{r.strategy} {r.algbw / 1e9:.1f}" + ("" if fits.get(id(r), True) else f" (over the {dialect} limits)")
            for r in results) + " GB/s"
            + ("; skipped " + "; ".join(skipped) if skipped else ""))
        best.strategy = f"auto:{best.strategy}"
    return best
