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


class Buffer(str, enum.Enum):
    INPUT = "i"
    OUTPUT = "o"
    SCRATCH = "s"


class Op(str, enum.Enum):
    """Step types of MSCCL (``type=`` in XML)."""

    SEND = "s"
    RECV = "r"
    REDUCE = "re"  #: local reduce: dst += src
    COPY = "cpy"  #: local copy
    RECV_REDUCE_COPY = "rrc"
    RECV_REDUCE_SEND = "rrs"
    RECV_COPY_SEND = "rcs"
    RECV_REDUCE_COPY_SEND = "rrcs"
    NOP = "nop"  #: carries a dependency only
    RESIDUAL_ADD = "ra"  #: legacy runtime only

    #: these three are plain attributes of each member, set below (passes over every step
    #: of a program read them; a property cost a call and a tuple search each time)
    sends: bool  #: the step sends to the thread block's send peer
    receives: bool  #: the step receives from the thread block's receive peer
    reduces: bool  #: the step adds into what it reads


for _op in Op:
    _op.sends = _op in (Op.SEND, Op.RECV_REDUCE_SEND, Op.RECV_COPY_SEND, Op.RECV_REDUCE_COPY_SEND)
    _op.receives = _op in (Op.RECV, Op.RECV_REDUCE_COPY, Op.RECV_REDUCE_SEND, Op.RECV_COPY_SEND,
                           Op.RECV_REDUCE_COPY_SEND)
    _op.reduces = _op in (Op.REDUCE, Op.RECV_REDUCE_COPY, Op.RECV_REDUCE_SEND, Op.RECV_REDUCE_COPY_SEND,
                          Op.RESIDUAL_ADD)
del _op


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
