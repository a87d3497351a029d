"""Balanced binary trees of maximum link weight (the MXNet tree all-reduce proposal).

Source: the Apache MXNet design proposal "Single machine All Reduce Topology-aware
Communication" (2018,
https://cwiki.apache.org/confluence/display/MXNET/Single+machine+All+Reduce+Topology-aware+Communication):
"Proposed Approach", "Technical Challenges", sections 1 "Use Binary Tree to do Reduce"
and 2 "Generate Binary Tree", "Link usage penalty", "When to switch between Single and
Multiple tree".

What the proposal describes, and how it maps onto this module:

* A reduce (and the matching broadcast) runs over a *binary tree in levels*: at each
  level every vertex already in the tree pairs with one new vertex, which sends its
  partial sum to it (Figure 6: GPU1 -> GPU5, then GPU7 -> GPU5, then GPU4 -> GPU5). Seen
  as a tournament tree every node has two children (itself and its new partner); seen on
  the GPUs, the sends form a spanning tree of the link topology. A tree over ``n``
  ranks has ``ceil(log2 n)`` levels - that is what "balanced" buys: the height sets the
  latency of the reduce.
* The tree is found top-down by recursive bisection (section 2, steps 1-3): start from
  the root alone in the set of "root nodes" and the whole rank set in one cluster; split
  every cluster of two or more vertices in two with the Kernighan-Lin heuristic; join the
  halves by the heaviest edge between the cluster's root node and the other half; the
  new vertex becomes the root node of its half. When no such edge exists ("Kernighan-Lin
  would get stuck"), an exhaustive search finds a tree for that cluster.
* "Maximum weight": edges are weighted by link bandwidth; only *fabric* edges are
  eligible while the fabric allows it (pairs joined by NVLink only, directly or through
  an NVSwitch - the proposal's adjacency matrix holds NVLink lanes only), and pairs that
  talk through PCIe/CPU/network get their route's bandwidth as weight and are used only
  when no fabric-only tree exists for a cluster.
* Link usage penalty: trees are built one root after another; every link a tree uses has
  its weight multiplied by ``penalty`` (MXNet's ``MXNET_KVSTORE_TREE_LINK_USAGE_PENALTY``,
  default 0.7) before the next tree is built, so later trees prefer unused links.
* One tree per root for bandwidth-bound sizes (each tree carries ``1/n`` of the data),
  one tree (the first root's) below ``threshold_bytes``. MXNet's
  ``MXNET_KVSTORE_TREE_ARRAY_BOUND`` defaults to 10,000,000 elements ("beyond 1M-10M
  float32's, multi-tree begins to do better", Figure 7): 40 MB of float32.

The proposal is for one machine ("ours is single-machine"). On a cluster no NVLink-only
tree exists, so the whole search runs on route bandwidths; the first trees then cross
between nodes as few times as possible, but as the penalty wears down the NVLink
weights towards the network's, later trees may cross more often.

Rank indices are positions in ``topology.ranks`` (0..n-1).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from arborcc.errors import SynthesisError
from arborcc.synth.flowgraph import check_routable
from arborcc.topology.model import GB, LinkKind, Topology

#: MXNET_KVSTORE_TREE_LINK_USAGE_PENALTY's default (proposal, "Link usage penalty")
DEFAULT_LINK_USAGE_PENALTY = 0.7
#: MXNET_KVSTORE_TREE_ARRAY_BOUND's default, 10,000,000 elements, in float32 bytes
DEFAULT_THRESHOLD_BYTES = 10_000_000 * 4
#: largest cluster the exhaustive fallback searches (its cost grows like m! / 2^m)
DEFAULT_EXHAUSTIVE_LIMIT = 10


# --------------------------------------------------------------------------- data ---
@dataclass(frozen=True)
class TreeEdge:
    """A tree edge ``child -> parent`` (reduce direction) and the path it takes.

    ``path`` holds device ids from child to parent (a direct link has two); ``link_kind``
    is the kind of the route's narrowest link and ``bandwidth`` its bottleneck (B/s).
    """

    child: int
    parent: int
    level: int
    path: tuple[str, ...]
    link_kind: LinkKind
    bandwidth: float


@dataclass
class BinaryTree:
    """A balanced binary tree in levels, rooted at ``root``.

    ``parent[v]`` is v's parent on the GPUs (None for the root); ``children[v]`` lists
    v's children in the order they were attached (level 1 first). ``levels[l]`` lists
    the (parent, child) pairs joined at level ``l+1`` of the tournament tree - in a
    reduce they communicate in reverse level order, in a broadcast in level order.
    ``depth`` is the number of levels (= communication steps of a reduce).
    """

    root: int
    parent: dict[int, int | None]
    children: dict[int, list[int]]
    depth: int
    levels: list[list[tuple[int, int]]]
    edges: list[TreeEdge] = field(default_factory=list)

    @property
    def ranks(self) -> list[int]:
        return sorted(self.parent)

    @property
    def weight(self) -> float:
        """Sum of the edges' bottleneck bandwidths (B/s) - what the search maximizes."""
        return sum(e.bandwidth for e in self.edges)

    def validate(self, n: int) -> None:
        """Raise SynthesisError unless this is a balanced tree in levels over ranks 0..n-1."""
        if sorted(self.parent) != list(range(n)):
            raise SynthesisError(f"tree rooted at {self.root} does not span ranks 0..{n - 1}")
        if self.parent.get(self.root, -1) is not None:
            raise SynthesisError(f"tree root {self.root} has a parent")
        if self.depth != _levels_needed(n):
            raise SynthesisError(f"tree rooted at {self.root} has {self.depth} levels, a balanced one has "
                                 f"{_levels_needed(n)}")
        present = {self.root}
        for lv in self.levels:
            senders = [p for p, _ in lv]
            if len(set(senders)) != len(senders):
                raise SynthesisError(f"tree rooted at {self.root}: a vertex gains two children in one level")
            for p, c in lv:
                if p not in present or c in present or self.parent.get(c) != p:
                    raise SynthesisError(f"tree rooted at {self.root}: bad level edge {p}->{c}")
            present.update(c for _, c in lv)
        if present != set(range(n)):
            raise SynthesisError(f"tree rooted at {self.root}: levels do not reach every rank")


@dataclass
class BinaryTreeSchedule:
    """One tree per root (``trees[i].root == roots[i]``) and the single/multi-tree switch.

    Below ``threshold_bytes`` the whole buffer goes over ``trees[0]``; at or above it
    the buffer is split in ``len(trees)`` parts, part ``i`` reduced and broadcast over
    ``trees[i]`` (proposal, Figure 4 (a) and (b)).
    """

    trees: list[BinaryTree]
    threshold_bytes: int
    penalty: float = DEFAULT_LINK_USAGE_PENALTY

    def trees_for(self, n_bytes: int) -> list[BinaryTree]:
        return self.trees[:1] if n_bytes < self.threshold_bytes else list(self.trees)


# ------------------------------------------------------------------------ weights ---
@dataclass(frozen=True)
class LinkWeights:
    """Symmetric rank-pair matrices: ``bandwidth`` (B/s, route bottleneck, min of both
    directions) and ``fabric`` (True where the pair's routes use NVLink only)."""

    bandwidth: np.ndarray
    fabric: np.ndarray
    paths: dict[tuple[int, int], tuple[tuple[str, ...], LinkKind, float]]


def _route_kind(topology: Topology, path: Sequence[str]) -> LinkKind:
    links = [topology.links[(a, b)] for a, b in zip(path, path[1:])]
    return min(links, key=lambda l: l.bandwidth).kind


def link_weights(topology: Topology) -> LinkWeights:
    """The link-weight matrices of the proposal's "link topology saved in an adjacency
    matrix", with bandwidths instead of the proposal's lane codes (3 = double NVLink,
    2 = single): the ratios between link classes are kept and PCIe pairs get theirs.

    Raises SynthesisError when two ranks cannot reach each other.
    """
    check_routable(topology)
    n = topology.num_ranks
    bw = np.zeros((n, n))
    fabric = np.zeros((n, n), dtype=bool)
    paths: dict[tuple[int, int], tuple[tuple[str, ...], LinkKind, float]] = {}
    for i, a in enumerate(topology.ranks):
        for j, b in enumerate(topology.ranks):
            if i == j:
                continue
            r = topology.route(a, b)
            paths[(i, j)] = (r.path, _route_kind(topology, r.path), r.bandwidth)
            bw[i, j] = r.bandwidth
            fabric[i, j] = all(topology.links[p].kind is LinkKind.NVLINK for p in r.pairs())
    bw = np.minimum(bw, bw.T)
    fabric = fabric & fabric.T
    return LinkWeights(bw, fabric, paths)


# ---------------------------------------------------------------- Kernighan-Lin ---
def _levels_needed(m: int) -> int:
    return max(0, math.ceil(math.log2(m))) if m > 1 else 0


def _kl_refine(weights: np.ndarray, verts: list[int], fixed: int, a: list[int], b: list[int],
               max_passes: int) -> tuple[list[int], list[int]]:
    """Kernighan-Lin passes from the split (a, b), never moving ``fixed``."""
    a, b = list(a), list(b)
    for _ in range(max_passes):
        side = {v: 0 for v in a} | {v: 1 for v in b}
        # D(v) = external - internal cost
        d = {v: sum(weights[v, u] * (1 if side[u] != side[v] else -1) for u in verts if u != v) for v in verts}
        locked = {fixed}
        gains: list[float] = []
        swaps: list[tuple[int, int]] = []
        for _ in range(min(len(a) - 1, len(b))):
            best: tuple[float, int, int] | None = None
            for x in a:
                if x in locked:
                    continue
                for y in b:
                    if y in locked:
                        continue
                    g = d[x] + d[y] - 2 * weights[x, y]
                    if best is None or g > best[0] + 1e-12:
                        best = (g, x, y)
            if best is None:
                break
            g, x, y = best
            gains.append(g)
            swaps.append((x, y))
            locked.update((x, y))
            # update D as if x and y were swapped
            for v in verts:
                if v in locked:
                    continue
                if side[v] == 0:
                    d[v] += 2 * weights[v, x] - 2 * weights[v, y]
                else:
                    d[v] += 2 * weights[v, y] - 2 * weights[v, x]
        best_k, best_total, total = 0, 0.0, 0.0
        for k, g in enumerate(gains, start=1):
            total += g
            if total > best_total + 1e-9:
                best_k, best_total = k, total
        if best_k == 0:
            break
        for x, y in swaps[:best_k]:
            a[a.index(x)] = y
            b[b.index(y)] = x
    return a, b


def _cut(weights: np.ndarray, a: Sequence[int], b: Sequence[int]) -> float:
    return float(weights[np.ix_(list(a), list(b))].sum())


def kernighan_lin_bisection(weights: np.ndarray, vertices: Sequence[int], fixed: int,
                            max_passes: int = 10) -> tuple[list[int], list[int]]:
    """Split ``vertices`` into (A, B), ``fixed`` in A, |A| = ceil(m/2), minimizing the
    weight of edges cut (Kernighan & Lin 1970, the proposal's reference [4]).

    The proposal's modification is that the root node of the cluster must stay on one
    side, so ``fixed`` is never swapped. Each pass tentatively swaps the best-gain
    unlocked pair until all are locked, then keeps the prefix of swaps with the largest
    positive total gain; passes repeat until none helps. KL only improves a starting
    split locally, so it runs from two (as METIS seeds its refinement by graph growing):
    ``fixed`` with the vertices most strongly tied to it, and a region grown from
    ``fixed`` by repeatedly adding the vertex most strongly tied to the region; the
    lighter cut wins. Ties break by vertex order, so the result is deterministic.
    """
    verts = list(vertices)
    m = len(verts)
    if fixed not in verts:
        raise ValueError("fixed vertex not in the vertex set")
    size_a = (m + 1) // 2
    others = sorted((v for v in verts if v != fixed), key=lambda v: (-weights[fixed, v], v))
    starts = [[fixed] + others[:size_a - 1]]
    grown = [fixed]
    while len(grown) < size_a:
        rest = [v for v in verts if v not in grown]
        grown.append(max(rest, key=lambda v: (sum(weights[v, u] for u in grown), -v)))
    starts.append(grown)
    best: tuple[float, list[int], list[int]] | None = None
    for start in starts:
        a, b = _kl_refine(weights, verts, fixed, start, [v for v in verts if v not in start], max_passes)
        c = _cut(weights, a, b)
        if best is None or c < best[0] - 1e-9:
            best = (c, a, b)
    assert best is not None
    return sorted(best[1], key=lambda v: (v != fixed, v)), sorted(best[2])


# -------------------------------------------------------------- exhaustive search ---
def _exhaustive_tree(weights: np.ndarray, eligible: np.ndarray, vertices: Sequence[int], root: int,
                     ) -> list[tuple[int, int, int]] | None:
    """The heaviest balanced tree in levels over ``vertices`` rooted at ``root`` that uses
    eligible edges only, as (parent, child, level offset) triples; None if there is none.

    Searches every split (root's half of ceil(m/2) vertices) and every joining edge,
    recursively, memoized on (vertex set, root) - the proposal's fallback "use
    exhaustive search to find a binary tree from this root".
    """
    memo: dict[tuple[frozenset[int], int], tuple[float, list[tuple[int, int, int]]] | None] = {}

    def solve(vs: frozenset[int], r: int) -> tuple[float, list[tuple[int, int, int]]] | None:
        if len(vs) == 1:
            return 0.0, []
        key = (vs, r)
        if key in memo:
            return memo[key]
        m = len(vs)
        size_a = (m + 1) // 2
        rest = sorted(vs - {r})
        best: tuple[float, list[tuple[int, int, int]]] | None = None
        for others in itertools.combinations(rest, size_a - 1):
            a = frozenset(others) | {r}
            bset = vs - a
            sub_a = solve(a, r)
            if sub_a is None:
                continue
            for v in sorted(bset):
                if not eligible[r, v]:
                    continue
                sub_b = solve(frozenset(bset), v)
                if sub_b is None:
                    continue
                total = weights[r, v] + sub_a[0] + sub_b[0]
                if best is None or total > best[0] + 1e-9:
                    edges = [(r, v, 0)] + [(p, c, lv + 1) for p, c, lv in sub_a[1] + sub_b[1]]
                    best = (total, edges)
        memo[key] = best
        return best

    found = solve(frozenset(vertices), root)
    return None if found is None else found[1]


# ------------------------------------------------------------------ tree search ---
def _tree_in_levels(weights: np.ndarray, eligible: np.ndarray, vertices: Sequence[int], root: int,
                    exhaustive_limit: int) -> list[tuple[int, int, int]] | None:
    """Recursive KL bisection (proposal section 2, steps 1-3) restricted to eligible
    edges; a stuck cluster is solved by exhaustive search. Returns (parent, child, level)
    triples, or None if some stuck cluster has no eligible tree."""
    edges: list[tuple[int, int, int]] = []
    # clusters waiting to be split: (vertices, root node, level at which it splits)
    work: list[tuple[list[int], int, int]] = [(list(vertices), root, 0)]
    while work:
        cluster, r, level = work.pop(0)
        if len(cluster) < 2:
            continue
        a, b = kernighan_lin_bisection(weights, cluster, r)
        cands = [v for v in b if eligible[r, v]]
        if not cands:
            if len(cluster) > exhaustive_limit:
                return None
            sub = _exhaustive_tree(weights, eligible, cluster, r)
            if sub is None:
                return None
            edges.extend((p, c, level + lv) for p, c, lv in sub)
            continue
        v = max(cands, key=lambda u: (weights[r, u], -u))
        edges.append((r, v, level))
        work.append((a, r, level + 1))
        work.append((b, v, level + 1))
    return edges


def _build_tree(topology: Topology, lw: LinkWeights, weights: np.ndarray, root: int,
                exhaustive_limit: int) -> BinaryTree:
    n = topology.num_ranks
    everyone = list(range(n))
    edges = None
    if lw.fabric.any():
        edges = _tree_in_levels(weights, lw.fabric, everyone, root, exhaustive_limit)
        if edges is None and n <= exhaustive_limit:
            # a stuck cluster had no NVLink tree for the split KL chose; another split may
            edges = _exhaustive_tree(weights, lw.fabric, everyone, root)
    if edges is None:
        # no NVLink-only tree: every routable pair is eligible (PCIe/CPU/network routes)
        all_pairs = ~np.eye(n, dtype=bool)
        edges = _tree_in_levels(weights, all_pairs, everyone, root, exhaustive_limit)
    if edges is None:  # pragma: no cover - all pairs eligible never gets stuck
        raise SynthesisError(f"{topology.name}: no balanced binary tree rooted at rank {root}")
    depth = _levels_needed(n)
    parent: dict[int, int | None] = {root: None}
    children: dict[int, list[int]] = {v: [] for v in everyone}
    levels: list[list[tuple[int, int]]] = [[] for _ in range(depth)]
    tree_edges = []
    for p, c, lv in sorted(edges, key=lambda e: (e[2], e[0], e[1])):
        parent[c] = p
        children[p].append(c)
        levels[lv].append((p, c))
        path, kind, bw = lw.paths[(c, p)]
        tree_edges.append(TreeEdge(c, p, lv + 1, path, kind, bw))
    tree = BinaryTree(root, parent, children, depth, levels, tree_edges)
    tree.validate(n)
    return tree


def binary_tree_schedule(topology: Topology, roots: Sequence[int] | None = None,
                         penalty: float = DEFAULT_LINK_USAGE_PENALTY,
                         threshold_bytes: int = DEFAULT_THRESHOLD_BYTES,
                         exhaustive_limit: int = DEFAULT_EXHAUSTIVE_LIMIT) -> BinaryTreeSchedule:
    """Balanced binary trees of maximum link weight, one per root (MXNet proposal).

    ``roots`` defaults to every rank in order; trees are built in that order and every
    link a tree uses is penalized (weight x ``penalty``, 0 < penalty <= 1) for the trees
    after it. Weights are route bandwidths in GB/s (see :func:`link_weights`).
    """
    n = topology.num_ranks
    if not 0 < penalty <= 1:
        raise SynthesisError(f"link usage penalty must be in (0, 1], got {penalty}")
    if threshold_bytes < 0:
        raise SynthesisError(f"threshold_bytes must be >= 0, got {threshold_bytes}")
    roots = list(range(n)) if roots is None else list(roots)
    if not roots:
        raise SynthesisError("no root given")
    for r in roots:
        if not (isinstance(r, (int, np.integer)) and 0 <= r < n):
            raise SynthesisError(f"root {r!r} is not a rank index of {topology.name} (0..{n - 1})")
    if len(set(roots)) != len(roots):
        raise SynthesisError(f"roots {roots} repeat a rank")
    lw = link_weights(topology)
    weights = lw.bandwidth / GB
    trees = []
    for r in roots:
        tree = _build_tree(topology, lw, weights, int(r), exhaustive_limit)
        trees.append(tree)
        for e in tree.edges:
            weights[e.child, e.parent] *= penalty
            weights[e.parent, e.child] *= penalty
    return BinaryTreeSchedule(trees, int(threshold_bytes), penalty)
