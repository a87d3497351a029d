"""Symmetries of a capacitated graph, to solve each equivalent case once.

A machine or a cluster of identical machines has many automorphisms: relabellings of
its devices that keep every arc and its capacity and map ranks to ranks. Any quantity
defined by the graph alone - a max-flow from a super source to a rank, a root's best
tree all-reduce rate - is then equal on ranks of one orbit, and an LP whose
constraints the group permutes has an optimal solution constant on the orbits of its
variables (average any optimum over the group: convexity keeps it feasible and
optimal; the Reynolds-operator argument of Boedi, Herr & Joswig, "Algorithms for
highly symmetric linear and integer programs", Math. Program. 2013). The bounds use
both to solve one rank or one arc per orbit.

The group's generators come from bliss (Junttila & Kaski, ALENEX 2007) through igraph.
bliss colours vertices only, so every arc is subdivided by a vertex coloured by the
arc's capacity; the generators' action on those vertices is their action on arcs.
Orbits are the classes of the points the generators' permutations join.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import arborcc.synth.native as native


@dataclass(frozen=True)
class Orbits:
    """Orbit labels of the vertices (``node[u]``) and arcs (``arc[e]``) of a graph under
    its automorphisms (or those fixing a vertex). A label is the smallest member of its
    orbit."""

    node: np.ndarray
    arc: np.ndarray

    def representatives(self, vertices) -> list[int]:
        """One vertex per orbit among ``vertices`` (the first met), in order."""
        seen, out = set(), []
        for v in vertices:
            label = int(self.node[int(v)])
            if label not in seen:
                seen.add(label)
                out.append(int(v))
        return out


def load_igraph():
    """The ``igraph`` module, imported without matplotlib when nothing has imported
    matplotlib yet: igraph's drawing modules import ``matplotlib.pyplot`` at import time
    (1.5-2 s on a 2-core machine) and arborcc uses none of igraph's plotting; matplotlib
    stays importable afterwards (arborcc's own drawings import it directly)."""
    import sys

    if "igraph" in sys.modules or "matplotlib" in sys.modules:
        import igraph

        return igraph
    sys.modules["matplotlib"] = None  # type: ignore[assignment]  # makes "import matplotlib" raise ImportError
    try:
        import igraph
    finally:
        del sys.modules["matplotlib"]
    return igraph


def graph_orbits(n: int, src: np.ndarray, dst: np.ndarray, cap: np.ndarray, ranks,
                 fixed: int | None = None) -> Orbits:
    """The orbits of the automorphisms of the ``n``-vertex digraph with arcs
    ``src[e] -> dst[e]`` of capacity ``cap[e]`` that map ranks to ranks (and fix vertex
    ``fixed``, when given)."""
    igraph = load_igraph()
    E = len(src)
    level = {c: i for i, c in enumerate(sorted(set(np.asarray(cap, dtype=float).tolist())))}
    color = np.ones(n, dtype=np.int64)  # relays 1, ranks 0, the fixed vertex 2
    color[np.asarray(ranks, dtype=np.int64)] = 0
    if fixed is not None:
        color[fixed] = 2
    color = color.tolist() + [3 + level[c] for c in np.asarray(cap, dtype=float).tolist()]
    mid = np.arange(n, n + E)
    edges = np.concatenate([np.stack([src, mid], 1), np.stack([mid, dst], 1)]).tolist()
    generators = igraph.Graph(n=n + E, edges=edges, directed=True).automorphism_group(color=color)
    label = _components(n + E, generators)
    return Orbits(label[:n], label[n:] - n)


def _components(size: int, permutations) -> np.ndarray:
    """Smallest element of each element's orbit under the group the permutations
    generate: the classes of ``i ~ perm[i]`` (compiled union-find,
    ``arborcc.synth.native``, csrc/orbits.cpp)."""
    return native.orbit_labels(size, permutations)
