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


# --- the public tools' semantics and surface --------------------------------------------
def test_in_place_copies_name_the_senders_block_as_in_the_tools(tmp_path):
    from arborcc.ir.model import Buffer

    out = run_with_changed_imports("allgather_pairs_inplace.py", ["5"], tmp_path)
    assert "checked: True" in out
    algo = read_msccl_xml(xml_part(out))
    assert algo.inplace and not algo.outofplace
    assert all(st.src_buf is not Buffer.INPUT and st.dst_buf is not Buffer.INPUT  # all in the output
               for r in algo.ranks for tb in r.threadblocks for st in tb.steps)
    check_algorithm(algo, "executor")
    assert_executes(algo)
    # the neighbour transfers named no thread block: one shared thread block per rank holds them
    assert all(len(r.threadblocks) == 5 for r in algo.ranks)


@pytest.mark.parametrize("by_source,landing", [(False, 2), (True, 0)])
def test_copy_index_of_an_in_place_buffer_by_destination_or_by_source(by_source, landing):
    from arborcc.lang import AllGather, Buffer, Program, chunk

    with Program("one", AllGather(3, 1, inplace=True), copy_index_by_source=by_source) as prog:
        chunk(0, Buffer.INPUT, 0).copy(2, Buffer.INPUT, 0)
    # arborcc: rank 2's own input block (block 2 of its output); the tools: rank 0's block
    assert prog.buffers[2][Buffer.OUTPUT][landing].origin_rank == 0


def test_unnamed_thread_blocks_under_the_manual_policy():
    from arborcc.lang import AllReduce, Buffer, Program, ThreadblockPolicy, chunk

    def build(shared):
        with Program("m", AllReduce(2, 2, inplace=True), threadblock_policy=ThreadblockPolicy.manual,
                     unnamed_tb_shared=shared) as prog:
            chunk(1, Buffer.INPUT, 0).reduce(chunk(0, Buffer.INPUT, 0))
            chunk(0, Buffer.INPUT, 1).reduce(chunk(1, Buffer.INPUT, 1))
            chunk(1, Buffer.INPUT, 0).copy(0, Buffer.INPUT, 0)
            chunk(0, Buffer.INPUT, 1).copy(1, Buffer.INPUT, 1)
        return prog

    with pytest.raises(ProgramError, match="manual thread-block policy needs sendtb="):
        build(False).compile()
    algo = build(True).compile()
    check_algorithm(algo)
    assert all(len(r.threadblocks) == 1 for r in algo.ranks)


def test_nvidia_topologies():
    from arborcc.compat.msccl.topologies import dgx1, dgx_a100, nvlink_only
    from arborcc.compat.msccl.topologies.nvidia import DGX1_TOOL_ORDER
    from arborcc.topology.machines import DGX1V_NVLINKS

    t = dgx1()
    assert t.num_nodes() == 8
    assert all(t.link(i, j) == DGX1V_NVLINKS[DGX1_TOOL_ORDER[i]][DGX1_TOOL_ORDER[j]] for i in range(8) for j in range(8))
    assert all(sum(t.link(i, j) for j in range(8)) == 6 for i in range(8))  # six NVLinks per V100
    assert t.link(0, 1) == 2 and t.link(0, 5) == 0
    a = dgx_a100()
    assert all(a.link(i, j) == (0 if i == j else 12) for i in range(8) for j in range(8))
    dump = (Path(__file__).parents[1] / "topology" / "samples" / "dgx1v_topo.txt").read_text()
    assert nvlink_only(dump).links == [list(row) for row in DGX1V_NVLINKS]


def test_program_on_the_dgx1_of_the_tools(tmp_path):
    out = run_with_changed_imports("dgx1_ring_allreduce.py", [], tmp_path)
    assert "checked: True" in out
    algo = read_msccl_xml(xml_part(out))
    check_algorithm(algo, "executor")
    assert_executes(algo)


def test_xml_falls_back_to_the_original_dialect_beyond_the_executor_limits(tmp_path, capsys):
    from arborcc.ir.convert import convert_for_dialect

    out = run_with_changed_imports("ring_allreduce_manual.py", ["40", "1", "1"], tmp_path)  # 78 steps per tb
    assert "writing the original MSCCL dialect (legacy) instead" in capsys.readouterr().err
    text = xml_part(out)
    assert "outofplace=" not in text.splitlines()[0]  # the original runtime's attribute set
    algo = read_msccl_xml(text, dialect="legacy")
    check_algorithm(algo, "legacy")
    # what the executors need: the same algorithm spread over channels (arborcc convert)
    converted = convert_for_dialect(algo, "executor")
    check_algorithm(converted, "executor")
    assert converted.num_channels == 2
    assert_executes(converted)


def test_xml_refuses_a_wrong_algorithm_at_its_line():
    from arborcc.compat.msccl.language import XML, Buffer, MSCCLProgram, chunk
    from arborcc.compat.msccl.language.collectives import AllReduce
    from arborcc.compat.msccl.topologies import fully_connected

    with MSCCLProgram("half", fully_connected(2), AllReduce(2, 1, True), 1):
        chunk(1, Buffer.input, 0).reduce(chunk(0, Buffer.input, 0))  # rank 0 never gets the sum
        with pytest.raises(ProgramError) as e:
            XML()
    assert str(e.value).startswith("test_lang_compat.py:")
    assert "XML(): program 'half' compiles to an incorrect algorithm: rank 0: in-place call: output chunk 0" \
        in str(e.value)
