"""The limits module: one table, documented in docs/limits.md, overridable per run."""

from __future__ import annotations

from pathlib import Path

import pytest

from arborcc.cli.main import main
from arborcc.errors import InputError
from arborcc.limits import LIMITS, limit, limits_markdown, parse_limit_value, reset_limits, set_limit

DOC = Path(__file__).resolve().parents[2] / "docs" / "limits.md"


def test_docs_limits_md_shows_the_table_of_the_code():
    assert limits_markdown() in DOC.read_text(encoding="utf-8")


def test_every_limit_has_a_reason_and_a_variable():
    for lim in LIMITS.values():
        assert lim.reason and lim.bounds and lim.variable.startswith("ARBORCC_MAX_")
        assert lim.default >= 1


@pytest.mark.parametrize("text, value", [("65536", 65536), ("64Mi", 64 * 2**20), ("1_000_000", 10**6),
                                         ("2Ki", 2048), (" 8 ", 8)])
def test_limit_values(text, value):
    assert parse_limit_value(text, "x") == value


@pytest.mark.parametrize("text", ["0", "-1", "1.5", "lots", "", "Mi"])
def test_bad_limit_values(text):
    with pytest.raises(InputError):
        parse_limit_value(text, "x")


def test_flag_wins_over_environment(monkeypatch):
    monkeypatch.setenv("ARBORCC_MAX_LANES", "100")
    try:
        assert limit("lanes").value == 100
        set_limit("lanes=200")
        assert limit("lanes").value == 200
    finally:
        reset_limits()
    assert limit("lanes").value == 100


def test_a_bad_limit_flag_is_one_line(capsys):
    assert main(["--limit", "nosuch=3", "topo", "show"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--limit: expected NAME=VALUE with NAME one of input-bytes" in err
    assert main(["--limit", "lanes=many", "topo", "show"]) == 2
    assert "a limit is a positive integer" in capsys.readouterr().err


def test_a_bad_environment_value_is_one_line(monkeypatch, capsys):
    monkeypatch.setenv("ARBORCC_MAX_LANES", "lots")
    assert main(["topo", "show", "--machine", "dgx1v"]) == 2
    assert "ARBORCC_MAX_LANES: a limit is a positive integer" in capsys.readouterr().err
