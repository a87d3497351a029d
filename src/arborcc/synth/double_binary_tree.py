"""NCCL's double binary tree: two complementary binary trees over the nodes, a chain
through the ranks of each node.

NCCL (NVIDIA, https://github.com/NVIDIA/nccl, ``src/graph/trees.cc``) runs tree
all-reduce over two binary trees of the nodes in which (for an even node count) every
node is an inner vertex of at most one tree, so both trees together use every node's
links fully; inside a node the ranks form a chain, the stretch of the first ring in that
node (Sanders, Speck & Traeff, "Two-tree algorithms for full bandwidth broadcast,
reduction and scan", Parallel Computing 35(12), 2009,
https://doi.org/10.1016/j.parco.2009.09.001). :meth:`DoubleBinaryTree.nccl_estimate`
asks NCCL's cost model (:mod:`arborcc.sim.nccl_model`) what NCCL would predict.
Rank indices are positions in ``topology.ranks``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from arborcc.errors import SynthesisError
from arborcc.sim.nccl_model import NcclEstimate, nccl_estimate
from arborcc.synth.hosts import hop_distance, host_groups
from arborcc.synth.nccl_rings import RingSchedule, fair_share, link_class, nccl_rings, nics_of
from arborcc.topology.model import LinkKind, Topology

@dataclass
class DoubleBinaryTree:
    """NCCL's double binary tree: two complementary binary trees over the nodes, a chain
    through each node's ranks.

    ``node_parents[t][k]`` is node k's parent in tree t (None at the root);
    ``chains[k]`` the ranks of node k in chain order (``chains[k][0]`` is the node's
    head, which talks to the other nodes); ``parents[t][r]`` the resulting rank-level
    tree t. ``bandwidths[t]``: tree t's bottleneck (B/s) with both trees running.
    """

    chains: list[list[int]]
    node_parents: tuple[dict[int, int | None], dict[int, int | None]]
    parents: tuple[dict[int, int | None], dict[int, int | None]]
    bandwidths: tuple[float, float]
    intra_link_kind: LinkKind = LinkKind.NVLINK

    @property
    def roots(self) -> tuple[int, int]:
        return tuple(next(r for r, p in tree.items() if p is None) for tree in self.parents)  # type: ignore[return-value]

    @property
    def nodes(self) -> int:
        return len(self.chains)

    def children(self, tree: int) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {r: [] for r in self.parents[tree]}
        for r, p in sorted(self.parents[tree].items()):
            if p is not None:
                out[p].append(r)
        return out

    def nccl_estimate(self, protocol: str, n_bytes: float) -> NcclEstimate:
        """What NCCL's cost model predicts for an all-reduce of ``n_bytes`` on these trees."""
        return nccl_estimate("allreduce", "tree", protocol, n_bytes, ranks=sum(len(c) for c in self.chains),
                             nodes=self.nodes, intra_link=link_class(self.intra_link_kind),
                             bus_bandwidth=float(sum(self.bandwidths)))

    def validate(self, n: int) -> None:
        for t, par in enumerate(self.parents):
            _check_tree(par, list(range(n)), f"double binary tree {t}")
            for v, kids in self.children(t).items():
                if sum(1 for k in kids if self._node_of(k) != self._node_of(v)) > 2:
                    raise SynthesisError(f"double binary tree {t}: rank {v} has more than 2 children across nodes")

    def _node_of(self, r: int) -> int:
        return next(k for k, c in enumerate(self.chains) if r in c)


# ----------------------------------------------------------- double binary tree ---
def _btree_parent(n: int, r: int) -> int | None:
    """Parent of ``r`` in NCCL's first binary tree over 0..n-1: clear r's lowest set bit
    and set the next higher one; if that leaves the range, just clear the bit. Rank 0
    is the root (its only child is the largest power of two below n)."""
    if r == 0:
        return None
    low = r & -r
    up = (r ^ low) | (low << 1)
    return up if up < n else r ^ low


def double_binary_tree_nodes(n: int) -> tuple[dict[int, int | None], dict[int, int | None]]:
    """The two node-level trees: the first as :func:`_btree_parent`, the second its
    mirror image (``n-1-r``) when n is even or its shift by one when n is odd, so that a
    node is interior in at most one of the two trees (for even n)."""
    if n < 1:
        raise SynthesisError(f"a double binary tree needs at least one node, got {n}")
    first = {r: _btree_parent(n, r) for r in range(n)}
    if n % 2 == 0:
        second = {r: (None if first[n - 1 - r] is None else n - 1 - first[n - 1 - r]) for r in range(n)}  # type: ignore[operator]
    else:
        second = {}
        for r in range(n):
            p = first[(r - 1) % n]
            second[r] = None if p is None else (p + 1) % n
    return first, second


def double_binary_tree(topology: Topology, rings: RingSchedule | None = None) -> DoubleBinaryTree:
    """NCCL's double binary tree: node trees from :func:`double_binary_tree_nodes`,
    chains inside each node taken from the first NCCL ring (its stretch in that node),
    the chain's first rank being the node's head in both trees. Edges between heads go
    through a NIC next to each head (the two trees alternate among equally near NICs);
    ``bandwidths`` share every link fairly among the edges of both trees."""
    n = topology.num_ranks
    rings = rings if rings is not None else nccl_rings(topology)
    hosts = host_groups(topology)
    host_of = {r: k for k, h in enumerate(hosts) for r in h}
    ring = rings.rings[0]
    if len(hosts) == 1:
        chains = [list(ring)]
    else:
        chains = [[r for r in ring if host_of[r] == k] for k in range(len(hosts))]
    node_trees = double_binary_tree_nodes(len(hosts))
    parents = []
    for nt in node_trees:
        par: dict[int, int | None] = {}
        for k, chain in enumerate(chains):
            up = nt[k]
            par[chain[0]] = None if up is None else chains[up][0]
            for a, b in zip(chain, chain[1:]):
                par[b] = a
        parents.append(par)
    # a head-to-head edge between nodes goes through a NIC next to each head; the two
    # trees take turns among equally near NICs so they do not share one
    nics = [nics_of(topology, h) for h in hosts]

    def nic_for(k: int, tree: int) -> str | None:
        if not nics[k]:
            return None
        head = topology.ranks[chains[k][0]]
        dist = {x: hop_distance(topology, head, x) for x in nics[k]}
        best = min(dist.values())[0]
        near = [x for x in nics[k] if dist[x][0] == best]
        return near[tree % len(near)]

    walks = []
    for t, par in enumerate(parents):
        walk = []
        for r, p in sorted(par.items()):
            if p is None:
                continue
            a, b = topology.ranks[r], topology.ranks[p]
            ka, kb = host_of[r], host_of[p]
            na, nb = (nic_for(ka, t), nic_for(kb, t)) if ka != kb else (None, None)
            if na is not None and nb is not None:
                walk.append(topology.route(a, na).path + topology.route(na, nb).path[1:]
                            + topology.route(nb, b).path[1:])
            else:
                walk.append(topology.route(a, b).path)
        walks.append(walk)
    bws = fair_share(topology, walks)
    dbt = DoubleBinaryTree(chains, (node_trees[0], node_trees[1]), (parents[0], parents[1]),
                           (bws[0] if math.isfinite(bws[0]) else 0.0, bws[1] if math.isfinite(bws[1]) else 0.0),
                           rings.intra_link_kind)
    dbt.validate(n)
    return dbt


def _check_tree(parent: dict[int, int | None], ranks: list[int], what: str) -> None:
    if sorted(parent) != ranks:
        raise SynthesisError(f"{what} does not span the ranks")
    roots = [r for r, p in parent.items() if p is None]
    if len(roots) != 1:
        raise SynthesisError(f"{what} has {len(roots)} roots")
    for r in parent:
        seen = set()
        v: int | None = r
        while v is not None:
            if v in seen:
                raise SynthesisError(f"{what} has a cycle through rank {r}")
            seen.add(v)
            v = parent[v]
