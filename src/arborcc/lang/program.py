"""The Program: a traced DSL program (GC3 sections 3 and 4.1).

``with Program(name, collective, topology, ...)`` opens a program; inside it
:func:`chunk` returns references to buffer slots and their ``copy``/``reduce`` methods
record operations (see :mod:`arborcc.lang.ref`). While tracing, the program keeps the
symbolic value of every slot (:mod:`arborcc.lang.values`) and the number of the
operation that last wrote it, which is how misuse is caught on the user's line:

* an uninitialized chunk (nothing was ever put in the slot) cannot be read;
* a *stale* reference (its slot was overwritten after the reference was made) cannot be
  used, so programs are race-free by construction (GC3 section 3.3);
* indices out of range, mismatched counts, and copies between ranks the topology does
  not connect are refused.

:meth:`Program.check` evaluates the collective's postcondition on the traced buffers;
:meth:`Program.compile` lowers the trace to the IR (:mod:`arborcc.compiler`).

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from sys import _getframe
from typing import Iterator

from arborcc.ir.model import Buffer
from arborcc.lang import trace as T
from arborcc.lang.buffers import (
    CODE_INPUT,
    CODE_OUTPUT,
    CODE_SCRATCH,
    INPUT,
    OUTPUT,
    SCRATCH,
    buffer_label,
    resolve_buffer,
)
from arborcc.lang.collectives import Collective
from arborcc.lang.directives import ThreadblockPolicy, parse_policy, parse_protocol
import arborcc.lang.native as native
from arborcc.lang.ref import Ref
from arborcc.lang.routes import Connectivity
from arborcc.lang.values import ReduceChunk
from arborcc.lang.where import PACKAGE_DIR, format_location, program_error, user_location
from arborcc.limits import limit, raised_default

#: operations a DSL program arborcc builds itself (a synthesized algorithm, a library
#: algorithm named on the command line) may trace when no operations limit was set: what
#: its largest library algorithm traces at 1024 ranks, the largest scale arborcc measures
#: (benchmarks/synthesis/cluster_scale.py, benchmarks/compiler/compile_time.py) - an all-pairs all-reduce, 3 n (n - 1)
#: = 3,142,656 copies and reduces (a ring all-reduce 2 n (n - 1) = 2,095,104); a user's
#: program keeps the default
OWN_PROGRAM_OPERATIONS = 3 * 1024**2


def own_program_budget(operations: int = OWN_PROGRAM_OPERATIONS):
    """A block within which DSL programs may trace ``operations`` (at least
    :data:`OWN_PROGRAM_OPERATIONS`) when that is above the default operations limit and
    the user set none (``--limit operations=N`` or ``ARBORCC_MAX_OPERATIONS`` wins): for
    the programs arborcc builds itself, whose size follows from their ranks, never for a
    user's program."""
    return raised_default("operations", max(operations, OWN_PROGRAM_OPERATIONS))


#: a buffer name no program uses (no aliasing rule)
_NOTHING = object()
#: programs whose ``with`` block is open, innermost last
_ACTIVE: list["Program"] = []
#: lists that collect every Program created while a :func:`recording_programs` block is open
_RECORDERS: list[list] = []


def current_program() -> "Program":
    """The innermost open program; a ProgramError at the user's line when there is none."""
    if not _ACTIVE:
        raise program_error("no program is open: use the DSL inside `with Program(...):`")
    return _ACTIVE[-1]


def open_program() -> "Program | None":
    """The innermost open program, or None."""
    return _ACTIVE[-1] if _ACTIVE else None


@contextmanager
def recording_programs() -> Iterator[list["Program"]]:
    """A list that receives every :class:`Program` created inside the ``with`` block
    (how ``arborcc compile`` finds the program a file builds when it runs)."""
    created: list[Program] = []
    _RECORDERS.append(created)
    try:
        yield created
    finally:
        _RECORDERS.remove(created)


class Program:
    """A collective algorithm written in the chunk DSL.

    ``topology``: an arborcc Topology, an object with ``link(src, dst)``, a link matrix
    ``links[src][dst]``, or None (fully connected). ``instances``: replicate the whole
    program on 1/n of the data each (GC3 section 5.1). ``protocol``: Simple, LL or LL128.
    ``threadblock_policy``: ``auto`` (the compiler schedules) or ``manual`` (every
    copy/reduce names its ``sendtb``/``recvtb``/``ch``). ``instr_fusion``: fuse receive
    and send instructions (GC3 section 4.2). ``replication``: ``interleaved`` (each
    collective's own layout) or ``batched`` (instances one after another in every buffer).

    ``unnamed_tb_shared``: under the manual policy, a transfer that names no thread block
    is an error (False), or goes to one thread block of its rank shared by all such
    transfers (True, as the public GC3 tools do with thread block ``-1``).

    ``copy_index_by_source``: how ``copy(dst, buffer, index)`` reads an index into a
    buffer an in-place collective places inside another: False (arborcc), the slot
    ``index`` of the destination's ``buffer``; True (the public GC3 tools, which map it
    with the copying rank's offset), the slot the source rank's ``buffer[index]`` occupies.
    In-place all-gather: ``chunk(r, input, 0).copy(d, input, 0)`` lands in block ``d`` of
    ``d``'s output with False, in block ``r`` (where ``r``'s data belongs) with True.
    """

    def __init__(self, name: str, collective: Collective, topology: object = None, *,
                 instances: int = 1, protocol: object = "Simple",
                 threadblock_policy: object = ThreadblockPolicy.auto, instr_fusion: bool = True,
                 replication: str = "interleaved", copy_index_by_source: bool = False,
                 unnamed_tb_shared: bool = False):
        loc = user_location(1)
        if not isinstance(collective, Collective):
            raise program_error(f"the collective must be a Collective, got {collective!r}", loc)
        if isinstance(instances, bool) or not isinstance(instances, int) or instances < 1:
            raise program_error(f"instances must be a positive integer, got {instances!r}", loc)
        if replication not in ("interleaved", "batched"):
            raise program_error(f"replication must be 'interleaved' or 'batched', got {replication!r}", loc)
        try:
            self.protocol = parse_protocol(protocol)
            self.threadblock_policy = parse_policy(threadblock_policy)
            self.connectivity = Connectivity(topology, collective.num_ranks)
        except ValueError as e:
            raise program_error(str(e), loc) from None
        check_program_size(collective, loc)
        self.name = str(name)
        self.collective = collective
        self.topology = topology
        self.num_ranks = collective.num_ranks
        self.instances = instances
        self.instr_fusion = bool(instr_fusion)
        self.replication = replication
        self.copy_index_by_source = bool(copy_index_by_source)
        #: the slot of the last chunk() that found nothing (it returned None), named when the
        #: program then calls a method on that None (:func:`arborcc.lang.where.program_failure`)
        self.empty_chunk: str | None = None
        self.unnamed_tb_shared = bool(unnamed_tb_shared)
        self.where = loc
        self.ops: list[tuple] = []
        self.max_ops = limit("operations").value  #: copies and reduces allowed (arborcc.limits)
        self.check_errors: list[str] = []
        self._lanes = 1
        self.compile_stats = None  #: what the last :meth:`compile` did (a CompileStats)
        # in-place aliasing: a simple rule (buffer named, buffer meant, shift per rank),
        # else the collective's function (None when nothing aliases)
        rule = collective.alias_rule()
        self._alias_named, self._alias_meant, self._alias_shift = rule or (_NOTHING, None, 0)
        self._alias = collective.get_buffer_index if rule is None and collective.aliases() else None
        self._all_connected = self.connectivity.kind == "all"
        self._init_state(loc)
        for created in _RECORDERS:
            created.append(self)

    # --- state -----------------------------------------------------------------------
    def _init_state(self, loc) -> None:
        #: buffer names by code: input, output, scratch, then named scratch regions
        self.buffer_names: list[object] = [INPUT, OUTPUT, SCRATCH]
        self._named: dict[object, int] = {}
        # Per rank and buffer code, the number of the operation that last wrote each slot:
        # -1 never initialized, 0 holds its initial value, k >= 1 written by operation k.
        # Slot *values* are not kept while tracing (that costs as much as the rest of the
        # trace); :meth:`_replay` recomputes them from the operations when asked.
        seqs = self.collective.initial_seqs()
        self._initial: list[dict] | None = None
        if seqs is None:
            seqs = self._seqs_from_buffers(self.initial_buffers, loc)
        elif len(seqs) != self.num_ranks:
            raise program_error(f"{type(self.collective).__name__}.initial_seqs() must describe "
                                f"{self.num_ranks} ranks", loc)
        self._seqs: list[list[list[int]]] = seqs
        #: sizes the collective declares (scratch grows with use)
        self.input_sizes = [len(s[0]) for s in seqs]
        self.output_sizes = [len(s[1]) for s in seqs]
        self._vals: list[list[list]] | None = None
        self._replayed = 0

    @property
    def initial_buffers(self) -> list[dict]:
        """Per rank, the buffers the collective starts with (its ``init_buffers()``)."""
        if self._initial is None:
            bufs = self.collective.init_buffers()
            if not isinstance(bufs, list) or len(bufs) != self.num_ranks:
                raise program_error(f"{type(self.collective).__name__}.init_buffers() must return one "
                                    f"dict per rank ({self.num_ranks})", self.where)
            self._initial = bufs
        return self._initial

    def _seqs_from_buffers(self, bufs: list[dict], loc) -> list[list[list[int]]]:
        out = []
        for r, b in enumerate(bufs):
            if not isinstance(b, dict) or INPUT not in b:
                raise program_error(f"init_buffers() gives rank {r} no input buffer", loc)
            shared: dict[int, list[int]] = {}
            seqs = []
            for lst in (b[INPUT], b.get(OUTPUT, []), b.get(SCRATCH, [])):
                if id(lst) not in shared:  # aliased buffers share their write record too
                    shared[id(lst)] = [-1 if v is None else 0 for v in lst]
                seqs.append(shared[id(lst)])
            out.append(seqs)
        return out

    def code_of(self, buffer: object) -> int:
        """The code of a canonical buffer name, creating a named scratch region if new."""
        if buffer is INPUT:
            return CODE_INPUT
        if buffer is OUTPUT:
            return CODE_OUTPUT
        if buffer is SCRATCH:
            return CODE_SCRATCH
        code = self._named.get(buffer)
        if code is None:
            code = len(self.buffer_names)
            self._named[buffer] = code
            self.buffer_names.append(buffer)
        return code

    def _slot_seqs(self, rank: int, code: int) -> list[int]:
        seqs = self._seqs[rank]
        while len(seqs) <= code:  # a named region this rank has not used yet
            seqs.append([])
        return seqs[code]

    def buffer_size(self, rank: int, code: int) -> int:
        seqs = self._seqs[rank]
        return len(seqs[code]) if code < len(seqs) else 0

    # --- slot values (replayed on demand) ------------------------------------------------
    def _replay(self) -> list[list[list]]:
        """Bring the symbolic slot values up to date with the traced operations."""
        if self._vals is None:
            self._vals = []
            for b in self.initial_buffers:
                copies: dict[int, list] = {}
                lists = (b[INPUT], b.get(OUTPUT, []), b.get(SCRATCH, []))
                self._vals.append([copies.setdefault(id(l), list(l)) for l in lists])
            self._replayed = 0
        vals_all, ops = self._vals, self.ops
        combine = ReduceChunk._combine
        for i in range(self._replayed, len(ops)):
            op = ops[i]
            kind, sr, sb, si, dr, db, di, n = op[0], op[1], op[2], op[3], op[4], op[5], op[6], op[7]
            src = vals_all[sr][sb]
            dvals = vals_all[dr]
            while len(dvals) <= db:
                dvals.append([])
            dst = dvals[db]
            if len(dst) < di + n:
                dst.extend([None] * (di + n - len(dst)))
            if kind == T.COPY:
                dst[di:di + n] = src[si:si + n]
            else:
                for k in range(n):
                    dst[di + k] = combine(dr, dst[di + k], src[si + k])
        self._replayed = len(ops)
        return self._vals

    def value_at(self, rank: int, code: int, index: int):
        """The symbolic value of one slot now (None: uninitialized)."""
        vals = self._replay()[rank]
        if code >= len(vals) or index >= len(vals[code]):
            return None
        return vals[code][index]

    @property
    def buffers(self) -> list[dict]:
        """Per rank, ``{buffer name: [slot values]}`` as the program left them so far."""
        out = []
        for r, vals in enumerate(self._replay()):
            d = {}
            for code, lst in enumerate(vals):
                d[self.buffer_names[code]] = lst
            out.append(d)
        return out

    def resolve(self, rank: int, buffer: object, index: int) -> tuple[object, int]:
        """The slot ``(buffer, index)`` of ``rank`` really is (in-place aliasing)."""
        if buffer is self._alias_named:
            return self._alias_meant, index + rank * self._alias_shift
        if self._alias is not None:
            return self._alias(rank, buffer, index)
        return buffer, index

    def check_rank(self, rank: object, loc) -> int:
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < self.num_ranks:
            raise program_error(f"rank {rank!r} is not a rank of this program (0..{self.num_ranks - 1})", loc)
        return rank

    def slot_name(self, rank: int, code: int, index: int) -> str:
        return f"rank {rank}, {buffer_label(self.buffer_names[code])}, {index}"

    def op_location(self, seq: int) -> str:
        """Where the operation numbered ``seq`` (1-based) was written."""
        return format_location(self.ops[seq - 1][T.WHERE]) if 0 < seq <= len(self.ops) else "<start>"

    # --- the DSL entry point -----------------------------------------------------------
    def chunk(self, rank: int, buffer: object, index: int, size: int = 1):
        """A reference to ``size`` chunks at ``(rank, buffer, index)``; None if all are empty."""
        if (type(rank) is not int or not 0 <= rank < self.num_ranks or type(index) is not int
                or index < 0 or type(size) is not int or size < 1):
            self._bad_chunk_args(rank, index, size)
        buf = buffer if (buffer is INPUT or buffer is OUTPUT) else resolve_buffer(buffer)
        if buf is self._alias_named:
            buf, index = self._alias_meant, index + rank * self._alias_shift
        elif self._alias is not None:
            buf, index = self._alias(rank, buf, index)
        code = 0 if buf is INPUT else 1 if buf is OUTPUT else self.code_of(buf)
        seqs = self._seqs[rank]
        seqs = seqs[code] if code < len(seqs) else self._slot_seqs(rank, code)
        n = len(seqs)
        if code < 2 and index + size > n:
            self.check_range(rank, code, index, size, user_location(1))
        if index >= n or seqs[index] < 0:  # the first slot is empty: are all of them?
            if size == 1 or max(seqs[index:index + size], default=-1) < 0:
                self.empty_chunk = self.slot_name(rank, code, index)
                return None
        return Ref(self, rank, code, index, size, len(self.ops))

    def trace_copies(self, copies) -> None:
        """Copy many chunk ranges, in order: each ``(src rank, src buffer, src index, dst
        rank, dst buffer, dst index, count, ch)`` does what ``chunk(src rank, src buffer,
        src index, count).copy(dst rank, dst buffer, dst index, ch=ch)`` does - the same
        operation recorded, the same checks - without a reference object per copy: the
        lowerings of :mod:`arborcc.synth` trace thousands of tree hops this way. The
        common case (plain ints in range, the input or output buffer after aliasing by a
        simple rule, initialized sources, ranks the topology joins) runs compiled
        (``arborcc.lang.native``, ``lang/csrc/trace.cpp``); anything beyond it (scratch
        buffers, aliasing by function, a copy onto its own chunks, a check that fails)
        takes the path of ``chunk(...).copy(...)``, which does it or reports it.
        ``copies``: a list or tuple (any other iterable is read into a list first)."""
        self._trace(copies, native.trace_copies, T.COPY, self._copy_as_written, _getframe(1))

    def trace_reduces(self, reduces) -> None:
        """Reduce many chunk ranges, in order: each ``(src rank, src buffer, src index,
        dst rank, dst buffer, dst index, count, ch)`` does what ``chunk(dst rank, dst
        buffer, dst index, count).reduce(chunk(src rank, src buffer, src index, count),
        ch=ch)`` does, as :meth:`trace_copies` does copies (the common case compiled,
        also needing the destination initialized; anything else as written)."""
        self._trace(reduces, native.trace_reduces, T.REDUCE, self._reduce_as_written, _getframe(1))

    def _trace(self, operations, traced, kind: int, as_written, caller) -> None:
        """:meth:`trace_copies` or :meth:`trace_reduces`: ``traced`` (the compiled loop)
        while it can, ``as_written`` for each operation it hands back."""
        operations = operations if type(operations) is list or type(operations) is tuple else list(operations)
        i, total = 0, len(operations)
        if self._alias is not None:  # aliasing by function: every operation as written
            i = total
            for operation in operations:
                as_written(*_operation_fields(operation))
        state = self._native_state(caller, kind)
        while i < total:
            i = traced(operations, i, *state)
            if i < total:
                as_written(*_operation_fields(operations[i]))
                i += 1

    def trace_broadcasts(self, blocks) -> None:
        """Copy chunk ranges down trees, in order: each block ``(hops, buffer, index,
        size)`` is the copies ``(parent, buffer, index, child, buffer, index, size, ch)``
        of :meth:`trace_copies` for each ``(parent, child, ch)`` of ``hops`` - a tree
        broadcast of ``size`` chunks within one buffer (the all-gather lowering's blocks)
        without a tuple per copy. ``blocks``: a list or tuple (any other iterable is read
        into a list first) of tuples, each ``hops`` a list or tuple of tuples (other
        sequences are traced one copy at a time, as written)."""
        blocks = blocks if type(blocks) is list or type(blocks) is tuple else list(blocks)
        state = self._native_state(_getframe(1), T.COPY)
        i, j, total = 0, 0, len(blocks)
        while i < total:
            if self._alias is None:
                i, j = native.trace_broadcasts(blocks, i, j, *state)
            if i < total:  # block i's hop j as written, then on from the next hop
                hops, buffer, index, size = blocks[i]
                if j < len(hops):
                    parent, child, ch = hops[j]
                    self._copy_as_written(parent, buffer, index, child, buffer, index, size, ch)
                i, j = (i, j + 1) if j + 1 < len(hops) else (i + 1, 0)

    def _native_state(self, caller, kind: int) -> tuple:
        """What ``arborcc.lang.native``'s tracing reads and writes of this program, the
        operations (of ``kind``) recorded at ``caller``'s line (the program's line for
        arborcc's own code)."""
        name = caller.f_code.co_filename
        where = self.where if name.startswith(PACKAGE_DIR) else (name, caller.f_lineno)
        why_not = None if self._all_connected else self.connectivity.why_not
        return (self._seqs, self.ops, self.max_ops, self.num_ranks, INPUT, OUTPUT, self._alias_named,
                self._alias_meant, self._alias_shift, self.copy_index_by_source, why_not, kind, self._lanes, where)

    def _copy_as_written(self, sr, sbuf, si, dr, dbuf, di, n, ch) -> None:
        """One copy of :meth:`trace_copies` the way the DSL's verbs do it."""
        self.chunk(sr, sbuf, si, n).copy(dr, dbuf, di, ch=ch)

    def _reduce_as_written(self, sr, sbuf, si, dr, dbuf, di, n, ch) -> None:
        """One reduce of :meth:`trace_reduces` the way the DSL's verbs do it."""
        self.chunk(dr, dbuf, di, n).reduce(self.chunk(sr, sbuf, si, n), ch=ch)

    def _bad_chunk_args(self, rank, index, size):
        loc = user_location(1)
        self.check_rank(rank, loc)
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise program_error(f"chunk count must be a positive integer, got {size!r}", loc)
        raise program_error(f"chunk index must be a non-negative integer, got {index!r}", loc)

    def check_range(self, rank: int, code: int, index: int, size: int, loc) -> None:
        if code > CODE_OUTPUT:
            return  # scratch regions grow as they are used
        n = len(self._seqs[rank][code])
        if index < 0 or index + size > n:
            what = f"chunk index {index}" + (f" (count {size})" if size != 1 else "")
            raise program_error(f"{what} is out of range: the {buffer_label(self.buffer_names[code])} "
                                f"buffer of rank {rank} has {n} chunks", loc)

    # --- context management ------------------------------------------------------------
    def __enter__(self) -> "Program":
        if self in _ACTIVE:
            raise program_error(f"program {self.name!r} is already open")
        _ACTIVE.append(self)
        # tracing allocates millions of small acyclic objects; the cyclic garbage
        # collector would rescan them over and over (quadratic time), so it pauses
        self._gc_was_enabled = gc.isenabled()
        gc.disable()
        return self

    def __exit__(self, *exc_info) -> None:
        if self in _ACTIVE:
            _ACTIVE.remove(self)
        if getattr(self, "_gc_was_enabled", False) and not _ACTIVE:
            gc.enable()

    # --- results -----------------------------------------------------------------------
    def check(self) -> bool:
        """Evaluate the collective's postcondition on the traced buffers (GC3 section 3.2).

        Returns True when it holds; otherwise prints the first failing slots and keeps them
        in ``check_errors``.
        """
        self.check_errors = []
        ok = self.collective.check(self)
        return bool(ok)

    def compile(self):
        """Lower the traced program to an IR :class:`~arborcc.ir.model.Algorithm`
        (:func:`arborcc.compiler.compile_program`); ``compile_stats`` says what it did."""
        from arborcc.compiler import CompileStats, compile_program

        self.compile_stats = CompileStats()
        return compile_program(self, self.compile_stats)

    @property
    def num_ops(self) -> int:
        return len(self.ops)

    def op(self, i: int) -> T.OpView:
        return T.OpView(*self.ops[i])

    def __repr__(self) -> str:
        return (f"Program({self.name!r}, {self.collective!r}, {len(self.ops)} operations, "
                f"instances={self.instances})")


#: collectives whose largest buffer holds a block per rank (the others: one block)
_BLOCK_PER_RANK = frozenset({"allgather", "reducescatter", "alltoall", "gather", "scatter"})


def _operation_fields(operation) -> tuple:
    """The eight fields of one operation of :meth:`Program.trace_copies` or
    :meth:`Program.trace_reduces` (a ValueError names one of another length, as unpacking
    it does)."""
    sr, sbuf, s, dr, dbuf, d, n, ch = operation
    return sr, sbuf, s, dr, dbuf, d, n, ch


def check_program_size(collective: Collective, loc) -> None:
    """Refuse a collective whose buffers would be over the limits (:mod:`arborcc.limits`)
    before they are laid out: ranks, chunks per buffer, chunks of all ranks."""
    n, cf = collective.num_ranks, collective.chunk_factor
    per_buffer = cf * (n if collective.name in _BLOCK_PER_RANK else 1)
    for name, value, what in (("ranks", n, "ranks"), ("chunks", per_buffer, "chunks per buffer"),
                              ("buffer-chunks", 2 * n * per_buffer, "input and output chunks of all ranks")):
        if value > limit(name).value:
            raise program_error(f"{type(collective).__name__}({n}, {cf}): {limit(name).message(value, what)}", loc)


def chunk(rank: int, buffer: object, index: int, size: int = 1):
    """A reference to chunks of the open program (see :meth:`Program.chunk`)."""
    if _ACTIVE:
        return _ACTIVE[-1].chunk(rank, buffer, index, size)
    return current_program().chunk(rank, buffer, index, size)


@contextmanager
def parallelize(n: int) -> Iterator[None]:
    """Run the copies and reduces in this region as ``n`` parallel instances.

    Each instance moves 1/n of every chunk on its own channels and thread blocks (GC3
    section 5.1, "Chunk parallelization"). Regions nest (factors multiply).
    """
    prog = current_program()
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise program_error(f"parallelize needs a positive integer, got {n!r}")
    prog._lanes *= n
    try:
        yield
    finally:
        prog._lanes //= n


def create_scratch(rank: int, name: object) -> object:
    """Declare a named scratch region (optional: using a new name declares it too)."""
    prog = current_program()
    rank = prog.check_rank(rank, user_location(1))
    code = prog.code_of(resolve_buffer(name))
    prog._slot_seqs(rank, code)
    return name


__all__ = ["Program", "chunk", "create_scratch", "current_program", "open_program", "parallelize",
           "recording_programs", "Buffer"]
