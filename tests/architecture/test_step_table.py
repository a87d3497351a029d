"""One step table: what each step type does (its code, what it sends, receives, reads and
writes) is written down once, in the IR (``arborcc.ir.steps`` and, for C++, the header
``src/arborcc/ir/csrc/step_codes.hpp``); every other stage reads it. So no Python module
outside ``arborcc/ir`` writes a table keyed by step types (a dict literal with ``Op.X``
keys), and no C++ source outside that header defines step codes (an enumerator, constant
or macro named after a step type)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import arborcc
from arborcc.ir.steps import OP_OF_CODE, STEP_KINDS, Op, native_step_table

ROOT = Path(arborcc.__file__).parent
IR = ROOT / "ir"
STEP_HEADER = IR / "csrc" / "step_codes.hpp"

#: the names C++ code gives step types (the header's, and the abbreviations in use before it)
STEP_NAMES = {"SEND", "RECV", "REDUCE", "COPY", "RRC", "RRS", "RCS", "RRCS", "NOP", "CPY", "RE"}
STEP_NAME_PREFIXES = ("", "S_", "STEP_", "OP_", "KIND_")
STEP_CODE_NAMES = {p + n for p in STEP_NAME_PREFIXES for n in STEP_NAMES}


def op_keyed_tables(source: str) -> list[int]:
    """Lines of dict literals in ``source`` with a key written ``Op.X`` (or ``x.Op.X``)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Dict) and any(
                isinstance(k, ast.Attribute) and (isinstance(k.value, ast.Name) and k.value.id == "Op"
                                                  or isinstance(k.value, ast.Attribute) and k.value.attr == "Op")
                for k in node.keys):
            lines.append(node.lineno)
    return lines


_ENUM = re.compile(r"\benum\b[^{;]*\{([^}]*)\}", re.S)
_CONSTANT = re.compile(r"\b(?:constexpr|const)\b[^=;(){}]*?\b([A-Z_][A-Z0-9_]*)\s*(?:=|\{)")
_MACRO = re.compile(r"^\s*#\s*define\s+([A-Z_][A-Z0-9_]*)", re.M)
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def step_code_definitions(source: str) -> list[str]:
    """Names of step codes that C++ ``source`` defines: enumerators, constants or macros
    named after a step type."""
    source = _COMMENT.sub("", source)
    names = [m.group(1) for m in _CONSTANT.finditer(source)] + [m.group(1) for m in _MACRO.finditer(source)]
    for body in _ENUM.findall(source):
        names += [e.split("=")[0].strip() for e in body.split(",")]
    return [n for n in names if n in STEP_CODE_NAMES]


def test_no_table_keyed_by_step_type_outside_the_ir():
    found = [f"{path.relative_to(ROOT.parent)}:{line}"
             for path in sorted(ROOT.rglob("*.py")) if IR not in path.parents
             for line in op_keyed_tables(path.read_text())]
    assert not found, ("tables keyed by Op outside arborcc/ir (read arborcc.ir.steps, e.g. op.code, "
                       "op.sends, OP_OF_CODE):\n" + "\n".join(found))


def test_no_step_codes_defined_in_cpp_outside_the_shared_header():
    sources = sorted(p for p in ROOT.glob("*/csrc/*") if p.suffix in (".cpp", ".hpp") and p != STEP_HEADER)
    assert sources, "no C++ sources found"
    found = [f"{path.relative_to(ROOT.parent)}: {name}" for path in sources
             for name in step_code_definitions(path.read_text())]
    assert not found, "step codes defined outside ir/csrc/step_codes.hpp:\n" + "\n".join(found)


def test_the_shared_header_defines_the_step_table():
    """The header is the table's C++ form: its codes and flags are arborcc.ir.steps'."""
    text = _COMMENT.sub("", STEP_HEADER.read_text())
    codes = dict(re.findall(r"\b([A-Z]+) = (\d+)", re.search(r"enum Code[^{]*\{([^}]*)\}", text).group(1)))
    names = re.findall(r'"([a-z]+)"', re.search(r"STEP_NAMES\[NUM_CODES\] = \{([^}]*)\}", text).group(1))
    assert names == native_step_table()[0]
    assert [int(c) for c in codes.values()] == list(range(len(OP_OF_CODE)))
    assert sorted(step_code_definitions(STEP_HEADER.read_text())) == sorted(codes)


def test_compiled_modules_carry_the_step_table():
    """The modules that take step codes were built from the header (the import-time check
    raises otherwise; here the exported tables are compared directly)."""
    import arborcc.compiler.native as compiler_native
    import arborcc.runtime.native as runtime_native

    names, flags = native_step_table()
    for module in (compiler_native, runtime_native):
        assert (list(module.STEP_CODES), list(module.STEP_FLAGS)) == (names, flags), module.__name__


def test_a_module_built_with_another_table_is_refused():
    import types

    import pytest

    from arborcc.ir.steps import check_native_step_codes

    names, flags = native_step_table()
    swapped = types.SimpleNamespace(__name__="fake.native", STEP_CODES=[names[1], names[0], *names[2:]],
                                    STEP_FLAGS=flags)
    with pytest.raises(ImportError, match="fake.native"):
        check_native_step_codes(swapped)
    check_native_step_codes(types.SimpleNamespace(__name__="fake.native", STEP_CODES=names, STEP_FLAGS=flags))


def test_the_op_flags_are_the_tables():
    for op, kind in STEP_KINDS.items():
        assert (op.code, op.sends, op.receives, op.reads_src, op.reads_dst, op.writes_dst) == tuple(kind)
        assert op.fused == (op.sends and op.receives)
    assert set(STEP_KINDS) == set(Op)


def test_the_scanners_find_known_shapes():
    """The scanners themselves: the shapes the step codes had before the table."""
    assert op_keyed_tables("STEP_CODE = {Op.SEND: 0, Op.RECV: 1}\nx = {op: 1 for op in Op}\n") == [1]
    assert op_keyed_tables("import arborcc.ir.model as m\nT = {m.Op.NOP: 8}\n") == [2]
    assert step_code_definitions("enum StepOp { S_SEND = 0, S_RECV, S_NOP };") == ["S_SEND", "S_RECV", "S_NOP"]
    assert step_code_definitions("enum Kind : int64_t { SEND = 0, CPY = 3, RE = 4 };") == ["SEND", "CPY", "RE"]
    assert step_code_definitions("constexpr int64_t NOP = 8;  // a nop") == ["NOP"]
    assert step_code_definitions("#define STEP_COPY 3\n") == ["STEP_COPY"]
    assert step_code_definitions("enum Undo { NEW_TB, SEND_OWNER };\nconstexpr int64_t TRACED_COPY = 0;") == []
