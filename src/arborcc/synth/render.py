"""Human-readable views of tree schedules: an indented text tree per tree, and a PNG.

:func:`trees_text` draws each tree with its root at the top and every rank indented
under its parent in the arborescence. Each line is one hop, written in the direction
data flows (parent to child for out-trees, child to parent for in-trees) and along
its device path: a hop over one link shows the link (``gpu1 -[nvlink x2]-> gpu5``),
a hop through relays shows them (``gpu1 -> pcie0 -> cpu0 -> gpu4``). The header of
each tree gives its weight (GB/s) and its chunk share: exact chunk counts when known
(``counts=``, or a ``counts`` attribute of the result), otherwise the tree's fraction
of the weight of its group (same root, same direction), which is what the chunks are
apportioned from (:mod:`.quantize`).

:func:`trees_png` draws the trees with matplotlib (an optional dependency, imported
only when called, through its object-oriented API and Agg canvas so no global backend
is touched): one panel per tree, GPUs on a circle in rank order, relays as small
squares inside it, arrows colored by link kind. The file is written atomically, in the
format its suffix names (:mod:`arborcc.plotting`: PNG, SVG or PDF).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Sequence

from arborcc.errors import InputError, MissingDependencyError
from arborcc.plotting import save_figure
from arborcc.synth.trees import Hop, Tree
from arborcc.topology.model import GB, DeviceKind, LinkKind, Topology

#: arrow colors by link kind (PNG)
KIND_COLORS = {
    LinkKind.NVLINK: "#2ca02c",
    LinkKind.PCIE: "#1f77b4",
    LinkKind.INTER_SOCKET: "#9467bd",
    LinkKind.NETWORK: "#d62728",
    LinkKind.SWITCH_PORT: "#8c564b",
}
#: radius of each relay kind inside the unit circle of GPUs (PNG)
RELAY_RADIUS = {
    DeviceKind.NIC: 0.78,
    DeviceKind.PCIE_SWITCH: 0.64,
    DeviceKind.NVSWITCH: 0.5,
    DeviceKind.CPU: 0.36,
    DeviceKind.NET_SWITCH: 0.18,
}
MAX_PNG_TREES = 12
PANEL_INCHES = 3.2  #: side of one tree's panel
HEADER_INCHES = 0.7  #: band above the panels for the title and the legend
MAX_COLUMNS = 4


# --- inputs ----------------------------------------------------------------------------

def _unpack(result_or_trees: Any, counts: Sequence[int] | None):
    """(trees, counts or None, result-or-None) from a SynthesisResult, TreePacking or trees."""
    result = None
    if hasattr(result_or_trees, "trees"):
        result = result_or_trees
        trees = list(result.trees)
        if counts is None:
            counts = getattr(result, "counts", None)
    elif isinstance(result_or_trees, Tree):
        trees = [result_or_trees]
    else:
        trees = list(result_or_trees)
    for t in trees:
        if not isinstance(t, Tree):
            raise InputError(f"expected Tree objects, got {type(t).__name__}", source="trees")
    if counts is not None:
        counts = list(counts)
        if len(counts) != len(trees):
            raise InputError(f"{len(counts)} chunk counts for {len(trees)} trees", source="counts")
    return trees, counts, result


def _link_of(topology: Topology, tree: Tree, hop: Hop, a: str, b: str):
    link = topology.link(a, b)
    if link is None:
        raise InputError(f"tree rooted at {tree.root}: hop {hop.src}->{hop.dst} uses {a}->{b}, "
                         f"which is not a link of {topology.name}", source="trees")
    return link


def _link_label(link) -> str:
    if link.kind is LinkKind.NVLINK or link.count > 1:
        return f"{link.kind.value} x{link.count}"
    return link.kind.value


def hop_text(hop: Hop, topology: Topology, tree: Tree | None = None) -> str:
    """``gpu1 -[nvlink x2]-> gpu5`` for a one-link hop, ``gpu1 -> pcie0 -> cpu0 -> gpu4``
    through relays (each link is checked against ``topology``)."""
    tree = tree or Tree(hop.src, (hop,), 1.0)
    links = [_link_of(topology, tree, hop, a, b) for a, b in hop.links()]
    if len(links) == 1:
        return f"{hop.src} -[{_link_label(links[0])}]-> {hop.dst}"
    return " -> ".join(hop.path)


# --- text ------------------------------------------------------------------------------

def _children(tree: Tree) -> dict[str, list[Hop]]:
    """parent rank -> hops to its children (in hop order)."""
    kids: dict[str, list[Hop]] = {}
    for h in tree.hops:
        parent = h.dst if tree.inward else h.src
        kids.setdefault(parent, []).append(h)
    return kids


def _group_weights(trees: Sequence[Tree]) -> dict[tuple[str, bool], float]:
    total: dict[tuple[str, bool], float] = {}
    for t in trees:
        total[(t.root, t.inward)] = total.get((t.root, t.inward), 0.0) + t.weight
    return total


def _share_text(i: int, trees: Sequence[Tree], counts, chunks: int | None, groups) -> str:
    t = trees[i]
    direction = "in-trees" if t.inward else "out-trees"
    if counts is not None:
        group = sum(c for c, u in zip(counts, trees) if (u.root, u.inward) == (t.root, t.inward))
        pct = 100.0 * counts[i] / group if group else 0.0
        return f"{counts[i]} of {group} chunks ({pct:.1f}%) of {t.root}'s {direction}"
    frac = t.weight / groups[(t.root, t.inward)] if groups[(t.root, t.inward)] else 0.0
    approx = f", ~{frac * chunks:.1f} of {chunks} chunks" if chunks else ""
    return f"share {100.0 * frac:.1f}% of {t.root}'s {direction}{approx}"


def tree_lines(tree: Tree, topology: Topology, indent: str = "  ") -> list[str]:
    """The indented lines of one tree: the root, then one line per hop under its parent.
    Hops not reachable from the root (a malformed tree) follow under ``unreached:``."""
    kids = _children(tree)
    lines = [indent + tree.root]
    seen: set[int] = set()
    stack = [(h, 2) for h in reversed(kids.get(tree.root, []))]
    visited = {tree.root}
    while stack:
        hop, depth = stack.pop()
        seen.add(id(hop))
        lines.append(indent * depth + hop_text(hop, topology, tree))
        child = hop.src if tree.inward else hop.dst
        if child in visited:  # a cycle or a second parent: do not walk it twice
            continue
        visited.add(child)
        stack.extend((h, depth + 1) for h in reversed(kids.get(child, [])))
    rest = [h for h in tree.hops if id(h) not in seen]
    if rest:
        lines.append(indent + "unreached:")
        lines.extend(indent * 2 + hop_text(h, topology, tree) for h in rest)
    return lines


def trees_text(result_or_trees: Any, topology: Topology, counts: Sequence[int] | None = None,
               limit: int | None = None) -> str:
    """Every tree as an indented text tree (see the module doc).

    ``result_or_trees``: a :class:`~arborcc.synth.result.SynthesisResult`, a
    :class:`~arborcc.synth.trees.TreePacking`, one :class:`Tree` or a sequence of them.
    ``counts``: chunks per tree (aligned with the trees), if known. ``limit``: draw at
    most this many trees and say how many were left out.
    """
    trees, counts, result = _unpack(result_or_trees, counts)
    chunks = getattr(result, "chunks", None) or None
    if counts is not None:
        chunks = None
    lines: list[str] = []
    if result is not None and hasattr(result, "strategy") and hasattr(result, "bound"):
        ratio = result.algbw / result.bound if result.bound else 0.0
        lines.append(f"{result.collective} by {result.strategy} on {topology.name}: {len(trees)} trees, "
                     f"{result.chunks} chunks, algbw {result.algbw / GB:.2f} GB/s of bound "
                     f"{result.bound / GB:.2f} GB/s ({100 * ratio:.1f}%)")
    elif result is not None and hasattr(result, "method"):
        lines.append(f"{result.collective} packing ({result.method}) on {topology.name}: {len(trees)} trees, "
                     f"rate {result.rate / GB:.2f} GB/s")
    else:
        lines.append(f"{len(trees)} trees on {topology.name}, "
                     f"{sum(t.weight for t in trees) / GB:.2f} GB/s in all")
    groups = _group_weights(trees)
    shown = trees if limit is None else trees[:max(0, limit)]
    for i, t in enumerate(shown):
        kind = "in-tree (data flows to the root)" if t.inward else "out-tree (data flows from the root)"
        lines.append("")
        lines.append(f"tree {i + 1}/{len(trees)}: root {t.root}, {kind}, weight {t.weight / GB:.3f} GB/s, "
                     f"{_share_text(i, trees, counts, chunks, groups)}")
        lines.extend(tree_lines(t, topology))
    if len(shown) < len(trees):
        lines.append("")
        lines.append(f"... and {len(trees) - len(shown)} more trees")
    return "\n".join(lines) + "\n"


# --- PNG -------------------------------------------------------------------------------

def _matplotlib():
    """The matplotlib pieces the drawing needs (object-oriented API, Agg canvas)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D
        from matplotlib.patches import FancyArrowPatch
    except ImportError:
        raise MissingDependencyError("drawing trees", "matplotlib", extra="plot") from None
    return Figure, FigureCanvasAgg, FancyArrowPatch, Line2D


def layout(trees: Sequence[Tree], topology: Topology) -> dict[str, tuple[float, float]]:
    """Positions: ranks on the unit circle in rank order (rank 0 at the top, clockwise);
    each relay the trees use inside it, at its kind's radius (:data:`RELAY_RADIUS`)
    and at the mean angle of the ranks whose hops pass through it."""
    n = topology.num_ranks
    pos: dict[str, tuple[float, float]] = {}
    angle: dict[str, float] = {}
    for i, r in enumerate(topology.ranks):
        a = math.pi / 2 - 2 * math.pi * i / n
        angle[r] = a
        pos[r] = (math.cos(a), math.sin(a))
    ends: dict[str, list[str]] = {}
    for t in trees:
        for h in t.hops:
            for d in h.relays:
                ends.setdefault(d, []).extend((h.src, h.dst))
    relays = sorted(ends, key=lambda d: (topology.devices[d].kind.value if d in topology.devices else "", d))
    placed: list[tuple[float, float]] = []
    for k, d in enumerate(relays):
        dev = topology.devices.get(d)
        radius = RELAY_RADIUS.get(dev.kind, 0.5) if dev is not None else 0.5
        # the ranks of the relay's own host, if any, else the ranks its hops join
        host_ranks = [r for r in topology.ranks if dev is not None and dev.host is not None
                      and topology.devices[r].host == dev.host and len(topology.hosts) > 1]
        near = host_ranks or ends[d]
        x = sum(math.cos(angle[r]) for r in near)
        y = sum(math.sin(angle[r]) for r in near)
        if math.hypot(x, y) < 1e-6 * len(near):  # symmetric: spread by index instead
            a = math.pi / 2 - 2 * math.pi * (k + 0.5) / max(1, len(relays))
            radius = min(radius, 0.3)
        else:
            a = math.atan2(y, x)
        p = (radius * math.cos(a), radius * math.sin(a))
        for _ in range(24):  # nudge along the circle until clear of the relays placed so far
            if all(math.hypot(p[0] - q[0], p[1] - q[1]) > 0.24 for q in placed):
                break
            a += 0.3
            p = (radius * math.cos(a), radius * math.sin(a))
        placed.append(p)
        pos[d] = p
    return pos


def _short_label(topology: Topology, d: str) -> str:
    return d if len(topology.hosts) > 1 else d.replace("nvswitch", "nvsw")


def grid(num_panels: int) -> tuple[int, int]:
    """(columns, rows) of the panel grid."""
    cols = max(1, min(MAX_COLUMNS, num_panels))
    return cols, max(1, math.ceil(num_panels / cols))


def figure_inches(num_trees: int, max_trees: int = MAX_PNG_TREES) -> tuple[float, float]:
    """The figure size (inches) :func:`trees_png` uses by default for ``num_trees`` trees."""
    cols, rows = grid(min(num_trees, max_trees))
    return cols * PANEL_INCHES, rows * PANEL_INCHES + HEADER_INCHES


def trees_png(trees: Any, topology: Topology, path: str | os.PathLike, max_trees: int = MAX_PNG_TREES,
              dpi: int = 100, figsize: tuple[float, float] | None = None, title: str | None = None) -> Path:
    """Draw up to ``max_trees`` trees (one panel each, at most :data:`MAX_COLUMNS` per row)
    into ``path`` (PNG, or SVG or PDF by its suffix), written atomically; returns the path.

    ``trees``: anything :func:`trees_text` accepts. The image is ``figsize`` inches
    (default :func:`figure_inches`) at ``dpi``. Raises
    :class:`~arborcc.errors.MissingDependencyError` when matplotlib is not installed.
    """
    Figure, FigureCanvasAgg, FancyArrowPatch, Line2D = _matplotlib()
    tree_list, counts, result = _unpack(trees, None)
    if not tree_list:
        raise InputError("no tree to draw", source="trees")
    for t in tree_list:  # check every hop against the topology before drawing
        for h in t.hops:
            for a, b in h.links():
                _link_of(topology, t, h, a, b)
    shown = tree_list[:max(1, max_trees)]
    pos = layout(shown, topology)
    cols, rows = grid(len(shown))
    fig = Figure(figsize=figsize or figure_inches(len(shown), max(1, max_trees)), dpi=dpi)
    FigureCanvasAgg(fig)
    groups = _group_weights(tree_list)
    w, h = fig.get_size_inches()
    top = 1.0 - HEADER_INCHES / h if h > HEADER_INCHES * 2 else 0.85
    heading = title or (f"{result.collective} by {result.strategy} on {topology.name}"
                        if result is not None and hasattr(result, "strategy") else f"trees on {topology.name}")
    if len(shown) < len(tree_list):
        heading += f" - showing {len(shown)} of {len(tree_list)} trees"
    fig.suptitle(heading, fontsize=10, y=1.0 - 0.12 * HEADER_INCHES / h)
    kinds_used: set[LinkKind] = set()
    for i, t in enumerate(shown):
        ax = fig.add_axes([(i % cols) / cols + 0.01, top - (i // cols + 1) * top / rows + 0.01,
                           1 / cols - 0.02, top / rows - 0.05])
        ax.set_xlim(-1.3, 1.3)
        ax.set_ylim(-1.3, 1.3)
        ax.set_aspect("equal")
        ax.axis("off")
        frac = t.weight / groups[(t.root, t.inward)] if groups[(t.root, t.inward)] else 0.0
        ax.set_title(f"{i + 1}: root {t.root} {'in' if t.inward else 'out'}, "
                     f"{t.weight / GB:.2f} GB/s ({100 * frac:.0f}%)", fontsize=7)
        used = {d for hop in t.hops for d in hop.relays}
        for d in used:
            x, y = pos[d]
            ax.plot([x], [y], marker="s", markersize=5, color="#bbbbbb", markeredgecolor="#555555", zorder=2)
            ax.annotate(_short_label(topology, d), (x, y), xytext=(0, -8), textcoords="offset points",
                        ha="center", fontsize=5, color="#555555")
        for r in topology.ranks:
            x, y = pos[r]
            ax.plot([x], [y], marker="o", markersize=13, color="#ffcc66" if r == t.root else "#dddddd",
                    markeredgecolor="#333333", zorder=3)
            ax.annotate(_short_label(topology, r).replace("gpu", ""), (x, y), ha="center", va="center",
                        fontsize=6, zorder=4)
        for hop in t.hops:
            for a, b in hop.links():
                link = topology.link(a, b)
                kinds_used.add(link.kind)
                ax.add_patch(FancyArrowPatch(
                    pos[a], pos[b], arrowstyle="-|>", mutation_scale=8, connectionstyle="arc3,rad=0.12",
                    color=KIND_COLORS.get(link.kind, "#333333"), linewidth=0.6 + 0.35 * min(link.count, 6),
                    shrinkA=7 if a in topology.ranks else 3, shrinkB=7 if b in topology.ranks else 3,
                    zorder=1))
    handles = [Line2D([0], [0], color=KIND_COLORS.get(k, "#333333"), lw=2, label=k.value)
               for k in LinkKind if k in kinds_used]
    handles.append(Line2D([0], [0], marker="s", color="w", markerfacecolor="#bbbbbb",
                          markeredgecolor="#555555", label="relay"))
    fig.legend(handles=handles, loc="upper center", ncol=len(handles), fontsize=7, frameon=False,
               bbox_to_anchor=(0.5, 1.0 - 0.45 * HEADER_INCHES / h))
    save_figure(fig, path, dpi)
    return Path(path)
