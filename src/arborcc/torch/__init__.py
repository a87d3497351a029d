"""PyTorch integration: arborcc as a torch.distributed back-end, a DDP communication hook,
and an executor that runs any arborcc algorithm over torch.distributed's point-to-point
operations.

Modules in the order a call flows: ``ops`` (torch's element types and reduction
operators), ``affinity`` (the CPUs of threads started after the rank was pinned),
``hosts`` (which ranks share a host: the job's topology), ``executor``
(IR algorithms over a process group's sends and receives), ``hierarchical`` (shared
memory inside a host, the executor between hosts), ``fallback`` (gloo for what arborcc
does not run, warned once per job), ``work`` (the Work objects torch expects),
``backend`` (the ``ProcessGroup`` registered as ``"arborcc"``), ``registration`` (the
name ``"arborcc"``, module ``name``, in torch's table of backends), ``hook`` (DDP's communication hook),
``launch`` (``arborcc.init()``).

Importing this package registers the backend, so ``dist.init_process_group("arborcc")``
works after ``import arborcc.torch``: it imports ``torch.distributed`` when torch is
installed (``import torch`` does too) and nothing when it is not. Its other names load
their modules on first use.
"""

from arborcc.lazy import lazy_exports
from arborcc.torch.registration import register_if_torch

#: public name -> module that defines it (imported on first use)
EXPORTS = {
    "GroupExecutor": "arborcc.torch.executor",
    "process_group_class": "arborcc.torch.backend",
    "register_backend": "arborcc.torch.registration",
    "allreduce_hook": "arborcc.torch.hook",
    "hook_state": "arborcc.torch.hook",
    "FallbackWarning": "arborcc.torch.fallback",
    "init": "arborcc.torch.launch",
    "free_threads": "arborcc.torch.affinity",
}
__getattr__, __dir__ = lazy_exports(__name__, EXPORTS)
__all__ = list(EXPORTS)

register_if_torch()
