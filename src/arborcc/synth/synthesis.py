"""``synthesize``: the entry point of the synthesis stage.

Checks the request once (collective, strategy, ranks, root, connectivity), computes the
collective's bound once, runs the strategy asked for - or, with ``auto``, the
strategies of the registry (:mod:`arborcc.synth.registry`) that build the collective -
keeps the fastest - by the simulator's time for a call of the given ``size``, or without
one by the steady-state bandwidth model - (preferring algorithms within the target
dialect's runtime limits), and verifies the one it returns: every algorithm
arborcc hands out is proved first, and claims exactly the kinds of call (in-place,
out-of-place; :mod:`arborcc.ir.aliasing`) it was verified in.

``auto`` is a cascade: on a job spanning several hosts the strategies marked
``clusters_first`` go first, then the others in registry order; a strategy that cannot
apply (or whose solver hits its time limit) is skipped with its reason, and the
cascade stops at the first algorithm that reaches the bound within the dialect's
limits - nothing can beat it in bandwidth (with a ``size`` every candidate runs: the
simulated time ranks them). Its notes say which strategy it used and why, and what it
skipped.
"""

from __future__ import annotations

import time
from typing import Callable

from arborcc.collector import collector_paused
from arborcc.errors import SynthesisError, VerificationError
from arborcc.ir.limits import check_dialect_limits, remembering_limits
from arborcc.lang.program import own_program_budget
from arborcc.sim.simulate import predict_time
from arborcc.synth.bounds import collective_bound
from arborcc.synth.flowgraph import check_strongly_connected, flow_graph
from arborcc.synth.registry import BY_NAME, STRATEGIES, strategy_names, synthesizable_collectives
from arborcc.synth.result import SynthesisRequest, SynthesisResult
from arborcc.verify.pieces import remembering_passes
from arborcc.topology.model import Topology


def _spans_hosts(topology: Topology) -> bool:
    hosts = {topology.devices[g].host for g in topology.ranks}
    return len(hosts) > 1


def _candidates(strategy: str, collective: str, num_ranks: int, clusters: bool) -> tuple[list[str], list[str]]:
    """The strategies to run, in order, and, for ``auto``, those left out with the reason."""
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
    if clusters:
        names.sort(key=lambda name: not BY_NAME[name].clusters_first)
    return names, skipped


#: operations a synthesized program may trace per rank squared beyond 1024 ranks, when no
#: operations limit was set (``--limit operations=N`` or ``ARBORCC_MAX_OPERATIONS`` wins):
#: an all-to-all moves its n^2 blocks one by one (the three-step traces about 1.24 n^2
#: operations, 1.3 million at 1024 ranks, in 1.7 GB); up to 1024 ranks the budget of
#: every program arborcc builds itself holds (:data:`arborcc.lang.program.OWN_PROGRAM_OPERATIONS`)
OPERATIONS_PER_RANK_SQUARED = 2


def operations_budget(num_ranks: int):
    """A block within which a synthesized program for ``num_ranks`` ranks may trace what
    arborcc's own programs may (:func:`arborcc.lang.program.own_program_budget`), or
    ``OPERATIONS_PER_RANK_SQUARED * n^2`` operations when that is more."""
    return own_program_budget(OPERATIONS_PER_RANK_SQUARED * num_ranks ** 2)


#: algorithms of more steps claim only the mode their lowering declares: proving the other
#: one adds its memory to the symbolic run (as a run of its own it took 20-30 s for the
#: 300 000-400 000 steps of a 1024-GPU all-gather or reduce-scatter, measured with
#: benchmarks/cluster_scale.py)
OTHER_MODE_STEP_LIMIT = 200_000


def _verify(result: SynthesisResult, dialect: str | None) -> None:
    """Verify ``result.algorithm`` (with ``dialect``'s runtime limits) into
    ``result.report`` and make it claim exactly the calls it is verified in: the mode its
    lowering declares and, up to :data:`OTHER_MODE_STEP_LIMIT` steps, every other mode the
    verifier proves in the same run (``also`` of :func:`arborcc.verify.verify_algorithm`;
    modes :func:`arborcc.verify.checker.refuted_mode` rules out in one pass are not
    run; above the limit a note says the other mode was not tried).
    Raise :class:`VerificationError` if it is incorrect in its declared mode (a limit
    violation is the caller's to judge: the legacy dialect has no step limits)."""
    from arborcc.ir.aliasing import Mode, declared_modes, with_modes
    from arborcc.verify import verify_algorithm
    from arborcc.verify.checker import refuted_mode

    algo = result.algorithm
    declared = declared_modes(algo)
    others = [m for m in Mode if m not in declared and refuted_mode(algo, m) is None]
    steps = sum(len(tb.steps) for rank in algo.ranks for tb in rank.threadblocks)
    if others and steps > OTHER_MODE_STEP_LIMIT:
        result.notes.append(f"claims {' and '.join(m.label for m in declared)} calls only: {steps} steps, "
                            f"the {' and '.join(m.label for m in others)} call was not verified")
        others = []
    report = verify_algorithm(algo, dialect, also=others)  # the other modes in the same run
    wrong = [v for v in report.violations if v.kind != "limit"]
    if wrong:
        more = f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""
        raise VerificationError(f"algorithm {algo.name!r} is incorrect: {wrong[0]}{more}")
    extra = tuple(m for m in others if m.label in report.modes)
    if extra:
        result.algorithm = with_modes(algo, declared + extra)
    result.report = report


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
    with collector_paused():  # trees, copies and steps: hundreds of thousands, all acyclic
        return _synthesize(topology, collective, strategy, root, links, progress, size, dialect)


def _synthesize(topology: Topology, collective: str, strategy: str, root: int, links: str,
                progress: Callable[[str], None] | None, size: int | None,
                dialect: str | None) -> SynthesisResult:
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
    # the lowering's, the cascade's and the verifier's checks of one algorithm run once
    with remembering_passes(), remembering_limits():
        names, skipped = _candidates(strategy, collective, topology.num_ranks, _spans_hosts(topology))
        t0 = time.perf_counter()
        check_strongly_connected(flow_graph(topology, links), collective)
        if progress:
            progress(f"bound: the best {collective} rate the links of {topology.name} allow")
        request = SynthesisRequest(topology, collective, collective_bound(topology, collective, root, links),
                                   root, links, size, dialect)
        results, untried, verified, rejected = [], [], set(), set()

        def proven(r: SynthesisResult) -> bool:
            """Verify ``r``; with ``auto``, a strategy whose algorithm fails is skipped
            (with the verifier's reason) rather than failing the synthesis."""
            if progress:
                progress(f"verifying the {r.strategy} algorithm ({time.perf_counter() - t0:.1f} s)")
            try:
                _verify(r, dialect)
            except VerificationError as e:
                if strategy != "auto":
                    raise
                skipped.append(f"{r.strategy} (its algorithm fails verification: {e})")
                rejected.add(id(r))
                return False
            verified.add(id(r))
            return True

        for i, name in enumerate(names):
            if progress:
                progress(f"{name}: synthesizing {collective} on {topology.name} ({time.perf_counter() - t0:.1f} s)")
            try:
                with operations_budget(topology.num_ranks):
                    results.append(BY_NAME[name].load()(request))
            except SynthesisError as e:
                if strategy != "auto":
                    raise
                skipped.append(f"{name} ({e})")
                continue
            last = results[-1]
            if size is None and last.algbw >= request.bound.algbw * (1 - 1e-9) and \
                    (dialect is None or not check_dialect_limits(last.algorithm, dialect)):
                if not proven(last):
                    results.pop()
                    continue
                untried = names[i + 1:]
                break
        fits = ({id(r): not check_dialect_limits(r.algorithm, dialect) for r in results}
                if len(results) > 1 and dialect is not None else {})
        # with a size, auto ranks by the simulated time of a call of that size (latency,
        # pipelining and contention included); without one, by steady-state bandwidth
        predicted = ({id(r): predict_time(r.algorithm, topology, size, routes=r.routes) for r in results}
                     if strategy == "auto" and size is not None and len(results) > 1 else {})
        ranked = sorted(results, key=lambda r: (fits.get(id(r), True), -predicted.get(id(r), 0.0), r.algbw),
                        reverse=True)
        best = next((r for r in ranked if id(r) in verified or proven(r)), None)
        if best is None:
            raise SynthesisError(f"no strategy can build {collective} on {topology.name}: " + "; ".join(skipped))
        results = [r for r in results if id(r) not in rejected]
    best.bound_exact, best.bound_basis = request.bound.exact, request.bound.basis
    if not best.bound_exact and best.algbw >= request.bound.algbw * (1 - 1e-9) and \
            getattr(request.bound, "cut_links", None) is not None:
        best.bound_exact, best.bound_basis = True, request.bound.basis + ", reached by this algorithm"
    best.synth_time = time.perf_counter() - t0
    if strategy == "auto":
        by_time = bool(predicted)
        why = ("the fastest simulated" if by_time else
               "it reaches the bound" + (f", so {', '.join(untried)} were not tried" if untried else "")
               if best.algbw >= request.bound.algbw * (1 - 1e-9) else "the fastest")
        why += "" if fits.get(id(best), True) else f" (none fits the {dialect} limits)"
        best.notes.append(f"auto chose {best.strategy} ({why}) among " + ", ".join(
            (f"{r.strategy} {predicted[id(r)] * 1e6:.1f}" if by_time else f"{r.strategy} {r.algbw / 1e9:.1f}")
            + ("" if fits.get(id(r), True) else f" (over the {dialect} limits)")
            for r in results) + (f" us simulated for {size} bytes" if by_time else " GB/s")
            + ("; skipped " + "; ".join(skipped) if skipped else ""))
        best.strategy = f"auto:{best.strategy}"
    return best
