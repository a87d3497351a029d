"""NVLS operations on switch channels as reads and writes of the group's buffers.

A switch channel (``channel_type: switch``) is a multicast address over the same
buffer (``buffer_type``) of every rank of a rank group. MSCCL++'s executor
(``execution_kernel.hpp``) runs:

* ``glres`` (``handleMultiLoadReduceStore``): ``multimem.ld_reduce`` of the source
  chunks - the sum of those chunks over every member, read from each member's memory
  (the switch reduces) - then ``multimem.st`` of the sum to the destination chunks of
  every member;
* ``gstore`` (``handleMultiStore``): ``multimem.st`` of a local source to the
  destination chunks of every member.

That is what ``rres`` does with memory channels: read the peers' chunks, reduce into the
local destination, write the result into the peers' destinations. :func:`lower_switch_ops`
rewrites each such operation so (the name kept, ``channel_type`` ``memory``, the
members' buffers added as remote buffers of the thread block), and the translation,
the race check and the verifier treat it as the reads and writes it is: the reads are
ordered by the reader's waits on memory channels from each member and the writes are
published by its signals to each member, as for ``rres``. ``gstorepkt``
(``handleMultiStorePkt``: LL packets read from a local buffer, stored into every
member's scratch) is ``rppkt`` to the other members (named so, so that the packet rules
apply), where its own destination is the chunk it reads.

What the rewrite loses - that these reads and writes are one multimem operation, which
the switch serves with one chunk per port each way - is kept aside:
:func:`lower_switch_ops` also returns each switch operation as a :class:`SwitchOp`, and
the translation records which IR connections carry their transfers
(:class:`SwitchTraffic`, on the :class:`~arborcc.ir.model.Algorithm`), so that the
simulator can charge them as in-switch reduction (:mod:`arborcc.sim.switch_ops`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

from arborcc.ir.mscclpp.plan import BufferRef, ExecutionPlan, PlanThreadBlock, RemoteBuffer

#: the NVLS operations :func:`lower_switch_ops` rewrites
SWITCH_OPS = ("glres", "gstore", "gstorepkt")


@dataclass(frozen=True)
class SwitchOp:
    """One NVLS operation: ``kind`` (``glres``, ``gstore`` or ``gstorepkt``) run by
    ``rank`` over the switch group ``members`` on ``chunks`` chunks (as the IR counts them)."""

    kind: str
    rank: int
    members: tuple[int, ...]
    chunks: int


@dataclass(frozen=True)
class SwitchTraffic:
    """The NVLS operations of a plan, the IR connections ``(sender, receiver, channel)``
    that carry their transfers (a member's chunks to the rank that reduces them, the
    result to a member) and nothing else, and the IR steps ``(rank, thread block, step)``
    of their local work (the copy and additions that stand for the switch's reduction)."""

    ops: tuple[SwitchOp, ...]
    connections: frozenset[tuple[int, int, int]]
    local_steps: frozenset[tuple[int, int, int]]


def lower_switch_ops(plan: ExecutionPlan, places: dict[tuple[int, int, int], str],
                     fail: Callable[[str, str], None]) -> tuple[ExecutionPlan, dict[tuple[int, int, int], SwitchOp]]:
    """``plan`` with ``glres``/``gstore`` as reads and writes of the members' buffers
    (module doc), and each rewritten operation by its ``(rank, tb, op)``; a switch
    operation on a group without this rank or with a rank twice, one whose members
    declare the channel otherwise, a source and a destination on different groups, or
    chunks beyond a member's buffer is refused."""
    lowered: dict[tuple[int, int, int], SwitchOp] = {}
    if not any(op.name in SWITCH_OPS for g in plan.gpus for tb in g.threadblocks for op in tb.ops):
        return plan, lowered
    gpus = []
    for g in plan.gpus:
        remote = list(g.remote_buffers)
        known = {rb: i for i, rb in enumerate(remote)}
        tbs = []
        for tb in g.threadblocks:
            refs = {t: list(v) for t, v in tb.buffer_refs.items()}
            memory = refs.setdefault("memory", [])
            ops = []
            for o, op in enumerate(tb.ops):
                if op.name not in SWITCH_OPS:
                    ops.append(op)
                    continue
                where = places.get((g.id, tb.id, o), f"gpus[{g.id}].threadblocks[{tb.id}].ops[{o}]")

                def remote_ref(rank: int, btype: str, ref: BufferRef) -> BufferRef:
                    rb = RemoteBuffer(rank, btype, ("memory",))
                    if rb not in known:
                        known[rb] = len(remote)
                        remote.append(rb)
                    if known[rb] not in memory:
                        memory.append(known[rb])
                    return BufferRef("R", None, memory.index(known[rb]), ref.index, ref.size)

                def members(ref: BufferRef, side: str) -> tuple[str, tuple[int, ...]]:
                    btype, ranks = g.switch_channels()[tb.channels["switch"][ref.ref]]
                    if g.id not in ranks:
                        fail(where, f"{op.name}: {side} switch channel {ref.ref}'s rank group {list(ranks)} does not "
                                    f"contain rank {g.id}")
                    if len(set(ranks)) != len(ranks):
                        fail(where, f"{op.name}: {side} switch channel {ref.ref}'s rank group {list(ranks)} lists a "
                                    f"rank twice")
                    index = tb.channels["switch"][ref.ref]
                    for m in ranks:
                        theirs = plan.gpus[m].switch_channels()
                        if len(theirs) <= index or sorted(theirs[index][1]) != sorted(ranks) \
                                or theirs[index][0] != btype:
                            got = (f"is over ranks {list(theirs[index][1])} on its {theirs[index][0]} buffer"
                                   if len(theirs) > index else "is missing")
                            fail(where, f"{op.name}: {side} switch channel {index} of rank {g.id} is over ranks "
                                        f"{list(ranks)} on their {btype} buffer, but rank {m}'s switch channel "
                                        f"{index} {got}: MSCCL++ sets up the k-th switch channel of every member "
                                        f"together")
                        have = plan.gpus[m].chunks(btype)
                        if ref.index + ref.size > have:
                            fail(where, f"{op.name}: {side} chunks {ref.index}..{ref.index + ref.size - 1} are beyond "
                                        f"rank {m}'s {have} {btype} chunks")
                    return btype, ranks

                dref = op.dst[0]
                dtype, dranks = members(dref, "destination")
                dst = [BufferRef("L", dtype, -1, dref.index, dref.size)]
                dst += [remote_ref(m, dtype, dref) for m in dranks if m != g.id]
                if op.name == "glres":
                    sref = op.src[0]
                    stype, sranks = members(sref, "source")
                    if sorted(sranks) != sorted(dranks):
                        fail(where, f"glres: its source and destination switch channels span different rank groups "
                                    f"({list(sranks)} and {list(dranks)})")
                    src = [BufferRef("L", stype, -1, sref.index, sref.size)]
                    src += [remote_ref(m, stype, sref) for m in sranks if m != g.id]
                else:
                    src = list(op.src)
                name = op.name
                if name == "gstorepkt":  # packets read from src[0], written into every member: rppkt's meaning
                    own, name = dst.pop(0), "rppkt"
                    if (own.type, own.index) != (src[0].type, src[0].index):
                        fail(where, f"gstorepkt: stores into this rank's {own.type} chunk {own.index}, not the "
                                    f"packets it reads ({src[0].type} chunk {src[0].index}): a local packet copy "
                                    f"has no translation here")
                ops.append(dataclasses.replace(op, name=name, channel_type="memory", channel_ids=(), src=tuple(src),
                                               dst=tuple(dst)))
                lowered[(g.id, tb.id, o)] = SwitchOp(op.name, g.id, tuple(dranks), dref.size)
            tbs.append(PlanThreadBlock(tb.id, tb.channels, refs, ops))
        gpus.append(dataclasses.replace(g, remote_buffers=remote, threadblocks=tbs))
    return dataclasses.replace(plan, gpus=gpus), lowered
