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
place between two calls is verified as it is now.
"""

from __future__ import annotations

from arborcc.memo import CallMemo
from arborcc.ir.model import Algorithm, Buffer
import arborcc.verify.native as native
from arborcc.verify.semantics import OPS

#: the order of the IR buffers in the encoding (step buffer codes, layout bases)
BUFFERS = (Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH)
_OP_TABLE = tuple(OPS.items())

#: inside one :func:`arborcc.verify.verify_algorithm` call: the encodings, by algorithm object
encodings = CallMemo("verify.encoding.programs", opened_by="verify_algorithm",
                     purpose="native.Program encodings by algorithm object")


def encoded_program(algo: Algorithm) -> native.Program:
    """``algo`` as a ``native.Program`` (raises KeyError for an unknown step type or a
    dependency on a thread block its rank lacks: check the structure first)."""
    program = encodings.get_for(algo)
    if program is None:
        program = native.encode_program(sorted(algo.ranks, key=lambda p: p.rank), _OP_TABLE, BUFFERS)
        encodings.put_for(algo, program)
    return program
