"""What a collective call is, as every rank of it must agree: the collective, the element
type, the operator, the element count, the root and whether it runs in place, packed in
the two words the data plane publishes at every call and compares with its peers' before
data moves (``csrc/call_descriptor.hpp``, whose tables of names this module reads, so
both sides share one definition). A mismatch fails the call on every rank with one line
naming the rank and the field (docs/runtime.md, "Calls and stopped ranks")."""

from __future__ import annotations

from arborcc.ir.aliasing import Mode
from arborcc.ir.collectives import REDUCING, ROOTED
import arborcc.runtime.native as native

COLLECTIVE_CODES = {name: code for code, name in enumerate(native.CALL_COLLECTIVES)}
DTYPE_CODES = {name: code for code, name in enumerate(native.CALL_DTYPES)}
OP_CODES = {name: code for code, name in enumerate(native.CALL_OPS)}
#: collectives whose operator is part of the call (the others ignore the one passed; a
#: custom collective's algorithm may reduce)
WITH_OPERATOR = REDUCING | {"custom"}
#: how a rank passes its buffers: in place, out of place, on shared arrays (the runtime's
#: collectives on them); "" where it does not matter (the staged all-reduce and reduce-scatter)
MODE_CODES = {name: code for code, name in enumerate(native.CALL_MODES)}


def call_descriptor(collective: str, dtype: str, op: str, count: int, root: int, mode: str) -> tuple[int, int]:
    """``(what, count)`` of a call of ``count`` elements per rank block; ``mode`` one of
    :data:`MODE_CODES` (a :class:`~arborcc.ir.aliasing.Mode` names the first two)."""
    mode = {Mode.INPLACE: "in place", Mode.OUTOFPLACE: "out of place"}.get(mode, mode)
    what = (COLLECTIVE_CODES[collective] | DTYPE_CODES[dtype] << 8
            | (OP_CODES[op] if collective in WITH_OPERATOR else 0) << 16 | MODE_CODES[mode] << 24
            | ((root + 1) if collective in ROOTED else 0) << 32)
    return what, count
