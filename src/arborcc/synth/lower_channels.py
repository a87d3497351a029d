"""Channel planning of the lowerings: which channel each hop uses, and how trees share them.

A tree hop between two ranks follows a device path; hops of the same rank pair that
take different paths (NVLink vs PCIe, Blink section 3.4) get different channels, so each
(pair, channel) connection has one path (:class:`ChannelMap`). The path of every
connection is returned in ``routes`` for the bandwidth model. Trees get connections of
their own where the runtimes' channels and thread blocks allow (:func:`tree_channel_map`),
and the heaviest tree is cut into copies so that trees sharing a link carry near-equal
counts (:func:`balanced_copies`).
"""

from __future__ import annotations

from typing import Iterable, Sequence

from arborcc.errors import SynthesisError
from arborcc.ir.limits import DIALECTS, MAX_CHANNELS
from arborcc.ir.model import Algorithm
from arborcc.synth.lower_memo import KEPT
from arborcc.synth.trees import Tree, breadth_first_hops
from arborcc.topology.model import DeviceKind, Topology

#: thread blocks per rank and steps per thread block every dialect allows
MAX_THREADBLOCKS = min(d.max_threadblocks_per_rank for d in DIALECTS.values())
MAX_STEPS = min(d.max_steps_per_threadblock for d in DIALECTS.values())


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
        self._up: dict[tuple[int, int], tuple[dict, list[tuple[int, list[tuple[int, int, bool]]]]]] = {}
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
                                                       for p, c, path in breadth_first_hops(root, kids)])
        return known[1]

    def up_tree(self, root: int, kids, tree: int = 0) -> list[tuple[int, list[tuple[int, int, bool]]]]:
        """The reduce of tree ``tree`` towards ``root``, leaves first: each inner rank
        (deepest first, then by rank) with ``(child, channel, whether the child is
        inner)`` of each child it reduces, worked out on the first call for the tree as
        :meth:`down_tree` is."""
        known = self._up.get((tree, root))
        if known is None or known[0] is not kids:
            depth = {root: 0}
            for parent, child, _ in breadth_first_hops(root, kids):
                depth[child] = depth[parent] + 1
            known = self._up[(tree, root)] = (kids, [
                (v, [(child, self.channel(child, v, tuple(reversed(path)), tree), bool(kids.get(child)))
                     for child, path in kids[v]])
                for v in sorted((v for v in kids if kids[v]), key=lambda v: (-depth[v], v))])
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
            known = KEPT.get_for(topology, key)  # the variants of within_limits ask again with other fusion
            if known is None:
                known = (heavy_trees_apart(topology, trees, counts, both_ways, rounds),)  # None is an answer
                KEPT.put_for(topology, known, key)
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


def tree_colours(topology: Topology, trees: Sequence[Tree]) -> list[int]:
    """Per tree, the lowest channel no earlier tree sharing a rank pair with it (either
    way) has (:func:`tree_channel_map`)."""
    known = KEPT.get_for_each((topology, *trees), "colours")
    if known is not None:
        return list(known)
    colour = _tree_colours(topology, trees)
    KEPT.put_for_each((topology, *trees), tuple(colour), "colours")
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
    index = KEPT.get_for(topology, "index")
    if index is None:
        index = {g: i for i, g in enumerate(topology.ranks)}
        KEPT.put_for(topology, index, "index")
    return index


def tree_pair_ids(topology: Topology, tree: Tree) -> tuple[int, ...]:
    """The rank pairs the hops of ``tree`` use, both ways, as ``src index * ranks + dst
    index``, kept per tree object inside :func:`within_limits`."""
    ids = KEPT.get_for(tree, ("pairs", id(topology)))
    if ids is None:
        index, n = rank_index(topology), topology.num_ranks
        ids = set()
        for h in tree.hops:
            a, b = index[h.src], index[h.dst]
            ids.add(a * n + b)
            ids.add(b * n + a)
        ids = tuple(ids)
        KEPT.put_for(tree, ids, ("pairs", id(topology)))
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
#: the same when the copies' counts are evened out (``balanced_copies(rule="even")``)
EVEN_COPIES = (4, 3, 2)
#: :func:`balanced_copies`' rules, the default first
COPIES_RULES = ("most", "even", "one")
#: digits of :func:`balance` that tell two splits apart (119/137 is 0.8686131386861313 in
#: 3 copies each and ...314 in 2)
BALANCE_DIGITS = 9


def balanced_copies(topology: Topology, trees: Sequence[Tree], counts: Sequence[int], both_ways: bool = False,
                    copies: int | None = None, rule: str = "most") -> list[int]:
    """How many copies each tree is cut into, with near-equal chunk counts
    (:func:`expand_copies`), each on its own connections (:func:`tree_channel_map`): the
    heaviest into ``copies`` (by ``rule`` without it), every other tree into as many as
    its count holds of the heaviest copy's (at least one).

    Concurrent thread blocks share a link evenly (max-min), whatever their chunk
    counts, so trees sharing a link move at the same rate and a tree carrying three
    times the chunks of another takes three times as long - its later rounds hold up
    what waits for them (a broadcast after a reduce, a relay's other children) while
    the light trees' links fall idle. With copies in proportion to the counts, each
    link's flows carry near-equal counts and the even split is close to the packing's.

    ``rule`` (:data:`COPIES_RULES`):

    - ``most``: the heaviest tree in the most of :data:`COPIES` that still fit the
      runtimes' channels and thread blocks (one copy each if none fits);
    - ``even``: of the heaviest tree in 4, 3 or 2 copies (:data:`EVEN_COPIES`, those
      that fit) and every tree in one, the split whose lightest copy is nearest the
      heaviest (:func:`balance`; the most copies among equals). The most copies leave
      the copies of 65, 42, 42, 44 and 21-chunk trees at 16, 14, 14, 15 and 21 chunks,
      three copies at about 21 each;
    - ``one``: every tree in one copy. A copy pipelines over at most as many steps as
      it has chunks, so fewer, longer copies fill and drain a tree's depth in a smaller
      share of the call: the 8-GPU DGX-1V broadcast (6 trees of equal counts) at 1 GiB
      takes 8,963 us in one copy each, 9,368 in four.

    Which runs fastest depends on what else shares the links, so the lowering search
    times every rule's file (:func:`~.lower_search.within_limits`)."""
    def in_proportion(k: int) -> list[int]:
        unit = max(counts, default=0) / k
        return [max(1, min(c, round(c / unit))) if unit else 1 for c in counts]

    if rule not in COPIES_RULES:
        raise ValueError(f"unknown copies rule {rule!r} (known: {', '.join(COPIES_RULES)})")
    if copies:
        return in_proportion(copies)
    options = []
    for n in map(in_proportion, () if rule == "one" else EVEN_COPIES if rule == "even" else COPIES):
        expanded = [t for t, m in zip(trees, n) for _ in range(m)]
        if own_colours(topology, expanded, both_ways) is not None:
            if rule == "most":
                return n
            options.append(n)
    options.append([1] * len(trees))
    # the first (the most copies) among equals: balances equal but for rounding count as equal
    return max(options, key=lambda n: round(balance(counts, n), BALANCE_DIGITS))


def tree_copies(topology: Topology, trees: Sequence[Tree], counts: Sequence[int], rule: str,
                both_ways: bool = False) -> tuple[list[int], tuple[str, ...]]:
    """The copies :func:`balanced_copies` cuts the trees into by ``rule``, and the other
    rules that cut them differently (from ``rule``'s and from each other's; the first of
    :data:`COPIES_RULES` among those that agree)."""
    copies = balanced_copies(topology, trees, counts, both_ways, rule=rule)
    seen, others = [copies], []
    for other in COPIES_RULES:
        cut = copies if other == rule else balanced_copies(topology, trees, counts, both_ways, rule=other)
        if cut not in seen:
            seen.append(cut)
            others.append(other)
    return copies, tuple(others)


def cut_copies(topology: Topology, trees: Sequence[Tree], counts: Sequence[int], rule: str, spread: int,
               both_ways: bool = False) -> tuple[list, list[int], tuple[str, ...]]:
    """The trees and counts cut into the copies of :func:`tree_copies` by ``rule``
    (:func:`expand_copies`), and the other rules that cut them differently; a version
    spread over shared channels (``spread``) cuts none."""
    if spread:
        return list(trees), list(counts), ()
    per_tree, others = tree_copies(topology, trees, counts, rule, both_ways)
    return (*expand_copies(trees, counts, per_tree), others)


def balance(counts: Sequence[int], copies: Sequence[int]) -> float:
    """The lightest copy's count over the heaviest's when tree t is cut into
    ``copies[t]`` copies (1: all equal)."""
    sizes = [c / n for c, n in zip(counts, copies) if c]
    return min(sizes) / max(sizes) if sizes else 1.0


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
    known = KEPT.get_for(tree, key)
    if known is not None:
        return known
    index = rank_index(topology)
    ins, outs = [0] * topology.num_ranks, [0] * topology.num_ranks
    for h in tree.hops:
        outs[index[h.src]] += 1
        ins[index[h.dst]] += 1
    # the reversed hops swap a rank's ins and outs: the same larger of the two again
    known = tuple(map(max, ins, outs)) if not both_ways else tuple(2 * max(a, b) for a, b in zip(ins, outs))
    KEPT.put_for(tree, known, key)
    return known
