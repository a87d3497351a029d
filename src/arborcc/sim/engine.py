"""The event-driven core: thread blocks execute their steps in order, transfers share
links max-min fairly, and the clock jumps from event to event.

Model (``docs/simulator.md`` has the full description):

* The algorithm runs once per *iteration*: every chunk is cut into slices of at most
  the protocol's slice size and the whole program runs once per slice, each thread
  block starting its next iteration as soon as it finished the previous one (MSCCL's
  ``gridOffset`` loop) - that is what pipelines large buffers. When chunks are smaller
  than a slice, a step moving ``count`` chunks is split into transfers of at most one
  slice (MSCCL's ``maxAllowedCount``).
* A step waits for its dependency (that step of the same iteration), then for the
  data it receives (the matching transfer's arrival), then reduces or copies for
  ``bytes / bandwidth`` seconds, then sends: its transfer needs a free FIFO slot on the
  connection (the receiver frees one by receiving) and is a *flow* over the route's
  links. The step ends when the flow has drained; the data arrives at the receiver
  after the route's latency plus the protocol's per-hop latency.
* A flow's rate: connections whose links can never be oversubscribed (the
  uncontended rates of all connections crossing each link fit its capacity) run at
  that fixed rate without any bookkeeping; the others share their links max-min
  fairly (:mod:`arborcc.sim.fairshare`), recomputed whenever one of them starts or ends,
  each still capped at its uncontended rate: a flow that shares one link is bound by the
  slowest link of its route too (and the thread block's cap).

The event loop runs in compiled code (``arborcc.sim.native.run_events``,
sim/csrc/engine.cpp) over the program flattened once.

For many iterations the run can stop early: short runs measure the steady period and
the remaining iterations add one period each (:func:`run` with ``window``);
``docs/simulator.md`` shows how close this comes to simulating every iteration. Beyond
``whole_up_to`` iterations the work is bounded (:data:`MAX_PROBED_STEPS`) whether or
not the period estimates settle.
"""

from __future__ import annotations

import copy
import hashlib
import math
import pickle
from dataclasses import dataclass, field

from arborcc.collector import collector_paused
from arborcc.errors import VerificationError
from arborcc.memo import BoundedCache
import arborcc.sim.native as native
from arborcc.sim.program import CompiledAlgorithm



#: the largest share of the total time by which two successive period estimates may
#: disagree over the iterations left to extrapolate
EXTRAPOLATION_TOLERANCE = 1e-3
#: the last two of three or more period estimates further apart than this (relative)
#: give up on extrapolating
UNSTEADY = 0.05
#: period estimates this close (relative) count as equal: a run whose last three were not
#: is remembered as unsettled (:func:`run`)
EXACTLY = 1e-9
#: a program whose period estimates did not settle at N iterations is simulated whole,
#: without probes, at up to this many times N iterations of other slice sizes
UNSETTLED_REACH = 16
#: beyond its ``whole_up_to`` iterations a call is never simulated whole: its probes stop
#: at the longest run of at most this many steps x iterations (but at least three period
#: estimates: 16 iterations with probes of 2, 4, 8, 16), and the period is extrapolated
#: from them whether or not the estimates settled. A contended run costs about 2 us per
#: step x iteration on a slow 2-core machine (DGX-1V trees all-reduce), so the probes,
#: about twice the longest, stay well under a second
MAX_PROBED_STEPS = 1 << 16
#: runs simulated so far (iteration count -> result) per program object, by everything
#: else a run depends on; kept across calls (a sweep over sizes asks for the same probes)
_RUNS = BoundedCache("sim.engine.runs", 64, purpose="simulated runs by program and setup, per iteration count")
#: N per program object, by everything a run depends on but its slice and iteration
#: count: the program's period estimates did not settle when probed for N iterations
_UNSETTLED = BoundedCache("sim.engine.unsettled", 64, purpose="iterations at which a program's period did not settle")
#: one run's result by the content of the program (:func:`content_key`) and everything
#: else it depends on: equal programs compiled from different objects (a copy of an
#: algorithm timed again) simulate once. Only what a run computes is shared: which runs a
#: call asks for stays decided per program object (``_RUNS``, ``_UNSETTLED``), so every
#: call returns what it returned without this table
_SIMULATED = BoundedCache("sim.engine.simulated", 256, purpose="simulated runs by program content, setup and iterations")


@dataclass
class RunSetup:
    """What one engine run needs besides the compiled algorithm.

    ``chunk_bytes``: payload bytes of one chunk (one instance); ``link_rate[l]``:
    payload bytes/s link ``l`` carries at full use (nominal x efficiency x protocol
    wire efficiency / instances); ``tb_cap``: the most one thread block sends per
    second; ``extra_latency``: seconds every transfer pays on top of its route's
    latency, which is scaled by ``latency_scale``.
    """

    chunk_bytes: float
    slice_bytes: float
    fifo_slices: int
    link_rate: list[float]
    tb_cap: float
    extra_latency: float
    latency_scale: float
    reduce_bandwidth: float
    copy_bandwidth: float


class Piece:
    """What one transfer-sized piece of one step did, kept when recording (critical
    path). ``cause`` says what it last waited for before it could work: ``"prev"``
    (its thread block's previous piece, ``ref``), ``"dep"`` (the piece ``ref`` of the
    step it depends on), ``"data"`` (the sending piece ``ref``), ``"fifo"`` (the
    receiving piece ``ref`` that freed a slot) or ``"start"``."""

    __slots__ = ("tb", "step", "iteration", "cause", "ref", "ready", "compute", "send", "end")

    def __init__(self, tb: int, step: int, iteration: int, cause: str, ref: int, ready: float):
        self.tb, self.step, self.iteration = tb, step, iteration
        self.cause, self.ref, self.ready = cause, ref, ready
        self.compute: tuple[float, float] | None = None
        self.send: tuple[float, float] | None = None
        self.end = ready


@dataclass
class EngineResult:
    """``makespan`` in seconds from the first step to the last; ``iterations`` the
    iterations the algorithm runs, ``simulated`` how many were simulated (the rest
    extrapolated at ``period`` seconds each); ``link_bytes`` payload bytes per link;
    ``uncertainty`` how far the extrapolated makespan may be off, relative (below)."""

    makespan: float
    iterations: int
    simulated: int
    period: float
    max_allowed_count: int
    slice_bytes: float
    link_bytes: list[float]
    flow_segments: list[tuple[int, float, float, float]] = field(default_factory=list)  #: (link, t0, t1, B/s)
    pieces: list[Piece] = field(default_factory=list)
    tb_finish: list[float] = field(default_factory=list)
    #: the spread of the last period estimates times the iterations extrapolated, as a
    #: share of the makespan (0 when every iteration was simulated)
    uncertainty: float = 0.0


def pipelining(chunk_bytes: float, slice_bytes: float) -> tuple[int, float, int]:
    """(iterations, bytes per chunk per iteration, chunks one transfer may carry)."""
    if chunk_bytes <= 0:
        return 1, 0.0, 71
    if chunk_bytes >= slice_bytes:
        iters = math.ceil(chunk_bytes / slice_bytes - 1e-9)
        return iters, chunk_bytes / iters, 1
    return 1, chunk_bytes, max(1, min(71, int(slice_bytes // chunk_bytes)))


def run(prog: CompiledAlgorithm, setup: RunSetup, window: int | None = 2,
        record: bool = False, whole_up_to: int | None = None) -> EngineResult:
    """Simulate ``prog`` (module doc).

    With ``window`` = K, runs of K, 2K, 4K, ... iterations are simulated instead of all
    N (and kept: the next size with the same slices asks for the same ones): two runs of
    ``a`` and ``b`` iterations differ by ``b - a`` steady periods (the first iterations'
    ramp-up and the last ones' drain are the same in both), so each new run gives a
    period estimate, and once three consecutive estimates agree closely enough that the
    remaining iterations cannot move the total by more than
    :data:`EXTRAPOLATION_TOLERANCE`, the makespan is ``T(b) + (N - b) x period``. Two
    equal estimates are not enough: routed all-gather trees on DGX-1P GPUs 0,1,4,6 take
    123.36 us per iteration from the 2nd to the 8th and 124.83 from the 32nd on (as two,
    1 GiB was extrapolated 1.1% short). Nor are three: the same 123.36 us from the 2nd to
    the 32nd iteration on DGX-1V GPUs 0,2,3,4, then 124.83. No estimate below the period
    floor (:func:`period_floor`, what the busiest link needs per iteration) counts as
    settled: a link that carries more than it can per period is still filling its
    backlog, and a long call runs at its pace. When the next run would cost more than simulating
    everything, or the last two estimates are far apart (:data:`UNSTEADY`),
    everything is simulated. When that happens after three estimates that are not all
    equal, the program's next calls with other slices (the next sizes of a sweep) up to
    :data:`UNSETTLED_REACH` times as many iterations are simulated whole at once: their
    probes would not settle either, and would cost up to as much as the whole run.
    ``None`` (or ``record``, which keeps every flow's rate periods and every piece of
    work for the timeline and the critical path) simulates every iteration.

    ``whole_up_to`` bounds the work: a call of more iterations than that and than the
    longest probe (:func:`probe_limit`) is never simulated whole - its probes stop at the
    longest one and the makespan is extrapolated at the largest of the last three
    estimates (an upper estimate: a prediction that does not favour a candidate whose
    period could not be pinned down) or the period floor, whichever is larger, with their
    spread over the iterations left as its ``uncertainty``. ``None``: no bound.
    """
    iters, tile, m = pipelining(setup.chunk_bytes, setup.slice_bytes)
    if record:
        return _run(prog, setup, iters, tile, m, True)
    family = _family(prog, setup, m)
    done = _runs_of(prog, setup, tile, family)

    def simulated(k: int) -> EngineResult:
        if k not in done:
            done[k] = _run_by_content(prog, setup, k, tile, m, family)
        return copy.copy(done[k])

    if window is None or iters <= 4 * window or iters in done:
        return simulated(iters)
    longest = probe_limit(prog, window)
    bounded = whole_up_to is not None and iters > max(whole_up_to, longest)
    unsettled = _UNSETTLED.get_for(prog, family)
    if not bounded and unsettled is not None and iters <= UNSETTLED_REACH * unsettled:
        return simulated(iters)
    probes = [simulated(window)]
    spent, estimates = window, []
    floor = period_floor(prog, setup, tile)

    def whole() -> EngineResult:
        """Every iteration simulated, the estimates so far remembered if they did not
        settle; beyond the bound, the longest probe extrapolated at the largest estimate."""
        if bounded:
            recent = estimates[-3:]
            return _extrapolate(probes[-1], max(*recent, floor), iters, max(recent) - min(recent))
        if len(estimates) >= 3 and max(estimates[-3:]) - min(estimates[-3:]) > EXACTLY * estimates[-1]:
            _UNSETTLED.put_for(prog, iters, family)
        return simulated(iters)

    while True:
        length = 2 * probes[-1].simulated
        if bounded and length > longest:
            return whole()
        if not bounded and spent + length >= iters and length not in done:  # probing would cost more
            return whole()
        probes.append(simulated(length))
        spent += length
        a, b = probes[-2], probes[-1]
        estimates.append(max(0.0, (b.makespan - a.makespan) / (b.simulated - a.simulated)))
        if len(estimates) >= 3:
            q = estimates[-1]
            recent = estimates[-3:]
            spread = max(recent) - min(recent)
            total = b.makespan + (iters - b.simulated) * q
            if q >= floor * (1 - EXACTLY) and spread * (iters - b.simulated) <= EXTRAPOLATION_TOLERANCE * total:
                return _extrapolate(b, q, iters, spread)
            if abs(q - estimates[-2]) > UNSTEADY * q and not bounded:  # far from periodic
                return whole()
        if length >= iters:
            return whole()


def period_floor(prog: CompiledAlgorithm, setup: RunSetup, tile: float) -> float:
    """The least time (seconds) one iteration adds to a long call: the bytes of one
    iteration on the busiest link at its rate. Every iteration's bytes cross their links
    at most at the links' rates, so the steady period is never shorter."""
    return max((b / rate for b, rate in zip(_link_bytes(prog, len(setup.link_rate), tile, 1), setup.link_rate)
                if b and rate > 0), default=0.0)


def probe_limit(prog: CompiledAlgorithm, window: int) -> int:
    """The longest probe (iterations) of a bounded run (:func:`run`): ``window`` doubled
    while it stays within :data:`MAX_PROBED_STEPS` steps x iterations, and at least
    three times (three period estimates)."""
    most = max(8 * window, MAX_PROBED_STEPS // max(1, prog.num_steps))
    longest = window
    while 2 * longest <= most:
        longest *= 2
    return longest


def _family(prog: CompiledAlgorithm, setup: RunSetup, m: int) -> tuple:
    """Everything a run depends on but the slice size and the iteration count."""
    return (id(prog), m, setup.fifo_slices, tuple(setup.link_rate), setup.tb_cap, setup.extra_latency,
            setup.latency_scale, setup.reduce_bandwidth, setup.copy_bandwidth)


def _runs_of(prog: CompiledAlgorithm, setup: RunSetup, tile: float, family: tuple) -> dict[int, EngineResult]:
    """The runs already simulated with everything but the iteration count equal (a sweep
    over sizes with the same slices asks for the same probes again)."""
    key = (tile, *family)
    done = _RUNS.get_for(prog, key)
    if done is None:
        done = {}
        _RUNS.put_for(prog, done, key)
    return done


def content_key(prog: CompiledAlgorithm) -> bytes:
    """A digest of everything in ``prog`` a run reads (thread blocks, steps, connections
    and their links, latencies and chunks): programs with equal digests simulate alike.
    Computed once per program (kept on it)."""
    kept = prog.kept.get(("content",))
    if kept is None:
        fields = (prog.tb_rank, prog.tb_id, prog.tb_flags, prog.tb_counts, prog.tb_deps, prog.tb_send,
                  prog.tb_recv, prog.conn_keys, prog.conn_links, prog.conn_latency, prog.conn_chunks,
                  len(prog.link_keys))
        kept = prog.kept[("content",)] = hashlib.blake2b(pickle.dumps(fields, protocol=5), digest_size=32).digest()
    return kept


def _run_by_content(prog: CompiledAlgorithm, setup: RunSetup, iters: int, tile: float, m: int,
                    family: tuple) -> EngineResult:
    """:func:`_run` (not recording), or the result of the same run of an equal program
    (:data:`_SIMULATED`): a run depends on nothing else, so the two are the same."""
    key = (content_key(prog), iters, tile, *family[1:])
    hit = _SIMULATED.get(key)
    if hit is None:
        hit = _run(prog, setup, iters, tile, m, False)
        _SIMULATED.put(key, hit)
    return hit


def forget_runs() -> None:
    """Drop the runs kept for reuse (:func:`run`): the next simulation starts cold, as a
    benchmark timing the simulator needs."""
    _RUNS.clear()
    _UNSETTLED.clear()
    _SIMULATED.clear()


def _extrapolate(run: EngineResult, period: float, iters: int, spread: float) -> EngineResult:
    """``run`` (of fewer iterations) stretched to ``iters`` at ``period`` per iteration;
    ``spread``: how far apart the last period estimates were (seconds)."""
    run.link_bytes = [x * iters / run.simulated for x in run.link_bytes]
    run.makespan += (iters - run.simulated) * period
    run.period = period
    run.iterations = iters
    run.uncertainty = spread * (iters - run.simulated) / run.makespan if run.makespan > 0 else 0.0
    return run


def _run(prog: CompiledAlgorithm, setup: RunSetup, iters: int, tile: float, m: int,
         record: bool) -> EngineResult:
    """The event-driven run (module doc) of ``iters`` iterations, ``tile`` bytes per
    chunk and iteration, at most ``m`` chunks per transfer, by the compiled event loop
    (``arborcc.sim.native.run_events``, sim/csrc/engine.cpp)."""
    link_rate = setup.link_rate
    free_rate, shared_links = _rates(prog, link_rate, setup.tb_cap)
    latency = [lat * setup.latency_scale + setup.extra_latency for lat in prog.conn_latency]
    depth = max(1, setup.fifo_slices)
    inv_red = 1.0 / setup.reduce_bandwidth if setup.reduce_bandwidth < math.inf else 0.0
    inv_cpy = 1.0 / setup.copy_bandwidth if setup.copy_bandwidth < math.inf else 0.0
    flat = prog.kept.get(("engine",))
    if flat is None:
        flat = prog.kept[("engine",)] = native.EngineProgram(prog.tb_flags, prog.tb_counts, prog.tb_deps, prog.tb_send,
                                                              prog.tb_recv, len(prog.conn_keys))
    finish, stuck, rate_log, records = native.run_events(flat, iters, tile, m, depth, inv_red, inv_cpy, latency,
                                                         free_rate, shared_links, link_rate, record)
    if stuck is not None:
        t, step, iteration = stuck
        raise VerificationError(
            f"{prog.algorithm.name}: the simulation cannot finish - rank {prog.tb_rank[t]} thread block "
            f"{prog.tb_id[t]} waits forever at step {step} of iteration {iteration} (deadlock)")
    segments = []
    pieces: list[Piece] = []
    if record:
        send_conn = prog.tb_send
        with collector_paused():  # many objects, no cycles: the collector's passes would be wasted
            for key, a, b, rate in rate_log:
                for l in prog.conn_links[send_conn[key]]:
                    segments.append((l, a, b, rate))
            for tb, step, iteration, cause, ref, ready, compute, send, end in records:
                piece = Piece(tb, step, iteration, cause, ref, ready)
                piece.compute, piece.send, piece.end = compute, send, end
                pieces.append(piece)
    return EngineResult(max(finish, default=0.0), iters, iters, 0.0, m, tile,
                        _link_bytes(prog, len(link_rate), tile, iters), segments, pieces, finish)


def _rates(prog: CompiledAlgorithm, link_rate: list[float],
           cap: float) -> tuple[list[float], list[tuple[int, ...] | None]]:
    """Per connection its uncontended rate (the least of its links' rates and the
    thread block's cap) and the links it may have to share - those whose connections'
    uncontended rates add up to more than the link carries - or None: a fixed rate
    where no link can be oversubscribed, the rest share them max-min fairly. Kept on
    ``prog`` per rates and cap (every size of a sweep asks for the same)."""
    key = ("rates", tuple(link_rate), cap)
    kept = prog.kept.get(key)
    if kept is not None:
        return kept
    free_rate = [min([cap] + [link_rate[l] for l in links]) for links in prog.conn_links]
    demand = [0.0] * len(link_rate)
    for c, links in enumerate(prog.conn_links):
        for l in links:
            demand[l] += free_rate[c]
    shared_links: list[tuple[int, ...] | None] = []
    for links in prog.conn_links:
        tight = tuple(l for l in links if demand[l] > link_rate[l] * (1 + 1e-9))
        shared_links.append(tight or None)
    if sum(1 for k in prog.kept if k[0] == "rates") >= 16:  # a bounded memory: drop the oldest
        del prog.kept[next(k for k in prog.kept if k[0] == "rates")]
    prog.kept[key] = (free_rate, shared_links)
    return free_rate, shared_links


def _link_bytes(prog: CompiledAlgorithm, num_links: int, tile: float, iters: int) -> list[float]:
    """Payload bytes every link carries over ``iters`` iterations of ``tile`` bytes per chunk."""
    out = [0.0] * num_links
    for c, links in enumerate(prog.conn_links):
        for l in links:
            out[l] += prog.conn_chunks[c] * tile * iters
    return out
