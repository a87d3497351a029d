"""The verifier's compiled passes (arborcc.verify.native) against the Python passes they
stand in for.

The symbolic run (verify/proof.py, csrc/symbolic.cpp): on correct programs, their
mutations and synthesized ones, in both kinds of call, with several FIFO depths and with
and without the race check, its findings, formatted (verify/findings.py), are the
violations the values followed over the run's order in Python (``simulate_layouts``,
the path of layouts the compiled run does not follow: big buffers, numbers beyond 32
bits) and ``check_postcondition`` report, and a layout is proved only when there are
none (and on the correct programs it is made for, whenever there are none). The structure rules (csrc/structure.cpp): clean exactly when
the Python rules of ``check_structure`` report nothing, with the same notes. (The
pieces run is compared with a slice-by-slice sweep in test_verify_pieces.py.)"""

import copy
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support.algorithms import (allpairs_allreduce, chain_broadcast, direct_alltoall, ring_allgather, ring_allreduce,
                                ring_allreduce_split, ring_reducescatter, tree_broadcast)
from support.msccl_samples import MSCCL_SAMPLES
from arborcc.ir.aliasing import Mode
from arborcc.ir.model import Buffer, Dependency, Op
from arborcc.ir.report import ViolationLog
from arborcc.verify.layout import check_layout, memory_map
from arborcc.verify.postconditions import check_postcondition
from arborcc.verify.proof import symbolic_run
from arborcc.verify.structure import check_structure
import arborcc.verify.native as native
from arborcc.verify.encoding import encoded_program
from arborcc.verify.findings import StepNames, report_findings
from arborcc.verify.symbolic import simulate_layouts

BUILDERS = [lambda: ring_allreduce(4), lambda: ring_allreduce(3, channels=2), lambda: ring_allgather(5, channels=2),
            lambda: ring_reducescatter(4), lambda: tree_broadcast(7, chunks=3, root=2), lambda: chain_broadcast(4),
            lambda: direct_alltoall(4, per_peer=2), lambda: allpairs_allreduce(4), lambda: ring_allreduce_split(4)]


def writer(gid):
    return f"step {gid}"


def python_logs(algo, run, mms, slots, check_races):
    """Per layout: what the values followed in Python (and the postcondition) report."""
    structure = check_structure(algo, compiled=False)
    logs = [ViolationLog() for _ in mms]
    sims = simulate_layouts(algo, run, mms, structure.cuts, logs, slots=slots, check_races=check_races)
    for mm, sim, log in zip(mms, sims, logs):
        if sim.finished:
            check_postcondition(algo, mm, sim.memory, writer, log)
    return logs


def runnable_modes(algo):
    return [m for m in Mode if not check_layout(algo, m)[0]]


def compare(algo, slots=8, check_races=True):
    """Assert that the compiled run's findings, formatted, are the report the values
    followed in Python give (the path of layouts the compiled run does not follow), and
    that it proves a layout only when that report is empty; the proofs and clean runs."""
    if check_structure(algo).fatal:
        return [], []
    mms = [memory_map(algo, m) for m in runnable_modes(algo)]
    if not mms:
        return [], []
    run, proved, found = symbolic_run(algo, mms, slots, check_races)
    python = python_logs(algo, run, mms, slots, check_races)
    names = StepNames(algo)
    for mm, layout, log in zip(mms, found, python):
        if layout is not None:
            compiled = ViolationLog()
            report_findings(names, run, layout, mm, compiled, slots, writer)
            assert compiled.items == log.items, algo.name
    clean = [not len(log) for log in python]
    for p, c in zip(proved, clean):
        assert not p or c, f"{algo.name}: proved, but the values followed in Python report violations"
    if any(proved):
        assert run.steps_run == algo.num_steps
    return proved, clean


def private(algo):
    algo = copy.deepcopy(algo)
    for prog in algo.ranks:
        for tb in prog.threadblocks:
            tb.steps = [copy.copy(s) for s in tb.steps]
    return algo


def mutate(algo, rng: random.Random):
    """One random small corruption of a private copy of ``algo``."""
    algo = private(algo)
    tbs = [tb for prog in algo.ranks for tb in prog.threadblocks if tb.steps]
    tb = rng.choice(tbs)
    i = rng.randrange(len(tb.steps))
    st_ = tb.steps[i]
    kind = rng.randrange(8)
    if kind == 0:
        del tb.steps[i]
    elif kind == 1:
        st_.src_off = max(0, st_.src_off + rng.choice((-1, 1)))
    elif kind == 2:
        st_.dst_off = max(0, st_.dst_off + rng.choice((-1, 1)))
    elif kind == 3:
        st_.dep = None
    elif kind == 4 and i + 1 < len(tb.steps):
        tb.steps[i], tb.steps[i + 1] = tb.steps[i + 1], tb.steps[i]
    elif kind == 5:
        same = [op for op in Op if op.sends == st_.op.sends and op.receives == st_.op.receives and op is not Op.NOP]
        st_.op = rng.choice(same)
        st_.src_buf = st_.src_buf or Buffer.INPUT
        st_.dst_buf = st_.dst_buf or Buffer.OUTPUT
    elif kind == 6:
        st_.src_buf, st_.dst_buf = rng.choice(list(Buffer)), rng.choice(list(Buffer))
    else:
        others = [t for t in tbs if t is not tb and t.steps]
        if others:
            other = rng.choice(others)
            same_rank = [p for p in algo.ranks if tb in p.threadblocks and other in p.threadblocks]
            if same_rank:
                st_.dep = Dependency(other.id, rng.randrange(len(other.steps)))
                other.steps[st_.dep.step].has_dep = True
    return algo


@pytest.mark.parametrize("build", BUILDERS)
def test_correct_programs_are_proved(build):
    """Each is correct and proved, the split ring too, whose reduction is ordered only
    through other ranks (race candidates the compiled run resolves)."""
    proved, clean = compare(build())
    assert clean and all(clean)
    assert all(proved)


def test_public_samples_agree():
    from arborcc.ir.load import load_algorithm

    for path in MSCCL_SAMPLES:
        compare(load_algorithm(path))


def test_synthesized_programs_are_proved():
    """The synthesized tree programs the proof exists for: both calls proved."""
    from arborcc.synth import synthesize
    from arborcc.topology.machines import build_machine

    for coll in ("allgather", "allreduce", "reducescatter", "broadcast"):
        algo = synthesize(build_machine("dgx1v"), coll).algorithm
        proved, clean = compare(algo)
        assert proved == clean and any(proved), coll


@settings(max_examples=150, deadline=None)
@given(st.integers(0, len(BUILDERS) - 1), st.integers(0, 2**32 - 1), st.integers(1, 3),
       st.sampled_from([1, 2, 8]), st.booleans())
def test_mutated_programs_are_proved_only_when_the_python_run_finds_nothing(which, seed, rounds, slots, races):
    rng = random.Random(seed)
    algo = BUILDERS[which]()
    for _ in range(rounds):
        algo = mutate(algo, rng)
    compare(algo, slots=slots, check_races=races)


def test_mutations_find_both_verdicts():
    """The mutation corpus holds proved and refuted layouts (the comparison above has
    both sides to compare), and every clean layout is proved."""
    rng = random.Random(7)
    proved = clean = refuted = 0
    for k in range(300):
        p, c = compare(mutate(BUILDERS[k % len(BUILDERS)](), rng))
        proved += sum(p)
        clean += sum(c)
        refuted += sum(not x for x in c)
    assert proved >= 20 and refuted >= 100
    assert proved == clean


def test_layouts_left_to_python_get_the_same_report(monkeypatch):
    """A layout the compiled run does not follow (here: every one, as if all buffers were
    big) is reported in the same words by the values followed in Python."""
    import arborcc.verify.proof as proof
    from arborcc.verify import verify_algorithm

    rng = random.Random(5)
    corpus = [mutate(BUILDERS[k % len(BUILDERS)](), rng) for k in range(150)]
    compiled = [verify_algorithm(algo) for algo in corpus]
    monkeypatch.setattr(proof, "SLOTS_PER_STEP", -(1 << 20))
    python = [verify_algorithm(algo) for algo in corpus]
    assert [(r.ok, r.violations, r.notes) for r in compiled] == [(r.ok, r.violations, r.notes) for r in python]
    assert sum(not r.ok for r in python) >= 50


def structural_mutation(algo, rng: random.Random):
    """One random corruption of the kind the structure rules look for."""
    algo = private(algo)
    prog = rng.choice(algo.ranks)
    tb = rng.choice(prog.threadblocks)
    st_ = rng.choice(tb.steps) if tb.steps else None
    n = algo.num_ranks
    kind = rng.randrange(12)
    if kind == 0:
        tb.send = rng.randrange(-2, n + 1)
    elif kind == 1:
        tb.recv = rng.randrange(-2, n + 1)
    elif kind == 2:
        tb.channel = rng.choice((-1, tb.channel + 1))
    elif kind == 3:
        tb.id = rng.choice((-1, rng.choice(prog.threadblocks).id))
    elif kind == 4 and st_:
        st_.count = rng.choice((0, -1, st_.count + 1, 1000))
    elif kind == 5 and st_:
        st_.src_off = rng.choice((-1, st_.src_off + 1, 1000))
    elif kind == 6 and st_:
        st_.dst_off = rng.choice((-1, st_.dst_off + 1, st_.src_off + 1))
    elif kind == 7 and st_:
        other = rng.choice(prog.threadblocks)
        st_.dep = Dependency(other.id, rng.randrange(-1, len(other.steps) + 2))
    elif kind == 8 and st_:
        st_.has_dep = not st_.has_dep
    elif kind == 9 and st_:
        st_.op = rng.choice(list(Op))
    elif kind == 10:
        setattr(prog, rng.choice(("input_chunks", "output_chunks", "scratch_chunks")), rng.choice((-1, 0, 1)))
    elif st_:
        st_.src_buf, st_.dst_buf = rng.choice((None, *Buffer)), rng.choice((None, *Buffer))
    return algo


@settings(max_examples=200, deadline=None)
@given(st.integers(0, len(BUILDERS) - 1), st.integers(0, 2**32 - 1), st.integers(1, 3))
def test_compiled_structure_rules_are_clean_exactly_when_the_python_rules_find_nothing(which, seed, rounds):
    rng = random.Random(seed)
    algo = BUILDERS[which]()
    for _ in range(rounds):
        algo = structural_mutation(algo, rng)
    python = check_structure(algo, compiled=False)
    compiled = check_structure(algo)
    assert (compiled.violations, compiled.notes, compiled.fatal) == (python.violations, python.notes, python.fatal)


def test_structure_corpus_has_both_answers():
    rng = random.Random(3)
    answers = []
    for k in range(300):
        algo = structural_mutation(BUILDERS[k % len(BUILDERS)](), rng)
        try:
            answers.append(native.check_structure_rules(encoded_program(algo), algo.num_ranks)[0])
        except (KeyError, ValueError):
            pass
    assert answers.count(True) >= 30 and answers.count(False) >= 100


def test_an_algorithm_changed_in_place_is_verified_as_it_is_now():
    """The encoding is remembered within one verify_algorithm call only: a program
    changed in place after a check (even inside ``remembering_passes``, as a strategy
    could) is encoded again."""
    from arborcc.verify import verify_algorithm
    from arborcc.verify.pieces import deadlock_free, remembering_passes

    algo = private(ring_allgather(4))
    with remembering_passes():
        assert deadlock_free(algo) and verify_algorithm(algo).ok
        step = next(st_ for prog in algo.ranks for tb in prog.threadblocks for st_ in tb.steps if st_.op is Op.RECV)
        step.dst_off = (step.dst_off + 1) % algo.ranks[0].output_chunks
        assert not verify_algorithm(algo).ok


def test_numbers_of_any_size_are_verified_as_the_python_passes_do():
    """Thread block ids and channels may be any integers; a count, offset or buffer size
    beyond 32 bits leaves the structure rules and the proof to the Python passes."""
    from arborcc.verify import verify_algorithm

    big = 10**30
    algo = private(ring_allreduce(3))
    for prog in algo.ranks:
        for tb in prog.threadblocks:
            tb.id += big
            tb.channel += big
            for st_ in tb.steps:
                if st_.dep is not None:
                    st_.dep = Dependency(st_.dep.tb + big, st_.dep.step)
    assert encoded_program(algo).clamped is False
    assert verify_algorithm(algo).ok
    compiled, python = check_structure(algo), check_structure(algo, compiled=False)
    assert (compiled.violations, compiled.notes) == (python.violations, python.notes) == ([], [])
    algo.ranks[0].threadblocks[0].steps[0].count = big
    assert encoded_program(algo).clamped
    report = verify_algorithm(algo)
    assert not report.ok and report.violations[0].kind == "bounds"


def test_the_compiled_run_reports_the_findings_of_the_schedule():
    """Deadlock waits, unreceived messages and count mismatches come from the one
    compiled run (the Python side only formats them)."""
    from arborcc.ir.model import Algorithm, RankProgram, Step, ThreadBlock

    def program(steps0, steps1, send0=1, recv0=1, send1=0, recv1=0):
        return Algorithm("t", "custom", 2, 4, [
            RankProgram(0, 4, 4, 0, [ThreadBlock(0, send=send0, recv=recv0, steps=steps0)]),
            RankProgram(1, 4, 4, 0, [ThreadBlock(0, send=send1, recv=recv1, steps=steps1)])])

    def send(cnt=1):
        return Step(Op.SEND, Buffer.INPUT, 0, None, -1, cnt)

    def recv(cnt=1):
        return Step(Op.RECV, None, -1, Buffer.OUTPUT, 0, cnt)

    def run_of(algo, slots=8):
        run, proved, _ = symbolic_run(algo, [memory_map(algo, Mode.OUTOFPLACE)], slots, True)
        assert proved == [False]
        return run

    cycle = run_of(program([recv(), send()], [recv(), send()]))
    assert cycle.blocked == [(0, 0, 1, 1), (1, 0, 1, 0)] and cycle.steps_run == 0  # both wait to receive
    full = run_of(program([send(), send(), recv()], [send(), send(), recv()]), slots=1)
    assert [b[2] for b in full.blocked] == [2, 2]  # both wait to send into a full connection
    left = run_of(program([send(), send()], [recv()], recv0=-1, send1=-1))
    assert left.blocked == [] and left.unreceived == [(0, 1, 1)] and left.order == [0, 1, 2]
    assert left.recv_src == [-1, -1, 0]
    mismatch = run_of(program([send(2)], [recv(1)], recv0=-1, send1=-1))
    assert mismatch.mismatches == [1] and mismatch.steps_run == 2
