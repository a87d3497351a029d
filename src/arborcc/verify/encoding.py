"""An algorithm as flat arrays for the verifier's compiled passes (``arborcc.verify.native``).

:func:`encoded_program` walks the Python objects once - ranks by id, thread blocks in
file order, steps in order, the numbering every pass of the verifier uses - into a
``native.Program``: per thread block its rank, id, connections and first step; per step
what its type does (the flags of :data:`arborcc.verify.semantics.OPS`, handed over
here so that table stays the one description of the step types), its buffers, offsets,
count and dependency; per connection its two thread blocks. The structure rules
(:mod:`.structure`), the pieces run (:mod:`.pieces`) and the symbolic run's proof
(:mod:`.proof`) read it. Within one :func:`arborcc.verify.verify_algorithm` call an
algorithm object is encoded once; never across calls, so that an algorithm changed in
place between two calls is verified as it is now. One hand-over: inside a
:func:`arborcc.verify.pieces.remembering_passes` block (``synthesize``), the encoding
an algorithm's passed pieces check made is kept for the next verifier call on that
same object, which takes it (once: a later call encodes again) - the lowering checks a
candidate, the synthesis verifies it next, and nothing changes it in between (as the
pieces check's own answer, remembered in the same block, already assumes).
"""

from __future__ import annotations

from arborcc.ir.memo import CallMemo
from arborcc.ir.model import Algorithm, Buffer
import arborcc.verify.native as native
from arborcc.verify.semantics import OPS

#: the order of the IR buffers in the encoding (step buffer codes, layout bases)
BUFFERS = (Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH)
_OP_TABLE = tuple(OPS.items())

#: inside one :func:`arborcc.verify.verify_algorithm` call: the encodings, by algorithm object
encodings = CallMemo()
#: inside :func:`arborcc.verify.pieces.remembering_passes`: the encodings
#: :func:`keep_encoding` kept, each until one :func:`encoded_program` call takes it
kept = CallMemo()


def encoded_program(algo: Algorithm) -> native.Program:
    """``algo`` as a ``native.Program`` (raises KeyError for an unknown step type or a
    dependency on a thread block its rank lacks: check the structure first)."""
    program = encodings.get_for(algo)
    if program is None:
        program = kept.get_for(algo)
        if program is not None:
            kept.put_for(algo, None)  # handed over once
        else:
            program = native.encode_program(sorted(algo.ranks, key=lambda p: p.rank), _OP_TABLE, BUFFERS)
        encodings.put_for(algo, program)
    return program


def keep_encoding(algo: Algorithm, program: native.Program) -> None:
    """Keep ``program`` (``algo``'s encoding) for the next :func:`encoded_program` call
    on ``algo`` in the enclosing :func:`arborcc.verify.pieces.remembering_passes`
    block, if there is one (module doc) - unless a verifier call is reading it now."""
    if encodings.get_for(algo) is None:
        kept.put_for(algo, program)
