"""An algorithm as an MSCCL++ execution plan that is proven before it is written: the plan
is read back, translated and verified, and checked for deadlock and races in its own
semantics (``synth``, ``compile``, ``convert`` and ``tune`` with ``--format mscclpp``;
``docs/mscclpp.md``)."""

from __future__ import annotations


def mscclpp_plan_text(algo, mode=None, source: str | None = None) -> str:
    """``algo`` as an MSCCL++ execution plan for calls in ``mode`` (default: in-place when it
    claims that; ``in-place``/``out-of-place`` spellings accepted): written, read back,
    translated and verified in that mode, and checked for deadlock and races in its own
    semantics (:mod:`arborcc.ir.mscclpp.deadlock`, :mod:`arborcc.ir.mscclpp.races`) - a plan
    that fails is refused (an :class:`~arborcc.errors.InputError`), never written."""
    import json

    from arborcc.ir.aliasing import Mode
    from arborcc.ir.convert import ConversionError, convert_for_mscclpp
    from arborcc.ir.mscclpp.deadlock import plan_deadlocks
    from arborcc.ir.mscclpp.plan import plan_from_document
    from arborcc.ir.mscclpp.races import plan_races
    from arborcc.ir.mscclpp.translate import plan_to_algorithm
    from arborcc.ir.mscclpp.writer import write_mscclpp_plan
    from arborcc.verify import verify_algorithm

    where = source or f"algorithm {algo.name!r}"
    if isinstance(mode, str):
        mode = Mode(mode.replace("-", ""))
    if mode is None:
        mode = Mode.INPLACE if algo.inplace else Mode.OUTOFPLACE
    text = write_mscclpp_plan(convert_for_mscclpp(algo), mode)
    plan = plan_from_document(json.loads(text), where)  # the translation makes new parts, never changes it
    back = plan_to_algorithm(plan, where)
    report = verify_algorithm(back, modes=(mode,))
    if not report.ok:
        raise ConversionError(f"its MSCCL++ plan for {mode.label} calls does not verify: {report.violations[0]}",
                              source=where)
    deadlocks = plan_deadlocks(plan, where)
    if deadlocks:
        raise ConversionError(f"its MSCCL++ plan for {mode.label} calls deadlocks: {deadlocks[0]}", source=where)
    races = plan_races(plan, where)
    if races:
        raise ConversionError(f"its MSCCL++ plan for {mode.label} calls has a race: {races[0]}", source=where)
    return text
