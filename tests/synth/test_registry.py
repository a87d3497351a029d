"""The strategy registry is the one list of strategies: synthesize, auto, the CLI and the
docs all read it, and reading it costs no heavy import."""

import subprocess
import sys
from pathlib import Path

import pytest

from arborcc.cli.main import build_parser
from arborcc.ir.collectives import COLLECTIVES
from arborcc.synth.registry import BY_NAME, STRATEGIES, strategy_names, synthesizable_collectives

DOC = Path(__file__).resolve().parents[2] / "docs" / "synthesis.md"


def test_every_entry_names_a_function_and_canonical_collectives():
    assert len(set(strategy_names())) == len(STRATEGIES)
    for s in STRATEGIES:
        assert callable(s.function), s.name
        assert s.collectives and set(s.collectives) <= set(COLLECTIVES), s.name
        assert set(s.auto_rank_limits) <= set(s.collectives), s.name
        assert s.description


def test_the_docs_table_is_the_registry():
    rows = {}
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] in BY_NAME:
            rows[cells[0]] = (tuple(c.strip() for c in cells[1].split(",")), cells[2])
    assert rows == {s.name: (s.collectives, s.description) for s in STRATEGIES}


def test_cli_choices_come_from_the_registry():
    sub = next(a for a in build_parser()._subparsers._group_actions)
    synth = sub.choices["synth"]
    choices = {a.dest: a.choices for a in synth._actions}
    assert tuple(choices["strategy"]) == ("auto", *strategy_names())
    assert tuple(choices["collective"]) == synthesizable_collectives()


def test_reading_the_registry_and_the_package_is_light():
    code = ("import sys; import arborcc.synth, arborcc.synth.registry as r; r.strategy_names(); "
            "heavy = [m for m in ('igraph', 'matplotlib', 'scipy', 'networkx', 'highspy', 'torch', 'numpy') "
            "if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_the_package_exposes_its_entry_points_lazily():
    import arborcc.synth as synth
    from arborcc.synth.synthesis import synthesize

    assert synth.synthesize is synthesize
    assert synth.STRATEGIES is STRATEGIES
    with pytest.raises(AttributeError):
        synth.no_such_name
