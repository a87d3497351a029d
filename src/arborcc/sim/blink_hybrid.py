"""Blink's split of one transfer over PCIe trees and NVLink trees (its eq. 8).

Guanhua Wang, Shivaram Venkataraman, Amar Phanishayee, Jorgen Thelin, Nikhil Devanur,
Ion Stoica: "Blink: Fast and Generic Collectives for Distributed ML", MLSys 2020,
section 3.4 (https://arxiv.org/abs/1910.04940).

Blink cannot put PCIe and NVLink into one set of trees (the driver routes peer traffic
over NVLink once it exists), so it builds one set of trees per link type and splits
the data so both finish together, the PCIe side paying a set-up time ``T_dpa`` for
disabling peer access first: ``T_PCIe + T_dpa = T_NVL`` gives

    D_PCIe = (D x BW_PCIe - T_dpa x BW_PCIe x BW_NVL) / (BW_PCIe + BW_NVL),
    D_NVL  = D - D_PCIe.

arborcc's own tree packing can use both link types in one packing (``links="all"``),
which is at least as fast when the runtime lets a connection pick its path; this
module is the paper's model for runtimes that cannot.
"""

from __future__ import annotations

from dataclasses import dataclass

from arborcc.errors import InputError


@dataclass(frozen=True)
class HybridSplit:
    """Bytes per link type and the resulting time (s) and algbw (B/s)."""

    pcie_bytes: float
    nvlink_bytes: float
    time: float

    @property
    def algbw(self) -> float:
        total = self.pcie_bytes + self.nvlink_bytes
        return total / self.time if self.time > 0 else float("inf")


def hybrid_split(total_bytes: float, pcie_rate: float, nvlink_rate: float, setup_time: float = 0.0) -> HybridSplit:
    """Blink eq. 8: how many of ``total_bytes`` go over the PCIe trees (rate
    ``pcie_rate`` B/s, after ``setup_time`` s) and how many over the NVLink trees.
    When the set-up costs more than PCIe could save, everything goes over NVLink."""
    for name, value in (("total_bytes", total_bytes), ("pcie_rate", pcie_rate), ("nvlink_rate", nvlink_rate),
                        ("setup_time", setup_time)):
        if not value >= 0:
            raise InputError(f"{name} must be >= 0, got {value}", source="Blink hybrid model")
    if nvlink_rate == 0 and pcie_rate == 0:
        raise InputError("no link carries data (both rates are 0)", source="Blink hybrid model")
    both = pcie_rate + nvlink_rate
    pcie = (total_bytes * pcie_rate - setup_time * pcie_rate * nvlink_rate) / both
    pcie = min(max(pcie, 0.0), total_bytes)
    if nvlink_rate == 0:
        pcie = total_bytes
    nvl = total_bytes - pcie
    t_nvl = nvl / nvlink_rate if nvlink_rate else 0.0
    t_pcie = setup_time + pcie / pcie_rate if pcie > 0 else 0.0
    return HybridSplit(pcie, nvl, max(t_nvl, t_pcie))
