"""All-to-all: every rank sends a distinct block to every rank.

Bound (:func:`arborcc.synth.bounds.alltoall_bound`). With ``S`` bytes per rank (nccl-tests' size; one block of
``S/N`` per destination) and every ordered pair of ranks carrying its block at rate
``x``, any vertex set ``A`` holding ``k`` of the ``N`` ranks must pass ``x k (N-k)`` out
of and into ``A``: ``x <= min(cap out, cap in) / (k (N-k))``, and ``algbw = N x``. The
best ``x`` is the maximum concurrent flow of the N(N-1) commodities (Shahrokhi &
Matula, "The maximum concurrent flow problem", J. ACM 37(2), 1990,
https://doi.org/10.1145/77600.77620). It is solved exactly as an LP (one flow per source
rank, HiGHS) on jobs of up to :data:`EXACT_LP_RANKS` ranks; on larger ones the bound is
the tightest of the cuts around every rank, every host and every group of hosts behind
one network switch, an upper bound which is exact when a routing reaches it - the
two-step routing below is checked for that (:func:`arborcc.synth.bounds.two_step_rate`),
and so is every synthesized algorithm.

Algorithms (Cowan et al., "GC3: An Optimizing Compiler for GPU Collective
Communication", 2022, https://arxiv.org/abs/2201.11840, section 7.3 and its public
three-step example):

* ``direct``: every block straight to its destination (one thread block per peer and
  direction: small jobs);
* ``two-step``: a block for GPU g of another host first goes, inside its host, to the
  GPU with index g (rail g), which sends the G blocks it gathered for that destination in
  one transfer: each NIC carries exactly its share, so it reaches the cut bound of a
  cluster of equal hosts; a rank talks to its host's GPUs and to the GPUs of its rail;
* ``three-step``: for thousands of GPUs, where a rank cannot hold a connection to every
  host: the traffic of each pair of hosts goes through one GPU on each side (the pairs
  spread round-robin over the GPUs, GC3's rule), which gathers the host's G x G blocks,
  transposes them with local copies, sends them in one transfer, and the receiving GPU
  hands each destination its G blocks. Hosts then pair with ``ceil((H-1)/G)`` others per
  GPU instead of ``(H-1)/G``: within 1% of the bound at 128 hosts of 8 GPUs.

A block moves as one chunk; an all-to-all has N x N of them, and the transposition from
"one source, consecutive destinations" (an input) to "one destination, consecutive
sources" (an output) moves each individually once - at 1024 ranks about a million
steps, whatever the algorithm.
"""

from __future__ import annotations

import math

from arborcc.errors import SynthesisError
from arborcc.ir.limits import dialect_limits
from arborcc.ir.model import Buffer
from arborcc.lang import AllToAll, chunk
from arborcc.synth.hosts import Cluster, cluster_of
from arborcc.synth.lower import ChannelMap, finish, local_copy, lowering_program
from arborcc.synth.result import SynthesisRequest, SynthesisResult

INPUT, OUTPUT, SCRATCH = Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH

class _Pairs:
    """The rank pairs a program uses, their device paths, and the program's connectivity."""

    def __init__(self, path):
        self.path = path
        self.pairs: dict[tuple[int, int], tuple[str, ...]] = {}
        self.n = 0

    def add(self, a: int, b: int) -> None:
        if a != b and (a, b) not in self.pairs:
            self.pairs[(a, b)] = self.path(a, b)

    def link(self, a: int, b: int) -> bool:
        return (a, b) in self.pairs

    def num_nodes(self) -> int:
        return self.n

    def channels(self) -> ChannelMap:
        return ChannelMap((a, b, p) for (a, b), p in self.pairs.items())


def _copy(pairs: _Pairs, src: int, sbuf: Buffer, sidx: int, dst: int, dbuf: Buffer, didx: int, size: int = 1) -> None:
    if src == dst:
        local_copy(src, (sbuf, sidx), (dbuf, didx), size)
    else:
        chunk(src, sbuf, sidx, size).copy(dst, dbuf, didx)


def _check_thread_blocks(strategy: str, needed: int, dialect: str | None) -> None:
    """Refuse before building when the ranks would need more thread blocks than allowed."""
    if dialect is None:
        return
    limit = dialect_limits(dialect).max_threadblocks_per_rank
    if needed > limit:
        raise SynthesisError(f"{strategy} needs about {needed} thread blocks per rank, the {dialect} dialect "
                             f"allows {limit}")


def _path_function(topology):
    try:
        cluster = cluster_of(topology)
        return cluster.path
    except SynthesisError:
        return lambda a, b: topology.route(topology.ranks[a], topology.ranks[b]).path


def _consecutive_hosts(cluster: Cluster, strategy: str) -> None:
    for ranks in cluster.hosts:
        if ranks != list(range(ranks[0], ranks[0] + len(ranks))):
            raise SynthesisError(f"{strategy} needs host-major ranks (the ranks of each host consecutive)")


# --- algorithms -------------------------------------------------------------------------

def lower_direct(topology, name: str):
    n = topology.num_ranks
    pairs = _Pairs(_path_function(topology))
    pairs.n = n
    for s in range(n):
        for d in range(n):
            pairs.add(s, d)
    channels = pairs.channels()
    with lowering_program(name, AllToAll(n, 1), pairs, channels, fuse=False) as prog:
        for s in range(n):
            for d in range(n):
                _copy(pairs, s, INPUT, d, d, OUTPUT, s)
    return finish(prog, topology, channels, n, [f"direct: {n * (n - 1)} blocks straight to their destination"])


def lower_two_step(cluster: Cluster, name: str):
    H, G = cluster.num_hosts, cluster.per_host
    n = H * G
    pairs = _Pairs(cluster.path)
    pairs.n = n
    for m in range(H):
        for i in range(G):
            for g in range(G):
                pairs.add(cluster.rank(m, i), cluster.rank(m, g))
            for k in range(H):
                pairs.add(cluster.rank(m, i), cluster.rank(k, i))
    channels = pairs.channels()
    with lowering_program(name, AllToAll(n, 1), pairs, channels, fuse=False) as prog:
        for m in range(H):
            for i in range(G):
                src = cluster.rank(m, i)
                for g in range(G):  # inside the host: straight to the destination
                    _copy(pairs, src, INPUT, cluster.rank(m, g), cluster.rank(m, g), OUTPUT, src)
                for k in range(H):  # to GPU g of this host, for GPU g of host k
                    if k != m:
                        for g in range(G):
                            _copy(pairs, src, INPUT, cluster.rank(k, g), cluster.rank(m, g), SCRATCH, k * G + i)
        for m in range(H):
            for g in range(G):
                hub = cluster.rank(m, g)
                for k in range(H):
                    if k != m:
                        chunk(hub, SCRATCH, k * G, G).copy(cluster.rank(k, g), OUTPUT, cluster.rank(m, 0))
    return finish(prog, cluster.topology, channels, n,
                  [f"two-step: inside each host to the destination's rail, then {G} blocks per transfer "
                   f"to each of {H - 1} hosts"])


def _handler(G: int, host: int, other: int) -> int:
    """The local index of the GPU of ``host`` that carries its traffic with ``other`` (GC3's
    three-step rule: the other hosts in order, round-robin over the GPUs)."""
    return (other if host > other else other - 1) % G


def lower_three_step(cluster: Cluster, name: str):
    H, G = cluster.num_hosts, cluster.per_host
    n = H * G
    pairs = _Pairs(cluster.path)
    pairs.n = n
    for m in range(H):
        for k in range(H):
            if k == m:
                continue
            x, y = cluster.rank(m, _handler(G, m, k)), cluster.rank(k, _handler(G, k, m))
            pairs.add(x, y)
            for i in range(G):
                pairs.add(cluster.rank(m, i), x)
                pairs.add(y, cluster.rank(k, i))
        for i in range(G):
            for g in range(G):
                pairs.add(cluster.rank(m, i), cluster.rank(m, g))
    channels = pairs.channels()
    block = G * G
    # a handler's scratch: per host it handles (in order), the gathered [source][destination]
    # blocks and their transpose; then, per host it receives from, the received blocks
    handled: dict[int, list[int]] = {}
    for m in range(H):
        for k in range(H):
            if k != m:
                handled.setdefault(cluster.rank(m, _handler(G, m, k)), []).append(k)
    slot = {(x, k): j for x, ks in handled.items() for j, k in enumerate(ks)}
    gathered = lambda x, k: 2 * slot[(x, k)] * block  # noqa: E731
    transposed = lambda x, k: (2 * slot[(x, k)] + 1) * block  # noqa: E731
    received = lambda y, m: (2 * len(handled[y]) + slot[(y, m)]) * block  # noqa: E731
    with lowering_program(name, AllToAll(n, 1), pairs, channels, fuse=False) as prog:
        for m in range(H):
            for i in range(G):
                src = cluster.rank(m, i)
                for g in range(G):
                    _copy(pairs, src, INPUT, cluster.rank(m, g), cluster.rank(m, g), OUTPUT, src)
                for k in range(H):  # (1) the G blocks for host k to its handler, as one run
                    if k != m:
                        x = cluster.rank(m, _handler(G, m, k))
                        _copy(pairs, src, INPUT, cluster.rank(k, 0), x, SCRATCH, gathered(x, k) + i * G, G)
        for m in range(H):
            for k in range(H):
                if k == m:
                    continue
                x, y = cluster.rank(m, _handler(G, m, k)), cluster.rank(k, _handler(G, k, m))
                for i in range(G):  # (2) transpose [source][destination] into [destination][source]
                    for g in range(G):
                        local_copy(x, (SCRATCH, gathered(x, k) + i * G + g), (SCRATCH, transposed(x, k) + g * G + i), 1)
                for start in range(0, block, 64):  # (3) one transfer (in pieces of at most 64 chunks)
                    size = min(64, block - start)
                    chunk(x, SCRATCH, transposed(x, k) + start, size).copy(y, SCRATCH, received(y, m) + start)
        for k in range(H):
            for m in range(H):
                if m == k:
                    continue
                y = cluster.rank(k, _handler(G, k, m))
                for g in range(G):  # (4) each destination its G blocks, one run
                    _copy(pairs, y, SCRATCH, received(y, m) + g * G, cluster.rank(k, g), OUTPUT, cluster.rank(m, 0), G)
    return finish(prog, cluster.topology, channels, n,
                  [f"three-step: each host pair through one GPU per side ({math.ceil((H - 1) / G)} hosts per GPU "
                   f"at most), {G}x{G} blocks transposed by local copies, one transfer per host pair"])


# --- strategies -----------------------------------------------------------------------------

def synth_direct(request: SynthesisRequest) -> SynthesisResult:
    """All-to-all with every block sent straight to its destination."""
    n = request.topology.num_ranks
    _check_thread_blocks("direct", 2 * (n - 1) + 1, request.dialect)
    lowered = lower_direct(request.topology, "direct-alltoall")
    return _result("direct", request, lowered)


def synth_two_step(request: SynthesisRequest) -> SynthesisResult:
    """GC3's two-step all-to-all on a cluster of equal hosts (module doc)."""
    cluster = cluster_of(request.topology)
    _consecutive_hosts(cluster, "two-step")
    _check_thread_blocks("two-step", 2 * (cluster.per_host - 1) + 2 * (cluster.num_hosts - 1) + 1, request.dialect)
    return _result("two-step", request, lower_two_step(cluster, "two-step-alltoall"))


def synth_three_step(request: SynthesisRequest) -> SynthesisResult:
    """GC3's three-step all-to-all on a cluster of equal hosts (module doc)."""
    cluster = cluster_of(request.topology)
    _consecutive_hosts(cluster, "three-step")
    H, G = cluster.num_hosts, cluster.per_host
    peers = math.ceil((H - 1) / G)
    _check_thread_blocks("three-step", 4 * (G - 1) + 2 * peers + 1, request.dialect)
    return _result("three-step", request, lower_three_step(cluster, "three-step-alltoall"))


def _result(strategy: str, request: SynthesisRequest, lowered) -> SynthesisResult:
    return SynthesisResult.from_lowered(strategy, request, lowered, [])
