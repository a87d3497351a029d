"""What each MSCCL runtime accepts: the two XML dialects' limits, as data.

``legacy`` is the original MSCCL fork of NCCL (https://github.com/microsoft/msccl);
``executor`` the newer executors (the MSCCL executor for NCCL,
https://github.com/Azure/msccl-executor-nccl, and RCCL's built-in MSCCL,
https://github.com/ROCm/rccl). The numbers are those of their parsers
(``src/misc/msccl/msccl_parser.cc`` of the executors, the fork's ``src/graph/xml.cc``
and its interpreter's build constants): a file breaking one of them makes the runtime
refuse it - for the executors, at communicator start, for every algorithm in the
directory.

Notes on the numbers:

* steps per thread block and thread blocks per GPU are bounds on the ``s`` and
  ``id`` values (``s >= MAX_STEPS`` is rejected), so they are also the maximum counts;
* the executor's thread-block limit is RCCL's (64); the MSCCL executor for NCCL
  allows 1024 - a file within 64 runs on both;
* both runtimes require thread block ids 0..T-1 without gaps, ``cnt < 72`` and
  channels below 32;
* both fold ``nop`` steps into the next real step's dependency list and reject a
  step that inherits dependencies from preceding ``nop`` steps without carrying one
  itself; trailing ``nop`` steps are dropped together with their dependencies;
* consecutive ``re`` steps with the same destination and source buffer and no
  dependency are fused into one reduction that uses the first step's ``cnt``.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from operator import attrgetter

from arborcc.memo import CallMemo
from arborcc.ir.model import Algorithm, Op
from arborcc.ir.report import Violation


@dataclass(frozen=True)
class DialectLimits:
    name: str
    #: attributes of <algo> the runtime reads unconditionally (missing = file rejected)
    required_algo_attributes: tuple[str, ...]
    #: arborcc's canonical collective name -> the dialect's ``coll`` spelling
    collective_names: dict[str, str]
    max_steps_per_threadblock: int
    max_threadblocks_per_rank: int
    contiguous_threadblock_ids: bool
    max_count_exclusive: int  #: ``cnt`` must be below this
    max_channels: int  #: channel ids must be below this
    step_types: frozenset[Op]
    max_string_length: int = 255  #: attribute values (the algorithm name) longer than this are cut
    negative_channel_without_peers: bool = False  #: ``chan="-1"`` accepted on a tb with no peers


REQUIRED_GPU_ATTRIBUTES = ("id", "i_chunks", "o_chunks", "s_chunks")
REQUIRED_TB_ATTRIBUTES = ("id", "send", "recv", "chan")
REQUIRED_STEP_ATTRIBUTES = ("s", "type", "srcbuf", "srcoff", "dstbuf", "dstoff", "cnt", "depid", "deps", "hasdep")

LEGACY = DialectLimits(
    name="legacy",
    required_algo_attributes=("name", "proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace"),
    collective_names={
        "allreduce": "allreduce", "allgather": "allgather", "reducescatter": "reduce_scatter",
        "alltoall": "alltoall", "broadcast": "broadcast", "reduce": "reduce", "custom": "custom",
    },
    max_steps_per_threadblock=256,
    max_threadblocks_per_rank=216,
    contiguous_threadblock_ids=True,
    max_count_exclusive=72,
    max_channels=32,
    step_types=frozenset(Op),
    negative_channel_without_peers=True,
)

EXECUTOR = DialectLimits(
    name="executor",
    required_algo_attributes=("name", "proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace",
                              "outofplace", "minBytes", "maxBytes"),
    collective_names={
        "allreduce": "allreduce", "allgather": "allgather", "reducescatter": "reducescatter",
        "alltoall": "alltoall", "broadcast": "broadcast", "reduce": "reduce", "gather": "gather",
        "scatter": "scatter",
    },
    max_steps_per_threadblock=64,
    max_threadblocks_per_rank=64,
    contiguous_threadblock_ids=True,
    max_count_exclusive=72,
    max_channels=32,
    step_types=frozenset(Op) - {Op.RESIDUAL_ADD},
)

DIALECTS: dict[str, DialectLimits] = {"legacy": LEGACY, "executor": EXECUTOR}

#: channels every runtime accepts (channel ids below this)
MAX_CHANNELS = min(d.max_channels for d in DIALECTS.values())

#: messages a connection holds before its sender waits: NCCL_STEPS, the FIFO slots of a
#: connection with the Simple protocol (what the verifier assumes unless told otherwise)
DEFAULT_SLOTS = 8

#: every ``coll`` spelling either dialect uses -> canonical name
XML_COLLECTIVE_NAMES: dict[str, str] = {
    xml: canonical for d in DIALECTS.values() for canonical, xml in d.collective_names.items()
}

#: fused reductions the executors build at most (longer chains are split, not rejected)
MAX_REDUCE_FUSION = 16


_op_of, _count_of = attrgetter("op"), attrgetter("count")


@dataclass(frozen=True)
class RuntimeCaps:
    """The sizes a program must keep to run on the runtimes meant: the least of their limits."""

    steps_per_threadblock: int
    threadblocks_per_rank: int
    channels: int


def runtime_caps(dialect: str | None) -> RuntimeCaps:
    """The caps of ``dialect``'s runtimes, or of every runtime when it is None (a file
    for any of them)."""
    dialects = DIALECTS.values() if dialect is None else [dialect_limits(dialect)]
    return RuntimeCaps(min(d.max_steps_per_threadblock for d in dialects),
                       min(d.max_threadblocks_per_rank for d in dialects), min(d.max_channels for d in dialects))


def dialect_limits(dialect: str) -> DialectLimits:
    try:
        return DIALECTS[dialect]
    except KeyError:
        raise ValueError(f"unknown MSCCL dialect {dialect!r} (known: {', '.join(DIALECTS)})") from None


#: inside :func:`remembering_limits`: the answers of :func:`check_dialect_limits` per
#: algorithm object, dialect and max_per_rule
_remembered = CallMemo("ir.limits.violations", opened_by="synthesize (remembering_limits)",
                       purpose="check_dialect_limits per algorithm object, dialect and max_per_rule")


def remembering_limits() -> AbstractContextManager[None]:
    """Within the block, :func:`check_dialect_limits` answers each algorithm object once
    (a generator's candidate check, the strategy cascade and the verifier ask about the
    same algorithm; ``synthesize`` wraps its work in this; :mod:`arborcc.memo`)."""
    return _remembered.active()


def check_dialect_limits(algo: Algorithm, dialect: str, max_per_rule: int = 10) -> list[Violation]:
    """Every way ``algo`` exceeds ``dialect``'s limits (kind ``limit``)."""
    known = _remembered.get_for(algo, (dialect, max_per_rule))
    if known is None:
        known = _dialect_violations(algo, dialect, max_per_rule)
        _remembered.put_for(algo, known, (dialect, max_per_rule))
    return list(known)


def _dialect_violations(algo: Algorithm, dialect: str, max_per_rule: int) -> list[Violation]:
    """:func:`check_dialect_limits` without remembering."""
    lim = dialect_limits(dialect)
    out: list[Violation] = []
    seen: dict[str, int] = {}

    def add(rule: str, rank, tb, step, message: str) -> None:
        seen[rule] = seen.get(rule, 0) + 1
        if seen[rule] <= max_per_rule:
            out.append(Violation(rank, tb, step, "limit", f"{lim.name} dialect: {message}"))

    rejected = _rejected_types(lim)
    plain_steps = _plain_steps(algo, lim, rejected)
    if algo.collective not in lim.collective_names:
        add("coll", None, None, None,
            f"has no collective named {algo.collective!r} (it knows {', '.join(sorted(lim.collective_names))})")
    if len(algo.name) > lim.max_string_length:
        add("name", None, None, None, f"the name is {len(algo.name)} characters; the parser keeps {lim.max_string_length}")
    if algo.max_bytes and algo.min_bytes > algo.max_bytes:
        add("bytes", None, None, None, f"minBytes {algo.min_bytes} is above maxBytes {algo.max_bytes}")
    for prog in algo.ranks:
        r = prog.rank
        tbs = prog.threadblocks
        if len(tbs) > lim.max_threadblocks_per_rank:
            add("tbs", r, None, None, f"{len(tbs)} thread blocks; at most {lim.max_threadblocks_per_rank}")
        ids = sorted({tb.id for tb in tbs})
        if lim.contiguous_threadblock_ids and ids != list(range(len(ids))):
            gap = next((i for i, x in enumerate(ids) if i != x), len(ids))
            add("ids", r, None, None, f"thread block ids must be 0..{len(ids) - 1} without gaps; {gap} is missing")
        for tb in tbs:
            if len(tb.steps) > lim.max_steps_per_threadblock:
                add("steps", r, tb.id, None,
                    f"{len(tb.steps)} steps; at most {lim.max_steps_per_threadblock} per thread block")
            if tb.channel >= lim.max_channels:
                add("chan", r, tb.id, None, f"channel {tb.channel}; channels must be below {lim.max_channels}")
            if tb.channel < 0 and not (lim.negative_channel_without_peers and tb.send < 0 and tb.recv < 0):
                add("chan", r, tb.id, None, f"channel {tb.channel} is not accepted")
            if not plain_steps:
                _check_steps(lim, rejected, r, tb, add)
    return out


def _plain_steps(algo: Algorithm, lim: DialectLimits, rejected: tuple[Op, ...]) -> bool:
    """Whether no step rule can apply: no nop, no reduction, no step type of ``rejected``, every count
    accepted (one pass over the steps by identity; an Op hashes in Python)."""
    steps = [st for prog in algo.ranks for tb in prog.threadblocks for st in tb.steps]
    if max(map(_count_of, steps), default=0) >= lim.max_count_exclusive:
        return False
    ops = set(map(id, map(_op_of, steps)))
    return not any(id(op) in ops for op in (Op.NOP, Op.REDUCE, *rejected))


def _rejected_types(lim: DialectLimits) -> tuple[Op, ...]:
    """The step types ``lim`` does not accept, in declaration order."""
    return tuple(op for op in Op if op not in lim.step_types)


def _check_steps(lim: DialectLimits, rejected: tuple[Op, ...], r: int, tb, add) -> None:
    pending_nop_deps = 0
    prev_re = None  # (dst_buf, dst_off, src_buf, count) of a reduction a next 're' would fuse with
    chain = 0
    max_count, nop, reduce = lim.max_count_exclusive, Op.NOP, Op.REDUCE
    for i, st in enumerate(tb.steps):
        op = st.op
        if op in rejected:
            add("type", r, tb.id, i, f"step type '{op.value}' is not supported")
        if op is nop:
            if st.dep is not None:
                pending_nop_deps += 1
            continue
        if st.count >= max_count:
            add("cnt", r, tb.id, i, f"cnt {st.count}; it must be below {max_count}")
        if op is reduce:
            key = (st.dst_buf, st.dst_off, st.src_buf)
            if prev_re is not None and prev_re[:3] == key and st.dep is None and chain < MAX_REDUCE_FUSION:
                chain += 1
                if st.count != prev_re[3]:
                    add("fuse", r, tb.id, i,
                        f"this 're' is fused with the one before it, which has cnt {prev_re[3]}, not {st.count}; "
                        "the fused reduction uses the first cnt")
                if st.has_dep:
                    prev_re = None
                continue  # a continuation: its (absent) dependency list is not checked
            prev_re = None if st.has_dep else (*key, st.count)
            chain = 1
        else:
            prev_re = None
            chain = 0
        if pending_nop_deps and st.dep is None:
            add("nop", r, tb.id, i,
                f"follows {pending_nop_deps} nop step(s) with dependencies but has none itself; the runtimes "
                "reject this (the last dependency must be on the step)")
        pending_nop_deps = 0
    if pending_nop_deps:
        add("nop", r, tb.id, len(tb.steps) - 1,
            "the thread block ends with nop steps carrying dependencies; the runtimes drop them (the waits never happen)")
