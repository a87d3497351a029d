"""BlueConnect's alpha-beta performance model of all-reduce (its equations 1-10).

Minsik Cho, Ulrich Finkler, David Kung, Hillery Hunter: "BlueConnect: Decomposing
All-Reduce for Deep Learning on Heterogeneous Network Hierarchy", SysML 2019
(https://proceedings.mlsys.org/paper_files/paper/2019/hash/0c8abcf158ed12d0dd94480681186fda-Abstract.html).
Section 2.2 gives the building blocks (equations 1-4), section 2.3 the one- and
two-level baselines (equations 5-7), section 3.3 BlueConnect's own time on a fat tree
(equation 9) and a torus (equation 10).

Every function returns seconds. ``p`` is a learner (rank) count, ``n_bytes`` the data
size ``N`` in bytes, ``alpha`` the per-message latency in seconds and ``beta`` the
time per byte, ``1 / w`` for a link bandwidth ``w`` in B/s. Ring and
recursive halving/doubling are Thakur, Rabenseifner & Gropp's ("Optimization of
Collective Communication Operations in MPICH", IJHPCA 19(1), 2005,
https://doi.org/10.1177/1094342005051521), which BlueConnect restates.
"""

from __future__ import annotations

import math
from typing import Sequence

from arborcc.errors import InputError

_SOURCE = "BlueConnect model"


def _check(p: int, n_bytes: float) -> None:
    if isinstance(p, bool) or not isinstance(p, int) or p < 1:
        raise InputError(f"learner count must be an integer >= 1, got {p!r}", source=_SOURCE)
    if not n_bytes >= 0:
        raise InputError(f"data size must be >= 0 bytes, got {n_bytes!r}", source=_SOURCE)


def is_power_of_two(p: int) -> bool:
    return p >= 1 and p & (p - 1) == 0


def ring_reduce_scatter_time(p: int, n_bytes: float, alpha: float, beta: float) -> float:
    """Eq. (1): ``Tr(p, N, alpha, w) = (p-1) alpha + (p-1)/p N / w`` (``beta = 1/w``).
    A ring all-gather costs the same."""
    _check(p, n_bytes)
    return (p - 1) * alpha + (p - 1) / p * n_bytes * beta


def halving_doubling_time(p: int, n_bytes: float, alpha: float, beta: float) -> float:
    """Eq. (2): ``Tc(p, N, alpha, w) = lg(p) alpha + (p-1)/p N / w`` for a power-of-two
    ``p`` - recursive halving (reduce-scatter) or recursive doubling (all-gather)."""
    _check(p, n_bytes)
    if not is_power_of_two(p):
        raise InputError(f"recursive halving/doubling needs a power-of-two group, got {p}", source=_SOURCE)
    return math.log2(p) * alpha + (p - 1) / p * n_bytes * beta


def ring_or_halving_time(p: int, n_bytes: float, alpha: float, beta: float) -> float:
    """Eq. (3): ``Tr/c`` - halving/doubling when ``p`` is a power of two, else ring."""
    if is_power_of_two(p):
        return halving_doubling_time(p, n_bytes, alpha, beta)
    return ring_reduce_scatter_time(p, n_bytes, alpha, beta)


def broadcast_time(p: int, n_bytes: float, alpha: float, beta: float) -> float:
    """Eq. (4): ``Tbcast = Treduce = Tc + Tr`` (a scatter then a ring all-gather). The
    paper applies eq. (2)'s form to any ``p`` here, so ``lg(p)`` is not rounded."""
    _check(p, n_bytes)
    scatter = math.log2(p) * alpha + (p - 1) / p * n_bytes * beta
    return scatter + ring_reduce_scatter_time(p, n_bytes, alpha, beta)


#: eq. (4): a reduce costs what a broadcast does
reduce_time = broadcast_time


def one_level_ring_time(p: int, n_bytes: float, alpha: float, bandwidths: Sequence[float]) -> float:
    """Eqs. (5)-(6): one ring over all ``p`` learners, gated by the narrowest level,
    ``2 (p-1) {alpha + N / (p min W)} = 2 Tr(p, N, alpha, min W)``."""
    return 2 * ring_reduce_scatter_time(p, n_bytes, alpha, 1.0 / min(bandwidths))


def two_level_time(p0: int, p: int, n_bytes: float, alpha: float, w0: float, bandwidths: Sequence[float]) -> float:
    """Eq. (7): reduce to a master in each group of ``p0``, ``Tr/c`` all-reduce among the
    ``p / p0`` masters over the narrowest bandwidth, broadcast back:
    ``2 Tc(p0, N, alpha, w0) + 2 Tr(p0, N, alpha, w0) + 2 Tr/c(p/p0, N, alpha, min W)``."""
    if isinstance(p0, bool) or not isinstance(p0, int) or p0 < 1 or p % p0:
        raise InputError(f"{p} learners cannot be split into groups of {p0}", source=_SOURCE)
    local = reduce_time(p0, n_bytes, alpha, 1.0 / w0) + broadcast_time(p0, n_bytes, alpha, 1.0 / w0)
    return local + 2 * ring_or_halving_time(p // p0, n_bytes, alpha, 1.0 / min(bandwidths))


def stage_bandwidths(factors: Sequence[int], bandwidths: Sequence[float], torus: bool = False) -> list[float]:
    """The bandwidth each stage of eq. (9) (or eq. (10), ``torus=True``) runs at:
    ``min_{j<=i} w_j / (p_0 ... p_{j-1})`` - the level-j uplink is shared by all the
    learners below it; on a torus only the ``p_0`` learners of a node share its
    dedicated links, ``min(w_0, w_j / p_0 for 1 <= j <= i)``."""
    if len(factors) != len(bandwidths):
        raise InputError(f"{len(factors)} factors but {len(bandwidths)} bandwidths", source=_SOURCE)
    out = []
    for i in range(len(factors)):
        if torus:
            candidates = [bandwidths[0]] + [bandwidths[j] / factors[0] for j in range(1, i + 1)]
        else:
            candidates = [bandwidths[j] / math.prod(factors[:j]) for j in range(i + 1)]
        out.append(min(candidates))
    return out


def blueconnect_time(factors: Sequence[int], n_bytes: float, alpha: float, bandwidths: Sequence[float],
                     torus: bool = False) -> float:
    """Eq. (9) (fat tree) or eq. (10) (``torus=True``):
    ``T_blc = 2 sum_i Tr/c(p_i, N / prod_{j<i} p_j, alpha, w_i)`` with ``w_i`` from
    :func:`stage_bandwidths`.

    The summation bounds printed under the paper's inner minimum read ``0 <= j < i``;
    the expanded first terms (``min{w0}``, ``min{w0, w1/p0}``, ...) include ``j = i``,
    which is what this implements (with ``j < i`` stage 0 would have no bandwidth).
    """
    ws = stage_bandwidths(factors, bandwidths, torus)
    total = 0.0
    for i, p in enumerate(factors):
        total += 2 * ring_or_halving_time(p, n_bytes / math.prod(factors[:i]), alpha, 1.0 / ws[i])
    return total
