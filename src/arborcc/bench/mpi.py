"""One rank of the MPI sweep (run by ``mpiexec`` from :func:`arborcc.bench.backends.run_mpi`).

``python -m arborcc.bench.mpi SPEC.json OUT.json``: the same protocol as the other
back-ends (barrier, one timed call, slowest rank, median) with MPICH's collectives;
rank 0 writes every rank's timings to OUT.json. A rank whose MPI world is not the
sweep's ``ranks`` (an ``mpiexec`` of another MPI than mpi4py's starts processes that
each see a world of their own) writes nothing, says so on stderr and exits with status 3.
``avg`` is MPI's sum, then the result divided by the rank count (as arborcc runs it).
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

#: exit status of a rank whose MPI world is not the sweep's
WRONG_WORLD = 3


def main(spec_path: str, out_path: str) -> int:
    from mpi4py import MPI

    from arborcc.bench.protocol import Spec, block_count, count_wrong, pattern, time_calls
    from arborcc.ir.collectives import call_blocks

    with open(spec_path) as f:
        spec = Spec(**json.load(f))
    comm = MPI.COMM_WORLD
    rank, n = comm.Get_rank(), comm.Get_size()
    if n != spec.ranks:
        os.write(2, f"an MPI world of {n} rank{'s' if n > 1 else ''}, not the {spec.ranks} of -n\n".encode())
        return WRONG_WORLD
    ops = {"sum": MPI.SUM, "prod": MPI.PROD, "min": MPI.MIN, "max": MPI.MAX, "avg": MPI.SUM}
    op = ops[spec.op]
    results = {}
    for size in spec.sizes:
        count = block_count(spec, size)
        blocks_in, blocks_out = call_blocks(spec.collective, n)
        for inplace in (False, True):
            key = f"{size}:{int(inplace)}"
            send = np.ones(count * blocks_in, spec.dtype)
            recv = np.zeros(count * blocks_out, spec.dtype)
            result = _result(spec.collective, inplace, send, recv, count)

            def call():
                if spec.collective == "allreduce":
                    comm.Allreduce(MPI.IN_PLACE if inplace else send, send if inplace else recv, op)
                elif spec.collective == "allgather":
                    comm.Allgather(MPI.IN_PLACE if inplace else send, recv)
                elif spec.collective == "reducescatter":
                    if inplace:
                        comm.Reduce_scatter_block(MPI.IN_PLACE, send, op)
                    else:
                        comm.Reduce_scatter_block(send, recv, op)
                elif spec.collective == "broadcast":
                    if inplace:
                        comm.Bcast(send, spec.root)
                    else:  # MPI broadcasts in place: out of place the root copies first
                        if rank == spec.root:
                            recv[:] = send
                        comm.Bcast(recv, spec.root)
                elif spec.collective == "reduce":
                    if inplace and rank == spec.root:
                        comm.Reduce(MPI.IN_PLACE, send, op, spec.root)
                    else:
                        comm.Reduce(send, send if inplace else recv, op, spec.root)
                elif spec.collective == "alltoall":
                    comm.Alltoall(MPI.IN_PLACE if inplace else send, send if inplace else recv)
                else:
                    raise ValueError(f"no MPI call for {spec.collective}")
                if spec.op == "avg" and (spec.collective != "reduce" or rank == spec.root):
                    np.divide(result, n, out=result)

            times = time_calls(call, comm.Barrier, spec.warmup, spec.iters)
            wrong = 0
            if spec.check:
                values = pattern(spec.dtype, spec.op, count, rank, blocks_in)
                if inplace and spec.collective == "allgather":
                    recv[rank * count:(rank + 1) * count] = values
                send[:] = values
                call()
                wrong = count_wrong(result, spec, count, rank)
            results[key] = {"times": times, "wrong": wrong}
    gathered = comm.gather(results, root=0)
    if rank == 0:
        partial = out_path + f".{os.getpid()}"
        with open(partial, "w") as f:
            json.dump(gathered, f)
        os.replace(partial, out_path)
    return 0


def _result(collective: str, inplace: bool, send: np.ndarray, recv: np.ndarray, count: int) -> np.ndarray:
    """Where a rank's result lies after the call (the reduce-scatter in place: the first block)."""
    if not inplace or collective == "allgather":
        return recv
    if collective == "reducescatter":
        return send[:count]
    return send


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
