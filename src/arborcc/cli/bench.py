"""``arborcc bench``: nccl-tests' sweep on local ranks, for arborcc's shared-memory runtime
and, side by side, gloo (torch.distributed) and MPICH (mpi4py).

Flags follow nccl-tests: ``-n`` ranks, ``-b``/``-e``/``-f`` the size sweep (bytes, with
K/M/G suffixes), ``-o`` op, ``-d`` dtype, ``-w`` warm-up calls, ``--iters`` timed calls,
``-c`` check, ``--collective``; ``--xml FILE`` runs that algorithm (on as many ranks as
it has); ``--shared-buffers`` runs arborcc on communicator-owned shared arrays (as
nccl-tests' ``-R`` registers buffers); ``--backend`` may be repeated; ``--json`` prints
one object; ``--plot PNG`` draws busbw against size for every back-end of the run.

Every flag is checked before a rank starts: a combination no back-end runs (``-o avg``
on integers, ``-r`` not a rank, ``-n`` over the data plane's ranks) is refused in one
line. A row that cannot run, or a check that finds wrong values, makes the command fail
(status 1) after the tables, naming the back-end and why.
"""

from __future__ import annotations

import argparse

from arborcc.sizes import size_argument

COLLECTIVES = ("allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall")
DTYPES = ("float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8")
OPS = ("sum", "prod", "min", "max", "avg")
BACKENDS = ("arborcc", "gloo", "mpi")


def register(p: argparse.ArgumentParser) -> None:
    p.description = __doc__
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("-n", "--ranks", type=int, default=None, help="local ranks (default 2, or the --xml file's)")
    p.add_argument("-b", "--minbytes", type=size_argument, default=4 << 10, help="smallest size (default 4K)")
    p.add_argument("-e", "--maxbytes", type=size_argument, default=64 << 20, help="largest size (default 64M)")
    p.add_argument("-f", "--stepfactor", default="2",
                   help="size multiplier between rows, a finite number above 1 (default 2)")
    p.add_argument("-o", "--op", choices=OPS, default="sum")
    p.add_argument("-d", "--datatype", choices=DTYPES, default="float32")
    p.add_argument("-r", "--root", type=int, default=None,
                   help="root of broadcast and reduce, a rank (default 0; with --xml the file's)")
    p.add_argument("-w", "--warmup_iters", type=int, default=5, help="untimed calls per row, 0 or more (default 5)")
    p.add_argument("--iters", "-i", type=int, default=20, help="timed calls per row, 1 or more (default 20)")
    p.add_argument("-c", "--check", type=int, choices=(0, 1), default=1, help="check results (default 1)")
    p.add_argument("--collective", choices=COLLECTIVES, default="allreduce")
    p.add_argument("--xml", metavar="FILE", help="run this algorithm (MSCCL XML or arborcc JSON)")
    p.add_argument("--backend", action="append", choices=BACKENDS,
                   help="back-end to sweep (repeat for several; default arborcc)")
    p.add_argument("--slice-bytes", type=size_argument, help="arborcc: pipeline slice (default 1M)")
    p.add_argument("--workers", type=int, help="arborcc: threads per rank, 1 = scheduler on the calling thread, "
                                                 "0 = thread per tb (default: by the call's size)")
    p.add_argument("--tune", action="store_true", help="arborcc: tune the slice size online (Blink's MIAD)")
    p.add_argument("--shared-buffers", action="store_true",
                   help="arborcc: take the send and receive buffers from Communicator.shared_array, memory the "
                        "communicator owns and every rank maps (as nccl-tests' -R 2 registers symmetric buffers); "
                        "all-gather and broadcast then read the peers' blocks with plain loads, no system call. "
                        "Default: the caller's own numpy arrays, read with cross-memory attach")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="seconds (finite, above 0) before a back-end's sweep is killed (default 600)")
    p.add_argument("--no-membw", action="store_true", help="skip measuring the machine's copy bandwidth")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--plot", metavar="PNG", help="draw busbw against size for every back-end")
    p.set_defaults(func=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
    from arborcc.bench.cli import run_bench

    return run_bench(args)
