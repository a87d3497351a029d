"""Regressions: programs the compiler once failed on, and properties guarding them.

FIFO order vs. fusion. The runtime matches a connection's messages in FIFO order, so
the global order must receive every rank pair's messages in the order they were sent.
Fusion moves a forwarding send back to the receive it forwards (one ``rcs``/``rrcs``
instruction does both), and a fused instruction ties the order of the pair it receives
on to the order of the pair it sends on. Tree all-reduce programs (reduce up in-trees,
broadcast down out-trees, several trees interleaved; :mod:`arborcc.synth.lower_emit`) made
the order pass give up with an internal ``AssertionError: program order must satisfy
the FIFO constraints``: chaining every pair's messages by one global key (priority or
program order) had a cycle although a consistent order existed. Some programs have no
order at all with every fusion kept (a fused send forced ahead of a message that its
receiver must take first): those must compile with that fusion undone.
"""

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from arborcc.ir.model import Buffer, Op
from arborcc.lang import AllReduce, Chunk, Collective, Program, chunk
from arborcc.ir.reference import execute, make_inputs, run
from support.execution import assert_executes
from arborcc.verify import check_algorithm
from support.ir_checks import op_counts, thread_block_rule_violations
from test_compiler_pieces import compile_unchecked

IN, OUT = Buffer.INPUT, Buffer.OUTPUT


def _check(prog):
    """Compile, check the thread-block rules and verify (with steps cut into the runtimes'
    pieces: the compiler falls back where its global order's schedule does not finish
    there, see arborcc.compiler.pieces)."""
    algo = prog.compile()
    assert thread_block_rule_violations(algo) == []
    check_algorithm(algo)
    return algo


class _InPlace(AllReduce):
    """All-reduce's in-place buffers without its postcondition (for partial programs)."""

    name = "custom"

    def expected_output(self, rank):
        return None


# --- minimal programs --------------------------------------------------------------------
def test_fused_relay_chains_crossing_in_program_order():
    # The minimised failing part of a 4-rank tree all-reduce (synthesize(..., "allreduce",
    # "trees") on a PCIe box with NVLinks 0-1 x2, 0-3, 1-3 x2, 2-3): rank 3 receives
    # block 3 reduced from rank 2 and later forwards it (one rrcs), while block 2 is relayed
    # 2 -> 3 -> 1 -> 0 in between. Chained by priority or by program order, the messages
    # 3 -> 1 and 1 -> 0 got opposite orders (a cycle); sending block 3 first everywhere works.
    with Program("relays", _InPlace(4, 4, inplace=True)) as prog:
        chunk(3, IN, 3).reduce(chunk(2, IN, 3))
        chunk(2, IN, 2).copy(3, IN, 2)
        chunk(3, IN, 2).copy(1, IN, 2)
        chunk(1, IN, 2).copy(0, IN, 2)
        chunk(3, IN, 3).copy(1, IN, 3)
        chunk(1, IN, 3).copy(0, IN, 3)
    algo = _check(prog)
    assert prog.compile_stats.reordered and prog.compile_stats.unfused == 0
    assert op_counts(algo)["rcs"] + op_counts(algo)["rrcs"] == 4  # every fusion kept
    # no postcondition (it is not a whole all-reduce): compare with the program's meaning
    inputs = make_inputs(algo, elems=2, seed=3)
    out = [b[IN] for b in execute(algo, [x.copy() for x in inputs], slots=2)]
    want = [x.copy() for x in inputs]
    want[3][3] += inputs[2][3]
    want[3][2] = want[1][2] = want[0][2] = inputs[2][2]
    want[1][3] = want[0][3] = want[3][3]
    for r in range(4):
        assert np.allclose(out[r], want[r]), r


def _tree_allreduce_4():
    """The whole 4-rank program of the first reproducer (4 trees of one chunk each)."""
    with Program("trees", AllReduce(4, 4, inplace=True)) as prog:
        reduce_hops = [(2, 3, 0), (3, 1, 0), (1, 0, 0), (2, 0, 1), (0, 1, 1), (3, 1, 1),
                       (0, 1, 2), (1, 3, 2), (3, 2, 2), (0, 1, 3), (1, 3, 3), (2, 3, 3)]
        for child, parent, i in reduce_hops:
            chunk(parent, IN, i).reduce(chunk(child, IN, i))
        bcast_hops = [(0, 1, 0), (1, 3, 0), (3, 2, 0), (1, 0, 1), (1, 3, 1), (0, 2, 1),
                      (2, 3, 2), (3, 1, 2), (1, 0, 2), (3, 1, 3), (3, 2, 3), (1, 0, 3)]
        for parent, child, i in bcast_hops:
            chunk(parent, IN, i).copy(child, IN, i)
    return prog


def test_tree_allreduce_with_interleaved_trees():
    prog = _tree_allreduce_4()
    algo = _check(prog)
    assert prog.compile_stats.reordered
    assert_executes(algo)


def test_multi_count_tree_allreduce():
    # the same trees moving blocks of 3 chunks (as synth's multi-count transfers do)
    with Program("trees", AllReduce(4, 12, inplace=True)) as prog:
        for child, parent, i in [(2, 3, 0), (3, 1, 0), (1, 0, 0), (2, 0, 1), (0, 1, 1), (3, 1, 1),
                                 (0, 1, 2), (1, 3, 2), (3, 2, 2), (0, 1, 3), (1, 3, 3), (2, 3, 3)]:
            chunk(parent, IN, 3 * i, 3).reduce(chunk(child, IN, 3 * i, 3))
        for parent, child, i in [(0, 1, 0), (1, 3, 0), (3, 2, 0), (1, 0, 1), (1, 3, 1), (0, 2, 1),
                                 (2, 3, 2), (3, 1, 2), (1, 0, 2), (3, 1, 3), (3, 2, 3), (1, 0, 3)]:
            chunk(parent, IN, 3 * i, 3).copy(child, IN, 3 * i)
    # 3-chunk steps of two trees crossing on one connection, relays fused, deadlock once
    # the runtimes cut them into pieces (Simple, large buffers): compiled unfused
    algo = _check(prog)
    assert prog.compile_stats.fused == 0
    assert {s.count for r in algo.ranks for tb in r.threadblocks for s in tb.steps if s.op is not Op.NOP} == {3}
    assert_executes(algo)


class _Anything(Collective):
    """Inputs initialized, outputs whatever the program makes of them."""

    def init_buffers(self):
        cf = self.chunk_factor
        return [{IN: [Chunk(r, c) for c in range(cf)], OUT: [None] * cf} for r in range(self.num_ranks)]

    def expected_output(self, rank):
        return None


def test_fusion_with_no_fifo_order_is_undone():
    # Rank 1 receives x from rank 0 and forwards it to rank 2 (fusable: one rcs), but in
    # between sends a copy of x to rank 2 that rank 2 must receive first (its reduce of x
    # adds to that copy). Fused, rank 1 sends x before the copy; rank 2 needs the copy
    # first: no order exists on one connection. The fusion is undone instead of failing.
    with Program("nofifo", _Anything(3, 2)) as prog:
        chunk(0, IN, 0).copy(1, IN, 0)
        chunk(1, IN, 0).copy(1, IN, 1)
        chunk(1, IN, 1).copy(2, OUT, 1)
        chunk(2, OUT, 1).reduce(chunk(1, IN, 0))
    algo = _check(prog)
    assert prog.compile_stats.unfused == 1
    assert op_counts(algo)["rcs"] == 0
    inputs = make_inputs(algo, elems=2, seed=5)
    out = run(algo, inputs, slots=2)
    assert np.allclose(out[2][1], 2 * inputs[0][0])


def test_fusion_without_fifo_conflict_is_kept():
    # the same, but rank 2 takes the forwarded x first: nothing to undo
    with Program("fifo", _Anything(3, 2)) as prog:
        chunk(0, IN, 0).copy(1, IN, 0)
        chunk(1, IN, 0).copy(1, IN, 1)
        chunk(1, IN, 0).copy(2, OUT, 1)
        chunk(2, OUT, 1).reduce(chunk(1, IN, 1))
    algo = _check(prog)
    assert prog.compile_stats.unfused == 0 and op_counts(algo)["rcs"] == 1
    inputs = make_inputs(algo, elems=2, seed=5)
    out = run(algo, inputs, slots=2)
    assert np.allclose(out[2][1], 2 * inputs[0][0])


def test_repaired_order_keeps_few_messages_in_flight():
    # The priority order of this (partial) 3-rank tree program is not FIFO-consistent; the
    # repair used to chain rank pairs in priority order, which kept three messages of a
    # pair in flight: with connections of 2 slots the runtime deadlocked (the verifier, at
    # 8 slots, passed it). Repaired orders are now slot-safe for 2 slots.
    ops = [("reduce", 2, 1, 11, 4), ("reduce", 0, 2, 20, 3), ("reduce", 1, 2, 23, 1), ("copy", 0, 2, 3, 2),
           ("copy", 1, 0, 11, 4), ("copy", 0, 2, 5, 4), ("copy", 1, 0, 24, 3), ("copy", 2, 1, 23, 1),
           ("copy", 1, 0, 15, 1), ("copy", 0, 2, 11, 4), ("copy", 2, 1, 0, 3), ("copy", 2, 1, 20, 3)]

    def traced():
        with Program("slots", _InPlace(3, 27, inplace=True)) as prog:
            for kind, a, b, idx, size in ops:
                if kind == "reduce":
                    chunk(b, IN, idx, size).reduce(chunk(a, IN, idx, size))
                else:
                    chunk(a, IN, idx, size).copy(b, IN, idx)
        return prog

    # multi-chunk sends into a 3-rank cycle: the repaired order is deadlock-free as
    # messages (what this tests); with steps cut into pieces its fused schedule is not, and
    # the compiler falls back
    prog = traced()
    repaired, _ = compile_unchecked(prog)
    assert prog.compile_stats.reordered
    check_algorithm(repaired, pieces=False)
    for algo in (repaired, _check(traced())):
        inputs = make_inputs(algo, elems=2, seed=1)
        want = [x.copy() for x in inputs]
        for kind, a, b, idx, size in ops:
            if kind == "reduce":
                want[b][idx:idx + size] += want[a][idx:idx + size]
            else:
                want[b][idx:idx + size] = want[a][idx:idx + size]
        out = [b[IN] for b in execute(algo, inputs, slots=2)]
        for r in range(3):
            assert np.allclose(out[r], want[r]), r


def test_fused_chain_revisiting_a_rank_is_cut():
    # Reduce along 3 -> 2 -> 1 -> 0, broadcast 0 -> 2 -> 1 (and 0 -> 3): fusion makes one
    # chain 3 -> 2 -> 1 -> 0 -> 2 -> 1 that passes rank 2 twice, sending to rank 1 after
    # receiving from 3 and from 0. One channel cannot carry it (rank 2's connection to 1
    # has one sending thread block, which has one receive peer): this raised "no channel
    # below 32 can carry the fused transfers". Now the second visit is unfused.
    with Program("chain", AllReduce(4, 1, inplace=True)) as prog:
        chunk(2, IN, 0).reduce(chunk(3, IN, 0))
        chunk(1, IN, 0).reduce(chunk(2, IN, 0))
        chunk(0, IN, 0).reduce(chunk(1, IN, 0))
        chunk(0, IN, 0).copy(2, IN, 0)
        chunk(2, IN, 0).copy(1, IN, 0)
        chunk(0, IN, 0).copy(3, IN, 0)
    algo = _check(prog)
    assert prog.compile_stats.unfused == 1 and prog.compile_stats.fused == 3
    assert_executes(algo)


def test_repro_topologies_compile():
    # the original reproducers, through synthesis (which compiles, verifies and lowers)
    from arborcc.synth import synthesize
    from support.topologies import nvlink_pcie_box_topology

    for n, lanes in [(4, {(0, 1): 2, (0, 3): 1, (1, 3): 2, (2, 3): 1}),
                     (4, {(0, 3): 1, (1, 2): 2, (1, 3): 1, (2, 3): 2}),
                     (5, {(0, 2): 2, (0, 4): 1, (1, 2): 2, (1, 3): 2, (2, 4): 1})]:
        result = synthesize(nvlink_pcie_box_topology(n, lanes), "allreduce", "trees")
        check_algorithm(result.algorithm)
        assert_executes(result.algorithm)


# --- property: random tree all-reduce programs --------------------------------------------
@st.composite
def _tree(draw, n: int, root: int):
    """A random spanning tree as a parent map (root -> -1)."""
    others = draw(st.permutations([r for r in range(n) if r != root]))
    parent = {root: -1}
    placed = [root]
    for v in others:
        parent[v] = placed[draw(st.integers(0, len(placed) - 1))]
        placed.append(v)
    return parent


@st.composite
def _walk(draw, parent: dict, upward: bool):
    """Tree edges (child, parent) in a random order that is leaves-first (upward: every
    child's subtree is reduced before it sends) or root-first (downward)."""
    kids = {v: [c for c, p in parent.items() if p == v] for v in parent}
    done: set[int] = set()
    out = []
    while len(out) < len(parent) - 1:
        if upward:
            ready = sorted(v for v, p in parent.items() if p >= 0 and v not in done
                           and all(c in done for c in kids[v]))
        else:
            ready = sorted(v for v, p in parent.items() if p >= 0 and v not in done
                           and (parent[p] < 0 or p in done))
        v = ready[draw(st.integers(0, len(ready) - 1))]
        done.add(v)
        out.append((v, parent[v]))
    return out


@st.composite
def tree_allreduces(draw):
    n = draw(st.integers(3, 6))
    blocks = []
    start = 0
    for _ in range(draw(st.integers(2, 5))):
        size = draw(st.integers(1, 3))
        root = draw(st.integers(0, n - 1))
        up = draw(_walk(draw(_tree(n, root)), True))
        down = draw(_walk(draw(_tree(n, root)), False))  # its own out-tree, same root
        ops = [("reduce", c, p, start, size) for c, p in up] + [("copy", p, c, start, size) for c, p in down]
        blocks.append(ops)
        start += size
    # interleave the blocks' operation sequences at random (each block's order kept)
    pending = [list(b) for b in blocks]
    program = []
    while any(pending):
        live = [k for k, b in enumerate(pending) if b]
        k = live[draw(st.integers(0, len(live) - 1))]
        program.append(pending[k].pop(0))
    return n, start, program


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree_allreduces(), st.booleans())
def test_random_tree_allreduces_compile_verify_and_execute(case, fusion):
    n, chunks, program = case
    with Program("tree", AllReduce(n, chunks, inplace=True), instr_fusion=fusion) as prog:
        for kind, a, b, idx, size in program:
            if kind == "reduce":  # child a -> parent b
                chunk(b, IN, idx, size).reduce(chunk(a, IN, idx, size))
            else:  # parent a -> child b
                chunk(a, IN, idx, size).copy(b, IN, idx)
    # random multi-chunk blocks in random order: in the runtimes' piece model the global
    # order's schedule may deadlock (verify/pieces.py); the compiler then falls back
    algo = _check(prog)
    assert_executes(algo)
