"""The NCCL baseline: what NCCL itself runs for each of its collectives (all-reduce,
all-gather, reduce-scatter, broadcast, reduce) on a topology, per size, timed by the
simulator.

NCCL (2.18, NVIDIA/nccl ``src/graph``, ``src/enqueue.cc``):

* builds its rings (:func:`arborcc.synth.nccl_rings.nccl_rings`: NVLink-only when it can;
  across nodes one channel per NIC, leaving a node by PXN) and runs every ring twice
  (``ncclTopoPostset`` duplicates the channels); on NVSwitch machines its search finds
  many rings of the same order - 24 channels on DGX A100, 32 on DGX H100 (the fidelity
  profile's ``nccl_channels``);
* picks the protocol per call with its alpha-beta model
  (:func:`arborcc.sim.nccl_model.nccl_estimate`, the same model for all five
  collectives with their step counts; LL128 only where the rings stay on NVLink);
* uses fewer channels for small calls: while ``bytes < channels x threads x
  threshold`` it drops a channel (thresholds 64 bytes per thread for Simple, 8 for
  LL128 and 8 x ranks for LL, 512 threads, 640 for LL128);
* across nodes, for all-reduce, its model also weighs its double binary tree
  (:func:`nccl_trees`: per ring channel, the chain of the ring through each node and
  two complementary binary trees over the nodes, heads joined through the channel's
  NIC), run as reduce up and
  broadcast down the tree in :data:`TREE_CHUNKS` pipelined pieces
  (:func:`arborcc.synth.lower_emit.lower_allreduce_trees`);
* on machines that reduce in the switch it runs NVLS all-reduce (:mod:`arborcc.sim.nvls`;
  NCCL 2.18, the version of the tuning constants and of the published figures, has no
  NVLS kernel for the other collectives); the baseline takes it when it is faster than
  the ring.

The rings run as NCCL's ring kernels (:func:`arborcc.library.nccl_ring.ring_algorithm`) on
the device paths the ring search chose; identical channels are simulated as instances
(exact, see :mod:`arborcc.sim.simulate`). :meth:`NcclBaseline.options` lists every
algorithm x protocol NCCL could run for a collective, :meth:`NcclBaseline.simulate_option`
times one with a given channel count (what a tuner plugin may force,
:mod:`arborcc.tune.nccl_tuner_config`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from arborcc.errors import SynthesisError
from arborcc.ir.model import Algorithm
from arborcc.sim.fidelity import Fidelity, fidelity_for
from arborcc.ir.collectives import busbw_factor
from arborcc.sim.nccl_model import nccl_estimate
from arborcc.library.nccl_ring import RING_COLLECTIVES, ring_algorithm
from arborcc.sim.nccl_channels import nccl_channel_count
from arborcc.sim.nvls import nvls_allreduce_time
from arborcc.sim.simulate import SimResult, simulate
from arborcc.synth.nccl_rings import RingSchedule, link_class, nccl_rings, nic_path
from arborcc.topology.model import LinkKind, Topology

#: (threads per channel, bytes per thread below which a channel is dropped)
CHANNEL_THRESHOLDS = {"Simple": (512, 64), "LL128": (640, 8), "LL": (512, 8)}
#: chunks each tree's share is cut into, pipelined up and down the tree as NCCL's tree
#: kernel pipelines its chunk-size pieces (one piece per tree would pass every hop store
#: and forward: on 2 x DGX H100 its LL all-reduce at 1 MB simulated at half the ring's rate
#: where NCCL's model, and NCCL, take the tree for being faster)
TREE_CHUNKS = 16
#: the collectives the baseline covers: every one NCCL runs
COLLECTIVES = RING_COLLECTIVES


@dataclass
class NcclCall:
    """What NCCL runs for one call and what it costs."""

    algorithm: str  #: ring, tree or nvls
    protocol: str
    channels: int
    result: SimResult

    def row(self) -> dict:
        return {**self.result.row(), "nccl_algorithm": self.algorithm, "channels": self.channels}


class NcclBaseline:
    """NCCL on ``topology`` (module doc); :meth:`call` gives one call."""

    def __init__(self, topology: Topology, fidelity: Fidelity | None = None):
        if topology.num_ranks < 2:
            raise SynthesisError(f"{topology.name} has {topology.num_ranks} GPU; a collective needs at least 2")
        self.topology = topology
        self.fidelity = fidelity or fidelity_for(topology)
        self.schedule = nccl_rings(topology)
        self.channels = nccl_channel_count(len(self.schedule.rings), self.fidelity.nccl_channels)
        self._algorithms: dict[tuple[str, int, int], tuple[Algorithm, dict]] = {}

    @cached_property
    def protocols(self) -> tuple[str, ...]:
        """LL128 runs only where the rings stay on NVLink (NCCL enables it there only)."""
        nvlink = self.schedule.intra_link_kind is LinkKind.NVLINK
        return ("LL", "LL128", "Simple") if nvlink else ("LL", "Simple")

    def channels_for(self, size: float, protocol: str) -> int:
        """Channels NCCL uses for a call of ``size`` bytes (module doc)."""
        threads, per_thread = CHANNEL_THRESHOLDS[protocol]
        if protocol == "LL":
            per_thread *= self.topology.num_ranks
        nc = self.channels
        while nc > 1 and size < nc * threads * per_thread:
            nc -= 1
        return nc

    def ring_algorithm(self, distinct: int, collective: str = "allreduce", root: int = 0) -> tuple[Algorithm, dict]:
        """NCCL's ring kernel for ``collective`` over the first ``distinct`` rings, with the
        device path of every connection."""
        key = (collective, root, distinct)
        if key not in self._algorithms:
            rings = self.schedule.rings[:distinct]
            algo = ring_algorithm(collective, rings, root, f"nccl-ring-{collective}-{distinct}")
            routes = {}
            for c, ring in enumerate(rings):
                hops = self.schedule.hops[c] if self.schedule.hops else []
                for k, path in enumerate(hops):
                    routes[(ring[k], ring[(k + 1) % len(ring)], c)] = path
            self._algorithms[key] = (algo, routes)
        return self._algorithms[key]

    def simulate_ring(self, size: float, protocol: str, channels: int | None = None,
                      collective: str = "allreduce", root: int = 0) -> SimResult:
        """The ring kernel on ``channels`` channels (default: NCCL's count for the size)."""
        nc = channels or self.channels_for(size, protocol)
        distinct = min(nc, len(self.schedule.rings))
        algo, routes = self.ring_algorithm(distinct, collective, root)
        return simulate(algo, self.topology, size, protocol, self.fidelity,
                        instances=max(1, round(nc / distinct)), routes=routes)

    def model_choice(self, size: float, collective: str = "allreduce") -> str:
        """The ring protocol NCCL's alpha-beta model picks for ``size``."""
        return min(self.protocols, key=lambda p: self.schedule.nccl_estimate(collective, p, size).time)

    def model_estimate(self, collective: str, algorithm: str, protocol: str, size: float):
        """NCCL's alpha-beta prediction for its rings or trees (the tree graph's channels
        have the rings' bandwidth: one NIC each)."""
        if algorithm == "ring":
            return self.schedule.nccl_estimate(collective, protocol, size)
        return nccl_estimate(collective, algorithm, protocol, size, ranks=self.topology.num_ranks,
                             nodes=self.schedule.nodes, intra_link=link_class(self.schedule.intra_link_kind),
                             bus_bandwidth=self.schedule.bus_bandwidth)

    def model_pick(self, size: float, collective: str = "allreduce") -> tuple[str, str]:
        """The (algorithm, protocol) among rings and trees NCCL's model picks for ``size``."""
        candidates = [o for o in self.options(collective) if o[0] != "nvls"]
        return min(candidates, key=lambda o: self.model_estimate(collective, o[0], o[1], size).time)

    def tree_algorithm(self, distinct: int) -> tuple[Algorithm, dict]:
        """NCCL's tree all-reduce over the first ``distinct`` channels' trees, with routes."""
        key = ("tree", 0, distinct)
        if key not in self._algorithms:
            from arborcc.synth.lower_emit import lower_allreduce_trees
            from arborcc.synth.synthesis import operations_budget

            trees = nccl_trees(self.topology, self.schedule)[:distinct]
            # arborcc's own program, as synthesized ones: 16 trees over 1024 GPUs trace 250,001 operations
            with operations_budget(self.topology.num_ranks):
                lowered = lower_allreduce_trees(self.topology, trees, [TREE_CHUNKS] * len(trees),
                                                f"nccl-tree-allreduce-{distinct}", rounds=TREE_CHUNKS)
            self._algorithms[key] = (lowered.algorithm, lowered.routes)
        return self._algorithms[key]

    def nvls_time(self, size: float, collective: str) -> float | None:
        """Seconds NVLS takes for ``collective`` of ``size`` bytes; None where NCCL cannot run it."""
        return nvls_allreduce_time(self.topology, size, self.fidelity) if collective == "allreduce" else None

    def options(self, collective: str) -> list[tuple[str, str]]:
        """Every (algorithm, protocol) NCCL may run for ``collective`` here."""
        check_collective(collective)
        out = [("ring", p) for p in self.protocols]
        if collective == "allreduce" and self.schedule.nodes > 1:
            out += [("tree", p) for p in self.protocols]
        if self.nvls_time(1.0, collective) is not None:
            out.append(("nvls", "Simple"))
        return out

    def simulate_option(self, size: float, collective: str, algorithm: str, protocol: str,
                        channels: int | None = None, root: int = 0) -> SimResult:
        """``collective`` of ``size`` bytes run as ``algorithm``/``protocol`` on ``channels``
        channels (default: NCCL's count for the size; NVLS has no ring channels)."""
        if algorithm == "nvls":
            t = self.nvls_time(size, collective)
            if t is None:
                raise SynthesisError(f"NCCL cannot run NVLS {collective} on {self.topology.name}")
            return SimResult("nccl-nvls", collective, self.topology.num_ranks, int(size), "Simple", 1, t, t, 0.0,
                             1, 1, {})
        if algorithm == "tree":
            if ("tree", protocol) not in self.options(collective):
                raise SynthesisError(f"NCCL runs its tree for all-reduce across nodes only, not {collective} "
                                     f"on {self.topology.name}")
            nc = channels or self.channels_for(size, protocol)
            distinct = min(nc, 2 * len(self.schedule.rings))
            algo, routes = self.tree_algorithm(distinct)
            return simulate(algo, self.topology, size, protocol, self.fidelity,
                            instances=max(1, round(nc / distinct)), routes=routes)
        return self.simulate_ring(size, protocol, channels, collective, root)

    def call(self, size: float, collective: str = "allreduce", root: int = 0,
             protocol: str | None = None) -> NcclCall:
        """What NCCL runs for ``collective`` of ``size`` bytes; ``protocol`` forces one (and
        rules NVLS out)."""
        check_collective(collective)
        algorithm, proto = ("ring", protocol) if protocol else self.model_pick(size, collective)
        nc = self.channels_for(size, proto)
        ring = NcclCall(algorithm, proto, nc, self.simulate_option(size, collective, algorithm, proto, nc, root))
        if protocol is None:
            nvls = self.nvls_time(size, collective)
            if nvls is not None and nvls < ring.result.time:
                return NcclCall("nvls", "Simple", 0, self.simulate_option(size, collective, "nvls", "Simple"))
        return ring

    def model_row(self, size: int, collective: str, protocol: str | None = None) -> dict:
        """NCCL's closed-form prediction at ``size`` (``compare``'s ``nccl-model`` row): the
        ring or tree and protocol the model picks (rings with ``protocol``) and its time."""
        a, p = ("ring", protocol) if protocol else self.model_pick(size, collective)
        t = self.model_estimate(collective, a, p, size).time
        algbw = size / t
        return {"size": size, "protocol": p, "instances": 1, "time_us": round(t * 1e6, 3),
                "algbw_gbps": round(algbw / 1e9, 4),
                "busbw_gbps": round(algbw * busbw_factor(collective, self.topology.num_ranks) / 1e9, 4)}


def check_collective(collective: str) -> None:
    """Refuse a collective NCCL does not run (the baseline covers :data:`COLLECTIVES`)."""
    if collective not in COLLECTIVES:
        raise SynthesisError(f"the NCCL baseline covers {', '.join(COLLECTIVES)}, not {collective}")


def nccl_trees(topology: Topology, schedule: RingSchedule) -> list:
    """NCCL's double binary tree per ring channel (module doc), as inward trees (hops
    child -> parent with their device paths) for the tree lowering: for channel c both
    complementary node trees, so that each NIC carries one tree where its node is inner
    and one where it is a leaf (``src/graph/trees.cc``). Channel c's chain through node k
    is ring c's stretch in node k (it starts at the GPU next to the channel's NIC, the
    node's head); a head sends to its parent head out through channel c's NIC of its node
    (:func:`nic_path`) and in through channel c's NIC of the parent's node."""
    from arborcc.synth.double_binary_tree import double_binary_tree_nodes
    from arborcc.synth.hosts import host_groups
    from arborcc.synth.nccl_rings import nics_of
    from arborcc.synth.trees import Hop, Tree

    hosts = host_groups(topology)
    host_of = {r: k for k, h in enumerate(hosts) for r in h}
    nics = [nics_of(topology, h) for h in hosts]
    ids = topology.ranks

    def head_path(c: int, k: int, up: int, head: str, parent: str) -> tuple[str, ...]:
        if not (nics[k] and nics[up]):
            return topology.route(head, parent).path
        na, nb = nics[k][c % len(nics[k])], nics[up][c % len(nics[up])]
        return (nic_path(topology, head, na, hosts[k]) + topology.route(na, nb).path[1:]
                + topology.route(nb, parent).path[1:])

    trees = []
    for c, ring in enumerate(schedule.rings):
        chains = [[r for r in ring if host_of[r] == k] for k in range(len(hosts))]
        for parents in double_binary_tree_nodes(len(hosts)):
            hops = []
            for k, chain in enumerate(chains):
                hops += [Hop(ids[b], ids[a], topology.route(ids[b], ids[a]).path) for a, b in zip(chain, chain[1:])]
                up = parents[k]
                if up is None:
                    root = ids[chain[0]]
                else:
                    head, parent = ids[chain[0]], ids[chains[up][0]]
                    hops.append(Hop(head, parent, head_path(c, k, up, head, parent)))
            trees.append(Tree(root, tuple(hops), 1.0, inward=True))
    return trees
