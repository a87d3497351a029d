"""Rendering tree schedules: the text tree (every hop once, right weights and shares),
the PNG (a valid image of the documented size, written atomically) and the error
without matplotlib."""

from __future__ import annotations

import builtins
import os

import pytest

from arborcc.errors import InputError, MissingDependencyError
from arborcc.synth.render import figure_inches, hop_text, trees_png, trees_text
from arborcc.synth.trees import Hop, Tree, TreePacking
from arborcc.topology.model import GB, Device, DeviceKind, LinkKind, TopologyBuilder


def small():
    """gpu0 =2 NVLinks= gpu1, gpu1 -1- gpu2, and every GPU on pcie0 under cpu0."""
    b = TopologyBuilder("small")
    for i in range(3):
        b.add_device(Device(f"gpu{i}", DeviceKind.GPU, 0, i))
    b.add_device(Device("pcie0", DeviceKind.PCIE_SWITCH, 0, 0))
    b.add_device(Device("cpu0", DeviceKind.CPU, 0, 0))
    b.connect("gpu0", "gpu1", LinkKind.NVLINK, 50 * GB, count=2)
    b.connect("gpu1", "gpu2", LinkKind.NVLINK, 25 * GB, count=1)
    for i in range(3):
        b.connect(f"gpu{i}", "pcie0", LinkKind.PCIE, 12 * GB)
    b.connect("pcie0", "cpu0", LinkKind.PCIE, 12 * GB)
    return b.build()


A = Hop("gpu0", "gpu1", ("gpu0", "gpu1"))
B = Hop("gpu1", "gpu2", ("gpu1", "gpu2"))
C = Hop("gpu0", "gpu2", ("gpu0", "pcie0", "gpu2"))
D = Hop("gpu2", "gpu1", ("gpu2", "pcie0", "cpu0", "pcie0", "gpu1"))  # a silly but valid path
T1 = Tree("gpu0", (A, B), 30 * GB)
T2 = Tree("gpu0", (C, D), 10 * GB)
T3 = Tree("gpu1", (Hop("gpu0", "gpu1", ("gpu0", "gpu1")), Hop("gpu2", "gpu1", ("gpu2", "gpu1"))),
          5 * GB, inward=True)


def test_hop_text_forms():
    t = small()
    assert hop_text(A, t) == "gpu0 -[nvlink x2]-> gpu1"
    assert hop_text(B, t) == "gpu1 -[nvlink x1]-> gpu2"
    assert hop_text(C, t) == "gpu0 -> pcie0 -> gpu2"
    assert hop_text(D, t) == "gpu2 -> pcie0 -> cpu0 -> pcie0 -> gpu1"
    assert hop_text(Hop("gpu0", "pcie0", ("gpu0", "pcie0")), t) == "gpu0 -[pcie]-> pcie0"


def test_text_has_each_hop_once_and_the_weights():
    t = small()
    text = trees_text([T1, T2], t)
    for h in (A, B, C, D):
        assert text.count(hop_text(h, t)) == 1, h
    assert text.count("gpu0 -[nvlink x2]-> gpu1") == 1
    assert "weight 30.000 GB/s" in text and "weight 10.000 GB/s" in text
    # without chunk counts the share is the fraction of the root's group weight
    assert "share 75.0% of gpu0's out-trees" in text and "share 25.0% of gpu0's out-trees" in text
    assert "2 trees on small, 40.00 GB/s in all" in text


def test_text_indents_children_under_their_parent():
    t = small()
    lines = trees_text([T1], t).splitlines()
    i = lines.index("  gpu0")
    assert lines[i + 1] == "    gpu0 -[nvlink x2]-> gpu1"
    assert lines[i + 2] == "      gpu1 -[nvlink x1]-> gpu2"  # gpu2 hangs under gpu1


def test_in_tree_hops_flow_to_the_root_and_counts_give_chunk_shares():
    t = small()
    text = trees_text([T1, T2, T3], t, counts=[3, 1, 4])
    assert "in-tree (data flows to the root)" in text
    assert "    gpu0 -[nvlink x2]-> gpu1" in text and "    gpu2 -[nvlink x1]-> gpu1" in text
    assert "3 of 4 chunks (75.0%) of gpu0's out-trees" in text
    assert "1 of 4 chunks (25.0%) of gpu0's out-trees" in text
    assert "4 of 4 chunks (100.0%) of gpu1's in-trees" in text
    assert "weight 5.000 GB/s" in text
    with pytest.raises(InputError):
        trees_text([T1, T2], t, counts=[1])


def test_text_from_a_packing_and_limit():
    t = small()
    packing = TreePacking("broadcast", ("gpu0",), (T1, T2), 40 * GB, None, "test", 0.0)
    text = trees_text(packing, t, limit=1)
    assert text.startswith("broadcast packing (test) on small: 2 trees, rate 40.00 GB/s")
    assert "tree 1/2" in text and "tree 2/2" not in text and "... and 1 more trees" in text


def test_text_rejects_a_hop_over_a_missing_link():
    bad = Tree("gpu0", (Hop("gpu0", "gpu2", ("gpu0", "gpu2")),), 1.0)  # no gpu0-gpu2 NVLink
    with pytest.raises(InputError, match="gpu0->gpu2"):
        trees_text([bad], small())


def test_text_of_a_synthesis_result():
    from arborcc.synth import synthesize
    from arborcc.synth.trees import check_tree

    t = small()
    r = synthesize(t, "broadcast", "trees")
    text = trees_text(r, t)
    assert text.startswith("broadcast by trees on small:")
    for tree in r.trees:
        check_tree(tree, t)
        assert f"weight {tree.weight / GB:.3f} GB/s" in text
    hop_lines = [ln for ln in text.splitlines() if "->" in ln]
    assert len(hop_lines) == sum(len(tree.hops) for tree in r.trees)


def test_png_is_a_valid_image_of_the_documented_size(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib.image as mpimg

    t = small()
    out = tmp_path / "trees.png"
    assert trees_png([T1, T2, T3], t, out, dpi=50) == out
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    img = mpimg.imread(out)
    w, h = figure_inches(3)
    assert img.shape[:2] == (round(h * 50), round(w * 50))
    assert not [p for p in os.listdir(tmp_path) if p != "trees.png"]  # no temp file left behind
    assert img[..., :3].min() < 0.5  # something was drawn (not a blank page)


def test_png_caps_the_panels_and_honours_figsize(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib.image as mpimg

    out = tmp_path / "many.png"
    trees_png([T1] * 20, small(), out, max_trees=5, dpi=40, figsize=(6, 4))
    assert mpimg.imread(out).shape[:2] == (160, 240)
    assert figure_inches(20, 5) == figure_inches(5)


def test_png_without_matplotlib(monkeypatch, tmp_path):
    real = builtins.__import__

    def fake(name, *args, **kwargs):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(f"No module named {name!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake)
    with pytest.raises(MissingDependencyError, match="matplotlib") as info:
        trees_png([T1], small(), tmp_path / "x.png")
    assert "arborcc[plot]" in str(info.value) and "drawing trees" in str(info.value)
    assert not (tmp_path / "x.png").exists()
