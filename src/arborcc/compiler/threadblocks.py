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

from arborcc.compiler.fusion import unfuse
from arborcc.compiler.instructions import CPY, RE, SEND, InstrTable
from arborcc.ir.limits import MAX_CHANNELS
from arborcc.lang.where import format_location, program_error


class TB:
    """A thread block being built."""

    __slots__ = ("rank", "id", "send", "recv", "ch", "lane", "steps", "known", "where")

    def __init__(self, rank: int, id: int, send: int, recv: int, ch: int, lane: int):
        self.rank, self.id, self.send, self.recv, self.ch, self.lane = rank, id, send, recv, ch, lane
        self.steps: list = []  #: emitted IR steps (see :mod:`arborcc.compiler.sync`)
        #: id of a thread block of this rank -> last of its steps already waited for (ids, not
        #: the blocks: blocks waiting on each other would form reference cycles)
        self.known: dict[int, int] = {}
        self.where: dict[str, int] = {}  #: manual policy: which operation set send/recv/ch

    def __repr__(self) -> str:
        return f"TB(rank={self.rank}, id={self.id}, send={self.send}, recv={self.recv}, ch={self.ch})"


class Assignment:
    """Result: ``tb_of[i]`` for every alive instruction and the thread blocks per rank."""

    def __init__(self, num_ranks: int, n: int):
        self.tb_of: list[TB | None] = [None] * n
        self.tbs: list[list[TB]] = [[] for _ in range(num_ranks)]


def _chain(t: InstrTable, head: int) -> list[int]:
    msg_out = t.msg_out
    members = [head]
    j = msg_out[head]
    while j >= 0:
        members.append(j)
        j = msg_out[j]
    return members


class _AutoAssigner:
    def __init__(self, t: InstrTable, num_ranks: int, prog) -> None:
        self.t = t
        self.prog = prog
        self.a = Assignment(num_ranks, len(t))
        self.send_owner: dict[tuple, TB] = {}
        self.recv_owner: dict[tuple, TB] = {}
        self.local_tb: dict[tuple, TB] = {}

    def _new(self, rank: int, send: int, recv: int, ch: int, lane: int, undo: list | None) -> TB:
        tbs = self.a.tbs[rank]
        tb = TB(rank, len(tbs), send, recv, ch, lane)
        tbs.append(tb)
        if undo is not None:
            undo.append((0, tbs, None))
        return tb

    def _place(self, m: int, ch: int, undo: list | None) -> bool:
        """Put chain member ``m`` on channel ``ch``; False if its connections cannot."""
        t = self.t
        r, sp, rp, q = t.rank[m], t.speer[m], t.rpeer[m], t.lane[m]
        so, ro = self.send_owner, self.recv_owner
        if sp >= 0 and rp >= 0:  # fused: one thread block for both connections
            ks, kr = (r, q, ch, sp), (r, q, ch, rp)
            ts, tr = so.get(ks), ro.get(kr)
            if ts is None and tr is None:
                tb = self._new(r, sp, rp, ch, q, undo)
                so[ks] = ro[kr] = tb
                if undo is not None:
                    undo.append((1, so, ks))
                    undo.append((1, ro, kr))
            elif ts is None:
                if tr.send != -1:
                    return False
                tb, tb.send, so[ks] = tr, sp, tr
                if undo is not None:
                    undo.append((2, tb, "send"))
                    undo.append((1, so, ks))
            elif tr is None:
                if ts.recv != -1:
                    return False
                tb, tb.recv, ro[kr] = ts, rp, ts
                if undo is not None:
                    undo.append((2, tb, "recv"))
                    undo.append((1, ro, kr))
            elif ts is tr:
                tb = ts
            else:
                return False
        elif sp >= 0:
            ks = (r, q, ch, sp)
            tb = so.get(ks)
            if tb is None:
                tb = so[ks] = self._new(r, sp, -1, ch, q, undo)
                if undo is not None:
                    undo.append((1, so, ks))
        else:
            kr = (r, q, ch, rp)
            tb = ro.get(kr)
            if tb is None:
                tb = ro[kr] = self._new(r, -1, rp, ch, q, undo)
                if undo is not None:
                    undo.append((1, ro, kr))
        self.a.tb_of[m] = tb
        return True

    @staticmethod
    def _rollback(undo: list) -> None:
        for what, obj, key in reversed(undo):
            if what == 0:
                obj.pop()
            elif what == 1:
                del obj[key]
            else:
                setattr(obj, key, -1)

    def place_chain(self, members: list[int], ends: bool = True) -> int | None:
        """Choose the chain's channel and place its fused middle instructions (and, with
        ``ends``, its first send and last receive); returns the channel, or None (nothing
        placed) when no channel can carry the fused instructions."""
        t = self.t
        hint, ch = -1, t.ch
        for m in members:
            if ch[m] != -1:
                hint = ch[m]
                break
        channels = [hint] if hint != -1 else range(MAX_CHANNELS)
        middles = members[1:-1]
        chosen = None
        if not middles:  # a plain transfer always fits
            chosen = channels[0]
        rank, lane, speer, rpeer, tb_of = t.rank, t.lane, t.speer, t.rpeer, self.a.tb_of
        so = self.send_owner
        for c in channels if middles else ():
            undo: list = []
            ok = True
            for m in middles:
                # the common case first: a thread block already joins exactly these peers
                tb = so.get((rank[m], lane[m], c, speer[m]))
                if tb is not None and tb.recv == rpeer[m]:
                    tb_of[m] = tb
                elif not self._place(m, c, undo):
                    ok = False
                    break
            if ok:
                chosen = c
                break
            self._rollback(undo)
        if chosen is not None and ends:
            self.place_ends(members, chosen)
        return chosen

    def place_fused(self, members: list[int], rep: list[int], inserted: dict[int, int]) -> list[tuple[list[int], int]]:
        """Place a chain's fused instructions; returns the fused (sub)chains and channels.

        A chain that no channel can carry is cut by undoing fusions (the sends come back
        as plain sends, to be placed with the others; ``inserted[r] = s`` records that send
        ``s`` now follows receive ``r`` in the order): first wherever it meets a rank again
        with one of the same peers but another partner (two thread blocks of one chain
        would need the same connection), then, if a piece still does not fit (channels
        exhausted), into plain transfers, which always fit.
        """
        ch = self.place_chain(members, ends=False)
        if ch is not None:
            return [(members, ch)]
        t = self.t
        for m in members:  # the failed attempts may have left some
            self.a.tb_of[m] = None
        rank, speer, rpeer = t.rank, t.speer, t.rpeer
        pieces, cur, seen = [], [members[0]], {}
        for m in members[1:-1]:
            r, sp, rp = rank[m], speer[m], rpeer[m]
            if seen.get((r, 0, sp), rp) != rp or seen.get((r, 1, rp), sp) != sp:
                cur.append(self._unfuse(m, rep, inserted))  # m ends this piece as a receive
                pieces.append(cur)
                cur = [inserted[m]]
                seen = {}
                continue
            seen[(r, 0, sp)] = rp
            seen[(r, 1, rp)] = sp
            cur.append(m)
        cur.append(members[-1])
        pieces.append(cur)
        placed = []
        for piece in pieces:
            if len(piece) < 3:
                continue  # a plain transfer: placed with the others
            ch = self.place_chain(piece, ends=False)
            if ch is None:
                for m in piece[1:-1]:
                    self._unfuse(m, rep, inserted)
            else:
                placed.append((piece, ch))
        return placed

    def _unfuse(self, m: int, rep: list[int], inserted: dict[int, int]) -> int:
        inserted[m] = self.t.fusions[m][0]
        unfuse(self.t, rep, (m,))
        return m

    def place_transfer(self, send: int, recv: int) -> None:
        """A plain transfer (a chain without fused instructions): on the channel its
        send or else its receive names, else on channel 0 (as :meth:`place_chain`)."""
        ch = self.t.ch
        c = ch[send] if ch[send] != -1 else ch[recv] if ch[recv] != -1 else 0
        self._place(send, c, None)
        self._place(recv, c, None)

    def place_ends(self, members: list[int], ch: int) -> None:
        self._place(members[0], ch, None)
        self._place(members[-1], ch, None)

    def place_local(self, i: int, preds, rep: list[int], pos: list[int]) -> None:
        t, tb_of = self.t, self.a.tb_of
        best, best_pos = None, -1
        for p in preds:
            p = rep[p]
            if pos[p] > best_pos:
                best, best_pos = tb_of[p], pos[p]
        if best is None:
            key = (t.rank[i], t.lane[i])
            best = self.local_tb.get(key)
            if best is None:
                best = self.local_tb[key] = self._new(t.rank[i], -1, -1, 0, t.lane[i], None)
        tb_of[i] = best


def assign_auto(t: InstrTable, order: list[int], preds: list, rep: list[int], num_ranks: int, prog) -> Assignment:
    """Automatic thread-block and channel assignment (see module docstring).

    A fused chain no channel can carry is cut by undoing fusions (see
    :meth:`_AutoAssigner.place_fused`): ``order`` and ``rep`` are then updated in place,
    each revived send placed right after the receive it was fused into - the order stays
    topological and FIFO-consistent, as the send goes out where the fused one did.
    """
    asg = _AutoAssigner(t, num_ranks, prog)
    kind, msg_out = t.kind, t.msg_out
    # fused instructions first: they decide which peers share a thread block; the chains'
    # first sends and last receives then join those thread blocks where they can
    fused_chains = []
    inserted: dict[int, int] = {}
    for i in order:
        if kind[i] == SEND and msg_out[msg_out[i]] >= 0:
            fused_chains.extend(asg.place_fused(_chain(t, i), rep, inserted))
    if inserted:
        order[:] = [x for i in order for x in ((i, inserted[i]) if i in inserted else (i,))]
    for members, ch in fused_chains:
        asg.place_ends(members, ch)
    pos: list[int] | None = None  # where each instruction is in the order (local ones need it)
    tb_of = asg.a.tb_of
    for i in order:
        k = kind[i]
        if k == SEND:
            if tb_of[i] is None:
                j = msg_out[i]
                if msg_out[j] < 0:
                    asg.place_transfer(i, j)
                else:
                    asg.place_chain(_chain(t, i))
        elif k == CPY or k == RE:
            if pos is None:
                pos = [0] * len(t)
                for p, j in enumerate(order):
                    pos[j] = p
            asg.place_local(i, preds[i], rep, pos)
    _finish_channels(asg.a)
    return asg.a


def _finish_channels(a: Assignment) -> None:
    """Give parallelized instances (lanes) their own channel ranges."""
    lanes = {tb.lane for tbs in a.tbs for tb in tbs}
    if lanes <= {0}:
        return
    width = max(tb.ch for tbs in a.tbs for tb in tbs) + 1
    for tbs in a.tbs:
        for tb in tbs:
            tb.ch += width * tb.lane


def assign_manual(t: InstrTable, order: list[int], num_ranks: int, prog) -> Assignment:
    """Manual policy: the program's sendtb/recvtb/ch, checked against the rules."""
    a = Assignment(num_ranks, len(t))
    ops = prog.ops
    ch_span = max([c for c in t.ch if c >= 0], default=0) + 1
    shared_unnamed = getattr(prog, "unnamed_tb_shared", False)
    by_id: list[dict[tuple[int, int], TB]] = [{} for _ in range(num_ranks)]  # (lane, tb named) -> TB
    send_owner: dict[tuple, TB] = {}
    recv_owner: dict[tuple, TB] = {}

    def where(i: int):
        return ops[t.op[i]][-1]

    def get_tb(i: int, tbid: int, role: str) -> TB:
        r, q = t.rank[i], t.lane[i]
        if tbid < 0 and not shared_unnamed:
            raise program_error(
                f"the manual thread-block policy needs {role}= for this {_verb(t, i)} "
                f"(rank {r})", where(i))
        tb = by_id[r].get((q, tbid))
        if tb is None:
            tb = by_id[r][q, tbid] = TB(r, tbid, -1, -1, -1, q)
        return tb

    def bind(tb: TB, i: int, attr: str, peer: int, owners: dict) -> None:
        r = t.rank[i]
        ch = max(t.ch[i], 0) + t.lane[i] * ch_span
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
        k = t.kind[i]
        if k == CPY or k == RE:
            tb = get_tb(i, t.sendtb[i], "sendtb")
        elif t.speer[i] >= 0 and t.rpeer[i] >= 0:  # fused: sendtb == recvtb by construction
            tb = get_tb(i, t.recvtb[i], "recvtb")
            bind(tb, i, "recv", t.rpeer[i], recv_owner)
            bind(tb, i, "send", t.speer[i], send_owner)
        elif t.speer[i] >= 0:
            tb = get_tb(i, t.sendtb[i], "sendtb")
            bind(tb, i, "send", t.speer[i], send_owner)
        else:
            tb = get_tb(i, t.recvtb[i], "recvtb")
            bind(tb, i, "recv", t.rpeer[i], recv_owner)
        a.tb_of[i] = tb
    for r in range(num_ranks):
        for new_id, key in enumerate(sorted(by_id[r])):  # ids contiguous from 0, order kept
            tb = by_id[r][key]
            tb.id = new_id
            if tb.ch == -1:
                tb.ch = 0
            a.tbs[r].append(tb)
    return a


def _verb(t: InstrTable, i: int) -> str:
    if t.speer[i] >= 0 and t.rpeer[i] >= 0:
        return f"forward from rank {t.rpeer[i]} to rank {t.speer[i]}"
    if t.speer[i] >= 0:
        return f"send to rank {t.speer[i]}"
    if t.rpeer[i] >= 0:
        return f"receive from rank {t.rpeer[i]}"
    return "local operation"
