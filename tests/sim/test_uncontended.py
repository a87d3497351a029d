"""The engine's rounds over numpy arrays for contention-free programs give exactly the
finish times of its event-driven run (the engine switches to them above a size)."""

from __future__ import annotations

import pytest

from arborcc.errors import VerificationError
from arborcc.ir.model import Op, ThreadBlock
from arborcc.sim import engine
from arborcc.sim.fidelity import fidelity_for
from arborcc.library.nccl_ring import ring_allreduce_algorithm, ring_broadcast_algorithm
from arborcc.sim.program import compile_algorithm
from arborcc.sim.protocols import PROTOCOL_MODELS
from arborcc.sim.simulate import run_setup
from arborcc.sim.uncontended import run_uncontended
from arborcc.synth import synthesize
from arborcc.topology.cluster import build_cluster
from arborcc.topology.machines import build_machine

from sim_builders import algorithm, chain_topology, step


def both_engines(monkeypatch, prog, setup, iters, tile, m):
    """(event-driven run, rounds run) of the same program; each may be an error message."""
    out = []
    for threshold in (10 ** 18, 0):
        monkeypatch.setattr(engine, "MIN_STEPS", threshold)
        calls = []
        monkeypatch.setattr(engine, "run_uncontended", lambda *a: calls.append(1) or run_uncontended(*a))
        try:
            out.append((engine._run(prog, setup, iters, tile, m, False), calls))
        except VerificationError as e:
            out.append((str(e), calls))
    (event, none), (rounds, used) = out
    assert not none
    return event, rounds, bool(used)


def cases():
    cluster = build_cluster("dgx-a100", 2)
    dgx1v = build_machine("dgx1v")
    yield "ring", cluster, ring_allreduce_algorithm([list(range(16))]), None
    yield "broadcast", cluster, ring_broadcast_algorithm([list(range(16))], root=3), None
    # dependencies between thread blocks and steps of several chunks, on links no two
    # connections share (the trees strategy's pipelined lowering spreads its connections over
    # channels that share links, so it contends)
    hd = synthesize(dgx1v, "allreduce", "halving-doubling")
    yield "halving-doubling", dgx1v, hd.algorithm, hd.routes


@pytest.mark.parametrize("name,topology,algo,routes", list(cases()), ids=lambda x: x if isinstance(x, str) else "")
@pytest.mark.parametrize("protocol,size", [("LL", 4096), ("LL128", 1 << 20), ("Simple", 777777), ("Simple", 1 << 26)])
def test_rounds_equal_the_event_engine(monkeypatch, name, topology, algo, routes, protocol, size):
    prog = compile_algorithm(algo, topology, routes)
    setup = run_setup(algo, prog, size, PROTOCOL_MODELS[protocol], fidelity_for(topology), 1)
    iters, tile, m = engine.pipelining(setup.chunk_bytes, setup.slice_bytes)
    event, rounds, used = both_engines(monkeypatch, prog, setup, min(iters, 5), tile, m)
    assert used  # these programs never contend, so the rounds ran
    assert rounds.tb_finish == event.tb_finish  # identical floats, not merely close
    assert rounds.makespan == event.makespan and rounds.link_bytes == event.link_bytes


@pytest.mark.parametrize("m", [1, 2, 3])
def test_rounds_split_steps_into_pieces_as_the_event_engine(monkeypatch, m):
    hd = synthesize(build_machine("dgx1v"), "allreduce", "halving-doubling")
    prog = compile_algorithm(hd.algorithm, build_machine("dgx1v"), hd.routes)
    assert max(max(c) for c in prog.tb_counts) > m  # steps of several pieces
    setup = run_setup(hd.algorithm, prog, 1 << 20, PROTOCOL_MODELS["LL128"], fidelity_for(prog.topology), 1)
    event, rounds, used = both_engines(monkeypatch, prog, setup, 3, 1000.0, m)
    assert used and rounds.tb_finish == event.tb_finish


def test_a_deadlock_is_reported_by_the_event_engine(monkeypatch):
    # rank 1 receives before it sends and so does rank 0: neither can start
    tbs = {0: [ThreadBlock(0, send=1, recv=1, steps=[step(Op.RECV), step(Op.SEND)])],
           1: [ThreadBlock(0, send=0, recv=0, steps=[step(Op.RECV), step(Op.SEND)])]}
    algo = algorithm("stuck", 2, 1, tbs)
    topology = chain_topology(2)
    prog = compile_algorithm(algo, topology)
    setup = run_setup(algo, prog, 1 << 20, PROTOCOL_MODELS["Simple"], fidelity_for(topology), 1)
    event, rounds, used = both_engines(monkeypatch, prog, setup, 2, 1024.0, 1)
    assert used and "waits forever" in event and rounds == event
