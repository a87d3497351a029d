"""Chunk references and the two verbs of the DSL (GC3 section 3.3, Table 1).

``chunk(rank, buffer, index, size)`` returns a :class:`Ref`: ``size`` contiguous slots
of one rank's buffer. ``ref.copy(dst_rank, buffer, index)`` copies them and returns a
reference to the copies; ``ref.reduce(other)`` reduces ``other`` into ``ref``'s slots and
returns ``ref`` (which now refers to the result). Copies and reduces between ranks
become sends and receives; on one rank, local copies and reductions (section 4.2).

A reference remembers how many operations had been traced when it was made (its
*epoch*); a slot written by a later operation makes it stale and unusable.

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

from sys import _getframe

from arborcc.lang.buffers import INPUT, OUTPUT, buffer_label, is_scratch, resolve_buffer
from arborcc.lang.trace import COPY, REDUCE
from arborcc.lang.where import PACKAGE_DIR, program_error, user_location
from arborcc.limits import limit


class Ref:
    """A reference to ``size`` chunks at ``(rank, buffer, index)`` of a program."""

    __slots__ = ("prog", "rank", "code", "index", "size", "epoch", "epochs")

    def __init__(self, prog, rank: int, code: int, index: int, size: int, epoch: int, epochs=None):
        self.prog = prog
        self.rank = rank
        self.code = code
        self.index = index
        self.size = size
        self.epoch = epoch  #: operations traced when this reference was made
        self.epochs = epochs  #: per-slot epochs of a grouped reference, else None

    @property
    def buffer(self) -> object:
        return self.prog.buffer_names[self.code]

    def _end(self) -> int:
        return self.index + self.size

    def _describe(self) -> str:
        span = f"{self.index}" if self.size == 1 else f"{self.index}..{self._end() - 1}"
        return f"(rank {self.rank}, {buffer_label(self.buffer)}, {span})"

    def _readable(self) -> bool:
        """Whether every slot is initialized and unwritten since this reference was made
        (the quick check; :meth:`_validate_read` says what is wrong)."""
        seqs = self.prog._seqs[self.rank][self.code]
        start, end = self.index, self.index + self.size
        if end > len(seqs):
            return False
        part = seqs[start:end]
        if self.epochs is None:
            first = part[0]
            if part.count(first) == len(part):  # usually one operation wrote them all
                return 0 <= first <= self.epoch
            return min(part) >= 0 and max(part) <= self.epoch
        return min(part) >= 0 and all(s <= e for s, e in zip(part, self.epochs))

    def _validate_read(self, loc) -> None:
        """Refuse a stale reference or one to uninitialized slots."""
        prog = self.prog
        seqs = prog._slot_seqs(self.rank, self.code)
        epochs, epoch = self.epochs, self.epoch
        n = len(seqs)
        for k in range(self.index, self.index + self.size):
            e = epoch if epochs is None else epochs[k - self.index]
            if k < n and seqs[k] > e:
                raise program_error(
                    f"stale reference to chunk ({prog.slot_name(self.rank, self.code, k)}): the slot was "
                    f"overwritten at {prog.op_location(seqs[k])} after this reference was made; use the "
                    f"reference that operation returned", loc)
            if k >= n or seqs[k] < 0:
                raise program_error(
                    f"chunk ({prog.slot_name(self.rank, self.code, k)}) is uninitialized: "
                    f"nothing was copied there before it is read", loc)

    # --- the verbs ---------------------------------------------------------------------
    # copy and reduce run millions of times for large programs: the common case is
    # inlined, and every error path recomputes what it needs (the user's line included).
    def copy(self, dst: int, buffer: object = None, index: int = -1, sendtb: int = -1,
             recvtb: int = -1, ch: int = -1) -> "Ref":
        """Copy these chunks to ``(dst, buffer, index)``; returns a reference to the copies.

        ``buffer=None`` keeps this reference's buffer; ``index=-1`` keeps its index when
        the buffer is kept, and appends to the end of a scratch buffer otherwise.
        """
        prog = self.prog
        if type(dst) is not int or not 0 <= dst < prog.num_ranks:
            prog.check_rank(dst, user_location(1))
        if buffer is None:
            buf = prog.buffer_names[self.code]
            if index == -1:
                index = self.index
        else:
            buf = buffer if (buffer is INPUT or buffer is OUTPUT) else resolve_buffer(buffer)
            if index == -1:
                if not is_scratch(buf):
                    raise program_error(f"copy to the {buffer_label(buf)} buffer needs an index")
                index = prog.buffer_size(dst, prog.code_of(buf))
        if type(index) is not int or index < 0:
            raise program_error(f"chunk index must be a non-negative integer, got {index!r}")
        if buf is prog._alias_named:
            owner = self.rank if prog.copy_index_by_source else dst
            buf, index = prog._alias_meant, index + owner * prog._alias_shift
        elif prog._alias is not None:
            if prog.copy_index_by_source:
                buf, index = prog._alias(self.rank, buf, index)
            buf, index = prog._alias(dst, buf, index)
        code = 0 if buf is INPUT else 1 if buf is OUTPUT else prog.code_of(buf)
        size = self.size
        src_rank = self.rank
        if dst == src_rank and code == self.code:
            if index == self.index:
                return self  # copying a chunk onto itself does nothing
            if index < self.index + size and self.index < index + size:
                raise program_error(f"copy of chunks {self._describe()} onto overlapping chunks "
                                    f"starting at {index} of the same buffer")
        if not prog._all_connected:
            reason = prog.connectivity.why_not(src_rank, dst)
            if reason:
                raise program_error(f"copy of chunk {self._describe()} to rank {dst}: {reason}")
        src_seqs = prog._seqs[src_rank][self.code]
        s = self.index
        if size == 1 and self.epochs is None:
            if s >= len(src_seqs) or not 0 <= src_seqs[s] <= self.epoch:
                self._validate_read(user_location(1))
        elif not self._readable():
            self._validate_read(user_location(1))
        rank_seqs = prog._seqs[dst]
        dst_seqs = rank_seqs[code] if code < len(rank_seqs) else prog._slot_seqs(dst, code)
        end = index + size
        if end > len(dst_seqs):
            if code < 2:
                prog.check_range(dst, code, index, size, user_location(1))
            dst_seqs.extend([-1] * (end - len(dst_seqs)))  # a scratch region grows
        if not (type(sendtb) is int and type(recvtb) is int and type(ch) is int
                and sendtb >= -1 and recvtb >= -1 and ch >= -1):
            _check_hints(sendtb, recvtb, ch)
        # where the user wrote it: this frame's caller if it is the user's code; for a
        # library algorithm (arborcc's own code) the line that created the program, which
        # is the first frame outside arborcc - recorded once rather than walked per operation
        f = _getframe(1)
        name = f.f_code.co_filename
        seq = record_operation(prog, (COPY, src_rank, self.code, s, dst, code, index, size, sendtb, recvtb, ch,
                                      prog._lanes, prog.where if name.startswith(PACKAGE_DIR) else (name, f.f_lineno)),
                               dst_seqs, index, size)
        return Ref(prog, dst, code, index, size, seq)

    def reduce(self, other: "Ref", sendtb: int = -1, recvtb: int = -1, ch: int = -1) -> "Ref":
        """Reduce ``other``'s chunks into these (point-wise); returns this reference,
        which now refers to the result."""
        prog = self.prog
        if type(other) is not Ref or other.prog is not prog:
            _bad_reduce_operand(self, other)
        size = self.size
        rank, code, d = self.rank, self.code, self.index
        s = other.index
        if other.size != size:
            raise program_error(f"reduce of {other.size} chunks {other._describe()} into {size} "
                                f"chunks {self._describe()}: the counts differ")
        if other.rank == rank and other.code == code and s < d + size and d < s + size:
            raise program_error(f"reduce of chunks {other._describe()} into overlapping chunks "
                                f"{self._describe()}")
        if not prog._all_connected:
            reason = prog.connectivity.why_not(other.rank, rank)
            if reason:
                raise program_error(f"reduce of chunk {other._describe()} into rank {rank}: {reason}")
        src_seqs = prog._seqs[other.rank][other.code]
        dst_seqs = prog._seqs[rank][code]
        if size == 1 and self.epochs is None and other.epochs is None:
            if (s >= len(src_seqs) or not 0 <= src_seqs[s] <= other.epoch
                    or d >= len(dst_seqs) or not 0 <= dst_seqs[d] <= self.epoch):
                other._validate_read(user_location(1))
                self._validate_read(user_location(1))
        elif not (other._readable() and self._readable()):
            other._validate_read(user_location(1))
            self._validate_read(user_location(1))
        if not (type(sendtb) is int and type(recvtb) is int and type(ch) is int
                and sendtb >= -1 and recvtb >= -1 and ch >= -1):
            _check_hints(sendtb, recvtb, ch)
        f = _getframe(1)
        name = f.f_code.co_filename
        seq = record_operation(prog, (REDUCE, other.rank, other.code, s, rank, code, d, size, sendtb, recvtb, ch,
                                      prog._lanes, prog.where if name.startswith(PACKAGE_DIR) else (name, f.f_lineno)),
                               dst_seqs, d, size)
        self.epoch = seq
        self.epochs = None
        return self

    # --- reshaping references ----------------------------------------------------------
    def split(self, num: int) -> list["Ref"]:
        """Split into ``num`` references of equal size."""
        if isinstance(num, bool) or not isinstance(num, int) or num < 1 or self.size % num:
            raise program_error(f"cannot split {self.size} chunks {self._describe()} into {num!r} equal parts")
        part = self.size // num
        out = []
        for i in range(num):
            ep = None if self.epochs is None else self.epochs[i * part:(i + 1) * part]
            out.append(Ref(self.prog, self.rank, self.code, self.index + i * part, part, self.epoch, ep))
        return out

    def group(self, other: "Ref") -> "Ref":
        """Join with an adjacent (or overlapping) reference of the same rank and buffer."""
        loc = user_location(1)
        if not isinstance(other, Ref) or other.prog is not self.prog:
            raise program_error(f"cannot group chunk {self._describe()} with {other!r}", loc)
        if other.rank != self.rank or other.code != self.code:
            raise program_error(f"cannot group chunks {self._describe()} and {other._describe()}: "
                                f"they are in different ranks or buffers", loc)
        first, second = (self, other) if self.index <= other.index else (other, self)
        if second.index > first._end():
            raise program_error(f"cannot group chunks {first._describe()} and {second._describe()}: "
                                f"they are not contiguous", loc)
        end = max(first._end(), second._end())
        epochs = []
        for k in range(first.index, end):
            candidates = [r._epoch_at(k) for r in (first, second) if r.index <= k < r._end()]
            epochs.append(max(candidates))
        return Ref(self.prog, self.rank, self.code, first.index, end - first.index, max(epochs), tuple(epochs))

    def _epoch_at(self, k: int) -> int:
        return self.epoch if self.epochs is None else self.epochs[k - self.index]

    # --- what the chunks are (public GC3 tools' helpers) ---------------------------------
    def _value(self, i: int):
        return self.prog.value_at(self.rank, self.code, self.index + i)

    def get_origin_rank(self, index: int = 0) -> int:
        return self._value(index).origin_rank

    def get_origin_index(self, index: int = 0) -> int:
        return self._value(index).origin_index

    def get_dst_rank(self, index: int = 0) -> int:
        return self._value(index).dst_rank

    def get_dst_index(self, index: int = 0) -> int:
        return self._value(index).dst_index

    def print_chunk_info(self, index: int = 0) -> None:
        print(self._value(index))

    def values(self) -> list:
        """The symbolic values these slots hold now."""
        return [self._value(i) for i in range(self.size)]

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Ref) and other.prog is self.prog and other.rank == self.rank
                and other.code == self.code and other.index == self.index and other.size == self.size)

    def __hash__(self) -> int:
        return hash((self.rank, self.code, self.index, self.size))

    def __repr__(self) -> str:
        return f"Ref(rank={self.rank}, buffer={buffer_label(self.buffer)}, index={self.index}, size={self.size})"


def _check_hints(sendtb: object, recvtb: object, ch: object) -> None:
    for name, v in (("sendtb", sendtb), ("recvtb", recvtb), ("ch", ch)):
        if isinstance(v, bool) or not isinstance(v, int) or v < -1:
            raise program_error(f"{name} must be an integer >= 0 (or -1 for automatic), got {v!r}")


def _bad_reduce_operand(ref: Ref, other: object) -> None:
    if isinstance(other, Ref):
        raise program_error("reduce of a chunk of another program")
    what = "an empty slot (chunk() returned None)" if other is None else repr(other)
    raise program_error(f"reduce into chunk {ref._describe()} needs a chunk reference, got {what}")


def record_operation(prog, op: tuple, dst_seqs: list[int], index: int, size: int) -> int:
    """Append a traced operation to ``prog`` and mark the ``size`` slots at ``index`` of
    ``dst_seqs`` as written by it; returns its number (1-based)."""
    ops = prog.ops
    ops.append(op)
    seq = len(ops)
    if seq > prog.max_ops:
        raise too_many_operations(prog)
    if size == 1:
        dst_seqs[index] = seq
    else:
        dst_seqs[index:index + size] = [seq] * size
    return seq


def too_many_operations(prog) -> Exception:
    """The error when a program traces more copies and reduces than the operations limit."""
    return program_error(f"program {prog.name!r}: {limit('operations').message(len(prog.ops), 'copies and reduces')}")
