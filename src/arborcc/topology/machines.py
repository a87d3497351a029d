"""Built-in machines with documented, overridable defaults.

Numbers come from the vendor's system descriptions ("NVIDIA DGX-1 With Tesla V100
System Architecture", NVIDIA white paper, 2017; the DGX-2, DGX A100 and DGX H100 user
guides, https://docs.nvidia.com/dgx/) and from NCCL's topology model
(https://github.com/NVIDIA/nccl, ``src/graph/topo.h``); the DGX-1V NVLink matrix is
the one ``nvidia-smi topo -m`` prints on those machines (AWS p3.16xlarge). Every
number is a field of :class:`MachineParams` and can be overridden, from
Python (``build_machine("dgx1v", nvlink_gbps=22)``) or from the CLI
(``--nvlink-gbps 22``). Bandwidths in the parameters are GB/s per direction.

Device ids follow one convention shared with the readers: ``gpu{i}``, ``cpu{i}``,
``pcie{i}``, ``nvswitch0``, ``nic{i}``.

References:

* Blink: G. Wang, S. Venkataraman, A. Phanishayee, N. Devanur, J. Thelin, I. Stoica, "Blink:
  Fast and Generic Collectives for Distributed ML", MLSys 2020, https://arxiv.org/abs/1910.04940
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

from arborcc.errors import TopologyError
from arborcc.topology.defaults import INTER_SOCKET, LATENCY, PCIE_X16
from arborcc.topology.model import GB, Device, DeviceKind, LinkKind, Topology, TopologyBuilder

#: NVLink lane counts between the GPUs of a DGX-1V / p3.16xlarge, in nvidia-smi's
#: numbering (topologies.md; Blink Fig. 1). DGX-1P connects the same pairs with 1 lane.
DGX1V_NVLINKS = (
    (0, 1, 1, 2, 2, 0, 0, 0),
    (1, 0, 2, 1, 0, 2, 0, 0),
    (1, 2, 0, 2, 0, 0, 1, 0),
    (2, 1, 2, 0, 0, 0, 0, 1),
    (2, 0, 0, 0, 0, 1, 1, 2),
    (0, 2, 0, 0, 1, 0, 2, 1),
    (0, 0, 1, 0, 1, 2, 0, 2),
    (0, 0, 0, 1, 2, 1, 2, 0),
)


@dataclass(frozen=True)
class MachineParams:
    """The parameters of a built-in machine (GB/s per direction; latencies in us)."""

    nvlink_gbps: float  #: one NVLink lane
    pcie_gbps: float  #: one PCIe x16 link (GPU/NIC <-> switch <-> CPU)
    nic_gbps: float  #: one NIC's network bandwidth (GB/s, e.g. 25 for 200 Gb/s HDR)
    inter_socket_gbps: float = INTER_SOCKET / GB
    nvlink_latency_us: float = LATENCY[LinkKind.NVLINK] * 1e6
    pcie_latency_us: float = LATENCY[LinkKind.PCIE] * 1e6
    inter_socket_latency_us: float = LATENCY[LinkKind.INTER_SOCKET] * 1e6


@dataclass(frozen=True)
class MachineSpec:
    """A built-in machine: its description, default parameters and builder."""

    name: str
    description: str
    defaults: MachineParams
    build: object  # Callable[[TopologyBuilder, MachineParams], None]
    gpus: int  #: GPUs per machine


def _add_gpus(b: TopologyBuilder, n: int, host: int, prefix: str, numa_of=lambda i: 0) -> list[str]:
    ids = []
    for i in range(n):
        ids.append(b.add_device(Device(f"{prefix}gpu{i}", DeviceKind.GPU, host, i, numa=numa_of(i))).id)
    return ids


def _add_pcie_tree(b: TopologyBuilder, p: MachineParams, host: int, prefix: str, sockets: int,
                   switch_members: list[list[str]], nics_per_switch: int,
                   nic_numbers: tuple[int, ...] | None = None) -> list[str]:
    """CPUs joined by inter-socket links; PCIe switches split evenly over the sockets,
    each holding the given members (GPUs) and ``nics_per_switch`` NICs, numbered in
    switch order unless ``nic_numbers`` says otherwise. Returns NIC ids by number."""
    pcie, isock = p.pcie_gbps * GB, p.inter_socket_gbps * GB
    for s in range(sockets):
        b.add_device(Device(f"{prefix}cpu{s}", DeviceKind.CPU, host, s, numa=s))
    for s in range(sockets - 1):
        b.connect(f"{prefix}cpu{s}", f"{prefix}cpu{s + 1}", LinkKind.INTER_SOCKET, isock,
                  p.inter_socket_latency_us * 1e-6)
    nics = []
    per_socket = max(1, len(switch_members) // sockets)
    for k, members in enumerate(switch_members):
        sw, socket = f"{prefix}pcie{k}", min(k // per_socket, sockets - 1)
        b.add_device(Device(sw, DeviceKind.PCIE_SWITCH, host, k, numa=socket))
        b.connect(sw, f"{prefix}cpu{socket}", LinkKind.PCIE, pcie, p.pcie_latency_us * 1e-6)
        for m in members:
            b.connect(m, sw, LinkKind.PCIE, pcie, p.pcie_latency_us * 1e-6)
        for _ in range(nics_per_switch):
            number = nic_numbers[len(nics)] if nic_numbers else len(nics)
            nic = f"{prefix}nic{number}"
            b.add_device(Device(nic, DeviceKind.NIC, host, number, numa=socket))
            b.connect(nic, sw, LinkKind.PCIE, pcie, p.pcie_latency_us * 1e-6)
            nics.append(nic)
    return sorted(nics, key=lambda n: int(n.rsplit("nic", 1)[1]))


def _nvlink_mesh(b: TopologyBuilder, p: MachineParams, gpus: list[str], lanes) -> None:
    for i, row in enumerate(lanes):
        for j, n in enumerate(row):
            if i < j and n:
                b.connect(gpus[i], gpus[j], LinkKind.NVLINK, n * p.nvlink_gbps * GB,
                          p.nvlink_latency_us * 1e-6, count=n)


def _nvswitch(b: TopologyBuilder, p: MachineParams, gpus: list[str], host: int, prefix: str, lanes: int) -> None:
    """A non-blocking NVSwitch fabric modelled as one switch node (topologies.md)."""
    sw = b.add_device(Device(f"{prefix}nvswitch0", DeviceKind.NVSWITCH, host, 0)).id
    for g in gpus:
        b.connect(g, sw, LinkKind.NVLINK, lanes * p.nvlink_gbps * GB, p.nvlink_latency_us * 1e-6, count=lanes)


def _dgx1(lanes):
    def build(b: TopologyBuilder, p: MachineParams, host: int = 0, prefix: str = "") -> list[str]:
        gpus = _add_gpus(b, 8, host, prefix, numa_of=lambda i: i // 4)
        _nvlink_mesh(b, p, gpus, lanes)
        # one NIC per PCIe switch, numbered as nvidia-smi shows them on DGX-1
        # (GPU0: mlx5_0 PIX, mlx5_1 SYS, mlx5_2 PHB, mlx5_3 SYS)
        return _add_pcie_tree(b, p, host, prefix, 2, [gpus[0:2], gpus[2:4], gpus[4:6], gpus[6:8]], 1,
                              nic_numbers=(0, 2, 1, 3))
    return build


def _switch_box(n_gpus: int, lanes: int, sockets: int, gpus_per_pcie: int, nics_per_pcie: int):
    def build(b: TopologyBuilder, p: MachineParams, host: int = 0, prefix: str = "") -> list[str]:
        per_socket = n_gpus // sockets
        gpus = _add_gpus(b, n_gpus, host, prefix, numa_of=lambda i: i // per_socket)
        _nvswitch(b, p, gpus, host, prefix, lanes)
        groups = [gpus[k:k + gpus_per_pcie] for k in range(0, n_gpus, gpus_per_pcie)]
        return _add_pcie_tree(b, p, host, prefix, sockets, groups, nics_per_pcie)
    return build


MACHINES: dict[str, MachineSpec] = {
    "dgx1p": MachineSpec(
        "dgx1p", "DGX-1 with 8 P100: hybrid cube-mesh, 1 NVLink1 per connected pair; PCIe gen3; 4 EDR NICs",
        MachineParams(nvlink_gbps=20, pcie_gbps=PCIE_X16[3] / GB, nic_gbps=12.5),
        _dgx1(tuple(tuple(min(n, 1) for n in row) for row in DGX1V_NVLINKS)), gpus=8),
    "dgx1v": MachineSpec(
        "dgx1v", "DGX-1 with 8 V100 (= AWS p3.16xlarge): hybrid cube-mesh of 1- and 2-lane NVLink2; PCIe gen3; 4 EDR NICs",
        MachineParams(nvlink_gbps=25, pcie_gbps=PCIE_X16[3] / GB, nic_gbps=12.5),
        _dgx1(DGX1V_NVLINKS), gpus=8),
    "dgx2": MachineSpec(
        "dgx2", "DGX-2: 16 V100, 6 NVLink2 each into a non-blocking NVSwitch fabric; PCIe gen3; 8 EDR NICs",
        MachineParams(nvlink_gbps=25, pcie_gbps=PCIE_X16[3] / GB, nic_gbps=12.5),
        _switch_box(16, 6, 2, 2, 1), gpus=16),
    "dgx-a100": MachineSpec(
        "dgx-a100", "DGX A100: 8 A100, 12 NVLink3 each into NVSwitches; PCIe gen4 switch per GPU pair with 2 HDR NICs",
        MachineParams(nvlink_gbps=25, pcie_gbps=PCIE_X16[4] / GB, nic_gbps=25),
        _switch_box(8, 12, 2, 2, 2), gpus=8),
    "dgx-h100": MachineSpec(
        "dgx-h100", "DGX H100: 8 H100, 18 NVLink4 each into NVSwitches; PCIe gen5 switch per GPU with one 400 Gb/s NIC",
        MachineParams(nvlink_gbps=25, pcie_gbps=PCIE_X16[5] / GB, nic_gbps=50),
        _switch_box(8, 18, 2, 1, 1), gpus=8),
}
ALIASES = {"p3.16xlarge": "dgx1v", "dgx1": "dgx1v", "dgxa100": "dgx-a100", "dgxh100": "dgx-h100",
           "p4d.24xlarge": "dgx-a100"}


def machine_spec(name: str) -> MachineSpec:
    key = ALIASES.get(name.lower(), name.lower())
    if key not in MACHINES:
        known = ", ".join(sorted(MACHINES) + sorted(ALIASES))
        raise TopologyError(f"unknown machine {name!r} (known: {known}, hierarchy:F@GBPS,...)", source="--machine")
    return MACHINES[key]


def machine_params(name: str, **overrides: float | None) -> MachineParams:
    """The machine's default parameters with the given (non-None) fields replaced."""
    spec = machine_spec(name)
    valid = {f.name for f in fields(MachineParams)}
    changes = {}
    for k, v in overrides.items():
        if v is None:
            continue
        if k not in valid:
            raise TopologyError(f"unknown machine parameter {k!r} (known: {', '.join(sorted(valid))})")
        if not v > 0 and not k.endswith("latency_us"):
            raise TopologyError(f"{k} must be positive, got {v}", source=f"--{k.replace('_', '-')}")
        changes[k] = float(v)
    return replace(spec.defaults, **changes)


def gpus_per_machine(name: str) -> int:
    """How many GPUs one ``name`` machine has (known without building it)."""
    return machine_spec(name).gpus


def add_machine(b: TopologyBuilder, name: str, params: MachineParams, host: int = 0, prefix: str = "") -> list[str]:
    """Add one copy of a built-in machine to ``b``; returns its NIC ids."""
    return machine_spec(name).build(b, params, host, prefix)  # type: ignore[operator]


def build_machine(name: str, **overrides: float | None) -> Topology:
    """One built-in machine, e.g. ``build_machine("dgx1v", nvlink_gbps=22)``."""
    spec = machine_spec(name)
    params = machine_params(name, **overrides)
    b = TopologyBuilder(spec.name, source=f"machine {spec.name}",
                        meta={"machine": spec.name, "params": asdict(params)})
    add_machine(b, spec.name, params)
    return b.build()
