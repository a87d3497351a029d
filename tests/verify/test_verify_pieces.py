"""The deadlock check with steps cut into the MSCCL runtimes' pieces (verify/pieces.py):
cases whose answer follows from the FIFO arithmetic (Simple: 4 slices per connection,
2 per piece; LL/LL128: 8 slices, 1 per piece; maxAllowedCount 1 = a piece per chunk)."""

import pytest
from support.msccl_samples import MSCCL_SAMPLES

from arborcc.ir.model import Algorithm, Buffer, Dependency, Op, Protocol, RankProgram, Step, ThreadBlock
from arborcc.verify import verify_algorithm
from arborcc.verify.pieces import (LL_PIECES, MAX_ALLOWED_COUNT, SIMPLE_PIECES, PieceModel, PieceSchedule,
                                   check_pieces, deadlock_free, piece_deadlocks)
from arborcc.verify.semantics import OPS

I, O = Buffer.INPUT, Buffer.OUTPUT


def step(op, cnt, src=I, dst=O):
    return Step(op, src, 0, dst, 0, cnt, None, False)


def exchange(cnt: int, protocol=Protocol.SIMPLE) -> Algorithm:
    """Two ranks that each send ``cnt`` chunks to the other, then receive them."""
    tb = lambda peer: ThreadBlock(0, send=peer, recv=peer, steps=[step(Op.SEND, cnt), step(Op.RECV, cnt)])
    return Algorithm("x", "custom", 2, cnt, [RankProgram(r, cnt, cnt, 0, [tb(1 - r)]) for r in range(2)],
                     protocol=protocol)


@pytest.mark.parametrize("cnt,allowed,deadlocks", [
    (2, 1, False),   # 2 pieces x 2 slices = the 4 slices of the FIFO
    (3, 1, True),    # 6 slices: neither side gets to its receive
    (3, 2, False),   # 2 pieces of at most 2 chunks
    (64, 32, False),
    (64, 16, True),
])
def test_simple_exchange_fits_two_pieces(cnt, allowed, deadlocks):
    found = piece_deadlocks(exchange(cnt), SIMPLE_PIECES, allowed)
    assert bool(found) == deadlocks
    if deadlocks:
        assert "maxAllowedCount" in found[-1].message and "Simple" in found[-1].message


@pytest.mark.parametrize("cnt,deadlocks", [(8, False), (9, True)])
def test_ll_exchange_fits_eight_pieces(cnt, deadlocks):
    assert bool(piece_deadlocks(exchange(cnt, Protocol.LL), LL_PIECES, 1)) == deadlocks


def test_verifier_reports_the_piece_deadlock_the_message_run_misses():
    algo = exchange(3)
    assert verify_algorithm(algo, pieces=False).ok  # one message per step: 1 of 8 slots
    report = verify_algorithm(algo)
    assert not report.ok and report.violations[0].kind == "deadlock"
    assert "pieces" in report.violations[0].message
    # the protocol the algorithm declares decides the model: LL holds 8 pieces
    assert verify_algorithm(exchange(3, Protocol.LL)).ok


def test_fused_relay_forwards_as_it_receives():
    """0 -> 1 -> 2 with a 64-chunk step (128 Simple slices through FIFOs of 4): the fused
    relay forwards slice by slice; unfused, the relay's receive drains its FIFO and the
    send that depends on it follows."""
    fused = [ThreadBlock(0, send=2, recv=0, steps=[step(Op.RECV_COPY_SEND, 64)])]
    unfused = [ThreadBlock(0, send=-1, recv=0, steps=[Step(Op.RECV, None, -1, O, 0, 64, None, True)]),
               ThreadBlock(1, send=2, recv=-1, steps=[Step(Op.SEND, O, 0, None, -1, 64, Dependency(0, 0), False)])]
    for relay in (fused, unfused):
        algo = Algorithm("c", "custom", 3, 64, [
            RankProgram(0, 64, 64, 0, [ThreadBlock(0, send=1, recv=-1, steps=[step(Op.SEND, 64)])]),
            RankProgram(1, 64, 64, 0, relay),
            RankProgram(2, 64, 64, 0, [ThreadBlock(0, send=-1, recv=1, steps=[step(Op.RECV, 64)])])])
        assert deadlock_free(algo)


def test_cycle_of_long_steps_is_found_in_three_ranks():
    """A ring where every rank sends 3 chunks to the next before receiving from the previous."""
    tbs = {r: ThreadBlock(0, send=(r + 1) % 3, recv=(r - 1) % 3, steps=[step(Op.SEND, 3), step(Op.RECV, 3)])
           for r in range(3)}
    algo = Algorithm("ring", "custom", 3, 3, [RankProgram(r, 3, 3, 0, [tbs[r]]) for r in range(3)])
    found, note = check_pieces(algo)
    assert found and "maxAllowedCount 1" in note
    assert "cycle" in found[0].message


@pytest.mark.parametrize("path", MSCCL_SAMPLES, ids=lambda p: p.name)
def test_public_samples_are_deadlock_free_in_their_protocol(path):
    from arborcc.ir.load import load_algorithm

    algo = load_algorithm(path)
    assert not check_pieces(algo)[0]
    if path.name == "executor__reducescatter_allpairs_4.xml":
        # LL: each side's 4-chunk send fits the 8 one-step pieces; the same file in Simple
        # (2 pieces per FIFO) would deadlock on large buffers
        assert algo.protocol is Protocol.LL
        assert piece_deadlocks(algo, SIMPLE_PIECES, 1)


def _corpus():
    """Algorithms with and without piece deadlocks: the public samples, library
    algorithms (rings with multi-chunk first sends, the parallel hierarchical all-reduce
    that deadlocks), the hand-made cases above at several counts."""
    from arborcc.ir.load import load_algorithm
    from arborcc.library import LIBRARY

    for path in MSCCL_SAMPLES:
        yield path.name, load_algorithm(path)
    for name, params in (("ring-allreduce", dict(ranks=4, channels=2, instances=2)),
                         ("ring-allgather", dict(ranks=3, instances=2)),
                         ("hd-allreduce", dict(ranks=8, instances=2)),
                         ("allpairs-allreduce", dict(ranks=4, instances=2)),
                         ("hierarchical-allreduce", dict(nodes=2, gpus_per_node=2, parallel=2)),
                         ("hierarchical-allreduce", dict(nodes=3, gpus_per_node=2, instances=2)),
                         ("twostep-alltoall", dict(nodes=2, gpus_per_node=3, instances=2))):
        yield name, LIBRARY[name](**params)[0]
    for cnt in (2, 3, 9, 64):
        yield f"exchange {cnt}", exchange(cnt)
        yield f"exchange {cnt} LL", exchange(cnt, Protocol.LL)


def test_count_one_decides_every_larger_count_and_the_message_run():
    """The module doc's argument, checked: a run at a larger maxAllowedCount (fewer
    pieces per step) or with one-message steps in 8 slots deadlocks only if the run at
    maxAllowedCount 1 does - so check_pieces runs that one alone."""
    message = PieceModel("message", 8, 1)
    deadlocked = 0
    for name, algo in _corpus():
        for model in (SIMPLE_PIECES, LL_PIECES):
            at_one = bool(piece_deadlocks(algo, model, 1))
            deadlocked += at_one
            for count in (2, 3, 4, 8, 16, 32, 64, MAX_ALLOWED_COUNT, 1 << 20):
                assert not piece_deadlocks(algo, model, count) or at_one, (name, model.protocol, count)
            assert not piece_deadlocks(algo, message, 1 << 20) or at_one, (name, model.protocol)
    assert deadlocked >= 5  # the corpus has deadlocks for the implication to be tested on



def _slice_by_slice(algo: Algorithm, model: PieceModel, allowed: int) -> tuple[list[int], dict]:
    """The piece run without shortcuts, as a reference: sweep every thread block over and
    over, each moving what its FIFOs allow right now, until a sweep moves nothing; the
    program counters (thread blocks by rank, then by position) and the slices left in
    every FIFO by (sender rank, receiver rank, channel)."""
    tbs = [(p.rank, tb) for p in sorted(algo.ranks, key=lambda p: p.rank) for tb in p.threadblocks]
    where = {(r, tb.id): g for g, (r, tb) in enumerate(tbs)}
    filled: dict = {}
    pc, moved, signal = [0] * len(tbs), [0] * len(tbs), [-1] * len(tbs)
    progress = True
    while progress:
        progress = False
        for g, (r, tb) in enumerate(tbs):
            while pc[g] < len(tb.steps):
                st = tb.steps[pc[g]]
                if st.dep is not None and signal[where[r, st.dep.tb]] < st.dep.step:
                    break
                info = OPS[st.op]
                rc, sc = (tb.recv, r, tb.channel), (r, tb.send, tb.channel)
                need = -(-st.count // allowed) * model.per_piece - moved[g] if (info.sends or info.receives) else 0
                k = need
                if info.receives:
                    k = min(k, filled.get(rc, 0))
                if info.sends:
                    k = min(k, model.capacity - filled.get(sc, 0))
                if k > 0:
                    moved[g] += k
                    if info.receives:
                        filled[rc] -= k
                    if info.sends:
                        filled[sc] = filled.get(sc, 0) + k
                if k < need:
                    progress = progress or k > 0
                    break
                moved[g] = 0
                if st.has_dep:
                    signal[g] = pc[g]
                pc[g] += 1
                progress = True
    return pc, {f: n for f, n in filled.items() if n}


def test_the_run_moves_what_the_slice_by_slice_run_moves(dgx1v_auto):
    """The run moves slices through chains of parked senders and receivers at once
    (:meth:`PieceSchedule.run`): it stops where the plain sweep stops, on every corpus
    algorithm (rings among them) and synthesized tree programs full of fused relays, for
    every piece model and several counts."""
    corpus = list(_corpus()) + [(f"dgx1v {c}", dgx1v_auto(c)) for c in ("allgather", "allreduce")]
    for name, algo in corpus:
        for model in (SIMPLE_PIECES, LL_PIECES, PieceModel("one slice", 1, 1), PieceModel("odd", 3, 2)):
            for allowed in (1, 3, MAX_ALLOWED_COUNT):
                schedule = PieceSchedule(algo)
                pc, _, filled = schedule.run(model, allowed)
                left = {tuple(schedule.fifo_ends[f][:3]): n for f, n in enumerate(filled) if n}
                assert (pc, left) == _slice_by_slice(algo, model, allowed), (name, model.protocol, allowed)


def test_a_passed_algorithm_object_is_not_run_again_within_the_block(monkeypatch):
    """Inside ``remembering_passes`` the algorithm object found free of deadlock is
    answered without rebuilding its schedule; one that deadlocks is checked each time."""
    import arborcc.verify.pieces as pieces

    ok, bad = exchange(2), exchange(3)
    with pieces.remembering_passes():
        note = check_pieces(ok)[1]
        assert check_pieces(bad)[0]
        monkeypatch.setattr(pieces, "PieceSchedule", None)  # building one would fail now
        assert check_pieces(ok) == ([], note)
        with pytest.raises(TypeError):
            check_pieces(bad)
    with pytest.raises(TypeError):
        check_pieces(ok)  # outside the block nothing is remembered
