"""Per-size tuning: for a topology, a collective and a range of sizes, the fastest
(strategy, instances, protocol) at every size by simulation, grouped into size buckets.

Candidates are the algorithms of every strategy that builds the collective
(:func:`arborcc.tune.compare.strategy_candidates`: at each size the file ``arborcc synth
--strategy S --size SIZE`` writes, as ``compare`` has them - a strategy whose file
depends on the size has one candidate per distinct file, tried at the sizes it was
built for), each run as 1, 2, 4, ... instances
(:mod:`arborcc.tune.instances`; counts whose copies break the MSCCL dialect's limits on
channels, thread blocks or steps are left out, since a runtime refuses such a file)
and with each protocol. The chunk count is the strategy's own: synthesis strategies
do not take one.

Buckets: consecutive sizes with the same winner form one bucket. Bucket j covers
``[min_bytes, max_bytes]`` with the first bucket starting at 0, every bucket ending one
byte below the next bucket's first size, and the last one open (``max_bytes`` 0, MSCCL's
"no limit"), so every size maps to exactly one algorithm under MSCCL's selection rule
``minBytes <= size <= maxBytes``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from arborcc.errors import SynthesisError
from arborcc.ir.limits import check_dialect_limits
from arborcc.ir.model import Algorithm
from arborcc.sim.fidelity import Fidelity, fidelity_for
from arborcc.sim.protocols import protocol_name
from arborcc.sizes import format_size
from arborcc.topology.model import Topology
from arborcc.sim.protocol_choice import BY_BANDWIDTH, protocol_sweep
from arborcc.tune.compare import Candidate, candidate_key, strategy_candidates
from arborcc.tune.instances import with_instances

DEFAULT_INSTANCES = (1, 2, 4)


@dataclass(frozen=True)
class Choice:
    """One tuned configuration."""

    strategy: str
    instances: int
    protocol: str
    built_for: int | None = None  #: the candidate's :attr:`~arborcc.tune.compare.Candidate.built_for`

    @property
    def key(self) -> str:
        """The candidate's key in :attr:`TuneResult.candidates`."""
        return candidate_key(self.strategy, self.built_for)

    @property
    def label(self) -> str:
        return f"{self.key} x{self.instances} {self.protocol}"


@dataclass
class Bucket:
    """Sizes ``min_bytes``..``max_bytes`` (0: no limit) run ``choice``; ``times`` are
    the simulated seconds at the tuned sizes inside the bucket."""

    min_bytes: int
    max_bytes: int
    choice: Choice
    times: dict[int, float]


@dataclass
class TuneResult:
    """The buckets, the candidates they came from and what was left out."""

    topology: str
    ranks: int
    collective: str
    dialect: str
    fidelity: str
    sizes: list[int]
    buckets: list[Bucket]
    candidates: dict[str, Candidate]  #: by :attr:`~arborcc.tune.compare.Candidate.key`
    skipped: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def algorithm(self, bucket: Bucket) -> Algorithm:
        """The bucket's algorithm as it would run: instances applied, its protocol and
        size range set."""
        from dataclasses import replace

        from arborcc.ir.model import Protocol

        c = bucket.choice
        algo = with_instances(self.candidates[c.key].algorithm, c.instances)
        return replace(algo, protocol=Protocol(c.protocol), min_bytes=bucket.min_bytes, max_bytes=bucket.max_bytes,
                       name=f"{self.collective}-{c.key}-x{c.instances}-{c.protocol}")


def instance_counts(algo: Algorithm, counts: Sequence[int], dialect: str) -> tuple[list[int], list[str]]:
    """The counts whose copies the dialect's runtime accepts, and why the others fail."""
    ok, why = [], []
    for n in counts:
        try:
            inst = with_instances(algo, n)
        except SynthesisError as e:
            why.append(f"x{n}: {e}")
            continue
        violations = check_dialect_limits(inst, dialect, max_per_rule=1)
        if violations:
            why.append(f"x{n}: {violations[0]}")
            continue
        ok.append(n)
    return ok, why


def tune(topology: Topology, collective: str, sizes: Sequence[int], strategies: Sequence[str] | None = None,
         instances: Sequence[int] = DEFAULT_INSTANCES, protocol: str = "auto", root: int = 0,
         dialect: str = "executor", fidelity: Fidelity | None = None,
         progress: Callable[[str], None] | None = None, protocols: Sequence[str] | None = None) -> TuneResult:
    """The fastest choice per size, in buckets (module doc); with ``protocol`` ``auto``
    among ``protocols`` (default all: a target runtime may have fewer)."""
    t0 = time.perf_counter()
    fidelity = fidelity or fidelity_for(topology)
    sizes = sorted(set(int(s) for s in sizes))
    if not sizes:
        raise SynthesisError("no sizes to tune for")
    if protocol != "auto":
        protocol = protocol_name(protocol)
    cands, skipped = strategy_candidates(topology, collective, root, strategies, progress, sizes)
    if not cands:
        raise SynthesisError(f"no strategy builds {collective} on {topology.name}: " + "; ".join(skipped))
    best: dict[int, tuple[float, Choice]] = {}
    for cand in cands:
        counts, why = instance_counts(cand.algorithm, instances, dialect)
        skipped += [f"{cand.key} {w}" for w in why]
        at = sizes if cand.sizes is None else list(cand.sizes)
        for n in counts:
            if progress:
                progress(f"simulating {cand.key} x{n} at {len(at)} size{'s' if len(at) > 1 else ''}")
            for r in protocol_sweep(cand.algorithm, topology, at, protocol, fidelity, cand.routes, n,
                                    protocols=protocols or BY_BANDWIDTH):
                if r.size not in best or r.time < best[r.size][0]:
                    best[r.size] = (r.time, Choice(cand.name, n, r.protocol, cand.built_for))
    if len(best) < len(sizes):  # a strategy whose file depends on the size may build at some sizes only
        at = "" if not best else " at " + ", ".join(format_size(s) for s in sizes if s not in best)
        raise SynthesisError(f"no configuration of {collective} on {topology.name}{at} is within the {dialect} "
                             f"dialect's limits: " + "; ".join(skipped))
    buckets: list[Bucket] = []
    for s in sizes:
        t, choice = best[s]
        if buckets and buckets[-1].choice == choice:
            buckets[-1].times[s] = t
        else:
            buckets.append(Bucket(s, 0, choice, {s: t}))
    buckets[0].min_bytes = 0
    for a, b in zip(buckets, buckets[1:]):
        a.max_bytes = min(b.times) - 1
    return TuneResult(topology.name, topology.num_ranks, collective, dialect, fidelity.name, sizes, buckets,
                      {c.key: c for c in cands}, skipped, time.perf_counter() - t0)
