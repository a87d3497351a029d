"""Block arithmetic of the tree lowerings: which chunks each transfer carries, in which order.

The buffer (or each rank's shard) is split into chunks, apportioned to the trees in
proportion to their weights (:mod:`.quantize`); each tree's chunks are one contiguous
block, cut into transfers of at most :data:`MAX_COUNT` chunks and into rounds
(pipelining, Blink section 4.2), the rounds of different trees emitted round-robin so
that trees sharing a link share it fairly (Blink section 4.2.2). The emission
(:mod:`.lower_emit`) turns these blocks into DSL transfers.
"""

from __future__ import annotations

from typing import Sequence

from arborcc.errors import SynthesisError
from arborcc.ir.limits import DIALECTS
from arborcc.synth.lower_memo import KEPT
from arborcc.synth.trees import Tree, tree_children
from arborcc.topology.model import Topology

#: chunks per transfer: the largest power of two every dialect's ``cnt`` limit allows
MAX_COUNT = 1 << (min(d.max_count_exclusive for d in DIALECTS.values()) - 1).bit_length() - 1


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
    known = KEPT.get(key)
    if known is None:
        known = _transfer_blocks(counts, rounds)
        KEPT.put(key, known)
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
    key = ("aligned", tuple(first), tuple(second), rounds)
    known = KEPT.get(key)
    if known is None:
        known = _aligned_blocks(first, second, rounds)
        KEPT.put(key, known)
    return list(known[0]), list(known[1])


def _aligned_blocks(first: Sequence[int], second: Sequence[int], rounds: int
                    ) -> tuple[tuple[tuple[int, int, int], ...], tuple[tuple[int, int, int], ...]]:
    """:func:`aligned_blocks`, computed."""
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
    behind = [u for u, c in enumerate(second) if c > 0]  # the trees short of their count, in order
    out_first, out_second, at = [], [], 0
    for parts in by_round:
        size = sum(n for _, n in parts)
        for t, n in parts:
            out_first.append((t, at, n))
            at += n
        share = [0] * len(second)
        for _ in range(size):
            handed += 1
            u, lag = -1, 0.0  # the tree furthest behind its share, the first of equals
            for v in behind:
                own = second[v] * handed / total - given[v]
                if u < 0 or own > lag:
                    u, lag = v, own
            given[u] += 1
            share[u] += 1
            if given[u] == second[u]:
                behind.remove(u)
        start = at - size
        for u, n in enumerate(share):
            for a, m in transfer_pieces(start, start + n):
                out_second.append((u, a, m))
            start += n
    return tuple(out_first), tuple(out_second)


def per_root_blocks(topology: Topology, trees: Sequence[Tree], counts: Sequence[int], rounds: int = 1,
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
    laid out in the order they are sent (``round_major`` of :func:`per_root_blocks`)."""
    sizes: list[int] = []
    pieces = [0] * len(counts)
    for t, _, n in transfer_blocks(counts, rounds):
        if pieces[t] == len(sizes):
            sizes.append(0)
        sizes[pieces[t]] += n
        pieces[t] += 1
    starts = [sum(sizes[:k]) for k in range(len(sizes))]
    return list(zip(starts, sizes))
