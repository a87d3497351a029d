"""Which algorithm a call runs: a communicator's plan.

A plan holds algorithms loaded from MSCCL XML (or arborcc JSON) files and picks one for
a call with MSCCL's selection rules (GC3 section 6; msccl-tools' runtimes): the
collective and rank count match, the call's mode (in place or not) is one the algorithm
declares, the root matches for rooted collectives, ``min_bytes <= size <= max_bytes``
(``max_bytes`` 0: no limit), and the element count times the collective's size
multiplier divides into the algorithm's chunks per loop. The first match in load order
wins; when none matches, the built-in default plan of the machine decides:

- all-reduce: the one-shot direct algorithm (every rank reduces everything in one step)
  below ``small_bytes`` (``staged_small_bytes`` when the call runs staged), else
  reduce-scatter + all-gather with one owner rank per chunk;
- every other collective: its direct algorithm (:mod:`arborcc.library.direct`);
- but an all-reduce whose ranks span more than one socket or L3 domain, in equal groups
  of at least two ranks (the communicator's ``groups``: :func:`arborcc.topology.cpus.rank_groups`),
  runs the hierarchical all-reduce over those groups (:func:`layout_choice`) where the
  rules above would run the owner all-reduce unstaged. On one socket and one L3 nothing
  changes.

The owner all-reduce, the one-shot all-reduce and the all-gather below
``staged_small_bytes`` and the reduce-scatter up to ``staged_bytes`` run *staged* (:meth:`Plan.staged_kind`): the same
algorithm executed natively through every rank's persistent staging area in the
communicator's segment, read by the peers with plain loads, instead of step by step
through the FIFOs and cross-memory attach.

Every algorithm is verified (:func:`arborcc.verify.verify_algorithm`) before it can run;
one that does not verify is refused with the verifier's first finding. :meth:`Plan.load`
reads what ``ARBORCC_PLAN`` names (a file, a directory, or ``arborcc tune``'s directory
through its checked ``plan.json``); :meth:`Plan.choose` says why a call runs what it runs
(the matching entry, or the default's rule) and over which range of sizes that holds.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from arborcc.errors import InputError, VerificationError
from arborcc.ir.aliasing import Mode, declared_modes
from arborcc.ir.collectives import RANK_MULTIPLIED, ROOTED
from arborcc.ir.load import load_algorithm
from arborcc.ir.model import Algorithm
from arborcc.memo import BoundedCache
from arborcc.runtime.direct import direct_algorithm

#: all-reduce sizes (bytes) below which the default plan runs the one-shot algorithm
DEFAULT_SMALL_BYTES = 256 * 1024

#: owner all-reduces and reduce-scatters up to this size (bytes) run staged (see
#: :meth:`Plan.runs_staged`; staged won at 1 MB in every run of docs/runtime.md, not always at 2 MB)
DEFAULT_STAGED_BYTES = 1 << 20

#: all-reduce sizes below which the default plan runs the one-shot algorithm when the
#: owner all-reduce would run staged (staged, it wins from here: docs/runtime.md), and
#: runs it staged too (one copy into the ring, one counter, every peer's input summed in
#: rank order): below 64 KB a call is latency-bound and the one-shot has one round of
#: waiting where the owner all-reduce has three; above, its (n-1) x size bytes read per
#: rank cost more than the owner's 2 x size
DEFAULT_STAGED_SMALL_BYTES = 64 * 1024

#: the built-in all-gather of outputs below staged_small_bytes runs staged while one rank's
#: block is below this (bytes): below it, the interpreted all-gather copies each block
#: through a FIFO slot too (cma_threshold, 16 KB), with a handshake per pair of ranks
#: (staged: 2 ranks, 4 KB output 1.0 against 1.5 us; 4 ranks on 2 cores, 60 KB 36-40
#: against 40-43 us); from it, the peers' buffers are read with one copy (cross-memory
#: attach), which beats the staged path's two (2 ranks, 16 KB blocks: 10.1 against 5.9 us)
DEFAULT_STAGED_GATHER_BLOCK_BYTES = 16 * 1024

#: the most algorithm objects whose verdict :func:`require_verified` keeps (a communicator
#: verifies each algorithm it runs once; the least recently used are verified again)
VERIFIED_ALGORITHMS = 256
_VERIFIED = BoundedCache("runtime.plan.verified", VERIFIED_ALGORITHMS, purpose="verifier verdicts by algorithm object")


def require_verified(algo: Algorithm, source: str | None = None) -> Algorithm:
    """``algo`` if the verifier proves it correct, else VerificationError (the verdict kept
    per object for the last :data:`VERIFIED_ALGORITHMS` algorithms)."""
    from arborcc.verify import verify_algorithm

    ok = _VERIFIED.get_for(algo)
    if ok is None:
        report = verify_algorithm(algo)
        ok = report.ok
        _VERIFIED.put_for(algo, ok)
        if not ok:
            first = report.violations[0] if report.violations else "not correct"
            raise VerificationError(f"{source or algo.name}: refused to run an algorithm that does not verify: {first}")
    if not ok:
        raise VerificationError(f"{source or algo.name}: refused to run an algorithm that does not verify")
    return algo


def call_bytes(collective: str, num_ranks: int, count: int, itemsize: int) -> int:
    """The size of a call as nccl-tests reports it (for gathers and scatters the total)."""
    if collective in RANK_MULTIPLIED or collective in ("gather", "scatter"):
        return num_ranks * count * itemsize
    return count * itemsize


@dataclass
class PlanEntry:
    algorithm: Algorithm
    source: str


@dataclass(frozen=True)
class Choice:
    """Which algorithm a call runs, and why (:meth:`Plan.choose`)."""

    algorithm: Algorithm
    entry: int | None  #: the index of the plan entry that matched; None: the built-in default
    low: int  #: the call sizes (bytes) the same decision covers: from low ...
    high: int | None  #: ... to high (None: no limit)
    reason: str


@dataclass
class Plan:
    """Algorithms to try, in order, before the built-in default."""

    entries: list[PlanEntry] = field(default_factory=list)
    small_bytes: int = DEFAULT_SMALL_BYTES
    staged_small_bytes: int = DEFAULT_STAGED_SMALL_BYTES

    @classmethod
    def from_path(cls, path: str | os.PathLike) -> "Plan":
        """Every ``.xml``/``.json`` algorithm of a file or a directory (sorted by name)."""
        p = Path(path)
        if p.is_dir():
            files = sorted(f for f in p.iterdir() if f.suffix.lower() in (".xml", ".json"))
            if not files:
                raise InputError("the directory holds no .xml or .json algorithm files", source=str(p))
        elif p.exists():
            files = [p]
        else:
            raise InputError("no such file or directory", source=str(p))
        plan = cls()
        for f in files:
            plan.add(load_algorithm(f), str(f))
        return plan

    @classmethod
    def load(cls, path: str | os.PathLike | None) -> "Plan":
        """The plan ``ARBORCC_PLAN`` names: None or empty, the built-in default; a
        directory ``arborcc tune -o`` wrote, its ``plan.json`` entries in order (each file
        checked against its entry: collective, ranks, size range); else
        :meth:`from_path`. Every file is read within the limits and verified."""
        if not path:
            return cls()
        from arborcc.ir.plan_index import INDEX, read_plan_index

        if not (Path(path) / INDEX).is_file():
            return cls.from_path(path)
        index = read_plan_index(path)
        plan = cls()
        for i, entry in enumerate(index.rules):
            source = str(index.file(entry))
            algo = load_algorithm(source)
            found = {"collective": (algo.collective, index.collective), "ranks": (algo.num_ranks, index.ranks),
                     "min_bytes": (algo.min_bytes, entry.min_bytes), "max_bytes": (algo.max_bytes, entry.max_bytes)}
            for what, (have, want) in found.items():
                if have != want:
                    where = f"algorithms[{i}].{what}" if what.endswith("bytes") else what
                    raise InputError(f"{where}: {want!r}, but {entry.file} says {have!r}", source=str(index.path))
            plan.add(algo, source)
        return plan

    def describe(self) -> str:
        """The plan in a few words: the built-in default, or its entries' files."""
        if not self.entries:
            return "built-in default"
        names = [e.source for e in self.entries[:3]] + (["..."] if len(self.entries) > 3 else [])
        return f"{len(self.entries)} algorithm(s) ({', '.join(names)}), then the built-in default"

    def add(self, algo: Algorithm, source: str | None = None) -> None:
        """Append ``algo`` (verified first)."""
        require_verified(algo, source)
        self.entries.append(PlanEntry(algo, source or algo.name))

    def select(self, collective: str, num_ranks: int, mode: Mode, count: int, itemsize: int,
               root: int = 0, staged_bytes: int = 0, groups: RankGroups | None = None) -> Algorithm:
        """The algorithm for a call (MSCCL's rules over the entries, then the default;
        all-reduces up to ``staged_bytes`` may run staged; ``groups``: the ranks by socket
        and L3, see :func:`layout_choice`)."""
        return self.choose(collective, num_ranks, mode, count, itemsize, root, staged_bytes, groups).algorithm

    def choose(self, collective: str, num_ranks: int, mode: Mode, count: int, itemsize: int,
               root: int = 0, staged_bytes: int = 0, groups: RankGroups | None = None) -> "Choice":
        """:meth:`select`'s algorithm with why: the entry that matched, the CPU layout's
        choice or the built-in default's rule, and the range of call sizes the same
        decision covers."""
        size = call_bytes(collective, num_ranks, count, itemsize)
        for i, e in enumerate(self.entries):
            if matches(e.algorithm, collective, num_ranks, mode, count, size, root):
                a = e.algorithm
                return Choice(a, i, a.min_bytes, a.max_bytes or None,
                              f"plan entry {i + 1} of {len(self.entries)} ({e.source}), "
                              f"{a.min_bytes}-{a.max_bytes or 'any'} bytes")
        by_layout = layout_choice(collective, mode, size, staged_bytes, self.small_bytes, groups)
        if by_layout is not None:
            return by_layout
        small = self.small_bytes
        if collective == "allreduce" and size <= staged_bytes:
            small = min(small, self.staged_small_bytes)
        low, high, reason = self.default_rule(collective, num_ranks, size, staged_bytes)
        return Choice(default_algorithm(collective, num_ranks, mode, size, root, small), None, low, high,
                      "built-in default: " + reason)

    def default_rule(self, collective: str, num_ranks: int, size: int, staged_bytes: int) \
            -> tuple[int, int | None, str]:
        """The built-in default's rule for a call of ``size`` bytes: the range of sizes it
        covers (low, high or None: no limit) and what it says (see the module doc)."""
        if collective == "reducescatter" and num_ranks > 1 and self.staged_small_bytes <= staged_bytes:
            lo, hi = max(1, self.staged_small_bytes), staged_bytes
            if size < lo:
                return 1, lo - 1, f"the direct algorithm (below staged_small_bytes={lo})"
            if size <= hi:
                return lo, hi, f"the direct algorithm, staged from staged_small_bytes={lo} to staged_bytes={hi}"
            return hi + 1, None, f"the direct algorithm (above staged_bytes={hi})"
        if collective != "allreduce" or num_ranks < 2:
            return 1, None, "the direct algorithm"
        if size <= staged_bytes:
            small = min(self.small_bytes, self.staged_small_bytes)
            name = "staged_small_bytes" if small == self.staged_small_bytes else "small_bytes"
            if size < small:
                return 1, small - 1, f"one-shot (every rank reduces everything) below {name}={small}"
            return small, staged_bytes, (f"reduce-scatter + all-gather, one owner rank per chunk, from {name}={small} "
                                         f"to staged_bytes={staged_bytes}")
        low = staged_bytes + 1
        if size < self.small_bytes:
            return low, self.small_bytes - 1, f"one-shot (every rank reduces everything) below small_bytes={self.small_bytes}"
        return max(low, self.small_bytes), None, ("reduce-scatter + all-gather, one owner rank per chunk, from "
                                                 f"small_bytes={self.small_bytes}")

    def runs_staged(self, algo: Algorithm, size: int, staged_bytes: int) -> bool:
        """Does a call of ``size`` bytes (:func:`call_bytes`) that selected ``algo`` run
        staged? (:meth:`staged_kind` names how.)"""
        return self.staged_kind(algo, size, staged_bytes) is not None

    def staged_kind(self, algo: Algorithm, size: int, staged_bytes: int) -> str | None:
        """Which staged executor runs a call of ``size`` bytes (:func:`call_bytes`) that
        selected ``algo``, up to ``staged_bytes`` (0: never): ``"owner"`` the built-in
        owner all-reduce, ``"oneshot"`` the built-in one-shot all-reduce below
        ``staged_small_bytes`` (the selection's crossover), ``"reducescatter"`` the
        built-in reduce-scatter from ``staged_small_bytes``, ``"allgather"`` the built-in
        all-gather of outputs below ``staged_small_bytes`` whose blocks are below
        :data:`DEFAULT_STAGED_GATHER_BLOCK_BYTES`; None: not staged. Each
        executor runs exactly its algorithm's steps: the owner all-reduce's sends of a
        rank's input shares are copies into its staging area, the owner's reductions
        chain the peers in the thread blocks' order, its all-gather reads the owners'
        staged results; the one-shot's sends of the whole input are one copy into the
        staging area (in place, the IR's scratch), and every rank sums all inputs in rank
        order 0..n-1 (runtime/csrc/staged_oneshot.hpp); the all-gather's sends of a rank's
        block are one copy into its staging area, which every peer copies into its output."""
        if not 0 < size <= staged_bytes or algo.num_ranks < 2:
            return None
        # the objects default_algorithm selects (direct_algorithm caches them per argument list)
        n, inplace = algo.num_ranks, algo.inplace
        if algo.collective == "allreduce":
            if algo is direct_algorithm("allreduce", n, inplace, 0, True):
                return "owner"
            if size < self.staged_small_bytes and algo is direct_algorithm("allreduce", n, inplace, 0, False):
                return "oneshot"
            return None
        if algo.collective == "reducescatter" and size >= self.staged_small_bytes and \
                algo is direct_algorithm("reducescatter", n, inplace, 0, False):
            return "reducescatter"
        gather_limit = min(self.staged_small_bytes, n * DEFAULT_STAGED_GATHER_BLOCK_BYTES)
        if algo.collective == "allgather" and size < gather_limit and \
                algo is direct_algorithm("allgather", n, inplace, 0, False):
            return "allgather"
        return None


def matches(algo: Algorithm, collective: str, num_ranks: int, mode: Mode, count: int, size: int,
            root: int = 0) -> bool:
    """MSCCL's rule: may ``algo`` run this call?"""
    if algo.collective != collective or algo.num_ranks != num_ranks or mode not in declared_modes(algo):
        return False
    if collective in ROOTED and (algo.root or 0) != root:
        return False
    if size < algo.min_bytes or (algo.max_bytes and size > algo.max_bytes):
        return False
    mult = num_ranks if collective in RANK_MULTIPLIED else 1
    return (count * mult) % algo.chunks_per_loop == 0


def default_algorithm(collective: str, num_ranks: int, mode: Mode, size: int, root: int = 0,
                      small_bytes: int = DEFAULT_SMALL_BYTES) -> Algorithm:
    """The built-in choice for a call (verified once per algorithm)."""
    inplace = mode is Mode.INPLACE
    owner = collective == "allreduce" and size >= small_bytes and num_ranks > 1
    algo = direct_algorithm(collective, num_ranks, inplace, root if collective in ROOTED else 0, owner)
    return require_verified(algo)


#: the ranks of a communicator by socket and last-level cache (each group in rank order)
RankGroups = tuple[tuple[int, ...], ...]


def hierarchy(groups: RankGroups | None) -> tuple[int, int] | None:
    """(groups, ranks per group) when ``groups`` can carry a hierarchical all-reduce: at
    least two groups, all of the same size, at least two ranks each (one rank per group
    is a flat ring; unequal groups, e.g. 6 ranks on sockets of 4 cores, stay flat)."""
    if not groups or len(groups) < 2:
        return None
    size = len(groups[0])
    if size < 2 or any(len(g) != size for g in groups):
        return None
    return len(groups), size


def layout_choice(collective: str, mode: Mode, size: int, staged_bytes: int, small_bytes: int,
                  groups: RankGroups | None) -> Choice | None:
    """The hierarchical all-reduce (:func:`arborcc.library.hierarchical.hierarchical_allreduce`
    over ``groups``: a ring reduce-scatter within each group, a ring reduce-scatter and
    all-gather between the groups' ranks of the same index, a ring all-gather within each
    group) for an all-reduce of ``size`` bytes whose ranks span several sockets or L3
    domains (:func:`hierarchy`), from ``max(small_bytes, staged_bytes + 1)``; None: the
    default's rules decide.

    Why there. The flat owner all-reduce sends every rank's share of the buffer to every
    other rank: with G ranks in each of N groups, about (N - 1) / N of its traffic crosses
    a socket (or L3) boundary, G times the hierarchical algorithm's, which moves only 1/G
    of the buffer per rank across (the inter-socket link, UPI or Infinity Fabric, carries a
    fraction of a socket's memory bandwidth). The hierarchical algorithm takes
    2 (G - 1) + 2 (N - 1) steps instead of 2, a few microseconds each: below
    ``small_bytes`` the one-shot algorithm's single step wins, and up to ``staged_bytes``
    the staged owner all-reduce (one native pass, peers' shares read with plain loads)
    does, at sizes whose cross-socket bytes take microseconds. The crossover is reasoned,
    not measured: no machine here has two sockets (docs/runtime.md, "Many ranks")."""
    shape = hierarchy(groups) if collective == "allreduce" else None
    if shape is None:
        return None
    low = max(small_bytes, staged_bytes + 1)
    if size < low:
        return None
    algo = hierarchical_algorithm(groups, mode is Mode.INPLACE)
    n, g = shape
    return Choice(algo, None, low, None,
                  f"CPU layout: hierarchical all-reduce over {n} groups of {g} ranks sharing a socket or L3, "
                  f"from max(small_bytes={small_bytes}, staged_bytes={staged_bytes} + 1)")


#: the hierarchical all-reduces built (and verified), by rank groups and mode
_HIERARCHICAL = BoundedCache("runtime.plan.hierarchical", 64, purpose="verified hierarchical all-reduces by groups and mode")


def hierarchical_algorithm(groups: RankGroups, inplace: bool) -> Algorithm:
    """The hierarchical all-reduce over ``groups`` (built and verified once; the last 64 kept)."""
    key = (groups, inplace)
    algo = _HIERARCHICAL.get(key)
    if algo is None:
        algo = _build_hierarchical(groups, inplace)
        _HIERARCHICAL.put(key, algo)
    return algo


def _build_hierarchical(groups: RankGroups, inplace: bool) -> Algorithm:
    """:func:`hierarchical_algorithm`, built and verified."""
    from arborcc.library.hierarchical import hierarchical_allreduce

    n, g = hierarchy(groups)
    tag = "inplace" if inplace else "outofplace"
    built = hierarchical_allreduce(n, g, groups=groups, inplace=inplace,
                                   name=f"layout-hierarchical-allreduce-{n}x{g}-{tag}")
    return require_verified(built.algorithm)


def fallback_algorithm(collective: str, num_ranks: int, mode: Mode, root: int = 0) -> Algorithm:
    """The algorithm that carries a call's tail (one chunk per rank block)."""
    algo = direct_algorithm(collective, num_ranks, mode is Mode.INPLACE, root if collective in ROOTED else 0)
    return require_verified(algo)
