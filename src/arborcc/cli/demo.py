"""``arborcc demo``: the whole pipeline on an embedded default (DGX-1V, and the
fragmented allocation 1,4,5,6 that Blink uses as its motivating example).

It grows with each stage: today it shows the topology, its link matrix, routes of
the allocation, and the unique allocations (Blink's 46 classes).
"""

from __future__ import annotations

import argparse

from arborcc.cli.topology_args import add_topology_arguments, topology_from_args
from arborcc.topology.allocation import induced, resolve_gpus, unique_allocations
from arborcc.topology.model import GB
from arborcc.topology.render import matrix_text

DEFAULT_ALLOCATION = "1,4,5,6"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run the pipeline on an embedded default (DGX-1V)")
    add_topology_arguments(p)
    p.set_defaults(func=cmd_demo)


def _section(title: str) -> None:
    print(f"\n== {title} " + "=" * max(0, 70 - len(title)))


def cmd_demo(args: argparse.Namespace) -> int:
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
    return 0
