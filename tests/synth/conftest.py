"""Syntheses that several test modules here look at, made once per test session (shared
by the xdist workers, :func:`support.shared_work.once`): each test gets its own copy,
read back from the pickle, so what one test does to it no other test sees."""

import pytest
from support.shared_work import once

from arborcc.synth.synthesis import synthesize
from arborcc.topology.machines import build_machine


def dgx1v_allreduce_trees_made(precise: bool):
    """The trees all-reduce on DGX-1V (8 GPUs): the candidate that pipelines, or with
    ``precise`` the trees at full precision (``PIPELINED_MARGIN`` 0: no candidate replaces them)."""
    with pytest.MonkeyPatch.context() as mp:
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
