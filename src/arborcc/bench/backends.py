"""Sweeps in the manner of nccl-tests on three back-ends: arborcc's shared-memory runtime,
torch.distributed's gloo, and MPICH through mpi4py, each following the protocol of
:mod:`arborcc.bench.protocol`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict

import numpy as np

from arborcc.bench.mpi import WRONG_WORLD
from arborcc.bench.protocol import Row, Spec, block_count, count_wrong, pattern, rows_from_timings, time_calls
from arborcc.errors import InputError, MissingDependencyError
from arborcc.ir.collectives import call_blocks
from arborcc.runtime.errors import CommunicationError

BACKENDS = ("arborcc", "gloo", "mpi")
#: the collectives gloo and MPI run (gather and scatter run only as an arborcc --xml algorithm)
BASELINE_COLLECTIVES = frozenset({"allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall"})


def check_backend(backend: str, spec: Spec) -> None:
    """Refuse, before any rank starts, a sweep ``backend`` cannot run as ``spec`` asks
    (one line naming the flags)."""
    if backend == "arborcc":
        from arborcc.runtime.environment import MAX_RANKS

        if spec.ranks > MAX_RANKS:
            raise InputError(f"{spec.ranks} ranks: arborcc's shared-memory data plane holds at most {MAX_RANKS}",
                             source=spec.xml or "-n")
        return
    if backend not in ("gloo", "mpi"):
        raise InputError(f"unknown back-end {backend!r} (known: {', '.join(BACKENDS)})", source="--backend")
    if spec.collective not in BASELINE_COLLECTIVES:
        raise InputError(f"{backend} runs {', '.join(sorted(BASELINE_COLLECTIVES))}, not {spec.collective} "
                         f"(the algorithm of --xml runs on arborcc only)", source=f"--backend {backend}")
    if backend == "mpi" and spec.dtype == "bfloat16":
        raise InputError("MPI has no bfloat16 type", source="--backend mpi -d bfloat16")


# -- the arborcc back-end ----------------------------------------------------------------

def _arborcc_rank(spec: Spec) -> dict:
    from arborcc.runtime.arrays import BFloat16
    from arborcc.runtime.communicator import Communicator
    from arborcc.runtime.plan import Plan

    algo = None
    if spec.xml:
        from arborcc.ir.load import load_algorithm
        algo = load_algorithm(spec.xml)
    comm = Communicator.from_env(plan=Plan(), **spec.options)
    n, rank = comm.world_size, comm.rank
    bf16 = spec.dtype == "bfloat16"
    np_dtype = np.uint16 if bf16 else np.dtype(spec.dtype)
    results = {}
    blocks_in, blocks_out = call_blocks(spec.collective, n)

    def call(send, recv, inplace):
        wrap = BFloat16 if bf16 else (lambda a: a)
        s, r = wrap(send), wrap(recv)
        if algo is not None:
            comm.run_algorithm(algo, s, r, op=spec.op, count=count)
        elif spec.collective == "allreduce":
            comm.allreduce(s, r, op=spec.op)
        elif spec.collective == "allgather":
            comm.allgather(s, r)
        elif spec.collective == "reducescatter":
            comm.reduce_scatter(s, r, op=spec.op)
        elif spec.collective == "broadcast":
            comm.broadcast(s, r, root=spec.root)
        elif spec.collective == "reduce":
            comm.reduce(s, r, root=spec.root, op=spec.op)
        elif spec.collective == "alltoall":
            comm.alltoall(s, r)

    for size in spec.sizes:
        count = block_count(spec, size)
        memory = None
        for inplace in (False, True):
            key = f"{size}:{int(inplace)}"
            if algo is not None and not _mode_supported(algo, inplace):
                results[key] = {"skipped": f"the algorithm is not {'in place' if inplace else 'out of place'}"}
                continue
            base = np.ones(count * max(blocks_in, blocks_out), np_dtype)
            if spec.shared_buffers and memory is None:  # one shared array per size holds both modes' buffers
                memory = comm.shared_array(count * (blocks_in + blocks_out), np_dtype)
            send, recv = _buffers(base, count, rank, blocks_in, blocks_out, inplace, spec.collective, memory=memory)
            try:
                times = time_calls(lambda: call(send, recv, inplace), comm.barrier, spec.warmup, spec.iters)
                wrong = 0
                if spec.check:
                    values = pattern(spec.dtype, spec.op, count, rank, blocks_in)
                    if bf16:
                        values = _to_bf16_bits(values)
                    send, recv = _buffers(base, count, rank, blocks_in, blocks_out, inplace, spec.collective, values,
                                          memory)
                    call(send, recv, inplace)
                    got = _from_bf16_bits(recv) if bf16 else recv
                    wrong = count_wrong(got, spec, count, rank)
                results[key] = {"times": times, "wrong": wrong}
            except Exception as e:  # a row that cannot run says why; the sweep goes on
                results[key] = {"error": str(e).splitlines()[0] if str(e) else type(e).__name__}
                if isinstance(e, CommunicationError) and _communicator_lost(str(e)):
                    return _not_run_after(results, spec, f"not run: an earlier call ended the communicator ({e})")
        if memory is not None:
            comm.free_shared(memory)
            send = recv = memory = None
    return results


def _communicator_lost(message: str) -> bool:
    """Whether a failed call leaves the communicator unusable (aborted, a peer dead or late):
    the sweep's later calls would fail the same way, or wait for the timeout each."""
    return any(word in message for word in ("aborted", "died", "timed out"))


def _not_run_after(results: dict, spec: Spec, note: str) -> dict:
    """``results`` with every size and mode not yet measured marked as not run (``note``)."""
    for size in spec.sizes:
        for inplace in (False, True):
            results.setdefault(f"{size}:{int(inplace)}", {"error": note.splitlines()[0]})
    return results


def _mode_supported(algo, inplace: bool) -> bool:
    from arborcc.ir.aliasing import Mode, declared_modes
    return (Mode.INPLACE if inplace else Mode.OUTOFPLACE) in declared_modes(algo)


def _buffers(base, count, rank, blocks_in, blocks_out, inplace, collective, values=None, memory=None):
    """Send and receive arrays as NCCL lays them out in and out of place: new arrays, or
    views of ``memory`` (a shared array of ``count x (blocks_in + blocks_out)`` elements)."""
    n_in, n_out = count * blocks_in, count * blocks_out
    if inplace:
        buf = base[:max(n_in, n_out)]
        if memory is not None:
            memory[:buf.size] = buf
            buf = memory[:buf.size]
        if values is not None:
            if collective in ("allgather", "gather"):
                buf[rank * count:(rank + 1) * count] = values
            else:
                buf[:n_in] = values
        if collective in ("allgather", "gather"):
            return buf[rank * count:(rank + 1) * count], buf
        if collective in ("reducescatter", "scatter"):
            return buf, buf[rank * count:(rank + 1) * count]
        return buf, buf
    if memory is not None:
        send, recv = memory[:n_in], memory[n_in:n_in + n_out]
        send[:] = base[:n_in] if values is None else values
        recv[:] = 0
        return send, recv
    send = base[:n_in].copy() if values is None else values.copy()
    recv = np.zeros(n_out, base.dtype)
    return send, recv


def _to_bf16_bits(values: np.ndarray) -> np.ndarray:
    bits = values.astype(np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def _from_bf16_bits(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def run_arborcc(spec: Spec) -> list[Row]:
    from arborcc.runtime.launch import run_ranks

    try:
        per_rank = run_ranks(_arborcc_rank, spec.ranks, (spec,), timeout=spec.timeout)
    except CommunicationError as e:  # the launcher's report ends with the rank's traceback: its first line says it
        raise CommunicationError(f"--backend arborcc: {str(e).splitlines()[0]}") from None
    return rows_from_timings("arborcc", spec, per_rank)


# -- gloo (torch.distributed) ------------------------------------------------------------

def _gloo_rank(spec: Spec) -> dict:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=__import__("datetime").timedelta(seconds=spec.timeout))
    rank, n = dist.get_rank(), dist.get_world_size()
    if n != spec.ranks:
        raise CommunicationError(f"gloo's world has {n} ranks, not the {spec.ranks} of -n")
    tdtype = getattr(torch, spec.dtype)
    red = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
           "max": dist.ReduceOp.MAX, "avg": getattr(dist.ReduceOp, "AVG", None)}[spec.op]
    results = {}
    try:
        for size in spec.sizes:
            count = block_count(spec, size)
            blocks_in, blocks_out = call_blocks(spec.collective, n)
            for inplace in (False, True):
                key = f"{size}:{int(inplace)}"
                send = torch.ones(count * blocks_in, dtype=tdtype)
                recv = send if inplace and blocks_in == blocks_out else torch.zeros(count * blocks_out, dtype=tdtype)

                def call():
                    if spec.collective == "allreduce":
                        if not inplace:
                            recv.copy_(send)  # gloo reduces in place: out of place costs a copy
                        dist.all_reduce(recv, op=red)
                    elif spec.collective == "allgather":
                        src = recv[rank * count:(rank + 1) * count] if inplace else send
                        dist.all_gather_into_tensor(recv, src)
                    elif spec.collective == "reducescatter":
                        dist.reduce_scatter_tensor(recv, send, op=red)
                    elif spec.collective == "broadcast":
                        if not inplace and rank == spec.root:
                            recv.copy_(send)
                        dist.broadcast(recv, spec.root)
                    elif spec.collective == "reduce":
                        if not inplace:
                            recv.copy_(send)  # gloo reduces in place: out of place costs a copy
                        dist.reduce(recv, spec.root, op=red)
                    elif spec.collective == "alltoall":  # gloo exchanges between two tensors: in place costs a copy
                        dist.all_to_all_single(recv, send.clone() if inplace else send)

                try:
                    times = time_calls(call, dist.barrier, spec.warmup, spec.iters)
                    wrong = 0
                    if spec.check:
                        values = torch.from_numpy(pattern(spec.dtype if spec.dtype != "bfloat16" else "float32",
                                                          spec.op, count, rank, blocks_in)).to(tdtype)
                        send.copy_(values) if send.numel() == values.numel() else None
                        if inplace and spec.collective == "allgather":
                            recv[rank * count:(rank + 1) * count].copy_(values)
                        call()
                        got = (recv.float() if recv.dtype == torch.bfloat16 else recv).numpy()
                        wrong = count_wrong(got, spec, count, rank)
                    results[key] = {"times": times, "wrong": wrong}
                except Exception as e:
                    results[key] = {"error": str(e).splitlines()[0] if str(e) else type(e).__name__}
    finally:
        dist.destroy_process_group()
    return results


def run_gloo(spec: Spec) -> list[Row]:
    if importlib.util.find_spec("torch") is None:
        raise MissingDependencyError("--backend gloo", "torch", "torch")
    import torch.distributed  # noqa: F401  imported once here: the ranks are forked from this process with it
    from arborcc.runtime.launch import run_ranks

    try:
        per_rank = run_ranks(_gloo_rank, spec.ranks, (spec,), timeout=spec.timeout)
    except CommunicationError as e:
        raise CommunicationError(f"--backend gloo: {str(e).splitlines()[0]}") from None
    return rows_from_timings("gloo", spec, per_rank)


# -- MPICH through mpi4py ------------------------------------------------------------------

def mpiexec_path() -> str:
    """The mpiexec next to this Python (pip's ``mpich``), else on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    found = here if os.path.exists(here) else shutil.which("mpiexec")
    if not found:
        raise MissingDependencyError("--backend mpi", "mpich", "mpi")
    return found


def run_mpi(spec: Spec) -> list[Row]:
    if importlib.util.find_spec("mpi4py") is None:
        raise MissingDependencyError("--backend mpi", "mpi4py", "mpi")
    import signal

    from arborcc.runtime.launch import die_with_parent

    with tempfile.TemporaryDirectory(prefix="arborcc-bench-") as tmp:
        spec_path, out_path = os.path.join(tmp, "spec.json"), os.path.join(tmp, "out.json")
        with open(spec_path, "w") as f:
            json.dump(asdict(spec), f)
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
        cmd = [mpiexec_path(), "-n", str(spec.ranks), sys.executable, "-m", "arborcc.bench.mpi", spec_path,
               out_path]
        try:
            proc = subprocess.run(cmd, env=env, timeout=spec.timeout, capture_output=True, text=True,
                                  preexec_fn=die_with_parent(signal.SIGTERM))  # mpiexec ends its ranks
        except subprocess.TimeoutExpired:
            raise InputError(f"MPI sweep did not finish within {spec.timeout:g} s", source="--backend mpi") from None
        if proc.returncode == WRONG_WORLD:
            raise InputError(f"the ranks {cmd[0]} -n {spec.ranks} started do not share one MPI world of "
                             f"{spec.ranks} (mpiexec and mpi4py of different MPI installations?): not an MPI run "
                             f"of {spec.ranks} ranks", source="--backend mpi")
        if proc.returncode != 0 or not os.path.exists(out_path):
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise InputError(f"mpiexec failed (status {proc.returncode}): {last}", source="--backend mpi")
        try:
            with open(out_path) as f:
                per_rank = json.load(f)
        except ValueError:
            per_rank = None
    if not (isinstance(per_rank, list) and len(per_rank) == spec.ranks):
        raise InputError(f"{cmd[0]} -n {spec.ranks} did not report {spec.ranks} ranks of one MPI world: not an MPI "
                         f"run of {spec.ranks} ranks", source="--backend mpi")
    return rows_from_timings("mpi", spec, per_rank)


def run_backend(backend: str, spec: Spec) -> list[Row]:
    if backend == "arborcc":
        return run_arborcc(spec)
    if backend == "gloo":
        return run_gloo(spec)
    if backend == "mpi":
        return run_mpi(spec)
    raise InputError(f"unknown back-end {backend!r} (known: {', '.join(BACKENDS)})", source="--backend")
