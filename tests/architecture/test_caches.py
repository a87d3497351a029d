"""One cache mechanism: every cache in the package is an instance of :mod:`arborcc.memo`'s
classes (call-scoped :class:`~arborcc.memo.CallMemo` or size-bounded
:class:`~arborcc.memo.BoundedCache`), so it can be listed, cleared and checked.

The scan reads the source with ``ast``: a module-level name bound to an empty mutable
container (``{}``, ``[]``, ``dict()``, ``OrderedDict()``, ``set()``, a weak dictionary...)
that a function of the module fills (item assignment, ``append``/``insert``/``update``/
``setdefault``/..., or ``global`` and rebinding) is a cache kept outside the mechanism, and
so is any ``functools.lru_cache`` / ``functools.cache`` decorator. :data:`NOT_CACHES` lists
the module-level tables that are not caches, each with the reason.
"""

from __future__ import annotations

import ast
import gc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import arborcc
from arborcc.memo import BoundedCache, CallMemo, caches, clear_caches

ROOT = Path(arborcc.__file__).parent
#: the mechanism itself (its registry of caches is not one)
MECHANISM = ROOT / "memo.py"

#: module-level tables filled by functions that are not caches: "module:name" -> why
NOT_CACHES = {
    # settings of this process (``--limit NAME=VALUE``), not answers remembered
    "arborcc.limits:_OVERRIDES": "the --limit values in force",
    # defaults raised for a block of code (raised_default), restored after it
    "arborcc.limits:_RAISED": "limits raised for a block",
    # constant tables that need torch, so they are built on first use, never change after
    "arborcc.torch.ops:_tables": "constant torch dtype/operator tables, built once",
    # interning: a canonical object per multiset of chunks, which identity comparisons
    # need to be correct; weak values, so it holds only what is alive elsewhere
    "arborcc.lang.values:_INTERNED": "interning (weak values), not a cache",
    # stacks of the DSL's open ``with`` blocks, emptied as the blocks close
    "arborcc.lang.program:_ACTIVE": "the open Program blocks",
    "arborcc.lang.program:_RECORDERS": "the open recording_programs blocks",
}

EMPTY_CONTAINERS = {"dict", "list", "set", "OrderedDict", "defaultdict", "deque", "WeakValueDictionary",
                    "WeakKeyDictionary", "WeakSet"}
MUTATING_METHODS = {"append", "appendleft", "insert", "extend", "update", "setdefault", "add", "pop", "popitem",
                    "move_to_end", "clear", "remove", "discard"}
CACHE_DECORATORS = {"lru_cache", "cache"}


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _callee_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _is_empty_container(value: ast.AST | None) -> bool:
    if isinstance(value, (ast.Dict, ast.List, ast.Set)):
        return not (getattr(value, "keys", None) or getattr(value, "elts", None))
    return isinstance(value, ast.Call) and _callee_name(value.func) in EMPTY_CONTAINERS


def _module_level_containers(tree: ast.Module) -> dict[str, int]:
    """Name -> line of every module-level binding to an empty mutable container."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and _is_empty_container(node.value):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    found[t.id] = node.lineno
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and _is_empty_container(node.value):
            found[node.target.id] = node.lineno
    return found


def _filled_in_functions(tree: ast.Module) -> set[str]:
    """Names a function of the module fills or rebinds (``global``)."""
    filled = set()
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        for node in ast.walk(fn):
            targets = []
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
                targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for t in targets:
                if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name):
                    filled.add(t.value.id)
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.attr in MUTATING_METHODS):
                filled.add(node.func.value.id)
            if isinstance(node, ast.Global):
                filled.update(node.names)
    return filled


def _cache_decorators(tree: ast.Module) -> list[tuple[str, int]]:
    out = []
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for d in fn.decorator_list:
                name = _callee_name(d.func if isinstance(d, ast.Call) else d)
                if name in CACHE_DECORATORS:
                    out.append((fn.name, d.lineno))
    return out


def caches_outside_the_mechanism(root: Path = ROOT) -> list[str]:
    """``module:line: name (why)`` for every cache the scan finds outside :mod:`arborcc.memo`."""
    problems = []
    for path in sorted(root.rglob("*.py")):
        if path == MECHANISM:
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        module = _module_name(path, root)
        filled = _filled_in_functions(tree)
        for name, line in _module_level_containers(tree).items():
            if name in filled and f"{module}:{name}" not in NOT_CACHES:
                problems.append(f"{module}:{line}: {name} is a module-level table filled by functions")
        for name, line in _cache_decorators(tree):
            problems.append(f"{module}:{line}: {name} is decorated with a functools cache")
    return problems


def test_no_module_level_cache_outside_the_mechanism():
    problems = caches_outside_the_mechanism()
    assert not problems, ("caches outside arborcc.memo (use its CallMemo or BoundedCache, or list a table "
                          "that is not a cache in NOT_CACHES with the reason):\n" + "\n".join(problems))


def test_the_allow_list_names_tables_that_exist():
    """An entry of NOT_CACHES whose table is gone is dead: remove it."""
    missing = []
    for entry in NOT_CACHES:
        module, name = entry.split(":")
        path = ROOT.parent.joinpath(*module.split(".")).with_suffix(".py")
        if not path.exists() or name not in _module_level_containers(ast.parse(path.read_text())):
            missing.append(entry)
    assert not missing, f"NOT_CACHES lists tables that no longer exist: {missing}"


def test_the_scan_finds_the_shapes_of_a_cache(tmp_path):
    """The scan itself: a filled module-level dict, a list appended to, an OrderedDict,
    ``global`` rebinding and ``lru_cache`` are found; a constant table and a local dict are not."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "caching.py").write_text(
        "from collections import OrderedDict\nimport functools\n"
        "_A = {}\n_B: list = []\n_C = OrderedDict()\n_D = None\nTABLE = {'x': 1}\n_E = {}\n"
        "def f(k):\n    _A[k] = 1\n    _B.append(k)\n    _C.move_to_end(k)\n    global _D\n    _D = k\n"
        "    local = {}\n    local[k] = 2\n    return TABLE[k], _E.get(k)\n"
        "@functools.lru_cache(maxsize=8)\ndef g(k):\n    return k\n"
        "@functools.cache\ndef h(k):\n    return k\n")
    found = "\n".join(caches_outside_the_mechanism(pkg))
    for name in ("_A", "_B", "_C", "g is decorated", "h is decorated"):
        assert name in found, name
    for name in ("TABLE", "_E", "local", "_D"):  # _D is bound to None, not to a container
        assert f" {name} " not in found, name


def test_cache_names_are_unique_and_every_cache_is_registered():
    """Every module-level CallMemo/BoundedCache has a literal name no other has, and
    importing its module registers it (so clear_caches reaches it)."""
    import importlib

    names: dict[str, str] = {}
    duplicates = []
    for path in sorted(ROOT.rglob("*.py")):
        if path == MECHANISM:
            continue
        module = _module_name(path)
        for node in ast.parse(path.read_text()).body:
            value = getattr(node, "value", None)
            if (isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(value, ast.Call)
                    and _callee_name(value.func) in ("CallMemo", "BoundedCache")):
                assert value.args and isinstance(value.args[0], ast.Constant), f"{module}:{node.lineno}: name it"
                name = value.args[0].value
                if name in names:
                    duplicates.append(f"{name}: {names[name]} and {module}")
                names[name] = module
    assert not duplicates, duplicates
    assert len(names) >= 10  # the scan sees the caches the package has
    for name, module in names.items():
        importlib.import_module(module)
    assert set(names) <= {c.name for c in caches()}


def test_a_bounded_cache_evicts_the_least_recently_used():
    cache = BoundedCache("test.bounded", 3)
    for k in range(3):
        cache.put(k, str(k))
    assert cache.get(0) == "0"  # 0 is now the most recently used
    cache.put(3, "3")  # one over the bound: 1, the least recently used, goes
    assert len(cache) == 3
    assert cache.get(1) is None
    assert [cache.get(k) for k in (0, 2, 3)] == ["0", "2", "3"]


def test_a_bounded_cache_keyed_by_identity_keeps_its_objects_and_tells_them_apart():
    cache = BoundedCache("test.identity", 2)
    a, b = [1], [1]  # equal values, different objects
    cache.put_for(a, "a")
    assert cache.get_for(a) == "a"
    assert cache.get_for(b) is None
    cache.put_for_each((a, b), "ab", key="k")
    assert cache.get_for_each((a, b), key="k") == "ab"
    assert cache.get_for_each((b, a), key="k") is None
    assert cache.get_for_each((a, b)) is None  # another value key
    cache.put_for(b, "b")  # a third entry: the oldest (a alone) goes
    assert cache.get_for(a) is None and len(cache) == 2


def test_a_weak_bounded_cache_drops_an_entry_with_its_object():
    class Thing:
        pass

    cache = BoundedCache("test.weak", 4, weak=True)
    thing, other = Thing(), Thing()
    cache.put_for(thing, "kept")
    cache.put_for(other, "other")
    assert cache.get_for(thing) == "kept"
    del thing
    gc.collect()
    assert len(cache) == 1 and cache.get_for(other) == "other"
    with pytest.raises(TypeError):
        cache.put("value key", 1)


def test_a_call_memo_keeps_nothing_outside_its_block():
    memo = CallMemo("test.call", opened_by="the test")
    memo.put("k", 1)  # outside a block: not kept
    assert memo.get("k") is None and len(memo) == 0
    obj = object()
    with memo.active():
        memo.put("k", 1)
        memo.put_for(obj, 2)
        with memo.active():  # a nested block shares the outer table
            assert memo.get("k") == 1 and memo.get_for(obj) == 2
        assert memo.get("k") == 1
    assert memo.get("k") is None and memo.get_for(obj) is None and len(memo) == 0
    with memo.active():  # the next call starts empty
        assert memo.get("k") is None


def test_clear_caches_empties_every_bounded_cache():
    cache = BoundedCache("test.cleared", 2)
    cache.put("k", 1)
    clear_caches()
    assert len(cache) == 0
    assert all(len(c) == 0 for c in caches() if isinstance(c, BoundedCache))


@settings(max_examples=60, deadline=None, database=None)
@given(size=st.integers(1, 4), ops=st.lists(st.tuples(st.booleans(), st.integers(0, 6)), max_size=40))
def test_a_bounded_cache_behaves_as_a_least_recently_used_list(size, ops):
    """Any sequence of puts and gets: the cache answers as a list of at most ``size``
    keys, most recently used last, would (a model of the rule, not of the code)."""
    cache = BoundedCache("test.model", size)
    model: list[int] = []
    for is_put, key in ops:
        if is_put:
            cache.put(key, key * 10)
            if key in model:
                model.remove(key)
            model.append(key)
            del model[:-size]
        else:
            assert cache.get(key) == (key * 10 if key in model else None)
            if key in model:
                model.remove(key)
                model.append(key)
        assert len(cache) == len(model) <= size


def test_the_route_cache_lets_a_topology_go():
    """The routes kept for a topology do not keep it alive (they once held it, so every
    topology ever routed stayed in memory)."""
    import weakref

    from arborcc.topology.machines import build_machine

    topology = build_machine("dgx1v")
    topology.route(topology.ranks[0], topology.ranks[5])
    gone = weakref.ref(topology)
    del topology
    gc.collect()
    assert gone() is None
