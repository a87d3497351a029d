"""Tree schedules: the intermediate that tree strategies (Blink, ForestColl) produce.

A :class:`Tree` is an arborescence over the *ranks*: a root and one :class:`Hop` per
other rank. A hop is a point-to-point transfer between two ranks along a path of
devices; the interior devices of the path are relays (PCIe switches, CPUs,
NVSwitches, NICs, network switches), never ranks, because only ranks hold buffers.
So a tree's directed edges over devices (:meth:`Tree.device_edges`) may pass through
switch vertices, and may use one link more than once (two hops routed through the
same switch port): relays forward, they do not duplicate or reduce data, which is how
NVSwitch (without NVLS multicast), PCIe and InfiniBand switches behave, and which is
what lowering a tree to point-to-point sends needs.

Data flows along hops: for an out-tree (broadcast, all-gather) from parent to child;
for an in-tree (``inward=True``: reduce, reduce-scatter) from child to parent, towards
the root. ``weight`` is the rate given to the tree in bytes/s.

A :class:`TreePacking` is a set of weighted trees with the bound it was measured
against; :func:`check_packing` proves it is a packing: every tree spans the ranks and
no link carries more than its bandwidth (Blink equations 1-3).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Sequence

from arborcc.errors import VerificationError
from arborcc.synth.bounds import Bound
from arborcc.synth.flowgraph import LinkSelector, select_links
from arborcc.topology.model import GB, Topology


@dataclass(frozen=True)
class Hop:
    """A transfer ``src -> dst`` between ranks along ``path`` (devices, ends included)."""

    src: str
    dst: str
    path: tuple[str, ...]

    def links(self) -> Iterator[tuple[str, str]]:
        """The directed links the hop uses, in order."""
        return zip(self.path, self.path[1:])

    @property
    def relays(self) -> tuple[str, ...]:
        return self.path[1:-1]

    def reversed(self) -> "Hop":
        return Hop(self.dst, self.src, tuple(reversed(self.path)))


@dataclass(frozen=True)
class Tree:
    """An arborescence of the ranks rooted at ``root`` carrying ``weight`` B/s."""

    root: str
    hops: tuple[Hop, ...]
    weight: float
    inward: bool = False

    @property
    def edges(self) -> list[tuple[str, str]]:
        """Rank-to-rank edges in the direction data flows."""
        return [(h.src, h.dst) for h in self.hops]

    def device_edges(self) -> list[tuple[str, str]]:
        """Every directed device link the tree uses, once per use (switch vertices included)."""
        return [l for h in self.hops for l in h.links()]

    def link_use(self) -> Counter:
        """How many times the tree uses each directed link."""
        return Counter(self.device_edges())

    def parent(self) -> dict[str, str]:
        """``child -> parent`` in the tree's arborescence (away from the root)."""
        if self.inward:
            return {h.src: h.dst for h in self.hops}
        return {h.dst: h.src for h in self.hops}

    def depth(self) -> int:
        """Number of rank-to-rank hops on the longest root-to-leaf path."""
        par = self.parent()
        best = 0
        for v in par:
            d, u = 0, v
            while u != self.root and d <= len(par):
                u = par[u]
                d += 1
            best = max(best, d)
        return best

    def reversed(self) -> "Tree":
        """The same tree with data flowing the other way (out-tree <-> in-tree)."""
        return Tree(self.root, tuple(h.reversed() for h in self.hops), self.weight, not self.inward)


@dataclass(frozen=True)
class TreePacking:
    """Weighted trees for one collective, with the bound they were measured against.

    ``collective``: ``broadcast``, ``reduce`` (one root) or ``allgather``,
    ``reducescatter`` (every rank a root). ``rate`` is the bytes/s of the buffer for
    broadcast/reduce, and the per-shard rate (the smallest over roots) for
    all-gather/reduce-scatter, comparable with ``bound.rate``; ``algbw`` follows
    nccl-tests. ``limit_hit`` says a solver stopped at its time limit.
    """

    collective: str
    roots: tuple[str, ...]
    trees: tuple[Tree, ...]
    rate: float
    bound: Bound
    method: str
    solve_time: float
    limit_hit: bool = False
    links: str = "all"
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def num_ranks(self) -> int:
        return self.bound.num_ranks

    @property
    def num_trees(self) -> int:
        return len(self.trees)

    @property
    def algbw(self) -> float:
        if self.collective in ("allgather", "reducescatter"):
            return self.rate * self.num_ranks
        return self.rate

    @property
    def algbw_gbps(self) -> float:
        return self.algbw / GB

    @property
    def rate_gbps(self) -> float:
        return self.rate / GB

    @property
    def ratio(self) -> float:
        """rate / bound (1.0 = optimal)."""
        return self.rate / self.bound.rate

    def trees_of(self, root: str) -> list[Tree]:
        return [t for t in self.trees if t.root == root]

    def rate_of(self, root: str) -> float:
        return sum(t.weight for t in self.trees if t.root == root)

    def link_loads(self) -> dict[tuple[str, str], float]:
        """Bytes/s each directed link carries under the packing."""
        load: dict[tuple[str, str], float] = {}
        for t in self.trees:
            for l, k in t.link_use().items():
                load[l] = load.get(l, 0.0) + k * t.weight
        return load


def check_tree(tree: Tree, topology: Topology, allowed: Iterable[tuple[str, str]] | None = None) -> None:
    """Raise :class:`VerificationError` unless ``tree`` is an arborescence spanning the
    ranks of ``topology`` whose hops follow existing links through relays only."""
    ranks = set(topology.ranks)
    allowed_set = set(allowed) if allowed is not None else None
    where = f"tree rooted at {tree.root}"
    if tree.root not in ranks:
        raise VerificationError(f"{where}: the root is not a rank")
    if not tree.weight > 0:
        raise VerificationError(f"{where}: weight must be positive, got {tree.weight!r}")
    par: dict[str, str] = {}
    for h in tree.hops:
        child, up = (h.src, h.dst) if tree.inward else (h.dst, h.src)
        if h.src not in ranks or h.dst not in ranks:
            raise VerificationError(f"{where}: hop {h.src}->{h.dst} does not join two ranks")
        if len(h.path) < 2 or h.path[0] != h.src or h.path[-1] != h.dst:
            raise VerificationError(f"{where}: hop {h.src}->{h.dst} has path {h.path} with wrong ends")
        for relay in h.relays:
            if relay in ranks:
                raise VerificationError(f"{where}: hop {h.src}->{h.dst} passes through rank {relay}")
            if relay not in topology.devices:
                raise VerificationError(f"{where}: hop {h.src}->{h.dst} passes through unknown {relay}")
            if topology.devices[relay].is_gpu:
                raise VerificationError(f"{where}: hop {h.src}->{h.dst} passes through {relay}, a GPU "
                                        f"outside the job")
        for a, b in h.links():
            if topology.link(a, b) is None:
                raise VerificationError(f"{where}: hop {h.src}->{h.dst} uses {a}->{b}, which is not a link")
            if allowed_set is not None and (a, b) not in allowed_set:
                raise VerificationError(f"{where}: hop {h.src}->{h.dst} uses {a}->{b}, outside the chosen links")
        if child == tree.root:
            raise VerificationError(f"{where}: the root has a parent")
        if child in par:
            raise VerificationError(f"{where}: {child} has two parents ({par[child]} and {up})")
        par[child] = up
    missing = ranks - set(par) - {tree.root}
    if missing:
        raise VerificationError(f"{where}: does not reach {', '.join(sorted(missing))}")
    for v in par:  # every rank leads back to the root without a cycle
        seen, u = set(), v
        while u != tree.root:
            if u in seen:
                raise VerificationError(f"{where}: cycle through {u}")
            seen.add(u)
            u = par[u]


def check_packing(packing: TreePacking, topology: Topology, links: LinkSelector = "all",
                  rtol: float = 1e-6) -> None:
    """Raise :class:`VerificationError` unless every tree is valid (:func:`check_tree`,
    over the links ``links`` selects), each link's load is within its bandwidth
    (relative slack ``rtol``), the roots are right for the collective, and ``rate``
    is what the weights give."""
    chosen, _ = select_links(topology, links)
    allowed = {(l.src, l.dst) for l in chosen}
    inward = packing.collective in ("reduce", "reducescatter")
    for t in packing.trees:
        if t.inward != inward:
            raise VerificationError(f"{packing.collective} packing holds an {'in' if t.inward else 'out'}-tree")
        if t.root not in packing.roots:
            raise VerificationError(f"tree rooted at {t.root}: not one of the packing's roots")
        check_tree(t, topology, allowed)
    if packing.collective in ("allgather", "reducescatter") and set(packing.roots) != set(topology.ranks):
        raise VerificationError(f"{packing.collective} packing must root trees at every rank")
    for l, load in packing.link_loads().items():
        bw = topology.links[l].bandwidth
        if load > bw * (1 + rtol):
            raise VerificationError(f"link {l[0]}->{l[1]} carries {load / GB:.6g} GB/s, more than its "
                                    f"{bw / GB:.6g} GB/s")
    rate = min(packing.rate_of(r) for r in packing.roots)
    if abs(rate - packing.rate) > rtol * max(rate, packing.rate, 1.0):
        raise VerificationError(f"packing claims {packing.rate / GB:.6g} GB/s but its trees give {rate / GB:.6g}")


def tree_children(tree: Tree, index: dict[str, int]) -> tuple[int, dict[int, list[tuple[int, tuple[str, ...]]]]]:
    """Root index and, per rank index, its children with the path *from parent to child*."""
    kids: dict[int, list[tuple[int, tuple[str, ...]]]] = {}
    for h in tree.hops:
        if tree.inward:  # hop child -> parent
            parent, child, path = h.dst, h.src, tuple(reversed(h.path))
        else:
            parent, child, path = h.src, h.dst, h.path
        kids.setdefault(index[parent], []).append((index[child], path))
    return index[tree.root], kids


def breadth_first_hops(root: int, kids: dict[int, list[tuple[int, tuple[str, ...]]]]
                       ) -> list[tuple[int, int, tuple[str, ...]]]:
    """(parent, child, path parent->child) in breadth-first order from the root."""
    order, queue = [], deque([root])
    while queue:
        u = queue.popleft()
        for v, path in kids.get(u, ()):
            order.append((u, v, path))
            queue.append(v)
    return order


def one_switch(topology: Topology) -> str | None:
    """The device every rank reaches every other rank through, one hop each way (an
    NVSwitch, or the one network switch of a single-level hierarchy), or None. Ranks on
    more than one host have none (refused before any route is looked at)."""
    ranks = topology.ranks
    if len({topology.devices[g].host for g in ranks}) != 1:
        return None
    switch = None
    for a in ranks:
        for b in ranks:
            if a == b:
                continue
            path = topology.route(a, b).path
            if len(path) != 3 or path[1] in ranks or (switch is not None and path[1] != switch):
                return None
            switch = path[1]
    return switch


def common_switch(topology: Topology) -> str | None:
    """The NVSwitch every rank reaches every other rank through, one hop each way
    (DGX-2, DGX A100, DGX H100 and their allocations: each pair's own route is
    ``gpu -> nvswitch -> gpu``; :func:`one_switch` of kind NVSwitch), or None."""
    from arborcc.topology.model import DeviceKind

    switch = one_switch(topology)
    if switch is None or topology.devices[switch].kind is not DeviceKind.NVSWITCH:
        return None
    return switch


def switch_broadcast_trees(topology: Topology, root: str, links: LinkSelector = "all") -> list[Tree] | None:
    """The rate-optimal broadcast on a switch machine (:func:`common_switch`): a scatter
    of the root's buffer over the other ranks and each of them forwarding its piece to
    all the others - one tree of depth 2 per other rank, the root its only parent - so
    that the root's port carries the buffer once and every other port carries it once
    in and at most once out (Blink's one-hop trees, section 3.5, for one root).

    The chunks per loop must be a power of two (MSCCL runs an algorithm only on buffers
    whose element count is a multiple of them), so ``C``, the smallest power of two of at
    least ``n - 1``, chunks are carried one per tree: the ``n - 1`` stars and ``C - n + 1``
    extra trees, each from the root to one rank and on through the others, every rank
    forwarding to at most ``C - n + 2`` children over all of them - so that no port
    carries more than ``C`` chunks (DGX H100: 7 stars and one binary tree). Every tree
    carries one chunk: flows sharing a port get even shares of it, so trees of unequal
    counts would leave the heavy ones running alone at the end (7 stars carrying 5 or 4
    of 32 chunks simulated 363 GB/s at 1 GiB on DGX H100, 8 trees of one chunk 384).
    Each tree's weight is the rate the busiest port leaves it.

    None where there is no common switch, a hop's links are outside ``links``, no placement
    of the extra trees keeps every rank within its forwarding budget, or the
    trees would not reach the ports' bound - the least of the root's port out and the
    other ranks' ports in (ports of unequal rates)."""
    from arborcc.synth.quantize import TOLERANCE

    switch = common_switch(topology)
    if switch is None or root not in topology.ranks or topology.num_ranks < 2:
        return None
    chosen, _ = select_links(topology, links)
    allowed = {(l.src, l.dst) for l in chosen}
    path = {(a, b): topology.route(a, b).path for a in topology.ranks for b in topology.ranks if a != b}
    if any((u, v) not in allowed for p in path.values() for u, v in zip(p, p[1:])):
        return None
    others = [g for g in topology.ranks if g != root]
    hops = [[Hop(root, x, path[(root, x)])] + [Hop(x, y, path[(x, y)]) for y in others if y != x] for x in others]
    chunks = 1 << (len(others) - 1).bit_length()
    extra_children = chunks - len(others) + 1  # the most any rank forwards over the extra trees

    def extra_trees(shallow_first: bool) -> list[list[Hop]] | None:
        """The ``chunks - len(others)`` extra trees, tree j over ``others`` rotated by j,
        each rank under the shallowest (``shallow_first``, else the least loaded) rank
        already in its tree that may still forward a chunk; None where none may."""
        load = {g: 0 for g in others}
        trees = []
        for j in range(chunks - len(others)):
            order = others[j:] + others[:j]
            first = min(order, key=lambda g: load[g])
            depth = {first: 1}
            tree = [Hop(root, first, path[(root, first)])]
            for v in order:
                if v == first:
                    continue
                parent = min((u for u in depth if load[u] < extra_children), default=None,
                             key=lambda u: (depth[u], load[u]) if shallow_first else (load[u], depth[u]))
                if parent is None:
                    return None
                load[parent] += 1
                depth[v] = depth[parent] + 1
                tree.append(Hop(parent, v, path[(parent, v)]))
            trees.append(tree)
        return trees

    # shallow trees where the forwarding budget allows them (every DGX A100 and DGX H100
    # allocation, DGX-2 but for 14-15 GPUs), else the least loaded parents first
    extra = extra_trees(True) or extra_trees(False)
    if extra is None:
        return None
    hops += extra
    use: Counter = Counter()
    for tree in hops:
        for h in tree:
            use.update(h.links())
    weight = min(topology.links[l].bandwidth / k for l, k in use.items())
    ports = min([topology.links[(root, switch)].bandwidth] + [topology.links[(switch, g)].bandwidth for g in others])
    if weight * len(hops) < (1 - TOLERANCE) * ports:
        return None
    return [Tree(root, tuple(tree), weight) for tree in hops]


#: exchanges :func:`shallower` looks at, at most (a count, not a time, so the trees do
#: not depend on the machine's load)
SHALLOWER_TRIES = 20_000
#: the most ranks :func:`shallower` works on: each exchange re-measures two trees, and
#: on 8 x DGX A100 (64 ranks) the broadcast's 24 trees took 2.1 s of exchanges, a third
#: of their packing's time; one machine or two are at most 16 ranks
SHALLOWER_MOST_RANKS = 16


def shallower(trees: Sequence[Tree], tries: int = SHALLOWER_TRIES) -> list[Tree]:
    """``trees`` with hops exchanged between trees of the same weight wherever that
    makes them shallower: the deepest tree first, then the trees' depths
    summed, then the ranks' depths summed.

    A rank's hop from its parent in one tree and its hop in another tree of the same
    weight may change places when neither tree gains a cycle; every link then carries
    what it carried, so the trees stay a packing at the same rate, with the same load on
    every link. A packing's optimum is rarely unique, and column generation returns
    whichever trees its pricing met first: chains of six hops among them on DGX-1V (the
    broadcast from GPU 0, depth 4 at most after the exchanges). Depth is what a
    pipelined lowering pays for: with at most 64 steps per thread block a chain of ``d``
    hops holds a tree back ``d - 1`` of its steps. Greedy: each exchange that lowers the
    key is kept, in a fixed order, until none does or ``tries`` exchanges were looked
    at; packings of more than :data:`SHALLOWER_MOST_RANKS` ranks are returned as they
    are."""
    out = list(trees)
    if not out or len(out[0].hops) + 1 > SHALLOWER_MOST_RANKS:
        return out
    groups: dict[float, list[int]] = {}
    for i, t in enumerate(out):
        groups.setdefault(round(t.weight, 6 - int(math.floor(math.log10(t.weight)))), []).append(i)
    pairs = [(i, j) for members in groups.values() for a, i in enumerate(members) for j in members[a + 1:]]
    if not pairs:
        return out
    parent = [t.parent() for t in out]
    hop = [{(h.src if t.inward else h.dst): h for h in t.hops} for t in out]

    def depths(k: int) -> tuple[int, int]:
        """The deepest rank's depth in tree ``k`` and the ranks' depths summed."""
        par, seen = parent[k], {out[k].root: 0}
        deepest = total = 0
        for v in par:
            path, u = [], v
            while u not in seen:
                path.append(u)
                u = par[u]
            d = seen[u]
            for x in reversed(path):
                d += 1
                seen[x] = d
            deepest = max(deepest, seen[v])
            total += seen[v]
        return deepest, total

    def below(k: int, top: str, v: str) -> bool:
        """Is ``v`` in the subtree of ``top`` in tree ``k``?"""
        par, root = parent[k], out[k].root
        while v != root:
            if v == top:
                return True
            v = par[v]
        return False

    depth = [depths(k) for k in range(len(out))]

    def key() -> tuple[int, int, int]:
        return (max(d for d, _ in depth), sum(d for d, _ in depth), sum(s for _, s in depth))

    best = key()
    ranks = sorted(set().union(*parent))
    improved = True
    while improved and tries > 0:
        improved = False
        for v, (i, j) in itertools.product(ranks, pairs):
            if tries <= 0:
                break
            tries -= 1
            pi, pj = parent[i].get(v), parent[j].get(v)
            if pi is None or pj is None or pi == pj or below(i, v, pj) or below(j, v, pi):
                continue
            parent[i][v], parent[j][v] = pj, pi
            old_i, old_j = depth[i], depth[j]
            depth[i], depth[j] = depths(i), depths(j)
            now = key()
            if now < best:
                best, improved = now, True
                hop[i][v], hop[j][v] = hop[j][v], hop[i][v]
            else:
                parent[i][v], parent[j][v] = pi, pj
                depth[i], depth[j] = old_i, old_j
    return [t if all(hop[k][h.src if t.inward else h.dst] is h for h in t.hops)
            else Tree(t.root, tuple(hop[k][v] for v in sorted(hop[k])), t.weight, t.inward)
            for k, t in enumerate(out)]
