"""What a strategy is given and what it returns.

Every strategy of the registry (:mod:`arborcc.synth.registry`) is a function
``f(request: SynthesisRequest) -> SynthesisResult``. The request carries what the
driver (:func:`arborcc.synth.synthesis.synthesize`) has already checked and computed
once for all strategies: a topology whose ranks reach each other, a collective the
strategy builds, the root, the links to use, the buffer size (``None`` for large,
bandwidth-bound buffers) and the collective's bound.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from arborcc.ir.model import Algorithm
from arborcc.synth.bounds import AllreduceBound, Bound
from arborcc.synth.lower_emit import Lowered
from arborcc.synth.trees import Tree
from arborcc.topology.model import Topology


#: the call size (bytes) ``auto`` ranks candidates at, ``synthesize`` reports the time
#: of and strategies time their own candidates at, when no size is given: large enough
#: that every candidate is bandwidth-bound (and above MXNet's 40 MB one-tree threshold,
#: so each strategy builds its large-buffer schedule), small enough that simulating a
#: 128-GPU candidate takes under a second (16 x 8 A100 all-reduce: 0.3-0.6 s each for
#: composed, hierarchical, blueconnect and three-phase; the simulator's work grows with
#: the slices per chunk)
RANKING_SIZE = 64 << 20


@dataclass(frozen=True)
class SynthesisRequest:
    """The inputs of one strategy run (module doc). ``root`` is a rank index."""

    topology: Topology
    collective: str
    bound: Bound | AllreduceBound
    root: int = 0
    links: str = "all"
    size: int | None = None
    dialect: str | None = "executor"  #: the MSCCL runtime whose limits the algorithm should meet
    #: a strategy may return :attr:`~SynthesisResult.variants` (``synthesize`` times them):
    #: false above :data:`arborcc.synth.registry.SIMULATED_RANKS` ranks, where one
    #: simulation can take minutes, and the strategy returns its first variant alone
    variants_timed: bool = True


@dataclass
class SynthesisResult:
    """An algorithm with its bound and its predicted large-message algbw (B/s).

    ``algbw`` is the steady-state bandwidth model's (:mod:`arborcc.sim.bandwidth`) for the
    *emitted* algorithm, so ``ratio = algbw / bound`` says how close to optimal it is.
    ``report`` is the verifier's, set by ``synthesize`` on the algorithm it returns.
    """

    strategy: str
    collective: str
    algorithm: Algorithm
    bound: float
    algbw: float
    trees: list[Tree] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)  #: chunks each tree carries (same order)
    routes: dict = field(default_factory=dict)
    chunks: int = 0
    synth_time: float = 0.0
    notes: list[str] = field(default_factory=list)
    report: object = None  #: the :class:`arborcc.verify.VerificationReport` of ``algorithm``
    bound_exact: bool = False  #: ``bound`` is the optimum over every algorithm, not just an upper bound
    bound_basis: str = ""  #: why (set by ``synthesize``)
    #: seconds one call of ``size`` bytes of the algorithm *as written* takes in the simulator
    #: (the routes its file gets: MSCCL XML names none, the runtime takes each pair's
    #: default route) - what ``arborcc simulate FILE`` prints; set by ``synthesize``
    time: float | None = None
    size: int = 0  #: the bytes ``time`` is for: the request's size, or the default it ranked at (0: not simulated)
    size_is_default: bool = False  #: no size was given: ``size`` is :data:`RANKING_SIZE`
    #: the time on the strategy's own routes (``routes``) where they beat the written file's
    #: by more than 1% (relays the file cannot express), else None
    planned_time: float | None = None
    #: (dialect, whether ``algorithm`` is within its runtime limits), checked once: by the
    #: lowering's version search (:attr:`~.lower_emit.Lowered.limits`) or by ``synthesize``
    limits: tuple[str, bool] | None = None
    #: other ways of writing one schedule, label -> algorithm (``algorithm`` is one of
    #: them): equal link loads, so only the simulator tells them apart. ``synthesize``
    #: times them at the ranking size when it simulates or verifies this result, keeps
    #: the fastest in ``algorithm``, notes it, and empties this (``variant``: its label);
    #: one that cannot win is never simulated. A result with variants counts its
    #: ``chunks`` per loop of the algorithm, which may differ between them
    variants: dict[str, Algorithm] = field(default_factory=dict)
    variant: str = ""

    @property
    def ratio(self) -> float:
        return self.algbw / self.bound if self.bound else 0.0

    @classmethod
    def from_lowered(cls, strategy: str, request: SynthesisRequest, lowered: Lowered, notes: list[str],
                     trees: list[Tree] | None = None, counts: list[int] | None = None) -> "SynthesisResult":
        """The result of a lowered schedule: its algorithm, estimate, routes and notes."""
        return cls(strategy, request.collective, lowered.algorithm, request.bound.algbw, lowered.estimate.algbw,
                   list(trees or []), list(counts or []), lowered.routes, lowered.chunks,
                   notes=notes + lowered.notes, limits=lowered.limits)
