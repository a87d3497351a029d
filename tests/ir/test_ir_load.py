"""load_algorithm dispatches on the extension; every failure is an IRFormatError."""

import pytest

from support.algorithms import ring_allreduce
from arborcc.errors import IRFormatError
from arborcc.ir.json_io import algorithm_to_json
from arborcc.ir.load import load_algorithm
from arborcc.ir.msccl_xml import write_msccl_xml


def test_loads_xml_and_json(tmp_path):
    algo = ring_allreduce(3)
    (tmp_path / "a.xml").write_text(write_msccl_xml(algo, "legacy"))
    (tmp_path / "a.JSON").write_text(algorithm_to_json(algo))
    assert load_algorithm(tmp_path / "a.xml") == algo
    assert load_algorithm(str(tmp_path / "a.JSON")) == algo


@pytest.mark.parametrize("name,content,needle", [
    ("a.yaml", "x: 1", "unknown algorithm file type"),
    ("noext", "", "unknown algorithm file type"),
    ("missing.xml", None, "no such file"),
    ("bad.xml", "<algo", "not well-formed XML"),
    ("bad.json", "{", "JSON syntax error"),
    ("bin.json", b"\xff\xfe\x00", "bin.json"),
])
def test_failures_are_ir_format_errors(tmp_path, name, content, needle):
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    with pytest.raises(IRFormatError) as e:
        load_algorithm(path)
    assert needle in str(e.value) and str(path) in str(e.value)


def test_a_directory_is_not_an_algorithm(tmp_path):
    (tmp_path / "d.xml").mkdir()
    with pytest.raises(IRFormatError):
        load_algorithm(tmp_path / "d.xml")


def test_dialect_requirements_apply_when_loading(tmp_path):
    path = tmp_path / "a.xml"
    path.write_text(write_msccl_xml(ring_allreduce(3), "legacy"))
    load_algorithm(path, dialect="legacy")
    with pytest.raises(IRFormatError) as e:
        load_algorithm(path, dialect="executor")
    assert "outofplace" in str(e.value)
