"""Thread-block and channel assignment (GC3 section 5.2).

Rules every assignment keeps (they are the MSCCL runtimes'):

* a thread block has at most one send peer and one receive peer, and one channel;
* a connection (peer, channel) of a rank has exactly one sending and one receiving
  thread block.

*Automatic* policy. A *chain* is a send, the fused instructions forwarding its data,
and the final receive (GC3: "a series of fused instructions share the same channel").
Chains with fused instructions are placed first, in the global order, each on the
lowest channel where every fused instruction finds a thread block already joining its
two peers, or a free connection to start or extend one (a channel hint of the program
is honoured); a chain no channel can carry - typically one that passes a rank twice
with one peer in common, which one connection's single thread block cannot serve - is
cut by undoing fusions. A plain send or receive then joins the thread block that owns its
connection on its channel (hinted, else 0), or gets a new one; a local copy or reduce
joins the thread block of its latest predecessor (no synchronization needed), else the
rank's local thread block. Parallelized instances (``parallelize``) live in separate
channel ranges.

*Manual* policy: every transfer names ``sendtb``/``recvtb`` (and ``ch``, default 0);
conflicts with the rules above are reported at the program line that caused them.

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

from types import SimpleNamespace

import arborcc.compiler.native as native
from arborcc.compiler.instructions import CPY, RE, InstrTable
from arborcc.ir.limits import MAX_CHANNELS
from arborcc.lang.where import format_location, program_error


class TB:
    """A thread block the manual policy builds."""

    __slots__ = ("rank", "id", "send", "recv", "ch", "lane", "where")

    def __init__(self, rank: int, id: int, send: int, recv: int, ch: int, lane: int):
        self.rank, self.id, self.send, self.recv, self.ch, self.lane = rank, id, send, recv, ch, lane
        self.where: dict[str, int] = {}  #: which operation set send/recv/ch

    def __repr__(self) -> str:
        return f"TB(rank={self.rank}, id={self.id}, send={self.send}, recv={self.recv}, ch={self.ch})"


def assign_auto(t: InstrTable, order: list[int], pred_rows, num_ranks: int) -> native.Assignment:
    """Automatic thread-block and channel assignment (see module docstring), in compiled
    code (``arborcc.compiler.native``, csrc/threadblocks.cpp).

    Fused instructions are placed first, chain by chain in the global order; then each
    send with its receive, and each local copy or reduce. A fused chain no channel can
    carry is cut by undoing fusions (:func:`arborcc.compiler.fusion.unfuse`): the table
    and ``order`` are then updated in place, each revived send placed right after
    the receive it was fused into - the order stays topological and FIFO-consistent, as
    the send goes out where the fused one did. ``pred_rows``: the DAG's predecessors
    (:attr:`arborcc.compiler.dag.Dag.pred_rows`).
    """
    return native.assign_auto(t, order, pred_rows, num_ranks, MAX_CHANNELS)


def assign_manual(t: InstrTable, order: list[int], num_ranks: int, prog) -> native.Assignment:
    """Manual policy: the program's sendtb/recvtb/ch, checked against the rules."""
    tb_of: list[TB | None] = [None] * len(t)
    c = SimpleNamespace(**{f: getattr(t, f) for f in InstrTable.FIELDS})  # the columns, read once
    ops = prog.ops
    ch_span = max([ch for ch in c.ch if ch >= 0], default=0) + 1
    shared_unnamed = getattr(prog, "unnamed_tb_shared", False)
    by_id: list[dict[tuple[int, int], TB]] = [{} for _ in range(num_ranks)]  # (lane, tb named) -> TB
    send_owner: dict[tuple, TB] = {}
    recv_owner: dict[tuple, TB] = {}

    def where(i: int):
        return ops[c.op[i]][-1]

    def get_tb(i: int, tbid: int, role: str) -> TB:
        r, q = c.rank[i], c.lane[i]
        if tbid < 0 and not shared_unnamed:
            raise program_error(
                f"the manual thread-block policy needs {role}= for this {_verb(c, i)} "
                f"(rank {r})", where(i))
        tb = by_id[r].get((q, tbid))
        if tb is None:
            tb = by_id[r][q, tbid] = TB(r, tbid, -1, -1, -1, q)
        return tb

    def bind(tb: TB, i: int, attr: str, peer: int, owners: dict) -> None:
        r = c.rank[i]
        ch = max(c.ch[i], 0) + c.lane[i] * ch_span
        if tb.ch == -1:
            tb.ch, tb.where["ch"] = ch, i
        elif tb.ch != ch:
            raise program_error(
                f"thread block {tb.id} of rank {r} is on channel {tb.ch} (set at "
                f"{format_location(where(tb.where['ch']))}) and cannot also use channel {ch}", where(i))
        current = getattr(tb, attr)
        verb = "send to" if attr == "send" else "receive from"
        if current == -1:
            setattr(tb, attr, peer)
            tb.where[attr] = i
        elif current != peer:
            raise program_error(
                f"thread block {tb.id} of rank {r} would {verb} both rank {current} (at "
                f"{format_location(where(tb.where[attr]))}) and rank {peer}: a thread block has one "
                f"{attr} peer", where(i))
        key = (r, ch, peer)
        other = owners.get(key)
        if other is None:
            owners[key] = tb
        elif other is not tb:
            raise program_error(
                f"rank {r} would {verb} rank {peer} on channel {ch} from thread blocks {other.id} (at "
                f"{format_location(where(other.where[attr]))}) and {tb.id}: a connection has one "
                f"{'sending' if attr == 'send' else 'receiving'} thread block", where(i))

    for i in order:
        k = c.kind[i]
        if k == CPY or k == RE:
            tb = get_tb(i, c.sendtb[i], "sendtb")
        elif c.speer[i] >= 0 and c.rpeer[i] >= 0:  # fused: sendtb == recvtb by construction
            tb = get_tb(i, c.recvtb[i], "recvtb")
            bind(tb, i, "recv", c.rpeer[i], recv_owner)
            bind(tb, i, "send", c.speer[i], send_owner)
        elif c.speer[i] >= 0:
            tb = get_tb(i, c.sendtb[i], "sendtb")
            bind(tb, i, "send", c.speer[i], send_owner)
        else:
            tb = get_tb(i, c.recvtb[i], "recvtb")
            bind(tb, i, "recv", c.rpeer[i], recv_owner)
        tb_of[i] = tb
    index: dict[int, int] = {}  # id() of a thread block -> its place in the assignment
    tbs: list[TB] = []
    for r in range(num_ranks):
        for new_id, key in enumerate(sorted(by_id[r])):  # ids contiguous from 0, order kept
            tb = by_id[r][key]
            tb.id = new_id
            if tb.ch == -1:
                tb.ch = 0
            index[id(tb)] = len(tbs)
            tbs.append(tb)
    return native.Assignment([-1 if tb is None else index[id(tb)] for tb in tb_of],
                             *([getattr(tb, f) for tb in tbs] for f in ("rank", "id", "send", "recv", "ch", "lane")),
                             num_ranks)


def _verb(c: SimpleNamespace, i: int) -> str:
    if c.speer[i] >= 0 and c.rpeer[i] >= 0:
        return f"forward from rank {c.rpeer[i]} to rank {c.speer[i]}"
    if c.speer[i] >= 0:
        return f"send to rank {c.speer[i]}"
    if c.rpeer[i] >= 0:
        return f"receive from rank {c.rpeer[i]}"
    return "local operation"
