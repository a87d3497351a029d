"""``msccl.topologies.nvidia``: NVIDIA machines as the public GC3 tools describe them - a
link matrix of NVLink lanes per GPU pair.

* :func:`dgx1` - DGX-1 (V100, = AWS p3.16xlarge) in the GPU numbering the public tools use,
  which is a relabelling of the one ``nvidia-smi`` prints (the numbering of
  :data:`arborcc.topology.machines.DGX1V_NVLINKS`): the tools' GPU ``i`` is
  ``nvidia-smi``'s GPU ``DGX1_TOOL_ORDER[i]``;
* :func:`dgx_a100` - DGX A100: every pair joined through the NVSwitches by 12 lanes;
* :func:`nvlink_only` - the NVLink lanes of ``nvidia-smi topo -m`` output (run here when
  no dump is given), read with :func:`arborcc.topology.nvidia_smi.parse_nvidia_smi`.

References:

* GC3: M. Cowan, S. Maleki, M. Musuvathi, O. Saarikivi, Y. Xiong, "GC3: An Optimizing Compiler
  for GPU Collective Communication", arXiv 2022 (published as MSCCLang, ASPLOS 2023),
  https://arxiv.org/abs/2201.11840
"""

from __future__ import annotations

from arborcc.compat.msccl.topologies.topology import Topology

_arborcc_compat = True

#: the public tools' DGX-1 GPU i is nvidia-smi's GPU DGX1_TOOL_ORDER[i]
DGX1_TOOL_ORDER = (0, 3, 1, 2, 4, 7, 5, 6)
#: NVLink lanes from one A100 to each other A100 of a DGX A100 (12 lanes into the NVSwitches)
A100_LANES = 12


def dgx1() -> Topology:
    """DGX-1 with V100: NVLink lanes between GPUs, in the public tools' numbering."""
    from arborcc.topology.machines import DGX1V_NVLINKS

    order = DGX1_TOOL_ORDER
    return Topology("DGX1", [[DGX1V_NVLINKS[a][b] for b in order] for a in order])


def dgx_a100() -> Topology:
    """DGX A100: 8 GPUs, each pair joined by 12 NVLink lanes through the NVSwitches."""
    return Topology("DGX_A100", [[0 if i == j else A100_LANES for j in range(8)] for i in range(8)])


def nvlink_only(nvidia_smi_topo: str | None = None) -> Topology:
    """The NVLink lanes between the GPUs of ``nvidia-smi topo -m`` output (this machine's
    when ``nvidia_smi_topo`` is None)."""
    from arborcc.topology.model import LinkKind
    from arborcc.topology.nvidia_smi import parse_nvidia_smi

    if nvidia_smi_topo is None:
        nvidia_smi_topo = _nvidia_smi_topo()
    t = parse_nvidia_smi(nvidia_smi_topo, "<nvidia-smi topo -m>")
    lanes = []
    for a in t.ranks:
        row = []
        for b in t.ranks:
            link = t.link(a, b)
            row.append(link.count if link is not None and link.kind is LinkKind.NVLINK else 0)
        lanes.append(row)
    return Topology("NVLinkOnly", lanes)


def _nvidia_smi_topo() -> str:
    import subprocess

    from arborcc.errors import InputError

    try:
        return subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, check=True,
                              timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise InputError(f"nvlink_only() without a dump runs `nvidia-smi topo -m`, which failed here ({e})",
                         source="msccl.topologies.nvidia") from None


__all__ = ["dgx1", "dgx_a100", "nvlink_only"]
