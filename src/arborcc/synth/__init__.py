"""Synthesis: strategies that turn a Topology into collective schedules.

``bounds`` gives the optimal rates, ``trees`` the tree-schedule intermediate,
``packing`` the arborescence packings (Blink's MWU + ILP, exact column generation).
"""
