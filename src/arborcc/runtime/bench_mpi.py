"""One rank of the MPI sweep (run by ``mpiexec`` from :func:`arborcc.runtime.benchmark.run_mpi`).

``python -m arborcc.runtime.bench_mpi SPEC.json OUT.json``: the same protocol as the other
back-ends (barrier, one timed call, slowest rank, median) with MPICH's collectives;
rank 0 writes every rank's timings to OUT.json.
"""

from __future__ import annotations

import json
import sys

import numpy as np


def main(spec_path: str, out_path: str) -> None:
    from mpi4py import MPI

    from arborcc.ir.collectives import call_blocks
    from arborcc.runtime.bench_protocol import Spec, block_count, count_wrong, pattern, time_calls

    with open(spec_path) as f:
        spec = Spec(**json.load(f))
    comm = MPI.COMM_WORLD
    rank, n = comm.Get_rank(), comm.Get_size()
    ops = {"sum": MPI.SUM, "prod": MPI.PROD, "min": MPI.MIN, "max": MPI.MAX}
    results = {}
    for size in spec.sizes:
        count = block_count(spec, size)
        blocks_in, blocks_out = call_blocks(spec.collective, n)
        for inplace in (False, True):
            key = f"{size}:{int(inplace)}"
            if spec.dtype == "bfloat16" or spec.op not in ops:
                results[key] = {"error": f"MPI has no {spec.dtype if spec.dtype == 'bfloat16' else spec.op}"}
                continue
            op = ops[spec.op]
            send = np.ones(count * blocks_in, spec.dtype)
            recv = np.zeros(count * blocks_out, spec.dtype)

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

            times = time_calls(call, comm.Barrier, spec.warmup, spec.iters)
            wrong = 0
            if spec.check:
                values = pattern(spec.dtype, spec.op, count, rank, blocks_in)
                if inplace and spec.collective == "allgather":
                    recv[rank * count:(rank + 1) * count] = values
                send[:] = values
                call()
                got = send if inplace and spec.collective in ("allreduce", "broadcast", "alltoall", "reduce") else recv
                if inplace and spec.collective == "reducescatter":
                    got = send[:count]
                wrong = count_wrong(got, spec, count, rank)
            results[key] = {"times": times, "wrong": wrong}
    gathered = comm.gather(results, root=0)
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(gathered, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
