"""Rewriting an algorithm for another MSCCL runtime (``arborcc convert``).

The two dialects (:mod:`arborcc.ir.limits`) name some collectives differently, require
different attributes and accept different sizes. :func:`convert_for_dialect` returns an
equivalent algorithm that the target runtime accepts, or raises
:class:`ConversionError` saying why there is none. What it rewrites:

* thread block ids renumbered ``0..T-1`` (dependencies follow);
* ``nop`` steps the runtimes would mishandle: a step after ``nop`` steps that carries no
  dependency itself takes the last ``nop``'s (the parsers reject it otherwise), and
  trailing ``nop`` steps are dropped (the parsers drop them and their waits);
* ``ra`` (the original runtime's residual add, ``dst += src``) becomes ``re``, which the
  executors know and which computes the same;
* thread blocks with more steps than the target allows are spread over more channels by
  *data lane*: every chain of transfers (a send and the receives that forward it) keeps
  to the lane of the chunk its first send reads, chunk ``c`` in lane ``c % L``; each
  thread block splits into one per lane, lane ``l`` on channel ``ch + l * C`` (``C`` the
  channels before), so every connection splits into ``L`` connections that carry the
  same messages in the same order. ``L`` is the smallest that fits the step limit.
  Splitting drops the program order between steps of different lanes of one thread
  block; explicit dependencies are kept. Whether the result is still correct is the
  verifier's to say - ``arborcc convert`` writes nothing that does not verify.

Sizes that cannot be fixed this way (``cnt``, channels, thread blocks per rank beyond
what lanes allow) raise :class:`ConversionError`.
"""

from __future__ import annotations

import copy
from collections import defaultdict

from arborcc.errors import InputError
from arborcc.ir.limits import DialectLimits, check_dialect_limits, dialect_limits
from arborcc.ir.model import Algorithm, Dependency, Op, Step, ThreadBlock


class ConversionError(InputError):
    """An algorithm cannot be rewritten for the requested runtime."""


def convert_for_dialect(algo: Algorithm, dialect: str, source: str | None = None) -> Algorithm:
    """An equivalent of ``algo`` within ``dialect``'s limits (a new object; ``algo`` is kept)."""
    lim = dialect_limits(dialect)
    where = source or f"algorithm {algo.name!r}"
    if algo.collective not in lim.collective_names:
        raise ConversionError(f"the {dialect} runtimes have no collective {algo.collective!r} "
                              f"(they know {', '.join(sorted(lim.collective_names))})", source=where)
    out = copy.deepcopy(algo)
    _tidy(out, lim)
    longest = max((len(tb.steps) for p in out.ranks for tb in p.threadblocks), default=0)
    if longest > lim.max_steps_per_threadblock:
        out = _spread_over_lanes(out, lim, where)
    left = [v for v in check_dialect_limits(out, dialect) if v.kind == "limit"]
    if left:
        raise ConversionError(f"still beyond the {dialect} runtime's limits after rewriting: {left[0]}",
                              source=where)
    return out


def convert_for_mscclpp(algo: Algorithm) -> Algorithm:
    """An equivalent of ``algo`` for :func:`arborcc.ir.mscclpp.writer.write_mscclpp_plan`:
    thread blocks renumbered ``0..T-1`` (MSCCL++ indexes them by id), ``nop`` runs fixed
    and ``ra`` as ``re``, as :func:`convert_for_dialect` does for the MSCCL executors (a
    new object; ``algo`` is kept). Thread blocks are not spread: the writer splits long
    ones into continuation thread blocks."""
    out = copy.deepcopy(algo)
    _tidy(out, dialect_limits("executor"))
    return out


def _tidy(algo: Algorithm, lim: DialectLimits) -> None:
    """Renumber thread blocks ``0..T-1``, fix ``nop`` runs the parsers mishandle, and
    replace step types the target lacks (see the module docstring); in place."""
    for prog in algo.ranks:
        index_map: dict[int, list[int | None]] = {}  # tb id -> old step index -> new (None: removed)
        for tb in prog.threadblocks:
            new_steps: list[Step] = []
            mapping: list[int | None] = []
            for st in tb.steps:
                if (st.op is not Op.NOP and st.dep is None and new_steps and new_steps[-1].op is Op.NOP
                        and new_steps[-1].dep is not None):
                    nop = new_steps.pop()
                    mapping[mapping.index(len(new_steps))] = None
                    st.dep = nop.dep
                if st.op is Op.RESIDUAL_ADD and Op.RESIDUAL_ADD not in lim.step_types:
                    st.op = Op.REDUCE  # the same dst += src under the executors' name
                mapping.append(len(new_steps))
                new_steps.append(st)
            while new_steps and new_steps[-1].op is Op.NOP:  # waits the runtimes drop
                mapping[mapping.index(len(new_steps) - 1)] = None
                new_steps.pop()
            index_map[tb.id] = mapping
            tb.steps = new_steps
        ids = {tb.id: new for new, tb in enumerate(prog.threadblocks)}
        for tb in prog.threadblocks:
            for st in tb.steps:
                if st.dep is None:
                    continue
                steps = index_map.get(st.dep.tb)
                moved = steps[st.dep.step] if steps is not None and 0 <= st.dep.step < len(steps) else None
                st.dep = Dependency(ids[st.dep.tb], moved) if moved is not None else None
        for tb in prog.threadblocks:
            tb.id = ids[tb.id]


def _spread_over_lanes(algo: Algorithm, lim: DialectLimits, where: str) -> Algorithm:
    """Split every thread block into one per data lane (see the module docstring)."""
    lane_of = _chunk_lanes(algo, where)
    channels = algo.num_channels
    longest = max(len(tb.steps) for p in algo.ranks for tb in p.threadblocks)
    lanes = -(-longest // lim.max_steps_per_threadblock)
    while lanes * channels <= lim.max_channels:
        out = _split(algo, lane_of, lanes, channels)
        if max(len(tb.steps) for p in out.ranks for tb in p.threadblocks) <= lim.max_steps_per_threadblock:
            return out
        lanes += 1
    raise ConversionError(f"a thread block has {longest} steps (the {lim.name} runtimes allow "
                          f"{lim.max_steps_per_threadblock}) and spreading them over data lanes needs more than "
                          f"{lim.max_channels} channels", source=where)


def _chunk_lanes(algo: Algorithm, where: str) -> dict[tuple[int, int, int], int]:
    """The chunk each step is about: (rank, tb, step) -> chunk offset.

    A transfer chain is named by the source offset of its first send; a receiving step
    takes the chunk of the message it receives (the k-th receive of a connection gets the
    k-th send's message); a local step its destination offset; a ``nop`` the chunk of
    the next step of its thread block.
    """
    sends: dict[tuple[int, int, int], list[tuple[int, int, int]]] = defaultdict(list)
    recvs: dict[tuple[int, int, int], list[tuple[int, int, int]]] = defaultdict(list)
    steps: dict[tuple[int, int, int], Step] = {}
    for prog in algo.ranks:
        for tb in prog.threadblocks:
            for i, st in enumerate(tb.steps):
                key = (prog.rank, tb.id, i)
                steps[key] = st
                if st.op.sends:
                    sends[(prog.rank, tb.send, tb.channel)].append(key)
                if st.op.receives:
                    recvs[(tb.recv, prog.rank, tb.channel)].append(key)
    matched: dict[tuple[int, int, int], tuple[int, int, int]] = {}
    for conn, rs in recvs.items():
        ss = sends.get(conn, [])
        if len(ss) != len(rs):
            raise ConversionError(f"connection {conn[0]}->{conn[1]} channel {conn[2]} has {len(ss)} sends but "
                                  f"{len(rs)} receives", source=where)
        matched.update(zip(rs, ss))
    chunk: dict[tuple[int, int, int], int] = {}

    def chunk_of(key: tuple[int, int, int]) -> int:
        todo = [key]
        while todo:  # follow received messages back to the send that started the chain
            k = todo[-1]
            if k in chunk:
                todo.pop()
                continue
            st = steps[k]
            if st.op.receives:
                src = matched[k]
                if src not in chunk:
                    if src in todo:
                        raise ConversionError("a cycle of forwarded messages", source=where)
                    todo.append(src)
                    continue
                chunk[k] = chunk[src]
            elif st.op.sends:
                chunk[k] = max(st.src_off, 0)
            else:
                chunk[k] = max(st.dst_off if st.dst_buf is not None else st.src_off, 0)
            todo.pop()
        return chunk[key]

    for prog in algo.ranks:
        for tb in prog.threadblocks:
            pending_nops = []
            for i, st in enumerate(tb.steps):
                key = (prog.rank, tb.id, i)
                if st.op is Op.NOP:
                    pending_nops.append(key)
                    continue
                c = chunk_of(key)
                for n in pending_nops:
                    chunk[n] = c
                pending_nops = []
    return chunk


def _split(algo: Algorithm, chunk: dict, lanes: int, channels: int) -> Algorithm:
    out = copy.copy(algo)
    out.ranks = []
    for prog in algo.ranks:
        pieces: dict[tuple[int, int], ThreadBlock] = {}  # (tb id, lane) -> new thread block
        where: dict[tuple[int, int], tuple[tuple[int, int], int]] = {}  # (tb, step) -> (piece, index)
        for tb in prog.threadblocks:
            for i, st in enumerate(tb.steps):
                lane = chunk[(prog.rank, tb.id, i)] % lanes
                piece = pieces.get((tb.id, lane))
                if piece is None:
                    piece = pieces[(tb.id, lane)] = ThreadBlock(-1, -1, -1, tb.channel + lane * channels, [])
                if st.op.sends:
                    piece.send = tb.send
                if st.op.receives:
                    piece.recv = tb.recv
                where[(tb.id, i)] = ((tb.id, lane), len(piece.steps))
                piece.steps.append(copy.copy(st))
        order = sorted(pieces)
        ids = {key: n for n, key in enumerate(order)}
        for key in order:
            piece = pieces[key]
            piece.id = ids[key]
            for st in piece.steps:
                st.has_dep = False
        for key in order:
            for st in pieces[key].steps:
                if st.dep is not None:
                    target_piece, index = where[(st.dep.tb, st.dep.step)]
                    st.dep = Dependency(ids[target_piece], index)
                    pieces[target_piece].steps[index].has_dep = True
        copy_prog = copy.copy(prog)
        copy_prog.threadblocks = [pieces[key] for key in order]
        out.ranks.append(copy_prog)
    return out
