"""Deadlocks, FIFO slots, races, and the other run-time findings, on hand-made programs."""

import pytest

from arborcc.ir.model import Algorithm, Buffer, Dependency, Op, RankProgram, Step, ThreadBlock
from arborcc.verify import verify_algorithm

I, O, S = Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH


def send(buf=I, off=0, cnt=1, dep=None, has_dep=False):
    return Step(Op.SEND, buf, off, None, -1, cnt, dep, has_dep)


def recv(buf=O, off=0, cnt=1, dep=None, has_dep=False):
    return Step(Op.RECV, None, -1, buf, off, cnt, dep, has_dep)


def custom(n, tbs_per_rank, chunks=4, scratch=0):
    """A 'custom' algorithm (no postcondition) from {rank: [ThreadBlock]}."""
    return Algorithm("t", "custom", n, chunks,
                     [RankProgram(r, chunks, chunks, scratch, tbs_per_rank.get(r, [])) for r in range(n)])


def kinds(algo, **kw):
    report = verify_algorithm(algo, **kw)
    return [v.kind for v in report.violations], report


# ---------------------------------------------------------------- deadlock
def test_two_thread_blocks_receiving_before_sending_deadlock():
    algo = custom(2, {0: [ThreadBlock(0, send=1, recv=1, steps=[recv(), send()])],
                      1: [ThreadBlock(0, send=0, recv=0, steps=[recv(), send()])]})
    found, report = kinds(algo)
    assert found[0] == "deadlock"
    msg = report.violations[0].message
    assert "cycle" in msg and "rank 0 tb 0 step 0" in msg and "rank 1 tb 0 step 0" in msg
    assert not report.postcondition_checked


def test_sending_first_on_one_side_breaks_the_cycle():
    algo = custom(2, {0: [ThreadBlock(0, send=1, recv=1, steps=[send(), recv()])],
                      1: [ThreadBlock(0, send=0, recv=0, steps=[recv(), send()])]})
    found, _ = kinds(algo)
    assert found == []


@pytest.mark.parametrize("slots,ok", [(8, False), (9, True), (20, True)])
def test_fifo_slots_bound_outstanding_sends(slots, ok):
    # both sides send 9 messages before receiving: needs 9 slots per connection (the
    # message-level run alone: the runtimes' pieces need more, tests/verify/test_verify_pieces.py)
    n_msgs = 9
    prog = [send(I, j % 4) for j in range(n_msgs)] + [recv(O, j % 4) for j in range(n_msgs)]
    algo = custom(2, {0: [ThreadBlock(0, send=1, recv=1, steps=list(prog))],
                      1: [ThreadBlock(0, send=0, recv=0, steps=list(prog))]})
    found, report = kinds(algo, slots=slots, check_races=False, pieces=False)
    assert report.ok == ok
    if not ok:
        assert found[0] == "deadlock" and "slots full" in report.violations[0].message


def test_waiting_on_a_dependency_that_is_never_signalled_deadlocks():
    # tb 1 waits for step 0 of tb 0, which never signals and has no later signalling step
    algo = custom(1, {0: [ThreadBlock(0, steps=[Step(Op.COPY, I, 0, O, 0)]),
                          ThreadBlock(1, steps=[Step(Op.COPY, I, 1, O, 1, dep=Dependency(0, 0))])]})
    found, report = kinds(algo)
    assert "dependency" in found and "deadlock" in found
    assert any("waits for step 0 of tb 0" in v.message for v in report.violations)


def test_a_dependency_on_a_nop_never_signals():
    algo = custom(1, {0: [ThreadBlock(0, steps=[Step(Op.NOP, None, -1, None, -1, has_dep=True)]),
                          ThreadBlock(1, steps=[Step(Op.COPY, I, 1, O, 1, dep=Dependency(0, 0))])]})
    found, report = kinds(algo)
    assert "dependency" in found and "deadlock" in found
    assert any("nop" in v.message for v in report.violations if v.kind == "dependency")


def test_a_later_signal_releases_a_wait_on_an_earlier_step():
    # the runtime compares the semaphore with >=: step 1 signalling releases a wait on step 0
    algo = custom(1, {0: [ThreadBlock(0, steps=[Step(Op.COPY, I, 0, O, 0), Step(Op.COPY, I, 1, O, 1, has_dep=True)]),
                          ThreadBlock(1, steps=[Step(Op.COPY, O, 0, S, 0, dep=Dependency(0, 0))])]}, scratch=1)
    found, _ = kinds(algo)
    assert found == ["dependency"]  # still flagged structurally (hasdep=0 on the target), but no deadlock


# ---------------------------------------------------------------- races
def test_two_receives_into_one_chunk_race():
    algo = custom(3, {0: [ThreadBlock(0, recv=1, steps=[recv(O, 2)]), ThreadBlock(1, recv=2, channel=0, steps=[recv(O, 2)])],
                      1: [ThreadBlock(0, send=0, steps=[send()])],
                      2: [ThreadBlock(0, send=0, steps=[send()])]})
    found, report = kinds(algo)
    assert found == ["race"]
    v = report.violations[0]
    assert v.rank == 0 and "output chunk 2" in v.message


def test_disjoint_chunks_do_not_race():
    algo = custom(3, {0: [ThreadBlock(0, recv=1, steps=[recv(O, 2)]), ThreadBlock(1, recv=2, steps=[recv(O, 3)])],
                      1: [ThreadBlock(0, send=0, steps=[send()])],
                      2: [ThreadBlock(0, send=0, steps=[send()])]})
    assert kinds(algo)[0] == []


def test_overlapping_multi_chunk_ranges_race():
    algo = custom(1, {0: [ThreadBlock(0, steps=[Step(Op.COPY, I, 0, O, 0, count=3)]),
                          ThreadBlock(1, steps=[Step(Op.COPY, I, 0, O, 2, count=2)])]})
    assert kinds(algo)[0] == ["race"]


def test_read_read_is_not_a_race():
    algo = custom(1, {0: [ThreadBlock(0, steps=[Step(Op.COPY, I, 0, O, 0)]),
                          ThreadBlock(1, steps=[Step(Op.COPY, I, 0, O, 1)])]})
    assert kinds(algo)[0] == []


def _round_trip(causal: bool):
    """Rank 0: tb 0 sends output chunk 0 to rank 1, tb 1 later receives into output chunk 0
    from rank 1. If rank 1 forwards what it received (one thread block, program order) the
    overwrite is causally after the read; with two unrelated thread blocks it is not."""
    rank0 = [ThreadBlock(0, steps=[Step(Op.COPY, I, 0, O, 0, has_dep=True)]),
             ThreadBlock(1, send=1, steps=[send(O, 0, dep=Dependency(0, 0))]),
             ThreadBlock(2, recv=1, steps=[recv(O, 0)])]
    if causal:
        rank1 = [ThreadBlock(0, send=0, recv=0, steps=[recv(O, 0), send(I, 1)])]
    else:
        rank1 = [ThreadBlock(0, recv=0, steps=[recv(O, 0)]), ThreadBlock(1, send=0, steps=[send(I, 1)])]
    return custom(2, {0: rank0, 1: rank1})


def test_order_through_another_rank_counts_when_causal():
    assert kinds(_round_trip(causal=True))[0] == []


def test_no_order_through_another_rank_without_causality():
    found, report = kinds(_round_trip(causal=False))
    assert "race" in found
    v = next(v for v in report.violations if v.kind == "race")
    assert (v.rank, v.tb) == (0, 2)


def test_order_through_a_dependency_chain_across_thread_blocks():
    # tb0 writes, tb1 waits for tb0 and signals, tb2 waits for tb1 then overwrites: ordered
    algo = custom(1, {0: [ThreadBlock(0, steps=[Step(Op.COPY, I, 0, O, 0, has_dep=True)]),
                          ThreadBlock(1, steps=[Step(Op.COPY, I, 1, O, 1, dep=Dependency(0, 0), has_dep=True)]),
                          ThreadBlock(2, steps=[Step(Op.COPY, I, 2, O, 0, dep=Dependency(1, 0))])]})
    assert kinds(algo)[0] == []


# ---------------------------------------------------------------- other run-time findings
def test_count_mismatch_between_send_and_receive():
    algo = custom(2, {0: [ThreadBlock(0, send=1, steps=[send(I, 0, cnt=2)])],
                      1: [ThreadBlock(0, recv=0, steps=[recv(O, 0, cnt=1)])]})
    found, report = kinds(algo)
    assert found == ["mismatch"]
    assert "sent 2" in report.violations[0].message


def test_the_run_goes_on_after_a_count_mismatch():
    """The schedule does not depend on the values: after a mismatched receive the run
    still finds what later steps do, and runs every step."""
    algo = custom(2, {0: [ThreadBlock(0, send=1, steps=[send(I, 0, cnt=2), send(I, 2)])],
                      1: [ThreadBlock(0, recv=0, steps=[recv(O, 0, cnt=1), recv(O, 1), Step(Op.COPY, S, 0, O, 2)])]},
                  scratch=1)
    found, report = kinds(algo)
    assert found == ["mismatch", "uninitialized"]
    assert "ran 5 steps" in " ".join(report.notes)


def test_data_sent_but_never_received():
    algo = custom(2, {0: [ThreadBlock(0, send=1, steps=[send(), send(I, 1)])],
                      1: [ThreadBlock(0, recv=0, steps=[recv()])]})
    found, _ = kinds(algo)
    assert "connection" in found and "unmatched" in found


def test_reading_uninitialized_scratch():
    algo = custom(1, {0: [ThreadBlock(0, steps=[Step(Op.COPY, S, 0, O, 0)])]}, scratch=1)
    found, report = kinds(algo)
    assert found == ["uninitialized"]
    assert "scratch chunk 0" in report.violations[0].message


def test_reducing_into_uninitialized_output():
    algo = custom(1, {0: [ThreadBlock(0, steps=[Step(Op.REDUCE, I, 0, O, 0)])]})
    assert kinds(algo)[0] == ["uninitialized"]


# ---------------------------------------------------------------- structure and layout
@pytest.mark.parametrize("tbs,kind,needle", [
    ({0: [ThreadBlock(0, send=0, steps=[send()])]}, "structure", "rank itself"),
    ({0: [ThreadBlock(0, send=5, steps=[send()])]}, "structure", "not a rank"),
    ({0: [ThreadBlock(0, steps=[send()])]}, "structure", "no send peer"),
    ({0: [ThreadBlock(0, steps=[recv()])]}, "structure", "no receive peer"),
    ({0: [ThreadBlock(0, steps=[Step(Op.COPY, I, 3, O, 0, count=2)])]}, "bounds", "outside"),
    ({0: [ThreadBlock(0, steps=[Step(Op.COPY, None, -1, O, 0)])]}, "structure", "needs a source"),
    ({0: [ThreadBlock(0, steps=[Step(Op.COPY, I, 0, O, 0, count=0)])]}, "structure", "at least 1"),
    ({0: [ThreadBlock(0, steps=[Step(Op.COPY, I, 0, O, 0, dep=Dependency(7, 0))])]}, "dependency", "does not have"),
    ({0: [ThreadBlock(0, steps=[Step(Op.COPY, I, 0, O, 0)]),
          ThreadBlock(1, steps=[Step(Op.COPY, I, 1, O, 1, dep=Dependency(0, 4))])]}, "dependency", "has 1 steps"),
    ({0: [ThreadBlock(0, steps=[]), ThreadBlock(0, steps=[])]}, "structure", "used twice"),
    ({0: [ThreadBlock(0, send=1, steps=[send()]), ThreadBlock(1, send=1, steps=[send(I, 1)])],
      1: [ThreadBlock(0, recv=0, steps=[recv(), recv(O, 1)])]}, "connection", "sending thread blocks"),
    ({0: [ThreadBlock(0, steps=[Step(Op.COPY, O, 0, O, 1, count=2)])]}, "structure", "overlap"),
])
def test_structural_violations(tbs, kind, needle):
    found, report = kinds(custom(2, tbs))
    hits = [v for v in report.violations if v.kind == kind and needle in v.message]
    assert hits, [str(v) for v in report.violations]


def test_fatal_structure_skips_execution():
    found, report = kinds(custom(1, {0: [ThreadBlock(0, steps=[send()])]}))
    assert found == ["structure"]
    assert any("skipped" in n for n in report.notes)


def test_rank_list_must_match_rank_count():
    algo = custom(2, {})
    algo.ranks.pop()
    found, _ = kinds(algo)
    assert found == ["structure"]


def test_layout_of_the_collective_is_checked():
    algo = custom(2, {})
    algo.collective = "allgather"  # needs input K/n = 2 chunks, output 4
    found, report = kinds(algo)
    assert found.count("layout") == 2
    assert "declares 4 input chunks" in report.violations[0].message


def test_allgather_chunks_must_divide_by_ranks():
    algo = custom(3, {}, chunks=4)
    algo.collective = "alltoall"
    found, _ = kinds(algo)
    assert found == ["layout"]


def test_neither_in_place_nor_out_of_place_is_flagged():
    algo = custom(1, {})
    algo.outofplace = False
    found, _ = kinds(algo)
    assert found == ["layout"]


def test_unwaited_hasdep_is_only_a_note():
    algo = custom(1, {0: [ThreadBlock(0, steps=[Step(Op.COPY, I, 0, O, 0, has_dep=True)])]})
    found, report = kinds(algo)
    assert found == [] and any("hasdep" in n for n in report.notes)
