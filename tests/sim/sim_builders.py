"""Small hand-built algorithms and topologies with closed-form simulated times."""

from __future__ import annotations

from arborcc.ir.model import Algorithm, Buffer, Dependency, Op, Protocol, RankProgram, Step, ThreadBlock
from arborcc.topology.model import GB, Device, DeviceKind, LinkKind, TopologyBuilder

I, O, S = Buffer.INPUT, Buffer.OUTPUT, Buffer.SCRATCH


def step(op: Op, off: int = 0, count: int = 1, dep: tuple[int, int] | None = None) -> Step:
    src = None if op is Op.NOP else I
    dst = None if op is Op.NOP else I
    return Step(op, src, off, dst, off, count, Dependency(*dep) if dep else None)


def algorithm(name: str, ranks: int, chunks: int, tbs: dict[int, list[ThreadBlock]],
              collective: str = "custom", protocol: Protocol = Protocol.SIMPLE) -> Algorithm:
    progs = [RankProgram(r, chunks, chunks, 0, tbs.get(r, [])) for r in range(ranks)]
    return Algorithm(name, collective, ranks, chunks, progs, protocol=protocol, inplace=True)


def chain_topology(n: int, gbps: float = 10.0, latency_us: float = 0.0, kind: LinkKind = LinkKind.NVLINK):
    """GPUs 0..n-1 joined in a line by full-duplex links."""
    b = TopologyBuilder("chain")
    for i in range(n):
        b.add_device(Device(f"gpu{i}", DeviceKind.GPU, 0, i))
    for i in range(n - 1):
        b.connect(f"gpu{i}", f"gpu{i + 1}", kind, gbps * GB, latency_us * 1e-6)
    return b.build()


def full_topology(n: int, gbps: float = 10.0, latency_us: float = 0.0):
    """GPUs with a direct link between every pair."""
    b = TopologyBuilder("full")
    for i in range(n):
        b.add_device(Device(f"gpu{i}", DeviceKind.GPU, 0, i))
    for i in range(n):
        for j in range(i + 1, n):
            b.connect(f"gpu{i}", f"gpu{j}", LinkKind.NVLINK, gbps * GB, latency_us * 1e-6)
    return b.build()


def switch_topology(n: int, gbps: float = 10.0, latency_us: float = 0.0):
    """GPUs each linked to one switch."""
    b = TopologyBuilder("switch")
    b.add_device(Device("sw", DeviceKind.NVSWITCH, 0, 0))
    for i in range(n):
        b.add_device(Device(f"gpu{i}", DeviceKind.GPU, 0, i))
        b.connect(f"gpu{i}", "sw", LinkKind.NVLINK, gbps * GB, latency_us * 1e-6)
    return b.build()


def forward_chain(n: int, chunks: int) -> Algorithm:
    """Rank 0 sends chunks 0..chunks-1 one by one down the chain 0 -> 1 -> ... -> n-1."""
    tbs: dict[int, list[ThreadBlock]] = {}
    for r in range(n):
        if r == 0:
            steps = [step(Op.SEND, c) for c in range(chunks)]
            tbs[r] = [ThreadBlock(0, send=1, steps=steps)]
        elif r == n - 1:
            tbs[r] = [ThreadBlock(0, recv=r - 1, steps=[step(Op.RECV, c) for c in range(chunks)])]
        else:
            tbs[r] = [ThreadBlock(0, send=r + 1, recv=r - 1, steps=[step(Op.RECV_COPY_SEND, c) for c in range(chunks)])]
    return algorithm(f"chain{n}x{chunks}", n, chunks, tbs, "broadcast")


def two_channel_pair(chunks: int = 1) -> Algorithm:
    """Rank 0 sends to rank 1 on two channels at once (two flows on one link)."""
    tbs = {0: [ThreadBlock(k, send=1, channel=k, steps=[step(Op.SEND, k)]) for k in range(2)],
           1: [ThreadBlock(k, recv=0, channel=k, steps=[step(Op.RECV, k)]) for k in range(2)]}
    return algorithm("two-flows", 2, 2, tbs)
