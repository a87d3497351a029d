"""The package's shape: imports go one way (no cycles, counting imports inside functions,
package ``__init__`` files and deferred imports; between packages, only down the layers
of :data:`MAY_IMPORT`), no private name crosses a module boundary, and lazy package
exports do not collide with submodules. See ``importgraph.py`` for how the graph is read."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import arborcc
from architecture.importgraph import Edge, adjacency, build_graph, cycles, describe_cycle, load_modules

ROOT = Path(arborcc.__file__).parent
TOP = "(top)"  #: the plain helpers: errors, limits, files, documents, sizes, lazy, ...
#: package -> the packages it may import: the layers above it and, as listed, within its
#: own (docs/architecture.md, "Imports go one way"); ``cli`` may import every package
MAY_IMPORT = {
    TOP: {TOP},
    "topology": {TOP},
    "ir": {TOP},
    "verify": {TOP, "ir"},
    "lang": {TOP, "ir", "compiler"},
    "compiler": {TOP, "ir", "lang"},
    "library": {TOP, "ir", "lang", "verify"},
    "compat": {TOP, "ir", "lang", "topology", "verify"},
    "sim": {TOP, "ir", "topology"},
    "synth": {TOP, "ir", "lang", "library", "sim", "topology", "verify"},
    "tune": {TOP, "ir", "library", "sim", "synth", "topology", "verify"},
    "runtime": {TOP, "ir", "library", "topology", "verify"},
    "torch": {TOP, "ir", "runtime", "topology"},
    "bench": {TOP, "ir", "runtime", "topology"},
}
#: (package, module) imports against the order, each made inside a function
AGAINST_THE_ORDER = {("bench", "arborcc.cli.output")}


@pytest.fixture(scope="module")
def graph():
    """The package's import graph, read once for this module's tests (none changes it)."""
    mods = load_modules(ROOT)
    build_graph(mods)
    return mods


def test_no_import_cycles(graph):
    mods = graph
    adj = adjacency(mods)
    found = cycles(adj)
    assert not found, "import cycles:\n" + "\n".join(describe_cycle(c, adj) for c in found)


def package_of(mods, name: str) -> str:
    """``arborcc.ir.model`` -> ``ir``; a module of the package's top (``arborcc.errors``) -> TOP."""
    name = name.removesuffix(" (init)")
    parts = name.split(".")
    if len(parts) == 1 or (len(parts) == 2 and not mods[name].is_package):
        return TOP
    return parts[1]


def layer_violations(mods) -> list[str]:
    found = []
    for m in mods.values():
        here = package_of(mods, m.name)
        allowed = MAY_IMPORT.get(here)
        if allowed is None:  # cli: every package
            continue
        for e in m.edges:
            there = package_of(mods, e.target)
            target = e.target.removesuffix(" (init)")
            against = any(pkg == here and (module == target or module.startswith(target + "."))
                          for pkg, module in AGAINST_THE_ORDER)  # (a parent package's __init__ runs too)
            if there != here and there not in allowed and not against:
                found.append(f"{m.name}:{e.line}: {e.how} ({here} may import {', '.join(sorted(allowed))})")
    return found


def test_packages_import_only_the_layers_above_them(graph):
    """The runtime never imports ``arborcc bench`` (bench sits above it), the IR no
    stage above it, and so on down the table of MAY_IMPORT."""
    found = layer_violations(graph)
    assert not found, "imports against the layers:\n" + "\n".join(found)


def test_the_layer_check_sees_an_import_against_the_order(graph):
    mods = dict(graph)  # the shared graph stays as read: the added edge goes on a copy of one module
    runtime_module = next(m for m in mods.values() if m.name.startswith("arborcc.runtime."))
    runtime_module = mods[runtime_module.name] = dataclasses.replace(
        runtime_module, edges=[*runtime_module.edges, Edge("arborcc.bench.cli", 1, "import arborcc.bench.cli")])
    allowed = ", ".join(sorted(MAY_IMPORT["runtime"]))
    assert layer_violations(mods) == [f"{runtime_module.name}:1: import arborcc.bench.cli "
                                      f"(runtime may import {allowed})"]


def test_no_private_names_cross_modules(graph):
    uses = [u for m in graph.values() for u in m.private_uses]
    assert not uses, "private names used across modules:\n" + "\n".join(uses)


def test_lazy_exports_name_existing_things_and_no_submodule(graph):
    mods = graph
    problems = []
    for m in mods.values():
        for name, module in m.exports.items():
            if f"{m.name}.{name}" in mods:
                problems.append(f"{m.name}: export {name!r} is also a submodule")
            if module not in mods:
                problems.append(f"{m.name}: export {name!r} names unknown module {module}")
                continue
            target = mods[module].tree
            defined = {n.name for n in target.body if hasattr(n, "name")}
            for node in target.body:
                for t in getattr(node, "targets", [getattr(node, "target", None)]):
                    if t is not None and hasattr(t, "id"):
                        defined.add(t.id)
                for a in getattr(node, "names", []) if node.__class__.__name__ == "ImportFrom" else []:
                    defined.add(a.asname or a.name)
            if name not in defined:
                problems.append(f"{m.name}: export {name!r} is not defined in {module}")
    assert not problems, "\n".join(problems)


def test_the_graph_reader_finds_known_shapes(graph):
    """The reader itself: a function-level import, a lazy export and a deferred string
    import are edges; an import under TYPE_CHECKING is not."""
    mods = graph
    assert any(e.target == "arborcc.verify.checker" for e in mods["arborcc.verify"].edges)
    found = cycles({"a": [_e("b")], "b": [_e("c")], "c": [_e("a")], "d": [_e("a")]})
    assert found == [["a", "b", "c"]]
    assert cycles({"a": [_e("b")], "b": []}) == []


def _e(target):
    from architecture.importgraph import Edge

    return Edge(target, 0, "")
