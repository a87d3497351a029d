"""Fuzzing the fields of arborcc JSON algorithm files: valid small files with random
fields replaced (other types, huge, negative and non-finite numbers, missing keys,
extra keys, extra nesting) are read into an Algorithm or refused with one
:class:`~arborcc.errors.ArborccError` line - never another exception; and the commands
that read them (verify, show, simulate, convert) exit 0, 1 or 2, with one line on
stderr when they refuse. In-process, so that many examples stay fast."""

from __future__ import annotations

import contextlib
import copy
import io
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arborcc.errors import ArborccError, IRFormatError
from arborcc.ir.json_io import algorithm_to_json
from arborcc.ir.load import load_algorithm
from arborcc.ir.model import Algorithm

IR_SAMPLES = Path(__file__).resolve().parents[1] / "ir" / "samples"


def valid_documents() -> dict[str, dict]:
    """name -> a valid parsed JSON algorithm: the MSCCL samples and a compiled library algorithm."""
    from arborcc.ir.msccl_xml import read_msccl_xml
    from arborcc.library.catalog import LIBRARY

    docs = {p.stem: json.loads(algorithm_to_json(read_msccl_xml(p.read_text())))
            for p in (IR_SAMPLES / "ring4_allreduce_executor.xml", IR_SAMPLES / "allgather8_executor.xml")}
    algo, _ = LIBRARY["allpairs-allreduce"].build(ranks=4)
    docs["allpairs4"] = json.loads(algorithm_to_json(algo))
    return docs


DOCUMENTS = valid_documents()

#: what a careless or hostile writer puts where a field belongs
HOSTILE = st.one_of(
    st.sampled_from([None, True, False, "", "i", "rrs", "NaN", [], {}, [0, 0, 0], {"i": 0},
                     float("nan"), float("inf"), -float("inf"), 1e300, 0.5, -0.0]),
    st.sampled_from([-1, -2, 0, 1, 2**31 - 1, 2**31, 2**63 - 1, 2**63, -2**63 - 1, 10**40, -10**40, 10**400]),
    st.integers(),
    st.text(max_size=8),
)


def paths(doc, prefix=()):
    """Every path of ``doc`` that holds a value (its keys and list positions)."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield prefix + (k,)
            yield from paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield prefix + (i,)
            yield from paths(v, prefix + (i,))


@st.composite
def mutated(draw, doc: dict) -> dict:
    def hostile():
        return copy.deepcopy(draw(HOSTILE))  # a fresh [] or {}: the strategy's own stays empty

    doc = copy.deepcopy(doc)
    for _ in range(draw(st.integers(1, 3))):
        where = list(paths(doc))
        if not where:
            break
        path = draw(st.sampled_from(where))
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        key, kind = path[-1], draw(st.sampled_from(["replace", "replace", "delete", "nest", "extra"]))
        if kind == "replace":
            parent[key] = hostile()
        elif kind == "delete":
            del parent[key]
        elif kind == "nest":
            parent[key] = draw(st.sampled_from([[parent[key]], {"value": parent[key]}]))
        elif isinstance(parent, dict):
            parent[draw(st.sampled_from(["extra", "src_buf", "steps", "count", "Rank"]))] = hostile()
        else:
            parent.append(hostile())
    return doc


def as_text(doc: dict) -> str:
    return json.dumps(doc)  # NaN and Infinity are written as such: the reader refuses them


def read(path: Path):
    try:
        return load_algorithm(path)
    except ArborccError as e:
        message = str(e)
        assert "\n" not in message and message.strip(), repr(message)
        assert len(message) < 600, message[:300]
        return e


@pytest.mark.parametrize("name", list(DOCUMENTS))
def test_mutated_fields_are_read_or_refused_in_one_line(name, tmp_path_factory):
    path = tmp_path_factory.mktemp("fields") / "algo.json"
    path.write_text(as_text(DOCUMENTS[name]))
    assert isinstance(read(path), Algorithm)  # the unmutated document reads

    @settings(max_examples=300, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(doc=mutated(DOCUMENTS[name]))
    def check(doc: dict) -> None:
        path.write_text(as_text(doc))
        got = read(path)
        assert isinstance(got, (Algorithm, IRFormatError)), got

    check()


def run_cli(*args: str) -> tuple[int, list[str]]:
    """``arborcc ARGS`` in this process: (exit status, the lines on stderr)."""
    from arborcc.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, [line for line in err.getvalue().splitlines() if line.strip()]


def test_the_commands_that_read_mutated_files_exit_0_1_or_2_with_one_line(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli")
    path, out = folder / "algo.json", folder / "out.xml"
    ring = DOCUMENTS["ring4_allreduce_executor"]
    commands = [("verify", str(path)), ("show", str(path)), ("convert", str(path), "-o", str(out)),
                ("simulate", str(path), "--machine", "dgx1v", "--gpus", "0,1,2,3", "--sizes", "1M")]

    @settings(max_examples=12, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(doc=mutated(ring), command=st.sampled_from(commands))
    def check(doc: dict, command: tuple[str, ...]) -> None:
        path.write_text(as_text(doc))
        code, lines = run_cli(*command)
        assert code in (0, 1, 2), (code, lines)
        if code == 2:
            assert len(lines) == 1 and lines[0].startswith("arborcc: error: "), lines

    check()


def read_dict(doc: dict):
    """``doc`` read as an Algorithm, or the one line that refuses it."""
    from arborcc.ir.json_io import algorithm_from_dict

    try:
        return algorithm_from_dict(doc, "algo.json")
    except IRFormatError as e:
        return str(e)


@pytest.mark.parametrize("name", list(DOCUMENTS))
def test_the_shortcut_for_well_formed_steps_reads_what_the_field_checks_read(name, monkeypatch):
    """The reader takes a step whose fields are all of their type and range without
    checking them one by one (millions in a large file); with the shortcut turned off,
    every mutated document reads as the same Algorithm or is refused with the same line."""

    @settings(max_examples=150, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(doc=mutated(DOCUMENTS[name]))
    def check(doc: dict) -> None:
        with monkeypatch.context() as m:
            m.setattr("arborcc.ir.json_io._Validator.well_formed_step", lambda self, raw: None)
            checked = read_dict(copy.deepcopy(doc))
        assert read_dict(doc) == checked

    check()
