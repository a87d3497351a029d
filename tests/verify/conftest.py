"""Syntheses that several test modules here look at, made once per test session (shared
by the xdist workers, :func:`support.shared_work.once`): each test gets its own copy."""

import pytest
from support.shared_work import once


@pytest.fixture
def dgx1v_auto(tmp_path_factory):
    """``synthesize(dgx1v, collective).algorithm`` (auto) by collective: test_verify_compiled
    and test_verify_pieces both look at the all-gather's and the all-reduce's."""
    def made(collective: str):
        def synthesized():
            from arborcc.synth import synthesize
            from arborcc.topology.machines import build_machine

            return synthesize(build_machine("dgx1v"), collective).algorithm
        return once(tmp_path_factory, f"dgx1v-{collective}-auto", synthesized)
    return made
