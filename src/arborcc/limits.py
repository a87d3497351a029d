"""Every limit arborcc puts on what it is given, in one place.

arborcc reads files other people and tools write and runs inside training jobs, so a
careless or hostile input must cost one line and nothing else: each boundary checks
the numbers it receives against what a real machine or runtime can have *before*
anything is allocated, and estimates work before starting it. A refusal is one
:class:`~arborcc.errors.InputError` line naming the input, the place, the value and
the limit, e.g. ``topo.yaml:14: links[3].count: 10000000 lanes is over the limit of 64
lanes per link (ARBORCC_MAX_LANES raises it)``.

Every limit can be raised (or lowered) for one run: by the environment variable
``ARBORCC_MAX_<NAME>`` (``ARBORCC_MAX_RANKS=65536``) or by the command line's
``arborcc --limit ranks=65536 ...``. ``docs/limits.md`` is generated from
:data:`LIMITS` (a test keeps them equal), with the reason for every number.
"""

from __future__ import annotations

import os
import contextlib
from dataclasses import dataclass

from arborcc.errors import InputError

#: limits set for this process by ``--limit NAME=VALUE`` (they win over the environment)
_OVERRIDES: dict[str, int] = {}
#: defaults raised for a block of code by :func:`raised_default` (the environment and
#: ``--limit`` still win)
_RAISED: dict[str, int] = {}


@dataclass(frozen=True)
class Limit:
    """One boundary limit: ``name`` (``lanes``), ``default``, the ``unit`` its values are
    counted in, its ``scope`` (``per link``), what it bounds and why the default is what it is."""

    name: str
    default: int
    unit: str
    scope: str
    bounds: str
    reason: str

    @property
    def variable(self) -> str:
        """The environment variable that overrides it: ``ARBORCC_MAX_RANKS``."""
        return "ARBORCC_MAX_" + self.name.upper().replace("-", "_")

    @property
    def value(self) -> int:
        """The limit in force: ``--limit``, else the environment variable, else the default
        (as :func:`raised_default` may have raised it for the code running now)."""
        if self.name in _OVERRIDES:
            return _OVERRIDES[self.name]
        raw = os.environ.get(self.variable)
        if raw is None or not raw.strip():
            return _RAISED.get(self.name, self.default)
        return parse_limit_value(raw, self.variable)

    def check(self, value: int | float, source: str | None = None, place: str | int | None = None,
              what: str | None = None, error: type[InputError] = InputError) -> None:
        """Raise ``error`` (one line) when ``value`` is over the limit in force."""
        limit = self.value
        if value > limit:
            raise error(self.message(value, what), source=source, place=place)

    def message(self, value: int | float, what: str | None = None) -> str:
        """``links[3].count: 10,000,000 lanes is over the limit of 64 lanes per link (...)``."""
        head = f"{what}: " if what else ""
        shown = f"{value:,}" if isinstance(value, int) else f"{value:g}"
        if len(shown) > 40:  # a hostile file's 4,000-digit number: its ends
            shown = f"{shown[:18]}...{shown[-18:]}"
        return (f"{head}{shown} {self.unit} is over the limit of {self.value:,} {self.unit} "
                f"{self.scope} ({self.variable} or --limit {self.name}=N raises it)")


def parse_limit_value(text: str, source: str) -> int:
    """A limit's value from text (``65536``, ``64Mi``, ``1_000_000``); at least 1."""
    t = text.strip().replace("_", "")
    scale = 1
    for suffix, factor in (("Ki", 2**10), ("Mi", 2**20), ("Gi", 2**30)):
        if t.endswith(suffix):
            t, scale = t[: -len(suffix)], factor
            break
    if not t.isdigit() or int(t) * scale < 1:
        raise InputError(f"a limit is a positive integer (optionally with Ki, Mi or Gi), got {text!r}",
                         source=source)
    return int(t) * scale


#: the limits, in the order data flows through arborcc
LIMITS: dict[str, Limit] = {limit.name: limit for limit in (
    Limit("input-bytes", 8 * 2**20, "bytes",
          "per topology file", "topology files (YAML, JSON, NCCL XML, nvidia-smi text)",
          "the largest real topologies are far smaller: a 4,096-GPU DGX A100 cluster is a 2.8 MiB YAML file, "
          "shown (read, built, printed) in 6.1 s with 85 MB; 8 MiB stay within 30 s and 1 GB"),
    Limit("algorithm-bytes", 256 * 2**20, "bytes",
          "per algorithm file", "algorithm files (MSCCL XML, arborcc JSON); arborcc writes none larger",
          "what arborcc writes at 1024 ranks, the largest scale it measures: the all-reduce synth writes for 128 "
          "DGX A100 nodes (698,831 steps) is an 80 MiB JSON or 84 MiB XML file, verified in 18 s with 0.7 GB "
          "(JSON) or 7.7 s with 0.4 GB (XML); a 1024-rank ring all-reduce (2.1 million steps) is a 230 MiB "
          "JSON file, shown in 15 s with 1.6 GB; a file over the limit is refused when written as when read, "
          "so what arborcc writes it reads back"),
    Limit("algorithm-items", 4 * 2**20, "items",
          "per algorithm file", "ranks, thread blocks and steps of an algorithm file: XML elements, JSON "
          "objects and arrays, counted before parsing; arborcc writes no file with more",
          "what the readers hold in memory, which the bytes alone do not bound: 256 MiB of empty JSON arrays "
          "are 87 million items; a 1024-rank ring all-reduce is 2.1 Mi items; 4 Mi of the smallest steps "
          "('{\"op\": \"nop\"}') are read and checked in 60 s with 1.9 GB (XML '<step type=\"nop\"/>': 19 s, "
          "0.9 GB), 4 Mi empty JSON arrays refused in 4.6 s with 0.6 GB"),
    Limit("nesting", 64, "levels",
          "per document", "nesting of lists and mappings (YAML, JSON) or elements (XML)",
          "arborcc's documents nest at most 8 levels (an algorithm step's dependency list), NCCL XML "
          "about 8; deeper input is a mistake or an attack on the parsers' recursion"),
    Limit("yaml-alias-nodes", 10_000, "nodes",
          "per YAML document", "values added by expanding aliases (*name)",
          "aliases share a few link defaults; ten levels of nine aliases expand under 1 KB of text "
          "into 3.5 billion values (a 'billion laughs' bomb)"),
    Limit("ranks", 32_768, "GPUs",
          "per topology or algorithm", "GPUs (ranks), also the product of --nodes and the GPUs per node, "
          "a hierarchy's fan-outs and a DSL collective's ranks",
          "the largest single training jobs run on 16,384 to 24,576 GPUs (Llama 3 405B: 16,384 H100; "
          "'The Llama 3 Herd of Models', arXiv 2407.21783, 2024); showing a 32,768-GPU cluster takes "
          "8.2 s and 220 MB"),
    Limit("lanes", 64, "lanes",
          "per link", "bonded lanes (count:, NVLink count=)",
          "a GPU has at most 18 NVLink lanes (H100, B200), an NVSwitch chip 64 ports"),
    Limit("cpus", 8_192, "CPUs",
          "per CPU list", "CPU numbers in a CPU affinity list (nvidia-smi topo -m, sysfs cpulist)",
          "Linux's largest configurable CPU count on x86-64 (NR_CPUS) is 8,192"),
    Limit("chunks", 32_768, "chunks",
          "per buffer", "chunks per loop (nchunksperloop) and input, output and scratch chunks of a rank",
          "the MSCCL runtime holds chunk offsets in 16-bit signed integers (int16_t srcoffset and dstoffset "
          "of its mscclTransfer struct), so it cannot address chunk 32,768"),
    Limit("buffer-chunks", 4 * 2**20, "chunks",
          "per algorithm", "input, output and scratch chunks of all ranks together (files and DSL collectives)",
          "what the verifier's symbolic run and postcondition walk: a 1,024-rank all-to-all with "
          "1,024 chunks per buffer is 2 Mi; 4 Mi chunks are checked in 15.9 s with 31 MB"),
    Limit("operations", 250_000, "operations",
          "per DSL program", "copies and reduces a user's DSL program traces (arborcc's own programs: "
          "3,145,728, or 2 n^2 for a synthesis of more than 1024 ranks)",
          "memory grows by about 1.1 kB per operation while tracing and compiling: a 354-rank ring "
          "all-reduce (249,924 operations) takes 0.8 s and 291 MB, a 500-rank one (499,000) 1.5 s and "
          "555 MB, before the verifier and simulator hold it too; a hand-written program far beyond a "
          "128-rank ring all-reduce (32,512 operations) is more likely a runaway loop. The algorithms "
          "arborcc builds itself (synthesis, a library algorithm named to compile) may trace what its "
          "largest library algorithm traces at 1024 ranks, an all-pairs all-reduce's 3 n (n - 1): a "
          "1024-rank ring all-reduce (2,095,104) compiles in 12 s with 2.3 GB"),
    Limit("local-ranks", 256, "processes",
          "per run, bench or demo", "rank processes started on this machine (arborcc run -n, bench -n)",
          "one process per rank, each mapping its connections' FIFOs; a machine's GPUs (8-16 per node) or "
          "cores are far fewer, and a typo such as -n 40000 would otherwise start that many processes"),
    Limit("matrix-gpus", 128, "GPUs",
          "in the matrix of topo show and demo", "GPUs in the nvidia-smi-like matrix (a route per pair)",
          "a 128-GPU matrix (16,384 routes) prints in 0.7 s as 0.2 MiB of text, wider than any screen "
          "already; beyond it the matrix is left out and the link table alone is printed"),
    Limit("allocations", 50_000, "allocations",
          "per topo classes run", "allocations to classify (every GPU subset in the size range)",
          "each costs about 0.5 ms (a graph hash, an isomorphism test): all 65,399 allocations of 3-16 GPUs "
          "of a DGX-2 take 31 s, so 50,000 stay within 30 s"),
)}


def limit(name: str) -> Limit:
    """The limit called ``name`` (``KeyError`` for an unknown name is a programming error)."""
    return LIMITS[name]


def set_limit(assignment: str) -> None:
    """Apply ``--limit NAME=VALUE`` for the rest of this process."""
    name, sep, raw = assignment.partition("=")
    name = name.strip()
    if not sep or name not in LIMITS:
        raise InputError(f"expected NAME=VALUE with NAME one of {', '.join(LIMITS)}, got {assignment!r}",
                         source="--limit")
    _OVERRIDES[name] = parse_limit_value(raw, f"--limit {name}")


@contextlib.contextmanager
def raised_default(name: str, value: int):
    """Within the block, limit ``name`` defaults to ``value`` when that is above its
    default; a ``--limit`` or environment setting still wins."""
    previous = _RAISED.get(name)
    if value > max(LIMITS[name].default, previous or 0):
        _RAISED[name] = value
    try:
        yield
    finally:
        if previous is None:
            _RAISED.pop(name, None)
        else:
            _RAISED[name] = previous


def reset_limits() -> None:
    """Forget the ``--limit`` settings of this process (tests)."""
    _OVERRIDES.clear()


def limits_markdown() -> str:
    """The table of ``docs/limits.md``: name, default, variable, what it bounds, why."""
    rows = ["| limit | default | environment | what it bounds | why this number |", "|---|---|---|---|---|"]
    for lim in LIMITS.values():
        shown = f"{lim.default // 2**20} MiB" if lim.unit == "bytes" and lim.default % 2**20 == 0 else \
            f"{lim.default:,} {lim.unit}"
        rows.append(f"| `{lim.name}` | {shown} {lim.scope} | `{lim.variable}` | {lim.bounds} | {lim.reason} |")
    return "\n".join(rows) + "\n"
