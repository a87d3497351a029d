"""Side by side: every strategy that applies and the NCCL baselines, simulated over a
range of sizes (``arborcc compare``, the demo's table and plot).

Rows, per size:

* each synthesis strategy that can build the collective (``synth.strategies``), its
  algorithm simulated as its written file runs: on each pair's own route (MSCCL XML
  names no route, so relays a strategy planned are not taken), the time ``arborcc
  simulate FILE`` gives. At each size it is the file ``arborcc synth --strategy S
  --size SIZE`` writes: a strategy whose file depends on the size
  (:meth:`arborcc.synth.registry.Strategy.depends_on_size`) is synthesized for every
  size and each distinct file simulated at the sizes it was built for (byte-identical
  files once, at all their sizes together); the others once, simulated at every size;
* ``nccl``: what NCCL runs for all-reduce, all-gather, reduce-scatter, broadcast and
  reduce (:mod:`arborcc.tune.nccl`: its rings, its tree for all-reduce across nodes, its
  protocol choice, NVLS all-reduce where the switch reduces), simulated;
* ``nccl-model``: NCCL's closed-form alpha-beta prediction for its rings or tree (the
  second, independent predictor).

With ``protocol="auto"`` every strategy runs with the fastest protocol for each size
(:func:`arborcc.sim.protocol_choice.protocol_sweep`, pruned as its module doc says).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator, Sequence

from arborcc.errors import SynthesisError
from arborcc.ir.model import Algorithm
from arborcc.sim.fidelity import Fidelity, fidelity_for
from arborcc.sim.protocol_choice import protocol_sweep
from arborcc.sim.protocols import protocol_name
from arborcc.topology.model import Topology
from arborcc.sizes import format_size

MODEL = "nccl-model"


@dataclass
class Candidate:
    """An algorithm to compare and how it was made."""

    name: str
    algorithm: Algorithm
    routes: dict = field(default_factory=dict)  #: the routes it runs on (none: each pair's own, as a file runs)
    note: str = ""
    #: the sizes it is the strategy's file for, ascending (None: every size; a strategy
    #: whose file depends on the size has one candidate per distinct file)
    sizes: tuple[int, ...] | None = None

    @property
    def built_for(self) -> int | None:
        """The least size its algorithm was synthesized for (None: it serves every size)."""
        return None if self.sizes is None else self.sizes[0]

    @property
    def key(self) -> str:
        """Its name among the candidates (:func:`candidate_key`)."""
        return candidate_key(self.name, self.built_for)


def candidate_key(name: str, built_for: int | None) -> str:
    """A candidate's name among the others: its strategy's, and where the strategy writes
    other files at other sizes, the least size its file was built for (``trees@1M``)."""
    return name if built_for is None else f"{name}@{format_size(built_for)}"


@dataclass
class Comparison:
    """Rows (see :meth:`SimResult.row`, plus ``strategy``) and what could not run."""

    topology: str
    ranks: int
    collective: str
    sizes: list[int]
    rows: list[dict]
    skipped: list[str]
    synth_seconds: float = 0.0
    sim_seconds: float = 0.0
    sim_cpu_seconds: float = 0.0  #: the simulations' processor time (the wall time on an idle machine)

    def names(self) -> list[str]:
        out: list[str] = []
        for r in self.rows:
            if r["strategy"] not in out:
                out.append(r["strategy"])
        return out

    def busbw(self, name: str) -> list[float]:
        """busbw (GB/s) of ``name`` at every size, in size order."""
        by_size = {r["size"]: r["busbw_gbps"] for r in self.rows if r["strategy"] == name}
        return [by_size.get(s, float("nan")) for s in self.sizes]

    def best(self, size: int) -> dict:
        """The fastest algorithm at ``size`` (not the closed-form ``nccl-model``)."""
        return min((r for r in self.rows if r["size"] == size and r["strategy"] != MODEL),
                   key=lambda r: r["time_us"])


def strategy_candidates(topology: Topology, collective: str, root: int = 0, strategies: Sequence[str] | None = None,
                        progress: Callable[[str], None] | None = None,
                        sizes: Sequence[int] | None = None) -> tuple[list[Candidate], list[str]]:
    """The algorithms of every strategy that builds ``collective`` on ``topology``
    (``strategies`` picks some) for ``sizes``; the rest with the reason they were left
    out (:func:`each_candidate`)."""
    skipped: list[str] = []
    return list(each_candidate(topology, collective, root, strategies, progress, skipped, sizes)), skipped


def each_candidate(topology: Topology, collective: str, root: int = 0, strategies: Sequence[str] | None = None,
                   progress: Callable[[str], None] | None = None,
                   skipped: list[str] | None = None, sizes: Sequence[int] | None = None) -> Iterator[Candidate]:
    """Each strategy's candidate in turn, synthesized when asked for (so a caller that
    simulates one and drops it holds one strategy's algorithms at a time); those left
    out, with the reason, are appended to ``skipped``. Without an explicit list,
    strategies are left out above the rank counts where their synthesis or their
    simulation explodes (:meth:`arborcc.synth.registry.Strategy.left_out`, the limits
    ``auto`` uses too). With ``sizes``, a strategy whose file depends on the size is
    synthesized for each (:func:`files_per_size`); without, every strategy once, for
    large buffers."""
    from arborcc.synth.registry import BY_NAME, STRATEGIES

    skipped = [] if skipped is None else skipped
    names = list(strategies) if strategies else [s.name for s in STRATEGIES if collective in s.collectives]
    for name in names:
        if name not in BY_NAME:
            raise SynthesisError(f"unknown strategy {name!r} (known: {', '.join(BY_NAME)})")
        entry = BY_NAME[name]
        limit = None if strategies else entry.left_out(collective, topology.num_ranks, simulated=True)
        if limit is not None:
            work = "synthesis" if entry.left_out(collective, topology.num_ranks) == limit else "simulation"
            skipped.append(f"{name}: left out above {limit} ranks, where its {work} takes too long "
                           f"(name it with --strategies to run it)")
            continue
        if sizes and entry.depends_on_size(collective):
            built = files_per_size(topology, collective, name, root, sizes, progress, skipped)
            while built:  # each dropped once the caller is done with it
                yield built.pop(0)
            continue
        if progress:
            progress(f"synthesizing {collective} with {name}")
        try:
            candidate = _candidate(topology, collective, name, root, None)
        except SynthesisError as e:
            skipped.append(f"{name}: {_reason(name, e)}")
            continue
        yield candidate
        del candidate  # resumed: the caller is done with it, not held through the next synthesis


def files_per_size(topology: Topology, collective: str, name: str, root: int, sizes: Sequence[int],
                   progress: Callable[[str], None] | None = None,
                   skipped: list[str] | None = None) -> list[Candidate]:
    """Strategy ``name``'s algorithm synthesized for each of ``sizes`` (the file ``arborcc
    synth --strategy NAME --size SIZE`` writes), one candidate per distinct file - keyed
    by its MSCCL XML, so byte-identical files are one candidate with all their sizes -
    in the order of the least size each serves; a single file for every size is one
    candidate for every size (``sizes`` None). A size it cannot be built for is
    appended to ``skipped`` with the reason (once for all, where none builds)."""
    from arborcc.synth.bounds import remembering_bounds
    from arborcc.synth.lower_memo import remembering_searches

    skipped = [] if skipped is None else skipped
    by_file: dict[bytes, Candidate] = {}
    failed: dict[int, str] = {}
    sizes = sorted(set(int(s) for s in sizes))
    # the bound and the versions the lowerings' searches find do not depend on the size:
    # each proven or searched once for all
    with remembering_bounds(), remembering_searches():
        for size in sizes:
            if progress:
                progress(f"synthesizing {collective} with {name} for {format_size(size)}")
            try:
                candidate = _candidate(topology, collective, name, root, size)
            except SynthesisError as e:
                failed[size] = _reason(name, e)
                continue
            key = _file_key(candidate.algorithm) or f"no file at {size}".encode()  # unwritable: its own candidate
            if key in by_file:
                by_file[key].sizes += (size,)
            else:
                by_file[key] = replace(candidate, sizes=(size,))
            del candidate
    if failed and not by_file and len(set(failed.values())) == 1:
        skipped.append(f"{name}: {next(iter(failed.values()))}")
    else:
        skipped += [f"{name} at {format_size(size)}: {why}" for size, why in failed.items()]
    built = list(by_file.values())
    if len(built) == 1 and not failed:
        built[0].sizes = None
    return built


def _candidate(topology: Topology, collective: str, name: str, root: int, size: int | None) -> Candidate:
    """Strategy ``name``'s algorithm for ``size`` (None: large buffers), unsimulated."""
    from arborcc.synth.synthesis import synthesize

    sized = {} if size is None else {"size": size}
    r = synthesize(topology, collective, name, root, timed=False, **sized)
    # simulated as its file runs: MSCCL XML cannot carry the strategy's planned relays
    return Candidate(name, r.algorithm, {}, "; ".join(r.notes[:1]))


def _reason(name: str, error: SynthesisError) -> str:
    """Why strategy ``name`` could not build: the error without its leading strategy name."""
    text = str(error)
    return text.split(": ", 1)[-1] if name in text else text


def _file_key(algorithm: Algorithm) -> bytes | None:
    """A digest of ``algorithm``'s MSCCL XML: equal for byte-identical files (None where
    it cannot be written, over a limit of the format)."""
    import hashlib

    from arborcc.errors import ArborccError
    from arborcc.ir.msccl_xml import write_msccl_xml

    try:
        return hashlib.sha256(write_msccl_xml(algorithm).encode()).digest()
    except ArborccError:
        return None


def nccl_time(topology: Topology, collective: str, size: int, root: int = 0,
              fidelity: Fidelity | None = None) -> float | None:
    """Seconds NCCL's call of ``size`` bytes takes in simulation (the ``nccl`` row of
    :func:`compare`: :class:`arborcc.tune.nccl.NcclBaseline`, its own choice of
    algorithm and protocol); None for a collective the baseline does not cover."""
    from arborcc.tune.nccl import COLLECTIVES as NCCL_COLLECTIVES, NcclBaseline

    if collective not in NCCL_COLLECTIVES:
        return None
    return NcclBaseline(topology, fidelity or fidelity_for(topology)).call(size, collective, root).result.time


#: simulated times this close (relative) are one time: the same program simulated twice,
#: or written out differently (a ring dealt over data lanes that a NIC paces as NCCL's),
#: may differ in the last bits of a sum, never by more than this
TIE = 1e-9


def against_nccl(time: float, nccl: float | None, size: int) -> str:
    """One line on how a simulated ``time`` compares with NCCL's at ``size`` bytes,
    saying so plainly when NCCL is faster (times within :data:`TIE` are equal)."""
    if nccl is None:
        return "NCCL not compared: the baseline does not cover this collective"
    if abs(time - nccl) <= TIE * nccl:
        return f"as fast as NCCL in simulation at {format_size(size)} (NCCL {nccl * 1e6:.1f} us)"
    if time > nccl:
        return (f"slower than NCCL in simulation at {format_size(size)}: {time * 1e6:.1f} us against NCCL's "
                f"{nccl * 1e6:.1f} us ({nccl / time:.2f}x)")
    return f"{nccl / time:.2f}x faster than NCCL in simulation at {format_size(size)} (NCCL {nccl * 1e6:.1f} us)"


def compare(topology: Topology, collective: str = "allreduce", sizes: Sequence[int] = (1 << 20,),
            protocol: str = "auto", root: int = 0, strategies: Sequence[str] | None = None,
            fidelity: Fidelity | None = None, baselines: bool = True,
            progress: Callable[[str], None] | None = None) -> Comparison:
    """Every candidate and the NCCL baselines at every size (module doc)."""
    from arborcc.tune.nccl import COLLECTIVES as NCCL_COLLECTIVES, NcclBaseline

    fidelity = fidelity or fidelity_for(topology)
    sizes = sorted(set(int(s) for s in sizes))
    skipped: list[str] = []
    rows: list[dict] = []
    synth_seconds = sim_seconds = sim_cpu_seconds = 0.0
    t0 = time.perf_counter()
    # each candidate simulated as soon as it is built, then dropped: one strategy's
    # algorithms held at a time; each at the sizes it is the strategy's file for
    for c in each_candidate(topology, collective, root, strategies, progress, skipped, sizes):
        t1, c1 = time.perf_counter(), time.process_time()
        synth_seconds += t1 - t0
        at = sizes if c.sizes is None else list(c.sizes)
        if progress:
            built = "" if c.built_for is None else f" (its file for {format_size(c.built_for)})"
            progress(f"simulating {c.name}{built} at {len(at)} size{'s' if len(at) > 1 else ''}")
        for r in protocol_sweep(c.algorithm, topology, at, protocol, fidelity, c.routes):
            rows.append({"strategy": c.name, **r.row()})
        del c
        t0 = time.perf_counter()
        sim_seconds += t0 - t1
        sim_cpu_seconds += time.process_time() - c1
    synth_seconds += time.perf_counter() - t0
    first = {}
    for r in rows:
        first.setdefault(r["strategy"], len(first))
    rows.sort(key=lambda r: (first[r["strategy"]], r["size"]))  # per strategy in size order, as one file gives
    t1, c1 = time.perf_counter(), time.process_time()
    if baselines and collective in NCCL_COLLECTIVES:
        if progress:
            progress("simulating the NCCL baseline")
        base = NcclBaseline(topology, fidelity)
        forced = None if protocol == "auto" else protocol_name(protocol)
        for s in sizes:
            rows.append({"strategy": "nccl", **base.call(s, collective, root, forced).row()})
        for s in sizes:
            rows.append({"strategy": MODEL, **base.model_row(s, collective, forced)})
    elif baselines:
        skipped.append(f"nccl: the NCCL baseline covers {', '.join(NCCL_COLLECTIVES)}, not {collective}")
    if not rows:
        raise SynthesisError(f"nothing to compare for {collective} on {topology.name}: " + "; ".join(skipped))
    sim_seconds += time.perf_counter() - t1
    sim_cpu_seconds += time.process_time() - c1
    return Comparison(topology.name, topology.num_ranks, collective, sizes, rows, skipped, synth_seconds,
                      sim_seconds, sim_cpu_seconds)


def comparison_table(cmp: Comparison) -> str:
    """busbw (GB/s) per size (rows) and strategy (columns); ``*`` marks the fastest."""
    names = cmp.names()
    width = max(9, *(len(n) + 1 for n in names))
    lines = [f"{cmp.collective} on {cmp.topology} ({cmp.ranks} GPUs): busbw GB/s, simulated; * = fastest "
             f"({MODEL}: NCCL's own alpha-beta prediction)",
             f"{'size':>8} " + "".join(f"{n:>{width}}" for n in names)]
    cells = {(r["strategy"], r["size"]): r for r in cmp.rows}
    for s in cmp.sizes:
        best = cmp.best(s)["strategy"]
        parts = []
        for n in names:
            r = cells.get((n, s))
            text = "-" if r is None else f"{r['busbw_gbps']:.2f}" + ("*" if n == best else " ")
            parts.append(f"{text:>{width}}")
        lines.append(f"{format_size(s):>8} " + "".join(parts))
    return "\n".join(lines)


def comparison_png(cmp: Comparison, path: str) -> None:
    """busbw against log2 size, one line per strategy (nccl-tests' plot), each with its
    own marker and line style; the file's suffix picks the format (:mod:`arborcc.plotting`)."""
    from arborcc.plotting import busbw_axis, new_figure, save_figure, series_style, size_axis

    fig = new_figure("--plot", (8, 4.8))
    ax = fig.add_subplot()
    values: list[float] = []
    for i, name in enumerate(cmp.names()):
        ys = cmp.busbw(name)
        values += ys
        ax.plot(cmp.sizes, ys, markersize=4, label=name, **series_style(i))
    size_axis(ax, cmp.sizes)
    busbw_axis(ax, values)
    ax.set_title(f"{cmp.collective} on {cmp.topology} ({cmp.ranks} GPUs), simulated")
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # no series (every row failed): no empty legend box
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)


def demo_comparison(topology: Topology, plot: str | None = None,
                    sizes: Sequence[int] = tuple(1 << k for k in range(10, 31, 2))) -> None:
    """``arborcc demo``'s last section: the comparison table for ``topology`` and, when
    ``plot`` names a PNG file (and matplotlib is installed), its plot."""
    from arborcc.errors import MissingDependencyError

    cmp = compare(topology, "allreduce", sizes)
    print(comparison_table(cmp))
    for note in cmp.skipped:
        print(f"  not compared: {note}")
    if plot is None:
        print("  plot: arborcc demo --plot FILE.png draws it (or arborcc compare --plot)")
        return
    try:
        comparison_png(cmp, plot)
    except MissingDependencyError as e:
        print(f"  plot skipped: {e}")
        return
    print(f"  plot: {plot}")
