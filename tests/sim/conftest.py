import os
import sys

sys.path.insert(0, os.path.dirname(__file__))


import pytest


@pytest.fixture
def no_simulation(monkeypatch):
    """Any call of the simulator fails the test: for refusals that must come before it runs."""
    import importlib

    import arborcc.sim.simulate as simulate_module

    for module in ("arborcc.tune.compare", "arborcc.tune.nccl", "arborcc.synth.synthesis"):
        importlib.import_module(module)  # loaded first: they import simulate by name, and must not keep the stand-in

    def forbid(*args, **kwargs):
        raise AssertionError("the simulator was started")

    monkeypatch.setattr(simulate_module, "simulate", forbid)
