"""The busbw plots (``compare --plot``, ``bench --plot``) read well: a log2 size axis
labelled with :func:`arborcc.sizes.format_size` (4K, 1M, 1G), busbw on a log axis when
it spans more than a decade, every series with its own marker and line style. The
figures are inspected through matplotlib's Axes (the one :func:`arborcc.plotting.save_figure`
is given), not through pixels."""

from __future__ import annotations

import pytest

from arborcc.bench.protocol import Row, Spec
from arborcc.cli.main import main
from arborcc.plotting import size_ticks
from arborcc.sizes import format_size, parse_sizes

pytest.importorskip("matplotlib")


@pytest.fixture
def saved(monkeypatch):
    """The figures the plots save (each still written)."""
    import arborcc.plotting as plotting

    figures = []
    real = plotting.save_figure

    def keep(fig, path, dpi=120):
        figures.append(fig)
        real(fig, path, dpi)

    monkeypatch.setattr(plotting, "save_figure", keep)
    return figures


def tick_labels(ax) -> list[str]:
    return [t.get_text() for t in ax.get_xticklabels()]


def series(ax) -> list:
    return [line for line in ax.get_lines() if not line.get_label().startswith("_")]


def test_compare_plot_has_a_labelled_log2_size_axis_and_distinct_series(tmp_path, capsys, saved):
    png = tmp_path / "cmp.png"
    assert main(["compare", "--machine", "dgx1v", "--gpus", "0,1,2,3", "--sizes", "1K:1G",
                 "--strategies", "ring,nccl-ring,trees", "--plot", str(png)]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG"
    (fig,) = saved
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.xaxis.get_transform().base == 2
    labels = tick_labels(ax)
    assert {"4K", "1M", "1G"} <= set(labels)
    assert labels == [format_size(t) for t in size_ticks(parse_sizes("1K:1G"))]
    assert ax.get_yscale() == "log"  # 1K to 1G: busbw spans far more than a decade
    lines = series(ax)
    assert {line.get_label() for line in lines} == {"ring", "nccl-ring", "trees", "nccl", "nccl-model"}
    styles = [(line.get_marker(), line.get_linestyle()) for line in lines]
    assert len(set(m for m, _ in styles)) == len(styles)  # no two series share a marker
    assert len(set(styles)) == len(styles)


def test_compare_plot_keeps_a_linear_busbw_axis_within_a_decade(tmp_path, capsys, saved):
    assert main(["compare", "--machine", "dgx1v", "--gpus", "0,1,2,3", "--sizes", "256M,512M,1G",
                 "--strategies", "ring", "--plot", str(tmp_path / "c.svg")]) == 0
    ax = saved[0].axes[0]
    assert ax.get_yscale() == "linear"
    assert tick_labels(ax) == ["256M", "512M", "1G"]


def bench_rows(values: dict[str, list[float]], sizes: list[int]) -> list[Row]:
    return [Row(backend, size, size // 4, "float", "sum", -1, inplace, 10.0, bw / 2, bw, 0, requested=size)
            for backend, bws in values.items() for size, bw in zip(sizes, bws) for inplace in (False, True)]


def test_bench_plot_has_a_labelled_log2_size_axis_and_a_marker_per_backend(tmp_path, saved):
    from arborcc.bench.report import plot

    sizes = [4 << 10 << k for k in range(0, 15)]  # 4K ... 64M
    rows = bench_rows({"arborcc": [0.01 * 2**k for k in range(15)], "gloo": [0.02 * 2**k for k in range(15)]}, sizes)
    spec = Spec(sizes=sizes)
    plot(spec, rows, ["arborcc", "gloo"], str(tmp_path / "b.png"))
    assert (tmp_path / "b.png").read_bytes()[:4] == b"\x89PNG"
    ax = saved[0].axes[0]
    assert ax.get_xscale() == "log" and {"4K", "1M"} <= set(tick_labels(ax))
    assert ax.get_yscale() == "log"
    lines = series(ax)
    assert len(lines) == 4
    styles = {(line.get_marker(), line.get_linestyle()) for line in lines}
    assert len(styles) == 4  # back-ends by marker, in place / out of place by line style


def test_bench_plot_keeps_a_linear_busbw_axis_within_a_decade(tmp_path, saved):
    from arborcc.bench.report import plot

    sizes = [1 << 20, 2 << 20]
    plot(Spec(sizes=sizes), bench_rows({"arborcc": [3.0, 4.0]}, sizes), ["arborcc"], str(tmp_path / "b.pdf"))
    assert (tmp_path / "b.pdf").read_bytes()[:4] == b"%PDF"
    assert saved[0].axes[0].get_yscale() == "linear"


@pytest.mark.parametrize("sweep, expected", [
    ("1K:1G", ["1K", "4K", "16K", "64K", "256K", "1M", "4M", "16M", "64M", "256M", "1G"]),
    ("8:1G", ["32", "1K", "32K", "1M", "32M", "1G"]),
    ("1K:1M", ["1K", "2K", "4K", "8K", "16K", "32K", "64K", "128K", "256K", "512K", "1M"]),
    ("1M", ["1M"]),
    ("1000,1500", ["1000", "1500"]),  # fewer than two powers of two in range: the sizes themselves
])
def test_size_ticks_are_powers_of_two_labelled_by_format_size(sweep, expected):
    assert [format_size(t) for t in size_ticks(parse_sizes(sweep))] == expected


def test_bench_plot_draws_the_memory_reference_only_where_the_table_has_one(tmp_path, saved):
    """The gray %mem line is the table's number (memory_busbw): calls whose traffic fits
    the last-level cache have none, so the line starts beyond it."""
    from arborcc.bench.report import Machine, memory_busbw, plot

    sizes = [4 << 10 << k for k in range(0, 15)]  # 4K ... 64M
    rows = bench_rows({"arborcc": [0.01 * 2**k for k in range(15)]}, sizes)
    machine = Machine(membw=10e9, cache=1 << 20)
    spec = Spec(sizes=sizes)
    plot(spec, rows, ["arborcc"], str(tmp_path / "b.png"), machine)
    (reference,) = [line for line in saved[0].axes[0].get_lines() if line.get_linestyle() == ":"]
    expected = [(r.size, memory_busbw(spec, r, machine)) for r in rows if not r.inplace]
    expected = [(s, bw) for s, bw in expected if bw is not None]
    assert 0 < len(expected) < len(sizes)  # some sizes fit the cache, some do not
    assert list(zip(reference.get_xdata(), reference.get_ydata())) == expected
