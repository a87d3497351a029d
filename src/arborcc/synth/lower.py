"""Lowering schedules (weighted trees, rings) to DSL programs, compiled and verified.

Every strategy of :mod:`arborcc.synth` ends here: a schedule becomes a chunk-DSL
program (GC3 section 3) and the compiler turns it into an Algorithm (which
:func:`arborcc.synth.synthesis.synthesize` proves with the verifier before returning it).

Trees (Blink section 4.1): the buffer (or each rank's shard) is split into chunks,
apportioned to the trees in proportion to their weights (:mod:`.quantize`); a chunk
travels its tree breadth-first (broadcast, all-gather) or is reduced leaves-first
towards the root (reduce, reduce-scatter). Chunks of different trees are emitted
round-robin so that trees sharing a link share it fairly (Blink section 4.2.2).

Channels: a tree hop between two ranks follows a device path; hops of the same rank
pair that take different paths (NVLink vs PCIe, Blink section 3.4) get different
channels, so each (pair, channel) connection has one path. The path of every
connection is returned in ``routes`` for the bandwidth model.
"""

from __future__ import annotations

import inspect
from collections import deque
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from arborcc.errors import SynthesisError
from arborcc.ir.limits import DIALECTS, MAX_CHANNELS
from arborcc.memo import CallMemo
from arborcc.ir.model import Algorithm, Buffer
from arborcc.lang import AllGather, AllReduce, Broadcast, Program, Reduce, ReduceScatter, chunk, current_program
from arborcc.sim.bandwidth import BandwidthEstimate, steady_state_bandwidth
from arborcc.synth.trees import Tree
from arborcc.topology.model import DeviceKind, Topology

INPUT, OUTPUT = Buffer.INPUT, Buffer.OUTPUT
#: thread blocks per rank and steps per thread block every dialect allows
MAX_THREADBLOCKS = min(d.max_threadblocks_per_rank for d in DIALECTS.values())
MAX_STEPS = min(d.max_steps_per_threadblock for d in DIALECTS.values())
#: chunks per transfer: the largest power of two every dialect's ``cnt`` limit allows
MAX_COUNT = 1 << (min(d.max_count_exclusive for d in DIALECTS.values()) - 1).bit_length() - 1


@dataclass
class Lowered:
    """A verified algorithm, the device path of each connection, and its predicted algbw."""

    algorithm: Algorithm
    routes: dict[tuple[int, int, int], tuple[str, ...]]
    chunks: int
    estimate: BandwidthEstimate
    notes: list[str] = field(default_factory=list)


class ChannelMap:
    """Which channel a hop uses, and the device path of every connection.

    Default: when every rank pair uses a single path, hops leave the channel to the
    compiler (``ch=-1``), which keeps instruction fusion free to chain receives and
    sends; the path of a connection is then its pair's path. When some pair uses
    several paths (hybrid NVLink + PCIe), each path of a pair gets its own channel.
    ``spread=k``: tree t uses channel ``t mod k``, which spreads the steps over more
    thread blocks - the MSCCL executors allow only 64 steps per thread block (and 64
    thread blocks per rank on RCCL, so k stays as small as will do).
    ``tree_channels``: tree t uses channel ``tree_channels[t]`` (:func:`tree_channel_map`).
    With pinned channels a fused chain stays on its hop's channel; chains of different
    trees that would need one connection's thread block for two peers are cut by the
    compiler. A pinned channel whose connection already has another path moves to the
    next free one.
    """

    def __init__(self, hops: Iterable[tuple[int, int, tuple[str, ...]]], spread: int = 0,
                 tree_channels: Sequence[int] | None = None) -> None:
        self._paths: dict[tuple[int, int], list[tuple[str, ...]]] = {}
        for src, dst, path in hops:
            paths = self._paths.setdefault((src, dst), [])
            if path not in paths:
                paths.append(path)
        self.spread = min(spread, MAX_CHANNELS)
        #: per tree, the channel all its hops use (:func:`tree_channel_map`)
        self.tree_channels = list(tree_channels) if tree_channels is not None else None
        self.pinned = (bool(spread) or self.tree_channels is not None
                       or any(len(p) > 1 for p in self._paths.values()))
        self._routes: dict[tuple[int, int, int], tuple[str, ...]] = {}
        self._down: dict[tuple[int, int], tuple[dict, list[tuple[int, int, int]]]] = {}
        worst = max((len(p) for p in self._paths.values()), default=0)
        if worst > MAX_CHANNELS:
            raise SynthesisError(f"a rank pair uses {worst} distinct paths, more than MSCCL's {MAX_CHANNELS} channels")

    def channel(self, src: int, dst: int, path: tuple[str, ...], tree: int = 0) -> int:
        if not self.pinned:
            return -1
        if self.tree_channels is not None:
            first = self.tree_channels[tree]
        else:
            first = tree % self.spread if self.spread else self._paths[(src, dst)].index(path)
        for k in range(MAX_CHANNELS):
            ch = (first + k) % MAX_CHANNELS
            if self._routes.setdefault((src, dst, ch), path) == path:
                return ch
        raise SynthesisError(f"ranks {src}->{dst}: no channel left for another path")

    def down_tree(self, root: int, kids, tree: int = 0) -> list[tuple[int, int, int]]:
        """(parent, child, channel) of every hop of tree ``tree`` (``kids``:
        :func:`tree_children`) in breadth-first order from ``root``, worked out on the
        first call for the tree: a hop's channel is fixed once it is chosen, so every
        transfer block of the tree gets the same answer."""
        known = self._down.get((tree, root))
        if known is None or known[0] is not kids:
            known = self._down[(tree, root)] = (kids, [(p, c, self.channel(p, c, path, tree))
                                                       for p, c, path in _bfs(root, kids)])
        return known[1]

    def routes(self, algo: Algorithm) -> dict[tuple[int, int, int], tuple[str, ...]]:
        """The device path of every sending connection of the compiled algorithm."""
        if self.pinned:
            return dict(self._routes)
        out = {}
        for prog in algo.ranks:
            for tb in prog.threadblocks:
                paths = self._paths.get((prog.rank, tb.send)) if tb.send >= 0 else None
                if paths:
                    out[(prog.rank, tb.send, tb.channel)] = paths[0]
        return out


class PlannedPairs:
    """A program's connectivity (see :class:`~arborcc.lang.Program`) when the lowering has
    already chosen every transfer's device path: exactly the planned ``(src, dst)`` rank
    pairs. Checking each transfer against the topology's routes instead would route
    every rank over the whole graph - seconds per hundred ranks on large clusters."""

    def __init__(self, pairs, num_ranks: int):
        self.pairs = set(pairs)
        self.num_ranks = num_ranks

    def link(self, src: int, dst: int) -> bool:
        return (src, dst) in self.pairs

    def num_nodes(self) -> int:
        return self.num_ranks


def tree_hops(topology: Topology, trees: Sequence[Tree], both_ways: bool = False):
    """(src index, dst index, path) of every hop of the trees (and reversed, if asked)."""
    index = {g: i for i, g in enumerate(topology.ranks)}
    for t in trees:
        for h in t.hops:
            yield index[h.src], index[h.dst], h.path
            if both_ways:
                for a, b in zip(h.path[1:], h.path):
                    if topology.link(b, a) is None:
                        raise SynthesisError(f"hop {h.dst}->{h.src} needs link {b}->{a}, which does not exist")
                yield index[h.dst], index[h.src], tuple(reversed(h.path))


def tree_channel_map(topology: Topology, trees: Sequence[Tree], spread: int = 0,
                     both_ways: bool = False, counts: Sequence[int] | None = None, rounds: int = 1) -> ChannelMap:
    """The channels of a tree lowering. ``spread=0``: every tree on its own connections -
    a tree's hops all use one channel (so relays can fuse), and two trees that share a
    rank pair get different channels (greedy colouring in tree order, :func:`tree_colours`;
    trees with no pair in common may share one). A connection's steps run on one thread
    block in the compiler's global order, which sorts by dependency depth before program
    order (GC3 section 5.2), so trees sharing a connection do not alternate round by
    round: the thread block moves every round of one tree before the next tree's, a
    relay of the second tree stalls its whole chain behind the first, and the trees run
    one after another (simulated: 0.45 of the attainable rate for a broadcast on DGX-1V
    GPUs 0-3, 0.95 with a connection per tree). Pairs count in both directions: a
    thread block has a send and a receive peer, and the compiler gives one thread block
    a send to a peer and a receive from it on the same channel - for two trees, the
    same serialization (a reduce tree's sends and a broadcast tree's receives through
    one root: the whole reduce before the broadcast).

    When that needs more than MSCCL's channels or more thread blocks than the runtimes
    allow (:func:`own_connections_fit`), and ``counts`` are given, the heaviest trees
    that fit keep their own connections and the light ones share a few channels
    (:func:`heavy_trees_apart`, ``rounds`` for its steps estimate); failing that the
    compiler chooses the channels (:class:`ChannelMap`'s default). ``spread=k > 0``: tree
    t on channel ``t mod k``."""
    hops = tree_hops(topology, trees, both_ways)
    if spread:
        return ChannelMap(hops, spread)
    colour = own_colours(topology, trees, both_ways)
    if colour is None:
        if counts:
            key = ("apart", tuple(trees), tuple(counts), both_ways, rounds)
            known = _KEPT.get_for(topology, key)  # the variants of within_limits ask again with other fusion
            if known is None:
                known = (heavy_trees_apart(topology, trees, counts, both_ways, rounds),)  # None is an answer
                _KEPT.put_for(topology, known, key)
            colour = known[0]
        if colour is None:
            return ChannelMap(hops)  # the compiler's choice; the spreads are the next variants
    return ChannelMap(hops, tree_channels=colour)


def shared_channel_load(topology: Topology, trees: Sequence[Tree], both_ways: bool) -> tuple[list[int], int]:
    """Trees sharing one channel: per rank about how many thread blocks they need (the
    larger of its distinct send and receive connections - a rank pair joined by two
    paths needs two, :class:`ChannelMap` moves the second to another channel), and the
    most trees one connection carries."""
    n = topology.num_ranks
    sends: list[set] = [set() for _ in range(n)]
    recvs: list[set] = [set() for _ in range(n)]
    use: dict[tuple, int] = {}
    for a, b, path in tree_hops(topology, trees, both_ways):
        sends[a].add((b, path))
        recvs[b].add((a, path))
        use[(a, b, path)] = use.get((a, b, path), 0) + 1
    return [max(len(sends[r]), len(recvs[r])) for r in range(n)], max(use.values(), default=0)


#: the share of the runtimes' thread blocks and steps per thread block the estimates of
#: :func:`heavy_trees_apart` may fill (they count a little short of what compiles)
ESTIMATE_HEADROOM = 0.9, 0.75
#: the most of the chunks :func:`heavy_trees_apart` leaves to trees on shared channels
LIGHT_SHARE = 0.25


def heavy_trees_apart(topology: Topology, trees: Sequence[Tree], counts: Sequence[int], both_ways: bool,
                      rounds: int) -> list[int] | None:
    """Channels when not every tree fits on its own connections: as many of the heaviest
    trees as fit get their own (:func:`tree_colours`), the others share 1, 2 or 4 more
    channels (tree j of them on the j-th mod k), where their thread blocks move one
    tree's rounds after another's - the light trees carry little, so that costs little.
    The first split whose estimated thread blocks per rank and steps per thread block
    stay within the runtimes' (with :data:`ESTIMATE_HEADROOM`), most heavy trees first;
    None if there is none with the light trees carrying at most :data:`LIGHT_SHARE` of
    the chunks (DGX H100 all-reduce, where they would carry 60%, simulated 15% slower
    than with the compiler's channels), and none on NVSwitch machines (on DGX-2 the
    light trees' fused chains deadlocked and the spread that fitted instead simulated
    all-gather 22-52% slower; the split was measured to help only on DGX-1V). (DGX-1V, 8 GPUs, all-reduce, 37 trees: the 20 heaviest
    apart and the 17 others on 2 channels simulate at 0.77 of the attainable rate,
    against 0.61 for the spread over 8 channels that fits otherwise.)"""
    if any(d.kind is DeviceKind.NVSWITCH for d in topology.devices.values()):
        return None
    n = topology.num_ranks
    most_tbs = MAX_THREADBLOCKS * ESTIMATE_HEADROOM[0]
    most_steps = MAX_STEPS * ESTIMATE_HEADROOM[1]
    order = sorted(range(len(trees)), key=lambda i: -counts[i])
    prefix, needs = [0] * n, [1]  # thread blocks of the h heaviest on their own connections
    for i in order:
        for r, k in enumerate(tree_rank_threadblocks(topology, trees[i], both_ways)):
            prefix[r] += k
        needs.append(max(prefix) + 1)
    total = sum(counts)
    for h in range(len(trees) - 1, 0, -1):
        if sum(counts[i] for i in order[h:]) > LIGHT_SHARE * total:
            return None  # the shared channels would serialize too much
        need = needs[h]
        if need > most_tbs:
            continue
        heavy = sorted(order[:h])
        apart = tree_colours(topology, [trees[i] for i in heavy])
        base = max(apart, default=-1) + 1
        for k in (1, 2, 4):
            if base + k > MAX_CHANNELS:
                break
            light = order[h:]
            loads = [shared_channel_load(topology, [trees[i] for i in light[ch::k]], both_ways)
                     for ch in range(k)]
            per_rank = [sum(x[0][r] for x in loads) for r in range(n)]
            steps = max((x[1] for x in loads), default=0) * rounds
            if need + max(per_rank, default=0) <= most_tbs and steps <= most_steps:
                colour = [0] * len(trees)
                for i, c in zip(heavy, apart):
                    colour[i] = c
                for j, i in enumerate(light):
                    colour[i] = base + j % k
                return colour
    return None


#: answers kept inside :func:`within_limits` (its versions ask again): :func:`tree_colours`
#: by the identities of its trees (the copies :func:`balanced_copies` tries are coloured
#: again by :func:`tree_channel_map`), per tree object its rank pairs and thread blocks
#: (:func:`tree_pair_ids`, :func:`tree_rank_threadblocks`), :func:`transfer_blocks` by
#: its arguments (a root's blocks and its rounds' ranges ask for the same),
#: :func:`heavy_trees_apart` per topology object and its arguments (the versions ask
#: again with other fusion and spreads)
_KEPT = CallMemo("synth.lower.kept", opened_by="within_limits (every lowering's version search)",
                 purpose="tree colours, rank pairs, thread blocks, transfer blocks, heavy trees apart")


def tree_colours(topology: Topology, trees: Sequence[Tree]) -> list[int]:
    """Per tree, the lowest channel no earlier tree sharing a rank pair with it (either
    way) has (:func:`tree_channel_map`)."""
    known = _KEPT.get_for_each((topology, *trees), "colours")
    if known is not None:
        return list(known)
    colour = _tree_colours(topology, trees)
    _KEPT.put_for_each((topology, *trees), tuple(colour), "colours")
    return colour


def _tree_colours(topology: Topology, trees: Sequence[Tree]) -> list[int]:
    """:func:`tree_colours`, computed: per rank pair, the channels of its trees so far as
    the bits of an int; a tree takes the lowest bit none of its pairs has."""
    colour: list[int] = []
    used: dict[int, int] = {}
    get = used.get
    for t in trees:
        pairs = tree_pair_ids(topology, t)
        taken = 0
        for p in pairs:
            taken |= get(p, 0)
        c = (~taken & (taken + 1)).bit_length() - 1
        bit = 1 << c
        for p in pairs:
            used[p] = get(p, 0) | bit
        colour.append(c)
    return colour


def rank_index(topology: Topology) -> dict[str, int]:
    """GPU name -> rank index (kept for the topology object inside :func:`within_limits`)."""
    index = _KEPT.get_for(topology, "index")
    if index is None:
        index = {g: i for i, g in enumerate(topology.ranks)}
        _KEPT.put_for(topology, index, "index")
    return index


def tree_pair_ids(topology: Topology, tree: Tree) -> tuple[int, ...]:
    """The rank pairs the hops of ``tree`` use, both ways, as ``src index * ranks + dst
    index``, kept per tree object inside :func:`within_limits`."""
    ids = _KEPT.get_for(tree, ("pairs", id(topology)))
    if ids is None:
        index, n = rank_index(topology), topology.num_ranks
        ids = set()
        for h in tree.hops:
            a, b = index[h.src], index[h.dst]
            ids.add(a * n + b)
            ids.add(b * n + a)
        ids = tuple(ids)
        _KEPT.put_for(tree, ids, ("pairs", id(topology)))
    return ids


def channels_fit(colour: Sequence[int]) -> bool:
    """Whether the channels ``colour`` gives trees stay within every runtime's channels."""
    return not colour or max(colour) < MAX_CHANNELS


def own_connections_fit(topology: Topology, trees: Sequence[Tree], colour: Sequence[int], both_ways: bool) -> bool:
    """Whether trees on their own connections (``colour``) stay within every runtime's
    channels and thread blocks per rank."""
    return channels_fit(colour) and tree_threadblocks(topology, trees, both_ways) <= MAX_THREADBLOCKS


def own_colours(topology: Topology, trees: Sequence[Tree], both_ways: bool) -> list[int] | None:
    """The channels of :func:`tree_colours` when the trees fit on their own connections
    (:func:`own_connections_fit`), else None; the thread blocks, which cost less to
    count, are counted first and the colours worked out only if they fit."""
    if tree_threadblocks(topology, trees, both_ways) > MAX_THREADBLOCKS:
        return None
    colour = tree_colours(topology, trees)
    return colour if channels_fit(colour) else None


#: copies the heaviest tree is cut into, most first (:func:`balanced_copies`)
COPIES = (4, 2)


def balanced_copies(topology: Topology, trees: Sequence[Tree], counts: Sequence[int], both_ways: bool = False,
                    copies: int | None = None) -> list[int]:
    """How many copies each tree is cut into, with near-equal chunk counts
    (:func:`expand_copies`), each on its own connections (:func:`tree_channel_map`): the
    heaviest into ``copies`` (default: the most of :data:`COPIES` that still fit the
    runtimes' channels and thread blocks; one each if none fits), every other tree
    into as many as its count holds of the heaviest copy's (at least one).

    Concurrent thread blocks share a link evenly (max-min), whatever their chunk
    counts, so trees sharing a link move at the same rate and a tree carrying three
    times the chunks of another takes three times as long - its later rounds hold up
    what waits for them (a broadcast after a reduce, a relay's other children) while
    the light trees' links fall idle. With copies in proportion to the counts, each
    link's flows carry near-equal counts and the even split is close to the packing's."""
    for k in ((copies,) if copies else COPIES):
        unit = max(counts, default=0) / k
        n = [max(1, min(c, round(c / unit))) if unit else 1 for c in counts]
        expanded = [t for t, m in zip(trees, n) for _ in range(m)]
        if copies or own_colours(topology, expanded, both_ways) is not None:
            return n
    return [1] * len(trees)


def expand_copies(trees: Sequence, counts: Sequence[int], copies: Sequence[int]) -> tuple[list, list[int]]:
    """Every tree repeated ``copies`` times, its count split near-evenly over them."""
    out_trees, out_counts = [], []
    for t, c, n in zip(trees, counts, copies):
        out_trees += [t] * n
        out_counts += [c // n + (1 if j < c % n else 0) for j in range(n)]
    return out_trees, out_counts


def tree_threadblocks(topology: Topology, trees: Sequence[Tree], both_ways: bool = False) -> int:
    """About how many thread blocks the busiest rank needs when every tree has its own
    connections and relays are fused: per tree and rank, the larger of its hops in and
    out (a fused relay forwards to one child on its receiving thread block, its other
    children need a sending one each), per direction, and one for local copies."""
    need = [0] * topology.num_ranks
    for t in trees:
        for r, k in enumerate(tree_rank_threadblocks(topology, t, both_ways)):
            need[r] += k
    return max(need, default=0) + 1  # and a local thread block (copies)


def tree_rank_threadblocks(topology: Topology, tree: Tree, both_ways: bool = False) -> tuple[int, ...]:
    """Per rank, the thread blocks ``tree`` needs on its own connections
    (:func:`tree_threadblocks`); kept per tree object inside :func:`within_limits`."""
    key = ("threadblocks", id(topology), both_ways)
    known = _KEPT.get_for(tree, key)
    if known is not None:
        return known
    index = rank_index(topology)
    ins, outs = [0] * topology.num_ranks, [0] * topology.num_ranks
    for h in tree.hops:
        outs[index[h.src]] += 1
        ins[index[h.dst]] += 1
    # the reversed hops swap a rank's ins and outs: the same larger of the two again
    known = tuple(map(max, ins, outs)) if not both_ways else tuple(2 * max(a, b) for a, b in zip(ins, outs))
    _KEPT.put_for(tree, known, key)
    return known


def tree_children(tree: Tree, index: dict[str, int]) -> tuple[int, dict[int, list[tuple[int, tuple[str, ...]]]]]:
    """Root index and, per rank index, its children with the path *from parent to child*."""
    kids: dict[int, list[tuple[int, tuple[str, ...]]]] = {}
    for h in tree.hops:
        if tree.inward:  # hop child -> parent
            parent, child, path = h.dst, h.src, tuple(reversed(h.path))
        else:
            parent, child, path = h.src, h.dst, h.path
        kids.setdefault(index[parent], []).append((index[child], path))
    return index[tree.root], kids


def _bfs(root: int, kids: dict[int, list[tuple[int, tuple[str, ...]]]]) -> list[tuple[int, int, tuple[str, ...]]]:
    """(parent, child, path parent->child) in breadth-first order from the root."""
    order, queue = [], deque([root])
    while queue:
        u = queue.popleft()
        for v, path in kids.get(u, ()):
            order.append((u, v, path))
            queue.append(v)
    return order


def transfer_pieces(start: int, stop: int, most: int = MAX_COUNT) -> list[tuple[int, int]]:
    """The chunks ``[start, stop)`` as ``(first, size)`` transfers of at most ``most``."""
    return [(a, min(most, stop - a)) for a in range(start, stop, most)]


def transfer_blocks(counts: Sequence[int], rounds: int = 1) -> list[tuple[int, int, int]]:
    """(tree, first chunk, chunks) per transfer, in the order to emit them.

    Each tree's chunks are contiguous (GC3's aggregation: a multi-count transfer per
    hop). ``rounds`` cuts every tree's block into that many near-equal transfers (at
    most MAX_COUNT chunks each) and emits them round by round: round 1 of every tree,
    then round 2, ... A thread block runs its steps in order and a relay forwards a
    step only once it has received all of it, so one transfer per tree makes every
    tree level store-and-forward of the whole block, and trees queued behind one
    another on a thread block wait for it; with k rounds a relay forwards round i
    while round i + 1 arrives, and every tree's level costs 1/k of its block -
    Blink's chunked pipelining (section 4.2) inside the runtime's loop.
    """
    key = ("blocks", tuple(counts), rounds)
    known = _KEPT.get(key)
    if known is None:
        known = _transfer_blocks(counts, rounds)
        _KEPT.put(key, known)
    return list(known)


def _transfer_blocks(counts: Sequence[int], rounds: int) -> tuple[tuple[int, int, int], ...]:
    """:func:`transfer_blocks`, computed."""
    per_tree, start = [], 0
    for t, c in enumerate(counts):
        most = min(MAX_COUNT, max(1, -(-c // rounds)))
        per_tree.append([(t, a, n) for a, n in transfer_pieces(start, start + c, most)])
        start += c
    out = []
    for k in range(max((len(p) for p in per_tree), default=0)):
        out += [p[k] for p in per_tree if k < len(p)]
    return tuple(out)


def aligned_blocks(first: Sequence[int], second: Sequence[int], rounds: int = 1
                   ) -> tuple[list[tuple[int, int, int]], list[tuple[int, int, int]]]:
    """Transfers of two tree families over the same chunks - (tree, first chunk, chunks)
    each, in emission order - such that round k of the second family covers exactly the
    chunks of round k of the first: the chunks are laid out round by round, the first
    family's round k cut as :func:`transfer_blocks` cuts it, and the second family's
    trees share the same range in proportion to their counts (chunks handed out one at
    a time to the tree furthest behind its share, so every tree ends with its count).

    A reduce-then-broadcast all-reduce needs this: with each family's trees laid out
    tree after tree, the broadcast trees' first rounds carry chunks the reduce trees
    reach only in their last rounds, and the broadcast waits for most of the reduce
    (simulated: 0.61 of the packing's rate on DGX-1V GPUs 0-3, all-reduce)."""
    total = sum(first)
    if total != sum(second):
        raise SynthesisError("the two tree families must carry the same number of chunks")
    ranges = transfer_blocks(first, rounds)
    per_tree = [0] * len(first)
    by_round: list[list[tuple[int, int]]] = []  # per round: (tree, size) of the first family
    for t, _, n in ranges:
        k = per_tree[t]
        per_tree[t] += 1
        while len(by_round) <= k:
            by_round.append([])
        by_round[k].append((t, n))
    given, handed = [0] * len(second), 0
    out_first, out_second, at = [], [], 0
    for parts in by_round:
        size = sum(n for _, n in parts)
        for t, n in parts:
            out_first.append((t, at, n))
            at += n
        share = [0] * len(second)
        for _ in range(size):
            handed += 1
            u = max((u for u in range(len(second)) if given[u] < second[u]),
                    key=lambda u: second[u] * handed / total - given[u])
            given[u] += 1
            share[u] += 1
        start = at - size
        for u, n in enumerate(share):
            for a, m in transfer_pieces(start, start + n):
                out_second.append((u, a, m))
            start += n
    return out_first, out_second


def lowering_program(name: str, collective, topology: object, channels: ChannelMap, fuse: bool = True) -> Program:
    """A DSL program for a lowering, with instruction fusion (``fuse``): a relay's receive
    and the send forwarding it become one fused step on one thread block, which forwards
    each piece as it arrives (GC3 section 4.2). Pinned channels (:class:`ChannelMap`)
    are honoured: fusion joins only transfers on the same channel, and the compiler
    undoes a fusion whose chain no thread block can carry. ``topology`` is what the
    program checks its transfers against (see :class:`Program`)."""
    return Program(name, collective, topology, instr_fusion=fuse)


def finish(prog: Program, topology: Topology, channels: ChannelMap, chunks: int,
           notes: Iterable[str] = ()) -> Lowered:
    """Compile and estimate; :func:`arborcc.synth.synthesis.synthesize` verifies the
    algorithm it returns (candidates that lose are not worth proving)."""
    algo = prog.compile()
    routes = channels.routes(algo)
    return Lowered(algo, routes, chunks, steady_state_bandwidth(algo, topology, routes), list(notes))


def local_copy(rank: int, src: tuple[Buffer, int], dst: tuple[Buffer, int], size: int) -> None:
    """Copy ``size`` chunks within a rank, in transfers of at most MAX_COUNT chunks."""
    current_program().trace_copies(local_copies(rank, src, dst, size))


def local_copies(rank: int, src: tuple[Buffer, int], dst: tuple[Buffer, int], size: int) -> list[tuple]:
    """:func:`local_copy`'s copies, as :meth:`arborcc.lang.Program.trace_copies` takes them."""
    return [(rank, src[0], src[1] + first, rank, dst[0], dst[1] + first, n, -1) for first, n in transfer_pieces(0, size)]


def broadcast_block(root: int, kids, src: tuple[Buffer, int], dst: tuple[Buffer, int], size: int,
                     channels: ChannelMap, tree: int = 0) -> None:
    """Copy ``size`` chunks at ``src`` of the root down the tree into ``dst`` of every rank."""
    current_program().trace_copies(broadcast_copies(root, kids, src, dst, size, channels, tree))


def broadcast_copies(root: int, kids, src: tuple[Buffer, int], dst: tuple[Buffer, int], size: int,
                     channels: ChannelMap, tree: int = 0) -> list[tuple]:
    """:func:`broadcast_block`'s copies, as :meth:`arborcc.lang.Program.trace_copies` takes them."""
    sb, si = src
    db, di = dst
    hops = channels.down_tree(root, kids, tree)
    if sb is db and si == di:  # the root sends from where the others receive (all-gather)
        return [(parent, db, di, child, db, di, size, ch) for parent, child, ch in hops]
    return [(parent, sb, si, child, db, di, size, ch) if parent == root else (parent, db, di, child, db, di, size, ch)
            for parent, child, ch in hops]


def reduce_block(root: int, kids, idx: int, size: int, channels: ChannelMap, acc: Buffer,
                  root_slot: tuple[Buffer, int] | None = None, tree: int = 0) -> None:
    """Reduce ``size`` chunks at ``idx`` of every rank into the root, leaves first.

    Inner ranks accumulate into their own ``(acc, idx)`` slots (copying their input
    there first when ``acc`` is not the input); leaves send their input; the root
    accumulates into ``root_slot`` when given (e.g. its output for reduce-scatter).
    """
    depth = {root: 0}
    for parent, child, _ in _bfs(root, kids):
        depth[child] = depth[parent] + 1
    for v in sorted((v for v in kids if kids[v]), key=lambda v: (-depth[v], v)):
        buf, i = root_slot if (v == root and root_slot) else (acc, idx)
        if (buf, i) != (INPUT, idx):
            local_copy(v, (INPUT, idx), (buf, i), size)
        for child, path in kids[v]:
            src = acc if kids.get(child) else INPUT
            chunk(v, buf, i, size).reduce(chunk(child, src, idx, size),
                                          ch=channels.channel(child, v, tuple(reversed(path)), tree))


def lower_broadcast(topology: Topology, trees: Sequence[Tree], counts: Sequence[int], name: str,
                    spread: int = 0, rounds: int = 1, fuse: bool = True) -> Lowered:
    """Out-trees from one root; ``counts[t]`` chunks on tree t."""
    index = {g: i for i, g in enumerate(topology.ranks)}
    if not spread:
        trees, counts = expand_copies(trees, counts, balanced_copies(topology, trees, counts))
    chunks, channels = sum(counts), tree_channel_map(topology, trees, spread, counts=counts, rounds=rounds)
    root = index[trees[0].root]
    shapes = [tree_children(t, index)[1] for t in trees]
    with lowering_program(name, Broadcast(topology.num_ranks, chunks, root=root), topology, channels, fuse) as prog:
        local_copy(root, (INPUT, 0), (OUTPUT, 0), chunks)
        for t, start, size in transfer_blocks(counts, rounds):
            broadcast_block(root, shapes[t], (INPUT, start), (OUTPUT, start), size, channels, t)
    return finish(prog, topology, channels, chunks)


def lower_reduce(topology: Topology, trees: Sequence[Tree], counts: Sequence[int], name: str,
                 spread: int = 0, rounds: int = 1, fuse: bool = True) -> Lowered:
    """In-trees into one root; inner ranks accumulate in their (unconstrained) output."""
    index = {g: i for i, g in enumerate(topology.ranks)}
    if not spread:
        trees, counts = expand_copies(trees, counts, balanced_copies(topology, trees, counts))
    chunks, channels = sum(counts), tree_channel_map(topology, trees, spread, counts=counts, rounds=rounds)
    root = index[trees[0].root]
    shapes = [tree_children(t, index)[1] for t in trees]
    with lowering_program(name, Reduce(topology.num_ranks, chunks, root=root), topology, channels, fuse) as prog:
        for t, start, size in transfer_blocks(counts, rounds):
            reduce_block(root, shapes[t], start, size, channels, OUTPUT, tree=t)
    return finish(prog, topology, channels, chunks)


def _per_root_blocks(topology: Topology, trees: Sequence[Tree], counts: Sequence[int], rounds: int = 1,
                     round_major: bool = False):
    """Chunks per shard, and the (root rank index, tree shape, offset in shard, size,
    tree index) blocks: root by root, each root's trees round by round
    (:func:`transfer_blocks`). Interleaving the roots' rounds as well simulated at about
    half the algbw (8-GPU DGX-1V all-reduce, 64 MiB), so roots stay apart.

    ``round_major``: a shard's chunks are laid out in the order they are sent - round 1
    of every tree, then round 2, ... - instead of tree after tree, so that each round
    is one contiguous range of the shard (:func:`round_ranges`)."""
    index = {g: i for i, g in enumerate(topology.ranks)}
    by_root: dict[int, list[tuple[dict, int, int]]] = {}
    for k, (t, c) in enumerate(zip(trees, counts)):
        r, kids = tree_children(t, index)
        by_root.setdefault(r, []).append((kids, c, k))
    per_root = {sum(c for _, c, _ in items) for items in by_root.values()}
    if len(by_root) != topology.num_ranks or len(per_root) != 1:
        raise SynthesisError("per-root trees must give every rank the same number of chunks")
    blocks = []
    for r, items in sorted(by_root.items()):
        at = 0
        for t, start, size in transfer_blocks([c for _, c, _ in items], rounds):
            blocks.append((r, items[t][0], at if round_major else start, size, items[t][2]))
            at += size
    return blocks, per_root.pop()


def round_ranges(counts: Sequence[int], rounds: int) -> list[tuple[int, int]]:
    """(first chunk, chunks) of each round of :func:`transfer_blocks` when the chunks are
    laid out in the order they are sent (``round_major`` of :func:`_per_root_blocks`)."""
    sizes: list[int] = []
    pieces = [0] * len(counts)
    for t, _, n in transfer_blocks(counts, rounds):
        if pieces[t] == len(sizes):
            sizes.append(0)
        sizes[pieces[t]] += n
        pieces[t] += 1
    starts = [sum(sizes[:k]) for k in range(len(sizes))]
    return list(zip(starts, sizes))


def lower_allgather(topology: Topology, trees: Sequence[Tree], counts: Sequence[int], name: str,
                    spread: int = 0, rounds: int = 1, fuse: bool = True) -> Lowered:
    """One set of out-trees per root (ForestColl); each root's shard split over its trees.

    A root copies its shard into its own block of the output round by round and its
    trees send from there, each round once its copy is done: in an in-place call (the
    input is that block) the copy then writes each chunk before any send reads it,
    where sends from the input would race with the copy writing the same slots. The
    shard is laid out round after round (``round_major``), so the first round waits
    only for its own copy, not for the whole shard's."""
    if not spread:
        trees, counts = expand_copies(trees, counts, balanced_copies(topology, trees, counts))
    blocks, chunks = _per_root_blocks(topology, trees, counts, rounds, round_major=True)
    channels = tree_channel_map(topology, trees, spread, counts=counts, rounds=rounds)
    index = {g: i for i, g in enumerate(topology.ranks)}
    root_counts: dict[int, list[int]] = {}
    for t, c in zip(trees, counts):
        root_counts.setdefault(index[t.root], []).append(c)
    copies = []
    for r in range(topology.num_ranks):
        for start, size in round_ranges(root_counts[r], rounds):
            copies += local_copies(r, (INPUT, start), (OUTPUT, r * chunks + start), size)
    with lowering_program(name, AllGather(topology.num_ranks, chunks), topology, channels, fuse) as prog:
        prog.trace_copies(copies)
        prog.trace_broadcasts(broadcast_blocks(blocks, chunks, channels))
    return finish(prog, topology, channels, chunks)


def broadcast_blocks(blocks, chunks: int, channels: ChannelMap, buffer: Buffer = OUTPUT) -> list[tuple]:
    """The per-root blocks of :func:`_per_root_blocks` as
    :meth:`arborcc.lang.Program.trace_broadcasts` takes them: each root's block of
    ``size`` chunks at its shard's ``start`` sent down its tree within ``buffer`` (the
    output of an all-gather, the input of an in-place all-reduce)."""
    return [(channels.down_tree(r, kids, t), buffer, r * chunks + start, size) for r, kids, start, size, t in blocks]


def lower_reducescatter(topology: Topology, trees: Sequence[Tree], counts: Sequence[int], name: str,
                        spread: int = 0, rounds: int = 1, fuse: bool = True) -> Lowered:
    """One set of in-trees per root; partial sums accumulate in the input, as GC3's own
    reduce-scatter programs do; the root reduces into its output."""
    if not spread:
        trees, counts = expand_copies(trees, counts, balanced_copies(topology, trees, counts))
    blocks, chunks = _per_root_blocks(topology, trees, counts, rounds)
    channels = tree_channel_map(topology, trees, spread, counts=counts, rounds=rounds)
    with lowering_program(name, ReduceScatter(topology.num_ranks, chunks), topology, channels, fuse) as prog:
        for r, kids, start, size, t in blocks:
            reduce_block(r, kids, r * chunks + start, size, channels, INPUT, (OUTPUT, start), t)
    return finish(prog, topology, channels, chunks)


def lower_allreduce_rs_ag(topology: Topology, trees: Sequence[Tree], counts: Sequence[int], name: str,
                          spread: int = 0, rounds: int = 1, fuse: bool = True) -> Lowered:
    """All-reduce = reduce-scatter on the reversed per-root trees + all-gather on the
    per-root out-trees (``trees`` are the out-trees), in place."""
    if not spread:
        trees, counts = expand_copies(trees, counts, balanced_copies(topology, trees, counts, both_ways=True))
    blocks, chunks = _per_root_blocks(topology, trees, counts, rounds)
    n, channels = topology.num_ranks, tree_channel_map(topology, trees, spread, True, counts, rounds)
    with lowering_program(name, AllReduce(n, n * chunks, inplace=True), topology, channels, fuse) as prog:
        for r, kids, start, size, t in blocks:
            reduce_block(r, kids, r * chunks + start, size, channels, INPUT, tree=t)
        prog.trace_broadcasts(broadcast_blocks(blocks, chunks, channels, INPUT))
    return finish(prog, topology, channels, chunks)


def lower_allreduce_trees(topology: Topology, trees: Sequence[Tree], counts: Sequence[int], name: str,
                          spread: int = 0, rounds: int = 1, fuse: bool = True) -> Lowered:
    """All-reduce as reduce + broadcast over each tree (Blink section 3.3; MXNet's trees):
    a block is reduced up its tree into the root and broadcast back down, in place."""
    index = {g: i for i, g in enumerate(topology.ranks)}
    chunks, channels = sum(counts), tree_channel_map(topology, trees, spread, True, counts, rounds)
    shapes = [tree_children(t, index) for t in trees]
    with lowering_program(name, AllReduce(topology.num_ranks, chunks, inplace=True), topology, channels, fuse) as prog:
        blocks = transfer_blocks(counts, rounds)
        for t, start, size in blocks:
            root, kids = shapes[t]
            reduce_block(root, kids, start, size, channels, INPUT, tree=t)
        for t, start, size in blocks:
            root, kids = shapes[t]
            broadcast_block(root, kids, (INPUT, start), (INPUT, start), size, channels, t)
    return finish(prog, topology, channels, chunks)


def lower_allreduce_reduce_broadcast(topology: Topology, reduce_trees: Sequence[tuple[Tree, int]],
                                     broadcast_trees: Sequence[tuple[Tree, int]], name: str,
                                     spread: int = 0, rounds: int = 1, fuse: bool = True) -> Lowered:
    """All-reduce through one root with separate reduce and broadcast trees: the buffer
    (``sum`` of either side's chunk counts) is reduced along the in-trees, then
    broadcast along the out-trees (Blink section 3.3 with the link split of
    :func:`arborcc.synth.bounds.tree_allreduce_split`), in place."""
    index = {g: i for i, g in enumerate(topology.ranks)}
    chunks = sum(c for _, c in reduce_trees)
    if chunks != sum(c for _, c in broadcast_trees):
        raise SynthesisError("reduce and broadcast trees must carry the same number of chunks")
    if not spread:
        both = list(reduce_trees) + list(broadcast_trees)
        copies = balanced_copies(topology, [t for t, _ in both], [c for _, c in both])
        cut = len(reduce_trees)
        reduce_trees = list(zip(*expand_copies(*zip(*reduce_trees), copies[:cut])))
        broadcast_trees = list(zip(*expand_copies(*zip(*broadcast_trees), copies[cut:])))
    trees = [t for t, _ in reduce_trees] + [t for t, _ in broadcast_trees]
    counts = [c for _, c in list(reduce_trees) + list(broadcast_trees)]
    channels = tree_channel_map(topology, trees, spread, counts=counts, rounds=rounds)
    with lowering_program(name, AllReduce(topology.num_ranks, chunks, inplace=True), topology, channels, fuse) as prog:
        reduces, broadcasts = aligned_blocks([c for _, c in reduce_trees], [c for _, c in broadcast_trees], rounds)
        for t, start, size in reduces:
            root, kids = tree_children(reduce_trees[t][0], index)
            reduce_block(root, kids, start, size, channels, INPUT, tree=t)
        offset = len(reduce_trees)
        for t, start, size in broadcasts:
            root, kids = tree_children(broadcast_trees[t][0], index)
            broadcast_block(root, kids, (INPUT, start), (INPUT, start), size, channels, offset + t)
    return finish(prog, topology, channels, chunks)


#: transfers per tree block the tree lowerings try, most first (:func:`transfer_blocks`):
#: 8 rounds keep a tree of depth d at about 8 / (8 + d) of its rate (Blink section 4.2)
PIPELINE_ROUNDS = (8, 4, 2, 1)


def within_limits(lower, *args, dialect: str = "executor") -> Lowered:
    """Lower with the compiler's channel choice; if that breaks ``dialect``'s runtime
    limits (steps per thread block, thread blocks per rank), spread the trees over 2, 4,
    ... 32 channels and keep the first version within the limits. Lowerings that take
    ``rounds`` (the tree lowerings) are tried with :data:`PIPELINE_ROUNDS` rounds per
    tree block, most first, and those that take ``fuse`` fused and then unfused: the
    first with a version within the limits wins. A version that would deadlock
    (:func:`arborcc.verify.pieces.deadlock_free`: instruction fusion can chain trees
    into a cycle of full FIFOs, and long steps deadlock once the runtime cuts them
    into pieces) counts as not fitting. When none fits, the version closest to the
    limits is returned with a note saying so (the verifier reports the violations,
    and ``--dialect legacy`` has no such limits).

    Each version is a lowering and a compile, so versions that cannot fit are not
    built: spreading stops once a rank has more thread blocks than allowed at a spread
    of 2 or more (spreading further only adds thread blocks; the per-tree channels of
    spread 0 may use more than spread 2) or two more spreads in a row brought it no
    closer; a
    spread that would have to cut the largest thread block by more than half per
    doubling of channels is skipped (on every DGX-1, DGX A100 and H100 topology and
    DGX-1V allocation tried, no doubling cut it by more while over the limit); and
    the unfused version is not built when the fused one fused nothing (they are the
    same program)."""
    with _KEPT.active():
        return _search_versions(lower, args, dialect)


#: the share of the dialect's steps per thread block :func:`more_rounds` aims at (the
#: steps grow a little faster than the rounds where chunk ranges split unevenly)
ROUNDS_HEADROOM = 0.9
#: the most rounds :func:`more_rounds` tries, and how many times it raises them
MAX_ROUNDS, ROUND_RAISES = 64, 2


def more_rounds(lower, args, fitting: Lowered, rounds: int, spread: int, fuse, dialect: str) -> tuple[Lowered, int]:
    """``fitting`` (a version with ``rounds`` rounds within ``dialect``'s limits) with
    as many more rounds as its longest thread block leaves room for: the steps per
    thread block grow about in proportion to the rounds, so ``rounds x limit / steps``
    (with :data:`ROUNDS_HEADROOM`) is tried at the same spread and fusion, up to
    :data:`ROUND_RAISES` times; the last version within the limits and free of deadlock
    is returned with its rounds.

    Rounds are the pipelining depth: a relay whose receive and send are on different
    thread blocks, a root that broadcasts what it reduced and a rank that reduces
    several children's data into one slot wait for a whole step of the step they
    depend on, so every tree level holds a round back; with k rounds that costs about
    1/k of a tree's block per level. The fixed 8 rounds left most of the runtimes'
    64 steps per thread block unused (16 on DGX-1V GPUs 1,4,5,6, simulated 57.8 GB/s
    busbw at 1 GiB; 59 steps with 64 rounds, 61.3 GB/s)."""
    from arborcc.ir.limits import check_dialect_limits, dialect_limits
    from arborcc.verify.pieces import deadlock_free

    limit = dialect_limits(dialect).max_steps_per_threadblock
    extra = {"fuse": fuse} if fuse is not None else {}
    for _ in range(ROUND_RAISES):
        steps = max((len(tb.steps) for r in fitting.algorithm.ranks for tb in r.threadblocks), default=0)
        more = min(MAX_ROUNDS, int(rounds * limit * ROUNDS_HEADROOM / max(1, steps)))
        if more <= rounds:
            break
        lowered = lower(*args, spread=spread, rounds=more, **extra)
        longest = max((len(tb.steps) for r in lowered.algorithm.ranks for tb in r.threadblocks), default=0)
        if longest <= steps:
            break  # no tree block has more chunks than it already had transfers
        if check_dialect_limits(lowered.algorithm, dialect) or not deadlock_free(lowered.algorithm):
            break
        fitting, rounds = lowered, more
    return fitting, rounds


def _search_versions(lower, args, dialect: str) -> Lowered:
    """:func:`within_limits`' search over the versions."""
    from arborcc.ir.limits import check_dialect_limits, dialect_limits
    from arborcc.verify.pieces import deadlock_free

    lim = dialect_limits(dialect)

    def overflow(algo) -> tuple[float, float]:
        steps = max((len(tb.steps) for r in algo.ranks for tb in r.threadblocks), default=0)
        tbs = max((len(r.threadblocks) for r in algo.ranks), default=0)
        return steps / lim.max_steps_per_threadblock, tbs / lim.max_threadblocks_per_rank

    best, best_over = None, None
    takes = inspect.signature(lower).parameters
    variants = [(rounds, fuse) for rounds in (PIPELINE_ROUNDS if "rounds" in takes else (None,))
                for fuse in ((True, False) if "fuse" in takes else (None,))]
    fused_nothing: set[int | None] = set()  # rounds whose fused versions fused no step
    for rounds, fuse in variants:
        if fuse is False and rounds in fused_nothing:
            continue
        extra = {k: v for k, v in (("rounds", rounds), ("fuse", fuse)) if v is not None}
        stale, variant_best, skip, fused = 0, None, 0, False
        for spread in (0, 2, 4, 8, 16, 32):
            if skip:
                skip -= 1
                continue
            lowered = lower(*args, spread=spread, **extra)
            if not check_dialect_limits(lowered.algorithm, dialect) and deadlock_free(lowered.algorithm):
                if rounds:
                    lowered, rounds = more_rounds(lower, args, lowered, rounds, spread, fuse, dialect)
                if spread:
                    lowered.notes.append(f"trees spread over {spread} channels to meet the {dialect} runtime's "
                                         "limits without deadlock")
                if rounds and rounds > 1:
                    lowered.notes.append(f"every tree's block in {rounds} pipelined transfers per hop")
                if fuse is False:
                    lowered.notes.append("relays not fused: the fused chains would deadlock")
                return lowered
            fused = fused or any(st.op.sends and st.op.receives for r in lowered.algorithm.ranks
                                 for tb in r.threadblocks for st in tb.steps)  # rcs, rrs, rrcs
            steps_over, tbs_over = overflow(lowered.algorithm)
            over = max(steps_over, tbs_over)
            stale = stale + 1 if variant_best is not None and over > 0.9 * variant_best else 0
            variant_best = over if variant_best is None else min(variant_best, over)
            if best is None or over < best_over:
                best, best_over = lowered, over
            if stale == 2 or (spread and tbs_over > 1):
                break  # two more spreads did not help, or more spread only adds thread blocks
            while steps_over / 2 ** (skip + 1) > 1:
                skip += 1
        if fuse is True and not fused:
            fused_nothing.add(rounds)
    best.notes.append(f"exceeds the {dialect} runtime's limits even spread over channels "
                      f"({best_over:.2f}x the largest allowed thread block or rank)")
    return best


def lower_ring_allreduce(topology: Topology, rings: Sequence[Sequence[int]],
                         hops: Sequence[Sequence[tuple[str, ...]]] | None, name: str) -> Lowered:
    """Ring all-reduce (reduce-scatter then all-gather around each ring), the data split
    equally over the rings; ring k uses channel k and the paths ``hops[k]``."""
    n = topology.num_ranks
    if len(rings) > MAX_CHANNELS:
        raise SynthesisError(f"{len(rings)} rings exceed MSCCL's {MAX_CHANNELS} channels")
    routes: dict[tuple[int, int, int], tuple[str, ...]] = {}
    with Program(name, AllReduce(n, n * len(rings), inplace=True), topology) as prog:
        for k, ring in enumerate(rings):
            for i in range(n):
                a, b = ring[i], ring[(i + 1) % n]
                routes[(a, b, k)] = (hops[k][i] if hops else
                                     topology.route(topology.ranks[a], topology.ranks[b]).path)
            for i in range(n):
                idx = k * n + i
                c = chunk(ring[(i + 1) % n], INPUT, idx)
                for s in range(2, n + 1):
                    c = chunk(ring[(i + s) % n], INPUT, idx).reduce(c, ch=k)
                for s in range(1, n):
                    c = c.copy(ring[(i + s) % n], INPUT, idx, ch=k)
    algo = prog.compile()
    return Lowered(algo, routes, n * len(rings), steady_state_bandwidth(algo, topology, routes))

