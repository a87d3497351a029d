"""Collectives: a signature (buffer sizes, in-place aliasing) and a postcondition.

GC3 section 3.2: a program is associated with a collective that fixes the number of
chunks of every rank's input and output buffers, whether the program is in-place (input
and output alias), and a postcondition: for each output slot, the input chunk or
reduction chunk the algorithm must leave there. The scratch size is not part of the
signature; the compiler deduces it from the highest index used.

A user-defined collective subclasses :class:`Collective` and overrides
:meth:`Collective.init_buffers` (the precondition) and :meth:`Collective.expected_output`
(the postcondition), or :meth:`Collective.check` directly, as with the public GC3 tools.
:class:`AllToNext` (GC3 section 7.4) is written that way.

Instances (GC3 section 5.1) replicate a program on 1/n of the data. How the copies'
chunks interleave in a buffer must respect what the runtime thinks each chunk is:
:meth:`Collective.replication_block` says how many consecutive logical chunks form a
unit whose data belongs together (a rank's block in all-gather, all-to-all, ...).

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

from arborcc.ir.limits import XML_COLLECTIVE_NAMES
from arborcc.ir.model import Buffer
from arborcc.lang.values import Chunk, ReduceChunk, describe

INPUT, OUTPUT = Buffer.INPUT, Buffer.OUTPUT


def _positive_int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} must be a positive integer, got {value!r}")
    return value


class Collective:
    """Base class: ``num_ranks`` ranks, ``chunk_factor`` chunks per unit, ``inplace``.

    Subclasses set the class attribute ``name`` to the canonical collective name of the
    IR (allreduce, allgather, reducescatter, alltoall, broadcast, reduce, gather,
    scatter; anything else is written as ``custom``).
    """

    name = "custom"
    root: int | None = None

    def __init__(self, num_ranks: int, chunk_factor: int, inplace: bool = False):
        self.num_ranks = _positive_int(num_ranks, "num_ranks")
        self.chunk_factor = _positive_int(chunk_factor, "chunk_factor")
        self.inplace = bool(inplace)

    # --- signature ---------------------------------------------------------------------
    def init_buffers(self) -> list[dict]:
        """Per rank, a dict ``{Buffer.INPUT: [...], Buffer.OUTPUT: [...]}`` of initial slot
        values (:class:`Chunk` or ``None``). Aliased buffers may share one list."""
        raise NotImplementedError(f"{type(self).__name__} must define init_buffers()")

    def initial_seqs(self) -> list[list[list[int]]] | None:
        """Optional fast description of the precondition for tracing: per rank the lists
        ``[input, output, scratch]`` with 0 for an initialized slot and -1 for an empty one,
        aliased buffers sharing one list. None (the default): derived from
        :meth:`init_buffers`, which built-in collectives only build when values are asked
        for (a 1024-rank all-reduce has a million input chunks)."""
        return None

    def get_buffer_index(self, rank: int, buffer, index: int):
        """Map a (buffer, index) a program names to the slot it really is (in-place aliasing)."""
        return buffer, index

    def aliases(self) -> bool:
        """Whether :meth:`get_buffer_index` can map a name to another slot (True unless
        a subclass knows better; the built-ins alias only when in-place)."""
        return type(self).get_buffer_index is not Collective.get_buffer_index

    def alias_rule(self) -> tuple | None:
        """``(buffer named, buffer meant, index shift per rank)`` when the aliasing is that
        simple: naming ``(rank, named, i)`` means ``(rank, meant, i + rank * shift)``. None:
        ask :meth:`get_buffer_index` (when :meth:`aliases`)."""
        return None

    def replication_block(self, buffer) -> int:
        """Logical chunks per replication block of ``buffer`` (input or output).

        With ``instances=n`` each logical chunk becomes n physical chunks; within a block
        the n copies are laid out one copy after the other, blocks one after the other.
        Block 1 is the public GC3 tools' "interleaved" layout.
        """
        return 1

    @property
    def ir_name(self) -> str:
        """The IR's collective name: ``name`` in either MSCCL dialect's spelling, else custom."""
        return XML_COLLECTIVE_NAMES.get(getattr(self, "name", "custom"), "custom")

    # --- postcondition -----------------------------------------------------------------
    def expected_output(self, rank: int) -> list | None:
        """What each output slot of ``rank`` must hold at the end (None entries: anything);
        None for the whole rank when its output is unconstrained."""
        raise NotImplementedError(f"{type(self).__name__} must define expected_output() or check()")

    def output_value(self, buffers: list[dict], rank: int, index: int):
        """The value of output slot ``index`` of ``rank`` in ``buffers`` (``prog.buffers``)."""
        buf, idx = self.get_buffer_index(rank, OUTPUT, index)
        slots = buffers[rank].get(buf, [])
        return slots[idx] if 0 <= idx < len(slots) else None

    def postcondition_errors(self, prog, limit: int = 20) -> list[str]:
        """Messages for the output slots that do not hold what the postcondition says."""
        errors: list[str] = []
        buffers = prog.buffers
        for r in range(self.num_ranks):
            expected = self.expected_output(r)
            if expected is None:
                continue
            for i, want in enumerate(expected):
                if want is None:
                    continue
                got = self.output_value(buffers, r, i)
                if got is None or got != want:
                    errors.append(f"rank {r} output chunk {i} holds {describe(got)}, "
                                  f"expected {describe(want)}")
                    if len(errors) >= limit:
                        return errors
        return errors

    def check(self, prog) -> bool:
        """True when the traced program satisfies the postcondition (prints what fails)."""
        errors = self.postcondition_errors(prog)
        for e in errors:
            print(e)
        prog.check_errors = errors
        return not errors

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(num_ranks={self.num_ranks}, chunk_factor={self.chunk_factor}, "
                f"inplace={self.inplace})")


def _sum_over_ranks(num_ranks: int, index: int) -> ReduceChunk:
    return ReduceChunk(-1, [Chunk(r, index) for r in range(num_ranks)])


def _gathered_seqs(cf: int, n: int, inplace: bool) -> list:
    """Initial sequence numbers when rank r's input is block r of an n-block output
    (all-gather, gather): in place, the input is that window of the output."""
    res = []
    for r in range(n):
        out = [-1] * (n * cf)
        if inplace:
            out[r * cf:(r + 1) * cf] = [0] * cf
        res.append([[-1] * cf if inplace else [0] * cf, out, []])
    return res


def _gathered_buffers(cf: int, n: int, inplace: bool, dst: int) -> list[dict]:
    """Initial buffers of the same layout; each chunk is bound for rank ``dst`` (-1:
    every rank)."""
    bufs = []
    for r in range(n):
        inp = [Chunk(r, c, dst, r * cf + c) for c in range(cf)]
        out = [None] * (n * cf)
        if inplace:
            out[r * cf:(r + 1) * cf] = inp
            inp = [None] * cf  # never addressed: input names a window of output
        bufs.append({INPUT: inp, OUTPUT: out})
    return bufs


class _Builtin(Collective):
    """In place, a built-in collective's program may name one buffer (``_named``) for a
    window of the other (``_meant``), which starts at ``rank * chunk_factor`` when
    ``_per_rank`` (all-gather: the input is rank r's block of the output), else at 0."""

    _named, _meant, _per_rank = OUTPUT, INPUT, False

    def aliases(self) -> bool:
        return self.inplace

    def alias_rule(self) -> tuple | None:
        if not self.inplace or type(self).get_buffer_index is not _Builtin.get_buffer_index:
            return None
        return self._named, self._meant, self.chunk_factor if self._per_rank else 0

    def get_buffer_index(self, rank, buffer, index):
        if self.inplace and buffer is self._named:
            return self._meant, index + (rank * self.chunk_factor if self._per_rank else 0)
        return buffer, index


class AllReduce(_Builtin):
    """Every rank ends with the reduction over ranks of every input chunk (``chunk_factor`` chunks)."""

    name = "allreduce"

    def initial_seqs(self):
        cf = self.chunk_factor
        out = []
        for r in range(self.num_ranks):
            inp = [0] * cf
            out.append([inp, inp if self.inplace else [-1] * cf, []])
        return out

    def init_buffers(self) -> list[dict]:
        bufs = []
        for r in range(self.num_ranks):
            inp = [Chunk(r, c, -1, c) for c in range(self.chunk_factor)]
            out = inp if self.inplace else [None] * self.chunk_factor
            bufs.append({INPUT: inp, OUTPUT: out})
        return bufs

    def replication_block(self, buffer) -> int:
        return self.chunk_factor

    def expected_output(self, rank):
        if not hasattr(self, "_expected"):
            self._expected = [_sum_over_ranks(self.num_ranks, c) for c in range(self.chunk_factor)]
        return self._expected


class AllGather(_Builtin):
    """Rank r's ``chunk_factor`` input chunks end in block r of every rank's output."""

    name = "allgather"
    _named, _meant, _per_rank = INPUT, OUTPUT, True

    def initial_seqs(self):
        return _gathered_seqs(self.chunk_factor, self.num_ranks, self.inplace)

    def init_buffers(self) -> list[dict]:
        return _gathered_buffers(self.chunk_factor, self.num_ranks, self.inplace, -1)

    def replication_block(self, buffer) -> int:
        return self.chunk_factor

    def expected_output(self, rank):
        cf = self.chunk_factor
        return [Chunk(i, c) for i in range(self.num_ranks) for c in range(cf)]


class ReduceScatter(_Builtin):
    """Rank r ends with block r (``chunk_factor`` chunks) of the reduction of all inputs."""

    name = "reducescatter"
    _per_rank = True

    def initial_seqs(self):
        cf, n = self.chunk_factor, self.num_ranks
        return [[[0] * (n * cf), [-1] * cf, []] for _ in range(n)]

    def init_buffers(self) -> list[dict]:
        cf, bufs = self.chunk_factor, []
        for r in range(self.num_ranks):
            inp = [Chunk(r, i * cf + c, i, c) for i in range(self.num_ranks) for c in range(cf)]
            bufs.append({INPUT: inp, OUTPUT: [None] * cf})
        return bufs

    def replication_block(self, buffer) -> int:
        return self.chunk_factor

    def expected_output(self, rank):
        cf = self.chunk_factor
        return [_sum_over_ranks(self.num_ranks, rank * cf + c) for c in range(cf)]


class AllToAll(_Builtin):
    """Block j of rank i's input ends in block i of rank j's output."""

    name = "alltoall"

    def initial_seqs(self):
        cf, n, res = self.chunk_factor, self.num_ranks, []
        for r in range(n):
            inp = [0] * (n * cf)
            res.append([inp, inp if self.inplace else [-1] * (n * cf), []])
        return res

    def init_buffers(self) -> list[dict]:
        cf, n, bufs = self.chunk_factor, self.num_ranks, []
        for r in range(n):
            inp = [Chunk(r, j * cf + c, j, r * cf + c) for j in range(n) for c in range(cf)]
            out = inp if self.inplace else [None] * (n * cf)
            bufs.append({INPUT: inp, OUTPUT: out})
        return bufs

    def replication_block(self, buffer) -> int:
        return self.chunk_factor

    def expected_output(self, rank):
        cf = self.chunk_factor
        return [Chunk(i, rank * cf + c) for i in range(self.num_ranks) for c in range(cf)]


class _Rooted(_Builtin):
    def __init__(self, num_ranks: int, chunk_factor: int, inplace: bool = False, root: int = 0):
        super().__init__(num_ranks, chunk_factor, inplace)
        if isinstance(root, bool) or not isinstance(root, int) or not 0 <= root < num_ranks:
            raise ValueError(f"root must be a rank in 0..{num_ranks - 1}, got {root!r}")
        self.root = root

    def __repr__(self) -> str:
        return super().__repr__()[:-1] + f", root={self.root})"


class Broadcast(_Rooted):
    """The root's ``chunk_factor`` input chunks end in every rank's output."""

    name = "broadcast"

    def initial_seqs(self):
        cf, res = self.chunk_factor, []
        for r in range(self.num_ranks):
            inp = [0 if r == self.root else -1] * cf
            res.append([inp, inp if self.inplace else [-1] * cf, []])
        return res

    def init_buffers(self) -> list[dict]:
        cf, bufs = self.chunk_factor, []
        for r in range(self.num_ranks):
            inp = [Chunk(r, c, -1, c) if r == self.root else None for c in range(cf)]
            bufs.append({INPUT: inp, OUTPUT: inp if self.inplace else [None] * cf})
        return bufs

    def replication_block(self, buffer) -> int:
        return self.chunk_factor

    def expected_output(self, rank):
        return [Chunk(self.root, c) for c in range(self.chunk_factor)]


class Reduce(_Rooted):
    """The root ends with the reduction of all inputs; other outputs are unconstrained."""

    name = "reduce"

    def initial_seqs(self):
        cf, res = self.chunk_factor, []
        for r in range(self.num_ranks):
            inp = [0] * cf
            res.append([inp, inp if self.inplace else [-1] * cf, []])
        return res

    def init_buffers(self) -> list[dict]:
        cf, bufs = self.chunk_factor, []
        for r in range(self.num_ranks):
            inp = [Chunk(r, c, self.root, c) for c in range(cf)]
            bufs.append({INPUT: inp, OUTPUT: inp if self.inplace else [None] * cf})
        return bufs

    def replication_block(self, buffer) -> int:
        return self.chunk_factor

    def expected_output(self, rank):
        if rank != self.root:
            return None
        return [_sum_over_ranks(self.num_ranks, c) for c in range(self.chunk_factor)]


class Gather(_Rooted):
    """Rank r's input chunks end in block r of the root's output."""

    name = "gather"
    _named, _meant, _per_rank = INPUT, OUTPUT, True

    def initial_seqs(self):
        return _gathered_seqs(self.chunk_factor, self.num_ranks, self.inplace)

    def init_buffers(self) -> list[dict]:
        return _gathered_buffers(self.chunk_factor, self.num_ranks, self.inplace, self.root)

    def replication_block(self, buffer) -> int:
        return self.chunk_factor

    def expected_output(self, rank):
        if rank != self.root:
            return None
        cf = self.chunk_factor
        return [Chunk(i, c) for i in range(self.num_ranks) for c in range(cf)]


class Scatter(_Rooted):
    """Block r of the root's input ends in rank r's output."""

    name = "scatter"
    _per_rank = True

    def initial_seqs(self):
        cf, n = self.chunk_factor, self.num_ranks
        return [[[0 if r == self.root else -1] * (n * cf), [-1] * cf, []] for r in range(n)]

    def init_buffers(self) -> list[dict]:
        cf, n, bufs = self.chunk_factor, self.num_ranks, []
        for r in range(n):
            inp = [Chunk(r, j * cf + c, j, c) if r == self.root else None
                   for j in range(n) for c in range(cf)]
            bufs.append({INPUT: inp, OUTPUT: [None] * cf})
        return bufs

    def replication_block(self, buffer) -> int:
        return self.chunk_factor

    def expected_output(self, rank):
        cf = self.chunk_factor
        return [Chunk(self.root, rank * cf + c) for c in range(cf)]


class AllToNext(Collective):
    """GC3 section 7.4: rank i's input (``chunk_factor`` chunks) ends in rank i+1's output.

    A user-defined collective: the last rank sends nothing and rank 0 receives nothing.
    """

    name = "custom"

    def initial_seqs(self):
        cf, n = self.chunk_factor, self.num_ranks
        return [[[0 if r < n - 1 else -1] * cf, [-1] * cf, []] for r in range(n)]

    def init_buffers(self) -> list[dict]:
        cf, n, bufs = self.chunk_factor, self.num_ranks, []
        for r in range(n):
            inp = [Chunk(r, c, r + 1, c) if r < n - 1 else None for c in range(cf)]
            bufs.append({INPUT: inp, OUTPUT: [None] * cf})
        return bufs

    def expected_output(self, rank):
        if rank == 0:
            return None
        return [Chunk(rank - 1, c) for c in range(self.chunk_factor)]

