"""The verifier's compiled passes (arborcc.verify.native) against plain references.

The symbolic run (verify/proof.py, csrc/symbolic.cpp) keeps memory in segments and
values in runs; on correct programs, their mutations (small and big chunk counts, ranges
that overlap in part) and synthesized ones, in both kinds of call, with several FIFO
depths and with and without the race check, its findings, worded (verify/findings.py),
are what one value per chunk slot gives over the run's order (:func:`reference_log`, a
reference kept here only), and a layout is proved only when there are none (and on the
correct programs it is made for, whenever there are none). The structure rules
(csrc/structure.cpp): clean exactly when the Python rules of ``check_structure`` report
nothing, with the same notes. (The pieces run is compared with a slice-by-slice sweep in
test_verify_pieces.py.)"""

import copy
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support.algorithms import (allpairs_allreduce, chain_broadcast, direct_alltoall, ring_allgather, ring_allreduce,
                                ring_allreduce_split, ring_reducescatter, tree_broadcast)
from support.msccl_samples import MSCCL_SAMPLES
from arborcc.ir.aliasing import Mode
from arborcc.ir.collectives import has_signature
from arborcc.ir.model import Algorithm, Buffer, Dependency, Op, RankProgram, Step, ThreadBlock
from arborcc.ir.report import ViolationLog
from arborcc.verify.layout import check_layout, memory_map
from arborcc.verify.postconditions import expected_runs, log_wrong_chunk
from arborcc.verify.proof import symbolic_run
from arborcc.verify.semantics import OPS
from arborcc.verify.structure import check_structure
import arborcc.verify.native as native
from arborcc.verify.encoding import encoded_program
from arborcc.verify.findings import StepNames, report_findings
from arborcc.verify.values import Mixed


def private(algo):
    algo = copy.deepcopy(algo)
    for prog in algo.ranks:
        for tb in prog.threadblocks:
            tb.steps = [copy.copy(s) for s in tb.steps]
    return algo


def scaled(algo, f):
    """``algo`` with every chunk made ``f`` chunks: each step moves ``f`` times as many."""
    algo = private(algo)
    algo.chunks_per_loop *= f
    for prog in algo.ranks:
        prog.input_chunks *= f
        prog.output_chunks *= f
        prog.scratch_chunks *= f
        for tb in prog.threadblocks:
            for s in tb.steps:
                s.count *= f
                s.src_off = s.src_off * f if s.src_off >= 0 else s.src_off
                s.dst_off = s.dst_off * f if s.dst_off >= 0 else s.dst_off
    return algo


def two_rank_allreduce(count):
    """Each rank sends its whole input in one step and reduces what it receives into its
    output in another: ``count`` chunk slots per step."""
    return Algorithm("ar2", "allreduce", 2, count, [
        RankProgram(r, count, count, 0, [
            ThreadBlock(0, send=1 - r, steps=[Step(Op.SEND, Buffer.INPUT, 0, None, -1, count)]),
            ThreadBlock(1, recv=1 - r, steps=[Step(Op.RECV_REDUCE_COPY, Buffer.INPUT, 0, Buffer.OUTPUT, 0, count)])])
        for r in (0, 1)])


BUILDERS = [lambda: ring_allreduce(4), lambda: ring_allreduce(3, channels=2), lambda: ring_allgather(5, channels=2),
            lambda: ring_reducescatter(4), lambda: tree_broadcast(7, chunks=3, root=2), lambda: chain_broadcast(4),
            lambda: direct_alltoall(4, per_peer=2), lambda: allpairs_allreduce(4), lambda: ring_allreduce_split(4),
            # big chunks: more than 16 chunk slots per step
            lambda: two_rank_allreduce(600), lambda: scaled(ring_allreduce(4), 37),
            lambda: scaled(direct_alltoall(3, per_peer=2), 20), lambda: scaled(allpairs_allreduce(3), 25)]


def writer(gid):
    return f"step {gid}"


def slot_sum(a, b):
    """The multiset sum of two slot values: None (uninitialized) or (((chunk, ranks), ...), repeated)."""
    if a is None or b is None:
        return None
    parts, dup = dict(a[0]), a[1] or b[1]
    for c, m in b[0]:
        dup = dup or bool(parts.get(c, 0) & m)
        parts[c] = parts.get(c, 0) | m
    return tuple(sorted(parts.items())), dup


def worded_value(v):
    """A slot value as the findings word it (arborcc.verify.values)."""
    if v is None:
        return None
    parts, dup = v
    return parts[0] if not dup and len(parts) == 1 else Mixed(dict(parts), dup)


def reference_log(algo, run, mm, slots, check_races):
    """The violations of the compiled ``run``'s order on layout ``mm`` with one value, last
    writer and readers per chunk slot (the model of docs/ir.md section 5), worded as the
    verifier words them; races are settled by the compiled ``ordered_through_ranks``."""
    names = StepNames(algo)
    log = ViolationLog()
    steps = [s for tb in names.tb_obj for s in tb.steps]
    value, last, readers = [None] * mm.total, [-1] * mm.total, [{} for _ in range(mm.total)]
    for r in range(algo.num_ranks):
        first, end = mm.data(r)
        if mm.layouts[r].data_defined:
            for a in range(first, end):
                value[a] = (((a - first, 1 << r),), False)
    pairs, seen = [], set()

    def conflict(x, y, a, x_writes, y_writes, received):
        if names.gid_tb[x] != names.gid_tb[y] and (x, y, received) not in seen:
            seen.add((x, y, received))
            pairs.append((x, y, received, a, x_writes, y_writes))

    def read(a, cnt, gid, what):
        for s in range(a, a + cnt):
            if check_races:
                if last[s] >= 0:
                    conflict(last[s], gid, s, True, False, False)
                readers[s][names.gid_tb[gid]] = gid
        got = value[a:a + cnt]
        if None in got:
            names.uninitialized(log, mm.bases, gid, a + got.index(None), what)
        return got

    def write(a, vals, gid, received):
        for s, v in zip(range(a, a + len(vals)), vals):
            if check_races:
                if last[s] >= 0:
                    conflict(last[s], gid, s, True, True, received)
                for x in readers[s].values():
                    conflict(x, gid, s, False, True, received)
                readers[s] = {}
            value[s], last[s] = v, gid

    sent, mismatched = {}, set(run.mismatches)
    for gid in run.order:
        step, info = steps[gid], OPS[steps[gid].op]
        if step.op is Op.NOP:
            continue
        base, cnt = mm.bases[names.where(gid)[0]], step.count
        if info.receives:
            got = (sent.pop(run.recv_src[gid]) + [None] * cnt)[:cnt]
            if gid in mismatched:
                names.mismatch(log, gid, run.recv_src[gid])
        src = read(base[step.src_buf] + step.src_off, cnt, gid, "source") if info.reads_src else None
        val = got if info.receives else src
        if info.receives and info.reads_src:
            val = [slot_sum(x, y) for x, y in zip(src, got)]
        if info.writes_dst:
            da = base[step.dst_buf] + step.dst_off
            if info.reads_dst:
                val = [slot_sum(x, y) for x, y in zip(read(da, cnt, gid, "destination"), src)]
            write(da, val, gid, info.receives)
        if info.sends:
            sent[gid] = val
    if pairs:
        ordered = native.ordered_through_ranks(encoded_program(algo), run, [p[0] for p in pairs],
                                               [p[1] for p in pairs], [p[2] for p in pairs])
        reported = set()
        for (x, y, _, a, x_writes, y_writes), ok in zip(pairs, ordered):
            if not ok and (x, y) not in reported:
                reported.add((x, y))
                names.race(log, mm.bases, y, x, a, y_writes, x_writes)
    names.schedule(log, run, slots)
    n, k = algo.num_ranks, algo.chunks_per_loop
    if run.blocked or not has_signature(algo.collective, n, k):
        return log
    for prog in names.progs:
        r, lay = prog.rank, mm.layouts[prog.rank]
        if lay.result_checked:
            out = mm.bases[r][Buffer.OUTPUT]
            for first, length, chunk, mask in expected_runs(algo.collective, n, k, r, algo.effective_root,
                                                            lay.received_chunks):
                for j in range(length):
                    v = value[out + first + j]
                    if v != (((chunk + j, mask),), False):
                        log_wrong_chunk(log, algo.collective, r, first + j, chunk + j, mask, worded_value(v), writer,
                                        last[out + first + j])
    return log


def runnable_modes(algo):
    return [m for m in Mode if not check_layout(algo, m)[0]]


def compare(algo, slots=8, check_races=True):
    """Assert that the compiled run's findings, worded, are the report of one value per
    chunk slot (:func:`reference_log`), and that it proves a layout only when that report
    is empty; the proofs and clean runs."""
    if check_structure(algo).fatal:
        return [], []
    mms = [memory_map(algo, m) for m in runnable_modes(algo)]
    if not mms:
        return [], []
    run, proved, found = symbolic_run(algo, mms, slots, check_races)
    reference = [reference_log(algo, run, mm, slots, check_races) for mm in mms]
    names = StepNames(algo)
    for mm, layout, log in zip(mms, found, reference):
        compiled = ViolationLog()
        report_findings(names, run, layout, mm, compiled, slots, writer)
        assert (compiled.items, compiled.counts) == (log.items, log.counts), algo.name
    clean = [not len(log) for log in reference]
    for p, c in zip(proved, clean):
        assert not p or c, f"{algo.name}: proved, but one value per slot finds violations"
    if any(proved):
        assert run.steps_run == algo.num_steps
    return proved, clean


def mutate(algo, rng: random.Random):
    """One random small corruption of a private copy of ``algo``."""
    algo = private(algo)
    tbs = [tb for prog in algo.ranks for tb in prog.threadblocks if tb.steps]
    tb = rng.choice(tbs)
    i = rng.randrange(len(tb.steps))
    st_ = tb.steps[i]
    kind = rng.randrange(11)
    part = max(1, st_.count // rng.choice((2, 3)))  # ranges of many chunks move by a part of them
    if kind == 0:
        del tb.steps[i]
    elif kind == 1:
        st_.src_off = max(0, st_.src_off + rng.choice((-1, 1, part)))
    elif kind == 2:
        st_.dst_off = max(0, st_.dst_off + rng.choice((-1, 1, -part)))
    elif kind == 8:
        tb.steps.insert(i, copy.copy(st_))
    elif kind == 9:
        st_.count = max(1, rng.choice((st_.count - 1, st_.count + 1, part)))
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
    """Each is correct and proved in every call its buffers fit, the split ring too, whose
    reduction is ordered only through other ranks (race candidates the compiled run
    resolves); the two-rank all-reduce only out of place (in place its send and its
    reduction touch the same chunks unordered)."""
    algo = build()
    proved, clean = compare(algo)
    if algo.name == "ar2":
        proved, clean = proved[:1], clean[:1]
    assert clean and all(clean)
    assert all(proved)


def test_public_samples_agree():
    from arborcc.ir.load import load_algorithm

    for path in MSCCL_SAMPLES:
        compare(load_algorithm(path))


def test_synthesized_programs_are_proved(dgx1v_auto):
    """The programs synthesized for DGX-1V (auto) the proof exists for: both calls proved."""
    for coll in ("allgather", "allreduce", "reducescatter", "broadcast"):
        algo = dgx1v_auto(coll)
        proved, clean = compare(algo)
        assert proved == clean and any(proved), coll


@settings(max_examples=150, deadline=None)
@given(st.integers(0, len(BUILDERS) - 1), st.integers(0, 2**32 - 1), st.integers(1, 3),
       st.sampled_from([1, 2, 8]), st.booleans())
def test_mutated_programs_are_proved_only_when_one_value_per_slot_finds_nothing(which, seed, rounds, slots, races):
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


def test_big_chunk_mutations_are_compared():
    """The corpus has big-chunk layouts (many slots per step, followed in segments) both
    proved and refuted, and ranges that overlap others in part."""
    rng = random.Random(11)
    proved = refuted = 0
    for k in range(80):
        p, c = compare(mutate(BUILDERS[9 + k % 4](), rng), slots=rng.choice((1, 2, 8)))
        proved += sum(p)
        refuted += sum(not x for x in c)
    assert proved >= 5 and refuted >= 20


def test_values_of_more_ranks_than_a_64_bit_mask_are_compared():
    """Rank sets of 67 ranks (two 64-bit words): proved when correct; a lost reduction is
    reported, in the reference's words, with the rank past 64 it misses."""
    algo = ring_allreduce(67)
    mm = memory_map(algo, Mode.OUTOFPLACE)
    assert symbolic_run(algo, [mm], 8, True)[1] == [True]
    algo = private(algo)
    tb = algo.ranks[66].threadblocks[0]
    i = next(i for i, s in enumerate(tb.steps) if s.op is Op.RECV_REDUCE_COPY_SEND)
    tb.steps[i].op = Op.RECV_COPY_SEND  # drops rank 66's contribution to one chunk
    run, proved, found = symbolic_run(algo, [mm], 8, False)
    compiled = ViolationLog()
    report_findings(StepNames(algo), run, found[0], mm, compiled, 8, writer)
    reference = reference_log(algo, run, mm, 8, False)
    assert (compiled.items, compiled.counts) == (reference.items, reference.counts) and proved == [False]
    assert any("misses chunk 0 of ranks {66}" in v.message for v in compiled.items)


def test_a_step_outside_its_buffer_is_worded_as_the_structure_rules_word_it():
    """The compiled run stops following a layout at a step whose range lies outside its
    buffer (the structure rules refuse such programs before it runs) and reports it in
    the structure rules' words."""
    algo = private(ring_allreduce(3))
    step = next(s for tb in algo.ranks[1].threadblocks for s in tb.steps if s.op is Op.SEND)
    step.src_off = algo.ranks[1].input_chunks  # one past the end
    structure = check_structure(algo, compiled=False)
    bounds = [v for v in structure.violations if v.kind == "bounds"]
    assert structure.fatal and len(bounds) == 1
    mm = memory_map(algo, Mode.OUTOFPLACE)
    run, proved, found = symbolic_run(algo, [mm], 8, True)
    assert proved == [False]
    log = ViolationLog()
    report_findings(StepNames(algo), run, found[0], mm, log, 8, writer)
    assert log.items[0] == bounds[0]
    assert not [v for v in log.items if v.kind in ("uninitialized", "race", "postcondition")]


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


def test_numbers_of_any_size_are_verified_or_refused():
    """Thread block ids and channels may be any integers; a count or offset beyond 32 bits
    lies outside every buffer the structure rules accept, and a buffer of more chunks than
    32 bits hold, which the compiled run cannot follow, is said to be unverified."""
    from arborcc.verify import verify_algorithm
    from arborcc.verify.checker import UNFOLLOWED

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
    roomy = private(algo)
    roomy.ranks[0].scratch_chunks = 2**40
    assert encoded_program(roomy).clamped and not check_structure(roomy).fatal
    report = verify_algorithm(roomy)
    assert not report.ok and [v.message for v in report.violations] == [f"out-of-place call: {UNFOLLOWED}"]
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
