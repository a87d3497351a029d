"""A strategy whose written file depends on the request's size says so in the registry
(``Strategy.size_dependent``): ``compare`` and ``tune`` synthesize only those once per
size, so an unmarked strategy whose file changes with the size would give them rows that
are not the files ``arborcc synth --size`` writes. Every unmarked (strategy, collective)
is synthesized at 1 MiB and 1 GiB on a DGX-1V 4-GPU allocation and a DGX A100 and must
write the same XML at both (the marked ones are not built here: they may differ)."""

import pytest

from arborcc.errors import SynthesisError
from arborcc.ir.msccl_xml import write_msccl_xml
from arborcc.synth.registry import BY_NAME, STRATEGIES
from arborcc.synth.synthesis import synthesize
from arborcc.topology.allocation import induced
from arborcc.topology.machines import build_machine

SMALL, LARGE = 1 << 20, 1 << 30


def machines():
    return {"dgx1v-1456": induced(build_machine("dgx1v"), ["gpu1", "gpu4", "gpu5", "gpu6"]),
            "dgx-a100": build_machine("dgx-a100")}


def written_files(topology, collective, strategy):
    """The XML ``strategy`` writes for ``collective`` at the small and the large size, or
    None where it does not build here (both sizes refused alike)."""
    files = []
    for size in (SMALL, LARGE):
        try:
            files.append(write_msccl_xml(synthesize(topology, collective, strategy, size=size, timed=False).algorithm))
        except SynthesisError as e:
            files.append(f"refused: {e}")
    return files


def test_marked_collectives_are_collectives_the_strategy_builds():
    for s in STRATEGIES:
        assert set(s.size_dependent) <= set(s.collectives), s.name
        assert all(s.depends_on_size(c) == (c in s.size_dependent) for c in s.collectives), s.name


@pytest.mark.parametrize("machine", ["dgx1v-1456", "dgx-a100"])
def test_an_unmarked_strategy_writes_the_same_file_at_every_size(machine):
    topology = machines()[machine]
    differ = []
    for s in STRATEGIES:
        for collective in s.collectives:
            if s.depends_on_size(collective):
                continue
            small, large = written_files(topology, collective, s.name)
            if small != large:
                differ.append(f"{s.name} {collective}")
    assert not differ, f"files differ between 1 MiB and 1 GiB on {machine}, not marked size_dependent: {differ}"


def test_the_file_comparison_sees_a_strategy_that_depends_on_the_size():
    # binary-trees takes one tree below MXNet's threshold: the check above would catch it unmarked
    assert BY_NAME["binary-trees"].depends_on_size("allreduce")
    small, large = written_files(machines()["dgx-a100"], "allreduce", "binary-trees")
    assert small != large
