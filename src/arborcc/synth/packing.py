"""Packings of arborescences that reach the optimal rates of :mod:`arborcc.synth.bounds`.

Two methods:

* ``method="mwu"`` - Blink (Wang et al., MLSys 2020, section 3.2): an approximate
  fractional packing by multiplicative weights, here the Garg-Koenemann scheme
  (FOCS 1998) for fractional packing - repeatedly route along the cheapest
  arborescence under exponential link lengths, then scale - followed by Blink's
  integer program (section 3.2.1) that keeps few trees.
* ``method="exact"`` - LP column generation (Dantzig-Wolfe) over arborescences: the
  master LP ``max sum w_T s.t. sum_T load_T(e) w_T <= c_e`` (Blink equations 1-3) is
  solved with HiGHS on a growing set of trees; the pricing problem, the cheapest tree
  under the LP's dual link prices, is solved exactly, so the final LP value is the
  optimum over all trees (stopping when the Lagrangian upper bound meets it). The
  optimum equals the cut bound by Edmonds' theorem (GPU-only graphs) and by
  Bang-Jensen, Frank & Jackson (relays with in-capacity >= out-capacity).

Pricing oracle (both methods): trees are arborescences over the ranks whose hops are
routes through relays (see :mod:`arborcc.synth.trees`), so a tree's cost is the sum of
its hops' route costs and each hop may independently take its cheapest route. Hence
the cheapest tree = cheapest relay-only route between every rank pair (Dijkstra on a
graph where ranks receive but do not forward), then a minimum-cost spanning
arborescence of the ranks on those route costs (Chu-Liu/Edmonds, 1965/1967).

Trees used both ways (Blink section 3.3's all-reduce: a reduce up each tree and a
broadcast down it): a tree's load on an arc is its own plus its load on the reverse
arc, and the oracle prices it with each arc's length plus its reverse's
(:class:`_BothWaysOracle`), so the LP's optimum is, where the ranks are joined directly,
the fractional spanning-tree packing of the undirected graph (Nash-Williams and Tutte).

All-gather/reduce-scatter (ForestColl, Zhao et al. 2024): one LP over trees rooted at
every rank sharing the link capacities, ``max x s.t. sum_{T rooted at v} w_T >= x``,
solved by the same column generation with one pricing per root.

Fewest trees (Blink 3.2.1): among the candidate trees (the LP's, plus the MWU trees),
an integer program (HiGHS MILP) chooses the fewest trees whose weights are integer
multiples of a unit (one lane of the slowest chosen link) and still give at least
``(1 - threshold)`` of the bound. If the candidates hold no such integral packing, a
dive in the manner of Lovasz's proof of Edmonds' theorem builds one tree of one unit
at a time, re-solving the LP on the residual capacities and checking by max-flow that
the rest stays packable; failing that, the unit is halved twice and finally weights
may be fractional (each used tree still counts one). ``threshold`` defaults to 1%
(Blink's example is 5%); ``threshold=0`` keeps the exact rate. Broadcast/reduce
minimise by default, all-gather/reduce-scatter do not (their LP optimum is already a
basic solution with few trees per root; on a switch it is Blink's one-hop trees).

Shallower trees: the trees of one root are returned after
:func:`~arborcc.synth.trees.shallower` exchanged hops between trees of the same weight
where that makes the deepest tree shallower (the links' loads unchanged; DGX-1V's
NVLink broadcast from GPU 0: depth 6 -> 4). Per-root packings are left as found: the
chunk rounding of trees rooted at every rank depends on which trees share which pairs,
and exchanges there made DGX-1V's all-reduce trees need 2048 chunks where 1024 did.

Budgets, never clocks: the same input gives the same trees on any machine at any load.
Column generation stops after ``max_rounds`` rounds (:data:`COLUMN_GENERATION_ROUNDS`;
for ``method="mwu"`` the budget counts oracle calls, :data:`MWU_ORACLE_CALLS`), each LP
after :data:`~arborcc.synth.lp.WORK_LIMIT` simplex work (iterations x size), the
tree-count program after :data:`ILP_NODE_LIMIT` branch-and-bound nodes, and the dive
after its ``k`` steps (each a bounded search). When the packing itself is cut short,
:class:`SolverLimitError` is raised, or with ``allow_partial=True`` the packing reached
so far is returned with ``limit_hit`` set.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from functools import cached_property

import numpy as np

import arborcc.synth.native as native
from arborcc.errors import SolverLimitError, SynthesisError
from arborcc.synth.bounds import Bound, allgather_cut_bound, single_source_bound
from arborcc.synth.flowgraph import FlowGraph, LinkSelector, flow_graph, root_index
from arborcc.synth.lp import INF, GrowingLP, quiet_stdout
from arborcc.synth.trees import Hop, Tree, TreePacking, shallower
from arborcc.topology.routing import can_route, route

log = logging.getLogger(__name__)

METHODS = ("exact", "mwu")
#: branch-and-bound nodes the tree-count program may explore; a count, not a time, so
#: the trees chosen do not depend on the machine's load (the best solution found within
#: it is kept; the whole-machine DGX-2 broadcast, the largest case of the benchmark set,
#: proves optimality at about 1,800 nodes and finds its optimum well before 1,000)
ILP_NODE_LIMIT = 1000
#: rounds of column generation (one master LP solve and one pricing per root each); a
#: count, like every budget here. The packings of ``benchmarks/synthesis/xml_snapshot.py``
#: converge within 45 rounds, the all-gather on 8 x DGX A100 (64 roots) in 54
COLUMN_GENERATION_ROUNDS = 1000
#: oracle calls of the multiplicative-weights packing (``method="mwu"``)
MWU_ORACLE_CALLS = 200_000
_TINY = 1e-9  # added to link lengths: keeps zero-price links real edges, prefers short routes


# --- the oracle ----------------------------------------------------------------------

def min_arborescence(cost, root: int) -> list[int]:
    """Minimum-cost spanning arborescence of a dense digraph (Chu-Liu/Edmonds).

    ``cost[u][v]`` is the cost of arc ``u -> v`` (``inf``: no arc); an array or nested
    lists. Returns ``parent`` with ``parent[root] = -1``. Raises
    :class:`SynthesisError` if some vertex cannot be reached. Each vertex takes its
    cheapest in-arc (the first of equal ones); every cycle so formed is contracted,
    entering arcs reduced by the in-arc they replace, and the contracted graph solved
    the same way. O(n^2) per contraction, in compiled code (``arborcc.synth.native``,
    csrc/arborescence.cpp): the oracle below runs it on every cheapest tree, inside
    the extension; this is its entry point from Python.
    """
    par = native.min_arborescence(cost, root)
    if isinstance(par, int):
        raise SynthesisError(f"vertex {par} cannot be reached from {root}")
    return par


class _RouteOracle:
    """Cheapest relay-only routes between ranks, and cheapest trees, under arc lengths
    (in compiled code, ``arborcc.synth.native.RouteGraph``, csrc/routes.cpp: Dijkstra's
    from every rank, breaking ties as :func:`scipy.sparse.csgraph.dijkstra` does, and
    the trees' arborescences, routes and arc loads)."""

    def __init__(self, g: FlowGraph):
        self.g = g
        n, N = g.n, len(g.ranks)
        self.nodes = n
        self.rank_nodes: list[int] = g.ranks.tolist()
        is_rank = np.zeros(n, dtype=bool)
        is_rank[g.ranks] = True
        rank_pos = np.zeros(n, dtype=np.int64)
        rank_pos[g.ranks] = np.arange(N)
        # split graph: a rank u sends from node u and receives at node n + pos(u)
        self.head = np.where(is_rank[g.dst], n + rank_pos[g.dst], g.dst)
        self.graph = native.RouteGraph(n + N, n, g.ranks, g.src, self.head)

    @cached_property
    def arc_of(self) -> dict[tuple[int, int], int]:
        """Arc id of each (tail, head) of the split graph."""
        return {(a, b): e for e, (a, b) in enumerate(zip(self.g.src.tolist(), self.head.tolist()))}

    def routes(self, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(D, pred)``: ``D[k, j]`` the cheapest route cost from rank k to rank j,
        ``pred[k]`` the predecessors of every node on the routes from rank k."""
        return self.graph.routes(length, 0.0)

    def path(self, pred: np.ndarray, k: int, j: int) -> list[int]:
        """Arc ids of the route from rank k to rank j (``pred``: :meth:`routes`')."""
        arc_of = self.arc_of
        node, arcs = self.nodes + j, []
        src = self.rank_nodes[k]
        row = pred[k]
        while node != src:
            p = int(row[node])
            if p < 0:
                g = self.g
                raise SynthesisError(f"{g.name}: no route from {g.nodes[src]} to {g.nodes[g.ranks[j]]}")
            arcs.append(arc_of[(p, node)])
            node = p
        return arcs[::-1]

    def cheapest_tree(self, length: np.ndarray, root_pos: int) -> tuple[float, "_Column"]:
        return self.cheapest_trees(length, [root_pos])[0]

    def cheapest_trees(self, length: np.ndarray, roots: list[int]) -> list[tuple[float, "_Column"]]:
        """The cheapest tree of each root under ``length`` (the routes are shared), and its cost."""
        trees = self._columns(self.graph.cheapest_trees(length, _TINY, roots))
        return [(float(col.load @ length), col) for col in trees]

    def seed_trees(self, cap: np.ndarray, roots: list[int], per_root: int) -> list["_Column"]:
        """``per_root`` rounds over ``roots`` of the cheapest tree under lengths that
        start at ``1 / cap`` and grow on the links each tree uses, by the factor
        ``1 + load / cap * min(cap)`` (duplicates included)."""
        return self._columns(self.graph.seed_trees(cap, _TINY, roots, per_root))

    def _columns(self, trees) -> list["_Column"]:
        """Columns of the native oracle's trees, or its failure as a :class:`SynthesisError`."""
        if isinstance(trees, tuple):
            why, root = trees
            g = self.g
            if why == "reaches no rank":
                raise SynthesisError(f"{g.name}: {g.nodes[g.ranks[root]]} reaches no rank over {g.links} links")
            raise SynthesisError(f"{g.name}: some rank cannot be reached from {g.nodes[g.ranks[root]]} "
                                 f"over {g.links} links")
        return [_Column(root, hops, load) for root, hops, load in trees]


class _PairRouteOracle:
    """The oracle of :class:`_RouteOracle` where every hop takes the runtime's route of its
    pair of ranks (:func:`arborcc.topology.routing.route`): the trees a file can express
    (MSCCL XML names no route), packed on the pair graph of
    :mod:`arborcc.synth.route_bounds`, whose broadcast optimum Edmonds' theorem makes the
    file bound. A pair whose route leaves ``g``'s links is no hop."""

    def __init__(self, topology, g: FlowGraph):
        self.g = g
        N, E = len(g.ranks), len(g.src)
        arc = {g.original_link(i): i for i in range(E)}
        ranks = [g.nodes[v] for v in g.ranks.tolist()]
        self.arcs: dict[tuple[int, int], tuple[int, ...]] = {}
        for k in range(N):
            for j in range(N):
                if k == j:
                    continue
                a, b = (ranks[j], ranks[k]) if g.reversed_of_original else (ranks[k], ranks[j])
                if not can_route(topology, a, b):
                    continue
                path = route(topology, a, b).path
                links = list(zip(path, path[1:]))
                if g.reversed_of_original:
                    links.reverse()
                if all(l in arc for l in links):
                    self.arcs[(k, j)] = tuple(arc[l] for l in links)
        self.incidence = np.zeros((N * N, E))
        for (k, j), ids in self.arcs.items():
            np.add.at(self.incidence[k * N + j], list(ids), 1.0)
        self.missing = np.ones((N, N), dtype=bool)
        for k, j in self.arcs:
            self.missing[k, j] = False

    def routes(self, length: np.ndarray) -> tuple[np.ndarray, None]:
        """``(D, None)``: ``D[k, j]`` the cost of pair k -> j's route (inf: no hop)."""
        N = len(self.g.ranks)
        D = (self.incidence @ length).reshape(N, N)
        D[self.missing] = np.inf
        return D, None

    def path(self, pred, k: int, j: int) -> list[int]:
        return list(self.arcs[(k, j)])

    def cheapest_tree(self, length: np.ndarray, root_pos: int) -> tuple[float, "_Column"]:
        return self.cheapest_trees(length, [root_pos])[0]

    def cheapest_trees(self, length: np.ndarray, roots: list[int]) -> list[tuple[float, "_Column"]]:
        D, _ = self.routes(length + _TINY)
        out = []
        for r in roots:
            parent = min_arborescence(D, r)
            hops = tuple((int(parent[v]), v, self.arcs[(int(parent[v]), v)]) for v in range(len(parent)) if v != r)
            load = np.zeros(len(length))
            for *_, ids in hops:
                np.add.at(load, list(ids), 1.0)
            out.append((float(load @ length), _Column(r, hops, load)))
        return out

    def seed_trees(self, cap: np.ndarray, roots: list[int], per_root: int) -> list["_Column"]:
        """As :meth:`_RouteOracle.seed_trees`."""
        length, out = 1.0 / cap, []
        for _ in range(per_root):
            for r in roots:
                _, col = self.cheapest_tree(length, r)
                out.append(col)
                length = length * (1.0 + col.load / cap * float(cap.min()))
        return out


class _BothWaysOracle:
    """The trees of ``inner`` (either oracle above) where each is used in both directions:
    data flows along a tree and back along its reverse at once (Blink section 3.3:
    all-reduce as a reduce up a tree and a broadcast down the same tree), so a tree's
    load on an arc is its load there plus its load on the reverse arc. A tree's cost
    under lengths ``y`` is then its ``inner`` cost under ``y`` plus ``y`` of the reverse
    arcs, so ``inner`` prices it. Every arc needs a reverse arc (duplex links)."""

    def __init__(self, inner: _RouteOracle | _PairRouteOracle):
        self.inner = inner
        self.g = g = inner.g
        pairs = list(zip(g.src.tolist(), g.dst.tolist()))
        arc = {pair: e for e, pair in enumerate(pairs)}
        for e, (a, b) in enumerate(pairs):
            if (b, a) not in arc:
                src, dst = g.original_link(e)
                raise SynthesisError(f"{g.name}: link {src} -> {dst} has no reverse link; trees used both ways "
                                     "need duplex links")
        self.reverse = np.array([arc[(b, a)] for a, b in pairs], dtype=np.int64)

    def cheapest_tree(self, length: np.ndarray, root_pos: int) -> tuple[float, "_Column"]:
        return self.cheapest_trees(length, [root_pos])[0]

    def cheapest_trees(self, length: np.ndarray, roots: list[int]) -> list[tuple[float, "_Column"]]:
        out = []
        for cost, col in self.inner.cheapest_trees(length + length[self.reverse], roots):
            out.append((cost, _Column(col.root, col.hops, col.load + col.load[self.reverse])))
        return out


@dataclass(frozen=True, eq=False)
class _Column:
    """A tree as the LP sees it: root position, hops (parent, child, arc ids), arc loads."""

    root: int
    hops: tuple[tuple[int, int, tuple[int, ...]], ...]
    load: np.ndarray

    @cached_property
    def key(self) -> tuple:
        return (self.root, tuple(sorted(self.hops)))


# --- LP master problems ----------------------------------------------------------------

class _Master:
    """The master LP ``max x`` s.t. ``x <= sum of w over trees of each root`` and tree
    loads within ``cap`` (Blink equations 1-3; with one root, x = sum w), kept between
    solves so that column generation only adds columns and re-solves warm."""

    def __init__(self, cap: np.ndarray, roots: list[int], cols: list[_Column]):
        E = len(cap)
        self.lp = GrowingLP("tree-packing")
        self.rpos = {r: i for i, r in enumerate(roots)}
        self.E = E
        self.lp.add_cols([-1.0], [0.0], [INF])  # x
        self.lp.add_rows(np.full(E, -INF), cap, [((), ())] * E)
        self.lp.add_rows(np.full(len(roots), -INF), np.zeros(len(roots)), [((0,), (1.0,))] * len(roots))
        self.cols: list[_Column] = []
        self.add(cols)

    def add(self, cols: list[_Column]) -> None:
        """Add the trees' columns: their arc loads, then -1 in their root's row."""
        index, value, starts = [], [], np.zeros(len(cols), dtype=np.int32)
        at = 0
        for j, c in enumerate(cols):
            rows = np.flatnonzero(c.load)
            starts[j] = at
            at += len(rows) + 1
            index += (rows, (self.E + self.rpos[c.root],))
            value += (c.load[rows], (-1.0,))
        if cols:
            self.lp.add_packed_cols(np.zeros(len(cols)), np.zeros(len(cols)), np.full(len(cols), INF), starts,
                                    np.concatenate(index), np.concatenate(value))
        self.cols.extend(cols)

    def solve(self):
        """(x, weights, link prices y, root prices pi)."""
        sol = self.lp.solve()
        dual = -sol.row_dual
        return float(sol.x[0]), sol.x[1:], np.maximum(dual[:self.E], 0.0), np.maximum(dual[self.E:], 0.0)


def _column_generation(oracle: _RouteOracle, cap: np.ndarray, roots: list[int], cols: list[_Column],
                       max_rounds: int, tol: float, target: float | None):
    """Grow ``cols`` until the master LP is optimal over all trees (within ``tol``), for
    at most ``max_rounds`` rounds of pricing.

    Returns (x, weights, cols, limit_hit, upper_bound).
    """
    keys = {c.key for c in cols}
    master = _Master(cap, roots, cols)
    upper = math.inf
    for done in range(max_rounds + 1):
        x, w, y, pi = master.solve()
        if done == max_rounds:
            return x, w, master.cols, True, upper
        if target is not None and x >= target * (1 - 1e-9):
            return x, w, master.cols, False, upper
        theta, added = 0.0, []
        # a root whose constraint has no price (share 0) can gain nothing from a tree:
        # only the others' cheapest trees are worked out
        shares = pi.tolist() if len(roots) > 1 else [1.0]
        priced = [(r, share) for r, share in zip(roots, shares) if share > 0]
        for (r, share), (_, col) in zip(priced, oracle.cheapest_trees(y, [r for r, _ in priced])):
            cost = max(float(col.load @ y), 0.0)
            theta = max(theta, share / cost) if cost > 1e-12 else math.inf
            if cost < share * (1 - tol / 4) and col.key not in keys:
                keys.add(col.key)
                added.append(col)
        master.add(added)
        # y * theta is dual feasible, so theta * x bounds the optimum (Lagrangian bound)
        upper = min(upper, theta * x) if 0 < theta < math.inf else upper
        if not added or x >= upper * (1 - tol):
            return x, w, master.cols, False, upper


def _seed_columns(oracle: _RouteOracle, cap: np.ndarray, roots: list[int], per_root: int) -> list[_Column]:
    """A few trees per root, cheapest under lengths that grow on used links (MWU-style)."""
    cols, keys = [], set()
    for col in oracle.seed_trees(cap, roots, per_root):
        if col.key not in keys:
            keys.add(col.key)
            cols.append(col)
    return cols


# --- Blink: multiplicative weights ----------------------------------------------------------

def _mwu_candidates(oracle: _RouteOracle, cap: np.ndarray, root: int, eps: float, max_calls: int):
    """Garg-Koenemann fractional packing of arborescences rooted at ``root``.

    Lengths start at ``delta / c_e``; each step routes the bottleneck amount along a
    tree and multiplies each used link's length by ``1 + eps * use / c_e``; it stops
    when ``sum c_e l_e >= 1``. Scaling the flow by ``log_{1+eps}(1/delta)`` makes it
    feasible and (1 - eps)^3-optimal (Garg & Koenemann 1998). As in Fleischer (2000)
    a tree is reused while its length stays within ``1 + eps`` of the cheapest one
    found, which saves most oracle calls. Returns (columns, scaled weights, limit_hit);
    ``max_calls`` bounds the oracle calls (``limit_hit``: it stopped there; the weights
    are still feasible, below the guarantee - or the trees are just a candidate set).
    """
    m = len(cap)
    delta = (1 + eps) / ((1 + eps) * m) ** (1 / eps)
    length = delta / cap
    flows: dict[tuple, float] = {}
    cols: dict[tuple, _Column] = {}
    limit = False
    calls = 0
    while float(cap @ length) < 1.0:
        if calls >= max(max_calls, 1):  # one tree at least
            limit = True
            break
        alpha, col = oracle.cheapest_tree(length, root)
        calls += 1
        col = cols.setdefault(col.key, col)
        used = col.load > 0
        amount = float(np.min(cap[used] / col.load[used]))
        while True:
            flows[col.key] = flows.get(col.key, 0.0) + amount
            length = length * (1.0 + eps * amount * col.load / cap)
            if float(cap @ length) >= 1.0 or float(col.load @ length) > (1 + eps) * alpha:
                break
    scale = math.log(1.0 / delta) / math.log(1 + eps)
    keys = list(cols)
    w = np.array([flows[k] / scale for k in keys])
    cl = [cols[k] for k in keys]
    if cl:  # the scaled flow may still exceed a capacity by rounding: scale it back in
        load = np.stack([c.load for c in cl], axis=1) @ w
        over = float(np.max(load / cap))
        if over > 1:
            w = w / over
    return cl, w, limit


# --- Blink: fewest trees --------------------------------------------------------------------

def _fewest_trees(cols: list[_Column], cap: np.ndarray, roots: list[int], targets: dict[int, float],
                  grains: tuple, scale: float) -> tuple[np.ndarray | None, str]:
    """The fewest trees (and their weights) giving each root at least ``targets[root]``.

    Tries weights that are integer multiples of each grain in turn (``None``: any
    weights, Blink's final relaxation); returns (weights, description) or (None, why).
    """
    from scipy.optimize import Bounds, LinearConstraint, milp

    J, E = len(cols), len(cap)
    L = np.stack([c.load for c in cols], axis=1)
    upper = np.array([float(np.min(cap[c.load > 0] / c.load[c.load > 0])) for c in cols])
    total = sum(targets.values())
    for grain in grains:
        g = 1.0 if grain is None else grain
        kmax = np.floor(upper / g + 1e-9)
        if grain is not None and kmax.max() < 1:
            continue
        # variables: k[J] (weight = g k), z[J] (tree used)
        obj = np.concatenate([-0.5 * g * np.ones(J) / total, np.ones(J)])
        rows = [np.hstack([L * g, np.zeros((E, J))])]
        lo, hi = [np.full(E, -np.inf)], [cap * (1 + 1e-9)]
        for r in roots:
            sel = np.array([g if c.root == r else 0.0 for c in cols])
            rows.append(np.concatenate([sel, np.zeros(J)])[None, :])
            lo.append(np.array([targets[r]]))
            hi.append(np.array([np.inf]))
        link = np.hstack([np.eye(J) * g, -np.diag(upper)])  # g k_j <= U_j z_j
        rows.append(link)
        lo.append(np.full(J, -np.inf))
        hi.append(np.zeros(J))
        A = np.vstack(rows)
        cons = LinearConstraint(A, np.concatenate(lo), np.concatenate(hi))
        kub = kmax if grain is not None else upper
        integrality = np.concatenate([np.ones(J) if grain is not None else np.zeros(J), np.ones(J)])
        with quiet_stdout():
            res = milp(obj, constraints=cons, integrality=integrality,
                       bounds=Bounds(np.zeros(2 * J), np.concatenate([kub, np.ones(J)])),
                       options={"node_limit": ILP_NODE_LIMIT, "disp": False, "presolve": False})
        # 0 optimal; 4: the node limit (HiGHS's solution limit, a status scipy does not
        # name; the incumbent is kept: the same on every run)
        if res.x is not None and res.status in (0, 4):
            w = g * (np.round(res.x[:J]) if grain is not None else res.x[:J])
            w[res.x[J:] < 0.5] = 0.0
            w[w < 1e-12] = 0.0
            if all(sum(w[j] for j in range(J) if cols[j].root == r) >= targets[r] * (1 - 1e-7) for r in roots):
                how = ("fractional weights" if grain is None else f"weights in multiples of {grain * scale / 1e9:.4g} GB/s")
                return w, how + ("" if res.status == 0 else " (MILP node limit)")
    return None, "no subset of the candidate trees reaches the threshold"


# --- integral trees by diving ---------------------------------------------------------------

def _supports(g: FlowGraph, cap: np.ndarray, root: int, amount: float) -> bool:
    """Do capacities ``cap`` (B/s per arc of ``g``) still carry a broadcast of ``amount``?"""
    if amount <= 0:
        return True
    keep = cap > 1e-9 * float(cap.max(initial=0.0)) if cap.size else cap > 0
    if not keep.any():
        return False
    sub = g.with_capacities(cap, keep)
    try:
        return single_source_bound(sub, root, "broadcast", g.nodes[root]).rate >= amount * (1 - 1e-7)
    except SynthesisError:
        return False


def _dive(oracle: _RouteOracle, cap: np.ndarray, root: int, k: int, q: float, cols: list[_Column],
          max_rounds: int, tol: float, scale: float) -> list[_Column] | None:
    """``k`` trees of weight ``q`` each (a packing of rate k q), or None.

    Lovasz's proof of Edmonds' theorem takes one arborescence at a time, keeping the
    rest of the graph able to carry the others. Each step here fixes a tree whose
    removal leaves a broadcast of the remaining rate possible (checked by max-flow):
    a tree of weight >= q in the current LP solution (always qualifies, and the LP
    solution less that tree stays optimal), else a tree grown to fit the residual
    capacities (:func:`_fitting_tree`), else - after re-solving the packing LP on the
    residual capacities by column generation - a tree of the LP's support or any other
    known tree. A heuristic: it gives up (None) rather than backtrack.
    """
    residual = cap.copy()
    pool = list(cols)
    chosen: list[_Column] = []
    w = None
    for step in range(k):
        need = (k - step) * q

        def passes(col: _Column, weight: float = 0.0) -> bool:
            left = residual - q * col.load
            return left.min() >= -1e-9 and (weight >= q * (1 - 1e-9) or _supports(
                oracle.g, np.maximum(left, 0) * scale, root, (need - q) * scale))

        picked = None
        if w is not None:
            j = int(np.argmax(w))
            if w[j] >= q * (1 - 1e-9) and passes(pool[j], w[j]):
                picked = pool[j]
                w = w.copy()
                w[j] = max(w[j] - q, 0.0)
        if picked is None:
            w = None
            picked = _fitting_tree(oracle, residual, root, q, need, scale)
        if picked is None:
            x, w, pool, limit, _ = _column_generation(oracle, residual, [root], pool, max_rounds, tol, need)
            if limit or x < need * (1 - 1e-7):
                return None
            # the LP's trees (heaviest first); other known trees, those leaving most slack first
            order = [j for j in np.argsort(-w) if w[j] > 1e-12]
            order += sorted(set(range(len(pool))) - set(order),
                            key=lambda j: float(np.max(pool[j].load / np.maximum(residual, 1e-12))))
            for j in order:
                if passes(pool[j], w[j]):
                    picked = pool[j]
                    if w[j] >= q * (1 - 1e-9):
                        w = w.copy()
                        w[j] -= q
                    else:
                        w = None
                    break
        if picked is None:
            return None
        chosen.append(picked)
        residual = np.maximum(residual - q * picked.load, 0.0)
    return chosen


def _fitting_tree(oracle: _RouteOracle, residual: np.ndarray, root: int, q: float, need: float, scale: float,
                  tries: int = 4) -> _Column | None:
    """A new tree of weight ``q`` that fits in ``residual`` and keeps ``need - q`` packable.

    Grown like Prim's algorithm: each step adds the hop from the tree to a new rank
    whose route is cheapest under lengths ``1 / slack``, where the slack already counts
    this tree's earlier hops and links without room for ``q`` are closed; every other
    attempt first restricts the choice to the ranks with the most room to forward. (Fitting a
    tree under per-link limits is a degree-constrained arborescence problem, NP-hard in
    general, so this is a heuristic.) A tree that fits but would leave too little for
    the rest makes its links dearer for the next of ``tries`` attempts.
    """
    g = oracle.g
    N = len(g.ranks)
    penalty = np.ones(len(residual))
    for attempt in range(tries):
        load = np.zeros(len(residual))
        inside = np.zeros(N, dtype=bool)
        inside[root] = True
        hops = []
        while not inside.all():
            slack = residual - q * load
            length = np.where(slack >= q * (1 - 1e-9), penalty / np.maximum(slack, 1e-12), 1e12)
            D, pred = oracle.routes(length + _TINY)
            D = np.where(inside[:, None] & ~inside[None, :], D, np.inf)
            if not np.isfinite(D).any() or D.min() >= 1e12:
                break
            if attempt % 2 == 0:
                # reach first the ranks that can forward most: they keep the frontier open
                send = np.zeros(g.n)
                np.add.at(send, g.src, np.floor(np.maximum(slack, 0.0) / q + 1e-9))
                room = np.where(np.isfinite(D), send[g.ranks][None, :], -1.0)
                D = np.where(room == room.max(), D, np.inf)
            u, v = np.unravel_index(int(np.argmin(D)), D.shape)
            arcs = oracle.path(pred, int(u), int(v))
            np.add.at(load, arcs, 1.0)
            hops.append((int(u), int(v), tuple(arcs)))
            inside[v] = True
        if inside.all() and (residual - q * load).min() >= -1e-9:
            left = np.maximum(residual - q * load, 0.0)
            if _supports(g, left * scale, root, (need - q) * scale):
                return _Column(root, tuple(hops), load)
        penalty = penalty * np.where(load > 0, 2.0, 1.0)
    return None


# --- drivers ----------------------------------------------------------------------------

def _lane_unit(topology, g: FlowGraph) -> float:
    """One lane of the slowest link among the chosen arcs (B/s): Blink's integer unit."""
    best = math.inf
    for e in range(len(g.src)):
        a, b = g.original_link(e)
        link = topology.links[(a, b)]
        best = min(best, link.bandwidth / link.count)
    return best


def _to_trees(g: FlowGraph, cols: list[_Column], w: np.ndarray, scale: float, inward: bool) -> list[Tree]:
    trees = []
    tail = [g.nodes[v] for v in g.src.tolist()]
    head = [g.nodes[v] for v in g.dst.tolist()]
    rank = [g.nodes[v] for v in g.ranks.tolist()]
    for c, wt in zip(cols, w.tolist()):
        if wt <= 1e-12:
            continue
        hops = []
        for p, v, arcs in c.hops:
            path = (tail[arcs[0]], *[head[a] for a in arcs])
            hops.append(Hop(rank[v], rank[p], path[::-1]) if inward else Hop(rank[p], rank[v], path))
        trees.append(Tree(rank[c.root], tuple(hops), wt * scale, inward))
    trees.sort(key=lambda t: (t.root, -t.weight))
    return trees


def _pool(cols: list[_Column], w: np.ndarray, extra: list[_Column], extra_w: np.ndarray, size: int) -> list[_Column]:
    """Candidates for the tree-count program: the LP's trees, then the heaviest others."""
    chosen = [c for c, wt in zip(cols, w) if wt > 1e-12]
    keys = {c.key for c in chosen}
    rest = sorted(zip(extra_w.tolist(), range(len(extra))), reverse=True)
    for _, j in rest:
        if len(chosen) >= size:
            break
        if extra[j].key not in keys:
            keys.add(extra[j].key)
            chosen.append(extra[j])
    return chosen


def _pack(topology, g: FlowGraph, roots: list[int], bound: Bound, collective: str, method: str,
          threshold: float, minimize_trees: bool, max_rounds: int | None, eps: float, allow_partial: bool,
          t0: float, tol: float, pool_size: int = 80, routed: bool = False,
          both_ways: bool = False) -> TreePacking:
    if method not in METHODS:
        raise SynthesisError(f"unknown packing method {method!r} (known: {', '.join(METHODS)})")
    if not 0 <= threshold < 1:
        raise SynthesisError(f"threshold must be in [0, 1), got {threshold}")
    if max_rounds is None:
        max_rounds = MWU_ORACLE_CALLS if method == "mwu" else COLUMN_GENERATION_ROUNDS
    if isinstance(max_rounds, bool) or not (isinstance(max_rounds, int) and max_rounds >= 1):
        raise SynthesisError(f"max_rounds must be a positive integer, got {max_rounds!r}")
    scale = float(g.cap.max())
    cap = g.cap / scale
    oracle = _PairRouteOracle(topology, g) if routed else _RouteOracle(g)
    if both_ways:
        oracle = _BothWaysOracle(oracle)
    inward = collective in ("reduce", "reducescatter")
    target = bound.rate / scale
    notes: list[str] = []
    limit = False
    gb = scale / 1e9
    tick = time.perf_counter()
    if method == "mwu":
        if len(roots) != 1:
            raise SynthesisError("the multiplicative-weights method packs trees of one root; use method='exact'")
        mcols, mw, limit = _mwu_candidates(oracle, cap, roots[0], eps, max_rounds)
        notes.append(f"MWU (eps={eps:g}): {len(mcols)} candidate trees, rate {float(mw.sum()) * gb:.6g} GB/s "
                     f"({time.perf_counter() - tick:.3f} s)")
        cols = mcols
        x, w, _, _ = _Master(cap, roots, cols).solve()
        notes.append(f"LP over the candidates: {x * gb:.6g} GB/s")
    else:
        if len(roots) == 1:  # a short MWU run gives varied, often integral, seed trees
            mcols, mw, _ = _mwu_candidates(oracle, cap, roots[0], max(eps, 0.2), max_calls=3 * len(g.ranks))
        else:
            # more seeds per root on small machines: fewer LP rounds (measured on DGX-1V,
            # A100/H100 boxes and 2x8 A100; the master LP grows with ranks x seeds)
            mcols = _seed_columns(oracle, cap, roots, per_root=max(2, 64 // len(roots)))
            mw = np.zeros(len(mcols))
        x, w, cols, limit, upper = _column_generation(oracle, cap, roots, list(mcols), max_rounds, tol, target)
        notes.append(f"column generation: {len(cols)} trees, LP {x * gb:.6g} GB/s"
                     + (f", Lagrangian bound {upper * gb:.6g} GB/s" if math.isfinite(upper) else "")
                     + f" ({time.perf_counter() - tick:.3f} s)")
    if limit and not allow_partial:
        budget = "oracle calls" if method == "mwu" else "rounds of column generation"
        raise SolverLimitError(f"{g.name}: {collective} packing did not finish within {max_rounds} {budget} "
                               f"(reached {x * gb:.6g} of {bound.rate / 1e9:.6g} GB/s)")
    if minimize_trees and not limit:
        tick = time.perf_counter()
        # within the threshold of the bound, or of what the candidate trees can do if less
        goal = (1 - threshold) * min(target, x)
        targets = {r: goal for r in roots}
        pool = _pool(cols, w, mcols, mw, max(pool_size, int((w > 1e-12).sum())))
        q = _lane_unit(topology, g) / scale
        few, how = _fewest_trees(pool, cap, roots, targets, (q,), scale)
        k = int(math.floor(min(target, x) / q + 1e-9))
        if few is None and len(roots) == 1 and k >= 1 and k * q >= goal:
            try:
                dived = _dive(oracle, cap, roots[0], k, q, pool, max_rounds, tol, scale)
            except SolverLimitError:  # the dive is optional polish: past its budget, keep the LP's trees
                dived = None
                notes.append("integral dive stopped at a solver's iteration limit")
            if dived is not None:
                keys = {c.key for c in pool}
                pool = pool + [c for c in dived if c.key not in keys]
                few, how = _fewest_trees(pool, cap, roots, targets, (q,), scale)
                if few is None:  # keep the dive's own trees
                    index = {c.key: j for j, c in enumerate(pool)}
                    few = np.zeros(len(pool))
                    for c in dived:
                        few[index[c.key]] += q
                    how = f"{k} integral trees from the dive"
        if few is None:
            few, how = _fewest_trees(pool, cap, roots, targets, (q / 2, q / 4, None), scale)
        if few is not None:
            cols, w = pool, few
            notes.append(f"fewest trees: {int((w > 1e-12).sum())} of {len(pool)} candidates, with {how} "
                         f"({time.perf_counter() - tick:.3f} s)")
        else:
            notes.append(f"fewest trees skipped: {how}")
    for note in notes:
        log.debug("%s %s on %s: %s", collective, method, g.name, note)
    trees = _to_trees(g, cols, w, scale, inward)
    if len(roots) == 1:  # one root only (module doc)
        trees = shallower(trees)
    rate = min(sum(t.weight for t in trees if t.root == g.nodes[g.ranks[r]]) for r in roots)
    return TreePacking(collective, tuple(g.nodes[g.ranks[r]] for r in roots), tuple(trees), rate, bound,
                       method, time.perf_counter() - t0, limit, g.links, tuple(notes))


def pack_broadcast(topology, root: str | int, links: LinkSelector = "all", method: str = "exact", *,
                   threshold: float = 0.01, minimize_trees: bool = True, max_rounds: int | None = None,
                   eps: float = 0.1, allow_partial: bool = False, tol: float = 1e-6,
                   routed: bool = False) -> TreePacking:
    """Weighted out-trees from ``root`` reaching every rank, at (or near) the bound.

    ``method``: ``"exact"`` (column generation, optimal within ``tol``) or ``"mwu"``
    (Blink). ``minimize_trees``: Blink's integer program, keeping at least
    ``1 - threshold`` of the rate. Raises :class:`SolverLimitError` after ``max_rounds``
    rounds of column generation (``"mwu"``: oracle calls; default
    :data:`COLUMN_GENERATION_ROUNDS` or :data:`MWU_ORACLE_CALLS`) unless
    ``allow_partial`` (then ``limit_hit`` is set). ``routed``: every hop on its pair's
    runtime route (:class:`_PairRouteOracle`), the trees a file can express; the rate is
    then at most the file bound, below the bound that ``bound`` reports.
    """
    t0 = time.perf_counter()
    g = flow_graph(topology, links)
    r = root_index(g, root)
    bound = single_source_bound(g, r, "broadcast", g.nodes[r])
    return _pack(topology, g, [int(np.nonzero(g.ranks == r)[0][0])], bound, "broadcast", method, threshold,
                 minimize_trees, max_rounds, eps, allow_partial, t0, tol, routed=routed)


def pack_reduce(topology, root: str | int, links: LinkSelector = "all", method: str = "exact", *,
                threshold: float = 0.01, minimize_trees: bool = True, max_rounds: int | None = None,
                eps: float = 0.1, allow_partial: bool = False, tol: float = 1e-6,
                routed: bool = False, both_ways: bool = False) -> TreePacking:
    """Weighted in-trees into ``root``: a broadcast packing of the reversed graph, reversed
    (``routed``: as :func:`pack_broadcast` takes it). ``both_ways``: each tree also
    carries a broadcast from ``root`` down its reverse at the same rate (Blink's
    all-reduce through one root on the same trees, :class:`_BothWaysOracle`), so every
    link's capacity is shared by the trees' use of it in both directions; the rate is
    then at most the reduce's, and the packing stays below ``bound``'s reduce bound."""
    t0 = time.perf_counter()
    g = flow_graph(topology, links)
    r = root_index(g, root)
    rg = g.reversed()
    bound = single_source_bound(rg, r, "reduce", g.nodes[r])
    return _pack(topology, rg, [int(np.nonzero(g.ranks == r)[0][0])], bound, "reduce", method, threshold,
                 minimize_trees, max_rounds, eps, allow_partial, t0, tol, routed=routed, both_ways=both_ways)


def pack_allgather(topology, links: LinkSelector = "all", *, threshold: float = 0.01,
                   minimize_trees: bool = False, max_rounds: int | None = None, allow_partial: bool = False,
                   tol: float = 1e-6, bound: Bound | None = None, routed: bool = False) -> TreePacking:
    """Out-trees rooted at every rank sharing the links, each root at the same rate,
    reaching the all-gather bound (ForestColl; exact column generation); ``routed``: as
    :func:`pack_broadcast` takes it.

    The LP's basic optimum already uses at most ``links + ranks`` trees, so tree-count
    minimisation is off by default; ``minimize_trees=True`` trades up to ``threshold``
    of the rate for fewer trees (Blink 3.2.1), within :data:`ILP_NODE_LIMIT` nodes.
    ``bound``: the all-gather bound of ``topology`` over ``links`` when already computed.
    """
    t0 = time.perf_counter()
    g = flow_graph(topology, links)
    bound = bound or allgather_cut_bound(g, "allgather")
    return _pack(topology, g, list(range(len(g.ranks))), bound, "allgather", "exact", threshold,
                 minimize_trees, max_rounds, 0.1, allow_partial, t0, tol, routed=routed)


def pack_reducescatter(topology, links: LinkSelector = "all", *, threshold: float = 0.01,
                       minimize_trees: bool = False, max_rounds: int | None = None, allow_partial: bool = False,
                       tol: float = 1e-6, bound: Bound | None = None, routed: bool = False) -> TreePacking:
    """In-trees into every rank: the all-gather packing of the reversed graph, reversed
    (``bound``: the reduce-scatter bound when already computed; ``routed``: as
    :func:`pack_broadcast` takes it)."""
    t0 = time.perf_counter()
    g = flow_graph(topology, links).reversed()
    bound = bound or allgather_cut_bound(g, "reducescatter")
    return _pack(topology, g, list(range(len(g.ranks))), bound, "reducescatter", "exact", threshold,
                 minimize_trees, max_rounds, 0.1, allow_partial, t0, tol, routed=routed)
