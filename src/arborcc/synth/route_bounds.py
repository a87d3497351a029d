"""The bound a file can reach: collectives whose every transfer takes the runtime's route.

:func:`arborcc.synth.bounds.collective_bound` lets data split over every path of the
topology - relays (PCIe switches, CPUs, NVSwitches, NICs) forward it any way a flow
likes. An MSCCL or MSCCL++ file names no route: a transfer from rank ``u`` to rank ``v``
runs on the one route the runtime takes for that pair, the route the simulator gives it
(:func:`arborcc.topology.routing.route`, which :mod:`arborcc.sim.program` uses for every
connection of a file). Links that no pair's route crosses, and the split of a pair's
traffic over several paths, are capacity no file can use: on DGX-1P, DGX-1V, DGX-2,
DGX A100 and DGX H100 every pair of GPUs that PCIe could join is also joined over NVLink
or NVSwitch, which the route takes, so PCIe carries only what has no NVLink.

:func:`file_bound` is the proven upper bound on a collective's algbw under that rule,
in :func:`~arborcc.synth.bounds.collective_bound`'s conventions (nccl-tests' algbw; for
all-reduce the better of reduce-scatter + all-gather and reduce + broadcast through one
root). It is an exact linear program over the *pair graph*: one arc per ordered pair of
ranks with a route, carrying ``x_uv`` bytes/s; for every physical link, the sum of
``x_uv`` over the pairs whose route crosses it is at most the link's bandwidth. GPUs
forward only by receiving and sending again (two pairs), so the pair graph has no relays
and the theorems of :mod:`arborcc.synth.bounds` apply to it directly:

* broadcast from ``r`` at rate ``R``: a flow of value ``R`` from ``r`` to every other rank
  under ``x`` (Edmonds: then ``x`` packs arborescences of total rate ``R``); reduce to
  ``r`` the same towards ``r``;
* all-gather at per-shard rate ``R`` (``algbw = N R``): by Edmonds' theorem for
  arborescences with different roots, every set ``S`` of ranks that misses one needs
  ``x(out of S) >= R |S|``, which holds iff for every rank ``t`` the other ranks can each
  send ``R`` to ``t`` at once under ``x`` (one flow per ``t``: N flows, not N^2);
  reduce-scatter: ``x(into S) >= R |S|``, i.e. ``t`` can send ``R`` to every other rank;
* gather to / scatter from ``r``: the one such flow of ``r`` (every block has the same
  sink or source); all-to-all: the maximum concurrent flow, one flow per source with
  its own share of the links;
* all-reduce: reduce-scatter + all-gather, ``1 / (1/algbw_rs + 1/algbw_ag)``, and per root
  a broadcast and a reduce at the same rate ``R`` whose pair rates share the links (Blink's
  split), maximised over roots.

Where every route is one direct link the pair graph is the topology and the bound equals
``collective_bound``. It bounds files whose transfers are point-to-point (MSCCL XML,
MSCCL++ without NVLS switch operations, which reduce inside the switch). For the
simulator's profile, bound ``efficiency_adjusted(t)`` routed on ``t`` (``routed_on``): the
simulator routes on the nominal topology and then scales the links' rates.

The LP has about ``N x pairs`` flow variables (``N^3``), so topologies of more than
:data:`MAX_FILE_BOUND_RANKS` ranks are refused (:class:`SolverLimitError`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from arborcc.errors import SolverLimitError, SynthesisError
from arborcc.ir.collectives import busbw_factor
from arborcc.topology.model import GB, Topology
from arborcc.topology.routing import can_route, route

#: the most ranks whose file bound is computed: at 16 ranks each LP takes under a second
#: on 2 cores; at 32 (about 31,000 flow variables) 30-80 s
MAX_FILE_BOUND_RANKS = 16
#: collectives with a file bound
FILE_BOUND_COLLECTIVES = ("broadcast", "reduce", "allgather", "reducescatter", "allreduce", "gather", "scatter",
                          "alltoall")


@dataclass(frozen=True)
class RoutedPairs:
    """The pair graph of a topology: its ranks, the ordered rank pairs with a route
    (``src[p] -> dst[p]``, rank positions), and which links each pair's route crosses
    (``link_pair``: a ``links`` x pairs 0/1 matrix, scipy sparse) with those links' bandwidths
    in B/s (``capacity``)."""

    name: str
    ranks: tuple[str, ...]
    links: tuple[tuple[str, str], ...]
    src: np.ndarray
    dst: np.ndarray
    link_pair: object
    capacity: np.ndarray

    @property
    def num_ranks(self) -> int:
        return len(self.ranks)

    @property
    def num_pairs(self) -> int:
        return len(self.src)


@dataclass(frozen=True)
class FileBound:
    """The most algbw (B/s, nccl-tests convention) a file reaches when every transfer takes
    its pair's route; ``root`` for the rooted collectives; for all-reduce ``rs_ag_algbw``
    and ``tree_algbw`` (through ``tree_root``) are the two families' bounds."""

    collective: str
    algbw: float
    num_ranks: int
    root: str | None
    pairs: int
    solve_time: float
    rs_ag_algbw: float = 0.0
    tree_algbw: float = 0.0
    tree_root: str | None = None

    @property
    def algbw_gbps(self) -> float:
        return self.algbw / GB

    @property
    def busbw(self) -> float:
        """nccl-tests bus bandwidth (:func:`arborcc.ir.collectives.busbw_factor`)."""
        return self.algbw * busbw_factor(self.collective, self.num_ranks)


def routed_pairs(topology: Topology, routed_on: Topology | None = None) -> RoutedPairs:
    """The pair graph of ``topology`` whose routes are ``routed_on``'s (default: its own):
    each pair's route as :func:`arborcc.topology.routing.route` gives it, each link at
    ``topology``'s bandwidth. ``routed_on`` must have the same ranks and links."""
    from scipy.sparse import coo_matrix

    routing = routed_on if routed_on is not None else topology
    if routing.ranks != topology.ranks or set(routing.links) != set(topology.links):
        raise SynthesisError(f"{topology.name}: routes of {routing.name} do not fit it (other ranks or links)")
    ranks = tuple(topology.ranks)
    link_index = {key: i for i, key in enumerate(topology.links)}
    src, dst, rows, cols = [], [], [], []
    for u, a in enumerate(ranks):
        for v, b in enumerate(ranks):
            if u == v or not can_route(routing, a, b):
                continue
            p = len(src)
            src.append(u)
            dst.append(v)
            for pair in route(routing, a, b).pairs():
                rows.append(link_index[pair])
                cols.append(p)
    capacity = np.array([float(l.bandwidth) for l in topology.links.values()])
    link_pair = coo_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(link_index), len(src))).tocsr()
    return RoutedPairs(topology.name, ranks, tuple(topology.links), np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64),
                       link_pair, capacity)


def max_common_rate(pairs: RoutedPairs, groups: list[np.ndarray]) -> float:
    """The largest ``R`` (B/s) for which every commodity's flow fits (module doc).

    ``groups``: per group a ``(K, N)`` array of demand vectors, one row per commodity: its
    flow leaves rank ``v`` at net rate ``R d[v]`` (positive: sends, negative: receives).
    The commodities of a group share the group's pair rates ``x_g`` (each flow at most
    ``x_g`` on every pair: a multicast), and the groups' pair rates share the links
    (``sum_g link_pair x_g <= capacity``). One sparse LP, solved by HiGHS.
    """
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    N, P = pairs.num_ranks, pairs.num_pairs
    scale = float(pairs.capacity.max()) if len(pairs.capacity) and pairs.capacity.max() > 0 else 1.0
    # node-pair incidence: net outflow at each rank
    inc_rows = np.concatenate([pairs.src, pairs.dst])
    inc_cols = np.concatenate([np.arange(P), np.arange(P)])
    inc_vals = np.concatenate([np.ones(P), -np.ones(P)])
    ub_rows, ub_cols, ub_vals = [], [], []  # rows: links, then each commodity's "flow <= x_g"
    eq_rows, eq_cols, eq_vals = [], [], []
    lp = pairs.link_pair.tocoo()
    n_vars, n_ub, n_eq = 1, lp.shape[0], 0  # variable 0 is R
    for demands in groups:
        demands = np.atleast_2d(np.asarray(demands, dtype=float))
        K = demands.shape[0]
        x0 = n_vars
        ub_rows.append(lp.row)
        ub_cols.append(x0 + lp.col)
        ub_vals.append(lp.data)
        for k in range(K):
            f0 = x0 + P * (k + 1)
            ub_rows += [n_ub + np.arange(P)] * 2
            ub_cols += [f0 + np.arange(P), x0 + np.arange(P)]
            ub_vals += [np.ones(P), -np.ones(P)]
            n_ub += P
            eq_rows += [n_eq + inc_rows]
            eq_cols += [f0 + inc_cols]
            eq_vals += [inc_vals]
            d = demands[k]
            nz = np.nonzero(d)[0]
            eq_rows.append(n_eq + nz)
            eq_cols.append(np.zeros(len(nz), dtype=np.int64))
            eq_vals.append(-d[nz])
            n_eq += N
        n_vars += P * (K + 1)
    a_ub = coo_matrix((np.concatenate(ub_vals), (np.concatenate(ub_rows), np.concatenate(ub_cols))),
                      shape=(n_ub, n_vars)).tocsr()
    a_eq = coo_matrix((np.concatenate(eq_vals), (np.concatenate(eq_rows), np.concatenate(eq_cols))),
                      shape=(n_eq, n_vars)).tocsr()
    b_ub = np.concatenate([pairs.capacity / scale, np.zeros(n_ub - lp.shape[0])])
    c = np.zeros(n_vars)
    c[0] = -1.0
    res = linprog(c, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=np.zeros(n_eq), bounds=(0, None), method="highs")
    if res.status != 0:
        raise SynthesisError(f"{pairs.name}: the file bound's LP ended: {res.message}")
    return float(res.x[0]) * scale


def reachability_problem(pairs: RoutedPairs, collective: str, root: int) -> str | None:
    """Why ``collective`` cannot run over the routed pairs at all (a rank its data cannot
    reach), or None."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import breadth_first_order

    N = pairs.num_ranks
    adj = coo_matrix((np.ones(pairs.num_pairs), (pairs.src, pairs.dst)), shape=(N, N)).tocsr()

    def unreached(start: int, reverse: bool) -> list[int]:
        seen = breadth_first_order(adj.T.tocsr() if reverse else adj, start, return_predecessors=False)
        return sorted(set(range(N)) - set(int(i) for i in seen))

    checks = {"broadcast": [(root, False)], "scatter": [(root, False)], "reduce": [(root, True)],
              "gather": [(root, True)]}.get(collective, [(0, False), (0, True)])
    for start, reverse in checks:
        missing = unreached(start, reverse)
        if missing:
            a, b = pairs.ranks[start], pairs.ranks[missing[0]]
            return f"no chain of routes from {b} to {a}" if reverse else f"no chain of routes from {a} to {b}"
    return None


def single_demands(n: int, sender: int, receiver: int) -> np.ndarray:
    """One flow of the common rate from ``sender`` to ``receiver``."""
    d = np.zeros(n)
    d[sender], d[receiver] = 1.0, -1.0
    return d


def broadcast_demands(n: int, root: int) -> np.ndarray:
    """Broadcast from ``root``: a flow to every other rank (one commodity each)."""
    return np.array([single_demands(n, root, t) for t in range(n) if t != root])


def reduce_demands(n: int, root: int) -> np.ndarray:
    """Reduce to ``root``: a flow from every other rank (one commodity each)."""
    return np.array([single_demands(n, s, root) for s in range(n) if s != root])


def gather_demands(n: int, sink: int) -> np.ndarray:
    """Every other rank sends the common rate to ``sink``: one commodity."""
    d = np.ones(n)
    d[sink] = -(n - 1)
    return d


def scatter_demands(n: int, source: int) -> np.ndarray:
    """``source`` sends the common rate to every other rank: one commodity."""
    return -gather_demands(n, source)


def tree_ceiling(pairs: RoutedPairs) -> float:
    """An upper bound on the reduce + broadcast rate through any root that costs no LP:
    every other rank receives ``R`` of broadcast and sends ``R`` of reduce (the root sends
    and receives ``R``), and a pair's rate crosses the link into its receiver that ends
    its route (GPUs do not forward), so the links into ranks that some route crosses
    carry at least the broadcast's and the reduce's ``(N - 1) R`` each; likewise the
    links out of ranks."""
    N = pairs.num_ranks
    at = {r: i for i, r in enumerate(pairs.ranks)}
    into, outof = np.zeros(N), np.zeros(N)
    routed = np.asarray(pairs.link_pair.sum(axis=1)).ravel() > 0
    for (a, b), cap, used in zip(pairs.links, pairs.capacity.tolist(), routed.tolist()):
        if not used:
            continue
        if b in at:
            into[at[b]] += cap
        if a in at:
            outof[at[a]] += cap
    return float(min(into.sum() / (2 * (N - 1)), outof.sum() / (2 * (N - 1)), into.min(), outof.min()))


def file_bound(topology: Topology, collective: str, root: int = 0, routed_on: Topology | None = None) -> FileBound:
    """The most algbw a file reaches for ``collective`` on ``topology`` when every transfer
    takes the route ``routed_on`` (default ``topology``) gives its pair (module doc);
    ``root`` is a rank position. Raises :class:`SolverLimitError` above
    :data:`MAX_FILE_BOUND_RANKS` ranks and :class:`SynthesisError` for a collective
    without a file bound or one whose data some rank cannot reach."""
    t0 = time.perf_counter()
    if collective not in FILE_BOUND_COLLECTIVES:
        raise SynthesisError(f"no file bound is known for collective {collective!r} "
                             f"(known: {', '.join(FILE_BOUND_COLLECTIVES)})")
    N = topology.num_ranks
    if N < 2:
        raise SynthesisError(f"{topology.name}: a collective needs at least 2 ranks, the topology has {N}")
    if N > MAX_FILE_BOUND_RANKS:
        raise SolverLimitError(f"{topology.name}: the file bound's LP is computed for at most "
                               f"{MAX_FILE_BOUND_RANKS} ranks, the topology has {N}")
    if not 0 <= root < N:
        raise SynthesisError(f"{topology.name}: root rank {root} does not exist ({N} ranks)")
    pairs = routed_pairs(topology, routed_on)
    problem = reachability_problem(pairs, collective, root)
    if problem:
        raise SynthesisError(f"{topology.name}: {collective}: {problem} (a file's transfers take their pairs' routes)")
    root_name = topology.ranks[root] if collective in ("broadcast", "reduce", "gather", "scatter") else None
    rs_ag = tree = 0.0
    tree_root = None
    if collective == "broadcast":
        algbw = max_common_rate(pairs, [broadcast_demands(N, root)])
    elif collective == "reduce":
        algbw = max_common_rate(pairs, [reduce_demands(N, root)])
    elif collective == "gather":
        algbw = N * max_common_rate(pairs, [gather_demands(N, root)])
    elif collective == "scatter":
        algbw = N * max_common_rate(pairs, [scatter_demands(N, root)])
    elif collective == "allgather":
        algbw = N * max_common_rate(pairs, [np.array([gather_demands(N, t) for t in range(N)])])
    elif collective == "reducescatter":
        algbw = N * max_common_rate(pairs, [np.array([scatter_demands(N, t) for t in range(N)])])
    elif collective == "alltoall":  # every block its own data: a flow per source with its own share
        algbw = N * max_common_rate(pairs, [scatter_demands(N, s) for s in range(N)])
    else:
        rs = N * max_common_rate(pairs, [np.array([scatter_demands(N, t) for t in range(N)])])
        ag = N * max_common_rate(pairs, [np.array([gather_demands(N, t) for t in range(N)])])
        rs_ag = 1.0 / (1.0 / rs + 1.0 / ag)
        if tree_ceiling(pairs) > rs_ag * (1 + 1e-9):
            for r in range(N):
                rate = max_common_rate(pairs, [broadcast_demands(N, r), reduce_demands(N, r)])
                if rate > tree:
                    tree, tree_root = rate, topology.ranks[r]
        algbw = max(rs_ag, tree)
    return FileBound(collective, algbw, N, root_name, pairs.num_pairs, time.perf_counter() - t0,
                     rs_ag, tree, tree_root)
