"""Hierarchical all-reduce (GC3 section 2, Figures 1-4).

N nodes of G GPUs (rank = node * G + gpu), N*G chunks. Four phases: an intra-node ring
reduce-scatter (each GPU ends with the node's sum of N chunks), an inter-node ring
reduce-scatter and all-gather among the GPUs with the same local index, and an
intra-node ring all-gather. As in GC3, the intra-node phases run on channel 0 and 2 and
the inter-node ones on channel 1. ``parallel`` runs every phase as that many instances
on 1/parallel of the data and their own channels: GC3 parallelizes the intra-node
phases only, but then each inter-node transfer carries ``parallel`` sub-chunks, and a
ring whose members first send more than one chunk deadlocks once the MSCCL runtimes cut
steps into pieces (two ranks per inter-node ring, Simple: each fills the other's FIFO
and then waits to forward; ``arborcc.verify.pieces``).

``groups`` names the ranks of each node (``groups[n][g]``: node n's GPU g) where they are
not numbered node by node: the CPU runtime's groups of ranks sharing a socket or an L3
(:func:`arborcc.topology.cpus.rank_groups`, chosen by :mod:`arborcc.runtime.plan`).
``inplace=False`` builds the out-of-place algorithm: every rank first copies its input
into its output, and the four phases run there (the input is left as it was).

Two other all-reduces follow the same decomposition without this builder. The torch
backend's across hosts (:meth:`arborcc.torch.hierarchical.Transport.allreduce`) runs
the phases as whole collectives on two transports (shared memory inside a host, gloo
between hosts), which one program for one runtime cannot express. The synthesizer's
``hierarchical`` strategy is a two-level BlueConnect plan
(:func:`arborcc.synth.lower_stages.hierarchical_plan`) traced as the library's staged
all-reduce (:class:`arborcc.library.staged.StagedAllReduce`, which also runs the
``blueconnect`` strategy's stages), on the same ring helpers as this builder
(:func:`~arborcc.library.ring.ring_reduce_scatter`,
:func:`~arborcc.library.ring.ring_all_gather`): the same copies and reductions, traced
in another order (every inter-node reduce-scatter before any inter-node all-gather) on
channels of their own per stage.

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

from typing import Sequence

from arborcc.errors import InputError
from arborcc.ir.model import Buffer
from arborcc.lang import AllReduce, Program, chunk, parallelize
from arborcc.library.common import positive
from arborcc.library.ring import ring_all_gather, ring_reduce_scatter
from arborcc.library.spec import Built, built

IN, OUT = Buffer.INPUT, Buffer.OUTPUT


def hierarchical_allreduce(nodes: int, gpus_per_node: int, instances: int = 1, protocol: str = "Simple",
                           parallel: int = 1, topology: object = None, name: str | None = None,
                           groups: Sequence[Sequence[int]] | None = None, inplace: bool = True) -> Built:
    N = positive(nodes, "nodes", "hierarchical-allreduce")
    G = positive(gpus_per_node, "gpus_per_node", "hierarchical-allreduce")
    parallel = positive(parallel, "parallel", "hierarchical-allreduce")
    R = N * G
    node = node_ranks(N, G, groups)
    name = name or f"hierarchical-allreduce-{N}x{G}-{instances}i" + ("" if inplace else "-outofplace")
    buf = IN if inplace else OUT
    with Program(name, AllReduce(R, R, inplace=inplace), topology, instances=instances, protocol=protocol) as prog:
        if not inplace:  # the phases reduce in place: on a copy of the input
            for r in range(R):
                for i in range(R):
                    chunk(r, IN, i).copy(r, OUT, i)
        with parallelize(parallel):
            for n in range(N):  # intra-node reduce-scatter
                ring_reduce_scatter(node[n], 0, N, ch=0, buffer=buf)
        with parallelize(parallel):
            for g in range(G):  # inter-node reduce-scatter and all-gather
                cross = [node[i][g] for i in range(N)]
                ring_reduce_scatter(cross, g * N, 1, ch=1, buffer=buf)
                ring_all_gather(cross, g * N, 1, ch=1, buffer=buf)
        with parallelize(parallel):
            for n in range(N):  # intra-node all-gather
                ring_all_gather(node[n], 0, N, ch=2, buffer=buf)
    return built(prog)


def node_ranks(nodes: int, per_node: int, groups: Sequence[Sequence[int]] | None) -> list[list[int]]:
    """The ranks of each node: ``groups`` checked (``nodes`` groups of ``per_node``
    ranks, every rank 0..nodes*per_node-1 once), or rank = node * per_node + index."""
    if groups is None:
        return [[n * per_node + g for g in range(per_node)] for n in range(nodes)]
    listed = [list(g) for g in groups]
    if len(listed) != nodes or any(len(g) != per_node for g in listed):
        raise InputError(f"groups must be {nodes} groups of {per_node} ranks, got sizes {[len(g) for g in listed]}",
                         source="hierarchical-allreduce")
    if sorted(r for g in listed for r in g) != list(range(nodes * per_node)):
        raise InputError(f"groups must hold every rank 0-{nodes * per_node - 1} once", source="hierarchical-allreduce")
    return listed
