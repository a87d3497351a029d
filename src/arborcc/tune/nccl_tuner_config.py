"""Rules for NCCL's example tuner plugin: stock NCCL, told per size which of its own
algorithms, protocols and channel counts the simulator finds fastest.

NCCL >= 2.27.5 ships an example tuner plugin (NVIDIA/nccl ``plugins/tuner/example``,
``plugin.c``; loaded with ``NCCL_TUNER_PLUGIN``) that reads ``NCCL_TUNER_CONFIG_FILE``
(default ``./nccl_tuner.conf``). Its parser is the format's specification:

* one rule a line, ``collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks``
  (two optional fields follow: ``numPipeOps``, ``regBuff``); fields split at commas,
  blanks around them trimmed; a line starting with ``#`` and an empty line are skipped;
  lines are read 255 characters at a time;
* names in lower case exactly: collectives ``broadcast reduce allgather reducescatter
  allreduce``, algorithms ``tree ring collnet_direct collnet_chain nvls nvls_tree pat``,
  protocols ``ll ll128 simple`` (anything else silently becomes allreduce, ring, simple);
* a rule matches a call when the collective is the same, ``min_bytes <= nBytes <=
  max_bytes`` (``nBytes``: the whole buffer, nccl-tests' size) and ``nNodes`` / ``nRanks``
  equal the communicator's (``-1``: any); the first match wins, its algorithm x protocol
  gets cost 0 and its channel count is NCCL's for the call;
* before matching, the plugin sets the channel count to 1 and only a rule with a
  positive count changes it: a call no rule matches - and a rule with channels ``-1`` -
  runs on ONE channel. So the file written here covers every size of the collective
  (the last rule up to 2^64 - 1), every rule names its channel count, and where the
  simulator finds nothing faster than NCCL's own choice the rule restates that choice
  (algorithm, protocol, NCCL's channel count at the size) instead of leaving the size
  to the plugin's one channel.

The choice per size (:func:`tuner_choices`): every algorithm x protocol NCCL may run for
the collective on the topology (:meth:`arborcc.tune.nccl.NcclBaseline.options`) with
several channel counts, simulated; NCCL's default is the baseline's call (its alpha-beta
model's pick, simulated). A size gains when the best is at least :data:`MIN_GAIN` faster.
Consecutive sizes with the same choice form one rule, from 0 (the first) to one byte
below the next rule's first size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from arborcc.errors import InputError
from arborcc.topology.model import DeviceKind, Topology

#: the plugin's spelling of arborcc's collective, algorithm and protocol names
PLUGIN_COLLECTIVES = {"allreduce": "allreduce", "allgather": "allgather", "reducescatter": "reducescatter",
                      "broadcast": "broadcast", "reduce": "reduce"}
PLUGIN_ALGORITHMS = {"ring": "ring", "tree": "tree", "nvls": "nvls"}
PLUGIN_PROTOCOLS = {"LL": "ll", "LL128": "ll128", "Simple": "simple"}
#: size_t's largest value, the last rule's ``max_bytes`` (the plugin reads it with strtoull)
MAX_BYTES = (1 << 64) - 1
#: the plugin reads a line into a 256-byte buffer
MAX_LINE = 255
#: a choice counts as a gain when it is at least this much faster than NCCL's
MIN_GAIN = 0.01
#: NVLS channels NCCL uses by default (``NCCL_NVLS_NCHANNELS``, 16)
NVLS_CHANNELS = 16
#: channel counts tried besides NCCL's own for the size
CHANNEL_STEPS = (1, 2, 4, 8, 16, 32)
HEADER = "collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks"


@dataclass(frozen=True)
class Option:
    """One way NCCL can run a call: algorithm, protocol, channels, and its simulated time."""

    algorithm: str
    protocol: str
    channels: int
    time: float

    def key(self) -> tuple[str, str, int]:
        return (self.algorithm, self.protocol, self.channels)


@dataclass
class SizeChoice:
    """At one size: NCCL's default (its model's pick) and the fastest option."""

    size: int
    default: Option
    best: Option

    @property
    def gain(self) -> float:
        """How much faster the best option is than NCCL's default: default / best - 1."""
        return self.default.time / self.best.time - 1

    @property
    def gains(self) -> bool:
        return self.gain >= MIN_GAIN and self.best.key() != self.default.key()

    @property
    def chosen(self) -> Option:
        """The best option where it gains, NCCL's default elsewhere."""
        return self.best if self.gains else self.default


@dataclass
class TunerRule:
    """One line of the file and the sizes it was chosen at."""

    collective: str
    min_bytes: int
    max_bytes: int
    option: Option
    nodes: int
    ranks: int
    choices: list[SizeChoice] = field(default_factory=list)

    @property
    def gains(self) -> bool:
        """Whether the rule changes NCCL's choice at some of its sizes."""
        return any(c.gains for c in self.choices)

    def gain_text(self, format_size: Callable[[int], str] = str, limit: int = 6) -> str:
        """Each tuned size's predicted gain (``NCCL's choice`` where it restates it)."""
        parts = [f"{format_size(c.size)} {c.gain:+.1%}" if c.gains else f"{format_size(c.size)} NCCL's choice"
                 for c in self.choices]
        return ", ".join(parts[:limit]) + (", ..." if len(parts) > limit else "")

    def line(self) -> str:
        o = self.option
        return ",".join(str(x) for x in (PLUGIN_COLLECTIVES[self.collective], self.min_bytes, self.max_bytes,
                                         PLUGIN_ALGORITHMS[o.algorithm], PLUGIN_PROTOCOLS[o.protocol], o.channels,
                                         self.nodes, self.ranks))


def job_shape(topology: Topology, source: str) -> tuple[int, int]:
    """(nNodes, nRanks) of the NCCL job ``topology`` describes; refuses one the plugin's
    rules cannot name: ranks that are not GPUs (NCCL runs on GPUs), GPUs that belong to
    no host (``nNodes`` is a count of hosts), fewer than two ranks (nothing to tune).
    ``source`` names the input the topology came from (a file, a flag)."""
    kinds = {topology.devices[r].kind for r in topology.ranks}
    if kinds != {DeviceKind.GPU}:
        other = sorted(k.value for k in kinds if k is not DeviceKind.GPU)
        raise InputError(f"NCCL's tuner plugin tunes GPU jobs; ranks of {topology.name} are {', '.join(other)}",
                         source=source)
    hosts = {topology.devices[r].host for r in topology.ranks}
    if None in hosts:
        raise InputError(f"some GPUs of {topology.name} belong to no host, so the job's node count (nNodes of "
                         f"the tuner plugin's rules) is not known", source=source)
    if topology.num_ranks < 2:
        raise InputError(f"{topology.name} has {topology.num_ranks} GPU: NCCL has no collective to tune",
                         source=source)
    return len(hosts), topology.num_ranks


def channel_counts(baseline, default: int) -> list[int]:
    """Channel counts to try: NCCL's own for the size, and :data:`CHANNEL_STEPS` up to
    NCCL's maximum that the rings divide evenly (so the count simulated is the count
    written)."""
    rings = len(baseline.schedule.rings)
    counts = {default, baseline.channels}
    counts.update(c for c in CHANNEL_STEPS if c <= baseline.channels and (c <= rings or c % rings == 0))
    return sorted(counts)


def tuner_choices(baseline, collective: str, sizes: Sequence[int], root: int = 0, protocols: Sequence[str] | None = None,
                  progress: Callable[[str], None] | None = None) -> list[SizeChoice]:
    """At every size, NCCL's default call and the fastest of its options (module doc);
    ``protocols`` restricts the options (``--protocol``)."""
    out = []
    options = [(a, p) for a, p in baseline.options(collective) if protocols is None or p in protocols]
    for size in sorted(set(int(s) for s in sizes)):
        if progress:
            progress(f"simulating NCCL's options for {collective} at {size} bytes")
        call = baseline.call(size, collective, root)
        default = Option(call.algorithm, call.protocol, call.channels or NVLS_CHANNELS, call.result.time)
        tried = [default]
        for algorithm, protocol in options:
            if algorithm == "nvls":
                r = baseline.simulate_option(size, collective, "nvls", "Simple")
                tried.append(Option("nvls", "Simple", NVLS_CHANNELS, r.time))
                continue
            for nc in channel_counts(baseline, baseline.channels_for(size, protocol)):
                r = baseline.simulate_option(size, collective, algorithm, protocol, nc, root)
                tried.append(Option(algorithm, protocol, nc, r.time))
        best = min(tried, key=lambda o: (o.time, o.key() != default.key()))
        out.append(SizeChoice(size, default, best))
    return out


def tuner_rules(choices: Sequence[SizeChoice], collective: str, nodes: int, ranks: int) -> list[TunerRule]:
    """Rules covering every size from 0 to :data:`MAX_BYTES` (module doc)."""
    rules: list[TunerRule] = []
    for i, c in enumerate(choices):
        low = 0 if i == 0 else c.size
        if rules and rules[-1].option.key() == c.chosen.key():
            rules[-1].choices.append(c)
        else:
            if rules:
                rules[-1].max_bytes = low - 1
            rules.append(TunerRule(collective, low, MAX_BYTES, c.chosen, nodes, ranks, [c]))
    return rules


def tuner_config_text(rules: Sequence[TunerRule], topology: str, fidelity: str) -> str:
    """The file: a comment header, then one rule a line."""
    r0 = rules[0]
    lines = ["# NCCL example tuner plugin rules (NCCL >= 2.27.5, plugins/tuner/example), written by arborcc tune",
             f"# for {PLUGIN_COLLECTIVES[r0.collective]} on {topology} ({r0.nodes} node(s), {r0.ranks} ranks), "
             f"simulated with the {fidelity} profile",
             "# use: NCCL_TUNER_PLUGIN=<path to libnccl-tuner-example.so> NCCL_TUNER_CONFIG_FILE=<this file>",
             "# the plugin runs any call no rule matches on 1 channel: these rules cover every size of this",
             "# collective; other collectives need their own rules (arborcc tune --collective ...)",
             "# rules marked 'default' restate NCCL's own choice, where nothing simulated was faster by "
             f"{MIN_GAIN:.0%}",
             f"# {HEADER}"]
    for rule in rules:
        what = "gain" if rule.gains else "default"
        lines.append(f"# {what}: {rule.gain_text(lambda b: f'{b} B', 4)}"[:MAX_LINE])
        lines.append(rule.line())
    for line in lines:
        if len(line) > MAX_LINE:  # pragma: no cover - rules are at most about 80 characters
            raise AssertionError(f"tuner rule longer than the plugin reads: {line!r}")
    return "\n".join(lines) + "\n"


def check_tuner_collective(collective: str) -> None:
    """``--collective`` with ``--nccl-tuner-config``: one the plugin's rules can name."""
    if collective not in PLUGIN_COLLECTIVES:
        raise InputError(f"NCCL's tuner plugin tunes {', '.join(PLUGIN_COLLECTIVES)}, not {collective}",
                         source="--collective")
