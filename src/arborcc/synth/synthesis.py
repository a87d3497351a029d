"""``synthesize``: the entry point of the synthesis stage.

Checks the request once (collective, strategy, ranks, root, routes), computes the
collective's bound once, runs the strategy asked for - or, with ``auto``, every
strategy of the registry (:mod:`arborcc.synth.registry`) that builds the collective -
keeps the fastest - by the simulator's time for a call of the given ``size``, or without
one by the steady-state bandwidth model - (preferring algorithms within the target
dialect's runtime limits), and verifies the one it returns: every algorithm
arborcc hands out is proved first, once.
"""

from __future__ import annotations

import time
from typing import Callable

from arborcc.errors import SynthesisError, VerificationError
from arborcc.ir.limits import check_dialect_limits
from arborcc.sim.simulate import predict_time
from arborcc.synth.bounds import collective_bound
from arborcc.synth.flowgraph import check_routable
from arborcc.synth.registry import BY_NAME, STRATEGIES, strategy_names, synthesizable_collectives
from arborcc.synth.result import SynthesisRequest, SynthesisResult
from arborcc.topology.model import Topology


def _candidates(strategy: str, collective: str, num_ranks: int) -> tuple[list[str], list[str]]:
    """The strategies to run and, for ``auto``, those left out with the reason."""
    if strategy != "auto":
        entry = BY_NAME[strategy]
        if collective not in entry.collectives:
            raise SynthesisError(f"strategy {strategy} builds {' and '.join(entry.collectives)} only, not "
                                 f"{collective} (use --strategy trees)")
        return [strategy], []
    names, skipped = [], []
    for entry in STRATEGIES:
        if collective not in entry.collectives:
            continue
        limit = entry.auto_rank_limits.get(collective)
        if limit is not None and num_ranks > limit:
            skipped.append(f"{entry.name} (auto leaves it out above {limit} ranks; --strategy {entry.name} runs it)")
        else:
            names.append(entry.name)
    return names, skipped


def _verify(result: SynthesisResult, dialect: str | None) -> None:
    """Verify ``result.algorithm`` (with ``dialect``'s runtime limits) into
    ``result.report``; raise :class:`VerificationError` if it is incorrect (a limit
    violation is the caller's to judge: the legacy dialect has no step limits)."""
    from arborcc.verify import verify_algorithm

    report = verify_algorithm(result.algorithm, dialect)
    result.report = report
    wrong = [v for v in report.violations if v.kind != "limit"]
    if wrong:
        more = f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""
        raise VerificationError(f"algorithm {result.algorithm.name!r} is incorrect: {wrong[0]}{more}")


def synthesize(topology: Topology, collective: str, strategy: str = "auto", root: int = 0,
               links: str = "all", progress: Callable[[str], None] | None = None,
               size: int | None = None, dialect: str | None = "executor") -> SynthesisResult:
    """Run one strategy (or, with ``auto``, every one that applies and keep the fastest).

    ``size``: the buffer size in bytes the algorithm is meant for, for strategies whose
    schedule depends on it (binary-trees: one tree below MXNet's threshold); ``None``
    means large, bandwidth-bound buffers. ``dialect``: the MSCCL runtime the algorithm
    is for; ``auto`` prefers candidates within its limits (steps per thread block,
    thread blocks per rank) over faster ones that are not, and ``result.report`` lists
    the returned algorithm's violations of them (``None``: no runtime limits).
    """
    if size is not None and size <= 0:
        raise SynthesisError(f"size must be a positive number of bytes, got {size}")
    if collective not in synthesizable_collectives():
        raise SynthesisError(f"unknown collective {collective!r} (known: {', '.join(synthesizable_collectives())})")
    if strategy != "auto" and strategy not in BY_NAME:
        raise SynthesisError(f"unknown strategy {strategy!r} (known: auto, {', '.join(strategy_names())})")
    if topology.num_ranks < 2:
        raise SynthesisError(f"{topology.name} has {topology.num_ranks} GPU; a collective needs at least 2")
    if not 0 <= root < topology.num_ranks:
        raise SynthesisError(f"root {root} is not a rank (0-{topology.num_ranks - 1})")
    names, skipped = _candidates(strategy, collective, topology.num_ranks)
    check_routable(topology, hub=0)
    t0 = time.perf_counter()
    if progress:
        progress(f"bound: the best {collective} rate the links of {topology.name} allow")
    request = SynthesisRequest(topology, collective, collective_bound(topology, collective, root, links),
                               root, links, size)
    results = []
    for name in names:
        if progress:
            progress(f"{name}: synthesizing {collective} on {topology.name}")
        try:
            results.append(BY_NAME[name].load()(request))
        except SynthesisError as e:
            if strategy != "auto":
                raise
            skipped.append(f"{name} ({e})")
    if not results:
        raise SynthesisError(f"no strategy can build {collective} on {topology.name}: " + "; ".join(skipped))
    fits = ({id(r): not check_dialect_limits(r.algorithm, dialect) for r in results}
            if len(results) > 1 and dialect is not None else {})
    # with a size, auto ranks by the simulated time of a call of that size (latency,
    # pipelining and contention included); without one, by steady-state bandwidth
    predicted = ({id(r): predict_time(r.algorithm, topology, size, routes=r.routes) for r in results}
                 if strategy == "auto" and size is not None and len(results) > 1 else {})
    best = max(results, key=lambda r: (fits.get(id(r), True), -predicted.get(id(r), 0.0), r.algbw))
    if progress:
        progress(f"verifying the {best.strategy} algorithm")
    _verify(best, dialect)
    best.synth_time = time.perf_counter() - t0
    if strategy == "auto":
        by_time = bool(predicted)
        best.notes.append("auto chose " + best.strategy + " among " + ", ".join(
            (f"{r.strategy} {predicted[id(r)] * 1e6:.1f}" if by_time else f"{r.strategy} {r.algbw / 1e9:.1f}")
            + ("" if fits.get(id(r), True) else f" (over the {dialect} limits)")
            for r in results) + (f" us simulated for {size} bytes" if by_time else " GB/s")
            + ("; skipped " + "; ".join(skipped) if skipped else ""))
        best.strategy = f"auto:{best.strategy}"
    return best
