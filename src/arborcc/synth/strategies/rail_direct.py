"""The ``rail-direct`` strategy: on switch machines joined rail by rail (DGX H100 and
DGX A100 clusters: every GPU's own NIC), reduce-scatter, all-gather and all-reduce as
:mod:`switch-direct <arborcc.synth.strategies.switch_direct>`'s direct transfers inside
each node, pipelined chunk by chunk with one transfer per chunk between rail peers.

Rank ``(a, i)`` is the ``i``-th rank (in rank order) of host ``a``; its rail peers are
``(c, i)`` on the other hosts. A file names no route, and the runtime routes every pair
of ranks on different hosts through the sender's and the receiver's own NICs
(:func:`arborcc.topology.routing.route`; ``synth/nccl_rings.py`` ``file_rings``), so
every transfer between nodes here goes between rail peers and no GPU forwards another's
network traffic.

* reduce-scatter: every rank sends each local peer ``(a, j)`` the blocks of ``(c, j)``
  for every other host ``c`` first and then ``(a, j)``'s own block (``(n_host - 1) /
  n_host`` of the buffer through each switch port, as on one machine);
  ``(a, j)`` sums the node's contributions to ``(c, j)``'s block into its scratch and sends
  each chunk to ``(c, j)`` over its NIC as soon as the chunk's last local sum is done,
  while the switch still carries the node's own blocks; ``(c, j)`` adds the sums it
  receives to its own block first, as they arrive (a receive that waited for the local
  sums would hold the network connection's slots, and the sender, until those end), then
  the local contributions. 2 x DGX H100 at 64 MiB: 1/16 of the buffer crosses each NIC
  (about 87 us at 48 GB/s) beside the 150 us the ports need: 173.6 us, 362.3 GB/s busbw
  (NCCL's ring 281.1).
* all-gather: the reverse - every rank sends its block over its NIC to its rail peers and
  over the switch to its local peers at once, then forwards each chunk of its rail peers'
  blocks to its local peers as it arrives.
* all-reduce (two hosts): a node-level reduce-scatter of ``n_host`` blocks (rank ``(a,
  i)`` sums the node's share of block ``i`` into its scratch, chunk by chunk), each summed
  chunk sent to the rail peer, which adds it to its own node's sum of the same block (the
  two hosts add the same two numbers, so every rank ends with the same bits), and each
  fully summed chunk sent on to the local peers as soon as it is done: one crossing of the
  network per chunk, the switch's two passes pipelined behind it.
* all-reduce (more hosts): the reduce-scatter, each rank's block summed in place in the
  output, then the all-gather of those blocks, each chunk sent on as soon as its last sum
  is done. The two phases of a connection share its thread block (the all-gather's steps
  after the reduce-scatter's), so the thread blocks are the reduce-scatter's.

Sums run in one fixed order per chunk (reduce-scatter: the rail peers, then the local
peers in rotation order; the all-reduce's host sums: the local peers, then the rail peer),
each reduction waiting for the previous one of that chunk, as in switch-direct.
Every block is cut into ``lanes x m`` chunks; chunk ``x`` of a block travels between
local peers on lane ``x mod lanes`` (the lane's channel and thread block) and between
rail peers on NIC lane ``x mod nic_lanes``. ``m`` is chosen per size as switch-direct
chooses it (the candidate the simulator times fastest as written at the request's size),
among :func:`chunk_counts`. A connection between local peers carries the other hosts'
blocks chunk by chunk - every host's chunk ``x``, then every host's ``x + 1`` - the order
the network delivers them (all-gather) and in which their sums leave over it
(reduce-scatter): block by block, the forwarding of a block's last chunk held up the
next block's first, which had long arrived (8 x DGX A100 all-gather at 64 MiB with 4
chunks per lane: 538.7 us block by block, 427.7 chunk by chunk).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from arborcc.synth.strategies.switch_direct import add_threadblock

if TYPE_CHECKING:
    from arborcc.ir.model import Algorithm
    from arborcc.synth.result import SynthesisRequest, SynthesisResult
    from arborcc.topology.model import Topology

#: the collectives the strategy builds
RAIL_DIRECT_COLLECTIVES = ("allreduce", "allgather", "reducescatter")


def switch_hosts(topology: Topology) -> list[list[int]] | str:
    """The ranks of each host (hosts in id order, ranks in rank order,
    :func:`arborcc.synth.hosts.host_groups`), or why the strategy does not apply: a rank on
    no host, fewer than two hosts, hosts of unequal rank counts or of one rank, or a host
    whose ranks do not all reach each other through one switch
    (:func:`arborcc.synth.trees.one_switch` of the host's own devices)."""
    from arborcc.synth.hosts import host_groups, server_topology
    from arborcc.synth.trees import one_switch

    hosts = host_groups(topology)
    homeless = [r for r in hosts[0] if topology.devices[topology.ranks[r]].host is None]
    if homeless:
        return f"rank {homeless[0]} ({topology.ranks[homeless[0]]}) belongs to no host"
    if len(hosts) < 2:
        return "the ranks are on one host (switch-direct builds one switch machine)"
    if len({len(h) for h in hosts}) != 1 or len(hosts[0]) < 2:
        return "rail-direct needs at least two ranks on every host, the same number on each"
    for members in hosts:
        gpus = [topology.ranks[r] for r in members]
        if one_switch(server_topology(topology, gpus)) is None:
            return f"the ranks of host {topology.devices[gpus[0]].host} do not all reach each other through one switch"
    return hosts


def lanes_for(collective: str, ranks_per_host: int, num_hosts: int, max_threadblocks: int,
              max_channels: int) -> tuple[int, int]:
    """(lanes per local peer, NIC lanes per rail peer): the most local lanes for which one
    NIC lane fits the thread blocks (one per peer, lane and direction; for the two-host
    all-reduce two per local peer and lane and direction; the all-gather's copy) and
    channels, then as many NIC lanes, up to the local lanes, as the rest allows; (0, 0)
    when nothing fits."""
    two_phases = collective == "allreduce" and num_hosts == 2
    local = (4 if two_phases else 2) * (ranks_per_host - 1)
    nic = 2 * (num_hosts - 1)
    budget = max_threadblocks - (1 if collective == "allgather" else 0)
    channels = max_channels // 2 if two_phases else max_channels
    lanes = max(0, min(channels, (budget - nic) // local))
    if lanes == 0:
        return 0, 0
    return lanes, max(1, min(lanes, max_channels, (budget - local * lanes) // nic))


def _remote_hosts(a: int, num_hosts: int) -> list[int]:
    return [(a + d) % num_hosts for d in range(1, num_hosts)]


class _ThreadBlocks:
    """A rank's thread blocks, at most one per connection and direction (send peer,
    receive peer, channel): steps added for one already served go after its steps.
    :meth:`add` returns a handle, (thread block, index of the first step added)."""

    def __init__(self, tbs: list | None = None):
        self.tbs = tbs if tbs is not None else []
        self._of = {(tb.send, tb.recv, tb.channel): tb for tb in self.tbs}

    def add(self, steps: list, send: int = -1, recv: int = -1, channel: int = 0) -> tuple[int, int]:
        key = (send, recv, channel)
        tb = self._of.get(key)
        if tb is None:
            tb = self._of[key] = self.tbs[add_threadblock(self.tbs, steps, send=send, recv=recv, channel=channel)]
            return tb.id, 0
        tb.steps += steps
        return tb.id, len(tb.steps) - len(steps)


def _at(handle: tuple[int, int], step: int):
    """The dependency on step ``step`` of what :meth:`_ThreadBlocks.add` returned ``handle`` for."""
    from arborcc.ir.model import Dependency

    return Dependency(handle[0], handle[1] + step)


def _reducescatter_steps(tbs: _ThreadBlocks, hosts: list[list[int]], a: int, i: int, lanes: int, nic_lanes: int,
                         per_lane: int, base: Callable[[int], int], gathered: bool = False) -> Callable[[int], object]:
    """The reduce-scatter's thread blocks of rank ``(a, i)`` (module doc): every rank's
    block summed into its output at ``base(rank)``; returns the dependency on the last
    sum of chunk ``x`` of the rank's own block (``gathered``: steps will wait on it)."""
    from arborcc.ir.model import Buffer, Op, Step

    IN, OUT, SCRATCH = Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH
    N, g = len(hosts), len(hosts[0])
    L, m, k = lanes, per_lane, lanes * per_lane
    members, remote = hosts[a], _remote_hosts(a, N)
    r = members[i]
    peers = [members[(i + d) % g] for d in range(1, g)]
    for c in range(L):
        for p in peers:
            j = members.index(p)
            tbs.add([Step(Op.SEND, IN, hosts[h][j] * k + s * L + c, SCRATCH, bi * k + s * L + c)
                     for s in range(m) for bi, h in enumerate(remote)]
                    + [Step(Op.SEND, IN, p * k + s * L + c, OUT, base(p) + s * L + c) for s in range(m)],
                    send=p, channel=c)
    # the rail peers' sums of this rank's block first: they arrive while the switch still
    # carries the remote-destined blocks, and a receive waiting for the local sums would
    # hold the network connection's slots until those end
    own = base(r)
    remote_sum = {}
    for bi, h in enumerate(remote):
        for lane in range(nic_lanes):
            remote_sum[(bi, lane)] = tbs.add([
                Step(Op.RECV_REDUCE_COPY, *((OUT, own + x) if bi else (IN, r * k + x)), OUT, own + x,
                     dep=_at(remote_sum[(bi - 1, lane)], x // nic_lanes) if bi else None, has_dep=True)
                for x in range(lane, k, nic_lanes)], recv=hosts[h][i], channel=lane)
    local_sum = {}
    for t, q in enumerate(peers):
        for c in range(L):
            steps = []
            for s in range(m):  # chunk by chunk, every remote host's at once
                for bi, h in enumerate(remote):
                    x = s * L + c
                    source = (IN, hosts[h][i] * k + x) if t == 0 else (SCRATCH, bi * k + x)
                    steps.append(Step(Op.RECV_REDUCE_COPY, *source, SCRATCH, bi * k + x,
                                      dep=_at(local_sum[(t - 1, c)], s * (N - 1) + bi) if t else None,
                                      has_dep=True))
            for s in range(m):
                x = s * L + c
                previous = (_at(local_sum[(t - 1, c)], (N - 1) * m + s) if t
                            else _at(remote_sum[(N - 2, x % nic_lanes)], x // nic_lanes))
                steps.append(Step(Op.RECV_REDUCE_COPY, OUT, own + x, OUT, own + x, dep=previous,
                                  has_dep=gathered or t < len(peers) - 1))
            local_sum[(t, c)] = tbs.add(steps, recv=q, channel=c)
    final = len(peers) - 1
    for bi, h in enumerate(remote):
        for lane in range(nic_lanes):
            tbs.add([Step(Op.SEND, SCRATCH, bi * k + x, OUT, base(hosts[h][i]) + x,
                          dep=_at(local_sum[(final, x % L)], x // L * (N - 1) + bi))
                     for x in range(lane, k, nic_lanes)], send=hosts[h][i], channel=lane)
    return lambda x: _at(local_sum[(final, x % L)], (N - 1) * m + x // L)


def _allgather_steps(tbs: _ThreadBlocks, hosts: list[list[int]], a: int, i: int, lanes: int, nic_lanes: int,
                     per_lane: int, ready: Callable[[int], object]) -> None:
    """The all-gather's thread blocks of rank ``(a, i)`` (module doc): every rank's block
    at its place in the output, chunk ``x`` of the rank's own block sent once ``ready(x)``."""
    from arborcc.ir.model import Buffer, Op, Step

    OUT = Buffer.OUTPUT
    N, g = len(hosts), len(hosts[0])
    L, m, k = lanes, per_lane, lanes * per_lane
    members, remote = hosts[a], _remote_hosts(a, N)
    r = members[i]
    peers = [members[(i + d) % g] for d in range(1, g)]
    own = r * k
    arrived = {}
    for bi, h in enumerate(remote):
        block = hosts[h][i] * k
        for lane in range(nic_lanes):
            arrived[(bi, lane)] = tbs.add([Step(Op.RECV, OUT, block + x, OUT, block + x, has_dep=True)
                                           for x in range(lane, k, nic_lanes)], recv=hosts[h][i], channel=lane)
        for lane in range(nic_lanes):
            tbs.add([Step(Op.SEND, OUT, own + x, OUT, own + x, dep=ready(x)) for x in range(lane, k, nic_lanes)],
                    send=hosts[h][i], channel=lane)
    for c in range(L):
        for p in peers:
            steps = [Step(Op.SEND, OUT, own + s * L + c, OUT, own + s * L + c, dep=ready(s * L + c))
                     for s in range(m)]
            # the rail peers' chunks in the order they arrive: chunk by chunk, every host's
            # at once (block by block, a block's last chunk would hold the next block's
            # first, which arrived long before)
            steps += [Step(Op.SEND, OUT, hosts[h][i] * k + x, OUT, hosts[h][i] * k + x,
                           dep=_at(arrived[(bi, x % nic_lanes)], x // nic_lanes))
                      for x in range(c, k, L) for bi, h in enumerate(remote)]
            tbs.add(steps, send=p, channel=c)
    for c in range(L):
        for q in peers:
            j = members.index(q)
            tbs.add([Step(Op.RECV, OUT, q * k + x, OUT, q * k + x) for x in range(c, k, L)]
                    + [Step(Op.RECV, OUT, hosts[h][j] * k + x, OUT, hosts[h][j] * k + x)
                       for x in range(c, k, L) for h in remote], recv=q, channel=c)


def _assembled(hosts: list[list[int]], collective: str, chunks_per_block: int, buffers: tuple[int, int, int],
               rank_steps: Callable[[int, int, int], _ThreadBlocks], name: str) -> Algorithm:
    """The algorithm whose rank ``r``, the ``i``-th of host ``a``, runs the thread blocks
    ``rank_steps(a, i, r)`` fills; ``buffers``: its input, output and scratch chunks."""
    from arborcc.ir.model import Algorithm, RankProgram

    n = len(hosts) * len(hosts[0])
    programs = {r: RankProgram(r, *buffers, rank_steps(a, i, r).tbs)
                for a, members in enumerate(hosts) for i, r in enumerate(members)}
    return Algorithm(name, collective, n, n * chunks_per_block, [programs[r] for r in range(n)], inplace=True,
                     outofplace=True)


def reducescatter_program(hosts: list[list[int]], lanes: int, nic_lanes: int, per_lane: int,
                          name: str) -> Algorithm:
    """Reduce-scatter inside each host and between rail peers, ``lanes x per_lane`` chunks
    per block (module doc)."""
    N, k = len(hosts), lanes * per_lane

    def rank_steps(a: int, i: int, r: int) -> _ThreadBlocks:
        tbs = _ThreadBlocks()
        _reducescatter_steps(tbs, hosts, a, i, lanes, nic_lanes, per_lane, lambda rank: 0)
        return tbs

    return _assembled(hosts, "reducescatter", k, (N * len(hosts[0]) * k, k, (N - 1) * k), rank_steps, name)


def allgather_program(hosts: list[list[int]], lanes: int, nic_lanes: int, per_lane: int, name: str) -> Algorithm:
    """All-gather inside each host and between rail peers, ``lanes x per_lane`` chunks per
    block (module doc)."""
    from arborcc.ir.model import Buffer, Dependency, Op, Step, ThreadBlock

    n, k = len(hosts) * len(hosts[0]), lanes * per_lane

    def rank_steps(a: int, i: int, r: int) -> _ThreadBlocks:
        # thread block 0 copies the input into the rank's block; every send reads it there,
        # so the same file is correct in place and out of place
        tbs = _ThreadBlocks([ThreadBlock(0, steps=[Step(Op.COPY, Buffer.INPUT, x, Buffer.OUTPUT, r * k + x,
                                                        has_dep=True) for x in range(k)])])
        _allgather_steps(tbs, hosts, a, i, lanes, nic_lanes, per_lane, lambda x: Dependency(0, x))
        return tbs

    return _assembled(hosts, "allgather", k, (k, n * k, 0), rank_steps, name)


def hosts_allreduce_program(hosts: list[list[int]], lanes: int, nic_lanes: int, per_lane: int,
                            name: str) -> Algorithm:
    """All-reduce on any number of hosts: the reduce-scatter, each rank's block summed in
    place in the output, and the all-gather of those blocks, every chunk sent on as soon as
    its last sum is done; each connection's all-gather steps follow its reduce-scatter steps
    on the same thread block (module doc)."""
    N, k = len(hosts), lanes * per_lane
    n = N * len(hosts[0])

    def rank_steps(a: int, i: int, r: int) -> _ThreadBlocks:
        tbs = _ThreadBlocks()
        ready = _reducescatter_steps(tbs, hosts, a, i, lanes, nic_lanes, per_lane, lambda rank: rank * k,
                                     gathered=True)
        _allgather_steps(tbs, hosts, a, i, lanes, nic_lanes, per_lane, ready)
        return tbs

    return _assembled(hosts, "allreduce", k, (n * k, n * k, (N - 1) * k), rank_steps, name)


def allreduce_program(hosts: list[list[int]], lanes: int, nic_lanes: int, per_lane: int, name: str) -> Algorithm:
    """All-reduce: on two hosts :func:`two_hosts_allreduce_program`, on more
    :func:`hosts_allreduce_program`."""
    build = two_hosts_allreduce_program if len(hosts) == 2 else hosts_allreduce_program
    return build(hosts, lanes, nic_lanes, per_lane, name)


def two_hosts_allreduce_program(hosts: list[list[int]], lanes: int, nic_lanes: int, per_lane: int,
                                name: str) -> Algorithm:
    """All-reduce on two hosts: a node-level reduce-scatter into scratch, one exchange
    between rail peers per chunk, each fully summed chunk sent on to the local peers;
    ``lanes x per_lane`` chunks per rank-sized block (module doc)."""
    from arborcc.ir.model import Buffer, Op, Step

    if len(hosts) != 2:
        raise ValueError("the two-host rail-direct all-reduce is built for two hosts")
    IN, OUT, SCRATCH = Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH
    g, L = len(hosts[0]), lanes
    K = 2 * lanes * per_lane  # chunks of the node-level block each local index sums

    def rank_steps(a: int, i: int, r: int) -> _ThreadBlocks:
        members = hosts[a]
        (rail_host,) = _remote_hosts(a, 2)
        rail = hosts[rail_host][i]
        peers = [members[(i + d) % g] for d in range(1, g)]
        own = i * K
        tbs = _ThreadBlocks()
        for c in range(L):
            for p in peers:
                block = members.index(p) * K
                tbs.add([Step(Op.SEND, IN, block + x, SCRATCH, x) for x in range(c, K, L)], send=p, channel=c)
        local_sum = {}
        for t, q in enumerate(peers):
            for c in range(L):
                local_sum[(t, c)] = tbs.add([
                    Step(Op.RECV_REDUCE_COPY, *((IN, own + x) if t == 0 else (SCRATCH, x)), SCRATCH, x,
                         dep=_at(local_sum[(t - 1, c)], x // L) if t else None, has_dep=True)
                    for x in range(c, K, L)], recv=q, channel=c)
        final = len(peers) - 1
        for lane in range(nic_lanes):
            tbs.add([Step(Op.SEND, SCRATCH, x, OUT, own + x, dep=_at(local_sum[(final, x % L)], x // L))
                     for x in range(lane, K, nic_lanes)], send=rail, channel=lane)
        summed = {}
        for lane in range(nic_lanes):
            summed[lane] = tbs.add([Step(Op.RECV_REDUCE_COPY, SCRATCH, x, OUT, own + x,
                                         dep=_at(local_sum[(final, x % L)], x // L), has_dep=True)
                                    for x in range(lane, K, nic_lanes)], recv=rail, channel=lane)
        for c in range(L):
            for p in peers:
                tbs.add([Step(Op.SEND, OUT, own + x, OUT, own + x, dep=_at(summed[x % nic_lanes], x // nic_lanes))
                         for x in range(c, K, L)], send=p, channel=L + c)
        for c in range(L):
            for q in peers:
                block = members.index(q) * K
                tbs.add([Step(Op.RECV, OUT, block + x, OUT, block + x) for x in range(c, K, L)],
                        recv=q, channel=L + c)
        return tbs

    return _assembled(hosts, "allreduce", lanes * per_lane, (g * K, g * K, K), rank_steps, name)


BUILDERS = {"allreduce": allreduce_program, "allgather": allgather_program, "reducescatter": reducescatter_program}


def steps_per_threadblock(collective: str, num_hosts: int, lanes: int, nic_lanes: int, per_lane: int) -> int:
    """The most steps a thread block of :data:`BUILDERS`' ``collective`` program holds:
    what tells whether a chunk count fits the runtime before the program is built."""
    N, L, m, nic = num_hosts, lanes, per_lane, nic_lanes
    if collective == "reducescatter":  # sends and local sums: a chunk per host and block; rail peers' lanes
        return max(N * m, -(-L * m // nic))
    if collective == "allgather":  # the input's copy (no fewer than a rail lane's), a chunk per host and block
        return max(L * m, N * m)
    if N == 2:  # all-reduce: a lane of the node-level block, the rail exchange
        return max(N * m, -(-N * L * m // nic))
    return 2 * max(N * m, -(-L * m // nic))  # the reduce-scatter's thread blocks, each then the all-gather's


def chunk_counts(collective: str, num_hosts: int, lanes: int, nic_lanes: int, max_steps: int) -> list[int]:
    """The chunks per lane tried, fewest first: switch-direct's
    (:data:`~arborcc.synth.strategies.switch_direct.CHUNKS_PER_LANE`) within ``max_steps``
    per thread block, and the most that fit below its largest (8 on 8 hosts, where 16
    take 128 steps: the last chunk, the tail behind the network's transfers, is half as
    long as with 4; 8 x DGX A100 reduce-scatter at 64 MiB 423.7 us with 4, 416.9 with 8)."""
    from arborcc.synth.strategies.switch_direct import CHUNKS_PER_LANE

    fit = [m for m in range(1, max(CHUNKS_PER_LANE) + 1)
           if steps_per_threadblock(collective, num_hosts, lanes, nic_lanes, m) <= max_steps]
    return sorted({m for m in CHUNKS_PER_LANE if m in fit} | set(fit[-1:]))


def synth_rail_direct(request: SynthesisRequest) -> SynthesisResult:
    """Direct transfers inside each switch host, rail peers across hosts, the chunk count
    timed fastest at the request's size (module doc)."""
    from arborcc.errors import SynthesisError
    from arborcc.ir.limits import MAX_CHANNELS, runtime_caps
    from arborcc.sim.bandwidth import steady_state_bandwidth
    from arborcc.sim.protocol_choice import time_as_written
    from arborcc.synth.result import SynthesisResult
    from arborcc.synth.strategies.switch_direct import LARGEST_TIMED, MORE_CHUNKS_MARGIN, REFERENCE_SIZE

    topology, collective = request.topology, request.collective
    if collective not in RAIL_DIRECT_COLLECTIVES:
        raise SynthesisError(f"rail-direct builds {', '.join(RAIL_DIRECT_COLLECTIVES)}, not {collective}")
    hosts = switch_hosts(topology)
    if isinstance(hosts, str):
        raise SynthesisError(f"{topology.name}: {hosts}; rail-direct needs switch machines joined by a network")
    N, g = len(hosts), len(hosts[0])
    caps = runtime_caps(request.dialect)
    max_tbs, max_steps = caps.threadblocks_per_rank, caps.steps_per_threadblock
    lanes, nic_lanes = lanes_for(collective, g, N, max_tbs, MAX_CHANNELS)
    if lanes == 0:
        per_lane = 4 if collective == "allreduce" and N == 2 else 2
        needed = per_lane * (g - 1) + 2 * (N - 1) + (1 if collective == "allgather" else 0)
        raise SynthesisError(f"rail-direct needs {needed} thread blocks per rank for a {collective} on {N} hosts "
                             f"of {g} ranks, the runtime allows {max_tbs}")
    size = min(request.size or REFERENCE_SIZE, LARGEST_TIMED)
    best = best_time = best_m = None
    for m in chunk_counts(collective, N, lanes, nic_lanes, max_steps):
        algorithm = BUILDERS[collective](hosts, lanes, nic_lanes, m, f"rail-direct-{collective}")
        t = time_as_written(algorithm, topology, size)
        if best is not None and t >= best_time:
            break  # the tail no longer shortens: more chunks only add steps
        if best is None or t < (1 - MORE_CHUNKS_MARGIN) * best_time:
            best, best_time, best_m = algorithm, t, m
    if best is None:
        raise SynthesisError(f"rail-direct needs {N} steps per thread block for a {collective} on {N} hosts, "
                             f"the runtime allows {max_steps}")
    estimate = steady_state_bandwidth(best, topology)
    notes = [f"direct inside each of {N} hosts on {lanes} lanes, rail peers on {nic_lanes}, "
             f"{lanes * best_m} chunks per block: simulated {best_time * 1e6:.1f} us at {size} bytes"]
    return SynthesisResult("rail-direct", collective, best, request.bound.algbw, estimate.algbw,
                           chunks=best.chunks_per_loop, notes=notes)
