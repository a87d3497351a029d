"""Symbolic chunk values, as the verifier's messages describe them: multisets of
contributions ``(source rank, input chunk)``.

GC3 (section 3.1) identifies a reduction chunk by the list of input chunks combined
into it; the postconditions of every collective ask for each contribution *exactly
once*. So a value only needs to be known exactly while it has no repeated
contribution, and once a contribution is repeated it can never again satisfy a
postcondition (reductions only add). That gives a compact exact representation:

* ``None`` - uninitialized memory;
* ``(c, mask)`` - contributions ``(r, c)`` for every bit ``r`` of the integer ``mask``
  (the common case: one input chunk index, a set of ranks);
* :class:`Mixed` - several chunk indices ``{c: mask}`` and a flag ``dup`` recording
  that some contribution was added twice.

Reduction is the multiset sum; it is commutative and associative, like the runtime's
sum/prod/max/min reductions it stands for. The symbolic run follows values in compiled
code (``verify/csrc/symbolic.cpp``); its findings hand a wrong output chunk's value to
:func:`compare` in this form (:func:`arborcc.verify.findings.held_value`).

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations


class Mixed:
    """A value with several input chunk indices, or with a repeated contribution."""

    __slots__ = ("parts", "dup")

    def __init__(self, parts: dict[int, int], dup: bool):
        self.parts = parts
        self.dup = dup

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mixed) and self.parts == other.parts and self.dup == other.dup

    def __hash__(self) -> int:
        return hash((tuple(sorted(self.parts.items())), self.dup))

    def __repr__(self) -> str:
        return f"Mixed({self.parts!r}, dup={self.dup})"


def _parts(v) -> tuple[dict[int, int], bool]:
    if type(v) is tuple:
        return {v[0]: v[1]}, False
    return v.parts, v.dup


def mask_ranks(mask: int) -> list[int]:
    """The ranks whose bits are set in ``mask``, increasing."""
    out = []
    r = 0
    while mask:
        if mask & 1:
            out.append(r)
        mask >>= 1
        r += 1
    return out


def format_ranks(ranks: list[int], limit: int = 8) -> str:
    """``{0,1,2}`` or ``{0..1023}`` or ``{0,1,...(40 ranks)}`` for long lists."""
    if not ranks:
        return "{}"
    if len(ranks) > 2 and ranks[-1] - ranks[0] + 1 == len(ranks):
        return f"{{{ranks[0]}..{ranks[-1]}}}"
    if len(ranks) <= limit:
        return "{" + ",".join(map(str, ranks)) + "}"
    return "{" + ",".join(map(str, ranks[:limit])) + f",...({len(ranks)} ranks)}}"


def compare(actual, chunk: int, mask: int) -> str | None:
    """None if ``actual`` is exactly ``chunk`` of the ranks in ``mask`` once each, else what differs."""
    if actual == (chunk, mask):
        return None
    if actual is None:
        return "is uninitialized"
    parts, dup = _parts(actual)
    problems = []
    got = parts.get(chunk, 0)
    missing = mask_ranks(mask & ~got)
    extra = mask_ranks(got & ~mask)
    if missing:
        problems.append(f"misses chunk {chunk} of ranks {format_ranks(missing)}")
    if extra:
        problems.append(f"has extra chunk {chunk} of ranks {format_ranks(extra)}")
    for c, m in sorted(parts.items()):
        if c != chunk:
            problems.append(f"has chunk {c} of ranks {format_ranks(mask_ranks(m))}")
    if dup:
        problems.append("has some contribution more than once")
    return ", ".join(problems) if problems else "differs"
