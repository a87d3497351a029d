"""Allocations: the GPUs a job is handed, and the machine as that job sees it.

``induced`` keeps the chosen GPUs (in the given rank order) and every relay device of
their hosts and of the network, so PCIe/CPU/NIC routes between the chosen GPUs stay
exactly as on the whole machine; the other GPUs and their links disappear.

``unique_allocations`` bins all allocations of k GPUs by isomorphism, as the Blink
paper does (section 5.2: "by topology uniqueness"; 46 classes of 3-8 NVLink-connected
GPUs on DGX-1V, 14 on DGX-1P). ``fabric="nvlink"`` compares the NVLink fabric (GPUs
and NVSwitches joined by NVLink, lane counts included) and keeps only allocations it
connects - Blink's definition; ``fabric="full"`` compares the whole induced topology
(every device kind, link kind, lane count and bandwidth) and keeps every allocation.

References:

* Blink: G. Wang, S. Venkataraman, A. Phanishayee, N. Devanur, J. Thelin, I. Stoica, "Blink:
  Fast and Generic Collectives for Distributed ML", MLSys 2020, https://arxiv.org/abs/1910.04940
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from math import comb
from typing import TYPE_CHECKING, Callable, Sequence

from arborcc.errors import TopologyError
from arborcc.limits import limit
from arborcc.topology.model import DeviceKind, LinkKind, Topology, TopologyBuilder

if TYPE_CHECKING:
    import networkx as nx

FABRICS = ("nvlink", "full")


def resolve_gpus(topology: Topology, spec: str | Sequence[str | int], source: str = "--gpus") -> list[str]:
    """GPU ids from ``"1,4,5,6"`` / ``[1, 4]`` (rank positions) or device ids (``n1.gpu3``)."""
    items = [s.strip() for s in spec.split(",")] if isinstance(spec, str) else list(spec)
    if isinstance(spec, str) and not spec.strip():
        raise TopologyError("an empty GPU list (leave the flag out to use every GPU)", source=source)
    gpus: list[str] = []
    for k, item in enumerate(items):
        if item == "":
            raise TopologyError(f"item {k + 1} of {spec!r} is empty", source=source)
        if isinstance(item, int) or (isinstance(item, str) and item.isdigit()):
            k = int(item)
            if not 0 <= k < topology.num_ranks:
                raise TopologyError(f"GPU {k} does not exist (the topology has GPUs 0-{topology.num_ranks - 1})",
                                    source=source)
            gpu = topology.ranks[k]
        elif item in topology.devices and topology.devices[item].is_gpu:
            gpu = item
        else:
            raise TopologyError(f"{item!r} is neither a GPU number nor a GPU id of {topology.name}", source=source)
        if gpu in gpus:
            raise TopologyError(f"GPU {item} is listed twice", source=source)
        gpus.append(gpu)
    if not gpus:
        raise TopologyError("no GPU given", source=source)
    return gpus


def induced(topology: Topology, gpus: Sequence[str], name: str | None = None) -> Topology:
    """The topology a job on ``gpus`` sees (rank i = ``gpus[i]``); see module doc."""
    chosen = set(gpus)
    hosts = {topology.devices[g].host for g in gpus}
    keep = [d for d in topology.devices.values()
            if d.id in chosen or (not d.is_gpu and (d.host is None or d.host in hosts))]
    kept = {d.id for d in keep}
    label = name or f"{topology.name}[{','.join(_short(topology, g) for g in gpus)}]"
    b = TopologyBuilder(label, source=label, meta={**topology.meta, "parent": topology.name, "allocation": list(gpus)})
    for d in keep:
        b.add_device(d)
    for l in topology.links.values():
        if l.src in kept and l.dst in kept:
            b.add_link(l)
    return b.build(ranks=list(gpus))


def _short(topology: Topology, gpu: str) -> str:
    d = topology.devices[gpu]
    return str(d.index) if len(topology.hosts) <= 1 and d.index is not None else gpu


@dataclass(frozen=True)
class AllocationClass:
    """One isomorphism class: its smallest member (by GPU position) and how many there are."""

    gpus: tuple[str, ...]
    members: int
    nvlink_edges: tuple[tuple[str, str, int], ...]  #: (gpu, gpu, lanes) among the representative's GPUs


def _fabric_graph(topology: Topology, gpus: Sequence[str], fabric: str) -> nx.Graph:
    import networkx as nx

    chosen = set(gpus)
    g = nx.Graph()
    if fabric == "nvlink":
        relays = {d.id for d in topology.devices.values() if d.kind is DeviceKind.NVSWITCH}
        nodes = chosen | relays
        g.add_nodes_from((n, {"label": "gpu" if n in chosen else "nvswitch"}) for n in nodes)
        for l in topology.links.values():
            if l.kind is LinkKind.NVLINK and l.src in nodes and l.dst in nodes:
                g.add_edge(l.src, l.dst, label=str(l.count))
        g.remove_nodes_from([n for n in relays if g.degree(n) == 0])
    else:
        sub = induced(topology, gpus)
        for d in sub.devices.values():
            g.add_node(d.id, label=d.kind.value)
        for l in sub.links.values():
            g.add_edge(l.src, l.dst, label=f"{l.kind.value}/{l.count}/{l.bandwidth:.6g}")
    return g


def _connected(g: nx.Graph, gpus: Sequence[str]) -> bool:
    import networkx as nx

    if not all(x in g for x in gpus):
        return False
    comp = nx.node_connected_component(g, gpus[0])
    return all(x in comp for x in gpus)


def unique_allocations(topology: Topology, min_gpus: int = 2, max_gpus: int | None = None,
                       fabric: str = "nvlink",
                       progress: Callable[[int, int], None] | None = None) -> list[AllocationClass]:
    """Allocations of ``min_gpus..max_gpus`` of the topology's GPUs, binned by isomorphism.

    Candidates are bucketed by a Weisfeiler-Lehman hash (labels: device kind, lane
    count) and only compared exactly (VF2 with node and edge labels) inside a bucket.
    """
    import networkx as nx

    if fabric not in FABRICS:
        raise TopologyError(f"unknown fabric {fabric!r} (known: {', '.join(FABRICS)})", source="--fabric")
    n = topology.num_ranks
    max_gpus = n if max_gpus is None else max_gpus
    if not 1 <= min_gpus <= max_gpus <= n:
        raise TopologyError(f"need 1 <= min-gpus <= max-gpus <= {n}, got {min_gpus}..{max_gpus}",
                            source="--min-gpus/--max-gpus")
    total = 0
    for k in range(min_gpus, max_gpus + 1):  # stops once over the limit (the sum itself can be huge)
        total += comb(n, k)
        if total > limit("allocations").value:
            break
    limit("allocations").check(total, "--min-gpus/--max-gpus", what=f"{min_gpus}-{max_gpus} of {n} GPUs",
                               error=TopologyError)
    match = dict(node_match=lambda a, b: a["label"] == b["label"], edge_match=lambda a, b: a["label"] == b["label"])
    classes: list[tuple[nx.Graph, list[tuple[str, ...]]]] = []
    buckets: dict[tuple[int, str], list[int]] = {}
    done = 0
    for k in range(min_gpus, max_gpus + 1):
        for gpus in itertools.combinations(topology.ranks, k):
            done += 1
            if progress and done % 64 == 0:
                progress(done, total)
            g = _fabric_graph(topology, gpus, fabric)
            if fabric == "nvlink" and not _connected(g, gpus):
                continue
            key = (k, nx.weisfeiler_lehman_graph_hash(g, node_attr="label", edge_attr="label"))
            for idx in buckets.setdefault(key, []):
                if nx.is_isomorphic(classes[idx][0], g, **match):
                    classes[idx][1].append(gpus)
                    break
            else:
                buckets[key].append(len(classes))
                classes.append((g, [gpus]))
    if progress:
        progress(total, total)
    result = []
    for _, members in classes:
        rep = members[0]
        edges = tuple(sorted(
            (l.src, l.dst, l.count) for l in topology.links.values()
            if l.kind is LinkKind.NVLINK and l.src in rep and l.dst in rep and
            topology.ranks.index(l.src) < topology.ranks.index(l.dst)))
        result.append(AllocationClass(rep, len(members), edges))
    return result
