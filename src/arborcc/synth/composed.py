"""Collectives on clusters: per-host schedules composed with rail schedules across hosts.

On a cluster of identical hosts joined by a network the inter-host cut is the
bottleneck: a host's NICs (and the PCIe lanes to them) carry a few hundred GB/s while
NVLink or NVSwitch carries several times that inside the host. An algorithm reaches the
bound when every byte crosses into every host once, spread evenly over the host's NICs,
and the rest happens inside the hosts. The algorithms here do exactly that, with one
GPU per NIC (its *rail*: GPU k uses the NIC with its index, :class:`~.hosts.Cluster`),
and move contiguous chunk ranges so that an algorithm on 1024 GPUs has a few hundred
steps per rank. Inside a host a GPU reaches its peers directly (one-hop trees: optimal on
an NVSwitch, which relays without duplicating).

Ranges. With one chunk per rank, host m must receive the ``(H-1) G`` chunks of the other
hosts. Concatenate the other hosts' segments in the order m+1, m-1, m+2, m-2, ... and
cut the concatenation into G equal ranges: GPU k of host m receives range ``R_k(m)`` over its
NIC, from the GPUs k of the hosts the range covers, and passes it on inside its host.
Every NIC then receives exactly ``H-1`` chunks, and - summed over the destinations - every
GPU k sends exactly ``H-1`` (segment j sits at every position of the concatenation once
as m varies), so ingress and egress are balanced whatever H and G. The alternating
order makes the hosts a GPU receives from about those it sends to, so an all-reduce's
two directions share their connections (thread blocks).

* all-gather: (1) each GPU sends its block to its host's GPUs; (2) GPU k of host j sends
  the part of its host's segment in ``R_k(m)`` to GPU k of host m; (3) GPU k of host m
  sends ``R_k(m)`` to its host's other GPUs.
* reduce-scatter: the reverse, accumulating in the input (as GC3's reduce-scatters do):
  (3') GPU k of host m sums ``R_k(m)`` over its host; (2') sends each part to GPU k of
  the owner host, which adds it in; (1') each GPU sums its own block over its host.
* all-reduce: the reduce-scatter's phases, then the all-gather's, in place on the input
  (one chunk per rank): at the reduce-scatter's and the all-gather's bounds, each phase
  moves what the all-reduce bound's reduce-scatter + all-gather decomposition needs.
* broadcast from GPU k0 of host h0: the buffer is cut into G pieces; the root sends piece
  k to GPU k of its host; piece k then travels the chain of GPUs k of hosts h0, h0+1, ...,
  h0-1 (each NIC sends and receives one piece: the whole host egress), and every GPU k
  sends it to its host's other GPUs. Reduce is the reverse.
* gather to the root: the blocks of ``R_k(h0)`` meet on GPU k of their host, cross the
  network to GPU k of the root's host and go on to the root; scatter is the reverse.

Each function lowers to a DSL program through :mod:`.lower` and returns its
:class:`~.lower_emit.Lowered` (compiled and estimated, not yet verified). The reference for
the rail layout and the per-host/inter-host split is NCCL's hierarchical (tree and
"PAT") algorithms and GC3's hierarchical examples (Cowan et al., "GC3: An Optimizing
Compiler for GPU Collective Communication", 2022, https://arxiv.org/abs/2201.11840);
the balanced ranges are this module's.
"""

from __future__ import annotations

from arborcc.ir.model import Buffer
from arborcc.lang import AllGather, AllReduce, Broadcast, Gather, Reduce, ReduceScatter, Scatter, chunk, current_program
from arborcc.synth.hosts import Cluster
from arborcc.synth.lower_blocks import MAX_COUNT, transfer_pieces
from arborcc.synth.lower_channels import ChannelMap
from arborcc.synth.lower_emit import Lowered, accumulating_buffer, finish, local_copy, lowering_program

INPUT, OUTPUT, SCRATCH = Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH

Interval = tuple[int, int]  #: chunks [start, stop)


def _offsets(H: int) -> list[int]:
    """The other hosts as offsets 1, -1, 2, -2, ... (each of 1 .. H-1 once, mod H): a
    GPU then receives from about the hosts it sends to, which keeps the peers of an
    all-reduce (both directions) within the runtimes' thread-block limits."""
    out, seen, d = [], {0}, 1
    while len(out) < H - 1:
        for o in (d, -d):
            if o % H not in seen:
                seen.add(o % H)
                out.append(o)
        d += 1
    return out


def owner_ranges(cluster: Cluster, m: int) -> list[list[Interval]]:
    """``R_k(m)`` for every local index k: the buffer intervals (one chunk per rank) GPU k
    of host m receives over the network (module doc)."""
    H, G = cluster.num_hosts, cluster.per_host
    order = [(m + d) % H for d in _offsets(H)]
    out = []
    for k in range(G):
        intervals: list[Interval] = []
        for p in range(k * (H - 1), (k + 1) * (H - 1)):
            host, local = order[p // G], p % G
            g = cluster.rank(host, local)
            if intervals and intervals[-1][1] == g:
                intervals[-1] = (intervals[-1][0], g + 1)
            else:
                intervals.append((g, g + 1))
        out.append(intervals)
    return out


def by_host(cluster: Cluster, interval: Interval) -> list[tuple[int, Interval]]:
    """An interval of the buffer cut at host boundaries: ``(host, sub-interval)``."""
    a, b = interval
    out = []
    while a < b:
        h = cluster.host_of[a]
        stop = min(b, max(cluster.hosts[h]) + 1)
        out.append((h, (a, stop)))
        a = stop
    return out


class _Transfers:
    """The rank pairs a program uses and their device paths (the cluster's), for the
    channel map; ``tree`` indices spread transfers over channels when asked."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.pairs: dict[tuple[int, int], tuple[str, ...]] = {}

    def add(self, a: int, b: int) -> None:
        if (a, b) not in self.pairs:
            self.pairs[(a, b)] = self.cluster.path(a, b)

    def channels(self, spread: int) -> ChannelMap:
        return ChannelMap(((a, b, p) for (a, b), p in self.pairs.items()), spread)

    def link(self, a: int, b: int) -> bool:
        """The program's connectivity: only the planned pairs (whose paths are known)."""
        return (a, b) in self.pairs

    def num_nodes(self) -> int:
        return self.cluster.topology.num_ranks


def _check_single_chunk_ranks(cluster: Cluster) -> None:
    """Rank r's block must be chunk r: the hosts' ranks must be consecutive."""
    for ranks in cluster.hosts:
        if ranks != list(range(ranks[0], ranks[0] + len(ranks))):
            from arborcc.errors import SynthesisError

            raise SynthesisError(f"{cluster.topology.name}: the ranks of a host are not consecutive "
                                 f"(host of rank {ranks[0]}); the composed algorithms need host-major ranks")


# --- all-gather, reduce-scatter, all-reduce ------------------------------------------------

def _allgather_pairs(cluster: Cluster, tr: _Transfers) -> tuple[list, list, list]:
    """The three phases of the composed all-gather as (src, dst, interval) transfers."""
    H, G = cluster.num_hosts, cluster.per_host
    local = [(cluster.rank(h, l), cluster.rank(h, p), (cluster.rank(h, l), cluster.rank(h, l) + 1))
             for h in range(H) for l in range(G) for p in range(G) if p != l]
    network, spread = [], []
    for m in range(H):
        for k, intervals in enumerate(owner_ranges(cluster, m)):
            dst = cluster.rank(m, k)
            for interval in intervals:
                for j, part in by_host(cluster, interval):
                    network.append((cluster.rank(j, k), dst, part))
                spread += [(dst, cluster.rank(m, p), interval) for p in range(G) if p != k]
    for src, dst, _ in local + network + spread:
        tr.add(src, dst)
    return local, network, spread


def _copy(src: int, dst: int, interval: Interval, buffer: Buffer, channels: ChannelMap, tr: _Transfers,
          tree: int, src_buffer: Buffer | None = None, most: int = MAX_COUNT) -> None:
    pieces = transfer_pieces(*interval, most)
    if pieces:  # the connection's channel is chosen by its first transfer
        ch = channels.channel(src, dst, tr.pairs[(src, dst)], tree)
        current_program().trace_copies([(src, src_buffer or buffer, start, dst, buffer, start, n, ch)
                                        for start, n in pieces])


def _reduce(acc: int, other: int, interval: Interval, buffer: Buffer, channels: ChannelMap, tr: _Transfers,
            tree: int) -> None:
    pieces = transfer_pieces(*interval)
    if pieces:
        ch = channels.channel(other, acc, tr.pairs[(other, acc)], tree)
        current_program().trace_reduces([(other, buffer, start, acc, buffer, start, n, ch) for start, n in pieces])


def lower_composed_allgather(cluster: Cluster, name: str, spread: int = 0) -> Lowered:
    """All-gather in three phases (module doc), one chunk per rank."""
    _check_single_chunk_ranks(cluster)
    tr = _Transfers(cluster)
    local, network, spread_ = _allgather_pairs(cluster, tr)
    channels = tr.channels(spread)
    n = cluster.topology.num_ranks
    with lowering_program(name, AllGather(n, 1), tr, channels, fuse=False) as prog:
        for r in range(n):
            local_copy(r, (INPUT, 0), (OUTPUT, r), 1)
        _allgather_phases(cluster, local, network, spread_, OUTPUT, channels, tr)
    return finish(prog, cluster.topology, channels, 1, [_summary("all-gather", cluster, network)])


def _both_ways(cluster: Cluster, spread: int) -> tuple[_Transfers, list, list, list, ChannelMap]:
    """The all-gather's transfers with every connection also the other way round (what a
    reduce-scatter uses), and their channels."""
    _check_single_chunk_ranks(cluster)
    tr = _Transfers(cluster)
    local, network, spread_ = _allgather_pairs(cluster, tr)
    for src, dst, _ in local + network + spread_:
        tr.add(dst, src)
    return tr, local, network, spread_, tr.channels(spread)


def lower_composed_reducescatter(cluster: Cluster, name: str, spread: int = 0) -> Lowered:
    """Reduce-scatter: the all-gather's transfers reversed, accumulating in the input."""
    tr, local, network, spread_, channels = _both_ways(cluster, spread)
    n = cluster.topology.num_ranks
    with lowering_program(name, ReduceScatter(n, 1), tr, channels, fuse=False) as prog:
        _reduce_scatter_phases(cluster, local, network, spread_, channels, tr)
        for r in range(n):
            local_copy(r, (INPUT, r), (OUTPUT, 0), 1)
    return finish(prog, cluster.topology, channels, 1, [_summary("reduce-scatter", cluster, network)])


def lower_composed_allreduce(cluster: Cluster, name: str, spread: int = 0) -> Lowered:
    """All-reduce: the reduce-scatter's phases, then the all-gather's, in place on the
    input (module doc) - or, inside :func:`~arborcc.synth.lower_emit.out_of_place_lowering`,
    on the output, every rank's input copied there first; both directions of every
    connection, as the reduce-scatter."""
    tr, local, network, spread_, channels = _both_ways(cluster, spread)
    n = cluster.topology.num_ranks
    acc = accumulating_buffer()
    with lowering_program(name, AllReduce(n, n, inplace=acc is INPUT), tr, channels, fuse=False) as prog:
        if acc is not INPUT:
            for r in range(n):
                local_copy(r, (INPUT, 0), (acc, 0), n)
        _reduce_scatter_phases(cluster, local, network, spread_, channels, tr, acc)
        _allgather_phases(cluster, local, network, spread_, acc, channels, tr)
    return finish(prog, cluster.topology, channels, n, [_summary("all-reduce", cluster, network)])


def _allgather_phases(cluster, local, network, spread_, buffer: Buffer, channels, tr) -> None:
    for src, dst, interval in local:  # (1) each GPU's block to its host
        _copy(src, dst, interval, buffer, channels, tr, cluster.local[src])
    for src, dst, interval in network:  # (2) across the rails
        _copy(src, dst, interval, buffer, channels, tr, cluster.local[src])
    for src, dst, interval in spread_:  # (3) each range to the host's other GPUs
        _copy(src, dst, interval, buffer, channels, tr, cluster.local[dst])


def _reduce_scatter_phases(cluster, local, network, spread_, channels, tr, buffer: Buffer = INPUT) -> None:
    for src, dst, interval in spread_:  # (3') GPU k sums its range over its host
        _reduce(src, dst, interval, buffer, channels, tr, cluster.local[src])
    for src, dst, interval in network:  # (2') to the owner host's GPU k
        _reduce(src, dst, interval, buffer, channels, tr, cluster.local[src])
    for src, dst, interval in local:  # (1') each GPU sums its own block
        _reduce(src, dst, interval, buffer, channels, tr, cluster.local[src])


def _summary(what: str, cluster: Cluster, network: list) -> str:
    return (f"{what} composed over {cluster.num_hosts} hosts of {cluster.per_host} GPUs: one chunk per rank, "
            f"each GPU's NIC carries {cluster.num_hosts - 1} chunks each way in {len(network)} network transfers")


# --- broadcast, reduce -----------------------------------------------------------------------

def _chain(cluster: Cluster, root: int) -> list[int]:
    """Hosts in chain order from the root's host."""
    h0, H = cluster.host_of[root], cluster.num_hosts
    return [(h0 + i) % H for i in range(H)]


def piece_rounds_most(cluster: Cluster, steps_per_threadblock: int) -> int:
    """The most rounds (:func:`lower_composed_broadcast`) whose thread blocks hold at most
    ``steps_per_threadblock`` steps: the busiest is a GPU of the root's host that spreads
    its piece (``rounds x (G - 1)`` chunks) and its rounds of the root's piece to one peer."""
    return max(1, steps_per_threadblock // cluster.per_host)


def _piece_chunks(cluster: Cluster, rounds: int) -> int:
    """Chunks per piece: ``rounds x (G - 1)``, so that the root's own piece can be spread
    by its G - 1 host peers, ``rounds`` chunks each (the root then sends - or, reducing,
    receives - about one buffer over NVLink instead of almost two)."""
    return max(1, cluster.per_host - 1) * rounds


def _spreaders(cluster: Cluster, root: int, h: int, rounds: int) -> list[tuple[int, Interval]]:
    """Who spreads which chunks inside host h: GPU k its piece k - except the root's own
    piece, whose chunks its G - 1 host peers spread, chunk i by peer i mod (G - 1)."""
    G, c = cluster.per_host, _piece_chunks(cluster, rounds)
    out = []
    for k in range(G):
        if cluster.rank(h, k) != root:
            out.append((cluster.rank(h, k), (k * c, (k + 1) * c)))
        else:
            out += [(cluster.rank(h, (k + 1 + i % max(1, G - 1)) % G), (k * c + i, k * c + i + 1)) for i in range(c)]
    return out


def _local_tree(cluster: Cluster, root: int, rounds: int) -> list[tuple[int, int, Interval]]:
    """(spreader, receiver, chunks) inside every host: each piece from its spreader to
    every GPU of the host but the spreader and the root."""
    out = []
    for h in _chain(cluster, root):
        for d, interval in _spreaders(cluster, root, h, rounds):
            out += [(d, r, interval) for r in cluster.hosts[h] if r not in (d, root)]
    return out


def lower_composed_broadcast(cluster: Cluster, root: int, name: str, spread: int = 0, rounds: int = 1) -> Lowered:
    """Broadcast from ``root`` over rail chains (module doc); G pieces, piece k on rail k,
    each of ``rounds x (G - 1)`` chunks.

    Every hop moves one chunk per step: a relay forwards a step only once it has received
    all of it, so a hop of a whole piece would hold the chain back a piece's share of
    every iteration per host (on 16 x DGX H100 at 1 GiB, 5239 us against 3257 per chunk).
    More rounds make the chunks smaller than the runtime's slice at smaller sizes, and
    with them what each host holds back."""
    G, c, hosts = cluster.per_host, _piece_chunks(cluster, rounds), _chain(cluster, root)
    tr = _Transfers(cluster)
    first = [(root, d, interval) for d, interval in _spreaders(cluster, root, hosts[0], rounds) if d != root]
    chain = [(cluster.rank(a, k), cluster.rank(b, k), (k * c, (k + 1) * c)) for a, b in zip(hosts, hosts[1:])
             for k in range(G)]
    spread_ = _local_tree(cluster, root, rounds)
    for src, dst, _ in first + chain + spread_:
        tr.add(src, dst)
    channels = tr.channels(spread)
    with lowering_program(name, Broadcast(cluster.topology.num_ranks, G * c, root=root), tr, channels, fuse=False) as prog:
        local_copy(root, (INPUT, 0), (OUTPUT, 0), G * c)
        for src, dst, interval in first + chain + spread_:  # the root sends from its input
            _copy(src, dst, interval, OUTPUT, channels, tr, interval[0] // c, INPUT if src == root else None, most=1)
    return finish(prog, cluster.topology, channels, G * c,
                  [f"broadcast over {G} rail chains through {cluster.num_hosts} hosts"])


def lower_composed_reduce(cluster: Cluster, root: int, name: str, spread: int = 0, rounds: int = 1) -> Lowered:
    """Reduce to ``root``: the composed broadcast reversed, one chunk per step as it;
    partial sums accumulate in the outputs (unconstrained outside the root)."""
    G, c, hosts = cluster.per_host, _piece_chunks(cluster, rounds), _chain(cluster, root)
    tr = _Transfers(cluster)
    gather = [(dst, src, interval) for src, dst, interval in _local_tree(cluster, root, rounds)]
    own = cluster.local[root]
    gather += [(root, d, interval) for d, interval in _spreaders(cluster, root, hosts[0], rounds)
               if interval[0] // c != own]  # the root adds its own piece itself
    chain = [(cluster.rank(b, k), cluster.rank(a, k), (k * c, (k + 1) * c))
             for a, b in reversed(list(zip(hosts, hosts[1:]))) for k in range(G)]
    last = [(d, root, interval) for d, interval in _spreaders(cluster, root, hosts[0], rounds) if d != root]
    for src, dst, _ in gather + chain + last:
        tr.add(src, dst)
    channels = tr.channels(spread)
    n = cluster.topology.num_ranks

    def add(src: int, dst: int, interval: Interval, buffer: Buffer) -> None:
        for start, size in transfer_pieces(*interval, 1):
            chunk(dst, OUTPUT, start, size).reduce(chunk(src, buffer, start, size),
                                                   ch=channels.channel(src, dst, tr.pairs[(src, dst)], start // c))

    with lowering_program(name, Reduce(n, G * c, root=root), tr, channels, fuse=False) as prog:
        for h in hosts:
            for d, (a, b) in _spreaders(cluster, root, h, rounds):
                local_copy(d, (INPUT, a), (OUTPUT, a), b - a)
        local_copy(root, (INPUT, own * c), (OUTPUT, own * c), c)
        for src, dst, interval in gather:
            add(src, dst, interval, INPUT)
        for src, dst, interval in chain:
            add(src, dst, interval, OUTPUT)
        for src, dst, interval in last:
            if interval[0] // c == own:
                add(src, dst, interval, OUTPUT)
            else:
                _copy(src, dst, interval, OUTPUT, channels, tr, interval[0] // c, most=1)
    return finish(prog, cluster.topology, channels, G * c,
                  [f"reduce over {G} rail chains through {cluster.num_hosts} hosts"])


# --- gather, scatter ----------------------------------------------------------------------

def _gather_plan(cluster: Cluster, root: int) -> list[list[tuple[Interval, list[tuple[int, Interval]]]]]:
    """Per local index k of the root's host: each interval of R_k(h0) with its
    (source host, part) pieces."""
    h0 = cluster.host_of[root]
    return [[(interval, by_host(cluster, interval)) for interval in intervals]
            for intervals in owner_ranges(cluster, h0)]


def lower_composed_gather(cluster: Cluster, root: int, name: str, spread: int = 0) -> Lowered:
    """Gather to ``root``: blocks meet on their host's GPU k, cross to GPU k of the root's
    host, then go to the root (module doc); one chunk per rank, staged in scratch."""
    _check_single_chunk_ranks(cluster)
    h0, n = cluster.host_of[root], cluster.topology.num_ranks
    plan = _gather_plan(cluster, root)
    tr = _Transfers(cluster)
    steps = []  # (kind, src, dst, interval, src buffer, dst buffer)
    for k, intervals in enumerate(plan):
        hub = cluster.rank(h0, k)
        for interval, parts in intervals:
            for j, (a, b) in parts:
                sender = cluster.rank(j, k)
                for g in range(a, b):
                    steps.append((g, sender, (g, g + 1), INPUT, SCRATCH))
                steps.append((sender, hub, (a, b), SCRATCH, SCRATCH))
            steps.append((hub, root, interval, SCRATCH, OUTPUT))
    locals_ = [(g, root, (g, g + 1), INPUT, OUTPUT) for g in cluster.hosts[h0]]
    for src, dst, *_ in steps + locals_:
        if src != dst:
            tr.add(src, dst)
    channels = tr.channels(spread)
    with lowering_program(name, Gather(n, 1, root=root), tr, channels, fuse=False) as prog:
        for src, dst, (a, b), sbuf, dbuf in locals_ + steps:
            if src == dst:
                local_copy(src, (sbuf, a if sbuf is not INPUT else 0), (dbuf, a), b - a)
            else:
                for start, size in transfer_pieces(a, b):
                    chunk(src, sbuf, start if sbuf is not INPUT else 0, size).copy(
                        dst, dbuf, start, ch=channels.channel(src, dst, tr.pairs[(src, dst)], cluster.local[dst]))
    return finish(prog, cluster.topology, channels, 1,
                  [f"gather through the {cluster.per_host} NICs of the root's host, balanced ranges"])


def lower_composed_scatter(cluster: Cluster, root: int, name: str, spread: int = 0) -> Lowered:
    """Scatter from ``root``: the composed gather reversed."""
    _check_single_chunk_ranks(cluster)
    h0, n = cluster.host_of[root], cluster.topology.num_ranks
    plan = _gather_plan(cluster, root)
    tr = _Transfers(cluster)
    steps = []
    locals_ = [(root, g, (g, g + 1), INPUT, OUTPUT) for g in cluster.hosts[h0]]
    for k, intervals in enumerate(plan):
        hub = cluster.rank(h0, k)
        for interval, parts in intervals:
            steps.append((root, hub, interval, INPUT, SCRATCH))
            for j, (a, b) in parts:
                sender = cluster.rank(j, k)
                steps.append((hub, sender, (a, b), SCRATCH, SCRATCH))
                for g in range(a, b):
                    steps.append((sender, g, (g, g + 1), SCRATCH, OUTPUT))
    for src, dst, *_ in steps + locals_:
        if src != dst:
            tr.add(src, dst)
    channels = tr.channels(spread)
    with lowering_program(name, Scatter(n, 1, root=root), tr, channels, fuse=False) as prog:
        for src, dst, (a, b), sbuf, dbuf in locals_ + steps:
            d = 0 if dbuf is OUTPUT else a
            if src == dst:
                local_copy(src, (sbuf, a), (dbuf, d), b - a)
            else:
                for start, size in transfer_pieces(a, b):
                    chunk(src, sbuf, start, size).copy(
                        dst, dbuf, d + start - a, ch=channels.channel(src, dst, tr.pairs[(src, dst)],
                                                                       cluster.local[src]))
    return finish(prog, cluster.topology, channels, 1,
                  [f"scatter through the {cluster.per_host} NICs of the root's host, balanced ranges"])
