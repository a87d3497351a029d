"""``arborcc run -n N script.py [args...]``: start N local ranks of a Python script with the
environment torchrun gives its workers (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
MASTER_ADDR=127.0.0.1, MASTER_PORT), so the same script runs under torchrun. The exit
status is the first failing rank's; a failing rank stops the others. SIGINT, SIGTERM and
SIGHUP are passed on to the ranks (killed 10 s later if still running; exit status 128 +
the signal), and the ranks die with the launcher if it is killed. With more ranks than
CPU cores available to the job, one warning line says so (timings then measure the
scheduler)."""

from __future__ import annotations

import argparse


def register(p: argparse.ArgumentParser) -> None:
    p.description = __doc__
    p.add_argument("-n", "--nproc", type=int, required=True, help="number of local ranks")
    p.add_argument("--timeout", type=float, default=None,
                   help="seconds (finite, above 0) after which every rank is stopped")
    p.add_argument("script", help="the Python script each rank runs")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    p.set_defaults(func=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    import os

    from arborcc.cli.output import warn
    from arborcc.errors import InputError
    from arborcc.limits import limit
    from arborcc.runtime.environment import runtime_settings
    from arborcc.runtime.launch import check_timeout, oversubscription, ranks_environment, run_script
    from arborcc.runtime.plan import Plan

    if args.nproc < 1:
        raise InputError(f"at least one rank, got {args.nproc}", source="-n")
    limit("local-ranks").check(args.nproc, "-n", what="local ranks")
    check_timeout(args.timeout)
    if not os.path.isfile(args.script):
        raise InputError("no such file", source=args.script)
    # the variables every rank will read, and the plan ARBORCC_PLAN names, checked once before any rank starts
    Plan.load(runtime_settings(ranks_environment(args.nproc)).plan)
    crowded = oversubscription(args.nproc)
    if crowded:
        warn(crowded)
    return run_script(args.nproc, [args.script, *args.args], timeout=args.timeout)
