"""The line plot the reproduction scripts draw (one helper, imported by them)."""

from __future__ import annotations

import os


def line_plot(path: str, xs: list, series: dict[str, list[float]], xlabel: str, ylabel: str, title: str,
              log2_x: bool = True, reference: float | None = None) -> None:
    """One line per entry of ``series`` against ``xs``, written to the PNG ``path``;
    ``reference`` draws a horizontal line (e.g. 1.0 for a speedup)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, ys in series.items():
        ax.plot(xs, ys, marker="o", label=name)
    if reference is not None:
        ax.axhline(reference, color="grey", lw=0.8)
    if log2_x:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if len(series) > 1:
        ax.legend()
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
