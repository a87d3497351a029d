"""Round trip of the synthesis snapshot set (benchmarks/synthesis/xml_snapshot.py: synthesized
algorithms of many topologies, strategies and collectives, and the library at 8 ranks):
each exported as an MSCCL++ plan, checked for deadlock and races in the plan's own
semantics, read back, verified and run on the reference executor with results equal to
numpy; those of :data:`RUNTIME_STEMS` also on the shared-memory runtime, from the plans
they were read back from.

The test takes the set's quick variant but its five largest algorithms (:data:`FULL_ONLY`)
and the algorithms of :data:`SAME_PATHS` (whose round trips run no line the others do
not), and runs the 23 of :data:`ON_RUNTIME` on the shared-memory runtime; ``ARBORCC_MSCCLPP_FULL=1``
takes every algorithm of the full set (515 synthesized cases and the 8 library algorithms:
518 round-trip, the other 5 do not synthesize on their topology) and runs every one that
round-trips on the runtime too (:data:`RUNTIME_BATCHES`: one or two launches per rank
count). The two of :data:`MANY_CHANNELS_BOTH_WAYS` (full set only) read back within the
runtime's 32 channels per pair of ranks and run on it by default too.

Each algorithm is synthesized and round-tripped once: the round-trip test leaves the
algorithms it read back in a folder the session's workers share (:func:`read_back_folder`),
the runtime test runs them from there (and makes any that is missing itself).
"""

from __future__ import annotations

import importlib.util
import json
import os
import pickle
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

import pytest

from arborcc.errors import SynthesisError
from arborcc.ir.aliasing import declared_modes
from arborcc.ir.convert import convert_for_mscclpp
from arborcc.ir.mscclpp.deadlock import plan_deadlocks
from arborcc.ir.mscclpp.plan import plan_from_document
from arborcc.ir.mscclpp.races import plan_races
from arborcc.ir.mscclpp.translate import plan_to_algorithm
from arborcc.ir.mscclpp.writer import PROTOCOLS as PLAN_PROTOCOLS, plan_document
from arborcc.verify import verify_algorithm
from support.execution import assert_executes
from support.runtime_execution import RuntimeCase, case_id, runtime_failures

FULL = os.environ.get("ARBORCC_MSCCLPP_FULL") == "1"
SNAPSHOT = Path(__file__).resolve().parents[2] / "benchmarks" / "synthesis" / "xml_snapshot.py"

#: the quick set's algorithms that only ``ARBORCC_MSCCLPP_FULL=1`` takes, skipped before
#: they are synthesized: 4,000-14,000 steps, 5-25 s each (2x8-a100's all-reduce takes 19 s
#: to synthesize alone); every other quick one takes under 3 s
FULL_ONLY = ("2x8-a100-allreduce-trees", "2x8-a100-allgather-trees", "dgx-a100-allgather-trees",
             "dgx-a100-reducescatter-trees", "dgx-a100-allreduce-trees")

#: the snapshot algorithms that run on the shared-memory runtime by default (all of 8 ranks
#: or fewer): a few per collective, of 3, 4 and 8 ranks, synthesized and from the library
ON_RUNTIME = (
    "dgx1v-gpu0-gpu1-gpu2-allreduce-trees", "dgx-a100-allreduce-hierarchical", "dgx-a100-allreduce-double-binary-tree",
    "library-allpairs-allreduce",
    "dgx1v-gpu0-gpu2-gpu3-broadcast-trees", "dgx1p-gpu0-gpu1-gpu2-gpu3-broadcast-trees",
    "dgx1v-gpu0-gpu1-gpu4-reduce-trees", "dgx1p-gpu0-gpu1-gpu2-gpu3-reduce-trees", "dgx-a100-reduce-trees",
    "dgx1p-gpu0-gpu1-gpu4-allgather-trees", "dgx1p-gpu0-gpu1-gpu2-gpu3-allgather-trees", "library-ring-allgather",
    "dgx1v-gpu0-gpu1-gpu4-reducescatter-trees", "dgx1p-gpu0-gpu1-gpu2-gpu3-reducescatter-trees",
    "library-ring-reducescatter",
    "dgx1v-gpu0-gpu1-gpu2-gather-trees", "dgx1p-gpu0-gpu1-gpu2-gpu3-gather-trees", "dgx-a100-gather-trees",
    "dgx1v-gpu0-gpu1-gpu2-scatter-trees", "dgx1p-gpu0-gpu1-gpu2-gpu3-scatter-trees", "dgx-a100-scatter-trees",
    "library-twostep-alltoall",
    "library-alltonext",
)


#: the allocation classes (of DGX-1V and DGX-1P) whose round trip runs by default: those of
#: :data:`ON_RUNTIME`, and one more for each collective that has no class there on one of
#: the two machines (DGX-1P's all-reduce, DGX-1V's all-gather)
ROUND_TRIP_CLASSES = tuple(stem for stem in ON_RUNTIME if stem.startswith(("dgx1v-gpu", "dgx1p-gpu"))) + (
    "dgx1p-gpu0-gpu1-gpu4-allreduce-trees", "dgx1v-gpu0-gpu1-gpu4-allgather-trees")


def same_paths(stem: str) -> bool:
    """Whether ``stem`` is of the quick set's algorithms whose round trip only
    ``ARBORCC_MSCCLPP_FULL=1`` takes: the other 27 of its allocation classes (DGX-1V's and
    DGX-1P's first three, each collective on trees) and the NCCL ring on 2 x DGX A100 (DGX
    A100's stays). Traced line by line (every Python line of ``arborcc.ir`` and
    ``arborcc.verify`` that the plan's writer, reader, deadlock and race checks, translation,
    verification and reference execution run), each runs no line that the algorithms kept do
    not - the 27 none that :data:`ROUND_TRIP_CLASSES` do not - while they took about 25 s of
    the quick set's 53 on a quiet 2-core machine."""
    if stem == "2x8-a100-allreduce-nccl-ring":
        return True
    return stem.startswith(("dgx1v-gpu", "dgx1p-gpu")) and stem not in ROUND_TRIP_CLASSES


@dataclass(frozen=True)
class SnapshotCase:
    """One algorithm of the snapshot set: ``make`` synthesizes (or builds) it; ``topology``
    builds the topology it is synthesized on (None: a library algorithm, quick to build)."""

    stem: str
    make: Callable
    topology: Callable | None = None

    @property
    def num_ranks(self) -> int:
        """Its ranks, without synthesizing it."""
        return self.topology().num_ranks if self.topology else self.make().num_ranks


@lru_cache(maxsize=None)
def snapshot_module():
    spec = importlib.util.spec_from_file_location("xml_snapshot", SNAPSHOT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def snapshot_cases() -> list[SnapshotCase]:
    snap = snapshot_module()
    out = [SnapshotCase(stem, lambda b=build, c=coll, s=strat: _synthesize(b(), c, s), build)
           for stem, build, coll, strat in snap.cases(quick=not FULL)]
    return out + [SnapshotCase(stem, make) for stem, make in snap.library_cases()]


def _synthesize(topology, collective, strategy):
    """As ``arborcc synth --format mscclpp`` synthesizes: the protocol fastest at the size
    among those a plan has (LL and Simple)."""
    from arborcc.synth import synthesize

    return synthesize(topology, collective, strategy, protocols=PLAN_PROTOCOLS).algorithm


CASES = {case.stem: case for case in snapshot_cases()}

#: the algorithms whose round trip the test takes: with ``ARBORCC_MSCCLPP_FULL=1`` every one,
#: else all but those of :func:`same_paths`
ROUND_TRIP_STEMS = tuple(CASES) if FULL else tuple(stem for stem in CASES if not same_paths(stem))

#: the algorithms that also run on the shared-memory runtime: with ``ARBORCC_MSCCLPP_FULL=1``
#: every one, else :data:`ON_RUNTIME`
RUNTIME_STEMS = tuple(CASES) if FULL else ON_RUNTIME

#: full-set algorithms whose ranks exchange data both ways on 20-23 channels each way: their
#: plans have up to 46 channel pairs between two ranks (the credits of one way go back on
#: the pairs of the other), and they read back with a channel per link that carries data,
#: within the runtime's 32 (MSCCL's limit); the default run takes them on the runtime too
MANY_CHANNELS_BOTH_WAYS = ("dgx1v-gpu0-gpu1-gpu4-gpu5-allreduce-trees", "dgx1p-gpu0-gpu1-gpu4-gpu5-allreduce-trees")

#: at most this many rank programs (algorithms times ranks) per launch: each rank keeps
#: every algorithm of its launch, and a launch of 8 or more ranks on 2 CPUs takes long
RANK_PROGRAMS_PER_LAUNCH = 400


def runtime_batches(stems) -> list[tuple[int, tuple[str, ...]]]:
    """``stems`` grouped by rank count, each group split into as few launches as
    :data:`RANK_PROGRAMS_PER_LAUNCH` allows (every n-th algorithm of the group in the
    same launch, so that the large ones of a family spread over the launches):
    (ranks, stems of one launch), by rank count."""
    by_ranks: dict[int, list[str]] = {}
    for stem in stems:
        by_ranks.setdefault(CASES[stem].num_ranks, []).append(stem)
    out = []
    for num_ranks, group in sorted(by_ranks.items()):
        launches = -(-len(group) * num_ranks // RANK_PROGRAMS_PER_LAUNCH)
        out += [(num_ranks, tuple(group[i::launches])) for i in range(launches)]
    return out


RUNTIME_BATCHES = runtime_batches(RUNTIME_STEMS)


def round_trip(algo, mode):
    text = json.dumps(plan_document(convert_for_mscclpp(algo), mode))  # write_mscclpp_plan's, not indented
    plan = plan_from_document(json.loads(text), algo.name)
    assert plan_deadlocks(plan, algo.name) == []  # every thread block finishes
    assert plan_races(plan, algo.name) == []  # no put lands where a peer still reads
    return plan_to_algorithm(plan, algo.name)


def read_back(stem: str, case: SnapshotCase | None = None) -> list[tuple]:
    """The snapshot algorithm ``stem`` (``case``: one of the full set the quick one lacks)
    synthesized and round-tripped through a plan in every mode it claims: (mode, the
    algorithm read back); SynthesisError where it does not synthesize."""
    algo = (case or CASES[stem]).make()
    return [(mode, round_trip(algo, mode)) for mode in declared_modes(algo)]


@pytest.fixture(scope="session")
def read_back_folder(tmp_path_factory) -> Path:
    """Where the round-trip test leaves what it read back for the runtime test: a folder
    of this session, shared by its xdist workers (each worker's base folder lies in it)."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "snapshot-read-back"
    folder.mkdir(exist_ok=True)
    return folder


def leave(folder: Path, stem: str, outcome) -> None:
    """Leave ``stem``'s :func:`read_back` (or why there is none, a string) in ``folder``,
    whole or not at all (written aside, then renamed)."""
    aside = folder / f"{stem}.{os.getpid()}.partial"
    aside.write_bytes(pickle.dumps(outcome))
    os.replace(aside, folder / f"{stem}.pickle")


def left(folder: Path, stem: str):
    """What :func:`leave` left for ``stem``, or None."""
    path = folder / f"{stem}.pickle"
    return pickle.loads(path.read_bytes()) if path.exists() else None


#: seconds one algorithm's round trip may take: the full set's largest (dgx2's all-reduce
#: ``auto`` synthesizes every strategy on 16 GPUs) pass the suite's 300 on a loaded 2-core
#: machine (the timeout's traceback then crashes the xdist worker, and the run)
ROUND_TRIP_TIMEOUT = 1800 if FULL else 300


@pytest.mark.timeout(ROUND_TRIP_TIMEOUT)
@pytest.mark.parametrize("stem", ROUND_TRIP_STEMS)
def test_snapshot_algorithm_round_trips_through_a_plan(stem, read_back_folder):
    if stem in FULL_ONLY and not FULL:
        pytest.skip("takes 5-25 s; ARBORCC_MSCCLPP_FULL=1 takes it")
    try:
        plans = read_back(stem)
    except SynthesisError as e:  # e.g. three-phase on one server: no algorithm to export
        if stem in RUNTIME_STEMS:
            leave(read_back_folder, stem, str(e))
        pytest.skip(str(e))
    for mode, back in plans:
        report = verify_algorithm(back, modes=(mode,))
        assert report.ok, f"{stem} {mode.label}: {report.violations[0]}"
        if back.collective != "custom":
            assert_executes(back, modes=(mode,))
    if stem in RUNTIME_STEMS:
        leave(read_back_folder, stem, plans)


def snapshot_module_stems(quick: bool) -> set[str]:
    return {stem for stem, *_ in snapshot_module().cases(quick=quick)}


def test_the_full_only_algorithms_are_in_the_quick_set():
    assert set(FULL_ONLY) <= snapshot_module_stems(quick=True)


def test_the_runtime_subset_covers_every_collective():
    assert set(ON_RUNTIME) <= set(CASES), "an algorithm of ON_RUNTIME is not in the snapshot set"
    # a synthesized one's collective is the one it is synthesized for (no need to synthesize
    # 19 algorithms here); a library one's is built, quickly
    synthesized = {stem: coll for stem, _, coll, _ in snapshot_module().cases(quick=not FULL)}
    collectives = {synthesized[stem] if stem in synthesized else CASES[stem].make().collective
                   for stem in ON_RUNTIME}
    assert collectives == {"allreduce", "broadcast", "reduce", "allgather", "reducescatter", "gather", "scatter",
                           "alltoall", "custom"}
    assert sorted({CASES[stem].num_ranks for stem in ON_RUNTIME}) == [3, 4, 8]


def test_the_default_round_trips_keep_every_collective_on_each_allocation_machine_and_every_strategy():
    """What :func:`same_paths` leaves to the full run leaves no collective without an
    allocation class of DGX-1V and of DGX-1P, and no strategy, collective or library
    algorithm of the quick set without a round trip; the runtime's algorithms keep theirs."""
    snap = snapshot_module()
    quick = {stem: (coll, strategy) for stem, _, coll, strategy in snap.cases(quick=True)}
    kept = [stem for stem in ROUND_TRIP_STEMS if stem in quick and stem not in FULL_ONLY]
    for machine in snap.ALLOCATION_MACHINES:
        classes = {quick[stem][0] for stem in kept if stem.startswith(f"{machine}-gpu")}
        assert classes == set(snap.COLLECTIVES), machine
    assert {quick[stem] for stem in kept} == set(quick.values())
    assert {stem for stem, _ in snap.library_cases()} <= set(ROUND_TRIP_STEMS)
    assert set(ON_RUNTIME) <= set(ROUND_TRIP_STEMS)
    assert set(ROUND_TRIP_CLASSES) <= set(quick)


def test_every_runtime_algorithm_is_in_one_launch_of_its_rank_count():
    launched = [stem for _, stems in RUNTIME_BATCHES for stem in stems]
    assert sorted(launched) == sorted(RUNTIME_STEMS)
    assert all(CASES[stem].num_ranks == num_ranks for num_ranks, stems in RUNTIME_BATCHES for stem in stems)
    assert all(len(stems) * num_ranks <= max(RANK_PROGRAMS_PER_LAUNCH, num_ranks)
               for num_ranks, stems in RUNTIME_BATCHES)
    if not FULL:  # by default: one launch per rank count, as ON_RUNTIME's are few
        assert [num_ranks for num_ranks, _ in RUNTIME_BATCHES] == [3, 4, 8]


def batch_id(batch) -> str:
    num_ranks, stems = batch
    of = [s for n, s in RUNTIME_BATCHES if n == num_ranks]
    return f"{num_ranks}-ranks" if len(of) == 1 else f"{num_ranks}-ranks-{of.index(stems) + 1}-of-{len(of)}"


@pytest.mark.timeout(3600)  # a launch's own timeout (from its ranks and steps) comes first
@pytest.mark.parametrize("batch", RUNTIME_BATCHES, ids=[batch_id(b) for b in RUNTIME_BATCHES])
def test_snapshot_plans_run_on_the_shared_memory_runtime(batch, read_back_folder):
    """Each algorithm of the launch as read back from its plan (what the round-trip test
    left, else made here), run on the shared-memory runtime in every mode it claims, every
    rank's result equal to numpy's; one that does not synthesize has no plan to run."""
    num_ranks, stems = batch
    cases, unmade = [], {}
    for stem in stems:
        plans = left(read_back_folder, stem)
        if plans is None:
            try:
                plans = read_back(stem)
            except SynthesisError as e:
                plans = str(e)
            except Exception as e:  # the round trip fails: the round-trip test names the problem
                unmade[stem] = f"no plan: {type(e).__name__}: {e}"
                continue
        if isinstance(plans, str):
            continue
        cases += [RuntimeCase(stem, back, mode) for mode, back in plans]
    assert not unmade, "\n".join(f"{stem}: {problem}" for stem, problem in unmade.items())
    assert all(case.algo.num_ranks == num_ranks for case in cases)
    verdicts = runtime_failures(cases, num_ranks)
    failed = {key: problem for key, problem in verdicts.items() if problem}
    assert not failed, "\n".join(f"{key}: {problem}" for key, problem in failed.items())
    assert len(verdicts) == len(cases) == len({case_id(c) for c in cases})


def channels_between(algo) -> dict[tuple[int, int], int]:
    """(sender, receiver) -> the channels the runtime needs between them: the highest
    channel index their thread blocks use, plus one."""
    out: dict[tuple[int, int], int] = {}
    for prog in algo.ranks:
        for tb in prog.threadblocks:
            if tb.send >= 0:
                out[(prog.rank, tb.send)] = max(out.get((prog.rank, tb.send), 0), tb.channel + 1)
            if tb.recv >= 0:
                out[(tb.recv, prog.rank)] = max(out.get((tb.recv, prog.rank), 0), tb.channel + 1)
    return out


def test_the_algorithms_of_many_channels_both_ways_are_in_the_full_set_only():
    assert set(MANY_CHANNELS_BOTH_WAYS) <= snapshot_module_stems(quick=False) - snapshot_module_stems(quick=True)


@pytest.mark.timeout(ROUND_TRIP_TIMEOUT)
def test_plans_of_many_channels_both_ways_read_back_within_the_runtime_channels_and_run_on_it():
    """Each read back with no more channels between two ranks than the runtime has (the
    translation numbered the credit-only links too: 39-40), verified, and run on the
    shared-memory runtime with every rank's result equal to numpy's."""
    from arborcc.runtime.environment import MAX_CHANNELS

    full = {stem: SnapshotCase(stem, lambda b=build, c=coll, s=strat: _synthesize(b(), c, s), build)
            for stem, build, coll, strat in snapshot_module().cases(quick=False) if stem in MANY_CHANNELS_BOTH_WAYS}
    cases = []
    for stem in MANY_CHANNELS_BOTH_WAYS:
        for mode, back in read_back(stem, full[stem]):
            beyond = {pair: n for pair, n in channels_between(back).items() if n > MAX_CHANNELS}
            assert beyond == {}, f"{stem} {mode.label}: channels per (sender, receiver) beyond {MAX_CHANNELS}"
            report = verify_algorithm(back, modes=(mode,))
            assert report.ok, f"{stem} {mode.label}: {report.violations[0]}"
            cases.append(RuntimeCase(stem, back, mode))
    verdicts = runtime_failures(cases, 4)
    failed = {key: problem for key, problem in verdicts.items() if problem}
    assert not failed, "\n".join(f"{key}: {problem}" for key, problem in failed.items())
    assert len(verdicts) == len(cases) >= len(MANY_CHANNELS_BOTH_WAYS)
