"""Start-up stays light: building the CLI's parser (what ``arborcc --help`` does) loads
no heavy library. Timing is measured by ``benchmarks/cli/startup.py``, not here."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("igraph", "matplotlib", "scipy.optimize", "networkx", "highspy", "torch")


def _heavy_loaded_after(statements: str) -> list[str]:
    """The heavy modules a fresh interpreter has loaded after running ``statements``."""
    code = f"{statements}\nimport json, sys\nprint(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def test_building_the_parser_imports_no_heavy_library():
    loaded = _heavy_loaded_after("import arborcc.cli.main as main\nmain.build_parser()")
    assert loaded == [], f"building the parser imported {loaded}"


def test_the_probe_sees_a_heavy_import():
    assert _heavy_loaded_after("import networkx") == ["networkx"]


def test_help_imports_no_command_module():
    """``arborcc --help`` lists the commands from main's table, importing none of them."""
    code = ("import json, sys\nfrom arborcc.cli.main import COMMANDS, build_parser, invoked_command\n"
            "text = build_parser(invoked_command(['--help'])).format_help()\n"
            "print(json.dumps([sorted(m for m in sys.modules if m.startswith('arborcc.cli.')), text]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    modules, text = json.loads(out.stdout.splitlines()[-1])
    assert modules == ["arborcc.cli.main", "arborcc.cli.parsing"]
    from arborcc.cli.main import COMMANDS

    words = " ".join(text.split())
    for name, summary in COMMANDS:
        assert f"{name} {summary}" in words
