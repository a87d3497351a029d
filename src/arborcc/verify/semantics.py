"""What each step type does, as the verifier's passes read it: a view of the IR's step
table (:mod:`arborcc.ir.steps`, where the table and its sources are), keyed by
:class:`~arborcc.ir.model.Op` with the five flags the passes use."""

from __future__ import annotations

from typing import NamedTuple

from arborcc.ir.steps import STEP_KINDS, Op


class OpInfo(NamedTuple):
    sends: bool
    receives: bool
    reads_src: bool
    reads_dst: bool
    writes_dst: bool


OPS: dict[Op, OpInfo] = {op: OpInfo(*(getattr(kind, f) for f in OpInfo._fields)) for op, kind in STEP_KINDS.items()}
