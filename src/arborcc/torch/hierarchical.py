"""The data path of the backend: shared memory inside a host, the torch.distributed
executor between hosts.

On one host every collective is the shared-memory runtime's
(:class:`arborcc.runtime.Communicator`). Across hosts (:class:`~arborcc.torch.hosts.HostLayout`):

- all-reduce is hierarchical, as in BlueConnect (M. Cho, U. Finkler, D. Kung, H. Hunter,
  "BlueConnect: Decomposing All-Reduce for Deep Learning on Heterogeneous Network
  Hierarchy", SysML 2019): a reduce-scatter inside each host, an all-reduce of each
  rank's shard among the ranks at the same position on every host (the executor over a
  gloo group of those ranks, running arborcc's algorithm for that group), an all-gather
  inside each host. When the hosts run different numbers of ranks or the tensor does
  not split into the host's ranks: an all-reduce inside the host, one between the first
  ranks of the hosts, a broadcast inside the host. This is the decomposition of the
  library's hierarchical all-reduce (:mod:`arborcc.library.hierarchical`) but not its
  program, and does not use it: that is one program over every rank for one runtime,
  while here each phase is a whole collective on another transport - shared memory
  inside a host, gloo between hosts - and may itself run any arborcc algorithm
  (:meth:`Transport.allreduce`);
- the other collectives run one arborcc algorithm over every rank with the executor
  (:class:`arborcc.torch.executor.GroupExecutor`) on a gloo group of the whole job.

A failure stops the whole job, naming the rank that failed: the host's other ranks by an
abort of its communicator, the other hosts' ranks through torch's store (where waiting
executors look for it).
"""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from datetime import timedelta

from arborcc.runtime.errors import CommunicationError
from arborcc.runtime.plan import Plan
from arborcc.torch.affinity import free_threads
from arborcc.torch.hosts import HostLayout
from arborcc.torch.ops import DTYPE_NAMES


#: starts the part of an abort message whose ranks are already the job's
JOB_RANKS_MARK = "(job ranks) "
#: the store key where the first rank that fails leaves its error for the other hosts
FAILURE_KEY = "arborcc/failure"


def shared_machine_options(colocated: int, env: dict | None = None) -> dict:
    """Runtime options for a host's communicator when the job has more ranks on this
    machine than it has CPUs (several "hosts" on one machine): no pinning, and waiting
    that yields at once, as the runtime does when its own ranks outnumber the CPUs; the
    ``ARBORCC_*`` variables still win."""
    env = os.environ if env is None else env
    from arborcc.runtime.launch import available_cpus

    if colocated <= available_cpus():
        return {}
    wanted = {"pin": False, "spin_us": 2.0, "yield_us": 1000.0}
    return {k: v for k, v in wanted.items() if f"ARBORCC_{k.upper()}" not in env}


class Transport:
    """The collectives of one rank of the backend, on flat contiguous CPU tensors."""

    def __init__(self, store, rank: int, size: int, timeout: timedelta, layout: HostLayout, world_gloo,
                 plan: Plan | None = None):
        from arborcc.runtime.communicator import Communicator
        from arborcc.torch.executor import GroupExecutor

        import torch.distributed as dist

        self.rank, self.size, self.layout = rank, size, layout
        self.store = store
        seconds = timeout.total_seconds()
        host = layout.host_of(rank)
        self.local_ranks = layout.hosts[host]
        self.local_rank = self.local_ranks.index(rank)
        self.multi_host = len(layout.hosts) > 1
        self.local = Communicator.from_store(dist.PrefixStore(f"arborcc/shm{host}/", store), self.local_rank,
                                             len(self.local_ranks), plan, timeout=seconds,
                                             **shared_machine_options(layout.colocated))
        self.inter = self.leaders = self.world = None
        if self.multi_host:
            peers = layout.peers(rank)
            with free_threads():  # gloo's threads not on the one CPU the communicator pinned this rank to
                between = dist.ProcessGroupGloo(dist.PrefixStore(f"arborcc/inter{self.local_rank}/", store),
                                                peers.index(rank), len(peers), timeout)
            self.inter = GroupExecutor(between, timeout=seconds, plan=plan, rank_names=list(peers),
                                       failure=self.failure)
            self.leaders = self.inter if self.local_rank == 0 else None
            self.world = GroupExecutor(world_gloo, timeout=seconds, plan=plan, failure=self.failure)

    def close(self) -> None:
        """Close the host's communicator and shut down the gloo group between hosts (the
        job-wide gloo group belongs to the caller)."""
        self.local.close()
        if self.inter is not None:
            self.inter.group.shutdown()

    @contextmanager
    def job_ranks(self):
        """Errors name ranks by their ranks in the job, and a failure between hosts stops
        this host's other ranks too (their calls fail with the same message)."""
        try:
            yield
        except CommunicationError as e:
            if not self.multi_host:
                raise
            text = str(e)
            if getattr(e, "local", True):  # the host's communicator numbers ranks 0..L-1 (up to our mark)
                local, mark, job = text.partition(JOB_RANKS_MARK)
                text = re.sub(r"\brank (\d+)", self.job_rank, local) + job
            try:
                self.local.abort(JOB_RANKS_MARK + text)
            except Exception:  # already failed: its ranks know
                pass
            try:  # the ranks of other hosts, waiting between hosts, read it there
                self.store.set(FAILURE_KEY, text.encode())
            except Exception:  # the store is gone with the job
                pass
            raise CommunicationError(text) from None

    def failure(self) -> str | None:
        """The first failure any rank of the job reported, or None."""
        try:
            if self.store.check([FAILURE_KEY]):
                return bytes(self.store.get(FAILURE_KEY)).decode()
        except Exception:  # the store is gone: the waits will time out or fail on their own
            return None
        return None

    def job_rank(self, m: re.Match) -> str:
        r = int(m.group(1))
        return f"rank {self.local_ranks[r]}" if r < len(self.local_ranks) else m.group(0)

    def between_hosts(self, fn, *args) -> None:
        """``fn(*args)`` on an executor (whose errors already name the job's ranks)."""
        try:
            fn(*args)
        except CommunicationError as e:
            e.local = False
            raise

    def barrier(self) -> None:
        with self.job_ranks():
            self.local.barrier()
            if self.multi_host:
                self.between_hosts(lambda: self.world.group.barrier().wait())

    def inplace_allreduce(self, t, op: str):
        """``run(address)``: the in-place all-reduce of tensors of ``t``'s size and type,
        prepared on this host's communicator, without per-call checks
        (:meth:`arborcc.runtime.Communicator.inplace_allreduce`); None across hosts."""
        if self.multi_host:
            return None
        return self.local.inplace_allreduce(t.numel(), DTYPE_NAMES[str(t.dtype)], op)

    def allreduce(self, t, op: str) -> None:
        """All-reduce ``t`` in place. Across hosts, the three phases of a hierarchical
        all-reduce as three collectives on two transports (module doc): the library's
        :func:`arborcc.library.hierarchical.hierarchical_allreduce` builds one program for
        one runtime, which would put the phases inside a host on gloo too."""
        if not self.multi_host:
            self.local.allreduce(t, op=op)
            return
        t = t.view(-1)
        step = "sum" if op == "avg" else op
        n, parts = t.numel(), len(self.local_ranks)
        with self.job_ranks():
            if self.layout.uniform and n % parts == 0:
                c = n // parts
                shard = t[self.local_rank * c:(self.local_rank + 1) * c]
                self.local.reduce_scatter(t, shard, op=step)
                self.between_hosts(self.inter.allreduce, shard, step)
                self.local.allgather(shard, t)
            else:
                self.local.allreduce(t, op=step)
                if self.leaders is not None:
                    self.between_hosts(self.leaders.allreduce, t, step)
                self.local.broadcast(t, root=0)
        if op == "avg":
            t.div_(self.size)

    def broadcast(self, t, root: int) -> None:
        if self.multi_host:
            self.world.broadcast(t, root)
        else:
            self.local.broadcast(t, root=root)

    def reduce(self, t, root: int, op: str) -> None:
        if self.multi_host:
            self.world.reduce(t, root, op)
        else:
            self.local.reduce(t, root=root, op=op)

    def allgather(self, send, recv) -> None:
        if self.multi_host:
            self.world.allgather(send, recv)
        else:
            self.local.allgather(send, recv)

    def reduce_scatter(self, send, recv, op: str) -> None:
        if self.multi_host:
            self.world.reduce_scatter(send, recv, op)
        else:
            self.local.reduce_scatter(send, recv, op=op)

    def alltoall(self, send, recv) -> None:
        if self.multi_host:
            self.world.alltoall(send, recv)
        else:
            self.local.alltoall(send, recv)
