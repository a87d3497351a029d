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
  direction: small jobs). The algorithm is the library's, the runtime's built-in
  (:func:`arborcc.library.direct.trace_direct_alltoall`); this module adds the rank
  pairs and their paths;
* ``two-step``: a block for GPU g of another host first goes, inside its host, to the
  GPU with index g (rail g), which sends the G blocks it gathered for that destination in
  one transfer: each NIC carries exactly its share, so it reaches the cut bound of a
  cluster of equal hosts; a rank talks to its host's GPUs and to the GPUs of its rail.
  The algorithm is the library's (:mod:`arborcc.library.alltoall`); this module adds
  the cluster's checks and rank pairs;
* ``three-step``: for thousands of GPUs, where a rank cannot hold a connection to every
  host: the traffic of each pair of hosts goes through one GPU on each side (the pairs
  spread round-robin over the GPUs, GC3's rule), which gathers the host's G x G blocks,
  transposes them with local copies, sends them in one transfer, and the receiving GPU
  hands each destination its G blocks. Round-robin alone leaves some GPUs
  ``ceil((H-1)/G)`` host pairs and others one fewer (99.2% of the bound at 128 hosts of
  8 GPUs); the remainder of each host's pairs goes over every rail as in two-step
  (:class:`HostPairing`), which balances the NICs exactly. Its thread blocks are placed
  by hand so that 1024 GPUs keep the executors' 64 thread blocks of 64 steps.

A block moves as one chunk; an all-to-all has N x N of them, and the transposition from
"one source, consecutive destinations" (an input) to "one destination, consecutive
sources" (an output) moves each individually once - at 1024 ranks about a million
steps, whatever the algorithm.
"""

from __future__ import annotations

from arborcc.errors import SynthesisError
from arborcc.ir.limits import MAX_CHANNELS, dialect_limits
from arborcc.ir.model import Buffer
from arborcc.lang import AllToAll, Program, ThreadblockPolicy, chunk
from arborcc.library.alltoall import trace_twostep_alltoall
from arborcc.library.direct import trace_direct_alltoall
from arborcc.synth.hosts import Cluster, cluster_of
from arborcc.synth.lower_blocks import MAX_COUNT, transfer_pieces
from arborcc.synth.lower_channels import ChannelMap
from arborcc.synth.lower_emit import finish, lowering_program

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


def check_thread_blocks(strategy: str, needed: int, dialect: str | None) -> None:
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


def check_consecutive_hosts(cluster: Cluster, strategy: str) -> None:
    """Refuse a job whose hosts' ranks are not consecutive (host-major ranks)."""
    for ranks in cluster.hosts:
        if ranks != list(range(ranks[0], ranks[0] + len(ranks))):
            raise SynthesisError(f"{strategy} needs host-major ranks (the ranks of each host consecutive)")


# --- algorithms -------------------------------------------------------------------------

def lower_direct(topology, name: str):
    """The direct all-to-all (module doc): the library's
    (:func:`arborcc.library.direct.trace_direct_alltoall`, out of place), traced into a
    program that checks its transfers against every pair of ranks and their device paths
    (the cluster's where ``topology`` is one, else its routes)."""
    n = topology.num_ranks
    pairs = _Pairs(_path_function(topology))
    pairs.n = n
    for s in range(n):
        for d in range(n):
            pairs.add(s, d)
    channels = pairs.channels()
    with lowering_program(name, AllToAll(n, 1), pairs, channels, fuse=False) as prog:
        trace_direct_alltoall(n, inplace=False)
    return finish(prog, topology, channels, n, [f"direct: {n * (n - 1)} blocks straight to their destination"])


def lower_two_step(cluster: Cluster, name: str):
    """The two-step all-to-all (module doc): the library's
    (:func:`arborcc.library.alltoall.trace_twostep_alltoall`), traced in the synthesizer's
    order (every in-host move, then every transfer between hosts) into a program that
    checks its transfers against the rank pairs it uses - a rank's host and its rail -
    and their device paths in ``cluster``. Needs host-major ranks
    (:func:`check_consecutive_hosts`), which the library's rank numbering is."""
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
        trace_twostep_alltoall(H, G, transfers_last=True)
    return finish(prog, cluster.topology, channels, n,
                  [f"two-step: inside each host to the destination's rail, then {G} blocks per transfer "
                   f"to each of {H - 1} hosts"])


class HostPairing:
    """Which GPUs carry the traffic of each pair of hosts in the three-step all-to-all.

    GC3's three-step example spreads the other hosts round-robin over a host's GPUs; with
    ``H - 1`` not a multiple of ``G`` some GPUs then carry ``ceil((H - 1) / G)`` host pairs
    and others one fewer, and the busiest NIC sets the time (15.875 / 16 = 99.2% of the
    bound at 128 hosts of 8 GPUs). Here the remainder ``q = (H - 1) mod G`` of the pairs
    of every host - the edges of a ``q``-regular circulant graph on the hosts - goes over
    all the rails instead (two-step: GPU g relays its host's blocks for GPU g of the
    other host), which gives every GPU ``1 / G`` of each such pair; the other pairs are
    dealt round-robin, ``(H - 1 - q) / G`` to each GPU. Every NIC then carries exactly
    ``1 / G`` of its host's traffic. When ``H q`` is odd no ``q``-regular graph exists and
    the pairs are all dealt round-robin, as GC3 does.
    """

    def __init__(self, hosts: int, per_host: int):
        H, G = hosts, per_host
        q = (H - 1) % G
        offsets: set[int] = set()
        if q and H * q % 2 == 0:
            offsets = {d % H for k in range(1, q // 2 + 1) for d in (k, -k)} | ({H // 2} if q % 2 else set())
        self.hosts, self.per_host = H, G
        #: per host, the hosts it exchanges with over every rail (two-step), in order
        self.rails: list[list[int]] = [sorted((m + d) % H for d in offsets) for m in range(H)]
        #: per host, the hosts it exchanges with through one GPU per side, in order
        self.relayed: list[list[int]] = [[k for k in range(H) if k != m and (k - m) % H not in offsets]
                                         for m in range(H)]
        self._position = [{k: j for j, k in enumerate(ks)} for ks in self.relayed]
        #: per host and GPU, how many host pairs it relays
        self._relays = [[len(range(g, len(ks), G)) for g in range(G)] for ks in self.relayed]
        self._rail_position = [{k: j for j, k in enumerate(ks)} for ks in self.rails]
        #: host pairs the busiest GPU relays, and host pairs each host sends over every rail
        self.pairs_per_gpu = max(-(-len(ks) // G) for ks in self.relayed)
        self.rail_pairs = max(len(ks) for ks in self.rails)

    def handler(self, host: int, other: int) -> int:
        """The local index of the GPU of ``host`` that carries its traffic with ``other``."""
        return self._position[host][other] % self.per_host

    def slot(self, host: int, other: int) -> int:
        """Which of its handler's host pairs ``(host, other)`` is (0, 1, ...)."""
        return self._position[host][other] // self.per_host

    def rail_slot(self, host: int, other: int) -> int:
        return self._rail_position[host][other]

    def nic_share(self) -> float:
        """The busiest GPU's part of its host's outgoing traffic, times ``G`` (1 is balanced)."""
        G, H = self.per_host, self.hosts
        busiest = self.pairs_per_gpu * G * G + self.rail_pairs * G
        return busiest * G / ((H - 1) * G * G)

    def operations(self) -> int:
        """The copies :func:`lower_three_step` traces (within synthesize's operations budget)."""
        H, G = self.hosts, self.per_host
        row, block = -(-G // MAX_COUNT), -(-G * G // MAX_COUNT)
        relayed = sum(len(ks) for ks in self.relayed)
        rails = sum(len(ks) for ks in self.rails)
        per_relayed = (G - 1) * row + G + (G - 1) * G + block + G * row  # gather, transpose, send, scatter
        per_rail = G * G + G * row  # gather, send
        return H * G * G + relayed * per_relayed + rails * per_rail

    def message(self, host: int, kind: str, other: int, sender: int, receiver: int) -> int:
        """The position of a message among those GPU ``sender`` of ``host`` sends to GPU
        ``receiver`` of the same host: the direct block, then the rows for the host pairs
        ``receiver`` relays, the relayed blocks of the pairs ``sender`` relays, the blocks
        for the rails' peers (``kind``: direct, row, scatter, rail)."""
        if kind == "direct":
            return 0
        if kind == "row":
            return 1 + self.slot(host, other)
        if kind == "scatter":
            return 1 + self._relays[host][receiver] + self.slot(host, other)
        return 1 + self._relays[host][receiver] + self._relays[host][sender] + self.rail_slot(host, other)

    def in_host_messages(self) -> int:
        """The most messages one GPU sends another of its host (rows of G chunks taken whole)."""
        return 1 + 2 * self.pairs_per_gpu + self.rail_pairs

    def thread_blocks(self, channels: int) -> int:
        """Thread blocks per rank with the in-host connections spread over ``channels``: a
        local one, a sending and a receiving one per in-host peer and channel, per relayed
        host pair and per rail pair (see :func:`lower_three_step`)."""
        return 1 + 2 * (self.per_host - 1) * channels + 2 * self.pairs_per_gpu + 2 * self.rail_pairs

    def steps_per_thread_block(self, channels: int) -> int:
        """An upper bound on the steps of the busiest thread block (see :func:`lower_three_step`):
        an in-host connection's sending (or receiving) thread block carries its channel's
        messages; a host pair's sending one transposes the rows of the other GPUs and sends
        the block, its receiving one transposes its GPU's own row, receives the other
        side's block and hands on its own share; a rail pair's sending one gathers its own
        block and sends, its receiving one receives."""
        G = self.per_host
        block = -(-G * G // MAX_COUNT)  # transfers per host pair's block
        in_host = -(-self.in_host_messages() // channels)
        pair_send = (G - 1) * G + block
        pair_recv = G + block + 1
        return max(in_host, pair_send, pair_recv, 2)

    def channels(self, dialect: str | None) -> int:
        """The fewest channels for the in-host connections that keep ``dialect``'s limits of
        thread blocks per rank and steps per thread block (1 without a dialect); raises
        :class:`SynthesisError` when none does."""
        if dialect is None:
            return 1
        lim = dialect_limits(dialect)
        for c in range(1, MAX_CHANNELS + 1):
            if self.thread_blocks(c) > lim.max_threadblocks_per_rank:
                break
            if self.steps_per_thread_block(c) <= lim.max_steps_per_threadblock:
                return c
        raise SynthesisError(f"three-step: {self.hosts} hosts of {self.per_host} GPUs need more than the "
                             f"{dialect} runtime's channels, or its thread blocks or steps per thread block "
                             f"(about {self.in_host_messages()} messages between two GPUs of a host)")


def lower_three_step(cluster: Cluster, name: str, dialect: str | None = "executor"):
    """The three-step all-to-all (module doc) with thread blocks placed by hand.

    No thread block both sends and receives: each rank has a sending and a receiving
    thread block per in-host peer and channel, per host pair it relays (with the other
    side's relay) and per rail peer of the pairs that go over every rail, and a local
    one. The MSCCL runtimes cut a step into pieces that fill a connection's FIFO (two
    Simple pieces, :mod:`arborcc.verify.pieces`); a thread block that sent to a peer
    before receiving from it would wait, with the peer doing the same, on a full FIFO
    in both directions. With every connection read by a thread block that only
    receives, every send completes once its data is there, at every piece size. The
    messages between two GPUs of a host are dealt round-robin over ``C`` channels
    (:meth:`HostPairing.message`); ``C`` is the fewest that keeps the dialect's limits
    (:meth:`HostPairing.channels`). A relay transposes the rows it gathered in the
    thread block that sends the host pair's block.
    """
    H, G = cluster.num_hosts, cluster.per_host
    if G > MAX_COUNT:
        raise SynthesisError(f"three-step: hosts of {G} GPUs; a row of a host's blocks must fit one transfer "
                             f"(at most {MAX_COUNT} GPUs per host)")
    n = H * G
    plan = HostPairing(H, G)
    C = plan.channels(dialect)
    P, R = plan.pairs_per_gpu, plan.rail_pairs
    rank = cluster.rank
    pairs = _Pairs(cluster.path)
    pairs.n = n
    for m in range(H):
        for k in plan.relayed[m]:
            pairs.add(rank(m, plan.handler(m, k)), rank(k, plan.handler(k, m)))
        for i in range(G):
            for g in range(G):
                pairs.add(rank(m, i), rank(m, g))
            for k in plan.rails[m]:
                pairs.add(rank(m, i), rank(k, i))
    channels = pairs.channels()
    block = G * G
    # thread blocks of a rank: 0 local, then sending and receiving ones per in-host peer
    # and channel, per relayed host pair (its slot), per rail pair
    def send_tb(peer_local: int, ch: int) -> int:
        return 1 + ch * G + peer_local

    def recv_tb(peer_local: int, ch: int) -> int:
        return 1 + (C + ch) * G + peer_local

    def pair_send_tb(slot: int) -> int:
        return 1 + 2 * C * G + slot

    def pair_recv_tb(slot: int) -> int:
        return 1 + 2 * C * G + P + slot

    def rail_send_tb(j: int) -> int:
        return 1 + 2 * C * G + 2 * P + j

    def rail_recv_tb(j: int) -> int:
        return 1 + 2 * C * G + 2 * P + R + j

    # scratch of a relay: per host pair (its slot), the gathered rows [source][destination],
    # their transpose [destination][source] and the block received from the other side;
    # then per rail pair the G blocks gathered for the rail peer
    gathered = lambda s: 3 * s * block  # noqa: E731
    transposed = lambda s: (3 * s + 1) * block  # noqa: E731
    received = lambda s: (3 * s + 2) * block  # noqa: E731
    rail_gathered = lambda j: 3 * P * block + j * G  # noqa: E731

    def send(src: int, sbuf: Buffer, sidx: int, size: int, dst: int, dbuf: Buffer, didx: int,
             stb: int, rtb: int, ch: int) -> None:
        for first, cnt in transfer_pieces(0, size):
            chunk(src, sbuf, sidx + first, cnt).copy(dst, dbuf, didx + first, sendtb=stb, recvtb=rtb, ch=ch)

    def send_in_host(m: int, i: int, sbuf: Buffer, sidx: int, size: int, g: int, dbuf: Buffer, didx: int,
                     position: int) -> None:
        c = position % C
        send(rank(m, i), sbuf, sidx, size, rank(m, g), dbuf, didx, send_tb(g, c), recv_tb(i, c), c)

    def copy_local(r: int, sbuf: Buffer, sidx: int, dbuf: Buffer, didx: int, size: int, tb: int) -> None:
        for first, cnt in transfer_pieces(0, size):
            chunk(r, sbuf, sidx + first, cnt).copy(r, dbuf, didx + first, sendtb=tb)

    # an all-to-all moves n^2 blocks one by one (module doc): 1.3 million operations at
    # 1024 ranks, within synthesize's operations budget (synthesis.operations_budget)
    with Program(name, AllToAll(n, 1), pairs, threadblock_policy=ThreadblockPolicy.manual,
                 instr_fusion=False) as prog:
        for m in range(H):
            for i in range(G):
                src = rank(m, i)
                for g in range(G):  # inside the host: straight to the destination
                    if g == i:
                        copy_local(src, INPUT, src, OUTPUT, src, 1, 0)
                    else:
                        send_in_host(m, i, INPUT, rank(m, g), 1, g, OUTPUT, src, 0)
                for k in plan.relayed[m]:  # (1) the G blocks for host k to its relay, as one run
                    h, s = plan.handler(m, k), plan.slot(m, k)
                    if h == i:  # the relay's own row: straight into the transpose
                        for g in range(G):
                            copy_local(src, INPUT, rank(k, g), SCRATCH, transposed(s) + g * G + i, 1,
                                       pair_recv_tb(s))
                    else:
                        send_in_host(m, i, INPUT, rank(k, 0), G, h, SCRATCH, gathered(s) + i * G,
                                     plan.message(m, "row", k, i, h))
                for k in plan.rails[m]:  # (1') the block for GPU g of host k to rail g
                    j = plan.rail_slot(m, k)
                    for g in range(G):
                        if g == i:
                            copy_local(src, INPUT, rank(k, g), SCRATCH, rail_gathered(j) + i, 1, rail_send_tb(j))
                        else:
                            send_in_host(m, i, INPUT, rank(k, g), 1, g, SCRATCH, rail_gathered(j) + i,
                                         plan.message(m, "rail", k, i, g))
        for m in range(H):
            for k in plan.relayed[m]:
                h, s = plan.handler(m, k), plan.slot(m, k)
                x, y = rank(m, h), rank(k, plan.handler(k, m))
                for i in range(G):  # (2) transpose the received rows, in the thread block that sends the block
                    if i != h:
                        for g in range(G):
                            copy_local(x, SCRATCH, gathered(s) + i * G + g, SCRATCH, transposed(s) + g * G + i, 1,
                                       pair_send_tb(s))
                # (3) one transfer per host pair (in pieces of at most MAX_COUNT chunks)
                send(x, SCRATCH, transposed(s), block, y, SCRATCH, received(plan.slot(k, m)),
                     pair_send_tb(s), pair_recv_tb(plan.slot(k, m)), 0)
            for k in plan.rails[m]:
                j = plan.rail_slot(m, k)
                for g in range(G):  # (3') G blocks per rail peer, straight into its output
                    send(rank(m, g), SCRATCH, rail_gathered(j), G, rank(k, g), OUTPUT, rank(m, 0),
                         rail_send_tb(j), rail_recv_tb(plan.rail_slot(k, m)), 0)
        for k in range(H):
            for m in plan.relayed[k]:
                h, s = plan.handler(k, m), plan.slot(k, m)
                for g in range(G):  # (4) each destination its G blocks, one run
                    if g == h:
                        copy_local(rank(k, h), SCRATCH, received(s) + g * G, OUTPUT, rank(m, 0), G, pair_recv_tb(s))
                    else:
                        send_in_host(k, h, SCRATCH, received(s) + g * G, G, g, OUTPUT, rank(m, 0),
                                     plan.message(k, "scatter", m, h, g))
    rails = (f"; {R} host pairs per host over all {G} rails (two-step), which balances the NICs"
             if R else "")
    return finish(prog, cluster.topology, channels, n,
                  [f"three-step: each host pair through one GPU per side ({P} host pairs per GPU "
                   f"at most), {G}x{G} blocks transposed by local copies, one transfer per host pair{rails}; "
                   f"in-host connections over {C} channel(s), no thread block both sends and receives"])
