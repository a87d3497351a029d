"""Every cache arborcc keeps, of two kinds, each registered here by name.

- :class:`CallMemo` - answers remembered for the length of one call: a table that exists
  only inside :meth:`CallMemo.active` blocks (nested blocks share the outermost one's), so
  repeated top-level calls - a benchmark timing ``synthesize`` again - never reuse an
  earlier call's work, and nothing is kept after the call. Each names the call that opens
  its block (``opened_by``: ``synthesize``, ``verify_algorithm``, ...); outside a block
  ``get`` finds nothing and ``put`` keeps nothing.
- :class:`BoundedCache` - answers a long-lived process needs across calls (a communicator
  verifies and lowers each algorithm once; a sweep over sizes simulates one compiled
  program): a least-recently-used table of at most ``size`` entries, inserting one more
  evicts the least recently used. ``weak=True`` keys by objects held weakly: an entry also
  goes when its object is garbage-collected (a topology's routes).

Entries are keyed by value (:meth:`get` / :meth:`put`), or by the identity of one object
(:meth:`get_for`) or of several (:meth:`get_for_each`), with a value key beside them. An
identity-keyed entry keeps its objects (weakly for ``weak=True``, then the entry dies with
them), so their ids cannot pass to other objects while the entry lives. Identity keys
assume the objects are not changed in place while the entry lives, as compiled
algorithms and topologies are not (:func:`arborcc.ir.aliasing.with_modes` and the
converters make new ones).

Every instance registers under its ``name`` (``"runtime.plan.verified"``): :func:`caches`
lists them and :func:`clear_caches` empties every long-lived one (a benchmark timing a
cold start; call-scoped ones are empty outside their calls). ``get`` answers None when
nothing is kept, so an answer that may be None is stored wrapped (``(answer,)``).
docs/architecture.md ("Caches") lists who uses which.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

#: every cache by name (the registry, not itself a cache: it holds one entry per
#: instance the modules create when they are imported)
_REGISTRY: dict[str, "Cache"] = {}


class Cache:
    """What every cache has: a registered ``name`` and a ``purpose`` (for the listing)."""

    kind = ""

    def __init__(self, name: str, purpose: str) -> None:
        self.name = name
        self.purpose = purpose
        _REGISTRY[name] = self  # a module imported again replaces its caches

    def get(self, key: Hashable) -> Any:
        raise NotImplementedError

    def put(self, key: Hashable, value: Any) -> None:
        raise NotImplementedError

    def clear(self) -> None:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def get_for(self, obj: object, key: Hashable = ()) -> Any:
        """The answer remembered for this very object (and ``key``), or None."""
        return self.get_for_each((obj,), key)

    def put_for(self, obj: object, value: Any, key: Hashable = ()) -> None:
        self.put_for_each((obj,), value, key)

    def get_for_each(self, objs: Sequence[object], key: Hashable = ()) -> Any:
        """The answer remembered for these very objects, in this order (and ``key``), or None."""
        hit = self.get((tuple(map(id, objs)), key))  # the ids fix how many objects the entry has
        return hit[1] if hit is not None and all(a is b for a, b in zip(hit[0], objs)) else None

    def put_for_each(self, objs: Sequence[object], value: Any, key: Hashable = ()) -> None:
        self.put((tuple(map(id, objs)), key), (tuple(objs), value))


class CallMemo(Cache):
    """A table of answers, alive inside :meth:`active` blocks; outside them nothing is kept.

    ``opened_by``: the call whose block it lives in (for the listing and the docs)."""

    kind = "call-scoped"

    def __init__(self, name: str, opened_by: str, purpose: str = "") -> None:
        super().__init__(name, purpose)
        self.opened_by = opened_by
        self.table: dict | None = None

    @contextmanager
    def active(self) -> Iterator[None]:
        outer = self.table
        if outer is None:
            self.table = {}
        try:
            yield
        finally:
            self.table = outer

    def get(self, key: Hashable) -> Any:
        """The answer remembered for ``key``, or None."""
        return None if self.table is None else self.table.get(key)

    def put(self, key: Hashable, value: Any) -> None:
        if self.table is not None:
            self.table[key] = value

    def get_for(self, obj: object, key: Hashable = ()) -> Any:
        # get_for_each((obj,), key) without its generality: the lowering asks this per tree
        table = self.table
        hit = None if table is None else table.get(((id(obj),), key))
        return hit[1] if hit is not None and hit[0][0] is obj else None

    def put_for(self, obj: object, value: Any, key: Hashable = ()) -> None:
        if self.table is not None:
            self.table[((id(obj),), key)] = ((obj,), value)

    def clear(self) -> None:
        if self.table is not None:
            self.table.clear()

    def __len__(self) -> int:
        return 0 if self.table is None else len(self.table)


class BoundedCache(Cache):
    """At most ``size`` answers, the least recently used evicted first; kept across calls.

    ``weak=True``: identity-keyed entries hold their objects weakly and go when one of
    them is garbage-collected (value keys are not allowed then). Safe to share between
    threads (a communicator's calls may come from several)."""

    kind = "bounded"

    def __init__(self, name: str, size: int, purpose: str = "", weak: bool = False) -> None:
        if size < 1:
            raise ValueError(f"cache {name}: size must be at least 1, got {size}")
        super().__init__(name, purpose)
        self.size = size
        self.weak = weak
        self.table: OrderedDict = OrderedDict()
        self.lock = threading.Lock()
        #: (key, weak reference) of entries whose object died: removed at the next use (a
        #: weak reference's callback may run inside any allocation, even this table's own)
        self.dead: list = []

    def get(self, key: Hashable) -> Any:
        """The answer remembered for ``key`` (now the most recently used), or None."""
        if self.weak:
            raise TypeError(f"cache {self.name} holds objects weakly: use get_for")
        return self._lookup(key)

    def put(self, key: Hashable, value: Any) -> None:
        if self.weak:
            raise TypeError(f"cache {self.name} holds objects weakly: use put_for")
        self._store(key, value)

    def get_for(self, obj: object, key: Hashable = ()) -> Any:
        # get_for_each((obj,), key) without its generality: routes are asked for per hop
        hit = self._lookup(((id(obj),), key))
        if hit is None:
            return None
        kept = hit[0][0]() if self.weak else hit[0][0]
        return hit[1] if kept is obj else None

    def get_for_each(self, objs: Sequence[object], key: Hashable = ()) -> Any:
        if not self.weak:
            return super().get_for_each(objs, key)
        hit = self._lookup((tuple(map(id, objs)), key))
        if hit is None:
            return None
        refs, value = hit
        return value if all(r() is o for r, o in zip(refs, objs)) else None

    def put_for_each(self, objs: Sequence[object], value: Any, key: Hashable = ()) -> None:
        if not self.weak:
            super().put_for_each(objs, value, key)
            return
        full = (tuple(map(id, objs)), key)
        dead = self.dead

        def gone(ref: weakref.ref) -> None:  # an object died: its entry goes at the next use
            dead.append((full, ref))

        self._store(full, (tuple(weakref.ref(o, gone) for o in objs), value))

    def _forget_dead(self) -> None:
        """Drop the entries whose objects died (if still theirs); under the lock."""
        while self.dead:
            full, ref = self.dead.pop()
            entry = self.table.get(full)
            if entry is not None and any(r is ref for r in entry[0]):
                del self.table[full]

    def _lookup(self, key: Hashable) -> Any:
        with self.lock:
            self._forget_dead()
            hit = self.table.get(key)
            if hit is not None:
                self.table.move_to_end(key)
            return hit

    def _store(self, key: Hashable, value: Any) -> None:
        with self.lock:
            self._forget_dead()
            self.table[key] = value
            self.table.move_to_end(key)
            while len(self.table) > self.size:
                self.table.popitem(last=False)

    def clear(self) -> None:
        with self.lock:
            self.table.clear()
            self.dead.clear()

    def __len__(self) -> int:
        with self.lock:
            self._forget_dead()
            return len(self.table)


def caches() -> list[Cache]:
    """Every registered cache, by name."""
    return [_REGISTRY[name] for name in sorted(_REGISTRY)]


def clear_caches() -> None:
    """Empty every cache (the next call starts cold, as a benchmark timing a cold run needs)."""
    for cache in _REGISTRY.values():
        cache.clear()
