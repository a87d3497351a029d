"""Algorithms have one home: only the packages whose job is making algorithms build
programs, so the runtime's built-ins and NCCL's ring kernels live in ``library/`` and
the runtime and the simulator only choose and run what the library (or a file) gives.

A module builds programs when it uses the DSL (imports anything of ``arborcc.lang``,
whose ``Program`` and ``chunk`` trace a program, or of ``arborcc.compiler``, which turns
one into IR) or writes IR programs step by step (uses ``RankProgram``, ``ThreadBlock``
or ``Step`` of ``arborcc.ir.model``). Read from the source with ``ast``, wherever the
import is written (module top, function, ``TYPE_CHECKING`` block).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import arborcc
from architecture.importgraph import load_modules

ROOT = Path(arborcc.__file__).parent
#: the DSL's packages (``arborcc.<name>``): importing from them is building a program
DSL_PACKAGES = ("lang", "compiler")
#: what an IR program is written with, step by step
IR_CONSTRUCTORS = frozenset({"RankProgram", "ThreadBlock", "Step"})
IR_MODEL = "arborcc.ir.model"
#: package -> why its modules may build programs
MAY_BUILD = {
    "library": "the one home of hand-written and built-in algorithms",
    "synth": "emits the schedules it synthesizes as programs",
    "lang": "the DSL itself",
    "compiler": "turns a traced program into IR",
    "ir": "the IR's own readers and rewriters (a file or another runtime's form into IR)",
}
#: packages that must never build one, allow-list or not
NEVER_BUILD = ("runtime", "sim")
#: module outside MAY_BUILD -> why it may build programs
ALLOWED = {
    "arborcc.cli.compile": "`arborcc compile FILE` runs the user's DSL program",
    "arborcc.compat.msccl.language": "msccl-tools' spelling of the DSL, over lang/",
    "arborcc.compat.msccl.language.collectives": "msccl-tools' spelling of the DSL's collectives",
    "arborcc.compat.msccl.language.ir": "msccl-tools' spelling of the DSL's directives",
    "arborcc.tune.instances": "copies a given algorithm side by side (GC3 instances); it makes no algorithm",
}


def is_dsl(module: str) -> bool:
    """``arborcc.lang``, ``arborcc.compiler.pipeline``, ...: the DSL or its compiler."""
    parts = module.split(".")
    return len(parts) > 1 and parts[0] == "arborcc" and parts[1] in DSL_PACKAGES


def program_building_imports(tree: ast.Module) -> list[str]:
    """Each import (or use) in ``tree`` that builds programs, as ``"line: what"``."""
    found = []
    model_aliases: set[str] = set()  # local names bound to arborcc.ir.model
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if is_dsl(a.name):
                    found.append(f"{node.lineno}: import {a.name}")
                elif a.name == IR_MODEL and a.asname:
                    model_aliases.add(a.asname)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [a.name for a in node.names]
            if is_dsl(node.module):
                found.append(f"{node.lineno}: from {node.module} import {', '.join(names)}")
            elif node.module == "arborcc" and set(DSL_PACKAGES) & set(names):
                found.append(f"{node.lineno}: from arborcc import {', '.join(names)}")
            elif node.module == IR_MODEL and IR_CONSTRUCTORS & set(names):
                found.append(f"{node.lineno}: from {IR_MODEL} import "
                             f"{', '.join(n for n in names if n in IR_CONSTRUCTORS)}")
            elif node.module == "arborcc.ir":
                model_aliases.update(a.asname or a.name for a in node.names if a.name == "model")
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr in IR_CONSTRUCTORS
                and isinstance(node.value, ast.Name) and node.value.id in model_aliases):
            found.append(f"{node.lineno}: {node.value.id}.{node.attr}")
    return found


def package_of(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 2 or (ROOT / parts[-1]).is_dir() else "(top)"


@pytest.fixture(scope="module")
def builders() -> dict[str, list[str]]:
    """Module name -> its program-building imports, for every module that has one."""
    out = {}
    for name, m in load_modules(ROOT).items():
        found = program_building_imports(m.tree)
        if found:
            out[name] = found
    return out


def test_the_runtime_and_the_simulator_build_no_programs(builders):
    """The runtime's built-ins and NCCL's ring kernels come from the library."""
    found = [f"{name}:{hit}" for name, hits in builders.items() if package_of(name) in NEVER_BUILD
             for hit in hits]
    assert not found, "programs built outside the library:\n" + "\n".join(found)


def test_only_the_makers_of_algorithms_build_programs(builders):
    found = [f"{name}:{hit}" for name, hits in builders.items()
             if package_of(name) not in MAY_BUILD and name not in ALLOWED for hit in hits]
    assert not found, ("programs built outside library/, synth/, lang/, compiler/, ir/ "
                       "(move the algorithm to the library, or allow the module with a reason):\n" + "\n".join(found))


def test_every_allowed_module_exists_builds_programs_and_is_not_in_the_runtime_or_simulator(builders):
    stale = [name for name in ALLOWED if name not in builders]
    assert not stale, f"allowed modules that build no program (drop them from ALLOWED): {stale}"
    assert not [name for name in ALLOWED if package_of(name) in NEVER_BUILD]


def test_the_check_sees_every_way_of_building_a_program():
    """The scan itself: the DSL imported at the top, inside a function, as a module or
    through ``arborcc``, and IR constructors imported by name or used through the model
    module, are found; reading the IR's data (``Algorithm``, ``Op``) is not."""
    cases = {
        "from arborcc.lang import Program, chunk\n": 1,
        "def f():\n    from arborcc.lang.program import Program\n": 1,
        "import arborcc.compiler.pipeline\n": 1,
        "from arborcc import lang\n": 1,
        "from arborcc.ir.model import Algorithm, Op, ThreadBlock\n": 1,
        "import arborcc.ir.model as m\nx = m.Step\n": 1,
        "from arborcc.ir import model\ny = model.RankProgram(0, 1, 1)\n": 1,
        "from arborcc.ir.model import Algorithm, Op\nimport arborcc.language_tools\n": 0,
        "from arborcc.library.direct import build_direct_algorithm\n": 0,
    }
    for source, hits in cases.items():
        assert len(program_building_imports(ast.parse(source))) == hits, source
