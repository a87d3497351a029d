"""The IR: an algorithm exactly as the MSCCL runtimes model it.

Ranks hold thread blocks; a thread block has at most one send peer and one receive
peer and a channel ((peer, channel) names a connection); it runs an ordered list of
steps. A step reads/writes chunk ranges of the input (``i``), output (``o``) or
scratch (``s``) buffer and may wait on one step of another thread block of the same
rank (``dep``); several dependencies are expressed, as in MSCCL XML, by ``nop`` steps
placed right before the step. Hence writing and reading MSCCL XML is lossless.

Offsets and counts are in chunks; a chunk is ``(elements x mult) / chunks_per_loop``
(see ``docs/ir.md``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from arborcc.ir.steps import Op  # the step types and what each does (re-exported)
from arborcc.sizes import MAX_BYTES


class Buffer(str, enum.Enum):
    INPUT = "i"
    OUTPUT = "o"
    SCRATCH = "s"


class Protocol(str, enum.Enum):
    SIMPLE = "Simple"
    LL = "LL"
    LL128 = "LL128"


@dataclass(frozen=True)
class Dependency:
    """Wait until step ``step`` of thread block ``tb`` (same rank) has finished."""

    tb: int
    step: int


@dataclass
class Step:
    op: Op
    src_buf: Buffer | None
    src_off: int
    dst_buf: Buffer | None
    dst_off: int
    count: int = 1
    dep: Dependency | None = None
    has_dep: bool = False  #: some other step waits on this one


@dataclass
class ThreadBlock:
    id: int
    send: int = -1  #: send peer rank, -1 for none
    recv: int = -1  #: receive peer rank, -1 for none
    channel: int = 0
    steps: list[Step] = field(default_factory=list)


@dataclass
class RankProgram:
    """What one rank (``<gpu>``) runs; chunk counts size its three buffers."""

    rank: int
    input_chunks: int
    output_chunks: int
    scratch_chunks: int = 0
    threadblocks: list[ThreadBlock] = field(default_factory=list)


@dataclass
class Algorithm:
    """A whole collective algorithm (``<algo>``).

    ``collective`` uses arborcc's canonical names: allreduce, allgather,
    reducescatter, alltoall, broadcast, reduce, gather, scatter, custom (the XML
    writer maps them to each dialect's spelling). ``root`` is set for rooted
    collectives. ``min_bytes``/``max_bytes`` give the size range (0 = no limit).
    """

    name: str
    collective: str
    num_ranks: int
    chunks_per_loop: int
    ranks: list[RankProgram]
    protocol: Protocol = Protocol.SIMPLE
    inplace: bool = False
    outofplace: bool = True
    min_bytes: int = 0
    max_bytes: int = 0
    root: int | None = None
    #: NVLS operations of an MSCCL++ plan and the connections that carry them
    #: (:class:`arborcc.ir.mscclpp.switch_channels.SwitchTraffic`); only the simulator reads it
    switch_traffic: object | None = field(default=None, compare=False, repr=False)

    @property
    def effective_root(self) -> int:
        """The root a rooted collective uses: ``root``, or rank 0 when it is unset or not a rank."""
        return self.root if self.root is not None and 0 <= self.root < self.num_ranks else 0

    @property
    def num_threadblocks(self) -> int:
        """Thread blocks over all ranks."""
        return sum(len(r.threadblocks) for r in self.ranks)

    @property
    def num_steps(self) -> int:
        """Steps over all ranks and thread blocks (``nop`` steps included)."""
        return sum(len(tb.steps) for r in self.ranks for tb in r.threadblocks)

    @property
    def num_channels(self) -> int:
        chans = [tb.channel for r in self.ranks for tb in r.threadblocks]
        return max(chans) + 1 if chans else 1


# --- what an algorithm file may hold: the integer ranges both readers check -------------
#: thread block ids, channels and step indices: what the runtimes hold in a 32-bit int
MAX_INDEX = 2**31 - 1

#: integer fields of an algorithm file by kind -> (lowest, highest or the limit that sets
#: it, what the values mean). ``ranks``: below the ranks limit; ``chunks``: at most the
#: chunks limit (an offset or count beyond it lies outside every buffer). Within these
#: ranges a value may still be wrong for its algorithm (a peer that is not one of its
#: ranks, an offset past its buffer): that is the verifier's to say, with the step.
FIELD_RANGES: dict[str, tuple[int, int | str, str]] = {
    "rank": (0, "ranks", "a rank"),
    "peer": (-1, "ranks", "-1 (none) or a rank"),
    "threadblock": (0, MAX_INDEX, "a thread block id"),
    "channel": (-1, MAX_INDEX, "a channel"),
    "channels": (0, MAX_INDEX, "a number of channels"),
    "step": (0, MAX_INDEX, "a step index"),
    "dependency": (-1, MAX_INDEX, "-1 (none) or a thread block id"),
    "dependency step": (-1, MAX_INDEX, "-1 (none) or a step index"),
    "offset": (-1, "chunks", "-1 (none) or a chunk offset"),
    "count": (0, "chunks", "a chunk count"),
    "bytes": (0, MAX_BYTES, "a size in bytes (0: no limit)"),
}


def field_bounds() -> dict[str, tuple[int, int]]:
    """The range of every kind of :data:`FIELD_RANGES` under the limits in force now: a
    reader takes them once per file and checks its millions of fields against them
    (:func:`field_problem` says why a value outside is refused)."""
    from arborcc.limits import limit

    bounds = {}
    for kind, (low, high, _) in FIELD_RANGES.items():
        if isinstance(high, str):
            high = limit(high).value - 1 if high == "ranks" else limit(high).value
        bounds[kind] = (low, high)
    return bounds


def field_problem(value: int, kind: str) -> str | None:
    """Why the integer ``value`` cannot be a field of ``kind`` (:data:`FIELD_RANGES`), or
    None: ``expected -1 (none) or a rank from -1 to 32,767 (ARBORCC_MAX_RANKS ...), got 40000``."""
    from arborcc.limits import limit

    low, high, meaning = FIELD_RANGES[kind]
    note = ""
    if isinstance(high, str):
        lim = limit(high)
        high = lim.value - 1 if high == "ranks" else lim.value
        note = f" (the {lim.name} limit; {lim.variable} or --limit {lim.name}=N raises it)"
    if low <= value <= high:
        return None
    digits = len(str(abs(value)))
    shown = f"{value:,}" if digits <= 30 else f"{'-' if value < 0 else ''}a {digits}-digit number"
    return f"expected {meaning} from {low:,} to {high:,}{note}, got {shown}"


def check_written_size(text: str, items: int, algo: Algorithm, form: str) -> None:
    """Refuse (one :class:`~arborcc.errors.InputError` line) the ``form`` text (``JSON``,
    ``MSCCL XML``) of ``algo``, of ``items`` items, when it is over the ``algorithm-bytes``
    or ``algorithm-items`` limit the readers hold every algorithm file to: arborcc writes no
    algorithm file it would not read back."""
    from arborcc.limits import limit

    source = f"algorithm {algo.name!r}"
    size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
    limit("algorithm-bytes").check(size, source=source, what=f"its {form} text")
    limit("algorithm-items").check(items, source=source, what=f"its {form} text")
