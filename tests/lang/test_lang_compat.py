"""Programs written for the public GC3 tools (msccl-tools) run with only their imports changed."""

import contextlib
import io
import runpy
import sys
from pathlib import Path

import pytest

from arborcc.compat import install_msccl_alias, remove_msccl_alias
from arborcc.errors import ProgramError
from arborcc.ir.msccl_xml import read_msccl_xml
from arborcc.verify import check_algorithm
from support.execution import assert_executes

PROGRAMS = Path(__file__).parent / "compat_programs"


def run_with_changed_imports(name: str, argv: list[str], tmp_path: Path) -> str:
    """Run a program after rewriting only its ``from msccl...`` import lines; returns stdout."""
    text = (PROGRAMS / name).read_text()
    lines = text.splitlines()
    changed = [l.replace("from msccl", "from arborcc.compat.msccl", 1) if l.startswith("from msccl") else l
               for l in lines]
    assert sum(a != b for a, b in zip(lines, changed)) == sum(l.startswith("from msccl") for l in lines)
    script = tmp_path / name
    script.write_text("\n".join(changed) + "\n")
    out = io.StringIO()
    old = sys.argv
    sys.argv = [str(script), *argv]
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(str(script), run_name="__main__")
    finally:
        sys.argv = old
    return out.getvalue()


def xml_part(stdout: str) -> str:
    start = stdout.index("<algo")
    end = stdout.index("</algo>") + len("</algo>")
    return stdout[start:end]


@pytest.mark.parametrize("argv", [["4", "1", "1"], ["5", "2", "2"], ["8", "4", "1", "--protocol", "LL128"]])
def test_manual_ring_program(argv, tmp_path):
    out = run_with_changed_imports("ring_allreduce_manual.py", argv, tmp_path)
    algo = read_msccl_xml(xml_part(out))
    check_algorithm(algo, "executor")
    assert_executes(algo)
    n, channels, instances = (int(a) for a in argv[:3])
    assert algo.num_ranks == n and algo.num_channels == channels * instances
    assert all(len(r.threadblocks) == channels * instances for r in algo.ranks)
    if "LL128" in argv:
        assert algo.protocol.value == "LL128"


@pytest.mark.parametrize("argv", [["2", "3", "1"], ["3", "2", "2"], ["1", "4", "1"]])
def test_custom_collective_program(argv, tmp_path):
    out = run_with_changed_imports("send_to_next_custom.py", argv, tmp_path)
    algo = read_msccl_xml(xml_part(out))
    assert algo.collective == "custom"
    check_algorithm(algo, "legacy")
    size = int(argv[0]) * int(argv[1])
    assert_executes(algo, lambda inputs: [None] + [inputs[r - 1] for r in range(1, size)])


def test_unmodified_program_runs_through_the_alias(tmp_path):
    assert install_msccl_alias(force=True)
    try:
        out = io.StringIO()
        old = sys.argv
        sys.argv = ["ring_allreduce_manual.py", "3", "1", "1"]
        try:
            with contextlib.redirect_stdout(out):
                runpy.run_path(str(PROGRAMS / "ring_allreduce_manual.py"), run_name="__main__")
        finally:
            sys.argv = old
    finally:
        remove_msccl_alias()
    assert "msccl" not in sys.modules
    check_algorithm(read_msccl_xml(xml_part(out.getvalue())))


def test_compat_errors_point_at_the_program_line(tmp_path):
    from arborcc.compat.msccl.language import Buffer, MSCCLProgram, chunk
    from arborcc.compat.msccl.language.collectives import AllGather
    from arborcc.compat.msccl.topologies import line

    with MSCCLProgram("bad", line(3), AllGather(3, 1, False), 1):
        with pytest.raises(ProgramError) as e:
            chunk(0, Buffer.input, 0).copy(2, Buffer.output, 0)
    assert str(e.value).startswith("test_lang_compat.py:")
    assert "no link from rank 0 to rank 2" in str(e.value)


def test_compat_topologies_and_check():
    from arborcc.compat.msccl.language import Check, MSCCLProgram, chunk, Buffer
    from arborcc.compat.msccl.language.collectives import AllToAll
    from arborcc.compat.msccl.topologies import distributed_fully_connected, fully_connected, ring, star

    topo = distributed_fully_connected(fully_connected(2), 2, 5)
    assert topo.num_nodes() == 4 and topo.link(0, 1) == 1 and topo.link(0, 2) == 5
    assert ring(4).link(0, 1) and not ring(4).link(0, 2)
    assert star(3).link(1, 0) and not star(3).link(1, 2)
    with MSCCLProgram("a2a", topo, AllToAll(4, 1, False), 1):
        for r in range(4):
            for j in range(4):
                chunk(r, Buffer.input, j).copy(j, Buffer.output, r)
        assert Check()
