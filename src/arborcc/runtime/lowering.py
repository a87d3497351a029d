"""From an IR algorithm to what the data plane interprets: one rank's thread blocks with
every buffer access resolved to a call buffer, and the geometry of a call.

Buffer placement comes from the one normalization of in-place and out-of-place calls,
:func:`arborcc.ir.aliasing.rank_layout`, and so does the mode of a call, read from where
the caller's two buffers are (:func:`call_mode`). Call buffers are numbered 0 (the send
buffer), 1 (the receive buffer) and 2 (scratch).

Chunks and the remainder. A call of ``count`` elements per rank block (NCCL's count: the
per-rank count for all-gather, reduce-scatter, all-to-all, gather and scatter) splits
each block into the algorithm's ``P`` chunks per block (``chunks_per_loop / n`` for the
rank-multiplied collectives, else ``chunks_per_loop``) of ``C = count // P`` elements;
chunk ``c`` of a call buffer starts at ``(c // P) * count + (c % P) * C``. The last
``count - P * C`` elements of every block (fewer than ``P``) are the tail: they run
through a direct algorithm with one chunk per block (:mod:`arborcc.library.direct`),
so any count works, as NCCL handles counts that do not divide.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

from arborcc.errors import InputError
from arborcc.ir.aliasing import Mode, declared_modes, rank_layout
from arborcc.ir.collectives import RANK_MULTIPLIED, call_blocks, has_signature, signature
from arborcc.ir.model import Algorithm, Buffer
from arborcc.ir.steps import check_native_step_codes
import arborcc.runtime.native as native
from arborcc.memo import BoundedCache

CALL_BUFFER = {Buffer.INPUT: 0, Buffer.OUTPUT: 1, Buffer.SCRATCH: 2}
check_native_step_codes(native)  # the data plane reads the step codes lowered here


@dataclass(frozen=True)
class LoweredRank:
    """One rank's program for the data plane (rows as the C++ ``register_program`` takes)."""

    threadblocks: list[list[int]]  #: [send peer, recv peer, channel, first step, number of steps]
    #: [step code (arborcc.ir.steps), src buf, src chunk, dst buf, dst chunk, count, dep tb index, dep step]
    steps: list[list[int]]
    input_chunks: int  #: chunks of the call's send buffer (0: it lives in the receive buffer)
    output_chunks: int  #: chunks of the call's receive buffer (0: it lives in the send buffer)
    scratch_chunks: int
    chunks_per_block: int  #: P: chunks of one rank block of the call buffers
    result: tuple[int, int]  #: (call buffer, first chunk) where the rank's result ends
    result_checked: bool  #: False where the collective leaves the rank's result open (a non-root's reduce)


def chunks_per_block(algo: Algorithm) -> int:
    """The algorithm's chunks per rank block (see the module docstring)."""
    k, n = algo.chunks_per_loop, algo.num_ranks
    if algo.collective in RANK_MULTIPLIED:
        if k % n:
            raise InputError(f"{k} chunks per loop do not divide over {n} ranks", source=algo.name)
        return k // n
    return k


def lower_rank(algo: Algorithm, rank: int, mode: Mode) -> LoweredRank:
    """Rank ``rank``'s thread blocks of ``algo`` for a call in ``mode``."""
    programs = {p.rank: p for p in algo.ranks}
    if rank not in programs:
        raise InputError(f"the algorithm has no program for rank {rank}", source=algo.name)
    program = programs[rank]
    layout = rank_layout(algo, program, mode)
    index = {tb.id: i for i, tb in enumerate(program.threadblocks)}
    tbs, steps = [], []
    for tb in program.threadblocks:
        tbs.append([tb.send, tb.recv, tb.channel, len(steps), len(tb.steps)])
        for i, step in enumerate(tb.steps):
            if step.op.code is None:
                raise InputError(f"rank {rank} tb {tb.id} step {i}: step type {step.op.value!r} is not supported "
                                 f"by the shared-memory runtime", source=algo.name)
            src = layout.locate(step.src_buf, step.src_off) if step.src_buf is not None else None
            dst = layout.locate(step.dst_buf, step.dst_off) if step.dst_buf is not None else None
            dep_tb, dep_step = -1, -1
            if step.dep is not None:
                if step.dep.tb not in index:
                    raise InputError(f"rank {rank} tb {tb.id} step {i}: depends on unknown tb {step.dep.tb}",
                                     source=algo.name)
                dep_tb, dep_step = index[step.dep.tb], step.dep.step
            steps.append([step.op.code,
                          CALL_BUFFER[src[0]] if src else -1, src[1] if src else 0,
                          CALL_BUFFER[dst[0]] if dst else -1, dst[1] if dst else 0,
                          step.count, dep_tb, dep_step])
    where, first, _ = layout.result
    return LoweredRank(tbs, steps, layout.input_chunks, layout.output_chunks, layout.scratch_chunks,
                       chunks_per_block(algo), (CALL_BUFFER[where], first), layout.result_checked)


def chunk_start(chunk: int, per_block: int, count: int) -> int:
    """The first element of chunk ``chunk`` of a call buffer (see the module docstring)."""
    return (chunk // per_block) * count + (chunk % per_block) * (count // per_block)


def call_mode(collective: str, num_ranks: int, rank: int, root: int, send_address: int, recv_address: int,
              block_bytes: int, declared: tuple[Mode, ...] = (Mode.OUTOFPLACE, Mode.INPLACE)) -> Mode:
    """The mode of a call whose send and receive buffers start at these addresses: in
    place when they sit as :func:`arborcc.ir.aliasing.rank_layout` places a call's buffers
    in place (one buffer; all-gather's and gather's send buffer at the rank's block of the
    receive buffer; reduce-scatter's and scatter's receive buffer at the rank's block of
    the send buffer), else out of place. ``block_bytes``: one rank block (NCCL's count
    times the item size). A ``custom`` collective uses its buffers as declared in both
    modes: it needs two buffers and runs in the first mode of ``declared``."""
    alias = in_place_alias(collective, num_ranks, rank, root)
    if alias is None:
        if send_address == recv_address:
            raise InputError(f"a {collective} collective uses separate send and receive buffers in every mode; "
                             f"the call passes one", source="recv")
        return declared[0] if declared else Mode.OUTOFPLACE
    kind, blocks = alias
    if kind == "same":
        inplace = recv_address == send_address
    elif kind == "input_in_output":
        inplace = send_address == recv_address + blocks * block_bytes
    else:
        inplace = recv_address == send_address + blocks * block_bytes
    return Mode.INPLACE if inplace else Mode.OUTOFPLACE


def algorithm_call(algo: Algorithm, rank: int, send_elements: int, item_bytes: int, send_address: int,
                   recv_address: int, count: int | None = None, recv_elements: int | None = None) -> tuple[int, Mode]:
    """(count, mode) of running ``algo`` on this rank's buffers: ``count`` (NCCL's elements
    per rank block) by default from the send buffer (its size over the rank blocks it
    holds; a ``custom`` collective's: :func:`custom_call_check`), the mode by
    :func:`call_mode`. Refused (:class:`InputError`, before anything runs): a ``count``
    that is not a whole number of 0 or more, a buffer shorter
    than the call needs (:func:`arborcc.ir.collectives.call_blocks` blocks of ``count``, or
    the chunks a ``custom`` rank's program declares; ``recv_elements`` None: the receive
    buffer is the send buffer), and
    a mode the algorithm does not declare, so no runtime runs an algorithm where it may
    be wrong or writes past a buffer."""
    if count is not None and (isinstance(count, bool) or not isinstance(count, numbers.Integral) or count < 0):
        raise InputError(f"the elements per rank block are a whole number, 0 or more, got {count!r}", source="count")
    recv_have = send_elements if recv_elements is None else recv_elements
    if algo.collective == "custom":
        count = custom_call_check(algo, rank, send_elements, recv_have, count)
    else:
        send_blocks, recv_blocks = call_blocks(algo.collective, algo.num_ranks)
        if count is None:
            count = send_elements // send_blocks
        for what, have, blocks in (("send", send_elements, send_blocks), ("recv", recv_have, recv_blocks)):
            if have < blocks * count:
                raise InputError(f"has {have} elements; this {algo.collective} of {count} elements per rank block "
                                 f"needs {blocks * count} ({blocks} block{'s' if blocks > 1 else ''})", source=what)
    declared = declared_modes(algo)
    mode = call_mode(algo.collective, algo.num_ranks, rank, algo.effective_root, send_address, recv_address,
                     count * item_bytes, declared)
    if mode not in declared:
        raise InputError(f"the algorithm does not run {mode.label} "
                         f"(its file declares {', '.join(m.label for m in declared) or 'no mode'})",
                         source=algo.name)
    return count, mode


def custom_call_check(algo: Algorithm, rank: int, send_elements: int, recv_elements: int,
                      count: int | None) -> int:
    """The count (elements of the algorithm's ``P`` chunks per block) of a ``custom``
    collective's call, whose buffers hold the chunks the rank's program declares (its input
    and output chunks, which may be more or fewer than ``P``, or none): by default from the
    send buffer (its size over its chunks, times ``P``; the receive buffer's where the
    program declares no input). Refused: a buffer shorter than its declared chunks."""
    program = next((p for p in algo.ranks if p.rank == rank), None)
    if program is None:
        raise InputError(f"the algorithm has no program for rank {rank}", source=algo.name)
    per_block = chunks_per_block(algo)
    if count is None:
        have, chunks = ((send_elements, program.input_chunks) if program.input_chunks
                        else (recv_elements, program.output_chunks))
        count = have // chunks * per_block if chunks else 0
    chunk = count // per_block
    for what, have, chunks in (("send", send_elements, program.input_chunks),
                               ("recv", recv_elements, program.output_chunks)):
        if have < chunks * chunk:
            raise InputError(f"has {have} elements; this custom collective's {chunks} {what} chunks of {chunk} "
                             f"elements ({count} elements per {per_block} chunks) need {chunks * chunk}", source=what)
    return count


#: :func:`in_place_alias`'s answers (wrapped: None is one), by argument list
_ALIASES = BoundedCache("runtime.lowering.aliases", 1024, purpose="in-place aliases by collective, ranks, rank, root")


def in_place_alias(collective: str, num_ranks: int, rank: int, root: int) -> tuple[str, int] | None:
    """How the collective's signature places a rank's in-place buffers: ``(alias, offset in
    rank blocks)``, None when it has no signature (``custom``). Cached: calls ask per call."""
    key = (collective, num_ranks, rank, root)
    known = _ALIASES.get(key)
    if known is None:
        known = (_signature_alias(collective, num_ranks, rank, root),)
        _ALIASES.put(key, known)
    return known[0]


def _signature_alias(collective: str, num_ranks: int, rank: int, root: int) -> tuple[str, int] | None:
    """:func:`in_place_alias`, computed."""
    per_loop = num_ranks if collective in RANK_MULTIPLIED else 1  # one chunk per rank block
    if not has_signature(collective, num_ranks, per_loop):
        return None
    sig = signature(collective, num_ranks, per_loop, rank, root)
    return sig.alias, sig.alias_offset
