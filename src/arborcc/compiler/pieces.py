"""Whether a compiled schedule finishes with its steps cut into pieces, as the MSCCL
runtimes run them.

The global order (:mod:`.order`) makes thread blocks deadlock-free with unbounded
connections. The runtimes' connections are bounded, and they do not move a step as one
message: their interpreter (``runInterpreter`` in ``msccl_interpreter.h`` of
https://github.com/microsoft/msccl) runs a step of ``count`` chunks as one primitive call
per ``maxAllowedCount`` chunks (a *piece*), waits for a step's dependency before it
starts and signals it only when the last piece is done. A piece of the Simple protocol
takes 2 of the 4 FIFO slices of a connection (``NCCL_STEPS`` = 8 steps, slices of
``MSCCL_SLICESTEPS`` = 2), one of LL or LL128 1 of 8. So a step of 2 chunks can fill a
Simple connection, and a receive held back by a dependency on a send that waits for room
closes a cycle the unbounded model does not see.

:func:`finishes_in_pieces` runs the compiled thread blocks of one instance (instances
share no connection and no dependency) in that model at ``maxAllowedCount`` 1 - the
verifier's piece check (:mod:`arborcc.verify.pieces`, whose docstring shows that a run
at 1 finishing decides every larger ``maxAllowedCount``; its constants are these). The
pipeline (:mod:`.pipeline`) falls back when a schedule does not finish: without
fusions, then in program order without fusions, where every message is received right
after it was sent - the first unfinished step of that order then always moves: a send
with its receive (every step before the receive is done), a receive its waiting
message, anything else its own work - so that schedule always finishes.
"""

from __future__ import annotations

import arborcc.compiler.native as native
from arborcc.ir.model import Protocol

#: a connection's FIFO, in NCCL steps
NCCL_STEPS = 8
#: (slices a connection holds, slices a piece takes): Simple - 4 slices of 2 steps, a
#: piece is 2 slices; LL and LL128 - a piece is one step
SIMPLE_SLICES = (NCCL_STEPS // 2, 2)
LL_SLICES = (NCCL_STEPS, 1)


def slices(protocol: Protocol | str) -> tuple[int, int]:
    """(capacity, slices per piece) of a connection of ``protocol`` (a member or its value)."""
    return SIMPLE_SLICES if Protocol(protocol) is Protocol.SIMPLE else LL_SLICES


def finishes_in_pieces(schedule: native.Schedule, a: native.Assignment, protocol: Protocol | str) -> bool:
    """Whether every thread block of ``schedule`` (one instance; assignment ``a``) finishes
    with every step of ``cnt`` chunks cut into ``cnt`` pieces of ``protocol`` (compiled
    code, csrc/pieces.cpp)."""
    capacity, per_piece = slices(protocol)
    return native.finishes_in_pieces(schedule, a, capacity, per_piece)
