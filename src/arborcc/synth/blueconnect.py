"""BlueConnect: all-reduce decomposed along the network hierarchy.

Minsik Cho, Ulrich Finkler, David Kung, Hillery Hunter: "BlueConnect: Decomposing
All-Reduce for Deep Learning on Heterogeneous Network Hierarchy", SysML 2019
(https://proceedings.mlsys.org/paper_files/paper/2019/hash/0c8abcf158ed12d0dd94480681186fda-Abstract.html):
section 3.1 (equation 8, the decomposition) and 3.2 (Figure 4, Algorithm 1: the stage
groups). The paper's time model (equations 1-10) is :mod:`arborcc.sim.blueconnect_model`;
:func:`choose_blueconnect` asks it which decomposition is fastest.

The decomposition. The rank count is factored along the hierarchy,
``|P| = p0 x p1 x ... x p_{k-1}`` (eq. 8), innermost level first. A rank is a point of
a mixed-radix grid; reduce-scatter stage i runs, concurrently, one reduce-scatter in
every group of ranks that differ only in coordinate i (Figure 4: 4 groups of 3 inside
the nodes, then 6 groups of 2 across nodes, then 6 groups of 2 across racks), each on
the ``N / (p0 ... p_{i-1})`` bytes the earlier stages left it; the all-gather stages
follow in reverse order (Algorithm 1, lines 7-16). Every rank is busy in every stage.

Where the hierarchy comes from. :func:`hierarchy_levels` clusters the ranks by the
bandwidth of the route between them: for each route bandwidth, from the highest down,
the ranks joined by routes at least that wide form groups; the partitions whose groups
all have equal size are the levels (GPUs of a node, nodes of a rack, ...). With
``structural=True`` the machine's physical grouping (GPUs per PCIe switch, per CPU
socket, per host) is offered as well. Explicit ``factors`` may be given instead (mixed
radix over rank order). When no factorization follows the hierarchy the plan
degenerates to one level, as section 3.4 says.

Per-stage bandwidth and latency. Eq. 9 charges stage i with
``min_{j<=i} w_j / (p0 ... p_{j-1})``: the level-j uplink is shared by all ranks below
it. :func:`stage_cost` measures the same thing on the topology: it routes every
transfer of the stage (ring neighbours, or halving-doubling partners), shares each
physical link equally between the transfers crossing it, and takes the bottleneck;
on :func:`~arborcc.topology.cluster.build_hierarchy` topologies this reproduces eq. 9's
bandwidths exactly. ``alpha`` is the route latency unless given.

Ranks are indices into ``topology.ranks``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Iterator, Sequence

from arborcc.errors import SynthesisError
from arborcc.library.staged import HALVING_DOUBLING as HD, RING
from arborcc.synth.flowgraph import check_routable
from arborcc.sim.blueconnect_model import halving_doubling_time, is_power_of_two, ring_reduce_scatter_time
from arborcc.topology.model import DeviceKind, Topology

RS, AG = "reducescatter", "allgather"
#: the algorithms a stage runs in its groups (the library's, :mod:`arborcc.library.staged`)
ALGORITHMS = (RING, HD)


# ------------------------------------------------------------------------ schedules ---
@dataclass(frozen=True)
class Stage:
    """One stage: concurrent reduce-scatters (or all-gathers), one per group.

    ``groups`` partition the ranks; each group lists its ranks in ring order (for
    halving-doubling, position k pairs with position k xor 2^s). Every group works on
    ``data_fraction`` of the buffer (1 / product of the earlier stages' factors).
    ``alpha`` (s) and ``beta`` (s/B, 1 / per-rank bandwidth) are the stage's terms.
    """

    kind: str
    groups: list[list[int]]
    algorithm: str
    alpha: float
    beta: float
    factor: int
    data_fraction: float

    def time(self, n_bytes: float) -> float:
        """Seconds for an ``n_bytes`` all-reduce's share: BlueConnect eq. (1) or (2)."""
        n = n_bytes * self.data_fraction
        if self.algorithm == HD:
            return halving_doubling_time(self.factor, n, self.alpha, self.beta)
        return ring_reduce_scatter_time(self.factor, n, self.alpha, self.beta)

    @property
    def bandwidth(self) -> float:
        return 1.0 / self.beta if self.beta > 0 else math.inf


@dataclass
class BlueConnectPlan:
    """A BlueConnect all-reduce: ``factors`` (stage order) and the stages - reduce-scatters
    going up, then the same groups' all-gathers coming down (Algorithm 1)."""

    factors: list[int]
    stages: list[Stage]
    name: str = "blueconnect"

    def predicted_time(self, n_bytes: float) -> float:
        """Sum of the stages' alpha-beta times: eq. (9) with the stages' own bandwidths."""
        return sum(s.time(n_bytes) for s in self.stages)

    def validate(self, n: int) -> None:
        """Raise SynthesisError unless this is a well-formed decomposition over 0..n-1."""
        if math.prod(self.factors) != n:
            raise SynthesisError(f"factors {self.factors} do not multiply to {n} ranks")
        k = len(self.factors)
        if len(self.stages) != 2 * k:
            raise SynthesisError(f"{k} factors need {2 * k} stages, got {len(self.stages)}")
        for i, st in enumerate(self.stages):
            up = i < k
            level = i if up else 2 * k - 1 - i
            if st.kind != (RS if up else AG):
                raise SynthesisError(f"stage {i} is a {st.kind}, expected {RS if up else AG}")
            if st.factor != self.factors[level]:
                raise SynthesisError(f"stage {i} has factor {st.factor}, expected {self.factors[level]}")
            if sorted(r for g in st.groups for r in g) != list(range(n)):
                raise SynthesisError(f"stage {i} groups do not partition ranks 0..{n - 1}")
            if any(len(g) != st.factor for g in st.groups):
                raise SynthesisError(f"stage {i} has a group whose size is not {st.factor}")
            if st.algorithm not in ALGORITHMS or (st.algorithm == HD and not is_power_of_two(st.factor)):
                raise SynthesisError(f"stage {i}: algorithm {st.algorithm} cannot run on groups of {st.factor}")
            if not math.isclose(st.data_fraction, 1.0 / math.prod(self.factors[:level])):
                raise SynthesisError(f"stage {i} works on {st.data_fraction} of the data")
            if not up and st.groups != self.stages[level].groups:
                raise SynthesisError(f"all-gather stage {i} does not mirror reduce-scatter stage {level}")


# ------------------------------------------------------------------- hierarchy ---
@dataclass(frozen=True)
class HierarchyLevel:
    """Level i of the hierarchy: ``groups`` are its units (each made of ``factor``
    units of level i-1), ``bandwidth`` the narrowest route between two ranks of one
    group (B/s)."""

    factor: int
    bandwidth: float
    groups: list[list[int]]


def _pair_bandwidth(topology: Topology, a: int, b: int) -> float:
    ra, rb = topology.ranks[a], topology.ranks[b]
    return min(topology.route(ra, rb).bandwidth, topology.route(rb, ra).bandwidth)


def _structural_keys(topology: Topology) -> list[list[object]]:
    """Per rank, the PCIe switch it hangs off, its CPU socket, its host - the machine's
    physical grouping, innermost first."""
    pcie, socket, host = [], [], []
    for r, g in enumerate(topology.ranks):
        dev = topology.devices[g]
        sw = sorted(l.dst for l in topology.out_links(g) if topology.devices[l.dst].kind is DeviceKind.PCIE_SWITCH)
        pcie.append(sw[0] if sw else ("gpu", r))
        socket.append((dev.host, dev.numa) if dev.numa is not None else (dev.host,))
        host.append(dev.host)
    return [pcie, socket, host]


def _partition(keys: Sequence[object]) -> list[list[int]]:
    groups: dict[object, list[int]] = {}
    for r, k in enumerate(keys):
        groups.setdefault(k, []).append(r)
    return sorted(groups.values())


def hierarchy_levels(topology: Topology, structural: bool = False) -> list[HierarchyLevel]:
    """The topology's hierarchy, innermost level first (module doc). A single rank has
    no level. Raises SynthesisError if GPUs cannot reach each other.

    Candidate partitions are the route-bandwidth clusters (for every route bandwidth,
    from the widest down, the groups of ranks joined by routes at least that wide);
    with ``structural`` also the machine's physical grouping (GPUs per PCIe switch,
    per CPU socket, per host), which bandwidth alone does not reveal on PCIe trees.
    Kept, from finest to coarsest: partitions into equal-size groups that are unions
    of the previously kept level's groups (eq. 8 needs equal factors per level).
    """
    n = topology.num_ranks
    check_routable(topology)
    bw = {(a, b): _pair_bandwidth(topology, a, b) for a in range(n) for b in range(a + 1, n)}
    candidates: list[list[list[int]]] = []
    for t in sorted(set(bw.values()), reverse=True):
        parent = list(range(n))

        def find(x: int) -> int:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for (a, b), w in bw.items():
            if w >= t:
                parent[find(a)] = find(b)
        candidates.append(_partition([find(r) for r in range(n)]))
    if structural:
        candidates.extend(_partition(keys) for keys in _structural_keys(topology))
    candidates.sort(key=lambda groups: -len(groups))  # finest first (stable: bandwidth order on ties)
    levels: list[HierarchyLevel] = []
    prev = [[r] for r in range(n)]
    for groups in candidates:
        if len(groups) >= len(prev) or len({len(g) for g in groups}) != 1:
            continue  # nothing new, or unequal groups: not a level of a factorable hierarchy
        owner = {r: k for k, g in enumerate(groups) for r in g}
        if any(len({owner[r] for r in g}) != 1 for g in prev):
            continue  # cuts through a finer level's group: not nested
        width = min((bw[(a, b)] for g in groups for a, b in itertools.combinations(g, 2)), default=math.inf)
        levels.append(HierarchyLevel(len(groups[0]) // len(prev[0]), width, groups))
        prev = groups
    if levels and len(prev) != 1:  # pragma: no cover - the narrowest threshold joins everyone
        raise SynthesisError(f"{topology.name}: the hierarchy does not join all ranks")
    return levels


# --------------------------------------------------------------- decomposition ---
@dataclass(frozen=True)
class GridAxis:
    """One stage's axis of the rank grid: ``radix`` values, coordinate of rank r is
    ``coord[r]``."""

    radix: int
    coord: tuple[int, ...]
    label: str


def _level_dims(topology: Topology, levels: list[HierarchyLevel]) -> list[GridAxis]:
    n = topology.num_ranks
    dims = []
    prev = [[r] for r in range(n)]
    for i, lv in enumerate(levels):
        coord = [0] * n
        for g in lv.groups:
            subs = sorted((s for s in prev if s[0] in g), key=lambda s: s[0])
            if len(subs) != lv.factor:
                raise SynthesisError(f"{topology.name}: level {i} groups are not made of {lv.factor} "
                                     f"level-{i - 1} groups")
            for k, s in enumerate(subs):
                for r in s:
                    coord[r] = k
        # inside a level-i group, rank r's position within its subgroup must match across
        # subgroups for "same position" groups; positions come from the lower levels' coords
        dims.append(GridAxis(lv.factor, tuple(coord), f"L{i}"))
        prev = lv.groups
    return dims


def radix_axes(n: int, factors: Sequence[int]) -> list[GridAxis]:
    """The axes of ``n`` ranks as a mixed radix over rank order (``factors[0]`` innermost)."""
    dims = []
    stride = 1
    for i, f in enumerate(factors):
        dims.append(GridAxis(f, tuple((r // stride) % f for r in range(n)), f"F{i}"))
        stride *= f
    return dims


def _split(dim: GridAxis, parts: Sequence[int]) -> list[GridAxis]:
    out = []
    stride = 1
    for j, q in enumerate(parts):
        out.append(GridAxis(q, tuple((c // stride) % q for c in dim.coord), f"{dim.label}.{j}"))
        stride *= q
    return out


def _ordered_factorizations(p: int) -> Iterator[list[int]]:
    if p == 1:
        yield []
        return
    for d in range(2, p + 1):
        if p % d == 0:
            for rest in _ordered_factorizations(p // d):
                yield [d] + rest


def _groups_of(n: int, dims: Sequence[GridAxis], axis: int) -> list[list[int]]:
    keyed: dict[tuple[int, ...], list[int]] = {}
    for r in range(n):
        key = tuple(d.coord[r] for k, d in enumerate(dims) if k != axis)
        keyed.setdefault(key, []).append(r)
    groups = [sorted(g, key=lambda r: dims[axis].coord[r]) for g in keyed.values()]
    return sorted(groups, key=lambda g: g[0])


def _stage_groups(cache: dict, n: int, dims: Sequence[GridAxis], axis: int) -> list[list[int]]:
    """:func:`_groups_of`, kept in ``cache``: a stage's groups depend on its axis and on
    the set of the other axes, not on their order (the stage orders that
    :func:`choose_blueconnect` scores share both). The entry keeps the axes it is keyed by
    (their ids) alive."""
    key = ("groups", id(dims[axis]), frozenset(map(id, dims)))
    kept = cache.get(key)
    if kept is None:
        kept = cache[key] = (_groups_of(n, dims, axis), tuple(dims))
    return kept[0]


def _transfers(groups: list[list[int]], algorithm: str) -> list[list[tuple[int, int]]]:
    """The concurrent point-to-point transfers of a stage, per communication round."""
    if algorithm == RING:
        return [[(g[k], g[(k + 1) % len(g)]) for g in groups for k in range(len(g)) if len(g) > 1]]
    rounds = []
    p = len(groups[0])
    dist = p // 2
    while dist >= 1:
        rounds.append([(g[k], g[k ^ dist]) for g in groups for k in range(p)])
        dist //= 2
    return rounds


def stage_cost(topology: Topology, groups: list[list[int]], algorithm: str, path=None) -> tuple[float, float]:
    """(alpha, beta) of a stage on ``topology``: the largest route latency among its
    transfers, and 1 / the smallest per-transfer bandwidth when every physical link is
    shared equally by the transfers of a round that cross it (module doc). ``path(a, b)``
    gives a transfer's device path (default: the topology's route)."""
    worst_bw, worst_lat = math.inf, 0.0
    for rnd in _transfers(groups, algorithm):
        load: dict[tuple[str, str], int] = {}
        routes = []
        for a, b in rnd:
            if path is None:
                r = topology.route(topology.ranks[a], topology.ranks[b])
                pairs, latency = list(r.pairs()), r.latency
            else:
                p = path(a, b)
                pairs = list(zip(p, p[1:]))
                latency = sum(topology.links[pr].latency for pr in pairs)
            routes.append(pairs)
            worst_lat = max(worst_lat, latency)
            for pr in pairs:
                load[pr] = load.get(pr, 0) + 1
        for pairs in routes:
            for pr in pairs:
                worst_bw = min(worst_bw, topology.links[pr].bandwidth / load[pr])
    return worst_lat, (1.0 / worst_bw if math.isfinite(worst_bw) and worst_bw > 0 else 0.0)


def build_plan(topology: Topology, dims: Sequence[GridAxis], algorithms: Sequence[str], alpha: float | None,
               cache: dict, name: str = "blueconnect", path=None) -> BlueConnectPlan:
    """The plan whose reduce-scatter stage i runs along axis ``dims[i]`` with
    ``algorithms[i]``, then the mirrored all-gather stages, checked
    (:meth:`BlueConnectPlan.validate`); ``cache`` keeps stage costs between plans of one
    topology; ``alpha`` overrides the route latency (s); ``path`` as in :func:`stage_cost`."""
    plan = _unchecked_plan(topology, dims, algorithms, alpha, cache, name, path)
    plan.validate(topology.num_ranks)
    return plan


def _unchecked_plan(topology: Topology, dims: Sequence[GridAxis], algorithms: Sequence[str], alpha: float | None,
                    cache: dict, name: str = "blueconnect", path=None) -> BlueConnectPlan:
    """:func:`build_plan` without the check (for candidates scored and dropped: the one
    kept is checked)."""
    n = topology.num_ranks
    up = []
    fraction = 1.0
    for i, (d, alg) in enumerate(zip(dims, algorithms)):
        groups = _stage_groups(cache, n, dims, i)
        key = (tuple(map(tuple, groups)), alg)
        if key not in cache:
            cache[key] = stage_cost(topology, groups, alg, path)
        lat, beta = cache[key]
        up.append(Stage(RS, groups, alg, lat if alpha is None else alpha, beta, d.radix, fraction))
        fraction /= d.radix
    down = [Stage(AG, s.groups, s.algorithm, s.alpha, s.beta, s.factor, s.data_fraction) for s in reversed(up)]
    return BlueConnectPlan([d.radix for d in dims], up + down, name)


def stage_algorithms(dims: Sequence[GridAxis], algorithm: str | None) -> list[str]:
    """Every axis's stage algorithm: ``algorithm``, or (``None``) eq. (3)'s choice -
    halving-doubling on power-of-two groups, ring otherwise."""
    out = []
    for d in dims:
        if algorithm is None:
            out.append(HD if is_power_of_two(d.radix) else RING)  # eq. (3)
        elif algorithm == HD and not is_power_of_two(d.radix):
            raise SynthesisError(f"halving-doubling needs power-of-two groups; a stage has {d.radix}")
        elif algorithm not in ALGORITHMS:
            raise SynthesisError(f"unknown stage algorithm {algorithm!r} (known: {', '.join(ALGORITHMS)})")
        else:
            out.append(algorithm)
    return out


def blueconnect_plan(topology: Topology, factors: Sequence[int] | None = None,
                     algorithm: str | Sequence[str] | None = None, alpha: float | None = None,
                     structural: bool = False) -> BlueConnectPlan:
    """The BlueConnect decomposition following the hierarchy (or explicit ``factors``,
    innermost first, as a mixed radix over rank order). ``algorithm`` forces every
    stage's algorithm (with ``factors``, it may list one per factor); by default eq. (3)
    picks halving-doubling for power-of-two groups and ring otherwise. ``alpha``
    overrides the route latency (seconds); ``structural`` adds the PCIe-switch/socket/host
    grouping (:func:`hierarchy_levels`)."""
    n = topology.num_ranks
    per_stage = algorithm is not None and not isinstance(algorithm, str)
    if factors is None:
        if per_stage:
            raise SynthesisError("one algorithm per stage needs explicit factors")
        levels = hierarchy_levels(topology, structural)
        dims = _level_dims(topology, levels) if levels else radix_axes(n, [1])
        return build_plan(topology, dims, stage_algorithms(dims, algorithm), alpha, {})
    factors = [int(f) for f in factors]
    if any(f < 1 for f in factors) or math.prod(factors) != n:
        raise SynthesisError(f"factors {factors} do not multiply to the {n} ranks of {topology.name}: "
                             f"the rank count cannot be factored that way")
    check_routable(topology)
    if not per_stage:
        dims = radix_axes(n, [f for f in factors if f > 1] or [1])
        return build_plan(topology, dims, stage_algorithms(dims, algorithm), alpha, {})
    if len(algorithm) != len(factors):
        raise SynthesisError(f"{len(factors)} factors but {len(algorithm)} algorithms")
    dims = radix_axes(n, factors)
    algorithms = [stage_algorithms([d], a)[0] for d, a in zip(dims, algorithm)]
    return build_plan(topology, dims, algorithms, alpha, {})


def one_level_ring_plan(topology: Topology, alpha: float | None = None) -> BlueConnectPlan:
    """The one-level ring baseline (eqs. 5-6): reduce-scatter and all-gather on one ring
    over all ranks in rank order, gated by the narrowest link it crosses."""
    n = topology.num_ranks
    check_routable(topology)
    return build_plan(topology, radix_axes(n, [n]), [RING], alpha, {}, name="one-level ring")


def choose_blueconnect(topology: Topology, n_bytes: float, alpha: float | None = None,
                       max_candidates: int = 2000) -> BlueConnectPlan:
    """The decomposition with the least predicted time for ``n_bytes``.

    Candidates: the bandwidth hierarchy and the structural one (:func:`hierarchy_levels`);
    every level's factor split into any ordered factorization (a level of 8 may run as
    2 x 4, 4 x 2 or 2 x 2 x 2 stages - fewer latency terms, same volume); the resulting
    stages in any order (innermost first is the paper's; others are scored too); each
    stage ring or halving-doubling (power-of-two groups only); and the one-level ring.
    At most ``max_candidates`` stage orders are scored.
    """
    n = topology.num_ranks
    bases = []
    for structural in (False, True):
        levels = hierarchy_levels(topology, structural)
        base = _level_dims(topology, levels) if levels else radix_axes(n, [1])
        if all(base != b for b in bases):
            bases.append(base)

    def orders() -> Iterator[list[GridAxis]]:
        for base in bases:
            splits = [list(_ordered_factorizations(d.radix)) or [[1]] for d in base]
            for choice in itertools.product(*splits):
                dims = [sd for d, parts in zip(base, choice) for sd in (_split(d, parts) if d.radix > 1 else [d])]
                for order in itertools.permutations(dims):
                    yield list(order)

    cache: dict = {}
    best = one_level_ring_plan(topology, alpha)
    best_t = best.predicted_time(n_bytes)
    for od in itertools.islice(orders(), max_candidates):
        # with two ranks ring and halving-doubling are the same exchange
        options = [[RING, HD] if is_power_of_two(d.radix) and d.radix > 2 else [RING] for d in od]
        for algs in itertools.product(*options):
            plan = _unchecked_plan(topology, od, list(algs), alpha, cache)
            t = plan.predicted_time(n_bytes)
            if t < best_t * (1 - 1e-12):
                best, best_t = plan, t
    best.validate(n)
    return best
