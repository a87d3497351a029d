"""Executing algorithms.

- :mod:`arborcc.runtime.reference`: the numpy reference executor (the semantics).
- :class:`Communicator`: the shared-memory runtime, one process per rank on one machine,
  its data plane a C++ interpreter of the IR (:mod:`arborcc.runtime.native`); collectives
  on numpy arrays and torch CPU tensors, algorithms chosen by a :class:`Plan`.

Modules in the order a call flows: ``arrays`` (the caller's memory), ``plan`` (which
algorithm; ``direct`` holds the built-in ones), ``lowering`` (IR to data-plane rows),
``communicator`` (rendezvous in ``rendezvous``, slice tuning in ``miad``), ``launch``
(local ranks), ``benchmark``/``bench_report``/``bench_cli``/``bench_mpi``/``membw``
(``arborcc bench``), ``demo_step`` (the demo's last stage).
"""

from arborcc.runtime.arrays import BFloat16
from arborcc.runtime.communicator import Communicator, Options
from arborcc.runtime.errors import CommunicationError
from arborcc.runtime.plan import Plan

__all__ = ["Communicator", "Options", "Plan", "BFloat16", "CommunicationError"]
