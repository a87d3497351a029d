"""Synthesis: strategies that turn a Topology into collective schedules.

In the order data flows: ``bounds`` gives the optimal rates (with ``symmetry`` to solve
each equivalent case once and ``lp`` for the warm-started LPs); ``trees`` is the
tree-schedule intermediate and ``packing`` the arborescence packings (Blink's MWU + ILP,
exact column generation); ``gather`` the single-sink flows of gather/scatter;
``binary_trees``, ``blueconnect``, ``nccl``, ``three_phase`` and ``hybrid`` the other
methods; ``quantize`` rounds weights to chunks; ``lower`` / ``lower_stages`` turn
schedules into DSL programs; ``strategies`` runs them, verifies and picks.
"""
