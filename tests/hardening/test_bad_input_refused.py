"""Hostile or careless input to the readers, the DSL and the outputs, one test per case:
one line and exit status 2 (or the right result), within 30 s and 1 GB (docs/limits.md).
Every case runs ``arborcc`` as a subprocess (:mod:`support.cli_runs`); the files a case
starts from, and the outputs whose check needs no process, are written in-process
(:mod:`support.in_process`)."""

from __future__ import annotations

import json
import re
import stat

import pytest

from support.cli_runs import SAMPLES, IR_SAMPLES, arborcc, refused, within_budget
from support.in_process import arborcc_in_process


# ------------------------------------------------------------------ memory and time bombs
def alias_bomb(levels: int, width: int) -> str:
    lines = ["arborcc_topology: 1", "devices:", "- {id: gpu0, kind: gpu}", "meta:",
             "  a0: &a0 [" + ",".join(["x"] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"  a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("levels", [10, 9])  # the 777-byte and 657-byte files
def test_yaml_alias_bomb_is_refused(tmp_path, levels):
    (tmp_path / "bomb.yaml").write_text(alias_bomb(levels, 9))
    refused(arborcc("topo", "show", "--file", "bomb.yaml", cwd=tmp_path), r"^arborcc: error: bomb\.yaml:\d+: ",
            "yaml-alias-nodes")


def huge_chunks_xml(n: int) -> str:
    gpu = ('  <gpu id="{r}" i_chunks="{n}" o_chunks="{n}" s_chunks="0">\n'
           '    <tb id="0" send="{s}" recv="{v}" chan="0">\n'
           '      <step s="0" type="{t}" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" '
           'deps="-1" hasdep="0"/>\n    </tb>\n  </gpu>\n')
    return (f'<algo name="big" proto="Simple" nchannels="1" nchunksperloop="{n}" ngpus="2" coll="allgather" '
            f'inplace="0" outofplace="1" minBytes="0" maxBytes="0">\n'
            + gpu.format(r=0, n=n, s=1, v=-1, t="s") + gpu.format(r=1, n=n, s=-1, v=0, t="r") + "</algo>\n")


@pytest.mark.parametrize("exponent", [12, 8, 6])
def test_msccl_xml_chunk_counts_are_refused_before_allocating(tmp_path, exponent):
    (tmp_path / "big.xml").write_text(huge_chunks_xml(10**exponent))
    refused(arborcc("verify", "big.xml", cwd=tmp_path), r"big\.xml:1: <algo>: attribute nchunksperloop", "chunks")


def test_chunk_counts_in_json_algorithms_are_refused(tmp_path):
    assert arborcc_in_process("compile", "ring-allreduce", "--ranks", "2", "-o", str(tmp_path / "a.json")) == 0
    doc = json.loads((tmp_path / "a.json").read_text())
    doc["ranks"][1]["output_chunks"] = 10**12
    (tmp_path / "a.json").write_text(json.dumps(doc))
    refused(arborcc("verify", "a.json", cwd=tmp_path), r"ranks\[1\]\.output_chunks: 1,000,000,000,000 chunks")


def two_gpu_topology(count: str) -> str:
    return ("arborcc_topology: 1\ndevices:\n- {id: gpu0, kind: gpu}\n- {id: gpu1, kind: gpu}\nlinks:\n"
            f"- {{src: gpu0, dst: gpu1, kind: nvlink, count: {count}, bandwidth_gbps: 25, duplex: true}}\n")


@pytest.mark.parametrize("count", ["100000000000000000000", "10000000"])
def test_link_count_is_refused_before_synthesis(tmp_path, count):
    (tmp_path / "t.yaml").write_text(two_gpu_topology(count))
    refused(arborcc("synth", "--file", "t.yaml", cwd=tmp_path), r"t\.yaml:6: links\[0\]\.count: ", "lanes")


@pytest.mark.parametrize("args, needle", [
    (["--nodes", "1000000"], r"--nodes: 1,000,000 nodes of 8 GPUs: 8,000,000 GPUs is over the limit"),
    (["--machine", "hierarchy:100000@100,100000@10"], r"--machine hierarchy: .* over the limit of 32,768 GPUs"),
])
def test_oversized_machines_are_refused_before_building(tmp_path, args, needle):
    refused(arborcc("topo", "show", *args, cwd=tmp_path), needle)


def test_a_256_node_cluster_is_shown_without_its_matrix(tmp_path):
    """2,048 GPUs are within the limits: the right result, the matrix left out (matrix-gpus)."""
    run = arborcc("topo", "show", "--machine", "dgx-a100", "--nodes", "256", cwd=tmp_path)
    assert run.code == 0, run.err
    assert "2048" in run.out.replace(",", "") and "matrix" in run.out + run.err
    within_budget(run)


def test_limits_can_be_raised(tmp_path):
    run = arborcc("--limit", "lanes=100", "topo", "show", "--file", "t.yaml", cwd=tmp_path)
    assert run.code == 2  # no such file yet: the flag itself is accepted
    (tmp_path / "t.yaml").write_text(two_gpu_topology("80"))
    assert arborcc("--limit", "lanes=100", "topo", "show", "--file", "t.yaml", cwd=tmp_path).code == 0
    assert arborcc("topo", "show", "--file", "t.yaml", cwd=tmp_path, env={"ARBORCC_MAX_LANES": "100"}).code == 0
    refused(arborcc("topo", "show", "--file", "t.yaml", cwd=tmp_path), "ARBORCC_MAX_LANES")


# ------------------------------------------------------------------ one line instead of a traceback
def test_nccl_xml_lane_count_is_refused(tmp_path):
    text = (SAMPLES / "dgx1v_nccl.xml").read_text().replace('count="1"', 'count="1000000000000"', 1)
    (tmp_path / "t.xml").write_text(text)
    refused(arborcc("synth", "--file", "t.xml", cwd=tmp_path), r"t\.xml:\d+: link gpu\d->gpu\d: .* lanes")


@pytest.mark.parametrize("name, text, command", [
    ("deep.json", '{"arborcc_topology": 1, "devices": [], "meta": {"x": ' + "[" * 100000 + "]" * 100000 + "}}",
     ["topo", "show", "--file"]),
    ("deep.yaml", "arborcc_topology: 1\ndevices: []\nmeta: {x: " + "[" * 100000 + "]" * 100000 + "}\n",
     ["topo", "show", "--file"]),
    ("deep_algo.json", "[" * 100000 + "]" * 100000, ["verify"]),
])
def test_deep_nesting_is_refused(tmp_path, name, text, command):
    (tmp_path / name).write_text(text)
    refused(arborcc(*command, name, cwd=tmp_path), "nesting", "over the limit of 64 levels")


@pytest.mark.parametrize("command", [
    ["compile", "ring-allreduce", "--ranks", "4", "-o", "out"],
    ["synth", "--machine", "dgx1v", "-o", "out"],
    ["topo", "export", "--machine", "dgx1v", "-o", "out"],
    ["synth", "--machine", "dgx1v", "--trees-png", "out"],
])
def test_an_output_naming_a_directory_is_refused(tmp_path, command):
    (tmp_path / "out").mkdir()
    refused(arborcc(*command, cwd=tmp_path), r"out: is a directory")


def test_trees_png_creates_missing_folders_like_o(tmp_path):
    assert arborcc_in_process("synth", "--machine", "dgx1v", "--gpus", "0,1,2,3", "--strategy", "trees",
                              "--trees-png", str(tmp_path / "new/sub/t.png"), "-o", str(tmp_path / "new/other/a.xml")) == 0
    assert (tmp_path / "new/sub/t.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "new/other/a.xml").read_text().startswith("<algo")


PROGRAMS = {
    "syntax": ("def f(:\n    pass\n", r"^arborcc: error: prog\.py:1: SyntaxError: "),
    "import": ("import arborcc_no_such_module\n",
               r"^arborcc: error: prog\.py:1: ModuleNotFoundError: No module named 'arborcc_no_such_module'$"),
    "division": ("from arborcc.lang import AllReduce, Program\n\nx = 1\ny = x / 0\n",
                 r"^arborcc: error: prog\.py:4: ZeroDivisionError: division by zero$"),
    "argv": ("import argparse\np = argparse.ArgumentParser()\np.add_argument('n', type=int)\np.parse_args()\n",
             r"^arborcc: error: prog\.py: the program exited with status 2: .*invalid int value: 'x'"),
    "missing chunk": ("from arborcc.lang import AllReduce, Buffer, Program, chunk\n"
                      "with Program('p', AllReduce(2, 2, inplace=True)):\n"
                      "    c = chunk(0, Buffer.SCRATCH, 5)\n"
                      "    c.copy(1, Buffer.INPUT, 0)\n",
                      r"^arborcc: error: prog\.py:4: chunk \(rank 0, scratch, 5\) is uninitialized: nothing was "
                      r"copied there before it is read"),
}


@pytest.mark.parametrize("case", list(PROGRAMS))
def test_a_failing_dsl_program_is_one_line_at_its_own_line(tmp_path, case):
    source, pattern = PROGRAMS[case]
    (tmp_path / "prog.py").write_text(source)
    run = arborcc("compile", "prog.py", "x", cwd=tmp_path)
    refused(run, pattern)
    assert "arborcc/" not in run.err  # none of arborcc's frames


def test_arborcc_debug_shows_the_programs_traceback(tmp_path):
    (tmp_path / "prog.py").write_text("x = 1 / 0\n")
    run = arborcc("compile", "prog.py", cwd=tmp_path, env={"ARBORCC_DEBUG": "1"})
    assert run.code != 0 and "Traceback" in run.err and "ZeroDivisionError" in run.err


# ------------------------------------------------------------------ output paths
def test_o_writes_through_a_symbolic_link(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link.xml").symlink_to(tmp_path / "elsewhere" / "target.xml")
    assert arborcc_in_process("compile", "ring-allreduce", "--ranks", "4", "-o", str(tmp_path / "link.xml")) == 0
    assert (tmp_path / "link.xml").is_symlink()
    assert (tmp_path / "elsewhere" / "target.xml").read_text().startswith("<algo")


@pytest.mark.parametrize("target", ["-", "/dev/stdout"])
def test_o_standard_output_prints(tmp_path, target):
    run = arborcc("compile", "ring-allreduce", "--ranks", "4", "-o", target, cwd=tmp_path)
    assert run.code == 0, run.err
    assert run.out.startswith("<algo") and run.out.rstrip().endswith("</algo>")
    assert len(run.err_lines) == 1 and "allreduce on 4 ranks" in run.err  # the summary keeps off stdout
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_outputs_honour_the_umask(tmp_path, umask):
    run = arborcc("topo", "export", "--machine", "dgx1v", "-o", "t.yaml", cwd=tmp_path, umask=umask)
    assert run.code == 0, run.err
    assert stat.S_IMODE((tmp_path / "t.yaml").stat().st_mode) == 0o666 & ~umask


def test_a_format_the_suffix_contradicts_is_warned(tmp_path):
    run = arborcc("topo", "export", "--machine", "dgx1v", "--format", "nccl-xml", "-o", "m.yaml", cwd=tmp_path)
    assert run.code == 0
    assert "warning: m.yaml: writing nccl-xml into a file whose suffix says yaml" in run.err
    assert (tmp_path / "m.yaml").read_text().lstrip().startswith("<system")


DEMO_SECONDS = 300  # the demo runs the whole pipeline, the runtime and a benchmark: not a bad-input case


def test_demo_json_is_one_object_and_leaves_nothing_behind(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    # two GPUs of the embedded default (the README's `arborcc demo` runs its allocation 1,4,5,6):
    # every stage, two ranks
    run = arborcc("demo", "--json", "--gpus", "0,1", cwd=work, env={"TMPDIR": str(tmp)}, seconds=DEMO_SECONDS,
                  address_space=None)
    assert run.code == 0, run.err[-2000:]
    report = json.loads(run.out)
    assert {"topology", "allocation", "best", "winner"} <= set(report)
    # DGX-1V's 46 classes; the winner verified and run
    assert report["allocation"]["name"] == "dgx1v[0,1]" and report["classes"]["count"] == 46
    assert report["winner"]["verified"] and report["winner"]["max_error"] < 1e-6
    assert list(tmp.iterdir()) == [] and list(work.iterdir()) == []
    within_budget(run)


# ------------------------------------------------------------------ accepted but wrong
def test_a_negative_gpu_count_is_refused(tmp_path):
    text = (IR_SAMPLES / "ring4_allreduce_executor.xml").read_text()
    text = re.sub(r'ngpus="\d+"', 'ngpus="-4"', text, count=1)
    (tmp_path / "a.xml").write_text(text)
    refused(arborcc("verify", "a.xml", cwd=tmp_path), r"attribute ngpus: -4 is negative")


def test_verify_checks_both_runtimes_limits_by_default(tmp_path):
    text = (IR_SAMPLES / "ring4_allreduce_legacy.xml").read_text()
    text = text.replace('chan="0"', 'chan="40"').replace('nchannels="1"', 'nchannels="41"')
    (tmp_path / "over.xml").write_text(text)
    run = arborcc("verify", "over.xml", cwd=tmp_path)
    assert run.code == 1 and "channel 40" in run.out and "within neither MSCCL dialect's limits" in run.out
    # within the legacy runtime's 256 steps per thread block, over the executor's 64: OK, and it says which
    assert arborcc_in_process("compile", "ring-allreduce", "--ranks", "40", "--dialect", "legacy",
                              "-o", str(tmp_path / "r.xml")) == 0
    run = arborcc("verify", "r.xml", cwd=tmp_path)
    assert run.code == 0 and "within legacy limits (not executor's" in run.out, run.out


def test_an_empty_gpu_list_is_refused(tmp_path):
    refused(arborcc("topo", "show", "--gpus", "", cwd=tmp_path), r"--gpus: an empty GPU list")


# ------------------------------------------------------------------ error shape
@pytest.mark.parametrize("args, line", [
    (["synth", "--gpus"], "arborcc synth: --gpus: expected one argument"),
    (["synth", "--bogus"], "arborcc synth: --bogus: unrecognized argument"),
    (["topo", "show", "--machine"], "arborcc topo show: --machine: expected one argument"),
    (["compile", "ring-allreduce", "--ranks", "x"],
     "arborcc compile ring-allreduce: --ranks: invalid int value: 'x' (see arborcc compile ring-allreduce --help)"),
    (["synth", "--gpus", "-1,2"],
     "arborcc synth: --gpus: expected one argument (a value starting with '-' is written --gpus=-1,2)"),
    (["nosuchcommand"], None),
])
def test_usage_errors_are_one_line(tmp_path, args, line):
    run = arborcc(*args, cwd=tmp_path)
    assert run.code == 2 and len(run.err_lines) == 1, run.err
    if line:
        assert run.err_lines[0] == line


@pytest.mark.parametrize("text, needle", [
    ('{\n"arborcc_topology": 1,\n"devices": [],\n"devices": []\n}\n', r"t\.json:4: devices: key given twice"),
    ('{\n"arborcc_topology": 1,\n"devices": [\n{"id": "gpu0", "kind": "gpu", "numa": NaN}]}\n',
     r"t\.json:4: NaN is not a finite number"),
    ('{"arborcc_topology": 1, "devices": [{"id": "g0", "kind": "gpu"}, {"id": "g1", "kind": "gpu"}],\n'
     '"links": [{"src": "g0", "dst": "g1", "kind": "nvlink", "bandwidth_gbps": 1e400}]}\n',
     r"t\.json:2: links\[0\]\.bandwidth_gbps: 1E\+400 GB/s is outside"),
])
def test_json_mistakes_name_their_line(tmp_path, text, needle):
    (tmp_path / "t.json").write_text(text)
    run = arborcc("topo", "show", "--file", "t.json", cwd=tmp_path)
    refused(run, needle)
    assert "string" not in run.err


@pytest.mark.parametrize("args", [["compile", "--list", "--json"], ["topo", "export", "--machine", "dgx1v", "--json"]])
def test_json_flag_prints_one_object(tmp_path, args):
    run = arborcc(*args, cwd=tmp_path)
    assert run.code == 0, run.err
    assert isinstance(json.loads(run.out), dict)


# ------------------------------------------------------------------ documented commands
def test_the_dialect_hint_is_only_given_when_that_dialect_accepts(tmp_path):
    """``synth --nodes 32 --strategy ring`` is over both runtimes' steps per thread block:
    the hint must not send the user to --dialect legacy (docs/ commands: tests/docs)."""
    run = arborcc("synth", "--nodes", "32", "--strategy", "ring", "-o", "a.xml", cwd=tmp_path)
    assert run.code == 1 and len(run.err_lines) == 1
    assert "--dialect legacy" not in run.err and "--format json" in run.err
    assert not (tmp_path / "a.xml").exists()
    within_budget(run)


# ------------------------------------------------------------------ work estimated before it starts
@pytest.mark.parametrize("args, needle", [
    (["compile", "ring-allreduce", "--ranks", "100000"],
     r"^arborcc: error: arborcc compile ring-allreduce: AllReduce\(100000, 100000\): ranks: 100,000 GPUs"),
    (["compile", "ring-allreduce", "--ranks", "2000"], r"8,000,000 chunks is over the limit of 4,194,304 chunks"),
    (["run", "-n", "100000", "prog.py"], r"^arborcc: error: -n: local ranks: 100,000 processes is over the limit"),
    (["bench", "-n", "100000"], r"^arborcc: error: -n: local ranks: 100,000 processes is over the limit"),
    (["bench", "-n", "256", "-b", "1G", "-e", "512G"], r"^arborcc: error: -e: the largest size needs at least 262144.0 GiB"),
    (["topo", "classes", "--machine", "dgx-a100", "--nodes", "64", "--min-gpus", "2"],
     r"--min-gpus/--max-gpus: 2-512 of 512 GPUs: .* allocations is over the limit of 50,000"),
])
def test_requests_beyond_the_machine_are_refused_before_the_work(tmp_path, args, needle):
    (tmp_path / "prog.py").write_text("print('a rank')\n")
    refused(arborcc(*args, cwd=tmp_path), needle)


def test_a_program_over_the_operations_limit_stops_at_the_limit(tmp_path):
    run = arborcc("compile", "ring-allreduce", "--ranks", "16", cwd=tmp_path, env={"ARBORCC_MAX_OPERATIONS": "100"})
    refused(run, r"program 'ring-allreduce-16r.*': copies and reduces: 101 operations is over the limit of 100")
    (tmp_path / "prog.py").write_text("from arborcc.lang import AllReduce, Buffer, Program, chunk\n"
                                      "with Program('loop', AllReduce(2, 1)):\n"
                                      "    while True:\n"
                                      "        chunk(0, Buffer.INPUT, 0).copy(1, Buffer.SCRATCH, 0)\n")
    run = arborcc("--limit", "operations=1000", "compile", "prog.py", cwd=tmp_path)
    refused(run, r"^arborcc: error: prog\.py:4: program 'loop': copies and reduces: 1,001 operations")
