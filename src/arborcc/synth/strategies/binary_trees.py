"""The ``binary-trees`` strategy: the MXNet tree all-reduce proposal (balanced max-weight
binary trees, one per root; :mod:`arborcc.synth.binary_trees`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from arborcc.synth.result import SynthesisRequest, SynthesisResult


def synth_binary_trees(request: SynthesisRequest) -> SynthesisResult:
    """MXNet: one balanced max-weight binary tree per root, reduce + broadcast each; for a
    ``size`` below MXNet's threshold, only the first root's tree (latency-bound sizes)."""
    from arborcc.synth.binary_trees import binary_tree_schedule
    from arborcc.synth.lower_emit import lower_allreduce_trees
    from arborcc.synth.lower_search import within_limits
    from arborcc.synth.result import SynthesisResult
    from arborcc.synth.trees import Hop, Tree

    topology, size = request.topology, request.size
    schedule = binary_tree_schedule(topology)
    chosen = schedule.trees if size is None else schedule.trees_for(size)
    trees = [Tree(topology.ranks[bt.root],
                  tuple(Hop(topology.ranks[e.child], topology.ranks[e.parent], e.path) for e in bt.edges),
                  1.0, inward=True) for bt in chosen]
    lowered = within_limits(lower_allreduce_trees, topology, trees, [1] * len(trees), "binary-trees-allreduce",
                            takes_rounds=True, takes_fuse=True)
    how = (f"one tree: {size} bytes is below MXNet's single-tree threshold of {schedule.threshold_bytes}"
           if len(chosen) == 1 and len(schedule.trees) > 1 else
           f"{len(trees)} binary trees, one per root (MXNet uses only the first below "
           f"{schedule.threshold_bytes} bytes)")
    return SynthesisResult.from_lowered("binary-trees", request, lowered, [how], trees, [1] * len(trees))
