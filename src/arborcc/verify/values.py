"""Symbolic chunk values: multisets of contributions ``(source rank, input chunk)``.

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

Reduction (``add``) is the multiset sum; it is commutative and associative, like the
runtime's sum/prod/max/min reductions it stands for.

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


def add(a, b):
    """The reduction of two values (``None`` if either is uninitialized)."""
    if a is None or b is None:
        return None
    if type(a) is tuple and type(b) is tuple and a[0] == b[0]:
        if a[1] & b[1]:
            return Mixed({a[0]: a[1] | b[1]}, True)
        return (a[0], a[1] | b[1])
    pa, da = _parts(a)
    pb, db = _parts(b)
    merged = dict(pa)
    dup = da or db
    for c, m in pb.items():
        old = merged.get(c, 0)
        if old & m:
            dup = True
        merged[c] = old | m
    if not dup and len(merged) == 1:
        (c, m), = merged.items()
        return (c, m)
    return Mixed(merged, dup)


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


# ---------------------------------------------------------------------------- runs
# Steps move ranges of chunks, and a range usually holds consecutive input chunks of the
# same ranks, so the simulator keeps values as *runs* ``(length, v)`` of consecutive
# slots rather than one value per slot. ``v`` is
#
# * ``None`` - every slot uninitialized;
# * a pair ``(c, mask)`` - slot ``j`` holds ``(c + j, mask)`` (a single slot's value is
#   the run of length 1 with the same pair);
# * a list of ``length`` slot values - anything else (lists are never mutated).
#
# A sequence of slot values (what a step reads, sends or writes) is a list of runs.


def run_values(length: int, v) -> list:
    """The slot values of the run ``(length, v)``."""
    if v is None:
        return [None] * length
    if type(v) is tuple:
        c, mask = v
        return [(c + j, mask) for j in range(length)]
    return v


def run_tail(v, skip: int):
    """``v`` without its first ``skip`` slots."""
    if type(v) is tuple:
        return (v[0] + skip, v[1])
    if v is None:
        return None
    return v[skip:]


def run_head(v, length: int):
    """The first ``length`` slots of ``v``."""
    return v[:length] if type(v) is list else v


def _add_run(length: int, a, b):
    """The slot-wise reduction ``add`` of two runs of the same length."""
    if a is None or b is None:
        return None
    if type(a) is tuple and type(b) is tuple and a[0] == b[0] and not a[1] & b[1]:
        return (a[0], a[1] | b[1])
    return [add(x, y) for x, y in zip(run_values(length, a), run_values(length, b))]


def add_runs(a: list, b: list) -> list:
    """Slot-wise ``add`` of two run lists covering the same number of slots."""
    if len(a) == 1 and len(b) == 1:
        (n, va), (_, vb) = a[0], b[0]
        if type(va) is tuple and type(vb) is tuple and va[0] == vb[0] and not va[1] & vb[1]:
            return [(n, (va[0], va[1] | vb[1]))]  # the common case, as in _add_run
        return [(n, _add_run(n, va, vb))]
    out = []
    ia = ib = 0
    la, va = a[0]
    lb, vb = b[0]
    while True:
        n = min(la, lb)
        out.append((n, _add_run(n, run_head(va, n), run_head(vb, n))))
        la -= n
        lb -= n
        if la:
            va = run_tail(va, n)
        else:
            ia += 1
            if ia == len(a):  # both lists end here: they cover the same slots
                return out
            la, va = a[ia]
        if lb:
            vb = run_tail(vb, n)
        else:
            ib += 1
            lb, vb = b[ib]


def first_uninitialized(runs: list) -> int | None:
    """Index of the first uninitialized slot of a run list, None when all hold data."""
    pos = 0
    for length, v in runs:
        if v is None:
            return pos
        if type(v) is list and None in v:
            return pos + v.index(None)
        pos += length
    return None


def fit_runs(runs: list, count: int) -> list:
    """``runs`` cut or padded with uninitialized slots to ``count`` slots."""
    out = []
    left = count
    for length, v in runs:
        if left <= 0:
            break
        if length > left:
            length, v = left, run_head(v, left)
        out.append((length, v))
        left -= length
    if left > 0:
        out.append((left, None))
    return out


def merge_runs(runs: list) -> list:
    """The same slot values with neighbouring uninitialized runs, and runs that continue
    each other's chunks with the same ranks, joined into one."""
    out = [runs[0]]
    for length, v in runs[1:]:
        plen, pv = out[-1]
        if (v is None and pv is None) or (type(v) is tuple and type(pv) is tuple and pv[1] == v[1]
                                         and pv[0] + plen == v[0]):
            out[-1] = (plen + length, pv)
        else:
            out.append((length, v))
    return out
