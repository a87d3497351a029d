"""``msccl.topologies.topology``: a topology as a link matrix ``links[dst][src]``
(bandwidth, 0 = no link) plus optional switches, as in the public GC3 tools.

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

_arborcc_compat = True


class Topology:
    def __init__(self, name, links, switches=()):
        self.name = name
        self.links = [list(row) for row in links]
        self.switches = list(switches)
        n = len(self.links)
        if any(len(row) != n for row in self.links):
            raise ValueError(f"topology {name}: the link matrix must be square")
        for srcs, dsts, bw, switch_name in self.switches:
            if bw <= 0:
                raise ValueError(f"switch {switch_name} must have a positive bandwidth, got {bw}")

    def link(self, src: int, dst: int):
        """Bandwidth of the link src -> dst (0: none)."""
        return self.links[dst][src]

    def num_nodes(self) -> int:
        return len(self.links)

    def nodes(self):
        return range(self.num_nodes())

    def sources(self, dst: int):
        return (src for src, bw in enumerate(self.links[dst]) if bw > 0)

    def destinations(self, src: int):
        return (dst for dst in range(self.num_nodes()) if self.links[dst][src] > 0)

    def bandwidth_constraints(self):
        for dst, row in enumerate(self.links):
            for src, bw in enumerate(row):
                if bw > 0:
                    yield ([src], [dst], bw, f"{src}->{dst}")
        yield from self.switches

    def __repr__(self) -> str:
        return f"Topology({self.name!r}, {self.num_nodes()} ranks)"
