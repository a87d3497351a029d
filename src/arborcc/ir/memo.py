"""Answers remembered for the length of one call: a table that exists only inside
:meth:`CallMemo.active` blocks (nested blocks share the outermost one's), so repeated
top-level calls - a benchmark timing ``synthesize`` again - never reuse an earlier
call's work.

Entries are keyed by value, or by an object's identity (:meth:`CallMemo.get_for`): the
object is kept with its answer, so its id cannot pass to another object while the table
lives. Identity keys assume the object is not changed in place inside the block, as
compiled algorithms are not (:func:`arborcc.ir.aliasing.with_modes` and the converters
make new ones).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from typing import Any


class CallMemo:
    """A table of answers, alive inside :meth:`active` blocks; outside them nothing is kept."""

    def __init__(self) -> None:
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
        """The answer remembered for this very object (and ``key``), or None."""
        hit = self.get((id(obj), key))
        return hit[1] if hit is not None and hit[0] is obj else None

    def put_for(self, obj: object, value: Any, key: Hashable = ()) -> None:
        self.put((id(obj), key), (obj, value))
