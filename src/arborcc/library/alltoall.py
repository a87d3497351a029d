"""Two-step all-to-all (GC3 section 7.3, Figure 8).

N nodes of G GPUs. A chunk from GPU (m, i) to GPU (n, g) on another node first goes,
inside node m, to GPU (m, g) - the one with the destination's local index - into
scratch; GPU (m, g) then sends the G chunks it gathered for (n, g) in one aggregated
transfer across the network. Chunks between GPUs of one node go directly. Fewer, larger
inter-node messages: the network's per-message overhead is paid N*G times less.

This is the one home of the two-step algorithm: :func:`twostep_alltoall` is the library
entry (``arborcc compile twostep-alltoall``), and the synthesizer's ``two-step``
strategy (:func:`arborcc.synth.alltoall.lower_two_step`) traces the same
:func:`trace_twostep_alltoall` into its own program (its connectivity, no instruction
fusion), keeping only what is synthesis: checking the topology is a cluster of equal
hosts with host-major ranks, and the rank pairs the transfers take.

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

from arborcc.ir.model import Buffer
from arborcc.lang import AllToAll, Program, chunk
from arborcc.library.common import positive
from arborcc.library.spec import Built, built

IN, OUT, SCRATCH = Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH


def twostep_alltoall(nodes: int, gpus_per_node: int, instances: int = 1, protocol: str = "Simple",
                     topology: object = None, name: str | None = None) -> Built:
    N = positive(nodes, "nodes", "twostep-alltoall")
    G = positive(gpus_per_node, "gpus_per_node", "twostep-alltoall")
    name = name or f"twostep-alltoall-{N}x{G}-{instances}i"
    with Program(name, AllToAll(N * G, 1, inplace=False), topology, instances=instances,
                 protocol=protocol) as prog:
        trace_twostep_alltoall(N, G)
    return built(prog)


def trace_twostep_alltoall(nodes: int, gpus_per_node: int, transfers_last: bool = False) -> None:
    """Trace the two-step all-to-all of ``nodes`` nodes of ``gpus_per_node`` GPUs (rank =
    node * gpus_per_node + gpu, one chunk per block) into the current program.

    The chunks moved are the same either way; ``transfers_last`` only changes the order
    they are traced in, which the compiler's thread blocks and steps follow (so the XML
    differs). False (the library's, as GC3's example): destination by destination, each
    aggregated transfer right after the gather that fills it. True (the synthesizer's):
    source by source, every block to its destination inside the node or to its rail's
    GPU, then every aggregated transfer."""
    N, G = nodes, gpus_per_node

    def rank(node: int, gpu: int) -> int:
        return node * G + gpu

    def send_gathered(m: int, g: int, n: int) -> None:
        """GPU g of node m sends the G chunks it gathered for GPU g of node n in one transfer."""
        chunk(rank(m, g), SCRATCH, n * G, G).copy(rank(n, g), OUT, rank(m, 0))

    if transfers_last:
        for m in range(N):
            for i in range(G):
                src = rank(m, i)
                for g in range(G):  # inside the node: straight to the destination
                    chunk(src, IN, rank(m, g)).copy(rank(m, g), OUT, src)
                for n in range(N):  # to GPU g of this node, for GPU g of node n
                    if n != m:
                        for g in range(G):
                            chunk(src, IN, rank(n, g)).copy(rank(m, g), SCRATCH, n * G + i)
        for m in range(N):
            for g in range(G):
                for n in range(N):
                    if n != m:
                        send_gathered(m, g, n)
        return
    for n in range(N):
        for g in range(G):
            for m in range(N):
                for i in range(G):
                    c = chunk(rank(m, i), IN, rank(n, g))
                    if n == m:
                        c.copy(rank(n, g), OUT, rank(m, i))
                    else:  # gather on the GPU of node m with the destination's index
                        c.copy(rank(m, g), SCRATCH, n * G + i)
                if n != m:
                    send_gathered(m, g, n)
