"""``compare``'s strategy rows and ``nccl`` row are the numbers ``synth`` and the demo
report: each strategy's algorithm simulated as its written file runs, NCCL's baseline at
the same size - one number per question."""

import pytest

from arborcc.synth.result import RANKING_SIZE
from arborcc.synth.synthesis import synthesize
from arborcc.topology.allocation import induced
from arborcc.topology.machines import build_machine
from arborcc.tune.compare import compare, nccl_time


def test_compare_rows_are_synths_times_of_the_written_files():
    topology = induced(build_machine("dgx1v"), ["gpu1", "gpu4", "gpu5", "gpu6"])
    cmp = compare(topology, "allreduce", [RANKING_SIZE])
    rows = {r["strategy"]: r["time_us"] for r in cmp.rows}
    for name in ("trees", "blueconnect", "double-binary-tree"):
        assert synthesize(topology, "allreduce", name).time * 1e6 == pytest.approx(rows[name], rel=0.01), name
    assert nccl_time(topology, "allreduce", RANKING_SIZE) * 1e6 == pytest.approx(rows["nccl"], rel=1e-6)
