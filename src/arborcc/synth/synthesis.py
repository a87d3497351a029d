"""``synthesize``: the entry point of the synthesis stage.

Checks the request once (collective, strategy, ranks, root, connectivity), computes the
collective's bound once, runs the strategy asked for - or, with ``auto``, the
strategies of the registry (:mod:`arborcc.synth.registry`) that build the collective -
keeps the fastest (preferring algorithms within the target dialect's runtime limits),
and verifies the one it returns: every algorithm arborcc hands out is proved first,
and claims exactly the kinds of call (in-place, out-of-place;
:mod:`arborcc.ir.aliasing`) it was verified in.

Fastest means the least simulated time of a call of the given ``size`` - without one,
of :data:`RANKING_SIZE` bytes - of the algorithm *as written*: on the routes its file
gets (MSCCL XML names no route; the runtime takes each pair's own route) and with
the fastest protocol (LL, LL128, Simple: every candidate is timed with each, pruned as
:mod:`arborcc.sim.protocol_choice` says, and its file is written with the fastest), the
time ``arborcc simulate FILE`` prints, which ``result.time`` reports. Where the strategy's
own routes (``result.routes``: relays the file cannot express) would be faster, a note
says what the file loses. The steady-state ``algbw`` is a property of the schedule,
not a claim of speed: the time ranking can overturn it (2 x 8 A100 all-reduce:
blueconnect's 586 us beats composed's 969 us at 64 MiB, both within 1% of the bound).

``auto`` runs every candidate up to :data:`arborcc.synth.registry.SIMULATED_RANKS`
ranks. Above, where simulating every candidate takes longer than synthesis by far, it
is a cascade: on a job spanning several hosts the strategies marked ``clusters_first``
go first, then the others in registry order, and it stops at the first algorithm that
reaches the bound (steady-state model) within the dialect's limits; nothing is
simulated there. A strategy
that cannot apply (or whose solver hits its time limit) is skipped with its reason.
Its notes say which strategy it used and why, among what, and what it skipped.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable, Sequence

from arborcc.collector import collector_paused
from arborcc.errors import ProgramError, SynthesisError, VerificationError
from arborcc.ir.limits import check_dialect_limits, remembering_limits
from arborcc.ir.model import Algorithm, Protocol
from arborcc.lang.program import own_program_budget
from arborcc.sim.simulate import predict_time
from arborcc.synth.bounds import collective_bound
from arborcc.synth.flowgraph import check_strongly_connected, flow_graph
from arborcc.sizes import format_size
from arborcc.synth.registry import BY_NAME, SIMULATED_RANKS, STRATEGIES, strategy_names, synthesizable_collectives
from arborcc.synth.result import RANKING_SIZE, SynthesisRequest, SynthesisResult
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



def _ranks_by_time(strategy: str, num_ranks: int) -> bool:
    """Whether ``auto`` runs every candidate and ranks them by simulated time: up to
    :data:`arborcc.synth.registry.SIMULATED_RANKS` ranks (128 GPUs: every collective of
    16 x 8 A100 in 0.4-9.4 s of CPU time, ``benchmarks/synthesis/cluster_scale.py``); above, where one
    simulation can take minutes, the cascade stops at the first algorithm that reaches
    the bound in the steady-state model (module doc)."""
    return strategy == "auto" and num_ranks <= SIMULATED_RANKS


def _fastest_protocol(algo: Algorithm, topology: Topology, size: int, protocols: Sequence[str] | None,
                      least_seconds_per_byte: float | None = None,
                      beat: float | None = None) -> tuple[float, Protocol] | None:
    """The least simulated time of a call of ``size`` bytes of ``algo`` as written and the
    protocol it takes, among ``protocols`` (None: every protocol both MSCCL dialects run,
    LL, LL128 and Simple), those whose link loads alone take longer than the best, or
    than ``beat``, not simulated (:func:`arborcc.sim.protocol_choice.protocol_sweep`).
    None when no protocol is faster than ``beat``, by its link loads or simulated."""
    from arborcc.sim.protocol_choice import BY_BANDWIDTH, protocol_sweep

    [fastest] = protocol_sweep(algo, topology, [size], least_seconds_per_byte=least_seconds_per_byte,
                               protocols=protocols or BY_BANDWIDTH, beat=beat)
    return None if fastest is None else (fastest.time, Protocol(fastest.protocol))


def _with_protocol(result: SynthesisResult, protocol: Protocol) -> None:
    """Make ``result``'s algorithm declare ``protocol`` (its file is written with it)."""
    if result.algorithm.protocol is not protocol:
        result.algorithm = replace(result.algorithm, protocol=protocol)


def _settled(result: SynthesisResult, topology: Topology, size: int, protocols: Sequence[str] | None,
             least_seconds_per_byte: float | None = None,
             beat: float | None = None) -> tuple[float, Protocol] | None:
    """Keep the fastest of ``result``'s variants (:attr:`SynthesisResult.variants`): each
    simulated as written at ``size`` bytes with its fastest protocol, unless it cannot beat
    ``beat`` or a variant timed before (``beat`` of :func:`_fastest_protocol`); a note
    gives the times. Returns the kept one's time and protocol, or None, the variants left
    as they are, where none can beat ``beat``."""
    timed: list[tuple[float, Protocol, str]] = []
    for label, algorithm in result.variants.items():
        to_beat = min([t for t, _, _ in timed] + ([beat] if beat is not None else []), default=None)
        fastest = _fastest_protocol(algorithm, topology, size, protocols, least_seconds_per_byte, to_beat)
        if fastest is not None:
            timed.append((*fastest, label))
    if not timed:
        return None
    seconds, protocol, label = min(timed, key=lambda t: t[0])
    simulated = {other: t for t, _, other in timed}
    others = [f"{other} {simulated[other] * 1e6:.1f} us" if other in simulated else
              f"{other} slower with every protocol, by its link loads or simulated"
              for other in result.variants if other != label]
    result.notes.append(f"written as {label}, the fastest of its {len(result.variants)} variants at {size} bytes: "
                        f"{seconds * 1e6:.1f} us ({', '.join(others)})")
    result.algorithm, result.variant, result.variants = result.variants[label], label, {}
    result.chunks = result.algorithm.chunks_per_loop
    return seconds, protocol


def _simulated_times(results: list[SynthesisResult], fits: dict, topology: Topology, size: int,
                     protocols: Sequence[str] | None,
                     progress: Callable[[str], None] | None) -> dict[int, float | None]:
    """id(result) -> the simulated time of a call of ``size`` bytes as written with the
    fastest protocol, which the candidate's algorithm then declares, for each candidate
    that can still win. Candidates go in the order of the least time their link loads
    allow (``attainable_algbw`` of the written routes, at the fidelity profile's link
    efficiencies: no simulation beats it, whatever the protocol), those within the
    dialect's limits (``fits``) first. A candidate cannot win and is not simulated
    (``inf``) when a simulated one is preferred whatever the times (it fits the limits
    and this one does not) or is as preferred and its time is already below this one's
    least time. One the simulator cannot compile (steps that do not pair up) gets None,
    for the verifier to reject with its reason."""
    from arborcc.sim.protocol_choice import link_load_seconds_per_byte

    per_byte = {id(r): link_load_seconds_per_byte(r.algorithm, topology) or 0.0 for r in results}
    least = {key: size * seconds for key, seconds in per_byte.items()}
    times: dict[int, float] = {}
    for r in sorted(results, key=lambda r: (not fits.get(id(r), True), least[id(r)])):
        fit = fits.get(id(r), True)
        if any(times[id(q)] is not None and (fits.get(id(q), True) > fit or times[id(q)] <= least[id(r)])
               for q in results if id(q) in times and fits.get(id(q), True) >= fit):
            times[id(r)] = float("inf")
            continue
        if progress:
            progress(f"simulating the {r.strategy} algorithm at {format_size(size)}")
        beat = min((times[id(q)] for q in results if times.get(id(q)) is not None), default=None)
        try:
            fastest = (_settled(r, topology, size, protocols, per_byte[id(r)], beat) if r.variants else
                       _fastest_protocol(r.algorithm, topology, size, protocols, per_byte[id(r)], beat))
        except VerificationError:  # its connections do not pair up: not a candidate
            times[id(r)] = None
            continue
        if fastest is None:  # no protocol beats a simulated candidate's time, by its link loads or simulated
            times[id(r)] = float("inf")
            continue
        times[id(r)], protocol = fastest
        _with_protocol(r, protocol)
    return times


#: the planned time (the strategy's own routes) is reported where it beats the written
#: file's by more than this fraction
PLANNED_MARGIN = 0.01


def _relays(routes: dict, topology: Topology) -> bool:
    """Whether some of a strategy's ``routes`` ((src rank, dst rank, channel) -> devices)
    differ from the route a file's connection takes (:meth:`Topology.route`)."""
    return any(tuple(path) != topology.route(topology.ranks[a], topology.ranks[b]).path
               for (a, b, _), path in routes.items())


def _time_as_written(result: SynthesisResult, topology: Topology, size: int, size_is_default: bool,
                     known: float | None, dialect: str | None, protocols: Sequence[str] | None) -> None:
    """Set ``result.time`` to the simulated time of a call of ``size`` bytes of the
    algorithm as its file runs - on the routes the target takes (MSCCL XML names none:
    the runtime takes each pair's default route, :mod:`arborcc.topology.routing`), with
    its protocol, the number ``arborcc simulate FILE`` prints - and, where the strategy's
    own routes (relays over PCIe or a host the file cannot express) would be faster, the
    planned time and a note of what the file loses. ``known``: the written time already
    simulated (with the fastest protocol, which the algorithm declares); otherwise the
    fastest protocol is found here and, where it is not the one the algorithm was
    verified with, the algorithm is verified again with it (for ``dialect``; should that
    fail, it keeps its protocol). Above :data:`arborcc.synth.registry.SIMULATED_RANKS`
    ranks, where one simulation can take minutes, nothing is simulated: a note says so."""
    result.size, result.size_is_default = size, size_is_default
    if topology.num_ranks > SIMULATED_RANKS:
        result.notes.append(f"not simulated: above {SIMULATED_RANKS} ranks simulating an algorithm can take "
                            f"minutes (arborcc simulate FILE does it)")
        return
    finite = known is not None and known != float("inf")  # a candidate left unsimulated is simulated now
    if finite:
        result.time = known
    else:
        # a protocol whose link loads alone take longer than the fastest simulated is not
        # simulated: it cannot be the fastest (LL at 64 MiB took 2 s of a trees candidate's 2.5 s)
        result.time, protocol = _fastest_protocol(result.algorithm, topology, size, protocols)
        if protocol is not result.algorithm.protocol:
            verified_as, report = result.algorithm, result.report
            _with_protocol(result, protocol)
            try:
                _verify(result, dialect)
            except VerificationError as e:
                result.algorithm, result.report = verified_as, report
                result.time = predict_time(result.algorithm, topology, size)
                result.notes.append(f"written with {verified_as.protocol.value}: with {protocol.value}, faster in "
                                    f"simulation, it fails verification ({e})")
    if _relays(result.routes, topology):
        planned = predict_time(result.algorithm, topology, size, routes=result.routes)
        if planned < result.time * (1 - PLANNED_MARGIN):
            result.planned_time = planned
            result.notes.append(f"planned {planned * 1e6:.1f} us at {format_size(size)} with relays the file "
                                f"cannot express (MSCCL XML names no route: the runtime takes each pair's own "
                                f"route, its direct link where there is one); as written {result.time * 1e6:.1f} us")


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
#: benchmarks/synthesis/cluster_scale.py)
OTHER_MODE_STEP_LIMIT = 200_000


def _within_limits(result: SynthesisResult, dialect: str) -> bool:
    """Whether ``result``'s algorithm is within ``dialect``'s runtime limits: the verdict
    its lowering's version search reached (``result.limits``), else checked here once and
    kept on the result."""
    if result.limits is None or result.limits[0] != dialect:
        result.limits = (dialect, not check_dialect_limits(result.algorithm, dialect))
    return result.limits[1]


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


#: the program correct in both forms replaces the in-place one where it simulates within
#: this fraction below the in-place one's time, never above: the same time, what it costs
#: nothing means. One faster by more is another version of the schedule (the version
#: search kept other rounds), and ``compare``/``tune``, which simulate the in-place
#: program (untimed synthesis), would then report another number than ``synth``
SAME_TIME_MARGIN = 0.01


def _in_both_forms(best: SynthesisResult, request: SynthesisRequest, size: int, size_is_default: bool,
                   dialect: str | None, protocols: Sequence[str] | None) -> SynthesisResult:
    """``best``, or - where ``best`` is proven in place only - its strategy lowered out of
    place (:func:`arborcc.synth.lower_emit.out_of_place_lowering`) when that one program
    is proven in both call forms, within the dialect's limits where ``best`` is, and
    simulates as written with ``best``'s protocol (one simulation) no slower and at most
    :data:`SAME_TIME_MARGIN` faster: one file for both forms where it costs nothing.
    Otherwise ``best``, with a note of why its out-of-place form is not the one written."""
    from arborcc.ir.aliasing import Mode
    from arborcc.synth.lower_emit import out_of_place_lowering

    if "out-of-place" in best.report.modes or best.time is None:
        return best
    topology = request.topology
    try:
        with out_of_place_lowering(), operations_budget(topology.num_ranks):
            other = BY_NAME[best.strategy].function(request)
        if other.variants:  # the variant ``best`` is written as
            other.algorithm, other.variant, other.variants = other.variants[best.variant], best.variant, {}
        _with_protocol(other, best.algorithm.protocol)  # timed once, with the protocol ``best`` is written with
        over_limits = dialect is not None and _within_limits(best, dialect) and not _within_limits(other, dialect)
        if not over_limits:  # (checked first: the limits cost far less than the proof)
            _verify(other, dialect)
    except (SynthesisError, VerificationError) as e:
        best.notes.append(f"claims in-place calls only: {best.strategy} has no out-of-place form here ({e})")
        return best
    if over_limits:
        best.notes.append(f"claims in-place calls only: the out-of-place form of {best.strategy} exceeds the "
                          f"{dialect} limits")
        return best
    if "in-place" not in other.report.modes or "out-of-place" not in other.report.modes:
        best.notes.append(f"claims in-place calls only: the out-of-place form of {best.strategy} is verified "
                          f"{other.report.modes_text} only (synth --outofplace writes it)")
        return best
    _time_as_written(other, topology, size, size_is_default, predict_time(other.algorithm, topology, size), dialect,
                     protocols)
    if other.time is None or not best.time * (1 - SAME_TIME_MARGIN) <= other.time <= best.time:
        # the time ``synth --outofplace`` reports: its file with its own fastest protocol
        fastest = None if other.time is None else _fastest_protocol(other.algorithm, topology, size, protocols)
        differs = "" if fastest is None else f" ({fastest[0] * 1e6:.1f} us)"
        best.notes.append(f"claims in-place calls only: the program correct in both forms simulates at another "
                          f"time{differs} (synth --outofplace writes it)")
        return best
    other.notes.append(f"one program for {' and '.join(m.label for m in Mode)} calls, as fast as the "
                       f"in-place-only one ({best.time * 1e6:.1f} us)")
    return other


def synthesize(topology: Topology, collective: str, strategy: str = "auto", root: int = 0,
               links: str = "all", progress: Callable[[str], None] | None = None,
               size: int | None = None, dialect: str | None = "executor", timed: bool = True,
               protocols: Sequence[str] | None = None, form: str | None = None) -> SynthesisResult:
    """Run one strategy (or, with ``auto``, every one that applies and keep the fastest).

    ``size``: the buffer size in bytes the algorithm is meant for, for strategies whose
    schedule depends on it (binary-trees: one tree below MXNet's threshold); ``None``
    means large, bandwidth-bound buffers. ``dialect``: the MSCCL runtime the algorithm
    is for; ``auto`` prefers candidates within its limits (steps per thread block,
    thread blocks per rank) over faster ones that are not, and ``result.report`` lists
    the returned algorithm's violations of them (``None``: no runtime limits).
    ``timed``: simulate the returned algorithm as written at ``size`` (or
    :data:`RANKING_SIZE`) into ``result.time`` (callers that simulate it themselves,
    over sizes, pass False); the algorithm is then written with the protocol of
    ``protocols`` (default: LL, LL128 and Simple, which both MSCCL dialects run) that
    makes that call the fastest.
    ``form``: the call the algorithm must be proven in, ``"in-place"`` or
    ``"out-of-place"`` (None: any; the algorithm claims every form the verifier proves;
    in place or None, one program for both forms where it costs nothing:
    :func:`_in_both_forms`).
    Out of place, the lowerings emit programs that read the input and leave the result
    in the output (:func:`arborcc.synth.lower_emit.out_of_place_lowering`); ``auto``
    skips candidates not proven in ``form``, saying why.
    """
    from contextlib import nullcontext

    from arborcc.synth.lower_emit import out_of_place_lowering

    if form not in (None, "in-place", "out-of-place"):
        raise SynthesisError(f"unknown call form {form!r} (known: in-place, out-of-place)")
    emission = out_of_place_lowering() if form == "out-of-place" else nullcontext()
    with collector_paused(), emission:  # trees, copies and steps: hundreds of thousands, all acyclic
        return _synthesize(topology, collective, strategy, root, links, progress, size, dialect, timed,
                           protocols, form)


def _synthesize(topology: Topology, collective: str, strategy: str, root: int, links: str,
                progress: Callable[[str], None] | None, size: int | None,
                dialect: str | None, timed: bool, protocols: Sequence[str] | None,
                form: str | None) -> SynthesisResult:
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
    # the cascade reads the lowering's verdict on the limits (_within_limits); the memos
    # keep the verifier from checking the limits and deadlock of that algorithm again
    with remembering_passes(), remembering_limits():
        names, skipped = _candidates(strategy, collective, topology.num_ranks, _spans_hosts(topology))
        t0 = time.perf_counter()
        check_strongly_connected(flow_graph(topology, links), collective)
        if progress:
            progress(f"bound: the best {collective} rate the links of {topology.name} allow")
        request = SynthesisRequest(topology, collective, collective_bound(topology, collective, root, links),
                                   root, links, size, dialect, variants_timed=topology.num_ranks <= SIMULATED_RANKS)
        results, untried, verified, rejected = [], [], set(), set()
        ranked_size = RANKING_SIZE if size is None else size

        def proven(r: SynthesisResult) -> bool:
            """Verify ``r``; with ``auto``, a strategy whose algorithm fails is skipped
            (with the verifier's reason) rather than failing the synthesis."""
            if progress:
                progress(f"verifying the {r.strategy} algorithm ({time.perf_counter() - t0:.1f} s)")
            try:
                if r.variants:  # not simulated among the candidates: its variants are timed now
                    _settled(r, topology, ranked_size, protocols)
                _verify(r, dialect)
            except VerificationError as e:
                if strategy != "auto":
                    raise
                skipped.append(f"{r.strategy} (its algorithm fails verification: {e})")
                rejected.add(id(r))
                return False
            if form is not None and form not in r.report.modes and strategy == "auto":
                skipped.append(f"{r.strategy} (verified {r.report.modes_text} only, not {form})")
                rejected.add(id(r))
                return False
            verified.add(id(r))
            return True

        by_time = _ranks_by_time(strategy, topology.num_ranks)
        for i, name in enumerate(names):
            if progress:
                progress(f"{name}: synthesizing {collective} on {topology.name} ({time.perf_counter() - t0:.1f} s)")
            try:
                try:
                    with operations_budget(topology.num_ranks):
                        results.append(BY_NAME[name].function(request))
                except ProgramError as e:  # its program is over a size limit: arborcc writes no file it would refuse
                    raise SynthesisError(f"{name}: its program is over arborcc's limits: {e}") from e
            except SynthesisError as e:
                if strategy != "auto":
                    raise
                skipped.append(f"{name} ({e})")
                continue
            last = results[-1]
            if not by_time and last.algbw >= request.bound.algbw * (1 - 1e-9) and \
                    (dialect is None or _within_limits(last, dialect)):
                if not proven(last):
                    results.pop()
                    continue
                untried = names[i + 1:]
                break
        fits = ({id(r): _within_limits(r, dialect) for r in results}
                if len(results) > 1 and dialect is not None else {})
        # ranked by the simulated time of a call of ``ranked_size`` bytes as the written
        # file runs (latency, pipelining and contention included); above
        # SIMULATED_RANKS, by the steady-state model (module doc)
        predicted = (_simulated_times(results, fits, topology, ranked_size, protocols, progress)
                     if by_time and len(results) > 1 else {})
        for r in results:  # malformed beyond simulating: the verifier says why
            if id(r) in predicted and predicted[id(r)] is None and proven(r):
                predicted[id(r)] = float("inf")
        results = [r for r in results if id(r) not in rejected]
        ranked = sorted(results, key=lambda r: (fits.get(id(r), True), -predicted.get(id(r), 0.0), r.algbw),
                        reverse=True)
        best = next((r for r in ranked if id(r) in verified or proven(r)), None)
        if best is None:
            raise SynthesisError(f"no strategy can build {collective} on {topology.name}: " + "; ".join(skipped))
        results = [r for r in results if id(r) not in rejected]
        if timed:
            _time_as_written(best, topology, ranked_size, size is None, predicted.get(id(best)), dialect,
                             protocols)
            if form != "out-of-place" and topology.num_ranks <= SIMULATED_RANKS:
                chosen, best = best, _in_both_forms(best, request, ranked_size, size is None, dialect, protocols)
                if best is not chosen:  # the notes list the written program's time
                    results = [best if r is chosen else r for r in results]
                    if id(chosen) in predicted:
                        predicted[id(best)] = best.time
                    if id(chosen) in fits:
                        fits[id(best)] = fits[id(chosen)]
    best.bound_exact, best.bound_basis = request.bound.exact, request.bound.basis
    if not best.bound_exact and best.algbw >= request.bound.algbw * (1 - 1e-9) and \
            getattr(request.bound, "cut_links", None) is not None:
        best.bound_exact, best.bound_basis = True, request.bound.basis + ", reached by this algorithm"
    best.synth_time = time.perf_counter() - t0
    if strategy == "auto":
        by_time = bool(predicted)
        at = f"{ranked_size} bytes" + (f" ({format_size(ranked_size)}: no size given, the default ranking size)"
                                       if size is None else "")
        why = ("the fastest simulated as written" if by_time else
               "it reaches the bound" + (f", so {', '.join(untried)} were not tried" if untried else "")
               if best.algbw >= request.bound.algbw * (1 - 1e-9) else "the fastest")
        why += "" if fits.get(id(best), True) else f" (none fits the {dialect} limits)"
        ranked_by = (f" us simulated for {at}" if by_time else
                     f" GB/s steady-state algbw (above {SIMULATED_RANKS} ranks simulating every candidate takes "
                     f"minutes)" if len(results) > 1 and topology.num_ranks > SIMULATED_RANKS else " GB/s")
        listed = [r for r in results if predicted.get(id(r), 0.0) != float("inf")]
        unsimulated = [r for r in results if predicted.get(id(r), 0.0) == float("inf")]
        over_limits = [r.strategy for r in unsimulated if not fits.get(id(r), True) and fits.get(id(best), True)]
        slower = [r.strategy for r in unsimulated if r.strategy not in over_limits]
        best.notes.append(f"auto chose {best.strategy} ({why}) among " + ", ".join(
            (f"{r.strategy} {predicted[id(r)] * 1e6:.1f}" if by_time else f"{r.strategy} {r.algbw / 1e9:.1f}")
            + ("" if fits.get(id(r), True) else f" (over the {dialect} limits)")
            for r in listed) + ranked_by
            + ("; each with its fastest protocol: " + ", ".join(f"{r.strategy} {r.algorithm.protocol.value}"
                                                                  for r in listed) if by_time else "")
            + (f"; slower with every protocol, by their link loads or simulated: {', '.join(slower)}"
               if slower else "")
            + (f"; not simulated, over the {dialect} limits where others fit: {', '.join(over_limits)}"
               if over_limits else "")
            + ("; skipped " + "; ".join(skipped) if skipped else ""))
        best.strategy = f"auto:{best.strategy}"
    return best
