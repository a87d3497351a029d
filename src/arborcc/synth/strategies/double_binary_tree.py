"""The ``double-binary-tree`` strategy: NCCL's double binary trees over the nodes, chains
inside them (:mod:`arborcc.synth.double_binary_tree`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from arborcc.synth.result import SynthesisRequest, SynthesisResult


def synth_double_binary_tree(request: SynthesisRequest) -> SynthesisResult:
    """NCCL's double binary tree (two complementary binary trees over the nodes, a chain
    inside each node), each tree reducing and broadcasting half of the buffer."""
    from arborcc.synth.double_binary_tree import double_binary_tree
    from arborcc.synth.lower_emit import lower_allreduce_trees
    from arborcc.synth.lower_search import within_limits
    from arborcc.synth.result import SynthesisResult
    from arborcc.synth.strategies.nccl_notes import NOTED_PROTOCOL, nccl_prediction
    from arborcc.synth.trees import Hop, Tree

    topology = request.topology
    dbt = double_binary_tree(topology)
    trees = []
    for parents in dbt.parents:
        top = next(r for r, p in parents.items() if p is None)
        hops = tuple(Hop(topology.ranks[c], topology.ranks[p],
                         topology.route(topology.ranks[c], topology.ranks[p]).path)
                     for c, p in sorted(parents.items()) if p is not None)
        trees.append(Tree(topology.ranks[top], hops, 1.0, inward=True))
    lowered = within_limits(lower_allreduce_trees, topology, trees, [1, 1], "double-binary-tree-allreduce",
                            takes_rounds=True, takes_fuse=True)
    notes = [f"two complementary binary trees over {dbt.nodes} node(s), chains inside nodes"]
    if request.size is not None:
        notes.append(nccl_prediction(dbt.nccl_estimate(NOTED_PROTOCOL, request.size), request.size))
    return SynthesisResult.from_lowered("double-binary-tree", request, lowered, notes, trees, [1, 1])
