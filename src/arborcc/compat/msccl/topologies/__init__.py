"""``msccl.topologies``: topology constructors of the public GC3 tools (generic shapes,
copies over a network, NVIDIA machines). Not provided: the tools' AMD machines
(``amd4``, ``amd8``) and topology transformers (``reverse_topology``,
``binarize_topology``), which no example program uses.

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from arborcc.compat.msccl.topologies.distributed import distributed_fully_connected, distributed_hub_and_spoke
from arborcc.compat.msccl.topologies.generic import fully_connected, hub_and_spoke, line, ring, star
from arborcc.compat.msccl.topologies.nvidia import dgx1, dgx_a100, nvlink_only
from arborcc.compat.msccl.topologies.topology import Topology

_arborcc_compat = True

__all__ = ["Topology", "fully_connected", "ring", "line", "star", "hub_and_spoke",
           "distributed_fully_connected", "distributed_hub_and_spoke", "dgx1", "dgx_a100", "nvlink_only"]
