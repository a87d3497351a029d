"""The global instruction order every thread block follows (GC3 section 5.2, step 4).

Instructions are sorted by dependency depth (earlier-ready first), then by reverse
dependency depth (instructions with more hops still ahead first), then by program
order. Every DAG edge (processing or communication) goes from a smaller to a strictly
larger depth, so this is a topological order; thread blocks executing their
instructions in one such order, with cross-thread-block dependencies pointing backwards
in it, cannot wait on each other in a cycle (deadlock freedom by construction).
Fusion keeps the pre-fusion depths valid: a fused instruction takes its receive's depth,
and everything after its send had a larger depth already.

The runtime matches the messages of a connection in FIFO order, so the receives of a
connection must come in the order of its sends. The priority order usually has that
property; :func:`fifo_consistent` checks it (per sender, receiver and parallel lane,
which covers every channel split). When it fails, :func:`repair_order` re-sorts with
Kahn's algorithm, keeping the priority where it can, under extra edges that chain the
sends - and in the same order the receives - of each rank pair: first in priority
order, then in program order (a fused instruction counting at its receive's place).
Neither needs to be acyclic: fusion moves a send back to the receive it forwards, so in
program order a fused message can be sent before, and received after, another message
of its pair, and a fused instruction ties the order of the pair it receives on to the
order of the pair it sends on (tree all-reduces with interleaved trees do both). The
third attempt, :func:`_kahn_fifo`, fixes each pair's order while it schedules (a
receive only when its message is the oldest in flight), which follows fused chains;
it runs with the priority order, then with program order - where the tree lowerings'
programs end up: when program order itself is a valid schedule (one pass checks it,
:func:`_fifo_schedule`), that greedy would return it unchanged, so it is not run.
A repaired order must also be *slot-safe* (:func:`slot_safe`): connections are bounded
queues, and an order that keeps many messages of a pair in flight can deadlock where
the unbounded model would not. If every attempt fails, the pipeline undoes fusions
(:func:`fifo_conflicting_fusions`, then all of them: program order of the unfused
instructions always works). Slot safety counts messages, and the priority order is not
held to it; what decides is the schedule built from the order, run with its steps cut
into the runtimes' pieces (:mod:`.pieces`, after thread blocks and synchronization):
where that does not finish the pipeline falls back.

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

import numpy as np

import arborcc.compiler.native as native
from arborcc.compiler.dag import Dag
from arborcc.compiler.instructions import InstrTable


#: messages per rank pair an order repaired for FIFO consistency may keep in flight (the
#: reference runtime's default connection size; MSCCL's Simple protocol has 8); the
#: compiled passes define it (order.hpp)
SAFE_SLOTS = native.SAFE_SLOTS


def global_order(t: InstrTable, dag: Dag) -> list[int]:
    """Alive instructions in priority order: by dependency depth, then reverse dependency
    depth (more hops ahead first; all 0 before :func:`~arborcc.compiler.dag.reverse_depths`
    computed them), then program order (compiled code, order.cpp)."""
    return native.global_order(t, dag.scan)


def _messages(t: InstrTable) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pair key, sending instruction, receiving instruction) of every message."""
    n = len(t)
    msg_out = np.array(t.msg_out, dtype=np.int64)
    alive = np.array(t.alive, dtype=bool)
    senders = np.flatnonzero((msg_out >= 0) & alive)
    receivers = msg_out[senders]
    rank = np.array(t.rank, dtype=np.int64)
    nr = int(rank.max()) + 1 if n else 1
    pair = rank[senders] * nr + rank[receivers]
    lane = np.array(t.lane, dtype=np.int64)
    if lane.any():
        pair = pair * (int(lane.max()) + 1) + lane[senders]
    return pair, senders, receivers


def fifo_consistent(t: InstrTable, order: list[int]) -> bool:
    """Whether, for every rank pair, receives follow ``order`` in the order of the sends
    (compiled code, order.cpp)."""
    return native.fifo_consistent(t, order)


def repair_order(t: InstrTable, order: list[int], pred_rows, stuck: list[int] | None = None) -> list[int] | None:
    """A priority-preserving, slot-safe order in which every pair's receives follow its
    sends, or None when none of the three attempts finds one (the caller then undoes
    fusions: see :func:`fifo_conflicting_fusions`; ``stuck`` receives the fused
    instructions the last attempt was stuck at). ``pred_rows``: the DAG's
    predecessors (:attr:`arborcc.compiler.dag.Dag.pred_rows`)."""
    graph = native.OrderGraph(t, order, pred_rows)
    for by_priority in (True, False):  # chain each pair by priority order, then program order
        result = graph.kahn(order, by_priority)
        if result is not None:
            return result
    result = _kahn_fifo(t, order, graph, stuck)
    if result is None:  # program order as the priority: the greedy gets stuck less often
        program = graph.program_order(order)  # the order's instructions by index
        result = program if _fifo_schedule(t, program, graph) else _kahn_fifo(t, program, graph)
    return result


def _fifo_schedule(t: InstrTable, order: list[int], graph) -> bool:
    """Whether :func:`_kahn_fifo` with ``order`` as the priority returns ``order`` itself:
    every instruction's dependencies come before it, each receive's message is the
    oldest of its pair in flight, and no send finds :data:`SAFE_SLOTS` messages of its
    pair in flight. Then each instruction is ready and unblocked at its turn, and is the
    smallest ready one, so the greedy takes them in this order; checked in one pass
    instead of running the greedy with its heap (tree programs end up in program order)."""
    return graph.fifo_schedule(order)


def slot_safe(t: InstrTable, order: list[int], slots: int = SAFE_SLOTS) -> bool:
    """Whether, running ``order`` one instruction at a time, no send finds ``slots``
    messages of its rank pair in flight. Thread blocks following such an order cannot
    deadlock on connections of ``slots`` entries: the first blocked step in the order has
    everything before it done, and the sends of its connection after it not done."""
    return native.slot_safe(t, order, slots)


def fifo_conflicting_fusions(t: InstrTable) -> list[int]:
    """Fused instructions to unfuse so that chaining in program order has no cycle.

    In program order a message goes from its sending instruction's index to its
    receiving instruction's: ``[q - 1, q]`` for a plain send ``q - 1``, but ``[r, q]``
    for a send fused into the receive ``r`` - fusion moves the send back to ``r``. If
    that interval contains another message of the same rank pair, the two messages are
    sent in one order and received in the other, and the chain edges may close a cycle
    (and if data dependencies force both orders, no order of any kind exists). Per pair,
    in the order of the receives (whose indices fusion does not change), a fused message
    is kept when its send index exceeds every earlier message's, else unfused (its send
    index becomes ``q - 1``, larger than every earlier one). Keeping one where possible
    leaves the bound lowest for the rest. The kept messages are then sent in the order
    they are received, every edge goes forward in program order, and there is no cycle.
    """
    pair, senders, receivers = _messages(t)
    if len(senders) == 0:
        return []
    s = np.lexsort((receivers, pair))
    pair_s, snd, rcv = pair[s].tolist(), senders[s].tolist(), receivers[s].tolist()
    fused, msg_in = t.fusions, t.msg_in
    undo: list[int] = []
    prev, bound = None, -1
    for p, a, q in zip(pair_s, snd, rcv):
        if p != prev:
            prev, bound = p, -1
        if msg_in[a] >= 0 and a in fused:  # a fused send, sitting at its receive's place
            if a > bound:
                bound = a
                continue
            undo.append(a)
            a = fused[a][0]  # the send, which goes right before its receive q
        if a > bound:
            bound = a
    return undo


def _kahn_fifo(t: InstrTable, order: list[int], graph, stuck: list[int] | None = None) -> list[int] | None:
    """Kahn's algorithm in priority order that fixes each pair's message order as it goes
    (compiled code, order.cpp): a send appends its message to its pair's queue, and a
    receive may only be taken when its message is at the head. A fused instruction
    receives and sends at once, so the order of one pair carries over to the next along
    fused chains - which chaining every pair by one global key cannot express. A send is
    also held back while its pair has :data:`SAFE_SLOTS` messages in flight, so the order
    is slot-safe (see :func:`slot_safe`). None if it gets stuck (say a head's receive
    waiting for something behind a later message); then the fused instructions among
    those ready but held back go to ``stuck``."""
    result, stuck_here = graph.kahn_fifo(order, t)
    if stuck is not None:
        stuck.extend(stuck_here)
    return result
