"""Round trip of the synthesis snapshot set (benchmarks/synthesis/xml_snapshot.py: synthesized
algorithms of many topologies, strategies and collectives, and the library at 8 ranks):
each exported as an MSCCL++ plan, checked for deadlock and races in the plan's own
semantics, read back, verified and run on the reference executor with results equal to
numpy; a few also on the shared-memory runtime.

The test takes the set's quick variant and the algorithms of up to
:data:`MAX_STEPS` steps (about 20 s); ``ARBORCC_MSCCLPP_FULL=1`` takes every algorithm
of the full set (515 synthesized cases and the 8 library algorithms, about 15 minutes on
2 cores; 517 round-trip, the other 6 do not synthesize on their topology).
"""

from __future__ import annotations

import importlib.util
import json
import os
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

from arborcc.errors import SynthesisError
from arborcc.ir.aliasing import declared_modes
from arborcc.ir.convert import convert_for_mscclpp
from arborcc.ir.mscclpp.deadlock import plan_deadlocks
from arborcc.ir.mscclpp.plan import plan_from_document
from arborcc.ir.mscclpp.races import plan_races
from arborcc.ir.mscclpp.translate import plan_to_algorithm
from arborcc.ir.mscclpp.writer import write_mscclpp_plan
from arborcc.verify import verify_algorithm
from support.execution import assert_executes

FULL = os.environ.get("ARBORCC_MSCCLPP_FULL") == "1"
MAX_STEPS = 10**9 if FULL else 600
SNAPSHOT = Path(__file__).resolve().parents[2] / "benchmarks" / "synthesis" / "xml_snapshot.py"


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
    from arborcc.synth import synthesize

    return synthesize(topology, collective, strategy).algorithm


CASES = snapshot_cases()


def round_trip(algo, mode):
    text = write_mscclpp_plan(convert_for_mscclpp(algo), mode)
    plan = plan_from_document(json.loads(text), algo.name)
    assert plan_deadlocks(plan, algo.name) == []  # every thread block finishes
    assert plan_races(plan, algo.name) == []  # no put lands where a peer still reads
    return plan_to_algorithm(plan, algo.name)


@pytest.mark.parametrize("index", range(len(CASES)), ids=[stem for stem, _ in CASES])
def test_snapshot_algorithm_round_trips_through_a_plan(index):
    stem, make = CASES[index]
    try:
        algo = make()
    except SynthesisError as e:  # e.g. three-phase on one server: no algorithm to export
        pytest.skip(str(e))
    if algo.num_steps > MAX_STEPS:
        pytest.skip(f"{algo.num_steps} steps; ARBORCC_MSCCLPP_FULL=1 takes it")
    for mode in declared_modes(algo):
        back = round_trip(algo, mode)
        report = verify_algorithm(back, modes=(mode,))
        assert report.ok, f"{stem} {mode.label}: {report.violations[0]}"
        if algo.collective != "custom":
            assert_executes(back, modes=(mode,))


def _run_on_runtime(algo, mode_label):
    from arborcc.runtime.communicator import Communicator

    comm = Communicator.from_env()
    try:
        x = np.arange(3000, dtype=np.float64) + 10_000 * comm.rank
        y = np.zeros_like(x)
        comm.run_algorithm(algo, x, None if mode_label == "in-place" else y)
        return x if mode_label == "in-place" else y
    finally:
        comm.close()


@pytest.mark.parametrize("stem", ["dgx1v-gpu0-gpu1-gpu2-allreduce-trees", "dgx-a100-allreduce-hierarchical"])
def test_snapshot_plans_run_on_the_shared_memory_runtime(stem):
    from arborcc.runtime.launch import run_ranks

    make = dict(CASES).get(stem)
    if make is None:
        pytest.skip(f"{stem} is not in this snapshot set")
    algo = make()
    mode = declared_modes(algo)[0]
    back = round_trip(algo, mode)
    results = run_ranks(_run_on_runtime, algo.num_ranks, (back, mode.label), timeout=240)
    want = sum(np.arange(3000, dtype=np.float64) + 10_000 * r for r in range(algo.num_ranks))
    for got in results:
        np.testing.assert_allclose(got, want)
