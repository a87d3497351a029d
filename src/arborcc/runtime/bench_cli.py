"""What ``arborcc bench`` does with its flags (the command module only parses them)."""

from __future__ import annotations

import json
import sys

from arborcc.errors import InputError
from arborcc.limits import limit
from arborcc.runtime.bench_report import comparison, json_object, plot, table
from arborcc.runtime.bench_protocol import Spec
from arborcc.runtime.benchmark import run_backend


def sweep_sizes(minbytes: int, maxbytes: int, factor: int) -> list[int]:
    if maxbytes < minbytes:
        raise InputError(f"the largest size {maxbytes} is below the smallest {minbytes}", source="-e")
    if factor < 2:
        raise InputError(f"the step factor must be at least 2, got {factor}", source="-f")
    sizes, s = [], minbytes
    while s <= maxbytes:
        sizes.append(s)
        s *= factor
    return sizes


def _check_memory(ranks: int, maxbytes: int) -> None:
    """Refuse a sweep whose largest call cannot fit in this machine's memory: every rank
    holds at least a send and a receive buffer of the largest size (a lower bound)."""
    import os

    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return
    need = 2 * ranks * maxbytes
    if need > physical:
        raise InputError(f"the largest size needs at least {need / 2**30:.1f} GiB (2 buffers x {ranks} ranks x "
                         f"{maxbytes:,} bytes), more than this machine's {physical / 2**30:.1f} GiB", source="-e")


def spec_from_args(args) -> Spec:
    ranks, collective = args.ranks, args.collective
    if args.xml:
        from arborcc.ir.load import load_algorithm
        from arborcc.runtime.plan import require_verified

        algo = require_verified(load_algorithm(args.xml), args.xml)
        if ranks is not None and ranks != algo.num_ranks:
            raise InputError(f"the algorithm has {algo.num_ranks} ranks, -n asks for {ranks}", source="-n")
        ranks, collective = algo.num_ranks, algo.collective
        root = algo.effective_root  # the file's root, whatever --root says
        if collective == "custom":
            raise InputError("custom collectives have no benchmark (no reference result)", source=args.xml)
    else:
        root = args.root
    ranks = 2 if ranks is None else ranks
    if ranks < 1:
        raise InputError(f"at least one rank, got {ranks}", source="-n")
    limit("local-ranks").check(ranks, "-n", what="local ranks")
    _check_memory(ranks, args.maxbytes)
    options = {k: v for k, v in (("slice_bytes", args.slice_bytes), ("workers", args.workers),
                                 ("tune", args.tune or None), ("timeout", min(args.timeout, 120.0)))
               if v is not None}
    return Spec(collective=collective, ranks=ranks, sizes=sweep_sizes(args.minbytes, args.maxbytes, args.stepfactor),
                dtype=args.datatype, op=args.op, root=root, warmup=args.warmup_iters, iters=args.iters,
                check=bool(args.check), xml=args.xml, options=options, timeout=args.timeout,
                shared_buffers=args.shared_buffers)


def run_bench(args) -> int:
    if args.plot is not None:  # refused before any rank starts, not after the sweep
        from arborcc.plotting import check_image_output

        check_image_output(args.plot, "--plot")
    spec = spec_from_args(args)
    backends = list(dict.fromkeys(args.backend or ["arborcc"]))
    membw = None
    if not args.no_membw:
        from arborcc.runtime.membw import copy_bandwidth
        membw = copy_bandwidth(spec.ranks)
    rows = []
    for b in backends:
        if not args.json:
            print(f"# running {b} ...", file=sys.stderr, flush=True)
        rows += run_backend(b, spec)
    if args.json:
        print(json.dumps(json_object(spec, rows, membw, backends), indent=1))
    else:
        for b in backends:
            print(table(spec, b, rows, membw))
            print()
        text = comparison(spec, rows, backends)
        if text:
            print(text)
    if args.plot:
        plot(spec, rows, backends, args.plot, membw)
        if not args.json:
            print(f"# plot: {args.plot}")
    return 1 if any(r.wrong for r in rows if r.backend == "arborcc") else 0
