"""``arborcc verify`` exit codes 0/1/2 and ``arborcc show``."""

import copy
import json
import subprocess
import sys

import pytest

from support.algorithms import ring_allreduce, tree_broadcast
from arborcc.cli.main import main
from arborcc.ir.json_io import algorithm_to_json
from arborcc.ir.msccl_xml import write_msccl_xml


@pytest.fixture
def files(tmp_path):
    good = tmp_path / "good.xml"
    good.write_text(write_msccl_xml(ring_allreduce(4), "legacy"))
    broken = copy.deepcopy(ring_allreduce(4))
    broken.ranks[1].threadblocks[0].steps = [copy.copy(s) for s in broken.ranks[1].threadblocks[0].steps]
    broken.ranks[1].threadblocks[0].steps[0].src_off = 3
    bad = tmp_path / "bad.json"
    bad.write_text(algorithm_to_json(broken))
    garbage = tmp_path / "garbage.xml"
    garbage.write_text('<algo name="x" ngpus="2" coll="allreduce"><gpu id="0"></algo>')
    return good, bad, garbage


def test_correct_algorithm_exits_0_with_one_line(files, capsys):
    good, _, _ = files
    assert main(["verify", str(good)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "OK" in out[0] and "postcondition holds" in out[0]


def test_incorrect_algorithm_exits_1_explaining_the_first_violation(files, capsys):
    _, bad, _ = files
    assert main(["verify", str(bad)]) == 1
    out = capsys.readouterr().out
    assert "INCORRECT" in out and "rank" in out and "[postcondition]" in out


def test_unreadable_input_exits_2(files, capsys):
    _, _, garbage = files
    assert main(["verify", str(garbage)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("arborcc: error: ") and "garbage.xml:1:" in err and len(err.strip().splitlines()) == 1


def test_missing_file_exits_2(tmp_path, capsys):
    assert main(["verify", str(tmp_path / "none.xml")]) == 2


def test_json_output(files, capsys):
    good, bad, _ = files
    assert main(["verify", str(bad), "--json"]) == 1
    obj = json.loads(capsys.readouterr().out)
    assert obj["ok"] is False and obj["violations"] and {"ok", "violations", "postcondition_checked", "notes"} <= set(obj)
    assert main(["verify", str(good), "--json", "--dialect", "legacy"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["ok"] is True and obj["postcondition_checked"] is True and obj["violations"] == []


def test_dialect_and_slots_options(files, capsys, tmp_path):
    good, _, _ = files
    assert main(["verify", str(good), "--dialect", "executor"]) == 2  # legacy file lacks outofplace
    assert "outofplace" in capsys.readouterr().err
    deep = tmp_path / "deep.xml"
    deep.write_text(write_msccl_xml(tree_broadcast(3, chunks=12), "executor"))
    assert main(["verify", str(deep), "--slots", "1"]) == 0
    assert main(["verify", str(good), "--slots", "0"]) == 2
    assert capsys.readouterr().err == "arborcc verify: --slots: a connection has at least 1 slot\n"


def test_dialect_limit_violation_exits_1(tmp_path, capsys):
    path = tmp_path / "big.xml"
    path.write_text(write_msccl_xml(ring_allreduce(40), "executor"))  # 79 steps per thread block
    assert main(["verify", str(path)]) == 0
    assert main(["verify", str(path), "--dialect", "executor"]) == 1
    assert "[limit]" in capsys.readouterr().out


def test_show(files, capsys):
    good, _, _ = files
    assert main(["show", str(good)]) == 0
    out = capsys.readouterr().out
    assert "allreduce on 4 ranks" in out and "tb 0: send 1, recv 3, channel 0, 7 steps" in out
    assert "0->1: 6 chunks in 6 messages" in out and "rrs 8" in out
    assert main(["show", str(good), "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["step_types"] == {"s": 4, "r": 4, "rrs": 8, "rcs": 8, "rrcs": 4}
    assert obj["links"][0] == {"src": 0, "dst": 1, "chunks": 6, "messages": 6}
    assert obj["ranks"][2]["threadblocks"][0] == {"id": 0, "send": 3, "recv": 1, "channel": 0, "steps": 7}


def test_show_limits_long_listings(tmp_path, capsys):
    path = tmp_path / "r.json"
    path.write_text(algorithm_to_json(ring_allreduce(12)))
    assert main(["show", str(path), "--max-ranks", "2"]) == 0
    assert "10 more ranks" in capsys.readouterr().out


def test_console_script_entry_point(files):
    good, bad, garbage = files
    codes = [subprocess.run([sys.executable, "-m", "arborcc.cli.main", "verify", str(p)],
                            capture_output=True, text=True, timeout=60).returncode for p in (good, bad, garbage)]
    assert codes == [0, 1, 2]
