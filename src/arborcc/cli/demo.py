"""``arborcc demo``: the whole pipeline on an embedded default (DGX-1V, and the
fragmented allocation 1,4,5,6 that Blink uses as its motivating example).

Stages: the topology and its link matrix, routes of the allocation, the unique
allocations (Blink's 46 classes), synthesis of an all-reduce for the allocation by
every strategy, each simulated as its written file runs at 64 MiB (the size ``synth``
ranks at without ``--size``) against NCCL's baseline, then the fastest (the "x faster
than NCCL" line: the time ``arborcc compare`` prints at that size) verified symbolically, run on
the numpy reference executor, and written to MSCCL XML and read back (in memory: the
demo leaves no file behind), run on local processes; last, every strategy and the NCCL
baseline simulated side by side per size (table; ``--plot FILE.png`` draws it).

References:

* Blink: G. Wang, S. Venkataraman, A. Phanishayee, N. Devanur, J. Thelin, I. Stoica, "Blink:
  Fast and Generic Collectives for Distributed ML", MLSys 2020, https://arxiv.org/abs/1910.04940
"""

from __future__ import annotations

import argparse

from arborcc.cli.topology_args import add_topology_arguments, topology_from_args

DEFAULT_ALLOCATION = "1,4,5,6"


def register(p: argparse.ArgumentParser) -> None:
    add_topology_arguments(p)
    p.add_argument("--json", action="store_true", help="print one JSON object with every stage's results")
    p.add_argument("--plot", metavar="PNG", help="draw the simulated comparison (stage 7) to this file")
    p.set_defaults(func=cmd_demo)


class _Report:
    """The demo's output: sections of text lines, or (``--json``) one object at the end."""

    def __init__(self, as_json: bool):
        self.as_json = as_json
        self.data: dict = {}

    def section(self, title: str) -> None:
        if not self.as_json:
            print(f"\n== {title} " + "=" * max(0, 70 - len(title)))

    def line(self, text: str) -> None:
        if not self.as_json:
            print(text)


def cmd_demo(args: argparse.Namespace) -> int:
    from arborcc.limits import limit
    from arborcc.topology.allocation import induced, resolve_gpus, unique_allocations
    from arborcc.topology.model import GB
    from arborcc.topology.render import matrix_text

    from arborcc.cli.output import check_image_outputs

    check_image_outputs(plot=args.plot)  # a bad --plot path is refused before anything runs
    out = _Report(args.json)
    gpus_flag, args.gpus = args.gpus, None
    machine = topology_from_args(args)
    out.section(f"1. topology: {machine.name}")
    out.line(f"{machine.num_ranks} GPUs, {len(machine.devices)} devices, {len(machine.links)} directed links")
    matrix_gpus = limit("matrix-gpus")
    out.line(matrix_text(machine) if machine.num_ranks <= matrix_gpus.value
             else f"matrix left out: {matrix_gpus.message(machine.num_ranks)}")
    out.data["topology"] = {"name": machine.name, "gpus": machine.num_ranks, "devices": len(machine.devices),
                            "links": len(machine.links)}

    default = DEFAULT_ALLOCATION if machine.num_ranks >= 7 else ",".join(map(str, range(machine.num_ranks)))
    alloc = induced(machine, resolve_gpus(machine, default if gpus_flag is None else gpus_flag))
    out.section(f"2. allocation {alloc.name}: routes between its GPUs")
    routes = []
    for a in alloc.ranks:
        for b in alloc.ranks:
            if a < b:
                r = alloc.route(a, b)
                routes.append({"src": a, "dst": b, "gbps": r.bandwidth / GB, "latency_us": r.latency * 1e6,
                               "path": list(r.path)})
                out.line(f"  {a:>6} -> {b:<6} {r.bandwidth / GB:7.1f} GB/s  {r.latency * 1e6:5.1f} us  "
                         f"{' > '.join(r.path)}")
    out.data["allocation"] = {"name": alloc.name, "gpus": list(alloc.ranks), "routes": routes}

    if machine.num_ranks <= 16:
        lo = min(3, machine.num_ranks)
        classes = unique_allocations(machine, lo, machine.num_ranks)
        out.section(f"3. unique allocations of {lo}-{machine.num_ranks} GPUs (Blink section 5.2)")
        sizes: dict[int, int] = {}
        for c in classes:
            sizes[len(c.gpus)] = sizes.get(len(c.gpus), 0) + 1
        members = sum(c.members for c in classes)
        out.line(f"{len(classes)} classes over {members} NVLink-connected allocations; "
                 f"by size: " + ", ".join(f"{k} GPUs: {v}" for k, v in sorted(sizes.items())))
        out.data["classes"] = {"count": len(classes), "allocations": members,
                               "by_size": {str(k): v for k, v in sorted(sizes.items())}}

    best = _synthesize_and_check(alloc, out)
    _run_for_real(best, out)
    _simulate(alloc, out, args.plot)
    if args.json:
        from arborcc.cli.output import print_json

        print_json(out.data)
    return 0


def _run_for_real(algo, out: _Report) -> None:
    """Stage 6 (:mod:`arborcc.bench.demo_step`): with ``--json`` its lines go to stderr,
    so standard output stays one JSON object."""
    import contextlib
    import sys

    from arborcc.bench.demo_step import run_demo_step

    with contextlib.redirect_stdout(sys.stderr) if out.as_json else contextlib.nullcontext():
        run_demo_step(algo, out.section)
    out.data["run"] = {"ranks": algo.num_ranks, "report": "on stderr" if out.as_json else "above"}


def _simulate(alloc, out: _Report, plot: str | None) -> None:
    """Stage 7 (:func:`arborcc.tune.compare.demo_comparison`); with ``--json`` its table
    goes to stderr, like stage 6's."""
    import contextlib
    import sys

    from arborcc.tune.compare import demo_comparison

    out.section(f"7. simulated on {alloc.name}: every strategy and NCCL, busbw per size")
    with contextlib.redirect_stdout(sys.stderr) if out.as_json else contextlib.nullcontext():
        demo_comparison(alloc, plot)
    out.data["simulated"] = {"report": "on stderr" if out.as_json else "above", "plot": plot}


def _synthesize_and_check(alloc, out: _Report):
    import numpy as np

    from arborcc.errors import SynthesisError
    from arborcc.ir.msccl_xml import read_msccl_xml, write_msccl_xml
    from arborcc.ir.reference import make_inputs, reference, run
    from arborcc.synth import synthesize
    from arborcc.synth.registry import strategy_names
    from arborcc.verify import verify_algorithm

    from arborcc.sizes import format_size
    from arborcc.synth.result import RANKING_SIZE
    from arborcc.tune.compare import against_nccl, nccl_time

    size = RANKING_SIZE
    out.section(f"4. all-reduce on {alloc.name}: every strategy, simulated as written at {format_size(size)}")
    results, rows = [], []
    out.line(f"  {'strategy':<18} {'time us':>9} {'bound GB/s':>10} {'steady GB/s':>11} {'of bound':>8} "
             f"{'trees':>5} {'steps':>6}")
    for name in strategy_names():
        try:
            r = synthesize(alloc, "allreduce", name)
        except SynthesisError as e:  # a strategy that does not apply here says why
            why = str(e).split(": ", 1)[-1]
            rows.append({"strategy": name, "not_applicable": why})
            out.line(f"  {name:<18} n/a: {why}")
            continue
        if r.time is None:  # beyond the ranks synthesis simulates: its note says so
            why = r.notes[-1]
            rows.append({"strategy": name, "not_simulated": why})
            out.line(f"  {name:<18} {why}")
            continue
        results.append(r)
        rows.append({"strategy": r.strategy, "time_us": r.time * 1e6, "bound_gbps": r.bound / 1e9,
                     "algbw_gbps": r.algbw / 1e9, "ratio": r.ratio, "trees": len(r.trees),
                     "steps": r.algorithm.num_steps})
        out.line(f"  {r.strategy:<18} {r.time * 1e6:9.1f} {r.bound / 1e9:10.2f} {r.algbw / 1e9:11.2f} "
                 f"{100 * r.ratio:7.1f}% {len(r.trees):5d} {r.algorithm.num_steps:6d}")
    if not results:
        raise SynthesisError(f"no strategy built and simulated an all-reduce on {alloc.name}")
    best = min(results, key=lambda r: r.time)
    nccl = nccl_time(alloc, "allreduce", size)
    out.line(f"  {format_size(size)}: the size auto ranks at without --size (bandwidth-bound, and quick to "
             f"simulate); steady GB/s is the steady-state model's algbw, a property of the schedule")
    out.line(f"  best: {best.strategy}, {against_nccl(best.time, nccl, size)} "
             f"(arborcc compare --sizes {format_size(size)} prints the same times)")
    out.data["strategies"] = rows
    out.data["best"] = {"strategy": best.strategy, "size": size, "time_us": best.time * 1e6,
                        "nccl_time_us": nccl * 1e6, "speedup_over_nccl": nccl / best.time}

    out.section("5. the winner: verified, executed, exported")
    report = verify_algorithm(best.algorithm, "executor")
    out.line(f"  verifier: {'OK' if report.ok else 'FAILED'} (postcondition, deadlock with 8 FIFO slots, races, "
             f"executor-dialect limits)")
    inputs = make_inputs(best.algorithm, elems=1024, seed=0)
    outputs, want = run(best.algorithm, inputs), reference(best.algorithm, inputs)
    err = max(float(np.max(np.abs(o - w))) for o, w in zip(outputs, want))
    out.line(f"  numpy reference run: max |error| = {err:.2e} over {len(inputs)} ranks x "
             f"{inputs[0].size} elements")
    text = write_msccl_xml(best.algorithm, "executor")  # written and read back in memory: no file left behind
    again = read_msccl_xml(text, source="the demo's XML")
    out.line(f"  MSCCL XML (executor dialect): {len(text.encode())} bytes, read back "
             f"{'identical' if again == best.algorithm else 'DIFFERENT'} "
             "(arborcc synth ... -o algo.xml writes it to a file)")
    out.data["winner"] = {"verified": report.ok, "max_error": err, "ranks": len(inputs),
                          "elements": int(inputs[0].size), "xml_bytes": len(text.encode()),
                          "xml_round_trip": again == best.algorithm}
    return best.algorithm
