"""Syntheses that several test modules here look at, made once per test session (shared
by the xdist workers, :func:`support.shared_work.once`): each test gets its own copy,
read back from the pickle, so what one test does to it no other test sees; and, within
one test, each strategy's schedule built once per request (each_strategy_builds_once_per_request)."""

import dataclasses
import io
import pickle

import pytest
from support.shared_work import once

from arborcc.synth.lower_emit import lowering_in_place
from arborcc.synth.registry import BY_NAME
from arborcc.synth.synthesis import synthesize
from arborcc.topology.machines import build_machine


def dgx1v_allreduce_trees_made(precise: bool):
    """The trees all-reduce on DGX-1V (8 GPUs) on a split of the links (``SAME_TREES_MOST_RANKS``
    0: not the same trees both ways, tests/synth/test_same_trees_allreduce.py): the
    candidate that pipelines, or with ``precise`` the trees at full precision
    (``PIPELINED_MARGIN`` 0: no candidate replaces them)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("arborcc.synth.strategies.trees.SAME_TREES_MOST_RANKS", 0)
        if precise:
            mp.setattr("arborcc.synth.strategies.trees.PIPELINED_MARGIN", 0.0)
        return synthesize(build_machine("dgx1v"), "allreduce", "trees")


@pytest.fixture
def dgx1v_allreduce_trees(tmp_path_factory):
    """``synthesize(dgx1v, "allreduce", "trees")``: the candidate that pipelines."""
    return once(tmp_path_factory, "dgx1v-allreduce-trees", lambda: dgx1v_allreduce_trees_made(False))


@pytest.fixture
def dgx1v_allreduce_trees_precise(tmp_path_factory):
    """The same with ``PIPELINED_MARGIN`` 0: the trees at full precision (37 trees)."""
    return once(tmp_path_factory, "dgx1v-allreduce-trees-precise", lambda: dgx1v_allreduce_trees_made(True))


@pytest.fixture
def dgx_a100_trees(tmp_path_factory):
    """``synthesize(dgx-a100, collective, "trees")`` by collective, made once in the session
    (test_lower_pipelining and test_reducescatter_allgather_pipelining both look at the
    reduce-scatter): each call gets its own copy."""
    def made(collective: str):
        return once(tmp_path_factory, f"dgx-a100-{collective}-trees",
                    lambda: synthesize(build_machine("dgx-a100"), collective, "trees"))
    return made


@pytest.fixture
def each_strategy_builds_once_per_request(monkeypatch):
    """Each strategy's schedule built once per request (and call form) in a test, for
    tests that compare auto with the strategies on their own, which ask for the same
    schedules (test_choice_by_time's 2 x DGX A100 trees: four times with their
    out-of-place forms, simulating their pipelined candidates each time).
    Every call gets its own copy; what ``synthesize`` does with it (verify, choose the
    protocol, time it as written, the form for both calls) is done anew each time."""
    built = {}

    def once_per_request(name, function):
        def build(request):
            # the bound is the topology's, collective's, root's and links' (its solve time aside)
            key = (name, id(request.topology), request.collective, request.root, request.links, request.size,
                   request.dialect, lowering_in_place())
            if key not in built:
                built[key] = _pickled(function(request), request.topology)
            return _unpickled(built[key], request.topology)
        return build

    for name, spec in list(BY_NAME.items()):
        monkeypatch.setitem(BY_NAME, name, dataclasses.replace(spec, function=once_per_request(name, spec.function)))


def _pickled(value, shared) -> bytes:
    """``value`` pickled with the object ``shared`` left out, to be put back by
    :func:`_unpickled` (a copy that shares it: deepcopy with a memo, several times faster)."""
    out = io.BytesIO()
    pickler = pickle.Pickler(out, pickle.HIGHEST_PROTOCOL)
    pickler.persistent_id = lambda obj: "shared" if obj is shared else None
    pickler.dump(value)
    return out.getvalue()


def _unpickled(data: bytes, shared):
    """A new copy of what :func:`_pickled` pickled, with ``shared`` where it was."""
    unpickler = pickle.Unpickler(io.BytesIO(data))
    unpickler.persistent_load = lambda pid: shared
    return unpickler.load()
