"""Topologies: devices, directed links, hosts and ranks - where every pipeline starts.

:mod:`.model` (the immutable :class:`~arborcc.topology.model.Topology` and its builder),
:mod:`.routing` (the path a transfer takes), the makers of topologies - :mod:`.machines`
(built-in machines), :mod:`.cluster` (several of them over a network), :mod:`.readers`
(files: arborcc YAML/JSON, NCCL topology XML, ``nvidia-smi topo -m``), :mod:`.detect`
(this machine, through NVML) - and :mod:`.allocation` (sub-topologies, allocation
classes) and :mod:`.render` (text for humans).
"""

from arborcc.lazy import lazy_exports

#: public name -> module that defines it (imported on first use)
EXPORTS = {
    "Topology": "arborcc.topology.model",
    "TopologyBuilder": "arborcc.topology.model",
    "Device": "arborcc.topology.model",
    "Link": "arborcc.topology.model",
    "DeviceKind": "arborcc.topology.model",
    "LinkKind": "arborcc.topology.model",
    "Route": "arborcc.topology.routing",
    "build_machine": "arborcc.topology.machines",
    "build_cluster": "arborcc.topology.cluster",
    "read_topology": "arborcc.topology.readers",
    "detect_topology": "arborcc.topology.detect",
    "induced": "arborcc.topology.allocation",
}
__getattr__, __dir__ = lazy_exports(__name__, EXPORTS)
__all__ = list(EXPORTS)
