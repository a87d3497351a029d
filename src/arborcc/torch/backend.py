"""arborcc as a torch.distributed backend: ``dist.init_process_group("arborcc")``.

:class:`ArborccProcessGroup` is a Python ``ProcessGroup`` (torch's route for backends
written in Python, which DDP drives through the same virtual calls as a C++ one). Its
collectives run on arborcc (:class:`~arborcc.torch.hierarchical.Transport`: the
shared-memory runtime inside a host, the torch.distributed executor between hosts):
all_reduce, broadcast, reduce, all_gather, all_gather_into_tensor, reduce_scatter,
reduce_scatter_tensor, all_to_all_single (equal splits), barrier, and their coalesced
forms. What arborcc does not run goes to gloo with one warning per job
(:mod:`arborcc.torch.fallback`). Work objects and ``async_op``: :mod:`arborcc.torch.work`.

Start-up, on every rank: the hosts of the job (:mod:`arborcc.torch.hosts`), a gloo group
for fallbacks, the shared-memory communicator of this rank's host, joined through
torch's store (:meth:`arborcc.runtime.Communicator.from_store`). The plan comes from
``ARBORCC_PLAN`` (an MSCCL XML file or directory, or the directory ``arborcc tune``
writes) when set, else the runtime's built-in default; runtime options from ``ARBORCC_*``
(:class:`arborcc.runtime.Options`), the timeout from ``init_process_group``.
"""

from __future__ import annotations

import atexit
import logging
import os
import weakref
from datetime import timedelta

from arborcc.torch.affinity import remember_affinity
from arborcc.torch.fallback import GlooFallback
from arborcc.torch.hierarchical import Transport
from arborcc.torch.hosts import exchange_layout
from arborcc.torch.name import NAME
from arborcc.torch.ops import reduction_name, unsupported
from arborcc.torch.work import CallQueue

log = logging.getLogger(__name__)  # under "arborcc.torch"
#: all-reduce shapes (type, size, reduction) whose prepared calls a group keeps (a training
#: loop's gradient buckets are a few)
PREPARED_SHAPES = 64


def plan_from_env(env: dict | None = None):
    """The plan named by ``ARBORCC_PLAN`` (checked with every other variable the runtime
    reads: :func:`arborcc.runtime.environment.runtime_settings`), or None (the built-in
    default): an algorithm file, a directory of them, or a directory ``arborcc tune``
    wrote (its ``plan.json`` lists the files, one per size bucket)."""
    from arborcc.runtime.environment import runtime_settings
    from arborcc.runtime.plan import Plan

    path = runtime_settings(env).plan
    return Plan.load(path) if path else None


def group_summary(size: int, layout, local_ranks) -> str:
    """One line on a new group: its ranks and hosts, the path its collectives take and
    the plan (``ARBORCC_PLAN`` or the runtime's default)."""
    hosts = len(layout.hosts)
    if hosts == 1:
        path = "shared memory"
    else:
        path = "shared memory inside each host, arborcc algorithms over gloo between hosts"
    plan = os.environ.get("ARBORCC_PLAN") or "the runtime's default"
    return (f"arborcc group of {size} ranks on {hosts} host{'s' * (hosts != 1)} "
            f"(ranks per host: {', '.join(str(len(r)) for r in layout.hosts)}; this host's ranks: "
            f"{', '.join(map(str, local_ranks))}); collectives on {path}; plan: {plan}")


def shutdown_at_exit(group_ref) -> None:
    """Shut a group down while the interpreter is still whole: a gloo group left for
    finalization can abort the process ("terminate called without an active exception",
    pytorch/pytorch#190489 - scripts that never call ``destroy_process_group``)."""
    group = group_ref()
    if group is not None:
        group.shutdown()


def process_group_class():
    """:class:`ArborccProcessGroup`, defined on first use (it subclasses torch's class)."""
    global ArborccProcessGroup
    if ArborccProcessGroup is None:
        ArborccProcessGroup = define_process_group()
    return ArborccProcessGroup


ArborccProcessGroup = None


def define_process_group():
    import torch
    import torch.distributed as dist

    class ArborccProcessGroup(dist.ProcessGroup):
        """The ``"arborcc"`` backend over ``size`` ranks (see the module docstring)."""

        def __init__(self, store, rank: int, size: int, timeout: timedelta = timedelta(minutes=30)):
            super().__init__(rank, size)
            self._rank, self._size = rank, size
            remember_affinity()  # before the host's communicator pins this rank to one CPU
            self.topology, self.layout = exchange_layout(store, rank, size)
            self.fallback = GlooFallback(store, rank, size, timeout)
            self.transport = Transport(store, rank, size, timeout, self.layout, self.fallback.group,
                                       plan_from_env())
            self.calls = CallQueue()
            self.prepared: dict = {}  #: (dtype, numel, RedOpType) -> prepared all-reduce or None
            self.closed = False
            atexit.register(shutdown_at_exit, weakref.ref(self))
            log.info("rank %d: %s", rank, group_summary(size, self.layout, self.transport.local_ranks))

        # -- identity ----------------------------------------------------------------

        def getBackendName(self) -> str:
            return NAME

        def getRank(self) -> int:
            return self._rank

        def getSize(self) -> int:
            return self._size

        def __repr__(self) -> str:
            return f"ArborccProcessGroup(rank={self._rank}, size={self._size}, hosts={len(self.layout.hosts)})"

        def shutdown(self) -> None:
            """Finish queued calls, close the shared-memory communicator and shut the gloo
            groups down (their worker threads joined); once, from ``destroy_process_group``
            or at interpreter exit."""
            if self.closed:
                return
            self.closed = True
            self.calls.drain()
            self.transport.close()
            self.fallback.group.shutdown()

        # -- arborcc's collectives -----------------------------------------------------

        def _run(self, fn, result, opts):
            return self.calls.submit(fn, result, getattr(opts, "asyncOp", False))

        def allreduce(self, tensors, opts=None):
            if opts is not None and len(tensors) == 1 and not opts.asyncOp and not self.calls.queued:
                t = tensors[0]  # the common call (dist.all_reduce): prepared once per shape, no per-call work
                run = self.prepared.get((t.dtype, t.numel(), opts.reduceOp))
                if run is not None and t.is_cpu and t.is_contiguous():
                    run(t.data_ptr())
                    return self.calls.done
            opts = opts or dist.AllreduceOptions()
            op = reduction_name(opts.reduceOp)
            why = unsupported(tensors, op)
            if why:
                return self.fallback.call("all_reduce", why, tensors, opts, method="allreduce", tensors=tensors,
                                          reduce_op=opts.reduceOp)

            if len(tensors) == 1:  # the common call, without a closure
                if not opts.asyncOp and not self.calls.queued:
                    run = self.prepare_allreduce(tensors[0], opts.reduceOp, op)
                    if run is not None:
                        run(tensors[0].data_ptr())
                        return self.calls.done
                return self.calls.submit(self.transport.allreduce, tensors, opts.asyncOp, tensors[0], op)

            def run():
                for t in tensors:
                    self.transport.allreduce(t, op)
            return self._run(run, tensors, opts)

        def prepare_allreduce(self, t, kind, op: str):
            """The prepared in-place all-reduce of tensors like ``t`` (checked: CPU,
            contiguous, a type and reduction arborcc runs) with reduction ``kind``
            (torch's ``RedOpType``), remembered for later calls; None where there is none
            (several hosts, slice tuning, an empty tensor)."""
            key = (t.dtype, t.numel(), kind)
            if key not in self.prepared and len(self.prepared) < PREPARED_SHAPES:
                self.prepared[key] = self.transport.inplace_allreduce(t, op)
            return self.prepared.get(key)

        def allreduce_coalesced(self, tensors, opts=None):
            opts = opts or dist.AllreduceCoalescedOptions()
            return self.allreduce(tensors, opts)

        def broadcast(self, tensors, opts=None):
            opts = opts or dist.BroadcastOptions()
            why = unsupported(tensors)
            if why:
                return self.fallback.call("broadcast", why, tensors, opts, tensors=tensors)

            def run():
                for t in tensors:
                    self.transport.broadcast(t.view(-1), opts.rootRank)
            return self._run(run, tensors, opts)

        def reduce(self, tensors, opts=None):
            opts = opts or dist.ReduceOptions()
            op = reduction_name(opts.reduceOp)
            why = unsupported(tensors, op)
            if why:
                return self.fallback.call("reduce", why, tensors, opts, tensors=tensors, reduce_op=opts.reduceOp)

            def run():
                for t in tensors:
                    self.transport.reduce(t.view(-1), opts.rootRank, op)
            return self._run(run, tensors, opts)

        def allgather(self, output_lists, inputs, opts=None):
            opts = opts or dist.AllgatherOptions()
            outs = [t for lst in output_lists for t in lst]
            shapes_ok = all(len(lst) == self._size and all(o.numel() == i.numel() and o.dtype == i.dtype for o in lst)
                            for lst, i in zip(output_lists, inputs))
            why = unsupported(list(inputs) + outs) or (None if shapes_ok else "outputs unlike the input")
            if why:
                return self.fallback.call("all_gather", why, output_lists, inputs, opts, method="allgather",
                                          tensors=inputs)

            def run():
                for lst, inp in zip(output_lists, inputs):
                    flat = torch.empty(self._size * inp.numel(), dtype=inp.dtype)
                    self.transport.allgather(inp.reshape(-1), flat)
                    for r, out in enumerate(lst):
                        out.view(-1).copy_(flat[r * inp.numel():(r + 1) * inp.numel()])
            return self._run(run, output_lists, opts)

        def all_gather_single(self, output, input, opts=None):
            opts = opts or dist.AllgatherOptions()
            why = unsupported([output, input]) or (
                None if output.numel() == self._size * input.numel() else "an output not world_size inputs")
            if why:
                return self.fallback.call("all_gather_into_tensor", why, output, input, opts, method="_allgather_base",
                                          tensors=[input])
            return self._run(lambda: self.transport.allgather(input.view(-1), output.view(-1)), [output], opts)

        _allgather_base = all_gather_single

        def all_gather_single_coalesced(self, outputs, inputs, opts=None):
            opts = opts or dist.AllgatherOptions()
            why = unsupported(list(outputs) + list(inputs))
            if why:
                return self.fallback.call("all_gather_into_tensor (coalesced)", why, outputs, inputs, opts,
                                          method="allgather_into_tensor_coalesced", tensors=inputs)

            def run():
                for o, i in zip(outputs, inputs):
                    self.transport.allgather(i.view(-1), o.view(-1))
            return self._run(run, outputs, opts)

        allgather_into_tensor_coalesced = all_gather_single_coalesced

        def reduce_scatter(self, outputs, input_lists, opts=None):
            opts = opts or dist.ReduceScatterOptions()
            op = reduction_name(opts.reduceOp)
            ins = [t for lst in input_lists for t in lst]
            why = unsupported(list(outputs) + ins, op)
            if why:
                return self.fallback.call("reduce_scatter", why, outputs, input_lists, opts, tensors=outputs,
                                          reduce_op=opts.reduceOp)

            def run():
                for out, lst in zip(outputs, input_lists):
                    flat = torch.cat([t.reshape(-1) for t in lst])
                    self.transport.reduce_scatter(flat, out.view(-1), op)
            return self._run(run, outputs, opts)

        def reduce_scatter_single(self, output, input, opts=None):
            opts = opts or dist.ReduceScatterOptions()
            op = reduction_name(opts.reduceOp)
            why = unsupported([output, input], op) or (
                None if input.numel() == self._size * output.numel() else "an input not world_size outputs")
            if why:
                return self.fallback.call("reduce_scatter_tensor", why, output, input, opts, method="_reduce_scatter_base",
                                          tensors=[input], reduce_op=opts.reduceOp)
            return self._run(lambda: self.transport.reduce_scatter(input.view(-1), output.view(-1), op), [output],
                             opts)

        _reduce_scatter_base = reduce_scatter_single

        def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
            opts = opts or dist.ReduceScatterOptions()
            op = reduction_name(opts.reduceOp)
            why = unsupported(list(outputs) + list(inputs), op)
            if why:
                return self.fallback.call("reduce_scatter_tensor (coalesced)", why, outputs, inputs, opts,
                                          method="reduce_scatter_tensor_coalesced", tensors=inputs,
                                          reduce_op=opts.reduceOp)

            def run():
                for o, i in zip(outputs, inputs):
                    self.transport.reduce_scatter(i.view(-1), o.view(-1), op)
            return self._run(run, outputs, opts)

        reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

        def all_to_all_single(self, output, input, output_splits, input_splits, opts=None):
            opts = opts or dist.AllToAllOptions()
            n = input.numel()
            even = (not output_splits or len(set(output_splits)) == 1) and (
                not input_splits or len(set(input_splits)) == 1)
            why = unsupported([output, input]) or (
                None if even and n % self._size == 0 and output.numel() == n else "unequal splits")
            if why:
                return self.fallback.call("all_to_all_single", why, output, input, output_splits, input_splits, opts,
                                          method="alltoall_base", tensors=[input])
            return self._run(lambda: self.transport.alltoall(input.view(-1), output.view(-1)), [output], opts)

        alltoall_base = all_to_all_single

        def barrier(self, opts=None):
            opts = opts or dist.BarrierOptions()
            return self._run(self.transport.barrier, [], opts)

        # -- gloo's ------------------------------------------------------------------------

        def send(self, tensors, dst: int, tag: int):
            return self.fallback.call("send", "point-to-point operations", tensors, dst, tag)

        def recv(self, tensors, src: int, tag: int):
            return self.fallback.call("recv", "point-to-point operations", tensors, src, tag)

        def recv_anysource(self, tensors, tag: int):
            return self.fallback.call("recv_anysource", "point-to-point operations", tensors, tag)

        def gather(self, outputs, inputs, opts=None):
            return self.fallback.call("gather", "gather and scatter", outputs, inputs, opts or dist.GatherOptions())

        def scatter(self, outputs, inputs, opts=None):
            return self.fallback.call("scatter", "gather and scatter", outputs, inputs, opts or dist.ScatterOptions())

        def alltoall(self, outputs, inputs, opts=None):
            return self.fallback.call("all_to_all", "lists of tensors", outputs, inputs, opts or dist.AllToAllOptions(),
                                      method="alltoall")

    return ArborccProcessGroup

