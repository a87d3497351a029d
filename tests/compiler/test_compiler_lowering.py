"""Instruction generation (GC3 4.2), fusion, and the numpy interpreter used by all tests."""

import pytest
from support.execution import assert_executes
from support.ir_checks import op_counts, ops_of, thread_block_rule_violations

from arborcc.ir.model import Buffer, Op
from arborcc.lang import AllGather, AllReduce, Program, ReduceScatter, chunk
from arborcc.ir.reference import Deadlock, MessageMismatch, make_inputs, run
from arborcc.verify import check_algorithm

IN, OUT, SC = Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH


def compiled(prog):
    algo = prog.compile()
    assert thread_block_rule_violations(algo) == []
    return algo


def test_remote_copy_is_send_and_receive():
    with Program("p", AllGather(2, 1), instr_fusion=False) as prog:
        for r in range(2):
            chunk(r, IN, 0).copy(r, OUT, r)
            chunk(r, IN, 0).copy(1 - r, OUT, r)
    algo = compiled(prog)
    assert op_counts(algo) == {"cpy": 2, "s": 2, "r": 2}
    recv = [s for tb in algo.ranks[1].threadblocks for s in tb.steps if s.op is Op.RECV][0]
    assert (recv.dst_buf, recv.dst_off, recv.count) == (OUT, 0, 1)
    assert_executes(algo)


def test_remote_reduce_is_send_and_rrc_local_reduce_is_re():
    with Program("p", ReduceScatter(2, 1, inplace=True), instr_fusion=False) as prog:
        chunk(0, IN, 0).reduce(chunk(1, IN, 0))  # remote: send on 1, rrc on 0
        chunk(1, IN, 0).copy(1, SC, 0)
        chunk(1, IN, 1).reduce(chunk(1, SC, 0).copy(1, SC, 1))  # local copy + local reduce
        chunk(1, IN, 1).reduce(chunk(0, IN, 1))
    algo = compiled(prog)
    counts = op_counts(algo)
    assert counts["rrc"] == 2 and counts["re"] == 1 and counts["cpy"] == 2 and counts["s"] == 2
    rrc = [s for tb in algo.ranks[0].threadblocks for s in tb.steps if s.op is Op.RECV_REDUCE_COPY][0]
    assert (rrc.src_buf, rrc.src_off) == (rrc.dst_buf, rrc.dst_off) == (IN, 0)


def test_copy_chain_fuses_into_rcs():
    def line(fusion):
        with Program("bcast", AllGather(4, 1), instr_fusion=fusion) as prog:
            for root in range(4):
                c = chunk(root, IN, 0).copy(root, OUT, root)
                for k in range(1, 4):
                    c = c.copy((root + k) % 4, OUT, root)
        return compiled(prog)

    fused, plain = line(True), line(False)
    assert op_counts(fused) == {"cpy": 4, "s": 4, "rcs": 8, "r": 4}
    assert op_counts(plain) == {"cpy": 4, "s": 12, "r": 12}
    for algo in (fused, plain):
        assert_executes(algo)
        check_algorithm(algo, "executor")


def test_reduce_chain_becomes_rrs_then_rrcs():
    n = 4
    with Program("ring", AllReduce(n, n, inplace=True)) as prog:
        for i in range(n):
            c = chunk((i + 1) % n, IN, i)
            for step in range(2, n + 1):
                c = chunk((i + step) % n, IN, i).reduce(c)
            for step in range(1, n):
                c = c.copy((i + step) % n, IN, i)
    algo = compiled(prog)
    # per chunk: send, rrs (value overwritten later by the all-gather), rrcs at the owner
    # (its result stays in the output and is forwarded), rcs, final receive
    assert op_counts(algo) == {"s": n, "rrs": n * (n - 2), "rrcs": n, "rcs": n * (n - 2), "r": n}
    assert len(algo.ranks[0].threadblocks) == 1
    assert_executes(algo)


def test_reduced_value_read_again_is_not_rrs():
    with Program("p", ReduceScatter(3, 1, inplace=False)) as prog:
        acc = chunk(1, IN, 0).reduce(chunk(2, IN, 0))  # rrc on rank 1 ...
        acc.copy(1, SC, 0)  # ... whose value is also kept locally
        own = chunk(0, IN, 0).copy(0, OUT, 0)
        own.reduce(acc)  # ... and forwarded to rank 0
        for r in (1, 2):
            c = chunk((r + 1) % 3, IN, r)
            for step in (2, 3):
                rr = (r + step) % 3
                if step == 3:
                    c = chunk(rr, IN, r).copy(rr, OUT, 0).reduce(c)
                else:
                    c = chunk(rr, IN, r).reduce(c)
    algo = compiled(prog)
    assert "rrcs" in ops_of(algo, 1)
    assert_executes(algo)


def test_reduced_value_left_in_output_is_not_rrs():
    with Program("p", AllReduce(2, 1, inplace=False)) as prog:
        a = chunk(0, IN, 0).copy(0, OUT, 0)
        a = a.reduce(chunk(1, IN, 0))  # rrc into rank 0's output: the final value
        a.copy(1, OUT, 0)  # forwarded: rrcs, not rrs
    algo = compiled(prog)
    assert op_counts(algo)["rrcs"] == 1 and "rrs" not in op_counts(algo)
    assert_executes(algo)


def test_fusion_prefers_the_longest_path():
    # rank 0's chunk goes to 1, which forwards it to 2 (a short branch) and to 3 -> 4 -> 5
    with Program("tree", AllGather(6, 1)) as prog:
        c = chunk(0, IN, 0).copy(1, SC, 0)
        c.copy(2, SC, 0)
        c.copy(3, SC, 0).copy(4, SC, 0).copy(5, SC, 0)
    algo = prog.compile()
    rcs = [tb for tb in algo.ranks[1].threadblocks if any(s.op is Op.RECV_COPY_SEND for s in tb.steps)]
    assert len(rcs) == 1 and rcs[0].send == 3


# --- the numpy interpreter itself must be able to fail ---------------------------------------
def ring_program(n=3):
    with Program("ring", AllReduce(n, n, inplace=True)) as prog:
        for i in range(n):
            c = chunk((i + 1) % n, IN, i)
            for step in range(2, n + 1):
                c = chunk((i + step) % n, IN, i).reduce(c)
            for step in range(1, n):
                c = c.copy((i + step) % n, IN, i)
    return prog


def ring(n=3):
    return ring_program(n).compile()


def test_interpreter_detects_wrong_offsets():
    algo = ring()
    step = next(s for tb in algo.ranks[1].threadblocks for s in tb.steps if s.op is Op.RECV)
    step.dst_off = (step.dst_off + 1) % 3
    with pytest.raises(AssertionError):
        assert_executes(algo)


def test_interpreter_detects_deadlock_and_count_mismatch():
    algo = ring()
    tb = algo.ranks[0].threadblocks[0]
    tb.steps.reverse()  # receive before anything is sent: everyone waits
    for other in algo.ranks[1:]:
        other.threadblocks[0].steps.reverse()
    with pytest.raises(Deadlock):
        run(algo, make_inputs(algo))
    algo = ring()
    first_send = algo.ranks[0].threadblocks[0].steps[0]
    first_send.count = 2
    with pytest.raises((MessageMismatch, IndexError)):
        run(algo, make_inputs(algo))


def test_interpreter_detects_too_few_slots():
    with pytest.raises(Deadlock):
        run(ring(4), make_inputs(ring(4)), slots=1)  # a fused ring needs two slots per connection
    run(ring(4), make_inputs(ring(4)), slots=2)


def test_vectorized_lowering_matches_the_general_one():
    from arborcc.compiler.instructions import InstrTable, _lower_direct, _lower_pieces
    from arborcc.compiler.layout import plan_layout
    from arborcc.library import twostep_alltoall
    from arborcc.library.alltonext import alltonext

    for _, prog in (twostep_alltoall(2, 3), alltonext(2, 3)):  # scratch regions, local and remote ops
        layout = plan_layout(prog)
        fast, slow = _lower_direct(prog, layout), _lower_pieces(prog, layout)
        for f in InstrTable.FIELDS:
            assert list(getattr(fast, f)) == list(getattr(slow, f)), f


@pytest.mark.parametrize("n", [3, 5])
def test_unfusing_every_fusion_restores_the_unfused_table(n):
    """Fusion and unfuse (compiled code) are inverse: the ring's fused instructions all
    undone, every column, the alias map and liveness are what lowering produced."""
    from arborcc.compiler.dag import build_dag
    from arborcc.compiler.fusion import fuse_instructions, unfuse
    from arborcc.compiler.instructions import InstrTable, lower_operations
    from arborcc.compiler.layout import IB_INPUT, plan_layout

    prog = ring_program(n)
    layout = plan_layout(prog)
    t = lower_operations(prog, layout)
    before = {f: getattr(t, f) for f in (*InstrTable.FIELDS, "alive", "rep")}
    fuse_instructions(t, build_dag(t, [layout.ir_sizes(r) for r in range(n)]), {IB_INPUT}, False)
    assert t.fusion_count == t.alive.count(False) > 0
    assert {t.kind[r] for r in t.fusions} - {5, 6, 7} == set()  # rcs, rrcs, rrs
    unfuse(t, t.fused_receives())
    assert t.fusion_count == 0 and t.fusions == {}
    assert {f: getattr(t, f) for f in before} == before
