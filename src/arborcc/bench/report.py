"""Benchmark output: the nccl-tests table (plus busbw as a fraction of the machine's copy
bandwidth, and of the busbw at which the call's compulsory memory traffic would move at
that bandwidth: :mod:`arborcc.bench.memory_bandwidth`), one JSON object, and a plot of busbw
against size for every back-end of the run."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from arborcc.bench.memory_bandwidth import CACHE_MULTIPLE, MODELLED, beyond_caches, busbw_bound
from arborcc.bench.protocol import Row, Spec

GB = 1e9


@dataclass(frozen=True)
class Machine:
    """What the report compares rows with: the copy bandwidth (bytes/s, None: not measured)
    and the last-level cache (bytes, None: unknown)."""

    membw: float | None = None
    cache: int | None = None


def memory_busbw(spec: Spec, row: Row, machine: Machine) -> float | None:
    """GB/s of busbw at which the row's compulsory traffic moves at the copy bandwidth; None
    unless the row ran, its buffers exceed the caches and the model covers the collective."""
    if (row.time_us is None or not machine.membw or spec.collective not in MODELLED
            or not beyond_caches(spec.collective, spec.ranks, row.size, row.inplace, machine.cache)):
        return None
    bound = busbw_bound(spec.collective, spec.ranks, row.size, machine.membw, row.inplace) / GB
    return bound if bound > 0 else None


def _percent(value: float | None, of: float | None) -> str:
    return f"{100 * value / of:5.1f}%" if value is not None and of else "     -"


def _half(spec: Spec, row: Row | None, machine: Machine) -> str:
    if row is None or row.time_us is None:
        return f"{'n/a':>10} " + " ".join(f"{'':>{w}}" for w in HALF_WIDTHS[1:])
    wrong = "N/A" if row.wrong is None else str(row.wrong)
    copy = _percent(row.busbw_gbps, machine.membw / GB if machine.membw else None)
    of_memory = _percent(row.busbw_gbps, memory_busbw(spec, row, machine))
    return (f"{row.time_us:10.1f} {_us(row.p99_us):>9} {_us(row.max_us):>9} {row.algbw_gbps:7.2f} "
            f"{row.busbw_gbps:7.2f} {wrong:>6} {copy:>6} {of_memory:>6}")


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


#: the columns of one half (out of place, in place) of a row: name, unit, width
HALF_COLUMNS = (("time", "(us)", 10), ("p99", "(us)", 9), ("max", "(us)", 9), ("algbw", "(GB/s)", 7),
                ("busbw", "(GB/s)", 7), ("#wrong", "", 6), ("%copy", "", 6), ("%mem", "", 6))
HALF_WIDTHS = tuple(w for _, _, w in HALF_COLUMNS)


def _machine_line(machine: Machine) -> str:
    if not machine.membw:
        return "#"
    cache = (f"buffers beyond {CACHE_MULTIPLE} x the {machine.cache / 2**20:g} MB last-level cache"
             if machine.cache else "no row: the last-level cache size is unknown")
    return (f"# memory-copy bandwidth: {machine.membw / GB:.1f} GB/s (read + written, one copy per rank at once); "
            f"%copy = busbw / that; %mem = busbw / the busbw at which the call's compulsory traffic moves at that "
            f"rate (an estimate, {cache})")


def table(spec: Spec, backend: str, rows: list[Row], machine: Machine) -> str:
    """nccl-tests' table for one back-end."""
    half = sum(w + 1 for w in HALF_WIDTHS)
    lines = [
        f"# {backend}: {spec.collective} on {spec.ranks} ranks, {spec.dtype}, op {spec.op}, warm-up {spec.warmup}, "
        f"{spec.iters} timed calls (time: median of the slowest rank; p99, max: the slowest calls), "
        f"check {int(spec.check)}"
        + (f", algorithm {spec.xml}" if spec.xml and backend == "arborcc" else "")
        + (", buffers from Communicator.shared_array (communicator-owned shared memory)"
           if spec.shared_buffers and backend == "arborcc" else ""),
        _machine_line(machine),
        "#",
        f"# {'':>46}{'out-of-place':^{half}}{'in-place':^{half}}",
        f"# {'size':>10} {'count':>12} {'type':>8} {'redop':>6} {'root':>5}"
        + "".join(f" {name:>{w}}" for name, _, w in HALF_COLUMNS) * 2,
        f"# {'(B)':>10} {'(elements)':>12} {'':>8} {'':>6} {'':>5}"
        + "".join(f" {unit:>{w}}" for _, unit, w in HALF_COLUMNS) * 2,
    ]
    busbws = []
    for size in spec.sizes:
        pair = [r for r in rows if r.backend == backend and _matches(r, spec, size)]
        oop = next((r for r in pair if not r.inplace), None)
        ip = next((r for r in pair if r.inplace), None)
        first = oop or ip
        if first is None:
            continue
        lines.append(f"  {first.size:>10} {first.count:>12} {first.type:>8} {first.redop:>6} {first.root:>5} "
                     f"{_half(spec, oop, machine)} {_half(spec, ip, machine)}")
        busbws += [r.busbw_gbps for r in (oop, ip) if r is not None and r.busbw_gbps is not None]
    notes = sorted({r.note for r in rows if r.backend == backend and r.note})
    lines += [f"# note: {n}" for n in notes]
    wrong = sum(r.wrong or 0 for r in rows if r.backend == backend)
    lines.append(f"# Out of bounds values : {wrong} {'OK' if wrong == 0 else 'FAILED'}")
    avg = f"{sum(busbws) / len(busbws):.4g}" if busbws else "n/a (no row ran)"
    lines.append(f"# Avg bus bandwidth    : {avg}")
    return "\n".join(lines)


def _matches(row: Row, spec: Spec, size: int) -> bool:
    return row.requested == size


def comparison(spec: Spec, rows: list[Row], backends: list[str]) -> str:
    """busbw of each back-end and arborcc's ratio to each other one: out of place, or in
    place when arborcc ran only in place (an in-place algorithm file)."""
    others = [b for b in backends if b != "arborcc"]
    if "arborcc" not in backends or not others:
        return ""
    inplace = not any(r.backend == "arborcc" and not r.inplace and r.time_us is not None for r in rows)
    head = f"# {'size':>10} " + " ".join(f"{b + ' busbw':>14}" for b in backends) + " " + " ".join(
        f"{'x ' + b:>9}" for b in others)
    lines = [f"# {'in-place' if inplace else 'out-of-place'} busbw (GB/s) side by side, and arborcc's ratio", head]
    for size in spec.sizes:
        got = {}
        for b in backends:
            r = next((r for r in rows if r.backend == b and r.inplace == inplace and _matches(r, spec, size)), None)
            got[b] = r.busbw_gbps if r is not None else None
        cells = " ".join(f"{got[b]:>14.3f}" if got[b] is not None else f"{'n/a':>14}" for b in backends)
        ratios = " ".join(f"{got['arborcc'] / got[b]:>9.2f}" if got[b] and got["arborcc"] else f"{'-':>9}"
                          for b in others)
        size_bytes = next((r.size for r in rows if _matches(r, spec, size)), size)
        lines.append(f"  {size_bytes:>10} {cells} {ratios}")
    return "\n".join(lines)


def json_object(spec: Spec, rows: list[Row], machine: Machine, backends: list[str]) -> dict:
    results = []
    for r in rows:
        d = asdict(r)
        d["copy_fraction"] = (r.busbw_gbps * GB / machine.membw) if machine.membw and r.busbw_gbps is not None \
            else None
        d["memory_busbw_gbps"] = memory_busbw(spec, r, machine)
        results.append(d)
    avg = {}
    for b in backends:
        vals = [r.busbw_gbps for r in rows if r.backend == b and r.busbw_gbps is not None]
        avg[b] = sum(vals) / len(vals) if vals else None
    return {"collective": spec.collective, "ranks": spec.ranks, "dtype": spec.dtype, "op": spec.op,
            "root": spec.root, "warmup": spec.warmup, "iters": spec.iters, "xml": spec.xml,
            "shared_buffers": spec.shared_buffers, "backends": backends,
            "membw_gbps": machine.membw / GB if machine.membw else None,
            "last_level_cache_bytes": machine.cache, "avg_busbw_gbps": avg, "results": results}


def plot(spec: Spec, rows: list[Row], backends: list[str], path: str, machine: Machine = Machine()) -> None:
    """busbw against size (log2, labelled 4K/1M/1G) for every back-end: a marker and a
    colour per back-end, out of place solid, in place dashed; busbw on a log axis when it
    spans more than a decade; the file's suffix picks the format (:mod:`arborcc.plotting`)."""
    from arborcc.plotting import busbw_axis, new_figure, save_figure, series_style, size_axis

    fig = new_figure("--plot", (7.5, 4.5))
    ax = fig.add_subplot()
    values: list[float] = []
    for i, b in enumerate(backends):
        marker = series_style(i)["marker"]
        for inplace, style in ((False, "-"), (True, "--")):
            pts = [(r.size, r.busbw_gbps) for r in rows if r.backend == b and r.inplace == inplace
                   and r.busbw_gbps is not None]
            if pts:
                xs, ys = zip(*sorted(pts))
                values += ys
                ax.plot(xs, ys, linestyle=style, marker=marker, markersize=4, color=f"C{i}",
                        label=f"{b} {'in-place' if inplace else 'out-of-place'}")
    sizes = sorted({r.size for r in rows})
    # the table's %mem reference: only where the calls run from memory, not from cache
    reference = sorted({(r.size, bw) for r in rows
                        if not r.inplace and (bw := memory_busbw(spec, r, machine)) is not None})
    if reference:
        xs, ys = zip(*reference)
        values += ys
        ax.plot(xs, ys, ":", color="gray", label="compulsory traffic at copy speed (%mem)")
    size_axis(ax, sizes)
    busbw_axis(ax, values)
    ax.set_title(f"{spec.collective}, {spec.ranks} ranks, {spec.dtype} {spec.op}")
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # no series (every row failed): no empty legend box
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
