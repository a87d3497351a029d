"""``arborcc compile``: library names and program files; verified output; nothing written on failure."""

import json
import textwrap
from pathlib import Path

from arborcc.cli.main import main
from arborcc.ir.load import load_algorithm
from arborcc.verify import check_algorithm
from support.execution import assert_executes

PROGRAMS = Path(__file__).parents[1] / "lang" / "compat_programs"


def test_library_algorithm_to_xml(tmp_path, capsys):
    out = tmp_path / "ring.xml"
    assert main(["compile", "ring-allreduce", "--ranks", "6", "--channels", "2", "-o", str(out)]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("ring-allreduce: allreduce on 6 ranks, 12 thread blocks, 66 steps, in-place, compiled in")
    algo = load_algorithm(out, dialect="executor")
    assert algo.num_channels == 2
    check_algorithm(algo, "executor")
    assert_executes(algo)


def test_json_format_and_summary(tmp_path, capsys):
    out = tmp_path / "a2a.json"
    rc = main(["compile", "twostep-alltoall", "--nodes", "2", "--gpus-per-node", "2", "--instances", "2",
               "-o", str(out), "--json"])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["ok"] and summary["format"] == "json" and summary["ranks"] == 4
    assert_executes(load_algorithm(out))


def test_legacy_dialect_for_custom_collective(tmp_path, capsys):
    out = tmp_path / "next.xml"
    assert main(["compile", "alltonext", "--nodes", "2", "--gpus-per-node", "2", "-o", str(out)]) == 2
    assert "use --dialect legacy" in capsys.readouterr().err and not out.exists()
    assert main(["compile", "alltonext", "--nodes", "2", "--gpus-per-node", "2", "--dialect", "legacy",
                 "-o", str(out)]) == 0
    assert 'coll="custom"' in out.read_text()


def test_bad_library_parameters_write_nothing(tmp_path, capsys):
    out = tmp_path / "hd.xml"
    out.write_text("previous content")
    assert main(["compile", "hd-allreduce", "--ranks", "6", "-o", str(out)]) == 2
    assert "power-of-two" in capsys.readouterr().err
    assert out.read_text() == "previous content"


def test_program_file_with_entry_function(tmp_path, capsys):
    src = tmp_path / "prog.py"
    src.write_text(textwrap.dedent("""
        from arborcc.lang import AllGather, Buffer, Program, chunk

        def arborcc_program(n="3"):
            n = int(n)
            with Program("gather-ring", AllGather(n, 1)) as prog:
                for r in range(n):
                    c = chunk(r, Buffer.INPUT, 0)
                    c.copy(r, Buffer.OUTPUT, r)
                    for k in range(1, n):
                        c = c.copy((r + k) % n, Buffer.OUTPUT, r)
            return prog
    """))
    out = tmp_path / "g.xml"
    assert main(["compile", str(src), "5", "-o", str(out)]) == 0
    assert capsys.readouterr().out.startswith("gather-ring: allgather on 5 ranks")
    assert_executes(load_algorithm(out))


def test_public_tools_program_runs_unchanged(tmp_path, capsys):
    out = tmp_path / "ring.xml"
    rc = main(["compile", str(PROGRAMS / "ring_allreduce_manual.py"), "4", "2", "1", "-o", str(out)])
    assert rc == 0
    captured = capsys.readouterr()
    assert "<algo" in captured.err  # the program's own XML() output goes to stderr
    algo = load_algorithm(out)
    assert algo.num_ranks == 4 and algo.num_channels == 2
    assert_executes(algo)


def test_wrong_program_writes_nothing(tmp_path, capsys):
    src = tmp_path / "wrong.py"
    src.write_text(textwrap.dedent("""
        from arborcc.lang import AllGather, Buffer, Program, chunk

        with Program("incomplete", AllGather(3, 1)):
            for r in range(3):
                chunk(r, Buffer.INPUT, 0).copy((r + 1) % 3, Buffer.OUTPUT, r)
    """))
    out = tmp_path / "w.xml"
    assert main(["compile", str(src), "-o", str(out)]) == 1
    assert "nothing written" in capsys.readouterr().err
    assert not out.exists()


def test_program_error_is_one_line_at_the_program(tmp_path, capsys):
    src = tmp_path / "misuse.py"
    src.write_text(textwrap.dedent("""
        from arborcc.lang import AllGather, Buffer, Program, chunk

        with Program("p", AllGather(2, 1)):
            chunk(0, Buffer.INPUT, 3)
    """))
    out = tmp_path / "m.xml"
    assert main(["compile", str(src), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("arborcc: error: misuse.py:5: chunk index 3 is out of range") and "\n" not in err
    assert not out.exists()


def test_unknown_target_and_list(capsys):
    assert main(["compile", "no-such-thing"]) == 2
    assert "not a library algorithm" in capsys.readouterr().err
    assert main(["compile", "--list"]) == 0
    assert "hierarchical-allreduce" in capsys.readouterr().out
