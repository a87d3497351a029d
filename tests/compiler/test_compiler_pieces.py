"""The compiled schedule must finish with its steps cut into pieces, as the MSCCL runtimes
run them (arborcc.compiler.pieces): a step of 2 chunks fills a Simple connection, so a
receive held back by a dependency on a send that waits for room deadlocks where the
compiler's global order, with unbounded connections, did not. The compiler runs its
schedule in the verifier's piece model and falls back (unfused, then program order).
"""

from unittest import mock

from hypothesis import HealthCheck, given, settings, strategies as st
from test_compiler_random import assert_computes, programs, trace

import arborcc.compiler.pieces as compiler_pieces
import arborcc.compiler.pipeline as pipeline
from arborcc.ir.model import Buffer, Protocol
from arborcc.verify import verify_algorithm
from arborcc.verify.pieces import LL_PIECES, SIMPLE_PIECES, deadlock_free

IN, OUT = Buffer.INPUT, Buffer.OUTPUT


def copy(src, dst, size=1, par=1):
    return dict(kind="copy", src=src, dst=dst, size=size, par=par)


#: Found by test_compiler_random: rank 0 relays 2 chunks of rank 3 back to it (one ``rcs``
#: when fused) while also sending it chunks that overwrite what rank 3 still sends from.
#: With 2 instances (2-chunk steps) and fusion, the global order has rank 3 send two
#: 2-chunk steps before it receives: in Simple the first fills the connection, the second
#: waits for rank 0, whose relay waits for room towards rank 3, whose receive waits
#: (write after read) for that second send.
RELAY = (4, [copy((3, IN, 1), (0, "relay", 1), size=2), copy((0, "relay", 1), (3, IN, 0)),
             copy((0, IN, 0), (3, IN, 2), par=2)])

#: Deadlocks in pieces in the global order even unfused: rank 0 sends 3 chunks (more than
#: a Simple connection holds) to rank 1, whose receive waits (write after read) for rank
#: 1's 2-chunk send, queued on its connection behind a 1-chunk send whose receive on rank
#: 0 waits (write after read) for rank 0's 3-chunk send.
CROSSING = (2, [copy((1, IN, 0), (0, "relay", 0), size=2), copy((0, IN, 0), (1, IN, 0), size=3),
                copy((1, IN, 3), (0, IN, 0)), copy((0, IN, 0), (0, OUT, 0))])


def compile_unchecked(prog):
    """``prog`` compiled in the global order whatever the piece check says, and that
    check's verdicts (the compiler's run of the schedule it would have kept)."""
    verdicts = []

    def keep_the_global_order(schedule, a, protocol):
        verdicts.append(compiler_pieces.finishes_in_pieces(schedule, a, protocol))
        return True

    with mock.patch.object(pipeline, "finishes_in_pieces", keep_the_global_order):
        algo = prog.compile()
    return algo, verdicts


def test_fused_relay_filling_a_connection_compiles_deadlock_free():
    ranks, ops = RELAY
    for instances in (1, 2):
        for fusion in (False, True):
            prog, applied = trace(ranks, ops, instances, fusion)
            assert applied == ops
            algo = prog.compile()
            report = verify_algorithm(algo)
            assert report.ok, (instances, fusion, [str(v) for v in report.violations])
            assert_computes(algo, ranks, applied)
    # the last (2 instances, fused): unfused, the global order finishes
    assert prog.compile_stats.pieces_fallback
    assert prog.compile_stats.fused == 0 and prog.compile_stats.unfused > 0
    assert not prog.compile_stats.in_program_order


def test_compiler_sees_the_deadlock_the_verifier_sees():
    prog, _ = trace(*RELAY, instances=2, fusion=True)
    algo, verdicts = compile_unchecked(prog)
    assert verdicts == [False]
    assert not deadlock_free(algo)


def test_relay_keeps_its_fusion_where_the_protocol_has_room():
    # LL pieces take 1 of 8 slices: two 2-chunk steps in flight fit
    prog, _ = trace(*RELAY, instances=2, fusion=True, protocol="LL")
    algo = prog.compile()
    assert algo.protocol is Protocol.LL
    assert not prog.compile_stats.pieces_fallback
    assert prog.compile_stats.fused > 0 and prog.compile_stats.unfused == 0
    assert verify_algorithm(algo).ok


def test_program_order_when_unfused_global_order_deadlocks_in_pieces():
    ranks, ops = CROSSING
    prog, _ = trace(ranks, ops, instances=1, fusion=False)
    unchecked, verdicts = compile_unchecked(prog)
    assert verdicts == [False] and not deadlock_free(unchecked)
    prog, applied = trace(ranks, ops, instances=1, fusion=False)
    assert applied == ops
    algo = prog.compile()
    assert prog.compile_stats.pieces_fallback and prog.compile_stats.in_program_order
    report = verify_algorithm(algo)
    assert report.ok, [str(v) for v in report.violations]
    assert_computes(algo, ranks, applied)


def test_compiler_piece_model_is_the_verifiers():
    assert compiler_pieces.SIMPLE_SLICES == (SIMPLE_PIECES.capacity, SIMPLE_PIECES.per_piece)
    assert compiler_pieces.LL_SLICES == (LL_PIECES.capacity, LL_PIECES.per_piece)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(sizes=(1, 2, 3)), st.sampled_from([1, 2]), st.booleans(), st.sampled_from(["Simple", "LL"]))
def test_compiler_and_verifier_agree_whether_a_schedule_finishes_in_pieces(program, instances, fusion, protocol):
    ranks, ops = program
    prog, applied = trace(ranks, ops, instances, fusion, protocol)
    if not applied:
        return
    unchecked, verdicts = compile_unchecked(prog)
    assert verdicts == [deadlock_free(unchecked)]
    prog, _ = trace(ranks, ops, instances, fusion, protocol)
    assert deadlock_free(prog.compile())
