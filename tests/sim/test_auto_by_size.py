"""``synthesize(..., "auto", size=S)``: the candidate with the least simulated time for a
call of S bytes wins, and the note lists every candidate's time."""

import re

from arborcc.sim.simulate import predict_time
from arborcc.synth.synthesis import synthesize
from arborcc.topology.allocation import induced
from arborcc.topology.machines import build_machine


def test_auto_with_a_size_picks_the_least_simulated_time():
    machine = build_machine("dgx1v")
    topo = induced(machine, ["gpu1", "gpu4", "gpu5", "gpu6"])
    for size in (4 << 10, 64 << 20):
        best = synthesize(topo, "allreduce", "auto", size=size)
        note = next(n for n in best.notes if n.startswith("auto chose"))
        assert f"us simulated for {size} bytes" in note
        listed = {m[0]: float(m[1]) for m in re.findall(r"([a-z-]+) ([0-9.]+)(?=,| us)", note.split(" among ")[1])}
        chosen = best.strategy.removeprefix("auto:")
        assert listed[chosen] == min(listed.values())
        assert abs(predict_time(best.algorithm, topo, size) * 1e6 - listed[chosen]) < 0.1  # as the file runs
