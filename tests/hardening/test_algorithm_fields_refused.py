"""Algorithm files with a field of the wrong type or out of its range, and DSL programs
over the operations limit, through the command line: one line naming the file and the
field, exit status 2, nothing written (:mod:`support.cli_runs`)."""

from __future__ import annotations

import json
import re

from support.cli_runs import IR_SAMPLES, arborcc, refused
from support.in_process import arborcc_in_process


def ring_json(tmp_path) -> dict:
    assert arborcc_in_process("compile", "ring-allreduce", "--ranks", "3", "-o", str(tmp_path / "a.json")) == 0
    return json.loads((tmp_path / "a.json").read_text())


def test_a_list_where_a_buffer_name_belongs_is_refused(tmp_path):
    doc = ring_json(tmp_path)
    doc["ranks"][1]["threadblocks"][0]["steps"][1]["src_buf"] = ["i"]
    (tmp_path / "a.json").write_text(json.dumps(doc))
    for command in ("verify", "show"):
        refused(arborcc(command, "a.json", cwd=tmp_path),
                r'^arborcc: error: a\.json:ranks\[1\]\.threadblocks\[0\]\.steps\[1\]\.src_buf: '
                r'expected one of "i", "o", "s" or null, got an array$')


def test_a_size_beyond_64_bits_is_refused_and_not_converted(tmp_path):
    doc = ring_json(tmp_path)
    doc["min_bytes"] = 10**40
    (tmp_path / "a.json").write_text(json.dumps(doc))
    refused(arborcc("convert", "a.json", "-o", "a.xml", cwd=tmp_path), r"a\.json:min_bytes: expected a size in bytes")
    assert not (tmp_path / "a.xml").exists()


def test_msccl_xml_min_bytes_above_max_bytes_is_refused(tmp_path):
    text = (IR_SAMPLES / "ring4_allreduce_executor.xml").read_text()
    text = re.sub(r'minBytes="\d+"', 'minBytes="4096"', text).replace('maxBytes="0"', 'maxBytes="1024"')
    (tmp_path / "a.xml").write_text(text)
    refused(arborcc("verify", "a.xml", cwd=tmp_path), r"a\.xml:1: <algo>: attribute minBytes: 4,096 is above maxBytes")


def test_a_users_program_keeps_the_default_operations_limit(tmp_path):
    # the ring all-reduce arborcc compiles from its library at 400 ranks (319,200 operations),
    # written by the user: over the limit meant for runaway programs
    (tmp_path / "prog.py").write_text(
        "from arborcc.lang import AllReduce, Buffer, Program, chunk\n"
        "n = 400\n"
        "with Program('ring', AllReduce(n, n, True)):\n"
        "    for j in range(n):\n"
        "        c = chunk((j + 1) % n, Buffer.INPUT, j)\n"
        "        for s in range(2, n + 1):\n"
        "            c = chunk((j + s) % n, Buffer.INPUT, j).reduce(c)\n"
        "        for s in range(1, n):\n"
        "            c = c.copy((j + s) % n, Buffer.INPUT, j)\n")
    refused(arborcc("compile", "prog.py", "-o", "r.json", cwd=tmp_path),
            r"prog\.py:\d+: program 'ring': copies and reduces: 250,001 operations is over the limit of 250,000")
    assert not (tmp_path / "r.json").exists()


def test_an_algorithm_over_the_algorithm_file_limits_is_not_written(tmp_path):
    run = arborcc("--limit", "algorithm-items=100", "compile", "ring-allreduce", "--ranks", "16", "-o", "r.json",
                  cwd=tmp_path)
    refused(run, r"algorithm 'ring-allreduce-16r.*': its JSON text: \d+ items is over the limit of 100 items "
                 r"per algorithm file")
    assert not (tmp_path / "r.json").exists()
