"""Round trip of the synthesis snapshot set (benchmarks/synthesis/xml_snapshot.py: synthesized
algorithms of many topologies, strategies and collectives, and the library at 8 ranks):
each exported as an MSCCL++ plan, checked for deadlock and races in the plan's own
semantics, read back, verified and run on the reference executor with results equal to
numpy; a few also on the shared-memory runtime.

The test takes the set's quick variant but its five largest algorithms (:data:`FULL_ONLY`);
``ARBORCC_MSCCLPP_FULL=1`` takes every algorithm of the full set (515 synthesized cases
and the 8 library algorithms: 518 round-trip, the other 5 do not synthesize on their
topology; about 14 minutes of CPU, 20 on a loaded 2-core machine).
"""

from __future__ import annotations

import importlib.util
import json
import os
from functools import lru_cache
from pathlib import Path

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

#: the snapshot algorithms also run on the shared-memory runtime (all of 8 ranks or fewer):
#: a few per collective, of 3, 4 and 8 ranks, synthesized and from the library
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


@lru_cache(maxsize=None)
def snapshot_module():
    spec = importlib.util.spec_from_file_location("xml_snapshot", SNAPSHOT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def snapshot_cases():
    snap = snapshot_module()
    out = [(stem, (lambda b=build, c=coll, s=strat: _synthesize(b(), c, s)))
           for stem, build, coll, strat in snap.cases(quick=not FULL)]
    return out + snap.library_cases()


def _synthesize(topology, collective, strategy):
    """As ``arborcc synth --format mscclpp`` synthesizes: the protocol fastest at the size
    among those a plan has (LL and Simple)."""
    from arborcc.synth import synthesize

    return synthesize(topology, collective, strategy, protocols=PLAN_PROTOCOLS).algorithm


CASES = snapshot_cases()


def round_trip(algo, mode):
    text = json.dumps(plan_document(convert_for_mscclpp(algo), mode))  # write_mscclpp_plan's, not indented
    plan = plan_from_document(json.loads(text), algo.name)
    assert plan_deadlocks(plan, algo.name) == []  # every thread block finishes
    assert plan_races(plan, algo.name) == []  # no put lands where a peer still reads
    return plan_to_algorithm(plan, algo.name)


@pytest.mark.parametrize("index", range(len(CASES)), ids=[stem for stem, _ in CASES])
def test_snapshot_algorithm_round_trips_through_a_plan(index):
    stem, make = CASES[index]
    if stem in FULL_ONLY and not FULL:
        pytest.skip("takes 5-25 s; ARBORCC_MSCCLPP_FULL=1 takes it")
    try:
        algo = snapshot_algorithm(stem) if stem in ON_RUNTIME else make()
    except SynthesisError as e:  # e.g. three-phase on one server: no algorithm to export
        pytest.skip(str(e))
    for mode in declared_modes(algo):
        back = plan_round_trip(stem, mode) if stem in ON_RUNTIME else round_trip(algo, mode)
        report = verify_algorithm(back, modes=(mode,))
        assert report.ok, f"{stem} {mode.label}: {report.violations[0]}"
        if algo.collective != "custom":
            assert_executes(back, modes=(mode,))


def runtime_cases(num_ranks: int) -> tuple:
    """The :data:`ON_RUNTIME` algorithms of ``num_ranks`` ranks, each through a plan in
    every mode it claims."""
    cases = []
    for stem in ON_RUNTIME:
        algo = snapshot_algorithm(stem)
        if algo.num_ranks == num_ranks:
            cases += [RuntimeCase(stem, plan_round_trip(stem, mode), mode) for mode in declared_modes(algo)]
    return tuple(cases)


@lru_cache(maxsize=None)
def snapshot_algorithm(stem: str):
    """A snapshot algorithm, made once (for :data:`ON_RUNTIME`: both tests use it)."""
    return dict(CASES)[stem]()


@lru_cache(maxsize=None)
def plan_round_trip(stem: str, mode):
    """:func:`round_trip` of a snapshot algorithm, made once."""
    return round_trip(snapshot_algorithm(stem), mode)


def test_the_full_only_algorithms_are_in_the_quick_set():
    assert set(FULL_ONLY) <= {stem for stem, *_ in snapshot_module().cases(quick=True)}


def test_the_runtime_subset_covers_every_collective():
    assert set(ON_RUNTIME) <= set(dict(CASES)), "an algorithm of ON_RUNTIME is not in the snapshot set"
    collectives = {snapshot_algorithm(stem).collective for stem in ON_RUNTIME}
    assert collectives == {"allreduce", "broadcast", "reduce", "allgather", "reducescatter", "gather", "scatter",
                           "alltoall", "custom"}
    assert sorted({snapshot_algorithm(stem).num_ranks for stem in ON_RUNTIME}) == [3, 4, 8]


@pytest.mark.parametrize("num_ranks", [3, 4, 8])
def test_snapshot_plans_run_on_the_shared_memory_runtime(num_ranks):
    """Each :data:`ON_RUNTIME` algorithm exported as a plan, read back and run on the
    shared-memory runtime (one launch per rank count) in every mode it claims, every
    rank's result equal to numpy's."""
    cases = list(runtime_cases(num_ranks))
    verdicts = runtime_failures(cases, num_ranks, timeout=300)
    failed = {key: problem for key, problem in verdicts.items() if problem}
    assert not failed, "\n".join(f"{key}: {problem}" for key, problem in failed.items())
    assert len(verdicts) == len(cases) == len({case_id(c) for c in cases})
