"""PyTorch integration: arborcc as a torch.distributed back-end, a DDP communication hook,
and an executor that runs any arborcc algorithm over torch.distributed's point-to-point
operations.

Modules in the order a call flows: ``ops`` (torch's element types and reduction
operators), ``affinity`` (the CPUs of threads started after the rank was pinned),
``hosts`` (which ranks share a host: the job's topology), ``executor``
(IR algorithms over a process group's sends and receives), ``hierarchical`` (shared
memory inside a host, the executor between hosts), ``fallback`` (gloo for what arborcc
does not run, with a one-time warning), ``work`` (the Work objects torch expects),
``backend`` (the ``ProcessGroup`` registered as ``"arborcc"``), ``hook`` (DDP's
communication hook), ``launch`` (``arborcc.init()``).

Importing this package loads nothing; its names load their modules (and torch) on
first use.
"""

from arborcc.lazy import lazy_exports

#: public name -> module that defines it (imported on first use)
EXPORTS = {
    "GroupExecutor": "arborcc.torch.executor",
    "process_group_class": "arborcc.torch.backend",
    "register_backend": "arborcc.torch.backend",
    "allreduce_hook": "arborcc.torch.hook",
    "hook_state": "arborcc.torch.hook",
    "FallbackWarning": "arborcc.torch.fallback",
    "init": "arborcc.torch.launch",
    "free_threads": "arborcc.torch.affinity",
}
__getattr__, __dir__ = lazy_exports(__name__, EXPORTS)
__all__ = list(EXPORTS)
