"""Every environment variable the runtime and the torch backend read, checked in one place.

:func:`runtime_settings` reads them all (the process's environment, or a mapping) into a
:class:`Settings`; a value that is not what its variable means is one
:class:`~arborcc.errors.InputError` naming the variable and the value
(``$ARBORCC_TIMEOUT: 'nan' is not a number of seconds ...``). An unset or empty variable
takes its default. :data:`VARIABLES` lists each one - name, default, meaning - and
docs/runtime.md's table is that list (a test compares them).

Sizes are written as everywhere in arborcc (:mod:`arborcc.sizes`: ``4096``, ``64K``,
``1.5M``); switches as ``1``/``0``, ``true``/``false``, ``yes``/``no``, ``on``/``off``.

The runtime's own rendezvous (:meth:`Settings.local_launch`) further needs ``RANK`` and
``WORLD_SIZE``, a loopback ``MASTER_ADDR`` and a free port above ``MASTER_PORT``, and
takes the job's identity from ``ARBORCC_JOB_SECRET`` or torchrun's ``TORCHELASTIC_RUN_ID``
and ``TORCHELASTIC_RESTART_COUNT`` (:func:`arborcc.runtime.rendezvous.job_identity`);
torch.distributed reads those itself and only needs them well formed.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
import socket
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from arborcc.errors import InputError
# the data plane's own limits (segment_layout.hpp): ranks of one communicator, FIFO slots per connection
from arborcc.runtime.native import MAX_RANKS, MAX_SLOTS
from arborcc.sizes import MAX_BYTES, format_size, parse_size

#: the longest timeout (a socket's timeout must fit the platform's time_t; a year is plenty)
MAX_TIMEOUT = 365 * 24 * 3600.0
#: MASTER_PORT when unset (torch.distributed's default)
DEFAULT_MASTER_PORT = 29500
#: the longest spin or yield phase of a waiting rank (10 s: longer is sleeping with the CPU busy)
MAX_WAIT_US = 10_000_000.0
#: channels per pair of ranks (MSCCL's maximum)
MAX_CHANNELS = 32
#: the largest FIFO slot, pipeline slice and staging slice (larger changes nothing but the mapping)
MAX_SLOT_BYTES = 1 << 30
#: the smallest FIFO slot: one page (a step of 80 chunks of 8-byte elements must fit one slot)
MIN_SLOT_BYTES = 4096
#: the smallest pipeline slice (one cache line; smaller slices make calls crawl)
MIN_SLICE_BYTES = 64
#: the smallest staging slice (the staging ring needs a page per slot)
MIN_STAGED_SLICE_BYTES = 4096
#: the largest shared-memory segment (address space the mapping reserves: 2^46 = 64 TiB)
MAX_SEGMENT_BYTES = 1 << 46
#: the most worker threads per rank
MAX_WORKERS = 1024
#: the longest job secret or torchrun run id (the job's identity in the rendezvous)
MAX_IDENTITY_CHARS = 1024

TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off")


# ------------------------------------------------------------------------------ readers
def whole_number(raw: str, source: str, lo: int, hi: int, what: str = "") -> int:
    text = raw.strip()
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        raise InputError(f"{raw!r} is not a whole number{what and ' (' + what + ')'}", source=source)
    value = int(text)
    if not lo <= value <= hi:
        raise InputError(f"{raw!r} is out of range: from {lo} to {hi}{what and ' (' + what + ')'}", source=source)
    return value


def finite_number(raw: str, source: str, what: str) -> float:
    try:
        value = float(raw.strip())
    except ValueError:
        raise InputError(f"{raw!r} is not a number ({what})", source=source) from None
    if not math.isfinite(value):
        raise InputError(f"{raw!r} is not a finite number ({what})", source=source)
    return value


def seconds(raw: str, source: str) -> float:
    value = finite_number(raw, source, "seconds")
    if not 0 < value <= MAX_TIMEOUT:
        raise InputError(f"{raw!r} is out of range: seconds greater than 0, at most {MAX_TIMEOUT:.0f} (a year)",
                         source=source)
    return value


def microseconds(raw: str, source: str) -> float:
    value = finite_number(raw, source, "microseconds, or -1 for the default")
    if value != -1 and not 0 <= value <= MAX_WAIT_US:
        raise InputError(f"{raw!r} is out of range: microseconds from 0 to {MAX_WAIT_US:.0f}, or -1 for the default",
                         source=source)
    return value


def size_in(lo: int, hi: int, zero: str | None = None) -> Callable[[str, str], int]:
    """A size (:mod:`arborcc.sizes`) from ``lo`` to ``hi`` bytes; ``0`` too when ``zero`` says what it means."""
    def read(raw: str, source: str) -> int:
        if zero is not None and re.fullmatch(r"\s*0+\s*", raw):
            return 0
        try:
            value = parse_size(raw, source)
        except InputError as e:
            raise InputError(e.problem + (f"; or 0 ({zero})" if zero else ""), source=source) from None
        if not lo <= value <= hi:
            raise InputError(f"{raw!r} is out of range: from {format_size(lo)} to {format_size(hi)} bytes"
                             + (f", or 0 ({zero})" if zero else ""), source=source)
        return value
    return read


def switch(raw: str, source: str) -> bool:
    text = raw.strip().lower()
    if text in TRUE:
        return True
    if text in FALSE:
        return False
    raise InputError(f"{raw!r} is not a switch: 1, true, yes, on or 0, false, no, off", source=source)


def integer_in(lo: int, hi: int, what: str = "") -> Callable[[str, str], int]:
    return lambda raw, source: whole_number(raw, source, lo, hi, what)


def port(raw: str, source: str) -> int:
    return whole_number(raw, source, 1, 65535, "a TCP port")


def host_name(raw: str, source: str) -> str:
    text = raw.strip()
    if len(text) > 255 or not text.isprintable() or any(c.isspace() for c in text):
        raise InputError(f"{raw!r} is not a host name (at most 255 printable characters, no spaces)", source=source)
    return text


def machine_label(raw: str, source: str) -> str:
    text = raw.strip()
    if len(text) > 255 or not text.isprintable():
        raise InputError(f"{raw!r} is not a machine name (at most 255 printable characters)", source=source)
    return text


def existing_path(raw: str, source: str) -> str:
    if not raw.isprintable():
        raise InputError(f"{raw!r} holds control characters", source=source)
    if not os.path.exists(raw):
        raise InputError(f"{raw}: no such file or directory", source=source)
    return raw


def sysfs_root(raw: str, source: str) -> str:
    """A sysfs ``devices/system`` tree the CPU layout is read from, read once here so that
    a tree that is not one is refused before any rank starts; ``""``: this machine's."""
    if not raw.strip():
        return ""
    if not raw.isprintable():
        raise InputError(f"{raw!r} holds control characters", source=source)
    from arborcc.topology.cpus import job_layout

    job_layout(raw, source)
    return raw


def job_secret(raw: str, source: str) -> str:
    text = raw.strip()  # never quoted back: it is a secret
    if len(text) > MAX_IDENTITY_CHARS or not text.isprintable() or any(c.isspace() for c in text):
        raise InputError(f"not a job secret: {len(text)} characters, at most {MAX_IDENTITY_CHARS} printable ones "
                         "without spaces", source=source)
    return text


def run_id(raw: str, source: str) -> str:
    text = raw.strip()
    if len(text) > MAX_IDENTITY_CHARS or not text.isprintable():
        raise InputError(f"{raw!r} is not a run id (at most {MAX_IDENTITY_CHARS} printable characters)", source=source)
    return text


def debug_value(raw: str, source: str) -> str:
    return raw.strip()  # any value turns debugging on (arborcc.debuglog)


# ------------------------------------------------------------------------------ the list
@dataclass(frozen=True)
class Variable:
    """One environment variable: its name, how it is read, what it accepts, its default
    and meaning."""

    name: str
    read: Callable[[str, str], Any]
    accepts: str
    default: str
    meaning: str
    option: str | None = None  #: the :class:`arborcc.runtime.Options` field it sets
    reader: str = "runtime"  #: who reads it: "runtime", "torch", "both"

    def value(self, raw: str) -> Any:
        return self.read(raw, "$" + self.name)


def option(name: str, read, accepts: str, default: str, meaning: str) -> Variable:
    return Variable("ARBORCC_" + name.upper(), read, accepts, default, meaning, option=name, reader="both")


SWITCH = "1, true, yes, on / 0, false, no, off"
ANY_RANK = integer_in(0, MAX_BYTES, "a rank, from 0")
RANK_COUNT = integer_in(1, MAX_BYTES, "a number of ranks, from 1")

#: every variable, in the order docs/runtime.md's table lists them
VARIABLES: tuple[Variable, ...] = (
    Variable("RANK", ANY_RANK, "0 to WORLD_SIZE - 1", "(required)",
             "this process's rank (torchrun and `arborcc run` set it)", reader="both"),
    Variable("WORLD_SIZE", RANK_COUNT, f"1 or more; the runtime's own communicator 1 to {MAX_RANKS}", "(required)",
             "ranks in the job", reader="both"),
    Variable("LOCAL_RANK", ANY_RANK, "0 to LOCAL_WORLD_SIZE - 1", "RANK", "this process's rank on its machine",
             reader="both"),
    Variable("LOCAL_WORLD_SIZE", RANK_COUNT, "1 to WORLD_SIZE", "WORLD_SIZE", "ranks on this machine", reader="both"),
    Variable("GROUP_RANK", ANY_RANK, "0 or more", "0",
             "torchrun's node rank, part of the machine name the torch backend groups ranks by", reader="torch"),
    Variable("MASTER_ADDR", host_name, "a host name or address; the runtime's own rendezvous: a loopback one",
             "127.0.0.1", "rank 0's address", reader="both"),
    Variable("MASTER_PORT", port, "1 to 65535; the runtime's own rendezvous: to 65534", str(DEFAULT_MASTER_PORT),
             "torch.distributed's store port; the runtime's rendezvous listens on the next one", reader="both"),
    Variable("ARBORCC_MASTER_PORT", port, "1 to 65535", "MASTER_PORT + 1", "the port of the runtime's rendezvous"),
    Variable("ARBORCC_JOB_SECRET", job_secret, f"up to {MAX_IDENTITY_CHARS} printable characters, no spaces",
             "(none; `arborcc run` sets a random one)",
             "the job's identity in the runtime's rendezvous, the same on every rank; a rank that cannot prove it is "
             "refused (see \"Faults\")"),
    Variable("TORCHELASTIC_RUN_ID", run_id, f"up to {MAX_IDENTITY_CHARS} printable characters", "none",
             "torchrun's run id: with TORCHELASTIC_RESTART_COUNT, the job's identity when ARBORCC_JOB_SECRET is unset "
             "(`none`: no identity)"),
    Variable("TORCHELASTIC_RESTART_COUNT", integer_in(0, 2**31 - 1, "torchrun's restarts so far"), "0 or more", "0",
             "torchrun's restarts so far: a restarted job's ranks never join the one before"),
    Variable("ARBORCC_PLAN", existing_path, "an existing file or directory", "(built-in default)",
             "which algorithm each call runs: an MSCCL XML or arborcc JSON file, a directory of them, or a "
             "directory `arborcc tune -o` wrote (read through its plan.json)", reader="both"),
    Variable("ARBORCC_HOST", machine_label, "up to 255 printable characters", "host name (`/node<GROUP_RANK>` added)",
             "the machine this rank runs on, as the torch backend groups ranks into hosts", reader="torch"),
    Variable("ARBORCC_TOPOLOGY", existing_path, "an existing topology file", "(detected)",
             "a topology replacing the detected one", reader="torch"),
    Variable("ARBORCC_DEBUG", debug_value, "any; `INFO` is a level", "(off)",
             "the runtime and the torch backend log what they decide (see \"Debug logging\"): `INFO` at INFO, any "
             "other value at DEBUG, which also turns on the command line's debug logging", reader="both"),
    option("timeout", seconds, f"seconds, more than 0, to {MAX_TIMEOUT:.0f} (a year)", "120",
           "a rank waits this long without progress before failing (naming the rank it waited for)"),
    option("slice_bytes", size_in(MIN_SLICE_BYTES, MAX_SLOT_BYTES), "a size, 64 to 1G", "1M",
           "pipeline slice per chunk and step (GC3's tile)"),
    option("cma_threshold", size_in(1, MAX_BYTES, "never"), "a size, or 0: never", "16K",
           "messages of programs that only copy this large are read from the sender's memory (cross-memory attach)"),
    option("reduce_cma_threshold", size_in(1, MAX_BYTES, "never"), "a size, or 0: never", "512K",
           "the same for programs that reduce"),
    option("workers", integer_in(-1, MAX_WORKERS, "threads per rank; -1 automatic, 0 one per thread block"),
           f"-1 to {MAX_WORKERS}", "-1",
           "threads per rank: 1 a scheduler on the calling thread, 0 one per thread block, -1 the scheduler, but a "
           "thread per thread block for calls of 2 MB or more with more ranks than CPUs"),
    option("spin_us", microseconds, f"0 to {MAX_WAIT_US:.0f}, or -1", "-1",
           "a waiting rank spins this long (-1: 500, or 2 with more ranks than CPUs) ..."),
    option("yield_us", microseconds, f"0 to {MAX_WAIT_US:.0f}, or -1", "-1",
           "... then yields its CPU this long (-1: 5000, or 100 with more ranks than CPUs), then sleeps"),
    option("slots", integer_in(1, MAX_SLOTS, "FIFO slots per connection"), f"1 to {MAX_SLOTS}", "8",
           "FIFO slots per connection"),
    option("slot_bytes", size_in(MIN_SLOT_BYTES, MAX_SLOT_BYTES), "a size, 4K to 1G", "4M",
           "bytes per FIFO slot (pages are touched only when used; ranks^2 x channels x slots x slot_bytes at "
           f"most {MAX_SEGMENT_BYTES >> 40} TiB)"),
    option("channels", integer_in(1, MAX_CHANNELS, "channels per pair of ranks"), f"1 to {MAX_CHANNELS}", "32",
           "channels per pair of ranks (an algorithm may use channels 0 to this - 1)"),
    option("tune", switch, SWITCH, "0", "adjust the slice per call shape online (Blink's MIAD)"),
    option("pin", switch, SWITCH, "1",
           "run rank r on the r-th CPU the job may use, modulo their count, a core's first thread before its "
           "second, socket by socket and L3 by L3 (a rank bound to one CPU stays)"),
    option("stream_bytes", size_in(1, MAX_BYTES, "never"), "a size, or 0: never", "4M",
           "collectives on shared arrays write outputs this large with streaming stores"),
    option("push", switch, SWITCH, "1",
           "an all-gather into shared arrays with streaming stores: each rank writes its block into every output"),
    option("staged_bytes", size_in(1, MAX_BYTES, "never"), "a size, or 0: never", "1M",
           "the built-in all-reduce (one-shot and owner), reduce-scatter and small all-gather up to this size run staged"),
    option("staged_slice_bytes", size_in(MIN_STAGED_SLICE_BYTES, MAX_SLOT_BYTES), "a size, 4K to 1G", "256K",
           "slice of a staged all-reduce (one staging-ring slot)"),
    option("sysfs_root", sysfs_root, "a directory with a sysfs `cpu` tree (as /sys/devices/system)",
           "(this machine's)",
           "where the CPU layout is read: ranks are pinned by it and all-reduces run hierarchically when the "
           "ranks span more than one socket or L3 (see \"Many ranks\"); for tests, a tree written by hand"),
)

BY_NAME: dict[str, Variable] = {v.name: v for v in VARIABLES}
#: Options field -> its variable
OPTION_VARIABLES: dict[str, Variable] = {v.option: v for v in VARIABLES if v.option}


# ------------------------------------------------------------------------------ settings
@dataclass(frozen=True)
class Settings:
    """The checked values of the variables that are set (None: unset or empty)."""

    rank: int | None = None
    world_size: int | None = None
    local_rank: int | None = None
    local_world_size: int | None = None
    group_rank: int | None = None
    master_addr: str | None = None
    master_port: int | None = None
    arborcc_master_port: int | None = None
    job_secret: str | None = None  #: ARBORCC_JOB_SECRET
    run_id: str | None = None  #: TORCHELASTIC_RUN_ID
    restart_count: int | None = None  #: TORCHELASTIC_RESTART_COUNT
    plan: str | None = None  #: ARBORCC_PLAN
    host: str | None = None  #: ARBORCC_HOST
    topology: str | None = None  #: ARBORCC_TOPOLOGY
    debug: str | None = None  #: ARBORCC_DEBUG
    options: dict[str, Any] = field(default_factory=dict)  #: Options field -> value, for the ARBORCC_<OPTION> set

    def local_launch(self) -> tuple[int, int, int, str, int]:
        """(rank, world size, local rank, address, port) of the runtime's own rendezvous
        (``Communicator.from_env``): RANK and WORLD_SIZE set, at most :data:`MAX_RANKS`
        ranks, MASTER_ADDR a loopback address, a port for arborcc."""
        for name, value in (("RANK", self.rank), ("WORLD_SIZE", self.world_size)):
            if value is None:
                raise InputError("not set (launch with `arborcc run -n N` or torchrun)", source=f"${name}")
        if self.world_size > MAX_RANKS:
            raise InputError(f"{self.world_size} ranks: the shared-memory runtime runs at most {MAX_RANKS} ranks "
                             "on one machine", source="$WORLD_SIZE")
        address = self.master_addr or "127.0.0.1"
        try:
            loopback = ipaddress.ip_address(socket.gethostbyname(address)).is_loopback
        except (OSError, ValueError, UnicodeError):
            loopback = False
        if not loopback:
            raise InputError(f"{address!r} is not a loopback address; the shared-memory runtime runs on one machine",
                             source="$MASTER_ADDR")
        if self.arborcc_master_port is not None:
            listen = self.arborcc_master_port
        else:
            base = DEFAULT_MASTER_PORT if self.master_port is None else self.master_port
            if base >= 65535:
                raise InputError(f"{base} leaves no port for the runtime's rendezvous (MASTER_PORT + 1); "
                                 "set ARBORCC_MASTER_PORT", source="$MASTER_PORT")
            listen = base + 1
        local = self.rank if self.local_rank is None else self.local_rank
        return self.rank, self.world_size, local, address, listen


FIELDS = {"RANK": "rank", "WORLD_SIZE": "world_size", "LOCAL_RANK": "local_rank",
          "LOCAL_WORLD_SIZE": "local_world_size", "GROUP_RANK": "group_rank", "MASTER_ADDR": "master_addr",
          "MASTER_PORT": "master_port", "ARBORCC_MASTER_PORT": "arborcc_master_port",
          "ARBORCC_JOB_SECRET": "job_secret", "TORCHELASTIC_RUN_ID": "run_id",
          "TORCHELASTIC_RESTART_COUNT": "restart_count", "ARBORCC_PLAN": "plan",
          "ARBORCC_HOST": "host", "ARBORCC_TOPOLOGY": "topology", "ARBORCC_DEBUG": "debug"}


def runtime_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Every variable of :data:`VARIABLES` that ``environ`` (default: this process's
    environment) sets, checked; InputError naming the first bad one."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    options: dict[str, Any] = {}
    for var in VARIABLES:
        raw = env.get(var.name)
        if raw is None or not raw.strip():
            continue
        value = var.value(raw)
        if var.option:
            options[var.option] = value
        else:
            values[FIELDS[var.name]] = value
    settings = Settings(**values, options=options)
    check_ranks(settings)
    return settings


def check_ranks(s: Settings) -> None:
    """The rank variables agree with each other."""
    if s.rank is not None and s.world_size is not None and s.rank >= s.world_size:
        raise InputError(f"{s.rank} is not a rank of a world of WORLD_SIZE={s.world_size} (0-{s.world_size - 1})",
                         source="$RANK")
    if s.local_world_size is not None and s.world_size is not None and s.local_world_size > s.world_size:
        raise InputError(f"{s.local_world_size} ranks on this machine, more than WORLD_SIZE={s.world_size}",
                         source="$LOCAL_WORLD_SIZE")
    local_world = s.local_world_size if s.local_world_size is not None else s.world_size
    if s.local_rank is not None and local_world is not None and s.local_rank >= local_world:
        limit_name = "LOCAL_WORLD_SIZE" if s.local_world_size is not None else "WORLD_SIZE"
        raise InputError(f"{s.local_rank} is not a rank of the {local_world} on this machine "
                         f"({limit_name}={local_world})", source="$LOCAL_RANK")


def check_option(name: str, value: Any) -> Any:
    """An option given in code (``Communicator.from_env(timeout=...)``) checked by its
    variable's rules; InputError naming the option."""
    var = OPTION_VARIABLES.get(name)
    if var is None:
        raise InputError(f"unknown runtime option (known: {', '.join(OPTION_VARIABLES)})", source=name)
    if isinstance(value, bool) and var.read is not switch or not isinstance(value, (int, float, str)):
        raise InputError(f"{value!r} is not a {'switch' if var.read is switch else 'number'}", source=name)
    return var.read(repr(value) if isinstance(value, float) else str(value), name)


def check_segment(options: Mapping[str, Any], world_size: int, given: set[str]) -> None:
    """The shared-memory segment of ``world_size`` ranks with these ``slots``,
    ``slot_bytes`` and ``channels`` fits :data:`MAX_SEGMENT_BYTES`; InputError naming
    the variables (or options) that made it too large."""
    total = world_size * world_size * options["channels"] * options["slots"] * options["slot_bytes"]
    if total > MAX_SEGMENT_BYTES:
        names = [n for n in ("slot_bytes", "slots", "channels") if n in given] or ["slot_bytes"]
        raise InputError(f"{world_size}^2 ranks x {options['channels']} channels x {options['slots']} slots x "
                         f"{format_size(options['slot_bytes'])} is a {total / 2**40:.0f} TiB segment, over "
                         f"{MAX_SEGMENT_BYTES >> 40} TiB", source=", ".join("$ARBORCC_" + n.upper() for n in names))


def variables_markdown() -> str:
    """The table of docs/runtime.md: every variable, who reads it, its default and meaning."""
    readers = {"runtime": "runtime", "torch": "torch backend", "both": "runtime, torch backend"}
    rows = ["| variable | read by | accepts | default | meaning |", "|---|---|---|---|---|"]
    for v in VARIABLES:
        rows.append(f"| `{v.name}` | {readers[v.reader]} | {v.accepts} | {v.default} | {v.meaning} |")
    return "\n".join(rows) + "\n"
