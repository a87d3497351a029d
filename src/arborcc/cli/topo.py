"""``arborcc topo show|classes|export``: look at, classify and write topologies.

References:

* Blink: G. Wang, S. Venkataraman, A. Phanishayee, N. Devanur, J. Thelin, I. Stoica, "Blink:
  Fast and Generic Collectives for Distributed ML", MLSys 2020, https://arxiv.org/abs/1910.04940
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from arborcc.cli.topology_args import add_topology_arguments, topology_from_args
from arborcc.errors import InputError
from arborcc.topology.allocation import FABRICS

EXPORT_FORMATS = ("yaml", "json", "nccl-xml")


def register(topo: argparse.ArgumentParser) -> None:
    tsub = topo.add_subparsers(dest="topo_command", metavar="ACTION", required=True)

    show = tsub.add_parser("show", help="link matrix (like nvidia-smi topo -m) and link table",
                           description="The link matrix (like nvidia-smi topo -m; left out above the "
                                       "matrix-gpus limit, see docs/limits.md) and the link table.")
    add_topology_arguments(show)
    show.add_argument("--sysfs-root", metavar="DIR",
                      help="with --detect: read the CPUs from DIR/cpu and DIR/node instead of /sys/devices/system "
                           "(a copy of it, or a tree written by hand)")
    show.add_argument("--json", action="store_true", help="print one JSON object")
    show.set_defaults(func=cmd_show)

    classes = tsub.add_parser("classes", help="unique allocations up to isomorphism (Blink section 5.2)")
    add_topology_arguments(classes)
    classes.add_argument("--min-gpus", type=int, default=3)
    classes.add_argument("--max-gpus", type=int, default=None, help="default: all GPUs")
    classes.add_argument("--fabric", choices=FABRICS, default="nvlink",
                         help="nvlink: compare the NVLink fabric, keep NVLink-connected allocations "
                              "(Blink's definition; default); full: compare the whole induced topology")
    classes.add_argument("--json", action="store_true", help="print one JSON object")
    classes.set_defaults(func=cmd_classes)

    export = tsub.add_parser("export", help="write the topology as arborcc YAML/JSON or NCCL topology XML")
    add_topology_arguments(export)
    export.add_argument("-o", "--output", metavar="PATH", help="file to write (default: standard output)")
    export.add_argument("--format", choices=EXPORT_FORMATS,
                        help="default: from the output suffix (.yaml/.yml, .json, .xml), else yaml")
    export.add_argument("--json", action="store_true",
                        help="print one JSON object: the topology document on stdout, or with -o what was written")
    export.set_defaults(func=cmd_export)


def _detected_gpus(args: argparse.Namespace):
    """(the GPU topology, None), or (None, why no GPU was detected) when NVML is missing or
    finds none and no ``--gpus`` asks for some; errors of the flags stay errors."""
    from arborcc.errors import MissingDependencyError, TopologyError
    from arborcc.topology.detect import SOURCE

    try:
        return topology_from_args(args), None
    except (MissingDependencyError, TopologyError) as e:
        detection = isinstance(e, MissingDependencyError) or e.source in (None, SOURCE)
        if not detection or args.gpus is not None:
            raise
        return None, str(e)


def _cpu_layout_text(layout, root: str) -> str:
    from arborcc.topology.cpus import format_cpu_list

    def plural(n: int, word: str) -> str:
        return f"{n} {word}{'' if n == 1 else 's'}"

    cache = f"L{layout.cache_level}" if layout.cache_level else "last-level cache"
    size = f" of {layout.cache_bytes / 2**20:g} MB" if layout.cache_bytes else ""
    threads = sorted({len(v) for v in layout.cores.values()})
    lines = [f"CPUs (sysfs {root}): {plural(len(layout.cpus), 'online CPU')}, {plural(len(layout.cores), 'core')} "
             f"({'/'.join(map(str, threads))} thread{'' if threads == [1] else 's'} each), "
             f"{plural(len(layout.sockets), 'socket')}, {plural(len(layout.numa_nodes), 'NUMA node')}, "
             + (f"{plural(len(layout.cache_domains), cache + ' domain')}{size}" if layout.cache_domains
                else "cache domains unknown")]
    for title, groups in (("socket", layout.sockets), ("NUMA node", layout.numa_nodes),
                          (f"{cache} domain", layout.cache_domains)):
        for key, cpus in groups.items():
            lines.append(f"  {title} {key}: CPUs {format_cpu_list(cpus)}")
    lines += [f"  not in sysfs: {m}" for m in layout.missing]
    return "\n".join(lines)


def cmd_show(args: argparse.Namespace) -> int:
    from arborcc.cli.output import print_json
    from arborcc.limits import limit
    from arborcc.topology.render import link_table_text, matrix_text, topology_summary

    if args.sysfs_root is not None and not args.detect:
        raise InputError("goes with --detect (it says where to read this machine's CPUs)", source="--sysfs-root")
    layout = root = None
    if args.detect:
        from arborcc.topology.cpus import SYSTEM_ROOT, read_cpu_layout

        root = args.sysfs_root or SYSTEM_ROOT
        layout = read_cpu_layout(root)
        t, why = _detected_gpus(args)
        if t is None:
            if args.json:
                print_json({"cpus": layout.to_dict(), "gpus": [], "gpus_not_detected": why})
            else:
                print(_cpu_layout_text(layout, root))
                print()
                print(f"GPUs (NVML): none detected: {why}")
            return 0
    else:
        t = topology_from_args(args)
    matrix_gpus = limit("matrix-gpus")
    with_matrix = t.num_ranks <= matrix_gpus.value
    if args.json:
        summary = topology_summary(t, with_matrix)
        if not with_matrix:
            summary["matrix_left_out"] = matrix_gpus.message(t.num_ranks)
        if layout is not None:
            summary.update(cpus=layout.to_dict(), gpus_not_detected=None)
        print_json(summary)
        return 0
    if layout is not None:
        print(_cpu_layout_text(layout, root))
        print()
    print(f"{t.name}: {t.num_ranks} GPUs, {len(t.devices)} devices, {len(t.links)} directed links, "
          f"{len(t.hosts)} host(s)")
    print()
    print(matrix_text(t) if with_matrix else f"matrix left out: {matrix_gpus.message(t.num_ranks)}")
    print()
    print(link_table_text(t))
    return 0


def _progress(done: int, total: int) -> None:
    if sys.stderr.isatty():
        print(f"\rclassifying allocations: {done}/{total}", end="" if done < total else "\n", file=sys.stderr)


def cmd_classes(args: argparse.Namespace) -> int:
    from arborcc.cli.output import print_json
    from arborcc.topology.allocation import unique_allocations

    t = topology_from_args(args)
    classes = unique_allocations(t, args.min_gpus, args.max_gpus, args.fabric, progress=_progress)
    if args.json:
        print_json({
            "topology": t.name, "fabric": args.fabric, "min_gpus": args.min_gpus,
            "max_gpus": args.max_gpus or t.num_ranks, "count": len(classes),
            "allocations": sum(c.members for c in classes),
            "classes": [{"gpus": [t.ranks.index(g) for g in c.gpus], "gpu_ids": list(c.gpus),
                         "size": len(c.gpus), "members": c.members,
                         "nvlinks": [{"src": a, "dst": b, "count": n} for a, b, n in c.nvlink_edges]}
                        for c in classes],
        })
        return 0
    print(f"{t.name}: {len(classes)} unique allocations of {args.min_gpus}-{args.max_gpus or t.num_ranks} GPUs "
          f"({sum(c.members for c in classes)} allocations, fabric={args.fabric})")
    print(f"{'#':>3}  {'gpus':>4}  {'members':>7}  representative  nvlink lanes")
    for k, c in enumerate(classes):
        rep = ",".join(str(t.ranks.index(g)) for g in c.gpus)
        lanes = " ".join(f"{t.ranks.index(a)}-{t.ranks.index(b)}:{n}" for a, b, n in c.nvlink_edges)
        print(f"{k:>3}  {len(c.gpus):>4}  {c.members:>7}  {rep:<14}  {lanes}")
    return 0


#: output suffixes -> the export format they name
EXPORT_SUFFIXES = {".yaml": "yaml", ".yml": "yaml", ".json": "json", ".xml": "nccl-xml"}


def _export_format(args: argparse.Namespace) -> str:
    from arborcc.files import is_stream

    named = EXPORT_SUFFIXES.get(Path(args.output).suffix.lower()) if args.output else None
    if args.format:
        return args.format
    if named:
        return named
    if args.json and not args.output:
        return "json"
    if args.output and not is_stream(args.output):
        raise InputError("cannot tell the format from the suffix; use --format yaml|json|nccl-xml",
                         source=args.output)
    return "yaml"


def cmd_export(args: argparse.Namespace) -> int:
    from arborcc.cli.output import check_outputs, print_json, warn_suffix, write_output

    from arborcc.files import is_stream

    fmt = _export_format(args)
    if args.json and args.output and is_stream(args.output):
        raise InputError("with -o, --json prints a summary on stdout: write the topology to a file",
                         source="--json")
    if args.json and not args.output and fmt != "json":
        raise InputError(f"--json prints the topology as JSON, not {fmt}; write {fmt} with -o FILE",
                         source="--json")
    check_outputs(output=args.output)
    warn_suffix(args.output, fmt, EXPORT_SUFFIXES)
    t = topology_from_args(args)
    if fmt == "nccl-xml":
        from arborcc.topology.nccl_xml import dump_nccl_xml

        text = dump_nccl_xml(t)
    else:
        from arborcc.topology.topofile import dump_topology

        text = dump_topology(t, fmt)
    if not args.output:
        sys.stdout.write(text)
        return 0
    write_output(args.output, text)
    if args.json:
        print_json({"topology": t.name, "output": args.output, "format": fmt, "gpus": t.num_ranks,
                    "devices": len(t.devices), "links": len(t.links), "bytes": len(text.encode())})
    elif not is_stream(args.output):
        print(f"wrote {args.output} ({fmt}, {t.num_ranks} GPUs, {len(t.devices)} devices)", file=sys.stderr)
    return 0
