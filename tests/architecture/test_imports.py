"""The package's shape: imports go one way (no cycles, counting imports inside functions,
package ``__init__`` files and deferred imports), no private name crosses a module
boundary, and lazy package exports do not collide with submodules. See
``importgraph.py`` for how the graph is read."""

from __future__ import annotations

from pathlib import Path

import arborcc
from architecture.importgraph import adjacency, build_graph, cycles, describe_cycle, load_modules

ROOT = Path(arborcc.__file__).parent


def _graph():
    mods = load_modules(ROOT)
    build_graph(mods)
    return mods


def test_no_import_cycles():
    mods = _graph()
    adj = adjacency(mods)
    found = cycles(adj)
    assert not found, "import cycles:\n" + "\n".join(describe_cycle(c, adj) for c in found)


def test_no_private_names_cross_modules():
    uses = [u for m in _graph().values() for u in m.private_uses]
    assert not uses, "private names used across modules:\n" + "\n".join(uses)


def test_lazy_exports_name_existing_things_and_no_submodule():
    mods = _graph()
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


def test_the_graph_reader_finds_known_shapes():
    """The reader itself: a function-level import, a lazy export and a deferred string
    import are edges; an import under TYPE_CHECKING is not."""
    mods = _graph()
    assert any(e.target == "arborcc.verify.checker" for e in mods["arborcc.verify"].edges)
    found = cycles({"a": [_e("b")], "b": [_e("c")], "c": [_e("a")], "d": [_e("a")]})
    assert found == [["a", "b", "c"]]
    assert cycles({"a": [_e("b")], "b": []}) == []


def _e(target):
    from architecture.importgraph import Edge

    return Edge(target, 0, "")
