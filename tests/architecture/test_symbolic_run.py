"""One symbolic run: the verifier's schedule of steps over bounded FIFOs, and the values,
races and postcondition on every memory layout, are made once, in compiled code
(``run_layouts`` of ``verify/csrc/symbolic.cpp``); the Python side only words its
findings. So no Python module of the verifier follows values: none keeps a FIFO (a
``collections.deque``, a ``queue``, a ``popleft``) to make a schedule of its own, and
none walks the compiled run's schedule (its completion ``order`` or the send each
receive popped, ``recv_src``) - a values walk needs one or the other. And exactly one
C++ source of the verifier defines a symbolic run over layouts."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import arborcc

VERIFY = Path(arborcc.__file__).parent / "verify"
FIFO_MODULES = {"queue", "asyncio"}  #: modules whose queues would be a FIFO of their own


def fifo_uses(source: str) -> list[int]:
    """Lines of ``source`` that import a FIFO (``deque``, a queue module) or pop one (``popleft``)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module in FIFO_MODULES or
                                                 node.module == "collections"
                                                 and any(a.name == "deque" for a in node.names)):
            lines.append(node.lineno)
        elif isinstance(node, ast.Import) and any(a.name in FIFO_MODULES for a in node.names):
            lines.append(node.lineno)
        elif isinstance(node, ast.Attribute) and node.attr in ("deque", "popleft"):
            lines.append(node.lineno)
    return lines


#: what the compiled run (``native.SymbolicRun``) says of its schedule that only a walk over it reads
SCHEDULE_ATTRIBUTES = {"order", "recv_src"}


def schedule_walks(source: str) -> list[int]:
    """Lines of ``source`` that read the compiled run's completion order or the sends its
    receives popped (an attribute ``order`` or ``recv_src``)."""
    return sorted({node.lineno for node in ast.walk(ast.parse(source))
                   if isinstance(node, ast.Attribute) and node.attr in SCHEDULE_ATTRIBUTES})


_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
#: a definition (not a call) of a function running the steps over memory layouts
_RUN_DEFINITION = re.compile(r"^\w[\w:<>, ]*\s+(\w*_layouts)\s*\([^;]*?\)\s*\{", re.M)


def layout_runs(source: str) -> list[str]:
    """Names of the functions over memory layouts (``..._layouts``) that C++ ``source`` defines."""
    return _RUN_DEFINITION.findall(_COMMENT.sub("", source))


def test_the_rules_see_what_they_forbid():
    assert fifo_uses("from collections import deque\nq = deque()\n") == [1]
    assert fifo_uses("import collections\nq = collections.deque()\nq.popleft()\n") == [2, 3]
    assert fifo_uses("import queue\n") == [1]
    assert fifo_uses("from collections import Counter\n") == []
    assert layout_runs("Proof run_layouts(const Program& p, int slots) {\n  return {};\n}\n") == ["run_layouts"]
    assert layout_runs("  Proof x = run_layouts(p, slots);\n// Proof prove_layouts(int) {\n") == []
    assert schedule_walks("for gid in run.order:\n    src = run.recv_src[gid]\n") == [1, 2]
    assert schedule_walks("order = sorted(x)\nrun.blocked\n") == []


def test_no_python_module_of_the_verifier_keeps_a_fifo():
    found = [f"{path.relative_to(VERIFY.parent)}:{line}" for path in sorted(VERIFY.rglob("*.py"))
             for line in fifo_uses(path.read_text())]
    assert not found, ("the symbolic run's schedule is compiled (verify/csrc/symbolic.cpp); Python follows "
                       "its order (SymbolicRun.order, recv_src) instead of keeping FIFOs:\n" + "\n".join(found))


def test_no_python_module_of_the_verifier_follows_values():
    found = [f"{path.relative_to(VERIFY.parent)}:{line}" for path in sorted(VERIFY.rglob("*.py"))
             for line in schedule_walks(path.read_text())]
    assert not found, ("the values, races and postcondition of every layout are followed in compiled code "
                       "(verify/csrc/symbolic.cpp); Python words its findings (verify/findings.py) instead of "
                       "walking its schedule:\n" + "\n".join(found))


def test_one_compiled_symbolic_run():
    runs = {path.name: names for path in sorted((VERIFY / "csrc").glob("*.cpp"))
            if (names := layout_runs(path.read_text()))}
    assert runs == {"symbolic.cpp": ["run_layouts"]}, runs
