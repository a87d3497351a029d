"""Executing algorithms.

The numpy reference executor, the semantics every runtime must match, is
:mod:`arborcc.ir.reference` (below both the verifier and the runtimes).

- :class:`Communicator`: the shared-memory runtime, one process per rank on one machine,
  its data plane a C++ interpreter of the IR (:mod:`arborcc.runtime.native`); collectives
  on numpy arrays and torch CPU tensors, algorithms chosen by a :class:`Plan`.

Modules in the order a call flows: ``arrays`` (the caller's memory), ``plan`` (which
algorithm; ``direct`` holds the built-in ones), ``lowering`` (IR to data-plane rows),
``communicator`` (rendezvous in ``rendezvous``, slice tuning in ``miad``, shared arrays
in ``windows``, every environment variable checked in ``environment``), ``launch``
(local ranks). ``arborcc bench`` and the demo's last stage are :mod:`arborcc.bench`,
above this package.
"""

from arborcc.lazy import lazy_exports

#: public name -> module that defines it (imported on first use)
EXPORTS = {
    "Communicator": "arborcc.runtime.communicator",
    "Options": "arborcc.runtime.communicator",
    "Plan": "arborcc.runtime.plan",
    "BFloat16": "arborcc.runtime.arrays",
    "CommunicationError": "arborcc.runtime.errors",
}
__getattr__, __dir__ = lazy_exports(__name__, EXPORTS)
__all__ = list(EXPORTS)
