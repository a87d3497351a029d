"""Link utilization over time, drawn from a recorded simulation (``--timeline PNG``).

Every flow's rate periods (:attr:`SimResult.flow_segments`: link, start, end, wire
bytes/s) are binned into equal time slices; a cell is the share of the link's nominal
bandwidth in use during that slice. Rows are the links the algorithm uses, busiest first.
"""

from __future__ import annotations

import numpy as np

from arborcc.sim.simulate import SimResult
from arborcc.sizes import format_size
from arborcc.topology.model import Topology


def utilization_grid(result: SimResult, topology: Topology, bins: int = 200) -> tuple[list[tuple[str, str]], np.ndarray]:
    """(links, grid): ``grid[i, j]`` is link i's utilization during time slice j."""
    links = sorted(result.link_utilization, key=lambda k: (-result.link_utilization[k], k))
    index = {k: i for i, k in enumerate(links)}
    grid = np.zeros((len(links), bins))
    span = result.time if result.time > 0 else 1.0
    width = span / bins
    edges = np.arange(bins + 1) * width
    for link, start, end, rate in result.flow_segments:
        i = index.get(link)
        if i is None or end <= start:
            continue
        lo, hi = int(start // width), min(bins - 1, int(end // width))
        for j in range(lo, hi + 1):
            overlap = min(end, edges[j + 1]) - max(start, edges[j])
            if overlap > 0:
                grid[i, j] += rate * overlap
    caps = np.array([topology.links[k].bandwidth for k in links]) if links else np.zeros(0)
    if links:
        grid /= caps[:, None] * width
    return links, grid


def timeline_png(result: SimResult, topology: Topology, path: str, bins: int = 200) -> None:
    """Draw :func:`utilization_grid` as a heat map into ``path`` (its suffix picks the
    format: :mod:`arborcc.plotting`)."""
    from arborcc.plotting import new_figure, save_figure

    links, grid = utilization_grid(result, topology, bins)
    fig = new_figure("--timeline", (10, max(2.5, 0.22 * len(links) + 1.5)))
    ax = fig.add_subplot()
    im = ax.imshow(grid, aspect="auto", interpolation="nearest", cmap="viridis", vmin=0, vmax=1,
                   extent=(0, result.time * 1e6, len(links), 0))
    ax.set_yticks(np.arange(len(links)) + 0.5)
    ax.set_yticklabels([f"{a}->{b}" for a, b in links], fontsize=7)
    ax.set_xlabel("time (us)")
    ax.set_title(f"{result.algorithm}: link utilization at {format_size(result.size)}, {result.protocol}")
    fig.colorbar(im, ax=ax, label="share of nominal bandwidth")
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
