"""A pool of forked rank processes that stay up across test cases: each case sends a job
(an algorithm or a plain collective, dtype, op, mode, count, seed) to every rank and
gets the ranks' outputs back. Every wait has a hard timeout; the pool kills its
processes when it is closed or fails."""

from __future__ import annotations

import multiprocessing
import os
import time

import numpy as np

from arborcc.runtime.arrays import BFloat16
from arborcc.runtime.launch import free_port_pair, rank_env

JOB_TIMEOUT = 60.0


def make_input(dtype: str, op: str, count: int, rank: int, seed: int) -> np.ndarray:
    """Rank ``rank``'s deterministic input (bfloat16 as uint16 bit patterns)."""
    rng = np.random.default_rng([seed, rank])
    if dtype in ("int32", "int64"):
        lo, hi = (-3, 4) if op == "prod" else (-1000, 1000)
        return rng.integers(lo, hi, count).astype(dtype)
    if dtype == "uint8":
        return rng.integers(0, 256 if op != "prod" else 4, count).astype(np.uint8)
    x = rng.uniform(0.5, 1.5, count) if op == "prod" else rng.uniform(-2, 2, count)
    if dtype == "bfloat16":
        bits = x.astype(np.float32).view(np.uint32)
        return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return x.astype(dtype)


def as_float(a: np.ndarray, dtype: str) -> np.ndarray:
    """Values of ``a`` (bfloat16 bit patterns widened) for comparisons."""
    if dtype == "bfloat16":
        return (a.astype(np.uint32) << 16).view(np.float32)
    return a


def _serve(rank: int, world: int, port: int, conn, options: dict) -> None:
    os.environ.update(rank_env(rank, world, port, {}))
    from arborcc.runtime.communicator import Communicator

    algos = {}
    try:
        comm = Communicator.from_env(**{"timeout": 20, **options})
        conn.send(("ready", comm.cross_memory_attach))
        while True:
            job = conn.recv()
            if job is None:
                return
            try:
                conn.send(("ok", _run_job(comm, algos, rank, world, job)))
            except Exception as e:  # report and keep serving (the test decides)
                conn.send(("error", f"{type(e).__name__}: {e}"))
    except (EOFError, KeyboardInterrupt):
        return


def _run_job(comm, algos, rank, world, job):
    kind, key, algo, collective, mode, dtype, op, count, seed, root = job
    if key is not None and key not in algos:
        algos[key] = algo
    algo = algos.get(key)
    coll = algo.collective if algo is not None else collective
    blocks_in = world if coll in ("reducescatter", "alltoall", "scatter") else 1
    blocks_out = world if coll in ("allgather", "alltoall", "gather") else 1
    x = make_input(dtype, op, count * blocks_in, rank, seed)
    dt = "bfloat16" if dtype == "bfloat16" else None
    np_dtype = x.dtype
    inplace = mode == "inplace"
    if coll in ("allgather", "gather"):
        recv = np.zeros(count * blocks_out, np_dtype)
        if inplace:
            recv[rank * count:(rank + 1) * count] = x
            send = recv[rank * count:(rank + 1) * count]
        else:
            send = x
    elif coll in ("reducescatter", "scatter"):
        send = x
        recv = send[rank * count:(rank + 1) * count] if inplace else np.zeros(count, np_dtype)
    else:
        send = x
        one_buffer = inplace and coll != "custom"  # a custom collective has two buffers in both modes
        recv = send if one_buffer else np.zeros(count * blocks_out, np_dtype)
    if dt:
        send, recv = BFloat16(send), BFloat16(recv)
    if algo is not None:
        comm.run_algorithm(algo, send, recv, op=op, count=count)
    elif coll == "allreduce":
        comm.allreduce(send, recv, op=op)
    elif coll == "allgather":
        comm.allgather(send, recv)
    elif coll == "reducescatter":
        comm.reduce_scatter(send, recv, op=op)
    elif coll == "alltoall":
        comm.alltoall(send, recv)
    elif coll == "broadcast":
        comm.broadcast(send, recv, root=root)
    elif coll == "reduce":
        comm.reduce(send, recv, root=root, op=op)
    out = recv.bits if dt else recv
    return np.array(out, copy=True)


class RankPool:
    def __init__(self, world: int, **options):
        """``world`` rank processes, each with a communicator made with ``options``."""
        self.world = world
        ctx = multiprocessing.get_context("fork")
        port = free_port_pair()
        self.conns, self.procs = [], []
        for r in range(world):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_serve, args=(r, world, port, child, options), daemon=True)
            p.start()
            self.conns.append(parent)
            self.procs.append(p)
        self.cma = [self._recv(r, 30)[1] for r in range(world)]

    def _recv(self, rank: int, timeout: float):
        if not self.conns[rank].poll(timeout):
            self.close()
            raise TimeoutError(f"rank {rank} did not answer within {timeout:g} s (pool killed)")
        return self.conns[rank].recv()

    def run(self, *, algo=None, key=None, collective=None, mode="outofplace", dtype="float32", op="sum",
            count=1, seed=0, root=0):
        """Every rank's output after the job; RuntimeError with the first rank's error."""
        for r, c in enumerate(self.conns):
            c.send(("run", key, algo, collective, mode, dtype, op, count, seed, root))
        deadline = time.monotonic() + JOB_TIMEOUT
        answers = [self._recv(r, max(0.1, deadline - time.monotonic())) for r in range(self.world)]
        errors = [f"rank {r}: {a[1]}" for r, a in enumerate(answers) if a[0] != "ok"]
        if errors:
            raise RuntimeError("; ".join(errors))
        return [a[1] for a in answers]

    def close(self) -> None:
        for c in self.conns:
            try:
                c.send(None)
            except OSError:
                pass
        for p in self.procs:
            p.join(2)
            if p.is_alive():
                p.kill()
                p.join(2)
