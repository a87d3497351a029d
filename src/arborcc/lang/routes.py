"""Which ranks a program may move chunks between (the program's topology).

A program may name an arborcc :class:`~arborcc.topology.model.Topology` (rank i is the
GPU ``topology.ranks[i]``; a copy needs a route, possibly through switches), an object
with a ``link(src, dst)`` method returning a bandwidth (the public GC3 tools' topology
objects; a copy needs a direct link), a square matrix ``links[src][dst]`` (> 0: a link),
or nothing (every pair connected).

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations


class Connectivity:
    """Answers ``why_not(src, dst)``: None when a copy src -> dst is allowed, else why not."""

    def __init__(self, topology: object, num_ranks: int):
        self.topology = topology
        self.num_ranks = num_ranks
        self._cache: dict[tuple[int, int], str | None] = {}
        self.kind = self._classify(topology, num_ranks)

    @staticmethod
    def _classify(topology: object, num_ranks: int) -> str:
        if topology is None:
            return "all"
        if hasattr(topology, "ranks") and hasattr(topology, "can_route"):
            n = len(topology.ranks)
            if n != num_ranks:
                raise ValueError(f"the topology has {n} ranks but the collective has {num_ranks}")
            return "topology"
        if hasattr(topology, "link") and callable(topology.link):
            n = topology.num_nodes() if hasattr(topology, "num_nodes") else num_ranks
            if n != num_ranks:
                raise ValueError(f"the topology has {n} ranks but the collective has {num_ranks}")
            return "links"
        rows = list(topology)  # a matrix
        if len(rows) != num_ranks or any(len(row) != num_ranks for row in rows):
            raise ValueError(f"a link matrix must be {num_ranks}x{num_ranks}")
        return "matrix"

    def name(self, rank: int) -> str:
        if self.kind == "topology":
            return self.topology.ranks[rank]
        return f"rank {rank}"

    def why_not(self, src: int, dst: int) -> str | None:
        if src == dst or self.kind == "all":
            return None
        key = (src, dst)
        if key in self._cache:
            return self._cache[key]
        ok = self._connected(src, dst)
        what = "route" if self.kind == "topology" else "link"
        reason = None if ok else f"the topology has no {what} from {self.name(src)} to {self.name(dst)}"
        self._cache[key] = reason
        return reason

    def _connected(self, src: int, dst: int) -> bool:
        topo = self.topology
        if self.kind == "links":
            return bool(topo.link(src, dst))
        if self.kind == "matrix":
            return bool(topo[src][dst])
        return topo.can_route(topo.ranks[src], topo.ranks[dst])
