"""``arborcc demo``: the whole pipeline on an embedded default (DGX-1V, and the
fragmented allocation 1,4,5,6 that Blink uses as its motivating example).

Stages: the topology and its link matrix, routes of the allocation, the unique
allocations (Blink's 46 classes), synthesis of an all-reduce for the allocation by
every strategy (bound vs achieved algbw), then the winner verified symbolically, run on
the numpy reference executor, and written to MSCCL XML and read back, run on local
processes; last, every strategy and the NCCL baseline simulated side by side per size
(table and plot).

References:

* Blink: G. Wang, S. Venkataraman, A. Phanishayee, N. Devanur, J. Thelin, I. Stoica, "Blink:
  Fast and Generic Collectives for Distributed ML", MLSys 2020, https://arxiv.org/abs/1910.04940
"""

from __future__ import annotations

import argparse

from arborcc.cli.topology_args import add_topology_arguments, topology_from_args

DEFAULT_ALLOCATION = "1,4,5,6"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run the pipeline on an embedded default (DGX-1V)")
    add_topology_arguments(p)
    p.set_defaults(func=cmd_demo)


def _section(title: str) -> None:
    print(f"\n== {title} " + "=" * max(0, 70 - len(title)))


def cmd_demo(args: argparse.Namespace) -> int:
    from arborcc.topology.allocation import induced, resolve_gpus, unique_allocations
    from arborcc.topology.model import GB
    from arborcc.topology.render import matrix_text

    gpus_flag, args.gpus = args.gpus, None
    machine = topology_from_args(args)
    _section(f"1. topology: {machine.name}")
    print(f"{machine.num_ranks} GPUs, {len(machine.devices)} devices, {len(machine.links)} directed links")
    print(matrix_text(machine))

    alloc = induced(machine, resolve_gpus(machine, gpus_flag or (DEFAULT_ALLOCATION if machine.num_ranks >= 7 else
                                                                  ",".join(map(str, range(machine.num_ranks))))))
    _section(f"2. allocation {alloc.name}: routes between its GPUs")
    for a in alloc.ranks:
        for b in alloc.ranks:
            if a < b:
                r = alloc.route(a, b)
                print(f"  {a:>6} -> {b:<6} {r.bandwidth / GB:7.1f} GB/s  {r.latency * 1e6:5.1f} us  "
                      f"{' > '.join(r.path)}")

    if machine.num_ranks <= 16:
        lo = min(3, machine.num_ranks)
        classes = unique_allocations(machine, lo, machine.num_ranks)
        _section(f"3. unique allocations of {lo}-{machine.num_ranks} GPUs (Blink section 5.2)")
        sizes: dict[int, int] = {}
        for c in classes:
            sizes[len(c.gpus)] = sizes.get(len(c.gpus), 0) + 1
        print(f"{len(classes)} classes over {sum(c.members for c in classes)} NVLink-connected allocations; "
              f"by size: " + ", ".join(f"{k} GPUs: {v}" for k, v in sorted(sizes.items())))

    best = _synthesize_and_check(alloc)
    from arborcc.runtime.demo_step import run_demo_step
    run_demo_step(best, _section)
    from arborcc.tune.compare import demo_comparison

    _section(f"7. simulated on {alloc.name}: every strategy and NCCL, busbw per size")
    demo_comparison(alloc)
    return 0


def _synthesize_and_check(alloc) -> None:
    import os
    import tempfile

    import numpy as np

    from arborcc.errors import SynthesisError
    from arborcc.ir.msccl_xml import read_msccl_xml, write_msccl_xml
    from arborcc.runtime.reference import make_inputs, reference, run
    from arborcc.synth import synthesize
    from arborcc.synth.registry import strategy_names
    from arborcc.verify import verify_algorithm

    _section(f"4. all-reduce on {alloc.name}: every strategy (steady-state bandwidth model)")
    results = []
    print(f"  {'strategy':<18} {'bound GB/s':>10} {'algbw GB/s':>10} {'of bound':>8} {'trees':>5} {'steps':>6}")
    for name in strategy_names():
        try:
            r = synthesize(alloc, "allreduce", name)
        except SynthesisError as e:  # a strategy that does not apply here says why
            print(f"  {name:<18} n/a: {str(e).split(': ', 1)[-1]}")
            continue
        results.append(r)
        print(f"  {r.strategy:<18} {r.bound / 1e9:10.2f} {r.algbw / 1e9:10.2f} {100 * r.ratio:7.1f}% "
              f"{len(r.trees):5d} {r.algorithm.num_steps:6d}")
    best = max(results, key=lambda r: r.algbw)
    ring = next(r for r in results if r.strategy == "nccl-ring")
    print(f"  best: {best.strategy}, {best.algbw / ring.algbw:.2f}x the rings NCCL would build")

    _section("5. the winner: verified, executed, exported")
    report = verify_algorithm(best.algorithm, "executor")
    print(f"  verifier: {'OK' if report.ok else 'FAILED'} (postcondition, deadlock with 8 FIFO slots, races, "
          f"executor-dialect limits)")
    inputs = make_inputs(best.algorithm, elems=1024, seed=0)
    outputs, want = run(best.algorithm, inputs), reference(best.algorithm, inputs)
    err = max(float(np.max(np.abs(o - w))) for o, w in zip(outputs, want))
    print(f"  numpy reference run: max |error| = {err:.2e} over {len(inputs)} ranks x "
          f"{inputs[0].size} elements")
    fd, path = tempfile.mkstemp(prefix="arborcc-demo-", suffix=".xml")
    with os.fdopen(fd, "w") as f:
        f.write(write_msccl_xml(best.algorithm, "executor"))
    again = read_msccl_xml(path)
    print(f"  MSCCL XML: {path} ({os.path.getsize(path)} bytes), read back "
          f"{'identical' if again == best.algorithm else 'DIFFERENT'}")
    return best.algorithm
