"""DSL emission of the lowerings: schedules (weighted trees, rings) as chunk-DSL programs, compiled.

Every strategy of :mod:`arborcc.synth` ends here: a schedule becomes a chunk-DSL
program (GC3 section 3) and the compiler turns it into an Algorithm (which
:func:`arborcc.synth.synthesis.synthesize` proves with the verifier before returning it).
This module holds the pieces every lowering uses (:class:`Lowered`,
:func:`lowering_program`, :func:`finish`, local copies, a block broadcast down or reduced
up a tree) and one lowering per tree collective.

Trees (Blink section 4.1): a chunk travels its tree breadth-first (broadcast,
all-gather) or is reduced leaves-first towards the root (reduce, reduce-scatter), the
blocks and their order as :mod:`.lower_blocks` works them out, the channels as
:mod:`.lower_channels` plans them. :mod:`.lower_search` tries the versions of a
lowering (rounds, fusion, spreads) until one fits the runtimes' limits.

Call forms (:mod:`arborcc.ir.aliasing`): the all-reduce lowerings accumulate in the
input and write the result over it (an in-place program) unless they run inside
:func:`out_of_place_lowering`; there each block's first reduction step copies the
rank's input into its output and accumulates there, and the result lands in the
output: an out-of-place program, which reads the input and never writes it.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from arborcc.errors import SynthesisError
from arborcc.ir.limits import MAX_CHANNELS
from arborcc.ir.model import Algorithm, Buffer
from arborcc.lang import AllGather, AllReduce, Broadcast, Program, Reduce, ReduceScatter, current_program
from arborcc.library.ring import ring_allreduce_trip
from arborcc.sim.bandwidth import BandwidthEstimate, steady_state_bandwidth
from arborcc.synth.lower_blocks import aligned_blocks, per_root_blocks, round_ranges, transfer_blocks, transfer_pieces
from arborcc.synth.lower_channels import ChannelMap, cut_copies, expand_copies, tree_channel_map, tree_copies
from arborcc.synth.trees import Tree, tree_children
from arborcc.topology.model import Topology

INPUT, OUTPUT = Buffer.INPUT, Buffer.OUTPUT

#: whether the lowerings run now emit out-of-place programs (:func:`out_of_place_lowering`)
OUT_OF_PLACE = ContextVar("arborcc_synth_out_of_place", default=False)


@contextmanager
def out_of_place_lowering():
    """Within this block the all-reduce lowerings emit out-of-place programs: the input
    is read, the result is accumulated and left in the output (module doc)."""
    token = OUT_OF_PLACE.set(True)
    try:
        yield
    finally:
        OUT_OF_PLACE.reset(token)


def lowering_in_place() -> bool:
    """Whether the lowerings run now emit in-place programs (not inside
    :func:`out_of_place_lowering`); for strategies built on library programs that take
    ``inplace``."""
    return not OUT_OF_PLACE.get()


def accumulating_buffer() -> Buffer:
    """Where an all-reduce lowering accumulates and leaves its result: the output inside
    :func:`out_of_place_lowering`, else the input (an in-place program)."""
    return INPUT if lowering_in_place() else OUTPUT


@dataclass
class Lowered:
    """A verified algorithm, the device path of each connection, and its predicted algbw."""

    algorithm: Algorithm
    routes: dict[tuple[int, int, int], tuple[str, ...]]
    chunks: int
    estimate: BandwidthEstimate
    notes: list[str] = field(default_factory=list)
    #: (dialect, whether ``algorithm`` is within its runtime limits) where the version
    #: search (:func:`~.lower_search.within_limits`) checked it, else None
    limits: tuple[str, bool] | None = None
    #: the compiler's schedule would have deadlocked with steps cut into the runtimes'
    #: pieces and it fell back (unfused or program order: ``CompileStats.pieces_fallback``)
    pieces_fallback: bool = False
    #: fusions that fallback undid (``CompileStats.unfused_for_pieces``): the version
    #: was built fused although its algorithm has no fused step
    pieces_unfused: int = 0
    #: the tree lowerings: the trees were cut into copies, and these other rules of
    #: :func:`~.lower_channels.tree_copies` cut them differently
    other_copies: tuple[str, ...] = ()


def lowering_program(name: str, collective, topology: object, channels: ChannelMap, fuse: bool = True) -> Program:
    """A DSL program for a lowering, with instruction fusion (``fuse``): a relay's receive
    and the send forwarding it become one fused step on one thread block, which forwards
    each piece as it arrives (GC3 section 4.2). Pinned channels (:class:`ChannelMap`)
    are honoured: fusion joins only transfers on the same channel, and the compiler
    undoes a fusion whose chain no thread block can carry. ``topology`` is what the
    program checks its transfers against (see :class:`Program`)."""
    return Program(name, collective, topology, instr_fusion=fuse)


def finish(prog: Program, topology: Topology, channels: ChannelMap, chunks: int,
           notes: Iterable[str] = (), other_copies: tuple[str, ...] = ()) -> Lowered:
    """Compile and estimate; :func:`arborcc.synth.synthesis.synthesize` verifies the
    algorithm it returns (candidates that lose are not worth proving).
    ``other_copies``: as :attr:`Lowered.other_copies`."""
    algo = prog.compile()
    routes = channels.routes(algo)
    return Lowered(algo, routes, chunks, steady_state_bandwidth(algo, topology, routes), list(notes),
                   pieces_fallback=prog.compile_stats.pieces_fallback,
                   pieces_unfused=prog.compile_stats.unfused_for_pieces, other_copies=other_copies)


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


def broadcast_blocks(blocks, chunks: int, channels: ChannelMap, buffer: Buffer = OUTPUT) -> list[tuple]:
    """The per-root blocks of :func:`per_root_blocks` as
    :meth:`arborcc.lang.Program.trace_broadcasts` takes them: each root's block of
    ``size`` chunks at its shard's ``start`` sent down its tree within ``buffer`` (the
    output of an all-gather, the input of an in-place all-reduce)."""
    return [(channels.down_tree(r, kids, t), buffer, r * chunks + start, size) for r, kids, start, size, t in blocks]


def reduce_block(root: int, kids, idx: int, size: int, channels: ChannelMap, acc: Buffer,
                  root_slot: tuple[Buffer, int] | None = None, tree: int = 0,
                  copied: frozenset[int] = frozenset()) -> None:
    """Reduce ``size`` chunks at ``idx`` of every rank into the root, leaves first.

    Inner ranks accumulate into their own ``(acc, idx)`` slots (copying their input
    there first when ``acc`` is not the input); leaves send their input; the root
    accumulates into ``root_slot`` when given (e.g. its output for reduce-scatter).
    The ranks ``copied`` hold their input in ``acc`` already (the caller copied it):
    they copy nothing and send from ``acc`` - so that in an in-place call, where that
    copy writes the input, nothing reads the input unordered with it.
    """
    prog = current_program()
    reduces = []
    for v, hops in channels.up_tree(root, kids, tree):
        buf, i = root_slot if (v == root and root_slot) else (acc, idx)
        if (buf, i) != (INPUT, idx) and v not in copied:
            prog.trace_reduces(reduces)
            reduces = []
            local_copy(v, (INPUT, idx), (buf, i), size)
        for child, ch, inner in hops:
            reduces.append((child, acc if inner or child in copied else INPUT, idx, v, buf, i, size, ch))
    prog.trace_reduces(reduces)


def lower_broadcast(topology: Topology, trees: Sequence[Tree], counts: Sequence[int], name: str,
                    spread: int = 0, rounds: int = 1, fuse: bool = True, balance: bool = True,
                    copies_rule: str = "most") -> Lowered:
    """Out-trees from one root; ``counts[t]`` chunks on tree t. ``balance``: cut the
    heaviest trees into copies of near-equal counts
    (:func:`~.lower_channels.balanced_copies`, with ``copies_rule`` its ``rule``; trees of
    equal counts need none).

    ``fuse=False`` leaves every relay's receive a step of its own, which the sends to all
    its children wait for: fused, a relay forwards to its first child on the receiving
    thread block, and its other children's sends wait for that whole step - the copy to
    the first child drained - so its children are served one after another, and every
    tree level costs a transfer more when the pipeline fills and drains. (DGX-2 switch
    trees, :func:`arborcc.synth.trees.switch_broadcast_trees`, 15 chunks: 64 MiB 88.5 GB/s
    fused, 101.9 unfused; 1 GiB 122.3 and 123.9.)"""
    index = {g: i for i, g in enumerate(topology.ranks)}
    other_copies = ()  # no copies cut: no other rule to try
    if balance:
        trees, counts, other_copies = cut_copies(topology, trees, counts, copies_rule, spread)
    chunks, channels = sum(counts), tree_channel_map(topology, trees, spread, counts=counts, rounds=rounds)
    root = index[trees[0].root]
    shapes = [tree_children(t, index)[1] for t in trees]
    with lowering_program(name, Broadcast(topology.num_ranks, chunks, root=root), topology, channels, fuse) as prog:
        local_copy(root, (INPUT, 0), (OUTPUT, 0), chunks)
        for t, start, size in transfer_blocks(counts, rounds):
            broadcast_block(root, shapes[t], (INPUT, start), (OUTPUT, start), size, channels, t)
    return finish(prog, topology, channels, chunks, other_copies=other_copies)


def lower_reduce(topology: Topology, trees: Sequence[Tree], counts: Sequence[int], name: str,
                 spread: int = 0, rounds: int = 1, fuse: bool = True, copies_rule: str = "most") -> Lowered:
    """In-trees into one root; inner ranks accumulate in their (unconstrained) output."""
    index = {g: i for i, g in enumerate(topology.ranks)}
    trees, counts, other_copies = cut_copies(topology, trees, counts, copies_rule, spread)
    chunks, channels = sum(counts), tree_channel_map(topology, trees, spread, counts=counts, rounds=rounds)
    root = index[trees[0].root]
    shapes = [tree_children(t, index)[1] for t in trees]
    with lowering_program(name, Reduce(topology.num_ranks, chunks, root=root), topology, channels, fuse) as prog:
        for t, start, size in transfer_blocks(counts, rounds):
            reduce_block(root, shapes[t], start, size, channels, OUTPUT, tree=t)
    return finish(prog, topology, channels, chunks, other_copies=other_copies)


def lower_allgather(topology: Topology, trees: Sequence[Tree], counts: Sequence[int], name: str,
                    spread: int = 0, rounds: int = 1, fuse: bool = True, copies_rule: str = "most") -> Lowered:
    """One set of out-trees per root (ForestColl); each root's shard split over its trees.

    A root copies its shard into its own block of the output round by round and its
    trees send from there, each round once its copy is done: in an in-place call (the
    input is that block) the copy then writes each chunk before any send reads it,
    where sends from the input would race with the copy writing the same slots. The
    shard is laid out round after round (``round_major``), so the first round waits
    only for its own copy, not for the whole shard's."""
    trees, counts, other_copies = cut_copies(topology, trees, counts, copies_rule, spread)
    blocks, chunks = per_root_blocks(topology, trees, counts, rounds, round_major=True)
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
    return finish(prog, topology, channels, chunks, other_copies=other_copies)


def lower_reducescatter(topology: Topology, trees: Sequence[Tree], counts: Sequence[int], name: str,
                        spread: int = 0, rounds: int = 1, fuse: bool = True, copies_rule: str = "most") -> Lowered:
    """One set of in-trees per root; partial sums accumulate in the input, as GC3's own
    reduce-scatter programs do; the root reduces into its output."""
    trees, counts, other_copies = cut_copies(topology, trees, counts, copies_rule, spread)
    blocks, chunks = per_root_blocks(topology, trees, counts, rounds)
    channels = tree_channel_map(topology, trees, spread, counts=counts, rounds=rounds)
    with lowering_program(name, ReduceScatter(topology.num_ranks, chunks), topology, channels, fuse) as prog:
        for r, kids, start, size, t in blocks:
            reduce_block(r, kids, r * chunks + start, size, channels, INPUT, (OUTPUT, start), t)
    return finish(prog, topology, channels, chunks, other_copies=other_copies)


def lower_allreduce_rs_ag(topology: Topology, trees: Sequence[Tree], counts: Sequence[int], name: str,
                          spread: int = 0, rounds: int = 1, fuse: bool = True, copies_rule: str = "most") -> Lowered:
    """All-reduce = reduce-scatter on the reversed per-root trees + all-gather on the
    per-root out-trees (``trees`` are the out-trees), accumulated in
    :func:`accumulating_buffer` (in place, or out of place)."""
    trees, counts, other_copies = cut_copies(topology, trees, counts, copies_rule, spread, both_ways=True)
    blocks, chunks = per_root_blocks(topology, trees, counts, rounds)
    n, channels = topology.num_ranks, tree_channel_map(topology, trees, spread, True, counts, rounds)
    acc = accumulating_buffer()
    with lowering_program(name, AllReduce(n, n * chunks, inplace=acc is INPUT), topology, channels, fuse) as prog:
        for r, kids, start, size, t in blocks:
            reduce_block(r, kids, r * chunks + start, size, channels, acc, tree=t)
        prog.trace_broadcasts(broadcast_blocks(blocks, chunks, channels, acc))
    return finish(prog, topology, channels, chunks, other_copies=other_copies)


def lower_allreduce_trees(topology: Topology, trees: Sequence[Tree], counts: Sequence[int], name: str,
                          spread: int = 0, rounds: int = 1, fuse: bool = True) -> Lowered:
    """All-reduce as reduce + broadcast over each tree (Blink section 3.3; MXNet's trees):
    a block is reduced up its tree into the root and broadcast back down, accumulated in
    :func:`accumulating_buffer` (in place, or out of place)."""
    index = {g: i for i, g in enumerate(topology.ranks)}
    chunks, channels = sum(counts), tree_channel_map(topology, trees, spread, True, counts, rounds)
    shapes = [tree_children(t, index) for t in trees]
    acc = accumulating_buffer()
    with lowering_program(name, AllReduce(topology.num_ranks, chunks, inplace=acc is INPUT), topology, channels,
                          fuse) as prog:
        blocks = transfer_blocks(counts, rounds)
        for t, start, size in blocks:
            root, kids = shapes[t]
            reduce_block(root, kids, start, size, channels, acc, tree=t)
        for t, start, size in blocks:
            root, kids = shapes[t]
            broadcast_block(root, kids, (acc, start), (acc, start), size, channels, t)
    return finish(prog, topology, channels, chunks)


def lower_allreduce_reduce_broadcast(topology: Topology, reduce_trees: Sequence[tuple[Tree, int]],
                                     broadcast_trees: Sequence[tuple[Tree, int]], name: str,
                                     spread: int = 0, rounds: int = 1, fuse: bool = True,
                                     copies_rule: str = "most") -> Lowered:
    """All-reduce through one root with separate reduce and broadcast trees: the buffer
    (``sum`` of either side's chunk counts) is reduced along the in-trees, then
    broadcast along the out-trees (Blink section 3.3 with the link split of
    :func:`arborcc.synth.bounds.tree_allreduce_split`), accumulated in
    :func:`accumulating_buffer` (in place, or out of place)."""
    index = {g: i for i, g in enumerate(topology.ranks)}
    chunks = sum(c for _, c in reduce_trees)
    if chunks != sum(c for _, c in broadcast_trees):
        raise SynthesisError("reduce and broadcast trees must carry the same number of chunks")
    other_copies = ()  # no copies cut: no other rule to try
    if not spread:
        both = list(reduce_trees) + list(broadcast_trees)
        per_tree, other_copies = tree_copies(topology, [t for t, _ in both], [c for _, c in both], copies_rule)
        cut = len(reduce_trees)
        reduce_trees = list(zip(*expand_copies(*zip(*reduce_trees), per_tree[:cut])))
        broadcast_trees = list(zip(*expand_copies(*zip(*broadcast_trees), per_tree[cut:])))
    trees = [t for t, _ in reduce_trees] + [t for t, _ in broadcast_trees]
    counts = [c for _, c in list(reduce_trees) + list(broadcast_trees)]
    channels = tree_channel_map(topology, trees, spread, counts=counts, rounds=rounds)
    acc = accumulating_buffer()
    with lowering_program(name, AllReduce(topology.num_ranks, chunks, inplace=acc is INPUT), topology, channels,
                          fuse) as prog:
        reduces, broadcasts = aligned_blocks([c for _, c in reduce_trees], [c for _, c in broadcast_trees], rounds)
        shapes = [tree_children(t, index) for t, _ in reduce_trees]
        # out of place, the ranks inner in some reduce tree copy their input into their
        # output first, in the order it is reduced (a copy per pipelined round would
        # push the thread blocks over the runtimes' step limits)
        inner = frozenset(v for _, kids in shapes for v in kids if kids[v]) if acc is OUTPUT else frozenset()
        prog.trace_copies([c for v in sorted(inner) for c in local_copies(v, (INPUT, 0), (OUTPUT, 0), chunks)])
        for t, start, size in reduces:
            root, kids = shapes[t]
            reduce_block(root, kids, start, size, channels, acc, tree=t, copied=inner)
        offset = len(reduce_trees)
        down = [tree_children(t, index) for t, _ in broadcast_trees]
        for t, start, size in broadcasts:
            root, kids = down[t]
            broadcast_block(root, kids, (acc, start), (acc, start), size, channels, offset + t)
    return finish(prog, topology, channels, chunks, other_copies=other_copies)


def lower_ring_allreduce(topology: Topology, rings: Sequence[Sequence[int]],
                         hops: Sequence[Sequence[tuple[str, ...]]] | None, name: str) -> Lowered:
    """Ring all-reduce (reduce-scatter then all-gather around each ring), the data split
    equally over the rings; ring k uses channel k and the paths ``hops[k]``. Out of place
    (:func:`out_of_place_lowering`) the rank completing a chunk's sum copies its input into
    its output there and the all-gather trip goes around the outputs."""
    n = topology.num_ranks
    if len(rings) > MAX_CHANNELS:
        raise SynthesisError(f"{len(rings)} rings exceed MSCCL's {MAX_CHANNELS} channels")
    routes: dict[tuple[int, int, int], tuple[str, ...]] = {}
    acc = accumulating_buffer()
    with Program(name, AllReduce(n, n * len(rings), inplace=acc is INPUT), topology) as prog:
        for k, ring in enumerate(rings):
            for i in range(n):
                a, b = ring[i], ring[(i + 1) % n]
                routes[(a, b, k)] = (hops[k][i] if hops else
                                     topology.route(topology.ranks[a], topology.ranks[b]).path)
            for i in range(n):
                ring_allreduce_trip(ring, i, k * n + i, k, acc, into_output=acc is OUTPUT)
    algo = prog.compile()
    return Lowered(algo, routes, n * len(rings), steady_state_bandwidth(algo, topology, routes),
                   pieces_fallback=prog.compile_stats.pieces_fallback,
                   pieces_unfused=prog.compile_stats.unfused_for_pieces)
