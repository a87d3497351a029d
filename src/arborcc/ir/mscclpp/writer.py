"""An arborcc :class:`~arborcc.ir.model.Algorithm` as an MSCCL++ execution plan.

The IR's connections are FIFOs with back-pressure (a send waits while the receiver's
slots are full); MSCCL++ has one-sided puts and semaphores. :func:`write_mscclpp_plan`
maps one onto the other (``docs/mscclpp.md`` has the table):

* each IR thread block becomes one plan thread block (same id); each connection
  ``(sender, receiver, channel)`` one memory-channel pair, paired by MSCCL++'s rule (the
  ``k``-th channel of ``a`` to ``b`` with the ``k``-th of ``b`` to ``a``, in the order of
  the connections sorted by ``(sender, receiver, channel)``);
* **Simple**: a connection owns ``slots`` scratch slots on the receiver (each as large as
  its largest message). A send is ``put`` into the next slot, then ``signal``; a
  receive is ``wait``, then the step's local work reads the slot (``copy``, ``re``,
  ``res`` for the forwarding steps, whose sum goes into the slot and on to the next
  peer). The FIFO's back-pressure becomes semaphore credits: after reading message
  ``m`` the receiver signals back when a message ``m + slots`` follows, and the sender
  waits for that credit before it puts message ``m + slots``;
* **LL**: every message has its own packet slot (a slot is never rewritten within a
  call, so the flags need no credits): ``ppkt`` sends, ``upkt``/``repkt``/``respkt``
  receive; ``use_double_scratch_buffer`` lets consecutive calls alternate flags;
* a dependency on another thread block's step becomes a device semaphore:
  ``sem_release`` right after the step, ``sem_acquire`` right before the waiting one;
* ``nop`` (``__syncthreads``) separates a wait from the work that reads its data, and
  the work from the signal that publishes it.

The scratch budget: the plan's scratch (the algorithm's own chunks plus the slots; twice
that for packets, twice again with the double buffer) must fit MSCCL++'s 64 MB
(``PREDFINED_SCRATCH_SIZE``) at the plan's ``max_message_size``, which the writer sets
to the largest size that fits (or the algorithm's ``max_bytes`` when smaller); an
algorithm that needs more at its ``min_bytes`` is refused.

A thread block of more than 64 operations (MSCCL++'s ``MAX_OPERATION``) is split into
*continuations*: further plan thread blocks with the same channels, each starting with
``sem_acquire`` of a semaphore the part before it releases as its last operation. The
parts run one after the other and share the channels (MSCCL++ keeps a channel's
semaphore counters in device memory); the reader merges them back.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field

from arborcc.errors import InputError
from arborcc.ir.aliasing import Mode
from arborcc.ir.collectives import signature
from arborcc.ir.model import Algorithm, Op, Protocol, Step, ThreadBlock
from arborcc.ir.mscclpp import rules

#: scratch slots per connection for Simple (NCCL's NCCL_STEPS; arborcc's FIFO default depth)
DEFAULT_SLOTS = 8
#: the protocols an MSCCL++ plan can name
PROTOCOLS = ("LL", "Simple")



#: per IR step that moves data, the MSCCL++ operations it becomes with the Simple protocol:
#: (name, source forms, destination forms, whether it reduces (``reduce_op: sum``)); a form
#: is the step's ``src`` or ``dst`` chunks, the receive slot it ``got`` the message in, the
#: peer's slot it sends ``out`` to (an operation writing one runs on the memory channel) or
#: this thread block's ``spare`` scratch
SIMPLE_OPERATIONS: dict[Op, tuple[tuple[str, tuple[str, ...], tuple[str, ...], bool], ...]] = {
    Op.SEND: (("put", ("src",), ("out",), False),),
    Op.RECV: (("copy", ("got",), ("dst",), False),),
    Op.RECV_REDUCE_COPY: (("re", ("src", "got"), ("dst",), True),),
    Op.RECV_REDUCE_SEND: (("res", ("src", "got"), ("got", "out"), True),),  # the sum into the slot, and on
    Op.RECV_COPY_SEND: (("copy", ("got",), ("dst",), False), ("put", ("got",), ("out",), False)),
    Op.RECV_REDUCE_COPY_SEND: (("res", ("src", "got"), ("dst", "out"), True),),
}
#: the same with LL packets (no signals: the packets' flags order them)
PACKET_OPERATIONS: dict[Op, tuple[tuple[str, tuple[str, ...], tuple[str, ...], bool], ...]] = {
    Op.SEND: (("ppkt", ("src",), ("out",), False),),
    Op.RECV: (("upkt", ("got",), ("dst",), False),),
    Op.RECV_REDUCE_COPY: (("repkt", ("src", "got"), ("dst",), True),),
    Op.RECV_REDUCE_SEND: (("respkt", ("src", "got"), ("spare", "out"), True),),  # the sum's plain copy: spare
    Op.RECV_COPY_SEND: (("upkt", ("got",), ("dst",), False), ("rppkt", ("got",), ("out",), False)),
    Op.RECV_REDUCE_COPY_SEND: (("respkt", ("src", "got"), ("dst", "out"), True),),
}

class PlanWriteError(InputError):
    """An algorithm that has no MSCCL++ plan within MSCCL++'s limits."""


@dataclass
class _Connection:
    sender: int
    receiver: int
    channel: int
    messages: list[int] = field(default_factory=list)  #: chunk count of each message, in order
    slot_base: int = 0  #: first scratch chunk of the slots on the receiver
    slot_chunks: int = 0  #: chunks per slot
    slots: int = 0
    pair_index: int = 0  #: k: the k-th channel between the two ranks


def write_mscclpp_plan(algo: Algorithm, mode: Mode | str | None = None, slots: int = DEFAULT_SLOTS,
                       name: str | None = None) -> str:
    """The plan's JSON text. ``mode``: the call it is for (MSCCL++ plans name one; default
    in-place when the algorithm claims it); ``slots``: Simple's scratch slots per connection."""
    return plan_json(plan_document(algo, mode, slots, name))


def plan_json(document: dict) -> str:
    """A plan document as JSON text: indented by one space a level down to each thread
    block's ``ops``, one operation to a line (a plan holds up to hundreds of thousands of
    operations; the json module's indenting encoder is pure Python, and each line here is
    written by its compact one in C: 2.4 times faster on a 2.8 MB plan)."""
    def text(value, depth: int, key: str | None = None) -> str:
        pad, inner = "\n" + " " * depth, "\n" + " " * (depth + 1)
        if isinstance(value, dict) and value:
            return "{" + ",".join(f"{inner}{json.dumps(k)}: {text(v, depth + 1, k)}"
                                  for k, v in value.items()) + pad + "}"
        if key == "ops" and value:
            return "[" + ",".join(inner + json.dumps(op) for op in value) + pad + "]"
        if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
            return "[" + ",".join(inner + text(v, depth + 1) for v in value) + pad + "]"
        return json.dumps(value)

    return text(document, 0) + "\n"


def plan_document(algo: Algorithm, mode: Mode | str | None = None, slots: int = DEFAULT_SLOTS,
                  name: str | None = None) -> dict:
    """The plan as a JSON-ready dict (see :func:`write_mscclpp_plan`)."""
    return _Writer(algo, mode, slots, name).document()


class _Writer:
    def __init__(self, algo: Algorithm, mode, slots: int, name: str | None):
        if slots < 1:
            raise PlanWriteError(f"slots must be at least 1, got {slots}", source="--slots")
        if algo.protocol.value not in PROTOCOLS:
            raise PlanWriteError(f"MSCCL++ plans have the Simple and LL protocols, not {algo.protocol.value}",
                                 source=f"algorithm {algo.name!r}")
        self.algo, self.slots, self.name = algo, slots, name or algo.name
        self.source = f"algorithm {algo.name!r}"
        if mode is None:
            mode = Mode.INPLACE if algo.inplace else Mode.OUTOFPLACE
        self.mode = Mode(mode)
        self.packets = algo.protocol is Protocol.LL
        self.conns: dict[tuple[int, int, int], _Connection] = {}
        self.semaphores: dict[int, list[int]] = defaultdict(list)  # rank -> init values

    def fail(self, problem: str):
        raise PlanWriteError(problem, source=self.source)

    # --- layout ---------------------------------------------------------------------------
    def plan_connections(self) -> None:
        for prog in self.algo.ranks:
            for tb in prog.threadblocks:
                for st in tb.steps:
                    if st.op.sends:
                        c = self.conns.setdefault((prog.rank, tb.send, tb.channel),
                                                  _Connection(prog.rank, tb.send, tb.channel))
                        c.messages.append(max(st.count, 1))
        pairs: dict[frozenset, list[_Connection]] = defaultdict(list)
        for key in sorted(self.conns):
            c = self.conns[key]
            pairs[frozenset((c.sender, c.receiver))].append(c)
        for conns in pairs.values():
            for k, c in enumerate(conns):
                c.pair_index = k
        for prog in self.algo.ranks:  # slots on the receiver, after its own scratch
            base = self.own_scratch(prog.rank)
            for key in sorted(self.conns):
                c = self.conns[key]
                if c.receiver != prog.rank:
                    continue
                c.slot_chunks = max(c.messages)
                c.slots = len(c.messages) if self.packets else min(self.slots, len(c.messages))
                c.slot_base = base
                base += c.slot_chunks * c.slots
            self.scratch_total[prog.rank] = base

    def own_scratch(self, rank: int) -> int:
        """Scratch chunks before the slots: the algorithm's own, and (LL) a chunk region per
        thread block for the plain sums of forwarding steps; packet slots start at an index
        whose packets lie beyond that plain data (a packet chunk j takes plain chunks 2j, 2j+1)."""
        prog = self.by_rank[rank]
        own = prog.scratch_chunks
        if self.packets:
            own += self.spare_chunks(prog)
        return own

    def spare_chunks(self, prog) -> int:
        return sum(max((s.count for s in tb.steps if s.op is Op.RECV_REDUCE_SEND), default=0)
                   for tb in prog.threadblocks)

    def channel_index(self, rank: int, peer: int, k: int) -> int:
        """The rank's flattened channel index of its k-th channel to ``peer``."""
        return self.channel_base[rank][peer] + k

    # --- the document -------------------------------------------------------------------------
    def document(self) -> dict:
        algo = self.algo
        self.by_rank = {p.rank: p for p in algo.ranks}
        self.scratch_total: dict[int, int] = {}
        self.plan_connections()
        self.channel_base: dict[int, dict[int, int]] = {}
        gpus = []
        for prog in sorted(algo.ranks, key=lambda p: p.rank):
            gpus.append(self.gpu(prog))
        in_chunks = max(g["input_chunks"] for g in gpus) or 1
        scratch = max(g["scratch_chunks"] for g in gpus)
        factor = (2 if self.packets else 1) * (2 if self.packets else 1)
        if scratch:  # the largest call whose scratch fits the 64 MB budget
            unit = rules.DEFAULT_BUFFER_ALIGNMENT * in_chunks
            budget_max = rules.SCRATCH_BYTES * in_chunks // (scratch * factor) // unit * unit
        else:
            budget_max = rules.MAX_MESSAGE_SIZE
        max_size = min(budget_max, algo.max_bytes) if algo.max_bytes else budget_max
        if max_size < max(algo.min_bytes, 1):
            kind = "packets, double-buffered" if self.packets else "slots"
            self.fail(f"needs {scratch} scratch chunks per rank ({kind}): no message size from min_bytes "
                      f"{algo.min_bytes:,} fits MSCCL++'s 64 MB scratch; fewer slots per connection or fewer chunks "
                      f"would")
        return {
            "name": self.name, "collective": algo.collective, "protocol": "LL" if self.packets else "Simple",
            "inplace": self.mode is Mode.INPLACE, "reuse_resources": False,
            "use_double_scratch_buffer": self.packets, "buffer_alignment": rules.DEFAULT_BUFFER_ALIGNMENT,
            "num_threads_per_block": rules.DEFAULT_THREADS_PER_BLOCK,
            "min_message_size": algo.min_bytes, "max_message_size": max_size, "gpus": gpus,
        }

    def gpu(self, prog) -> dict:
        r = prog.rank
        algo = self.algo
        sig = signature(algo.collective, algo.num_ranks, algo.chunks_per_loop, r, algo.effective_root)
        in_chunks = sig.input_chunks if sig else prog.input_chunks
        out_chunks = sig.output_chunks if sig else prog.output_chunks
        peers = sorted({c.receiver if c.sender == r else c.sender for c in self.conns.values()
                        if r in (c.sender, c.receiver)})
        counts = {p: sum(1 for c in self.conns.values() if {c.sender, c.receiver} == {r, p}) for p in peers}
        self.channel_base[r] = {}
        base = 0
        for p in peers:
            self.channel_base[r][p] = base
            base += counts[p]
        senders_to = sorted({c.receiver for c in self.conns.values() if c.sender == r})
        remote_index = {p: i for i, p in enumerate(senders_to)}
        self.rank_sems: list[int] = []
        self.releases: dict[tuple[int, int], list[int]] = defaultdict(list)  # (tb, step) -> semaphores
        self.acquires: dict[tuple[int, int], list[int]] = defaultdict(list)
        for tb in prog.threadblocks:
            for i, st in enumerate(tb.steps):
                if st.dep is not None:
                    sem = len(self.rank_sems)
                    self.rank_sems.append(0)
                    self.releases[(st.dep.tb, st.dep.step)].append(sem)
                    self.acquires[(tb.id, i)].append(sem)
        ids = sorted(tb.id for tb in prog.threadblocks)
        if ids != list(range(len(ids))):
            self.fail(f"rank {r}'s thread block ids are not 0..{len(ids) - 1} (MSCCL++ indexes thread blocks by id); "
                      f"arborcc convert renumbers them")
        self.next_tb_id = len(ids)
        tbs = [part for tb in sorted(prog.threadblocks, key=lambda t: t.id)
               for part in self.threadblock(r, tb, remote_index)]
        tbs.sort(key=lambda t: t["id"])
        return {
            "id": r, "input_chunks": in_chunks, "output_chunks": out_chunks,
            "scratch_chunks": self.scratch_total.get(r, self.own_scratch(r)),
            "channels": [{"channel_type": "memory", "connected_to": [p] * counts[p]} for p in peers],
            "remote_buffers": [{"rank": p, "type": "s", "access_channel_types": ["memory"]} for p in senders_to],
            "semaphores": [{"init_value": v} for v in self.rank_sems],
            "threadblocks": tbs,
        }

    # --- one thread block -----------------------------------------------------------------------
    def threadblock(self, r: int, tb: ThreadBlock, remote_index: dict[int, int]) -> list[dict]:
        """The plan thread block of ``tb``, and its continuations when it needs more than 64 operations."""
        send = self.conns.get((r, tb.send, tb.channel)) if tb.send >= 0 else None
        recv = self.conns.get((tb.recv, r, tb.channel)) if tb.recv >= 0 else None
        channel_ids, local = [], {}
        for role, c in (("send", send), ("recv", recv)):
            if c is not None:
                peer = c.receiver if role == "send" else c.sender
                local[role] = len(channel_ids)
                channel_ids.append(self.channel_index(r, peer, c.pair_index))
        ops: list[dict] = []
        counters = {"send": 0, "recv": 0}
        spare_base = self.by_rank[r].scratch_chunks + sum(
            max((s.count for s in t.steps if s.op is Op.RECV_REDUCE_SEND), default=0)
            for t in self.by_rank[r].threadblocks if t.id < tb.id)

        def sync(name: str, role: str) -> None:
            ops.append({"name": name, "channel_ids": [local[role]], "channel_type": "memory"})

        def nop() -> None:
            if ops and ops[-1]["name"] != "nop":
                ops.append({"name": "nop"})

        def buf(btype, off: int, count: int) -> dict:
            return {"type": btype.value, "index": off, "size": count}

        def slot(c: _Connection, m: int, count: int, remote: bool) -> dict:
            index = c.slot_base + (m % c.slots) * c.slot_chunks
            if remote:
                return {"buffer_id": 0, "index": index, "size": count}
            return {"type": "s", "index": index, "size": count}

        for i, st in enumerate(tb.steps):
            if self.acquires.get((tb.id, i)):
                ops.append({"name": "sem_acquire", "semaphore_ids": self.acquires[(tb.id, i)][:16]})
                for extra in range(16, len(self.acquires[(tb.id, i)]), 16):
                    ops.append({"name": "sem_acquire", "semaphore_ids": self.acquires[(tb.id, i)][extra:extra + 16]})
                nop()
            self.step(st, send, recv, counters, sync, nop, buf, slot, ops, spare_base)
            if self.releases.get((tb.id, i)):
                nop()
                sems = self.releases[(tb.id, i)]
                for start in range(0, len(sems), 16):
                    ops.append({"name": "sem_release", "semaphore_ids": sems[start:start + 16]})
        while ops and ops[-1]["name"] == "nop":
            ops.pop()
        channels = [{"channel_type": "memory", "channel_ids": channel_ids}] if channel_ids else []
        refs = ([{"access_channel_type": "memory", "remote_buffer_ids": [remote_index[send.receiver]]}]
                if send is not None else None)
        parts = self.split(ops)
        ids = [tb.id] + [self.take_tb_id() for _ in parts[1:]]
        out = []
        for n, (tid, part) in enumerate(zip(ids, parts)):
            if n > 0:  # a continuation starts when the part before it is done
                sem = len(self.rank_sems)
                self.rank_sems.append(0)
                out[-1]["ops"] += [{"name": "nop"}, {"name": "sem_release", "semaphore_ids": [sem]}]
                part = [{"name": "sem_acquire", "semaphore_ids": [sem]}, {"name": "nop"}] + part
            out.append({"id": tid, "ops": part, "channels": channels})
            if refs is not None:
                out[-1]["remote_buffer_refs"] = refs
        return out

    @staticmethod
    def split(ops: list[dict]) -> list[list[dict]]:
        """The operations in parts that fit MSCCL++'s 64 per thread block with the
        continuation's semaphore and ``nop`` at either end (4 operations)."""
        most = rules.MAX_OPERATIONS_PER_THREADBLOCK
        if len(ops) <= most:
            return [ops]
        body = most - 4
        first = most - 2
        parts = [ops[:first]]
        rest = ops[first:]
        while len(rest) > most - 2:
            parts.append(rest[:body])
            rest = rest[body:]
        parts.append(rest)
        return parts

    def take_tb_id(self) -> int:
        self.next_tb_id += 1
        return self.next_tb_id - 1

    def step(self, st: Step, send, recv, counters, sync, nop, buf, slot, ops, spare_base: int) -> None:
        op = st.op
        count = max(st.count, 1)
        if op is Op.NOP:
            return
        if op in (Op.COPY,):
            ops.append({"name": "copy", "src_buff": [buf(st.src_buf, st.src_off, count)],
                        "dst_buff": [buf(st.dst_buf, st.dst_off, count)]})
            return
        if op in (Op.REDUCE, Op.RESIDUAL_ADD):
            ops.append({"name": "re", "src_buff": [buf(st.dst_buf, st.dst_off, count),
                                                   buf(st.src_buf, st.src_off, count)],
                        "dst_buff": [buf(st.dst_buf, st.dst_off, count)], "reduce_op": "sum"})
            return
        m_in = m_out = None
        if op.receives:
            if recv is None:
                self.fail("a receive step in a thread block with no receive peer")
            m_in = counters["recv"]
            counters["recv"] += 1
            if not self.packets:
                sync("wait", "recv")
                nop()
        if op.sends:
            if send is None:
                self.fail("a send step in a thread block with no send peer")
            m_out = counters["send"]
            counters["send"] += 1
            if not self.packets and m_out >= send.slots:  # a credit for the slot this message reuses
                sync("wait", "send")
                nop()
        operations = (PACKET_OPERATIONS if self.packets else SIMPLE_OPERATIONS).get(op)
        if operations is None:
            self.fail(f"step type {op.value!r} has no MSCCL++ form")
        forms = {"got": slot(recv, m_in, count, False) if m_in is not None else None,
                 "out": slot(send, m_out, count, True) if m_out is not None else None,
                 "src": buf(st.src_buf, st.src_off, count) if st.src_buf is not None else None,
                 "dst": buf(st.dst_buf, st.dst_off, count) if st.dst_buf is not None else None,
                 "spare": {"type": "s", "index": spare_base, "size": count}}
        for name, srcs, dsts, reduces in operations:
            operation = {"name": name, "src_buff": [forms[f] for f in srcs], "dst_buff": [forms[f] for f in dsts]}
            if "out" in dsts:
                operation["channel_type"] = "memory"
            if reduces:
                operation["reduce_op"] = "sum"
            ops.append(operation)
        if not self.packets:
            if m_out is not None:
                nop()
                sync("signal", "send")
            if m_in is not None and m_in + recv.slots < len(recv.messages):  # the sender waits for this credit
                nop()
                sync("signal", "recv")
