"""Synthesis: a kit that turns a Topology into collective schedules, plus the strategies
built from it.

Entry point: ``synthesize(topology, collective, strategy="auto", ...)``
(:mod:`.synthesis`); the strategies it can run are the entries of :mod:`.registry`.

The kit, in the order data flows: ``flowgraph`` (the topology as capacitated arcs,
max-flows, cuts, reachability; ``symmetry`` solves each equivalent case once, ``lp`` the
warm-started LPs) -> ``bounds`` (the best rate of every collective) -> ``trees`` (the
tree-schedule intermediate) and ``packing`` (arborescence packings: Blink's MWU + ILP,
exact column generation) -> ``quantize`` (weights to chunks) -> the lowering
(``lower_blocks``, ``lower_channels``, ``lower_emit``: schedules to DSL programs,
compiled and estimated; ``lower_search``: the version within the runtimes' limits).
Method modules: ``gather`` (single-sink flows),
``binary_trees`` (MXNet), ``blueconnect`` and ``lower_stages`` (staged all-reduce),
``nccl_rings`` and ``double_binary_tree`` (NCCL's baselines), ``three_phase`` (Blink's
multi-server all-reduce), ``hosts`` (the job's host structure), ``render`` (drawings).
``result`` holds the request/result types and ``strategies`` the registered functions.
Time models live in :mod:`arborcc.sim`.

Importing this package is light: the names below load their modules on first use.
"""

from __future__ import annotations

import importlib

_LAZY = {
    "synthesize": "arborcc.synth.synthesis",
    "SynthesisRequest": "arborcc.synth.result",
    "SynthesisResult": "arborcc.synth.result",
    "collective_bound": "arborcc.synth.bounds",
    "STRATEGIES": "arborcc.synth.registry",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
