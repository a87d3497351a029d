"""The import graph of the arborcc package, read from the source with ``ast``.

Nodes are modules (a package is its ``__init__``). Every import counts wherever it is
written - at module top, inside a function, in a package ``__init__`` - except under
``if TYPE_CHECKING:`` (never executed). Deferred imports count too: a string constant
that names an arborcc module (``"arborcc.verify.checker"`` in a package's lazy
``EXPORTS``, ``"arborcc.library.ring:ring_allreduce"`` in a registry, a command table)
is an edge to that module.

Importing ``a.b.c`` also runs the ``__init__`` of ``a`` and ``a.b``; that is an edge to
the node ``"a.b (init)"``, whose edges are only the imports that ``a/b/__init__.py``
executes when it is loaded (its top-level import statements). A lazy package's
``__init__`` executes none, so using one module of a package does not depend on the
others. ``from a.b import name`` where ``name`` is one of ``a.b``'s lazy exports is an
edge to the module that defines it.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

MODULE_STRING = re.compile(r"^(arborcc(?:\.\w+)+)(?::\w+)?$")


@dataclass
class Edge:
    target: str
    line: int
    how: str  #: the statement, for messages


@dataclass
class Module:
    name: str
    path: Path
    is_package: bool
    tree: ast.Module
    exports: dict[str, str] = field(default_factory=dict)
    edges: list[Edge] = field(default_factory=list)
    eager: list[Edge] = field(default_factory=list)  #: top-level imports (what loading runs)
    private_uses: list[str] = field(default_factory=list)


def module_name(root: Path, path: Path) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def load_modules(root: Path) -> dict[str, Module]:
    mods = {}
    for path in sorted(root.rglob("*.py")):
        name = module_name(root, path)
        tree = ast.parse(path.read_text(), filename=str(path))
        mods[name] = Module(name, path, path.name == "__init__.py", tree)
    for m in mods.values():
        if m.is_package:
            m.exports = _exports(m.tree)
    return mods


def _exports(tree: ast.Module) -> dict[str, str]:
    for node in tree.body:
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "EXPORTS" for t in node.targets)
                and isinstance(node.value, ast.Dict)):
            return {k.value: v.value for k, v in zip(node.value.keys, node.value.values)
                    if isinstance(k, ast.Constant) and isinstance(v, ast.Constant)}
    return {}


def _is_type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _walk(node: ast.AST, top: bool):
    """(node, at module top?) for every node, skipping TYPE_CHECKING blocks."""
    for child in ast.iter_child_nodes(node):
        if _is_type_checking(child):
            continue
        inner = top and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        yield child, top
        yield from _walk(child, inner)


def _resolve_relative(m: Module, level: int, module: str | None) -> str:
    base = m.name.split(".")
    if not m.is_package:
        base = base[:-1]
    base = base[:len(base) - (level - 1)] if level > 1 else base
    return ".".join(base + ([module] if module else []))


def build_graph(mods: dict[str, Module]) -> None:
    """Fill ``edges``, ``eager`` and ``private_uses`` of every module."""
    for m in mods.values():
        aliases: dict[str, str] = {}  # local name -> arborcc module it is bound to
        for node, top in _walk(m.tree, True):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] != "arborcc":
                        continue
                    _add_module(m, mods, a.name, node.lineno, f"import {a.name}", top)
                    aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else "arborcc"
            elif isinstance(node, ast.ImportFrom):
                src = _resolve_relative(m, node.level, node.module) if node.level else (node.module or "")
                if src.split(".")[0] != "arborcc":
                    continue
                for a in node.names:
                    how = f"from {src} import {a.name}"
                    sub = f"{src}.{a.name}"
                    if sub in mods:
                        _add_module(m, mods, sub, node.lineno, how, top)
                        aliases[a.asname or a.name] = sub
                        continue
                    target = mods.get(src)
                    if target is not None and a.name in target.exports:
                        _add_parents(m, mods, src + ".x", node.lineno, how, top)
                        _edge(m, target.exports[a.name], node.lineno, how, top)
                    else:
                        _add_module(m, mods, src, node.lineno, how, top)
                    if a.name.startswith("_") and not a.name.startswith("__") and src != m.name:
                        m.private_uses.append(f"{m.name}:{node.lineno}: {how}")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                hit = MODULE_STRING.match(node.value)
                if hit and hit.group(1) in mods and hit.group(1) != m.name:
                    _edge(m, hit.group(1), node.lineno, f"{node.value!r} (deferred import)", False)
        for node, _ in _walk(m.tree, True):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and node.attr.startswith("_") and not node.attr.startswith("__")
                    and aliases[node.value.id] != m.name):
                m.private_uses.append(f"{m.name}:{node.lineno}: {node.value.id}.{node.attr} "
                                      f"({aliases[node.value.id]})")


def _edge(m: Module, target: str, line: int, how: str, top: bool) -> None:
    e = Edge(target, line, how)
    m.edges.append(e)
    if top:
        m.eager.append(e)


def _add_parents(m: Module, mods: dict[str, Module], name: str, line: int, how: str, top: bool) -> None:
    parts = name.split(".")
    for i in range(1, len(parts)):
        pkg = ".".join(parts[:i])
        inside = m.name == pkg or m.name.startswith(pkg + ".")
        if pkg in mods and mods[pkg].is_package and not inside:
            _edge(m, f"{pkg} (init)", line, how, top)


def _add_module(m: Module, mods: dict[str, Module], name: str, line: int, how: str, top: bool) -> None:
    _add_parents(m, mods, name, line, how, top)
    if name != m.name:
        _edge(m, name, line, how, top)


def adjacency(mods: dict[str, Module]) -> dict[str, list[Edge]]:
    """Node -> edges, with the ``(init)`` nodes of packages."""
    adj: dict[str, list[Edge]] = {name: list(m.edges) for name, m in mods.items()}
    for name, m in mods.items():
        if m.is_package:
            adj[f"{name} (init)"] = list(m.eager)
    return adj


def cycles(adj: dict[str, list[Edge]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for start in sorted(adj):
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on_stack.add(v)
            targets = [e.target for e in adj.get(v, [])]
            if i < len(targets):
                work.append((v, i + 1))
                w = targets[i]
                if w not in index:
                    work.append((w, 0))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return out


def describe_cycle(comp: list[str], adj: dict[str, list[Edge]]) -> str:
    members = set(comp)
    lines = [" <-> ".join(comp)]
    for v in comp:
        for e in adj.get(v, []):
            if e.target in members:
                lines.append(f"    {v}:{e.line}: {e.how}")
    return "\n".join(lines)
