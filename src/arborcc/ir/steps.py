"""The step types of the IR and what each does: the one table every stage reads.

From the GC3 paper (section 4.2, instruction list) and the MSCCL parsers
(``msccl_parser.cc``: which step types send, receive, and check their source or
destination bounds). ``recv`` below is the data popped from the thread block's
receive connection; ``src``/``dst`` are local chunk ranges.

=======  =====================================  ====  =====  ====  ==========  =========
type     effect                                  code  send   recv  reads       writes
=======  =====================================  ====  =====  ====  ==========  =========
``s``    push src                                0     yes    -     src         -
``r``    dst := recv                             1     -      yes   -           dst
``re``   dst := dst + src                        2     -      -     src, dst    dst
``cpy``  dst := src                              3     -      -     src         dst
``rrc``  dst := src + recv                       4     -      yes   src         dst
``rrs``  push src + recv                         5     yes    yes   src         -
``rcs``  dst := recv; push recv                  6     yes    yes   -           dst
``rrcs`` dst := src + recv; push dst             7     yes    yes   src         dst
``nop``  nothing (carries a dependency)          8     -      -     -           -
``ra``   dst := dst + src (residual add; legacy)  -     -      -     src, dst    dst
=======  =====================================  ====  =====  ====  ==========  =========

So every step computes one value: the received data (``recv``), plus ``src`` where it
also reads its source, or ``dst + src`` where it reads its destination; it writes that
value to ``dst`` when it writes and pushes it when it sends. A step *reduces* when it
adds (it reads its source and also the received data or its destination) and is
*fused* when it both receives and sends (GC3's fusion pass makes ``rcs``, ``rrs``,
``rrcs``).

For ``s`` the destination fields and for ``r`` the source fields name the remote
chunk; the runtimes do not use them and neither does the verifier. A write made by a
receiving step carries received data, so it cannot start before the matching send
has started (used by the race check, ``verify/csrc/races.cpp``).

``code`` is the integer the compiler's instruction table, the shared-memory runtime's
lowered programs and the torch executor use (``ra`` has none: only the legacy runtime
runs it). The compiled modules take the table from one header,
``src/arborcc/ir/csrc/step_codes.hpp``; a module that takes codes exports the names in
code order and their flags (``STEP_CODES``, ``STEP_FLAGS``), and the Python module that
hands it codes checks them once at import (:func:`check_native_step_codes`).

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

import enum
from typing import NamedTuple


class Op(str, enum.Enum):
    """Step types of MSCCL (``type=`` in XML)."""

    SEND = "s"
    RECV = "r"
    REDUCE = "re"  #: local reduce: dst += src
    COPY = "cpy"  #: local copy
    RECV_REDUCE_COPY = "rrc"
    RECV_REDUCE_SEND = "rrs"
    RECV_COPY_SEND = "rcs"
    RECV_REDUCE_COPY_SEND = "rrcs"
    NOP = "nop"  #: carries a dependency only
    RESIDUAL_ADD = "ra"  #: legacy runtime only

    #: plain attributes of each member, set from :data:`STEP_KINDS` below (passes over
    #: every step of a program read them; a property cost a call and a lookup each time)
    code: int | None  #: the step's code in compiled programs; None: no arborcc runtime runs it
    sends: bool  #: the step sends to the thread block's send peer
    receives: bool  #: the step receives from the thread block's receive peer
    reads_src: bool  #: the step reads its source chunks
    reads_dst: bool  #: the step reads its destination chunks (dst := dst + src)
    writes_dst: bool  #: the step writes its destination chunks
    reduces: bool  #: the step adds into what it reads
    fused: bool  #: the step receives and sends (a receive fused with the send forwarding it)


class StepKind(NamedTuple):
    """What a step type does (one row of the module's table)."""

    code: int | None
    sends: bool
    receives: bool
    reads_src: bool
    reads_dst: bool
    writes_dst: bool

    @property
    def reduces(self) -> bool:
        return self.reads_src and (self.receives or self.reads_dst)

    @property
    def fused(self) -> bool:
        return self.sends and self.receives


#: the table (module docstring): code, sends, receives, reads src, reads dst, writes dst
STEP_KINDS: dict[Op, StepKind] = {
    Op.SEND: StepKind(0, True, False, True, False, False),
    Op.RECV: StepKind(1, False, True, False, False, True),
    Op.REDUCE: StepKind(2, False, False, True, True, True),
    Op.COPY: StepKind(3, False, False, True, False, True),
    Op.RECV_REDUCE_COPY: StepKind(4, False, True, True, False, True),
    Op.RECV_REDUCE_SEND: StepKind(5, True, True, True, False, False),
    Op.RECV_COPY_SEND: StepKind(6, True, True, False, False, True),
    Op.RECV_REDUCE_COPY_SEND: StepKind(7, True, True, True, False, True),
    Op.NOP: StepKind(8, False, False, False, False, False),
    Op.RESIDUAL_ADD: StepKind(None, False, False, True, True, True),
}

for _op, _kind in STEP_KINDS.items():
    for _name in (*StepKind._fields, "reduces", "fused"):
        setattr(_op, _name, getattr(_kind, _name))
del _op, _kind, _name

#: the step types with a code, indexed by it
OP_OF_CODE: tuple[Op, ...] = tuple(sorted((op for op in Op if op.code is not None), key=lambda op: op.code))
assert [op.code for op in OP_OF_CODE] == list(range(len(OP_OF_CODE))), "step codes must be 0, 1, 2, ..."


def native_step_table(kinds=STEP_KINDS) -> tuple[list[str], list[int]]:
    """The table as the compiled modules export it: the names in code order
    (``STEP_CODES``) and their flags (``STEP_FLAGS``: bit k set for field k + 1 of
    :class:`StepKind`, sends first)."""
    flags = [sum(1 << k for k, f in enumerate(StepKind._fields[1:]) if getattr(kinds[op], f)) for op in OP_OF_CODE]
    return [op.value for op in OP_OF_CODE], flags


def check_native_step_codes(module) -> None:
    """Refuse to use compiled module ``module`` (ImportError) unless the step table it
    was built with (``STEP_CODES``, ``STEP_FLAGS``, from ``ir/csrc/step_codes.hpp``) is
    this one: a module built from another header would misread every step."""
    names, flags = native_step_table()
    theirs = (list(module.STEP_CODES), list(module.STEP_FLAGS))
    if theirs != (names, flags):
        raise ImportError(f"{module.__name__} was built with another step table (codes {theirs[0]}, flags "
                          f"{theirs[1]}; arborcc.ir.steps has {names}, {flags}): rebuild the C++ extensions "
                          "(python setup.py build_ext --inplace)")
