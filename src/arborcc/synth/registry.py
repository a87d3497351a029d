"""The strategy registry: every synthesis strategy, what it builds, where it lives.

One entry per strategy - its name, the collectives it builds, the function that builds
them (imported here by name from its own module, :mod:`arborcc.synth.strategies`; those
modules import what they build with inside the function, so reading the registry costs
no heavy import) and a one-line description. ``synthesize``, ``auto``, the ``arborcc
synth --strategy`` choices and ``docs/synthesis.md`` all read this table; adding a
strategy is adding its module, an import and an entry here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from arborcc.ir.collectives import COLLECTIVES as ALL_COLLECTIVES
from arborcc.library.nccl_ring import RING_COLLECTIVES
from arborcc.synth.strategies.binary_trees import synth_binary_trees
from arborcc.synth.strategies.blueconnect import synth_blueconnect
from arborcc.synth.strategies.composed import synth_composed
from arborcc.synth.strategies.direct import synth_direct
from arborcc.synth.strategies.double_binary_tree import synth_double_binary_tree
from arborcc.synth.strategies.halving_doubling import synth_halving_doubling
from arborcc.synth.strategies.lane_rings import LANE_RING_COLLECTIVES, synth_lane_rings
from arborcc.synth.strategies.hierarchical import synth_hierarchical
from arborcc.synth.strategies.nccl_ring import synth_nccl_ring
from arborcc.synth.strategies.rail_direct import RAIL_DIRECT_COLLECTIVES, synth_rail_direct
from arborcc.synth.strategies.ring import synth_ring
from arborcc.synth.strategies.switch_direct import SWITCH_DIRECT_COLLECTIVES, synth_switch_direct
from arborcc.synth.strategies.three_phase import synth_three_phase
from arborcc.synth.strategies.three_step import synth_three_step
from arborcc.synth.strategies.trees import synth_trees
from arborcc.synth.strategies.two_step import synth_two_step

ALLREDUCE = ("allreduce",)
ALLTOALL = ("alltoall",)
TREE_COLLECTIVES = ("allreduce", "allgather", "reducescatter", "broadcast", "reduce", "gather", "scatter")


@dataclass(frozen=True)
class Strategy:
    """A synthesis strategy.

    ``function``: ``f(request: SynthesisRequest) -> SynthesisResult``
    (:mod:`arborcc.synth.result`), in its own module of :mod:`arborcc.synth.strategies`;
    ``auto_rank_limits[collective]``: ``auto`` leaves the strategy out above this many
    ranks for that collective, where its cost explodes while others reach the bound
    (asking for it by name still runs it); ``simulated_rank_limits[collective]``: where
    synthesizing it is fine but its algorithm is too large to simulate in time, so
    ``compare`` and ``tune``, which simulate every candidate, leave it out above this
    many ranks (:meth:`left_out`); ``clusters_first``: on a job spanning several hosts
    ``auto`` tries it before the others.
    """

    name: str
    collectives: tuple[str, ...]
    function: Callable
    description: str
    auto_rank_limits: Mapping[str, int] = field(default_factory=dict)
    clusters_first: bool = False
    simulated_rank_limits: Mapping[str, int] = field(default_factory=dict)
    size_dependent: tuple[str, ...] = ()

    def depends_on_size(self, collective: str) -> bool:
        """Whether the algorithm built for ``collective`` depends on the request's size."""
        return collective in self.size_dependent

    def left_out(self, collective: str, num_ranks: int, simulated: bool = False) -> int | None:
        """The rank limit above which ``auto`` (``simulated``: ``compare`` and ``tune``)
        leaves the strategy out for ``collective`` on ``num_ranks`` ranks; None when it
        runs."""
        limits = [self.auto_rank_limits.get(collective)]
        if simulated:
            limits.append(self.simulated_rank_limits.get(collective))
        passed = [limit for limit in limits if limit is not None and num_ranks > limit]
        return min(passed) if passed else None


#: every strategy, in the order ``auto`` tries them. Rank limits measured on DGX A100
#: fat trees, 2-core machine, with ``arborcc synth --machine dgx-a100 --nodes N
#: --strategy S``: trees' all-reduce 0.3 s at 32 ranks, over its 30 s limit at 64 (its
#: all-gather and reduce-scatter 0.6 s at 32, 76-85 s at 64, where the per-root packing's
#: column generation grows with the roots and the file is over the executor's limits;
#: broadcast and reduce 2-3 s at 64, 74 s at 128, most of it the fewest-trees MILP:
#: faster than the others at 64 MiB there, 59 GB/s busbw against nccl-ring's 37 on
#: 16 x 8 A100, so ``--strategy trees`` is worth its minute there); binary-trees
#: 1.2 s at 32, 10 s at 64, 194 s at 128; three-phase 3.8 s at 128, 28 s at 256;
#: nccl-ring 4.3 s at 128 and minutes at 1024, where its rings hold millions of steps,
#: as the plain ring's two million (so for every collective it runs).
#: lane-rings stops at 32 ranks, where a ring all-reduce's 2(n-1) steps per thread block
#: reach the executor dialect's 64.
#: Simulated (``compare``, ``tune``; ``arborcc compare --machine dgx-a100 --nodes N
#: --sizes 1M``): at 1024 ranks blueconnect takes 20 s and 2.7 GB to synthesize and 65 s to
#: simulate, hierarchical 25 s and 74 s, composed over 2 minutes to simulate, while
#: double-binary-tree (6 s + 3 s) and halving-doubling (2 s + 5 s) stay fast. The trees'
#: per-root packings (all-gather, reduce-scatter, broadcast, reduce), built for each size:
#: ``benchmarks/synthesis/against_nccl.py``'s all-gather on 16 x 8 A100 (128 ranks) compares
#: every candidate at three sizes in 187 s, on 128 x 8 it had not finished the trees after an hour.
SIMULATED_RANKS = 128
STRATEGIES: tuple[Strategy, ...] = (
    Strategy("trees", TREE_COLLECTIVES, synth_trees,
             "Blink tree packing (MLSys 2020, 3.1-3.3), ForestColl per-root packings; gather/scatter as a "
             "single-sink flow split into paths",
             {"allreduce": 32, "allgather": 32, "reducescatter": 32, "broadcast": 64, "reduce": 64},
             # the per-root packings, built anew for every size compared
             simulated_rank_limits=dict.fromkeys(("allgather", "reducescatter", "broadcast", "reduce"),
                                                 SIMULATED_RANKS),
             # the pipelined candidates, the broadcast and reduce trees a file runs as
             # planned and the switch broadcast's chunk count are chosen by their
             # simulated time at the request's size
             size_dependent=("allreduce", "allgather", "reducescatter", "broadcast", "reduce")),
    Strategy("binary-trees", ALLREDUCE, synth_binary_trees,
             "MXNet tree all-reduce proposal: balanced max-weight binary trees, one per root", {"allreduce": 32},
             size_dependent=ALLREDUCE),  # one tree below MXNet's size threshold
    Strategy("blueconnect", ALLREDUCE, synth_blueconnect,
             "BlueConnect (SysML 2019) section 3, Algorithm 1: stages along the hierarchy",
             simulated_rank_limits={"allreduce": SIMULATED_RANKS}),
    Strategy("composed", TREE_COLLECTIVES, synth_composed,
             "clusters of equal hosts: per-host one-hop trees composed with balanced rail schedules across hosts",
             clusters_first=True, simulated_rank_limits={"allreduce": SIMULATED_RANKS},
             size_dependent=("broadcast", "reduce")),  # the chunks per piece timed fastest at the size
    Strategy("hierarchical", ALLREDUCE, synth_hierarchical,
             "two-level reduce-scatter / all-gather (in each node, then across nodes)", clusters_first=True,
             simulated_rank_limits={"allreduce": SIMULATED_RANKS}),
    Strategy("three-phase", ALLREDUCE, synth_three_phase,
             "Blink section 3.5: per-server trees, cross-server one-hop trees", {"allreduce": 128}),
    Strategy("nccl-ring", RING_COLLECTIVES, synth_nccl_ring,
             "the rings NCCL's search builds, with NCCL's ring kernel for each collective; each ring's chunks "
             "dealt over data lanes, a thread block each, where a whole ring's thread block holds more steps "
             "than the runtime takes", dict.fromkeys(RING_COLLECTIVES, 128),
             # over 32 ranks the faster dealing at the request's size
             size_dependent=("allreduce", "allgather", "reducescatter")),
    Strategy("lane-rings", LANE_RING_COLLECTIVES, synth_lane_rings,
             "inside one machine: the rings of NCCL's search on as many thread blocks as the runtime takes, "
             "rings without a common connection sharing a channel", dict.fromkeys(LANE_RING_COLLECTIVES, 32)),
    Strategy("switch-direct", SWITCH_DIRECT_COLLECTIVES, synth_switch_direct,
             "switch machines: every block straight to its destination over the switch, each pair on several "
             "thread blocks, the chunk count timed fastest at the size",
             size_dependent=SWITCH_DIRECT_COLLECTIVES),
    Strategy("rail-direct", RAIL_DIRECT_COLLECTIVES, synth_rail_direct,
             "switch machines joined rail by rail: switch-direct inside each node, each chunk between rail peers "
             "over their own NICs as soon as it is summed or arrives, the chunk count timed fastest at the size",
             size_dependent=RAIL_DIRECT_COLLECTIVES),
    Strategy("double-binary-tree", ALLREDUCE, synth_double_binary_tree,
             "NCCL's double binary trees over the nodes, chains inside them"),
    Strategy("halving-doubling", ALLREDUCE, synth_halving_doubling,
             "recursive halving + doubling (Thakur, Rabenseifner & Gropp 2005; power-of-two ranks)"),
    Strategy("ring", ALLREDUCE, synth_ring,
             "one ring in rank order (Patarasuk & Yuan 2009)", {"allreduce": 128}),
    Strategy("two-step", ALLTOALL, synth_two_step,
             "GC3 7.3: gather on the GPU of the destination's index, one aggregated transfer per rail peer"),
    Strategy("three-step", ALLTOALL, synth_three_step,
             "GC3's three-step: host pairs spread over the GPUs (the remainder over every rail), gather, one "
             "transfer per host pair, scatter"),
    Strategy("direct", ALLTOALL, synth_direct,
             "all pairs: every block straight to its destination"),
)

BY_NAME: dict[str, Strategy] = {s.name: s for s in STRATEGIES}


def strategy_names() -> tuple[str, ...]:
    """The registered strategy names, in registry order."""
    return tuple(s.name for s in STRATEGIES)


def synthesizable_collectives() -> tuple[str, ...]:
    """The collectives some strategy builds, in :data:`arborcc.ir.collectives.COLLECTIVES` order."""
    built = {c for s in STRATEGIES for c in s.collectives}
    return tuple(c for c in ALL_COLLECTIVES if c in built)
