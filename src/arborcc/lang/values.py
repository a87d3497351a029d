"""Symbolic chunk values: what a buffer slot holds while a program is traced.

GC3 section 3.1 names three kinds of chunks: *input* chunks, identified by the
(rank, index) of the input buffer they start in; *reduction* chunks, the point-wise
reduction of several chunks, identified by the multiset of input chunks combined; and
*uninitialized* chunks (represented here by ``None``). Postconditions (section 3.2)
are stated with these values.

Reductions are built lazily as a DAG (``a.reduce(b)`` is O(1)), so a 1024-rank ring
does not copy ever-growing lists. Equality flattens a reduction to the sorted multiset of
its input chunks once and interns it: comparing the same final value against thousands
of output slots costs one flattening, not thousands.

``Chunk(origin_rank, origin_index, dst_rank=-1, dst_index=-1)`` and
``ReduceChunk(creation_rank, chunks)`` keep the constructor signatures the public GC3
tools use, so their user-defined collectives can build pre- and postconditions unchanged.

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

import weakref


class Chunk:
    """An input chunk: starts at ``(origin_rank, origin_index)`` of the input buffer.

    ``dst_rank``/``dst_index`` optionally record where the collective wants it (-1 when
    it goes to several places); they are informative and take no part in equality.
    """

    __slots__ = ("origin_rank", "origin_index", "dst_rank", "dst_index")

    def __init__(self, origin_rank: int, origin_index: int, dst_rank: int = -1, dst_index: int = -1):
        self.origin_rank = origin_rank
        self.origin_index = origin_index
        self.dst_rank = dst_rank
        self.dst_index = dst_index

    @property
    def count(self) -> int:
        return 1

    def reduce(self, dst: int, other: "Chunk | ReduceChunk") -> "ReduceChunk":
        """The reduction of this chunk with ``other``, created on rank ``dst``."""
        return ReduceChunk._combine(dst, self, other)

    def __eq__(self, other: object) -> bool:
        if type(other) is ReduceChunk:  # a reduction of one chunk is that chunk
            return other == self
        return (type(other) is Chunk and self.origin_rank == other.origin_rank
                and self.origin_index == other.origin_index)

    def __hash__(self) -> int:
        return hash((self.origin_rank, self.origin_index))

    def __lt__(self, other: "Chunk") -> bool:
        return (self.origin_rank, self.origin_index) < (other.origin_rank, other.origin_index)

    def __repr__(self) -> str:
        return f"Chunk({self.origin_rank}, {self.origin_index})"


class _Canonical:
    """The interned identity of a multiset of input chunks (see module docstring)."""

    __slots__ = ("key", "__weakref__")

    def __init__(self, key: tuple):
        self.key = key


_INTERNED: "weakref.WeakValueDictionary[tuple, _Canonical]" = weakref.WeakValueDictionary()


class ReduceChunk:
    """A reduction chunk: the point-wise reduction of a multiset of input chunks.

    Built either from an explicit list (``ReduceChunk(rank, [c0, c1])``, as the public
    GC3 tools' collectives do) or lazily from two operands by :meth:`reduce`.
    """

    __slots__ = ("creation_rank", "_parts", "_count", "_canon")

    def __init__(self, creation_rank: int, chunks=()):
        parts = tuple(chunks)
        for c in parts:
            if not isinstance(c, (Chunk, ReduceChunk)):
                raise TypeError(f"a ReduceChunk combines chunks, got {c!r}")
        self.creation_rank = creation_rank
        self._parts = parts
        self._count = sum(c.count for c in parts)
        self._canon = None

    @classmethod
    def _combine(cls, rank: int, a, b) -> "ReduceChunk":
        if b is None or a is None:
            raise TypeError("cannot reduce with an uninitialized chunk")
        node = cls.__new__(cls)
        node.creation_rank = rank
        node._parts = (a, b)
        node._count = a.count + b.count
        node._canon = None
        return node

    @property
    def count(self) -> int:
        """How many input chunks (with multiplicity) this reduction combines."""
        return self._count

    def reduce(self, dst: int, other: "Chunk | ReduceChunk") -> "ReduceChunk":
        return ReduceChunk._combine(self.creation_rank if dst == -1 else dst, self, other)

    def _canonical(self) -> _Canonical:
        if self._canon is None:
            leaves: list[tuple[int, int]] = []
            stack: list = [self]
            while stack:
                node = stack.pop()
                if type(node) is Chunk:
                    leaves.append((node.origin_rank, node.origin_index))
                elif node._canon is not None:
                    leaves.extend(node._canon.key)
                else:
                    stack.extend(node._parts)
            leaves.sort()
            key = tuple(leaves)
            canon = _INTERNED.get(key)
            if canon is None:
                canon = _Canonical(key)
                _INTERNED[key] = canon
            self._canon = canon
        return self._canon

    @property
    def chunks(self) -> list[Chunk]:
        """The input chunks combined, sorted, with multiplicity."""
        return [Chunk(r, i) for r, i in self._canonical().key]

    def contributions(self) -> tuple[tuple[int, int], ...]:
        """Sorted ``(origin_rank, origin_index)`` pairs, with multiplicity."""
        return self._canonical().key

    def sort(self) -> None:  # the public tools' API; our representation is always sorted
        return None

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if type(other) is Chunk:
            return self._count == 1 and self._canonical().key[0] == (other.origin_rank, other.origin_index)
        if type(other) is not ReduceChunk or self._count != other._count:
            return False
        return self._canonical() is other._canonical()

    def __hash__(self) -> int:
        key = self._canonical().key
        return hash(key[0]) if len(key) == 1 else hash(key)

    def __repr__(self) -> str:
        key = self._canonical().key
        shown = ", ".join(f"({r},{i})" for r, i in key[:6])
        more = f", ... {len(key) - 6} more" if len(key) > 6 else ""
        return f"ReduceChunk[{shown}{more}]"


def reduction_of(chunks) -> ReduceChunk:
    """The reduction of the given input chunks (helper for postconditions)."""
    return ReduceChunk(-1, list(chunks))


def describe(value) -> str:
    """A short human description of a slot value for error messages."""
    if value is None:
        return "uninitialized"
    if type(value) is Chunk:
        return f"input chunk of rank {value.origin_rank} index {value.origin_index}"
    key = value.contributions()
    if len(key) <= 4:
        return "reduction of " + ", ".join(f"(rank {r}, index {i})" for r, i in key)
    return f"reduction of {len(key)} chunks"
