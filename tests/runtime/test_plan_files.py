"""Plans on disk (ARBORCC_PLAN): real `arborcc tune -o` output loads; corrupted copies of
it are one line naming plan.json, the line and the entry (or the algorithm file), read
within the limits (input bytes, nesting) without reading a huge file whole."""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arborcc.cli.main import main
from arborcc.errors import ArborccError, InputError
from arborcc.ir.aliasing import Mode
from arborcc.runtime.plan import Plan
from arborcc.ir.plan_index import read_plan_index
from support.cli_runs import arborcc, refused


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> Path:
    """A real plan: `arborcc tune -o` for 2 ranks, two buckets."""
    out = tmp_path_factory.mktemp("tuned") / "plan"
    assert main(["tune", "--machine", "dgx1v", "--gpus", "0,1", "--sizes", "1K,1M", "--strategies", "ring",
                 "--instances", "1", "-o", str(out)]) == 0
    return out


def corrupted(tuned: Path, folder: Path, change) -> Path:
    """A copy of the tuned plan whose plan.json ``change(doc)`` edited."""
    plan = folder / "plan"
    shutil.copytree(tuned, plan)
    doc = json.loads((plan / "plan.json").read_text())
    change(doc)
    (plan / "plan.json").write_text(json.dumps(doc, indent=2))
    return plan


def test_a_tuned_plan_loads_and_selects_by_size(tuned):
    plan = Plan.load(tuned)
    assert len(plan.entries) == 2
    small = plan.choose("allreduce", 2, Mode.INPLACE, 256, 4)
    large = plan.choose("allreduce", 2, Mode.INPLACE, 1 << 20, 4)
    assert (small.entry, small.low, small.high) == (0, 0, (1 << 20) - 1)
    assert (large.entry, large.low, large.high) == (1, 1 << 20, None)
    assert "plan entry 1 of 2" in small.reason and "allreduce-0-" in small.reason


def entry(i, key, value):
    def change(doc):
        doc["algorithms"][i][key] = value
    return change


def top(key, value):
    def change(doc):
        doc[key] = value
    return change


@pytest.mark.parametrize("change, needle", [
    (entry(0, "min_bytes", -1), r"algorithms\[0\]\.min_bytes: -1 is out of range"),
    (entry(0, "max_bytes", 2**63), r"algorithms\[0\]\.max_bytes: 9223372036854775808 is out of range"),
    (entry(1, "min_bytes", "1M"), r"algorithms\[1\]\.min_bytes: '1M' is not a whole number"),
    (entry(1, "min_bytes", 1.5), r"algorithms\[1\]\.min_bytes: Decimal\('1\.5'\) is not a whole number"),
    (entry(0, "max_bytes", True), r"algorithms\[0\]\.max_bytes: True is not a whole number"),
    (lambda doc: doc["algorithms"][1].update(min_bytes=4096, max_bytes=100),
     r"algorithms\[1\]: min_bytes 4096 is above max_bytes 100"),
    (entry(0, "max_bytes", 100), r"algorithms\[0\]\.max_bytes: 100, but allreduce-0-ring-x1-LL\.xml says 1048575"),
    (entry(0, "file", "../plan/allreduce-0-ring-x1-LL.xml"), r"algorithms\[0\]\.file: .* not a file name inside"),
    (entry(0, "file", "/etc/passwd"), r"algorithms\[0\]\.file: '/etc/passwd' is not a file name inside"),
    (entry(0, "file", "missing.xml"), r"algorithms\[0\]\.file: 'missing\.xml': no such file"),
    (entry(0, "file", "notes.txt"), r"algorithms\[0\]\.file: 'notes\.txt' is not an algorithm file"),
    (entry(0, "file", 7), r"algorithms\[0\]\.file: 7 is not a string"),
    (entry(1, "instances", 0), r"algorithms\[1\]\.instances: 0 is out of range"),
    (top("collective", "allfoo"), r"collective: unknown collective 'allfoo'"),
    (top("collective", "allgather"), r"collective: 'allgather', but allreduce-0-ring-x1-LL\.xml says 'allreduce'"),
    (top("ranks", 0), r"ranks: 0 ranks is out of range"),
    (top("ranks", 4), r"ranks: 4, but allreduce-0-ring-x1-LL\.xml says 2"),
    (top("algorithms", []), r"algorithms: 'algorithms' must be a non-empty list"),
    (top("algorithms", {"file": "x"}), r"algorithms: 'algorithms' must be a non-empty list"),
    (top("version", 2), r"not an arborcc-plan version 1 index"),
    (top("version", True), r"not an arborcc-plan version 1 index"),
    (lambda doc: doc["algorithms"].__setitem__(0, "allreduce-0-ring-x1-LL.xml"), r"algorithms\[0\]: not an object"),
    (lambda doc: doc["algorithms"][0].pop("max_bytes"), r"algorithms\[0\]: the field 'max_bytes' is missing"),
])
def test_a_corrupted_plan_index_is_one_line_naming_plan_json_and_the_entry(tuned, tmp_path, change, needle):
    plan = corrupted(tuned, tmp_path, change)
    with pytest.raises(InputError) as e:
        Plan.load(plan)
    line = str(e.value)
    assert "\n" not in line
    assert line.startswith(str(plan / "plan.json") + ":"), line
    assert re.search(needle, line), line


def test_an_index_entry_names_its_line(tuned, tmp_path):
    plan = corrupted(tuned, tmp_path, entry(1, "max_bytes", -5))
    text = (plan / "plan.json").read_text().splitlines()
    line = next(i for i, t in enumerate(text, 1) if '"max_bytes": -5' in t)
    with pytest.raises(InputError, match=rf"plan\.json:{line}: algorithms\[1\]\.max_bytes: -5 "):
        read_plan_index(plan)


def test_a_truncated_algorithm_file_is_named(tuned, tmp_path):
    plan = tmp_path / "plan"
    shutil.copytree(tuned, plan)
    xml = plan / "allreduce-1-ring-x1-Simple.xml"
    xml.write_text(xml.read_text()[:200])
    with pytest.raises(ArborccError, match=r"allreduce-1-ring-x1-Simple\.xml"):
        Plan.load(plan)


def test_a_plan_json_that_is_not_json_is_named(tuned, tmp_path):
    plan = tmp_path / "plan"
    shutil.copytree(tuned, plan)
    (plan / "plan.json").write_text('{"format": "arborcc-plan", "version": 1,')
    with pytest.raises(InputError, match=r"plan\.json"):
        Plan.load(plan)


# ------------------------------------------------------------------ through `arborcc run`: one line, within budget
SCRIPT = "raise SystemExit('a rank started')\n"


def run_with_plan(tmp_path: Path, plan: str):
    (tmp_path / "train.py").write_text(SCRIPT)
    return arborcc("run", "-n", "4", "--timeout", "60", "train.py", cwd=tmp_path, env={"ARBORCC_PLAN": plan})


def test_a_missing_plan_is_one_line(tmp_path):
    refused(run_with_plan(tmp_path, "no/such/plan"), r"^arborcc: error: \$ARBORCC_PLAN: no/such/plan: no such file")


def test_a_deeply_nested_plan_json_is_refused_by_the_nesting_limit(tuned, tmp_path):
    plan = corrupted(tuned, tmp_path, top("meta", None))
    (plan / "plan.json").write_text('{"format": "arborcc-plan", "meta": ' + "[" * 100_000 + "]" * 100_000 + "}")
    refused(run_with_plan(tmp_path, "plan"), r"plan/plan\.json:1: .*nesting")


def test_a_2_gib_plan_json_is_refused_without_reading_it_whole(tuned, tmp_path):
    plan = tmp_path / "plan"
    shutil.copytree(tuned, plan)
    with open(plan / "plan.json", "r+b") as f:
        f.truncate(2 << 30)  # sparse: no disk used
    run = run_with_plan(tmp_path, "plan")
    refused(run, r"plan/plan\.json: ", "input-bytes")


def test_a_bad_entry_is_one_line_through_arborcc_run(tuned, tmp_path):
    corrupted(tuned, tmp_path, entry(0, "min_bytes", -1))
    refused(run_with_plan(tmp_path, "plan"), r"^arborcc: error: plan/plan\.json:\d+: algorithms\[0\]\.min_bytes: -1 ")


# ------------------------------------------------------------------ property test
JSON = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(-1e30, 1e30),
                              st.text(max_size=12)),
                    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner,
                                                                                          max_size=3)),
                    max_leaves=6)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(where=st.sampled_from(["min_bytes", "max_bytes", "file", "instances", "strategy", "collective", "ranks",
                              "algorithms", "format", "entry"]),
       index=st.integers(0, 1), value=JSON)
def test_random_plan_entries_load_or_give_one_arborcc_error(tuned, where, index, value):
    with tempfile.TemporaryDirectory() as scratch:
        def change(doc):
            if where in ("collective", "ranks", "algorithms", "format"):
                doc[where] = value
            elif where == "entry":
                doc["algorithms"][index] = value
            else:
                doc["algorithms"][index][where] = value
        plan = corrupted(tuned, Path(scratch), change)
        try:
            loaded = Plan.load(plan)
        except ArborccError as e:
            assert "\n" not in str(e)
            return
        assert loaded.entries
