"""The steady-period shortcut on programs whose period estimates do not settle: the
next size of a sweep is simulated whole at once, and gives the exact time."""

import copy
import dataclasses

import pytest

from arborcc.sim import engine
from arborcc.library.nccl_ring import ring_allreduce_algorithm
from arborcc.sim.program import compile_algorithm
from arborcc.sim.simulate import simulate
from arborcc.synth.synthesis import synthesize
from arborcc.topology.machines import build_machine

MIB = 1 << 20


@pytest.fixture
def runs(monkeypatch):
    """The iteration counts of every engine run, in order."""
    engine.forget_runs()
    counts: list[int] = []
    real = engine._run

    def counted(prog, setup, iters, *rest):
        counts.append(iters)
        return real(prog, setup, iters, *rest)

    monkeypatch.setattr(engine, "_run", counted)
    yield counts
    engine.forget_runs()


def test_a_program_whose_estimates_do_not_settle_is_simulated_whole_at_the_next_size(runs):
    """Binary trees contend on DGX-1V: with LL128 their period estimates drift (contended
    trees slip against each other), so after three estimates at 256 MiB that did not
    settle, 512 MiB (other slices) is one run of every iteration, with the exact time."""
    topo = build_machine("dgx1v")
    r = synthesize(topo, "allreduce", "binary-trees", timed=False)  # no simulation of its own among the runs
    simulate(r.algorithm, topo, 256 * MIB, "LL128", routes=r.routes)
    assert len(runs) == 5  # four probes, then every iteration
    runs.clear()
    fast = simulate(r.algorithm, topo, 512 * MIB, "LL128", routes=r.routes)
    assert runs == [fast.iterations] and fast.simulated_iterations == fast.iterations
    exact = simulate(r.algorithm, topo, 512 * MIB, "LL128", routes=r.routes, exact=True)
    assert fast.time == exact.time


def test_an_exactly_periodic_program_stays_extrapolated(runs):
    """A ring's estimates agree at once: every size of a sweep whose probes (2, 4, 8 and
    16 iterations: three estimates) cost less than the whole run is extrapolated from
    them, never marked as unsettled."""
    topo = build_machine("dgx1v")
    algo = ring_allreduce_algorithm([list(range(8))])
    extrapolated = 0
    for exp in range(24, 31):
        r = simulate(algo, topo, 1 << exp, "LL128")
        if r.iterations > 2 + 4 + 8 + 16:
            assert r.simulated_iterations < r.iterations
            extrapolated += 1
    assert extrapolated >= 2
    assert not engine._UNSETTLED


def test_a_copy_of_an_algorithm_reuses_the_runs_of_the_original_and_times_alike(runs):
    """An equal program compiled from another object (a deep copy timed again) simulates
    nothing anew, and every number of its result is the original's."""
    topo = build_machine("dgx1v")
    r = synthesize(topo, "allreduce", "binary-trees", timed=False)
    first = simulate(r.algorithm, topo, 256 * MIB, "LL128", routes=r.routes)
    simulated = len(runs)
    assert simulated > 0
    again = simulate(copy.deepcopy(r.algorithm), topo, 256 * MIB, "LL128", routes=copy.deepcopy(r.routes))
    assert len(runs) == simulated
    assert again == first


def test_programs_that_differ_in_what_a_run_reads_have_different_content_keys():
    """The content key tells apart programs a run would simulate differently (here only a
    connection's latency differs) and equates a program with its copy."""
    topo = build_machine("dgx1v")
    prog = compile_algorithm(ring_allreduce_algorithm([list(range(8))]), topo)
    copied = compile_algorithm(copy.deepcopy(prog.algorithm), topo)
    assert copied is not prog and engine.content_key(copied) == engine.content_key(prog)
    slower = dataclasses.replace(prog, conn_latency=[2 * x for x in prog.conn_latency], kept={})
    assert engine.content_key(slower) != engine.content_key(prog)


def test_estimates_below_the_busiest_links_pace_do_not_settle(runs):
    """The all-gather trees synth wrote for DGX-1V GPUs 0,2,3,4 at 1 GiB (128 iterations):
    every period estimate from the 2nd to the 32nd iteration is 123.36 us, then the pace
    of the busiest link, gpu0 -> gpu4, takes over: 124.83 us, its 5.2 MiB per iteration at
    42 GB/s. Extrapolated from three equal estimates, the call took 15,903 us - faster
    than that link allows, and than the file bound. An estimate below the period floor
    does not settle, so the probes go on, and the time is every iteration's."""
    from pathlib import Path

    from arborcc.ir.load import load_algorithm
    from arborcc.sim.fidelity import fidelity_for
    from arborcc.sim.protocols import PROTOCOL_MODELS
    from arborcc.sim.simulate import run_setup
    from arborcc.topology.allocation import induced

    topo = induced(build_machine("dgx1v"), ["gpu0", "gpu2", "gpu3", "gpu4"])
    algo = load_algorithm(Path(__file__).parent / "samples" / "dgx1v-gpus-0234-allgather-trees.xml")
    prog = compile_algorithm(algo, topo)
    setup = run_setup(algo, prog, 1 << 30, PROTOCOL_MODELS["Simple"], fidelity_for(topo), 1)
    iters, tile, m = engine.pipelining(setup.chunk_bytes, setup.slice_bytes)
    floor = engine.period_floor(prog, setup, tile)
    # the case: three equal estimates, all below the floor
    spans = [engine._run(prog, setup, k, tile, m, False).makespan for k in (2, 4, 8, 16)]
    estimates = [(b - a) / (kb - ka) for a, b, ka, kb in zip(spans, spans[1:], (2, 4, 8), (4, 8, 16))]
    assert max(estimates) - min(estimates) < 1e-9 * floor and max(estimates) < 0.99 * floor
    engine.forget_runs()
    extrapolated = simulate(algo, topo, 1 << 30, "Simple")
    exact = simulate(algo, topo, 1 << 30, "Simple", exact=True)
    assert extrapolated.makespan >= iters * floor
    assert extrapolated.time == pytest.approx(exact.time, rel=engine.EXTRAPOLATION_TOLERANCE)
