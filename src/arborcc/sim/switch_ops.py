"""NVLS operations of an MSCCL++ plan (``glres``, ``gstore``, ``gstorepkt``) timed as
in-switch reduction.

The translation turns each such operation into transfers between the members
(:mod:`arborcc.ir.mscclpp.switch_channels`): a ``glres`` by rank ``r`` over ``n``
members is ``n - 1`` reads of the members' chunks into ``r`` and ``n - 1`` writes of the
result back, which the plain model routes GPU -> NVSwitch -> GPU, ``n - 1`` chunks on
``r``'s port each way. The switch does otherwise: ``multimem.ld_reduce`` takes one chunk
from every member's port (``r``'s own included) and hands ``r`` their sum, one chunk;
``multimem.st`` takes one chunk from ``r`` and gives one to every member. Per operation
on ``k`` chunks a port moves

* out: ``k`` for every ``glres`` it is a member of (its contribution), ``k`` for every
  operation it runs (the store);
* in: ``k`` for every ``glres`` it runs (the sum), ``k`` for every operation it is a
  member of (the stored result).

:func:`charge_switch_ops` gives every GPU two links of its own, its NVLS port out and in
(reported under its NVSwitch link's name), at the NVLS port rate of :mod:`arborcc.sim.nvls` (port bandwidth x the profile's
``nvls_efficiency``), and moves each connection that carries only NVLS transfers onto
its sender's out port and its receiver's in port. The IR's transfers on a port are not
the chunks it moves (a rank's own chunks go through the switch but are no transfer; a
reducer's ``n - 1`` reads are one chunk), so each port link runs at that rate x (chunks
its transfers carry / chunks the port moves): the transfers take the time of what the
port really moves. That is exact where every NVLS operation on a port is alike (each
rank reducing its share, as an all-reduce does), an average otherwise. The copy and
additions the translation makes of an operation's result cost nothing (the switch
reduces; the GPU only issues the loads and stores). Everything else - thread blocks,
dependencies, pipelining, the plan's other work - is the plan's, as the engine runs it.

A machine whose switch cannot reduce (no NVSwitch on every GPU, or a profile without
``nvls_efficiency``: V100, A100) cannot run the plan: :func:`charge_switch_ops` refuses it.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

from arborcc.errors import InputError
from arborcc.sim.fidelity import Fidelity
from arborcc.sim.nvls import nvls_port_bandwidth
from arborcc.sim.program import COPY, REDUCE, CompiledAlgorithm
from arborcc.topology.model import DeviceKind, LinkKind, Topology

def port_chunks(traffic) -> tuple[dict[int, int], dict[int, int]]:
    """Chunks each rank's port moves out and in per run of the plan (module doc)."""
    out: dict[int, int] = defaultdict(int)
    into: dict[int, int] = defaultdict(int)
    for op in traffic.ops:
        out[op.rank] += op.chunks
        for m in op.members:
            into[m] += op.chunks
            if op.kind == "glres":
                out[m] += op.chunks
        if op.kind == "glres":
            into[op.rank] += op.chunks
    return out, into


def charge_switch_ops(prog: CompiledAlgorithm, link_rate: list[float], traffic, topology: Topology,
                      fidelity: Fidelity, share: float) -> tuple[CompiledAlgorithm, list[float]]:
    """``prog`` with its NVLS connections on the GPUs' NVLS port links, and the link rates
    for it (``link_rate`` for the plain links, the NVLS port rate x ``share`` - the
    protocol's wire efficiency per instance - for the port links); see the module doc.
    Refuses (:class:`InputError` naming the machine) a topology that cannot run NVLS."""
    port = nvls_port_bandwidth(topology)
    if port is None or fidelity.nvls_efficiency <= 0:
        why = ("not every GPU has an NVSwitch port on one host" if port is None
               else f"its switches do not reduce (the {fidelity.name} profile has no NVLS)")
        raise InputError(f"{prog.algorithm.name} runs NVLS operations (multimem in-switch reduction), which "
                         f"{topology.name} cannot: {why}; simulate it on an NVSwitch machine with NVLS "
                         f"(e.g. --machine dgx-h100)", source=topology.name)
    key = ("switch_ops", id(traffic))
    compiled = prog.kept.get(key)
    if compiled is None:
        compiled = prog.kept[key] = _on_port_links(prog, traffic)
    nvls_prog, weights = compiled
    rates = list(link_rate) + [port * fidelity.nvls_efficiency * share * w for w in weights]
    return nvls_prog, rates


def _on_port_links(prog: CompiledAlgorithm, traffic) -> tuple[CompiledAlgorithm, list[float]]:
    """The compiled form with the NVLS connections on port links, and each port link's
    share of the port rate (chunks its transfers carry / chunks the port moves)."""
    moved_out, moved_in = port_chunks(traffic)
    ranks = prog.topology.ranks
    link_keys, link_bandwidth, link_kind = list(prog.link_keys), list(prog.link_bandwidth), list(prog.link_kind)
    port_link: dict[tuple[str, str], int] = {}
    carried: dict[int, int] = defaultdict(int)
    moved: dict[int, int] = {}
    conn_links = list(prog.conn_links)
    bandwidth = nvls_port_bandwidth(prog.topology) or 0.0

    def link(pair: tuple[str, str], chunks: int) -> int:
        if pair not in port_link:
            port_link[pair] = len(link_keys)
            link_keys.append(pair)
            link_bandwidth.append(bandwidth)
            link_kind.append(LinkKind.NVLINK)
            moved[port_link[pair]] = chunks
        return port_link[pair]

    for c, (src, dst, channel) in enumerate(prog.conn_keys):
        if (src, dst, channel) not in traffic.connections:
            continue
        out = link(switch_port(prog.topology, ranks[src]), moved_out[src])
        into = link(switch_port(prog.topology, ranks[dst])[::-1], moved_in[dst])
        conn_links[c] = (out, into)
        carried[out] += prog.conn_chunks[c]
        carried[into] += prog.conn_chunks[c]
    weights = [carried[l] / moved[l] if moved[l] else 1.0 for l in range(len(prog.link_keys), len(link_keys))]
    tb_index = {(r, t): g for g, (r, t) in enumerate(zip(prog.tb_rank, prog.tb_id))}
    tb_flags = list(prog.tb_flags)
    for rank, tb, step in traffic.local_steps:  # the switch reduces: no copy or addition on the GPU
        g = tb_index[(rank, tb)]
        if tb_flags[g] is prog.tb_flags[g]:
            tb_flags[g] = list(tb_flags[g])
        tb_flags[g][step] &= ~(REDUCE | COPY)
    nvls_prog = dataclasses.replace(prog, conn_links=conn_links, link_keys=link_keys, link_bandwidth=link_bandwidth,
                                    link_kind=link_kind, tb_flags=tb_flags, kept={})
    return nvls_prog, weights


def switch_port(topology: Topology, gpu: str) -> tuple[str, str]:
    """The key ``(gpu, switch)`` of ``gpu``'s link to an NVSwitch: the name its NVLS port
    links go by (in reports and timelines)."""
    return next((l.src, l.dst) for l in topology.out_links(gpu) if topology.devices[l.dst].kind is DeviceKind.NVSWITCH)
