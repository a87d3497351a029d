"""The plots' shared look and their files: every image arborcc draws (``compare --plot``,
``bench --plot``, ``simulate --timeline``, ``synth --trees-png``, ``demo --plot``) goes
through here.

Files: an image output is written in the format its suffix names - ``.png``, ``.svg``
or ``.pdf`` (:data:`IMAGE_FORMATS`); a name without a suffix gets PNG, under exactly
that name. Any other suffix (``out.txt``, ``t.jpgx``), ``-``, a directory or a path
under a file is refused by :func:`check_image_output` before the work starts; the
image itself goes through :func:`arborcc.files.write_output` like every ``-o`` (missing
folders created, a regular file replaced atomically).

Look: sizes on a log2 axis labelled ``4K``, ``1M``, ``1G`` (:func:`size_axis`,
:func:`arborcc.sizes.format_size`); busbw on a log axis when the values span more than
a decade (:func:`busbw_axis`); every series of a plot with its own marker and line
style, not only its own colour (:func:`series_style`).

matplotlib is optional and imported only when a figure is made (:func:`new_figure`),
through its object-oriented API and Agg canvas: no global backend is touched.
"""

from __future__ import annotations

import io
import math
import os
from pathlib import Path
from typing import Any, Iterable, Sequence

from arborcc.errors import InputError, MissingDependencyError
from arborcc.files import STDOUT, check_output_path, write_output
from arborcc.sizes import format_size

#: image suffixes -> the matplotlib format written (none of them needs more than matplotlib)
IMAGE_FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}
#: the suffixes as a message lists them
SUFFIX_LIST = ".png, .svg or .pdf"
#: the format of a name without a suffix
DEFAULT_FORMAT = "png"
#: markers and line styles of the series of one plot, taken in turn
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p")
LINE_STYLES = ("-", "--", "-.", ":")
#: a log busbw axis when the largest value is more than this times the smallest
LOG_SPAN = 10.0
#: at most this many labelled ticks on a size axis
MAX_SIZE_TICKS = 12


def image_format(path: str | os.PathLike, flag: str = "output") -> str:
    """The format ``path``'s suffix names; :class:`InputError` naming ``flag`` for another suffix."""
    suffix = Path(path).suffix.lower()
    if suffix == "":
        return DEFAULT_FORMAT
    fmt = IMAGE_FORMATS.get(suffix)
    if fmt is None:
        raise InputError(f"{path}: {suffix!r} is not an image suffix arborcc writes (name a {SUFFIX_LIST} file)",
                         source=flag)
    return fmt


def check_image_output(path: str | os.PathLike, flag: str) -> None:
    """Refuse, before any work, an image output that cannot be written (module doc)."""
    if str(path) == STDOUT:
        raise InputError(f"an image is written to a file, not to standard output (name a {SUFFIX_LIST} file)",
                         source=flag)
    check_output_path(path, flag)
    image_format(path, flag)


def new_figure(what: str, figsize: tuple[float, float]):
    """A matplotlib Figure on an Agg canvas; ``what`` (a flag) names the need when
    matplotlib is not installed."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingDependencyError(what, "matplotlib", "plot") from None
    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Any, path: str | os.PathLike, dpi: int = 120) -> None:
    """Write ``fig`` in the format of ``path``'s suffix, by the rules of every output."""
    fmt = image_format(path)
    buffer = io.BytesIO()
    fig.savefig(buffer, format=fmt, dpi=dpi)
    write_output(path, buffer.getvalue())


def series_style(index: int) -> dict[str, str]:
    """Marker and line style of a plot's ``index``-th series: no two of the first 12 share
    a marker, and neighbours differ in line style too."""
    return {"marker": MARKERS[index % len(MARKERS)], "linestyle": LINE_STYLES[index % len(LINE_STYLES)]}


def size_ticks(sizes: Iterable[int]) -> list[int]:
    """The labelled sizes of a log2 size axis: powers of two at a step of 1, 2, 5, 10 or
    20 binary orders of magnitude (so 1K, 1M and 1G are among them when in range), at
    most :data:`MAX_SIZE_TICKS`; the sizes themselves when fewer than two powers fall in range."""
    values = sorted({int(s) for s in sizes if s and s > 0})
    if not values:
        return []
    lo, hi = math.ceil(math.log2(values[0])), math.floor(math.log2(values[-1]))
    for step in (1, 2, 5, 10, 20):
        exponents = [e for e in range(lo, hi + 1) if e % step == 0]
        if len(exponents) <= MAX_SIZE_TICKS:
            break
    if len(exponents) < 2:
        return values[:MAX_SIZE_TICKS]
    return [1 << e for e in exponents]


def size_axis(ax: Any, sizes: Sequence[int], label: str = "size (bytes)") -> None:
    """A log2 x axis over ``sizes`` labelled with :func:`~arborcc.sizes.format_size`."""
    ax.set_xscale("log", base=2)
    ticks = size_ticks(sizes)
    ax.set_xticks(ticks, [format_size(t) for t in ticks])
    ax.xaxis.set_minor_locator(_null_locator())
    ax.set_xlabel(label)


def busbw_axis(ax: Any, values: Iterable[float | None], label: str = "busbw (GB/s)") -> None:
    """The busbw (y) axis: logarithmic when the positive values span more than a decade."""
    positive = [v for v in values if v is not None and math.isfinite(v) and v > 0]
    if positive and max(positive) > LOG_SPAN * min(positive):
        ax.set_yscale("log")
    ax.set_ylabel(label)


def _null_locator():
    from matplotlib.ticker import NullLocator

    return NullLocator()
