"""Program.trace_copies, trace_broadcasts and trace_reduces record exactly what
chunk(...).copy(...) and chunk(...).reduce(chunk(...)) one after another record, and fail
with the same error at the same operation."""

import sys

from hypothesis import HealthCheck, given, settings, strategies as st

from arborcc.errors import ProgramError
from arborcc.ir.model import Buffer
from arborcc.lang import AllGather, AllReduce, Program, chunk
from arborcc.lang import trace as T

IN, OUT, SC = Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH
COLLECTIVES = (lambda: AllGather(3, 2), lambda: AllGather(3, 2, inplace=True), lambda: AllReduce(3, 2, True),
               lambda: AllReduce(3, 2))
LINKS = [[0, 1, 0], [1, 0, 1], [1, 1, 0]]  # rank 0 cannot send to rank 2

# a copy that may be wrong in any field
bad = st.tuples(st.integers(-1, 3), st.sampled_from((IN, OUT, SC, "bad")), st.integers(-1, 7), st.integers(0, 3),
                st.sampled_from((IN, OUT, SC)), st.integers(0, 7), st.integers(0, 3), st.integers(-2, 2))


@st.composite
def copies(draw):
    """Copies that can mostly be traced - from an input (2 chunks a rank) or from where an
    earlier copy wrote, to anywhere - and now and then one that may be wrong."""
    steps, written = [], []
    for _ in range(draw(st.integers(1, 14))):
        what = draw(st.integers(0, 11))
        if what == 0:
            steps.append(draw(bad))
            continue
        if what < 5 or not written:
            si = draw(st.integers(0, 1))
            src = (draw(st.integers(0, 2)), IN, si, draw(st.integers(1, 2 - si)))
        else:
            src = draw(st.sampled_from(written))
        buf = draw(st.sampled_from((OUT, OUT, SC, IN)))
        dst = (draw(st.integers(0, 2)), buf, draw(st.integers(0, 2 - src[3] if buf is IN else 4)))
        steps.append((*src[:3], *dst, src[3], draw(st.integers(-1, 1))))
        written.append((*dst, src[3]))
    return steps


def _trace(make_program, trace, max_ops=None):
    """(operations without their source line, the error or None) of ``trace(program)``."""
    with make_program() as prog:
        if max_ops is not None:
            prog.max_ops = max_ops
        try:
            trace(prog)
            error = None
        except (ProgramError, AttributeError) as e:
            error = type(e), str(e).split(": ", 1)[-1]
    return [op[:T.WHERE] for op in prog.ops], error


def _one_by_one(steps):
    """A trace doing ``steps`` as chunk(...).copy(...) one after another."""
    def trace(prog):
        for sr, sb, si, dr, db, di, n, ch in steps:
            chunk(sr, sb, si, n).copy(dr, db, di, ch=ch)
    return trace


def _record(collective, topology, steps, bulk: bool, max_ops=None):
    """_trace of ``steps`` with trace_copies (``bulk``) or one by one."""
    trace = (lambda prog: prog.trace_copies(steps)) if bulk else _one_by_one(steps)
    return _trace(lambda: Program("p", collective(), topology), trace, max_ops)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(range(len(COLLECTIVES))), st.sampled_from((None, LINKS)), copies())
def test_trace_copies_records_what_chunk_copy_records(which, topology, steps):
    assert _record(COLLECTIVES[which], topology, steps, True) == _record(COLLECTIVES[which], topology, steps,
                                                                         False)


def test_trace_copies_fast_path_covers_a_tree_broadcast():
    steps = [(0, IN, 0, 0, OUT, 0, 2, -1), (0, OUT, 0, 1, OUT, 0, 2, 1), (1, OUT, 0, 2, OUT, 0, 2, -1)]
    ops, error = _record(lambda: AllGather(3, 2), None, steps, True)
    assert error is None
    assert ops == [(T.COPY, 0, 0, 0, 0, 1, 0, 2, -1, -1, -1, 1), (T.COPY, 0, 1, 0, 1, 1, 0, 2, -1, -1, 1, 1),
                   (T.COPY, 1, 1, 0, 2, 1, 0, 2, -1, -1, -1, 1)]


def _both(collective, steps, max_ops=None, topology=None):
    """_record of both ways with the operations limit set to ``max_ops``."""
    return [_record(collective, topology, steps, bulk, max_ops) for bulk in (True, False)]


def test_trace_copies_stops_at_the_operations_limit_as_copy_does():
    steps = [(r, IN, 0, r, OUT, 2 * r, 2, -1) for r in range(3)]
    bulk, one_by_one = _both(lambda: AllGather(3, 2), steps, max_ops=2)
    assert bulk == one_by_one and len(bulk[0]) == 3 and "operations" in bulk[1][1]


def test_trace_copies_takes_lists_iterables_and_ints_of_any_size():
    big = 10**30
    steps = [[0, IN, 0, 1, OUT, 0, 2, big], (1, IN, 0, 2, OUT, 2, 1, -1), (2, IN, big, 0, OUT, 0, 1, -1)]
    bulk, one_by_one = _both(lambda: AllGather(3, 2), steps)
    assert bulk == one_by_one and bulk[0][0][T.CH] == big and "out of range" in bulk[1][1]
    with Program("p", AllGather(3, 2)) as prog:
        prog.trace_copies(s for s in steps[:2])
    assert [op[:T.WHERE] for op in prog.ops] == bulk[0][:2]


def test_trace_copies_records_the_line_that_called_it():
    with Program("p", AllGather(3, 2), LINKS) as prog:
        line = sys._getframe().f_lineno + 1
        prog.trace_copies([(0, IN, 0, 1, OUT, 0, 2, -1)])
    assert prog.ops[0][T.WHERE] == (__file__, line)


def test_trace_copies_in_place_aliasing_by_rule():
    """In-place all-gather names the input, which lives in the output's block of its rank."""
    steps = [(r, IN, 0, d, IN, 0, 2, -1) for r in range(3) for d in range(3) if d != r]
    for by_source in (False, True):
        def program():
            return Program("p", AllGather(3, 2, inplace=True), copy_index_by_source=by_source)
        results = [_trace(program, lambda prog: prog.trace_copies(steps)), _trace(program, _one_by_one(steps))]
        assert results[0] == results[1] and results[0][0]


@st.composite
def broadcast_blocks(draw):
    """Blocks of trace_broadcasts: tree hops (now and then a wrong one) over one buffer range."""
    out = []
    for _ in range(draw(st.integers(1, 6))):
        hops = draw(st.lists(st.tuples(st.integers(-1, 3), st.integers(0, 2), st.integers(-2, 1)), max_size=4))
        hops = tuple(hops) if draw(st.booleans()) else hops
        out.append((hops, draw(st.sampled_from((IN, OUT, OUT, SC))), draw(st.integers(0, 5)), draw(st.integers(0, 2))))
    return out


def _record_blocks(collective, topology, blocks, bulk: bool):
    """_trace of ``blocks`` with trace_broadcasts (``bulk``) or one chunk(...).copy(...) per
    hop, after every rank's input is copied to the start of its output."""
    first = [(r, IN, 0, r, OUT, 0, 2, -1) for r in range(3)]
    hops = [(p, b, i, c, b, i, n, ch) for hops, b, i, n in blocks for p, c, ch in hops]

    def bulk_trace(prog):
        prog.trace_copies(first)
        prog.trace_broadcasts(blocks)
    return _trace(lambda: Program("p", collective(), topology), bulk_trace if bulk else _one_by_one(first + hops))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(range(len(COLLECTIVES))), st.sampled_from((None, LINKS)), broadcast_blocks())
def test_trace_broadcasts_records_what_chunk_copy_records(which, topology, blocks):
    assert _record_blocks(COLLECTIVES[which], topology, blocks, True) == \
        _record_blocks(COLLECTIVES[which], topology, blocks, False)


def test_trace_broadcasts_is_trace_copies_of_its_hops():
    blocks = [(((0, 1, -1), (1, 2, 0)), OUT, 0, 2), ([(1, 0, 1)], OUT, 2, 2), ((), OUT, 0, 1)]
    results = []
    for bulk in (True, False):
        with Program("p", AllGather(3, 2), LINKS) as prog:
            prog.trace_copies([(r, IN, 0, r, OUT, 2 * r, 2, -1) for r in range(3)])
            line = sys._getframe().f_lineno + 2
            if bulk:
                prog.trace_broadcasts(blocks)
            else:
                prog.trace_copies([(p, b, i, c, b, i, n, ch) for hops, b, i, n in blocks for p, c, ch in hops])
        results.append([op[:T.WHERE] for op in prog.ops])
        assert all(op[T.WHERE] == (__file__, line + (0 if bulk else 2)) for op in prog.ops[3:])
    assert results[0] == results[1] and len(results[0]) == 6


@st.composite
def copies_and_reduces(draw):
    """Copies and reduces (kind, fields) that can mostly be traced - each reading an
    input (2 chunks a rank) or where an earlier one wrote - and now and then a wrong one:
    a reduce into a slot nothing wrote, onto itself, of a bad field."""
    steps, written = [], [(r, IN, i, 1) for r in range(3) for i in range(2)]
    for _ in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(("copy", "reduce", "reduce")))
        if draw(st.integers(0, 11)) == 0:
            steps.append((kind, draw(bad)))
            continue
        src = draw(st.sampled_from(written))
        if kind == "copy":
            dst = (draw(st.integers(0, 2)), draw(st.sampled_from((OUT, OUT, SC, IN))), draw(st.integers(0, 4)))
            written.append((*dst, src[3]))
        else:
            dst = draw(st.sampled_from(written + [(draw(st.integers(0, 2)), OUT, draw(st.integers(0, 4)), 1)]))[:3]
        steps.append((kind, (*src[:3], *dst, src[3], draw(st.integers(-1, 1)))))
    return steps


def _record_mixed(collective, topology, steps, bulk: bool):
    """_trace of ``steps``: runs of one kind with trace_copies or trace_reduces (``bulk``),
    or each as chunk(...).copy(...) and chunk(dst...).reduce(chunk(src...))."""
    def bulk_trace(prog):
        run, kind = [], None
        for k, fields in steps + [(None, None)]:
            if k != kind and run:
                (prog.trace_copies if kind == "copy" else prog.trace_reduces)(run)
                run = []
            run.append(fields)
            kind = k

    def one_by_one(prog):
        for kind, (sr, sb, si, dr, db, di, n, ch) in steps:
            if kind == "copy":
                chunk(sr, sb, si, n).copy(dr, db, di, ch=ch)
            else:
                chunk(dr, db, di, n).reduce(chunk(sr, sb, si, n), ch=ch)
    return _trace(lambda: Program("p", collective(), topology), bulk_trace if bulk else one_by_one)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(range(len(COLLECTIVES))), st.sampled_from((None, LINKS)), copies_and_reduces())
def test_trace_reduces_records_what_chunk_reduce_records(which, topology, steps):
    assert _record_mixed(COLLECTIVES[which], topology, steps, True) == \
        _record_mixed(COLLECTIVES[which], topology, steps, False)


def test_trace_reduces_fast_path_covers_a_tree_reduce():
    """Leaves 1 and 2 reduced into rank 0's input, then rank 0 into rank 1: nothing as
    written, the operations the compiled loop records."""
    steps = [(1, IN, 0, 0, IN, 0, 2, -1), (2, IN, 0, 0, IN, 0, 2, 1), (0, IN, 0, 1, IN, 0, 2, -1)]
    with Program("p", AllReduce(3, 2, True), LINKS) as prog:
        prog._reduce_as_written = None  # a handed-back reduce would fail here
        prog.trace_reduces(steps)
    assert [op[:T.WHERE] for op in prog.ops] == [(T.REDUCE, 1, 0, 0, 0, 0, 0, 2, -1, -1, -1, 1),
                                                 (T.REDUCE, 2, 0, 0, 0, 0, 0, 2, -1, -1, 1, 1),
                                                 (T.REDUCE, 0, 0, 0, 1, 0, 0, 2, -1, -1, -1, 1)]


def test_trace_reduces_in_place_aliasing_by_rule_maps_each_chunk_with_its_own_rank():
    """In-place all-gather: a reduce's destination is the input of its own rank, however
    copies map theirs."""
    steps = [(r, IN, 0, d, IN, 0, 2, -1) for r in range(3) for d in range(3) if d != r]
    for by_source in (False, True):
        def program():
            return Program("p", AllGather(3, 2, inplace=True), copy_index_by_source=by_source)
        bulk = _trace(program, lambda prog: prog.trace_reduces(steps))
        one_by_one = _trace(program, lambda prog: [chunk(d, b, di, n).reduce(chunk(s, sb, si, n), ch=ch)
                                                   for s, sb, si, d, b, di, n, ch in steps])
        assert bulk == one_by_one and len(bulk[0]) == len(steps) and bulk[1] is None
