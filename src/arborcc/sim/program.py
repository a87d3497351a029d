"""An Algorithm on a Topology in the flat form the simulator runs: thread blocks with
their steps as plain lists, connections with the links their transfers cross.

Built once per (algorithm, topology, routes) and reused for every size, protocol and
parameter set; :func:`compile_algorithm` keeps the last few in a small cache keyed by
the identities of the algorithm, topology and routes (:class:`arborcc.memo.BoundedCache`),
which is what makes a sweep over sizes cheap.

A connection is (sender rank, receiver rank, channel): MSCCL gives it exactly one
sending and one receiving thread block, and its k-th send is the k-th receive. The
route is the one the strategy chose (``routes``) or :meth:`Topology.route`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import arborcc.sim.native as native
from arborcc.collector import collector_paused
from arborcc.errors import VerificationError
from arborcc.ir.model import Algorithm, Op
from arborcc.memo import BoundedCache
from arborcc.topology.model import LinkKind, Topology

#: the bits of a step's flags, as the compiled event loop reads them (sim/csrc/engine.hpp)
RECV, SEND, REDUCE, COPY = native.RECEIVES, native.SENDS, native.REDUCES, native.COPIES
#: the flat forms built last, by the identities of algorithm, topology and routes
_COMPILED = BoundedCache("sim.program.compiled", 16, purpose="flat forms by algorithm, topology and routes objects")


def op_flags(op: Op) -> int:
    """The simulator's bit flags for one step type."""
    return ((RECV if op.receives else 0) | (SEND if op.sends else 0) | (REDUCE if op.reduces else 0)
            | (COPY if op is Op.COPY else 0))


_FLAGS = {op: op_flags(op) for op in Op}


@dataclass
class CompiledAlgorithm:
    """Flat form of an algorithm on a topology (see module doc).

    Thread blocks are numbered globally in (rank, thread block id) order. Per thread
    block: its steps' flags, chunk counts and dependencies (``(thread block, step)``
    or None), and the connection it sends on and receives from (-1 for none).
    """

    algorithm: Algorithm
    topology: Topology
    tb_rank: list[int]
    tb_id: list[int]
    tb_flags: list[list[int]]
    tb_counts: list[list[int]]
    tb_deps: list[list[tuple[int, int] | None] | None]  #: None: no step of the thread block has one
    tb_send: list[int]
    tb_recv: list[int]
    conn_keys: list[tuple[int, int, int]]
    conn_path: list[tuple[str, ...]]
    conn_links: list[tuple[int, ...]]
    conn_latency: list[float]
    conn_chunks: list[int]  #: chunks one iteration sends over the connection
    link_keys: list[tuple[str, str]]
    link_bandwidth: list[float]
    link_kind: list[LinkKind]
    #: what engines derive from this form and reuse across runs (e.g. its pieces per slice geometry)
    kept: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def num_tbs(self) -> int:
        return len(self.tb_rank)

    @property
    def num_steps(self) -> int:
        return sum(len(f) for f in self.tb_flags)


def compile_algorithm(algo: Algorithm, topology: Topology,
                      routes: Mapping[tuple[int, int, int], tuple[str, ...]] | None = None) -> CompiledAlgorithm:
    """The flat form of ``algo`` on ``topology`` (cached by identity, see module doc)."""
    hit = _COMPILED.get_for_each((algo, topology, routes))
    if hit is not None:
        return hit
    with collector_paused():  # a list entry per step, millions on large rings: see library/nccl_ring.py
        compiled = _compile(algo, topology, routes or {})
    _COMPILED.put_for_each((algo, topology, routes), compiled)
    return compiled


def _compile(algo: Algorithm, topology: Topology,
             routes: Mapping[tuple[int, int, int], tuple[str, ...]]) -> CompiledAlgorithm:
    if algo.num_ranks != topology.num_ranks:
        raise VerificationError(f"algorithm {algo.name} has {algo.num_ranks} ranks but topology "
                                f"{topology.name} has {topology.num_ranks}")
    tb_rank, tb_id, tb_flags, tb_counts, raw_deps = [], [], [], [], []
    senders: dict[tuple[int, int, int], int] = {}
    receivers: dict[tuple[int, int, int], int] = {}
    index: dict[tuple[int, int], int] = {}
    for prog in sorted(algo.ranks, key=lambda p: p.rank):
        for tb in sorted(prog.threadblocks, key=lambda tb: tb.id):
            g = len(tb_rank)
            index[(prog.rank, tb.id)] = g
            tb_rank.append(prog.rank)
            tb_id.append(tb.id)
            steps = tb.steps
            flags = [_FLAGS[s.op] for s in steps]
            tb_flags.append(flags)
            cnt = [s.count for s in steps]
            tb_counts.append(cnt if min(cnt, default=1) >= 1 else [max(1, k) for k in cnt])
            deps = [s.dep for s in steps]
            raw_deps.append(None if deps.count(None) == len(deps) else
                            [(prog.rank, d.tb, d.step) if d is not None else None for d in deps])
            where = f"rank {prog.rank} thread block {tb.id}"
            kinds = set(flags)
            if any(f & SEND for f in kinds):
                if tb.send < 0:
                    raise VerificationError(f"{algo.name}: {where} sends but has no send peer")
                key = (prog.rank, tb.send, tb.channel)
                if key in senders:
                    raise VerificationError(f"{algo.name}: connection {key[0]}->{key[1]} channel {key[2]} "
                                            f"has two sending thread blocks")
                senders[key] = g
            if any(f & RECV for f in kinds):
                if tb.recv < 0:
                    raise VerificationError(f"{algo.name}: {where} receives but has no receive peer")
                key = (tb.recv, prog.rank, tb.channel)
                if key in receivers:
                    raise VerificationError(f"{algo.name}: connection {key[0]}->{key[1]} channel {key[2]} "
                                            f"has two receiving thread blocks")
                receivers[key] = g
    tb_deps: list[list[tuple[int, int] | None] | None] = []
    for g, deps in enumerate(raw_deps):
        if deps is None:
            tb_deps.append(None)
            continue
        out = []
        for d in deps:
            if d is None:
                out.append(None)
                continue
            rank, tb, step = d
            target = index.get((rank, tb))
            if target is None or not 0 <= step < len(tb_flags[target]):
                raise VerificationError(f"{algo.name}: rank {rank} thread block {tb_id[g]} depends on "
                                        f"thread block {tb} step {step}, which does not exist")
            out.append((target, step))
        tb_deps.append(out)

    n = len(tb_rank)
    tb_send, tb_recv = [-1] * n, [-1] * n
    conn_keys = sorted(set(senders) | set(receivers))
    link_index: dict[tuple[str, str], int] = {}
    conn_path, conn_links, conn_latency, conn_chunks = [], [], [], []
    for c, key in enumerate(conn_keys):
        src, dst, ch = key
        s, r = senders.get(key), receivers.get(key)
        if s is None or r is None:
            side = "receiver" if r is None else "sender"
            raise VerificationError(f"{algo.name}: connection {src}->{dst} channel {ch} has no {side}")
        sent = [k for k, f in zip(tb_counts[s], tb_flags[s]) if f & SEND]
        got = [k for k, f in zip(tb_counts[r], tb_flags[r]) if f & RECV]
        if sent != got:
            raise VerificationError(f"{algo.name}: connection {src}->{dst} channel {ch} sends {len(sent)} "
                                    f"transfers of {sum(sent)} chunks but receives {len(got)} of {sum(got)}")
        tb_send[s], tb_recv[r] = c, c
        path = routes.get(key) or topology.route(topology.ranks[src], topology.ranks[dst]).path
        ids = []
        for pair in zip(path, path[1:]):
            if pair not in topology.links:
                raise VerificationError(f"{algo.name}: route of {src}->{dst} channel {ch} uses "
                                        f"{pair[0]}->{pair[1]}, which is not a link of {topology.name}")
            ids.append(link_index.setdefault(pair, len(link_index)))
        conn_path.append(tuple(path))
        conn_links.append(tuple(ids))
        conn_latency.append(sum(topology.links[p].latency for p in zip(path, path[1:])))
        conn_chunks.append(sum(sent))
    link_keys = list(link_index)
    return CompiledAlgorithm(
        algo, topology, tb_rank, tb_id, tb_flags, tb_counts, tb_deps, tb_send, tb_recv, conn_keys, conn_path,
        conn_links, conn_latency, conn_chunks, link_keys,
        [topology.links[k].bandwidth for k in link_keys], [topology.links[k].kind for k in link_keys])
