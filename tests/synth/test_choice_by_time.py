"""``auto`` chooses by the simulated time of the algorithm as written - at the size asked
for, else at ``RANKING_SIZE`` - never by the steady-state model: the algorithm it returns
is the fastest candidate at that size."""

import copy
import dataclasses

import pytest

from arborcc.ir.limits import check_dialect_limits
from arborcc.synth.lower_emit import lowering_in_place
from arborcc.synth.registry import BY_NAME, STRATEGIES
from arborcc.synth.synthesis import RANKING_SIZE, synthesize
from arborcc.errors import SynthesisError
from arborcc.topology.allocation import induced
from arborcc.topology.cluster import build_cluster
from arborcc.topology.machines import build_machine


def blink_allocation():
    return induced(build_machine("dgx1v"), ["gpu1", "gpu4", "gpu5", "gpu6"])


@pytest.fixture(autouse=True)
def each_strategy_builds_once_per_request(monkeypatch):
    """Each strategy's schedule built once per request (and call form) in a test: auto
    and the strategy on its own ask for the same one - the 2 x DGX A100 trees, four
    times with their out-of-place forms, simulating their pipelined candidates each time.
    Every call gets its own copy; what ``synthesize`` does with it (verify, choose the
    protocol, time it as written, the form for both calls) is done anew each time."""
    built = {}

    def once_per_request(name, function):
        def build(request):
            # the bound is the topology's, collective's, root's and links' (its solve time aside)
            key = (name, id(request.topology), request.collective, request.root, request.links, request.size,
                   request.dialect, lowering_in_place())
            if key not in built:
                built[key] = function(request)
            return copy.deepcopy(built[key], {id(request.topology): request.topology})
        return build

    for name, spec in list(BY_NAME.items()):
        monkeypatch.setitem(BY_NAME, name, dataclasses.replace(spec, function=once_per_request(name, spec.function)))


def candidate_times(topology, collective, size):
    """Each strategy's algorithm (within the executor limits) simulated as written."""
    times = {}
    for entry in STRATEGIES:
        if collective not in entry.collectives:
            continue
        try:
            r = synthesize(topology, collective, entry.name, size=size)
        except SynthesisError:
            continue
        if not check_dialect_limits(r.algorithm, "executor"):
            times[entry.name] = r.time
    return times


@pytest.mark.parametrize("topology,collective,size", [
    (blink_allocation(), "allreduce", None),
    (build_machine("dgx1v"), "allreduce", 1 << 20),
    (build_cluster("dgx-a100", 2), "allreduce", None),  # the issue's: trees, slowest here, reaches the bound
    (build_cluster("dgx-a100", 2), "allgather", 4 << 20),
], ids=["dgx1v-1456-allreduce", "dgx1v-allreduce-1M", "2xa100-allreduce", "2xa100-allgather-4M"])
def test_auto_chooses_the_fastest_candidate_at_the_size(topology, collective, size):
    best = synthesize(topology, collective, size=size)
    times = candidate_times(topology, collective, size)
    assert best.time <= 1.03 * min(times.values()), (best.strategy, times)


def test_auto_without_a_size_ranks_at_the_default_and_says_so():
    best = synthesize(blink_allocation(), "allreduce")
    assert best.size == RANKING_SIZE and best.size_is_default
    [note] = [n for n in best.notes if n.startswith("auto chose")]
    assert f"us simulated for {RANKING_SIZE} bytes" in note and "no size given" in note

