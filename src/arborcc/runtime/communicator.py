"""A communicator: the ranks of one machine, one shared-memory segment, and the plan that
says which algorithm each call runs.

::

    from arborcc.runtime import Communicator
    comm = Communicator.from_env()          # RANK, WORLD_SIZE, MASTER_ADDR/PORT (torchrun, arborcc run)
    comm.allreduce(x)                       # in place: x becomes the sum over ranks
    comm.allreduce(x, out, op="max")        # out of place
    comm.allgather(x, gathered)             # gathered has world_size * x.size elements
    g = comm.shared_array((comm.world_size, 1024))   # memory every rank maps (a collective call)
    comm.allgather(g[comm.rank], g)         # in place on it: the peers' blocks read with plain loads
    comm.close()

Arrays are numpy arrays or torch CPU tensors, contiguous, read and written where they
are (no copies). A call is in place when the receive buffer is omitted or is the same
memory (NCCL's rule: for all-gather the input is the rank's block of the output, for
reduce-scatter the output is the rank's block of the input). Every rank must make the
same calls in the same order with the same sizes: a call that differs (collective, type,
operator, count, root, in place or not) fails on every rank, naming the rank and the field
(:mod:`arborcc.runtime.call_descriptor`).

Repeated calls on the same numpy arrays (a training loop's buckets) skip the Python-side
work after the first: the communicator remembers the last all-reduce's, all-gather's,
reduce-scatter's and broadcast's arrays, operator or root and prepared data-plane calls
(and so keeps those arrays alive until the next call of that collective on others, or
:meth:`Communicator.close`).

The shared-memory segment ``/dev/shm/arborcc-<pid>-<random>`` exists only during
start-up: once every rank has mapped it, it is unlinked, so nothing is left behind
whatever way the processes end.
"""

from __future__ import annotations

import logging
import os
import secrets
import stat
import time
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from arborcc.debuglog import LOGGER, configure_debug_logging
from arborcc.errors import InputError
from arborcc.ir.aliasing import Mode
from arborcc.ir.collectives import ROOTED
from arborcc.ir.model import Algorithm
import arborcc.runtime.native as native
from arborcc.runtime.arrays import DTYPES, ArrayRef, array_ref, check_op
from arborcc.runtime.call_descriptor import call_descriptor
from arborcc.runtime.environment import MAX_RANKS, Settings, check_option, check_segment, runtime_settings
from arborcc.runtime.errors import CommunicationError
from arborcc.runtime.launch import available_cpus
from arborcc.runtime.lowering import LoweredRank, algorithm_call, call_mode, chunk_start, lower_rank
from arborcc.runtime.miad import MIADTuner
from arborcc.runtime.plan import (DEFAULT_STAGED_BYTES, Choice, Plan, RankGroups, call_bytes, fallback_algorithm,
                                  require_verified)
from arborcc.runtime.rendezvous import LaunchEnv, NameServer, fetch_name, job_identity
from arborcc.runtime.windows import SharedArrays
from arborcc.sizes import format_size

if TYPE_CHECKING:
    from arborcc.topology.cpus import CpuLayout

#: with more ranks than CPUs, calls of at least this many bytes run a thread per thread
#: block (by default): while one waits for a peer, another copies, where the one
#: scheduler thread gave its CPU away (4 ranks on 2 CPUs: 4 MB all-reduce 1.5 ms instead
#: of 4-6 ms with other programs on the CPUs; 1 MB 490 us instead of 380-440 us)
THREADS_BYTES = 2 << 20

#: what the runtime logs (``ARBORCC_DEBUG=INFO``: :mod:`arborcc.debuglog`)
log = logging.getLogger(f"{LOGGER}.runtime")

#: prefix of every arborcc shared-memory segment (under /dev/shm)
SEGMENT_PREFIX = "arborcc-"

#: collectives on shared arrays write outputs of at least this many bytes with streaming
#: (non-temporal) stores, which skip reading the destination into the cache first
#: (beyond a core's 2 MB L2 here; below, plain stores win: docs/runtime.md)
STREAM_BYTES = 4 << 20

#: a staged all-reduce moves its buffer through the staging ring in slices of this size
#: (docs/runtime.md "Staged all-reduce")
STAGED_SLICE_BYTES = 256 << 10


class WindowCall(NamedTuple):
    """A prepared collective on shared arrays: the send buffer's window and offset."""

    window: int
    offset: int
    nbytes: int  #: one rank's send buffer
    root: int  #: a broadcast's root; -1: all-gather
    threads: int  #: threads that copy the peers' blocks (``Options.workers``: 0 is one per peer)
    what: int  #: the call's descriptor (:mod:`arborcc.runtime.call_descriptor`) ...
    count: int  #: ... compared with the peers'


@dataclass
class Options:
    """Tuning knobs of the data plane (all have working defaults)."""

    timeout: float = 120.0  #: seconds a rank waits without progress before failing (names the rank that stopped)
    slice_bytes: int = 1 << 20  #: pipeline slice per chunk and step (GC3's tile)
    cma_threshold: int = 16 * 1024  #: messages this large are read from the sender's memory (one copy) ...
    reduce_cma_threshold: int = 512 * 1024  #: ... or this large in programs that reduce (smaller ones: slots)
    workers: int = -1  #: threads per rank: 1 = a scheduler on the calling thread, 0 = one per thread block,
    #: -1 = the scheduler, but one thread per thread block for calls of at least ``THREADS_BYTES`` on more ranks
    #: than CPUs
    spin_us: float = -1  #: a waiting rank spins this long (-1: 500, or 2 with more ranks than CPUs) ...
    yield_us: float = -1  #: ... then yields the CPU this long (-1: 5000, or 100 with more ranks than CPUs), then sleeps
    slots: int = 8  #: FIFO slots per connection
    slot_bytes: int = 4 << 20  #: bytes per FIFO slot (an upper bound on one message; pages are touched only when used)
    channels: int = 32  #: channels per pair of ranks (MSCCL's maximum)
    tune: bool = False  #: adjust slice_bytes per call shape online (Blink's MIAD)
    pin: bool = True  #: run rank r on the r-th CPU it may run on in the CPU layout's order, modulo their count
    #: (one it is bound to: stays)
    stream_bytes: int = STREAM_BYTES  #: collectives on shared arrays write outputs this large with streaming
    #: stores (0: never)
    push: bool = True  #: an all-gather with streaming stores into a shared array: each rank writes its block
    #: into every peer's output (its block read once) instead of reading the peers' blocks
    staged_bytes: int = DEFAULT_STAGED_BYTES  #: the built-in all-reduce (one-shot and owner), reduce-scatter
    #: and small all-gather up to this size run staged (0: never)
    staged_slice_bytes: int = STAGED_SLICE_BYTES  #: slice of a staged all-reduce (one staging ring slot)
    sysfs_root: str = ""  #: where the CPU layout is read (:func:`arborcc.topology.cpus.job_layout`; "": this
    #: machine's sysfs)

    def __post_init__(self) -> None:
        """Every value checked by its variable's rules (:func:`arborcc.runtime.environment.check_option`)."""
        for f in fields(self):
            setattr(self, f.name, check_option(f.name, getattr(self, f.name)))

    @classmethod
    def from_env(cls, env: dict | None = None, **overrides) -> "Options":
        """Defaults, then ``ARBORCC_TIMEOUT``, ``ARBORCC_SLICE_BYTES``, ..., then ``overrides``
        (every value checked: :mod:`arborcc.runtime.environment`)."""
        return cls.from_settings(runtime_settings(env), **overrides)

    @classmethod
    def from_settings(cls, settings: Settings, **overrides) -> "Options":
        """Defaults, then the ``ARBORCC_<OPTION>`` values of ``settings``, then ``overrides``."""
        given = {k: v for k, v in overrides.items() if v is not None}
        for name in given:
            check_option(name, given[name])  # an unknown name is refused by name
        return cls(**{**settings.options, **given})


def check_start(world_size: int, options: Options, source: str) -> None:
    """Refuse, before any rank waits for another, a communicator the data plane cannot
    make: more than :data:`MAX_RANKS` ranks, or a segment too large for the address space."""
    if not 1 <= world_size <= MAX_RANKS:
        raise InputError(f"{world_size} ranks: the shared-memory runtime runs 1 to {MAX_RANKS} ranks on one machine",
                         source=source)
    given = {f.name for f in fields(Options) if getattr(options, f.name) != f.default}
    check_segment({f.name: getattr(options, f.name) for f in fields(Options)}, world_size, given)


def pin_to_cpu(rank: int, layout: CpuLayout | None = None) -> bool:
    """Run this process on one CPU: rank ``r`` on the ``r``-th CPU it may run on in the
    order of ``layout`` (a core's first thread before its second, socket by socket, L3 by
    L3; CPU id order without one), modulo their count
    (:func:`arborcc.topology.cpus.pinned_cpu`; with more ranks than CPUs, ranks
    ``r`` and ``r + cpus`` share one). A process a launcher already bound to one CPU stays
    there; a job restricted to some CPUs (``taskset``, a cpuset) is pinned within them.
    Returns whether the process now runs on one CPU.

    Waiting ranks spin, then yield, then sleep; Linux's load balancer then tends to pack
    them onto one CPU, where every wait costs a context switch and the other CPUs idle
    (4 ranks on 2 CPUs: all four on one CPU in about half the runs, at twice the time
    per call). A fixed CPU per rank (as MPI launchers bind) keeps them spread."""
    from arborcc.topology.cpus import pinned_cpu

    cpus = os.sched_getaffinity(0)
    if len(cpus) > 1:
        os.sched_setaffinity(0, {pinned_cpu(rank, cpus, layout)})
    return True


#: a segment or shared-array file younger than this is never removed as stale: its
#: creator may live in another pid namespace (a container sharing /dev/shm), where its
#: pid looks gone from here; a live one exists only during a start-up or an allocation
#: (its name is unlinked once every rank has mapped it), which take milliseconds
STALE_AGE = 60.0


def process_start_time(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch, to the clock tick), or None
    if there is no such process or it is a zombie (its /proc/<pid>/stat)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/stat") as f:
            boot = next(float(line.split()[1]) for line in f if line.startswith("btime "))
    except (OSError, IndexError, StopIteration, ValueError):
        return None
    if fields[0] in ("Z", "X"):
        return None
    return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")


def remove_stale_segments(directory: str = "/dev/shm", min_age: float = STALE_AGE) -> list[str]:
    """Unlink arborcc segments and shared-array objects (``arborcc-<pid>-...``) left by a
    process killed during the moments they have a name (a start-up, an allocation);
    returns their names. A file is removed only when this user owns it (never another
    user's, even as root), it is older than ``min_age`` seconds, and its creator is gone:
    no process ``pid``, or one that started after the file was made (the pid was reused)."""
    removed = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    me, now = os.geteuid(), time.time()
    for entry in names:
        pid = entry[len(SEGMENT_PREFIX):].split("-", 1)[0]
        if not entry.startswith(SEGMENT_PREFIX) or not pid.isdigit():
            continue
        path = os.path.join(directory, entry)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode) or st.st_uid != me or now - st.st_mtime < min_age:
            continue
        started = process_start_time(int(pid))
        if started is not None and started <= st.st_mtime + 1.0:  # btime is whole seconds
            continue  # its creator (or an older process with its pid) still runs
        try:
            os.unlink(path)
        except OSError:
            continue
        removed.append(entry)
    return removed


class Communicator:
    """The ranks of one machine; see the module docstring. Not thread-safe: one thread
    of each rank makes the calls, in the same order on every rank."""

    def __init__(self, rank: int, world_size: int, segment: str, create: bool, options: Options,
                 plan: Plan | None = None):
        self.rank, self.world_size = rank, world_size
        self.options = options
        self.plan = plan or Plan()
        self._programs: dict[tuple[int, Mode], tuple[Algorithm, int, LoweredRank]] = {}
        self._selected: dict[tuple, Algorithm] = {}
        self._prepared: dict[tuple, tuple] = {}
        self._scratch = np.empty(0, np.uint8)
        self._tuners: dict[tuple, MIADTuner] = {}
        self._tuned_calls = 0
        #: per collective, its last call: (send, recv, op or root, plan size, prepared calls, send ref, recv ref)
        self._last_calls: dict[str, tuple] = {}
        self._closed = False
        self._logged: set[tuple] = set()  #: the (collective, size range) whose choice this rank has logged
        try:
            self._native = native.Communicator(segment, rank, create, world_size, options.channels, options.slots,
                                               options.slot_bytes)
        except native.NativeCommError as e:
            raise CommunicationError(f"rank {rank}: {e}") from None
        from arborcc.topology.cpus import job_layout

        self._cpus = available_cpus()  # the CPUs the job may run on (its affinity), before pinning
        self._layout = job_layout(options.sysfs_root, "sysfs_root")
        self._groups: RankGroups | None = None  #: the ranks by socket and L3 (:meth:`_learn_groups`)
        pinned = pin_to_cpu(rank, self._layout) if options.pin else len(os.sched_getaffinity(0)) == 1
        # the long spin and yield only where every rank has a CPU of its own: ranks that share
        # one (more ranks than CPUs, or unpinned ranks the scheduler packs together) would
        # spin away the CPU the rank they wait for needs (a 4 KB all-reduce of 2 ranks under
        # `taskset -c 0`: 1 ms instead of 15 us; docs/runtime.md "Many ranks")
        spare_cpus = world_size <= self._cpus and pinned
        if options.spin_us < 0:
            options.spin_us = 500.0 if spare_cpus else 2.0
        if options.yield_us < 0:
            options.yield_us = 5000.0 if spare_cpus else 100.0
        self._native.set_waiting(options.spin_us * 1e-6, options.yield_us * 1e-6)
        self._shared = SharedArrays(self._native, "/" + SEGMENT_PREFIX, segment.rsplit("-", 1)[-1], options.timeout)

    # -- construction ----------------------------------------------------------------

    @classmethod
    def from_env(cls, plan: Plan | None = None, env: dict | None = None, **options) -> "Communicator":
        """Join the communicator of the ranks launched by ``arborcc run`` or torchrun; the
        plan, when None, is ``ARBORCC_PLAN``'s (:meth:`Plan.load`). Every variable is checked
        first (:mod:`arborcc.runtime.environment`)."""
        settings = runtime_settings(env)
        where = LaunchEnv(*settings.local_launch(),
                          identity=job_identity(settings.job_secret, settings.run_id, settings.restart_count))
        opts = Options.from_settings(settings, **options)
        configure_debug_logging(env)
        return cls.create(where, plan if plan is not None else Plan.load(settings.plan), opts)

    @classmethod
    def create(cls, where: LaunchEnv, plan: Plan | None = None, options: Options | None = None) -> "Communicator":
        """Rendezvous at ``where`` (:mod:`arborcc.runtime.rendezvous`: only ranks that
        prove ``where.identity`` are admitted; rank 0 creates the segment, the others attach)."""
        options = options or Options()
        check_start(where.world_size, options, "$WORLD_SIZE")
        name = None
        try:
            if where.rank == 0:
                server = NameServer(where, options.timeout)
                server.accept()
                try:
                    remove_stale_segments()
                    name = f"/{SEGMENT_PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
                    comm = cls(0, where.world_size, name, True, options, plan)
                except BaseException as e:
                    server.give_up(str(e).removeprefix("rank 0: ") or type(e).__name__)
                    raise
                server.send(name)
            else:
                name = fetch_name(where, options.timeout)
                comm = cls(where.rank, where.world_size, name, False, options, plan)
            comm._call(comm._native.wait_attached, options.timeout)
        finally:
            if name is not None:
                native.unlink(name)  # every rank has mapped it (or start-up failed): remove the name
        comm._learn_groups()
        comm.log_start(name)
        return comm

    @classmethod
    def from_store(cls, store, rank: int, world_size: int, plan: Plan | None = None, key: str = "arborcc/segment",
                   **options) -> "Communicator":
        """Join through a key-value store (``set(key, bytes)``, and ``get(key)`` waiting for
        the key, as torch.distributed's ``Store``): rank 0 publishes the segment's name. The
        plan, when None, is ``ARBORCC_PLAN``'s; every variable is checked first.

        This is how a torch.distributed backend joins: its creator receives the store."""
        settings = runtime_settings()
        opts = Options.from_settings(settings, **options)
        check_start(world_size, opts, "world_size")
        plan = plan if plan is not None else Plan.load(settings.plan)
        configure_debug_logging()
        name = None
        try:
            if rank == 0:
                remove_stale_segments()
                name = f"/{SEGMENT_PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
                comm = cls(0, world_size, name, True, opts, plan)
                store.set(key, name.encode())
            else:
                raw = store.get(key)
                name = raw.decode() if isinstance(raw, (bytes, bytearray)) else str(raw)
                comm = cls(rank, world_size, name, False, opts, plan)
            comm._call(comm._native.wait_attached, opts.timeout)
        finally:
            if name is not None:
                native.unlink(name)
        comm._learn_groups()
        comm.log_start(name)
        return comm

    # -- properties --------------------------------------------------------------------

    @property
    def cross_memory_attach(self) -> bool:
        """True when large messages are read straight from the sender's memory."""
        return self._native.cma

    @property
    def staged_calls(self) -> int:
        """All-reduces this rank has run staged (through the staging ring) so far."""
        return self._native.staged_calls

    @property
    def staged_shared_calls(self) -> int:
        """Staged all-reduces whose input lay in a shared array (:meth:`shared_array`): the
        peers read it from there, this rank copied nothing into its staging ring."""
        return self._native.staged_shared_calls

    # -- shared arrays -----------------------------------------------------------------

    @property
    def shared_calls(self) -> int:
        """Collectives this rank has run on shared arrays (:meth:`shared_array`) so far."""
        return self._native.window_calls

    def shared_array(self, shape, dtype="float32") -> np.ndarray:
        """A zero-filled numpy array in memory this communicator owns and every rank maps
        (NCCL's registered buffers, torch's symmetric memory; see
        :mod:`arborcc.runtime.windows`). Collective: every rank allocates the same shapes
        and types in the same order. An all-gather or broadcast whose send buffer lies in
        one (in place: the receive buffer) reads the peers' blocks straight from their
        arrays, with no system call; every rank must then pass shared arrays to that call.
        The output may be any array."""
        dt = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        return self._shared_bytes(count * dt.itemsize).view(dt).reshape(shape)

    def shared_tensor(self, shape, dtype=None):
        """:meth:`shared_array` as a torch CPU tensor (no copy; ``dtype`` a torch dtype,
        default float32; bfloat16 too)."""
        import torch

        dtype = torch.float32 if dtype is None else dtype
        count = int(np.prod(shape, dtype=np.int64))
        raw = self._shared_bytes(count * torch.empty(0, dtype=dtype).element_size())
        return torch.from_numpy(raw).view(dtype).reshape(shape)

    def free_shared(self, array) -> None:
        """Stop using a shared array (collective): the peers' mappings of it are released;
        its memory returns once every rank has freed it and dropped its arrays on it."""
        ref = array_ref(array, "array")
        if not self._shared.free(ref.address):
            raise InputError("is not a shared array of this communicator", source="array")
        self._last_calls = {}

    def _shared_bytes(self, nbytes: int) -> np.ndarray:
        if nbytes < 1:
            raise InputError(f"a shared array holds at least one byte, got {nbytes}", source="shape")
        return self._call(self._shared.allocate, nbytes)

    def _window_call(self, collective: str, s: ArrayRef, r: ArrayRef, count: int, mode: Mode,
                     root: int) -> WindowCall | None:
        """The call on shared arrays, if its send buffer lies in one (all-gather and broadcast)."""
        if not self._shared.windows or collective not in ("allgather", "broadcast"):
            return None
        nbytes = count * DTYPES[s.dtype][1]
        address = s.address if s.count == count else r.address + self.rank * nbytes  # in place: the rank's block
        found = self._shared.find(address, nbytes)
        if found is None:
            return None
        if mode is Mode.OUTOFPLACE and address < r.address + r.nbytes and r.address < address + nbytes:
            raise InputError("overlaps the send buffer without being in place", source="recv")
        workers = self._workers(collective, count, DTYPES[s.dtype][1])
        if log.isEnabledFor(logging.INFO) and (collective, "shared arrays") not in self._logged:
            self._logged.add((collective, "shared arrays"))
            log.info("%s %s: on shared arrays, any size: no algorithm, the peers' blocks read with plain loads "
                     "(streaming stores from %s, push %s, %s)", self._who(), collective,
                     format_size(self.options.stream_bytes) if self.options.stream_bytes else "never",
                     "on" if self.options.push else "off",
                     "a thread per peer" if workers == 0 else f"{workers} thread(s)")
        return WindowCall(found[0], found[1], nbytes, root if collective == "broadcast" else -1,
                          self.world_size - 1 if workers == 0 else workers,
                          *call_descriptor(collective, s.dtype, "sum", count, root, "on shared arrays"))

    # -- collectives -------------------------------------------------------------------

    def allreduce(self, send, recv=None, op: str = "sum"):
        """``recv`` (or ``send`` in place) = the reduction of every rank's ``send``."""
        if not self._repeated("allreduce", send, recv, op):
            s = array_ref(send, "send")
            r = s if recv is None else array_ref(recv, "recv")
            self._same_size(s, r, s.count, "recv")
            prepared = self._collective("allreduce", s, r, s.count, op, self._mode("allreduce", s, r, s.count))
            self._remember("allreduce", send, recv, op, prepared, s, r)
        return recv if recv is not None else send

    def inplace_allreduce(self, count: int, dtype: str, op: str = "sum"):
        """A function ``run(address)``: the in-place all-reduce of the ``count`` elements of
        ``dtype`` at ``address``, as :meth:`allreduce` runs it (the plan's algorithm as
        selected now, the tail, avg), prepared once. It skips :meth:`allreduce`'s per-call
        checks: the caller guarantees a contiguous, writable buffer of that size and type
        (a torch.distributed backend checks the tensor itself). None while slice tuning is
        on (each call then decides its slice) or when ``count`` is 0."""
        check_op(op, dtype)
        if self.options.tune or count <= 0:
            return None
        algo = self._choose("allreduce", Mode.INPLACE, count, DTYPES[dtype][1], 0)
        scratch = []  # the call's own scratch memory, so that its address is fixed
        calls = []
        for handle, uses_in, uses_out, scratch_bytes, divide in self._prepare(algo, Mode.INPLACE, count, dtype,
                                                                              op, 0, self.options.slice_bytes):
            if scratch_bytes:
                scratch.append(np.empty(scratch_bytes, np.uint8))
            calls.append((handle, uses_in, uses_out, scratch[-1].ctypes.data if scratch_bytes else 0,
                          None if divide is None else divide[1:]))
        code, ranks = DTYPES[dtype][0], float(self.world_size)

        def run(address: int) -> None:
            if self._closed:
                raise CommunicationError(f"rank {self.rank}: the communicator is closed")
            try:
                for handle, uses_in, uses_out, scratch_address, divide in calls:
                    if divide is None:
                        self._native.run_prepared(handle, address if uses_in else 0, address if uses_out else 0,
                                                  scratch_address)
                    else:  # avg: divide the result (in place: the one buffer) by the rank count
                        native.divide(address + divide[0], divide[1], code, ranks)
            except native.NativeCommError as e:
                raise CommunicationError(str(e)) from None
        run.scratch = scratch  # kept alive with the function
        return run

    def allgather(self, send, recv):
        """Block ``i`` of ``recv`` (``world_size`` blocks of ``send``'s size) = rank i's ``send``."""
        if send is not None and self._repeated("allgather", send, recv, None):
            return recv
        r = array_ref(recv, "recv")
        s = array_ref(send, "send") if send is not None else None
        count = r.count // self.world_size if s is None else s.count
        self._same_size(s or r, r, count * self.world_size, "recv")
        mode = Mode.INPLACE if s is None else self._mode("allgather", s, r, count)
        prepared = self._collective("allgather", s if s is not None else r, r, count, "sum", mode)
        if s is not None:
            self._remember("allgather", send, recv, None, prepared, s, r)
        return recv

    def reduce_scatter(self, send, recv=None, op: str = "sum"):
        """``recv`` = block ``rank`` of the reduction of every rank's ``send``."""
        if recv is not None and self._repeated("reducescatter", send, recv, op):
            return recv
        s = array_ref(send, "send")
        count = s.count // self.world_size
        if count * self.world_size != s.count:
            raise InputError(f"{s.count} elements do not split into {self.world_size} blocks", source="send")
        r = array_ref(recv, "recv") if recv is not None else None
        if r is not None:
            self._same_size(s, r, count, "recv")
        mode = Mode.INPLACE if r is None else self._mode("reducescatter", s, r, count)
        prepared = self._collective("reducescatter", s, r if r is not None else s, count, op, mode)
        if r is not None:
            self._remember("reducescatter", send, recv, op, prepared, s, r)
        if recv is None:
            return send[self.rank * count:(self.rank + 1) * count]
        return recv

    def alltoall(self, send, recv=None):
        """Block ``j`` of rank i's ``send`` ends in block ``i`` of rank j's ``recv``."""
        s = array_ref(send, "send")
        r = s if recv is None else array_ref(recv, "recv")
        self._same_size(s, r, s.count, "recv")
        count = s.count // self.world_size
        if count * self.world_size != s.count:
            raise InputError(f"{s.count} elements do not split into {self.world_size} blocks", source="send")
        self._collective("alltoall", s, r, count, "sum", self._mode("alltoall", s, r, count))
        return recv if recv is not None else send

    def broadcast(self, send, recv=None, root: int = 0):
        """``recv`` (or ``send`` in place) on every rank = ``send`` of ``root``."""
        if not self._repeated("broadcast", send, recv, root):
            s = array_ref(send, "send")
            r = s if recv is None else array_ref(recv, "recv")
            self._same_size(s, r, s.count, "recv")
            prepared = self._collective("broadcast", s, r, s.count, "sum", self._mode("broadcast", s, r, s.count, root),
                                        root)
            self._remember("broadcast", send, recv, root, prepared, s, r)
        return recv if recv is not None else send

    def reduce(self, send, recv=None, root: int = 0, op: str = "sum"):
        """``recv`` of ``root`` = the reduction of every rank's ``send``."""
        s = array_ref(send, "send")
        r = s if recv is None else array_ref(recv, "recv")
        self._same_size(s, r, s.count, "recv")
        self._collective("reduce", s, r, s.count, op, self._mode("reduce", s, r, s.count, root), root)
        return recv if recv is not None else send

    def run_algorithm(self, algo: Algorithm, send, recv=None, op: str = "sum", count: int | None = None):
        """Run ``algo`` (verified first) on this call, whatever the plan says.

        ``count`` is the elements per rank block (NCCL's count); by default it comes from
        ``send`` (all-gather, gather: its size; otherwise its size over the blocks; a
        ``custom`` collective's buffers hold the chunks its rank programs declare, which
        may be none: :func:`arborcc.runtime.lowering.custom_call_check`).
        """
        if algo.num_ranks != self.world_size:
            raise InputError(f"the algorithm is for {algo.num_ranks} ranks, the communicator has {self.world_size}",
                             source=algo.name)
        require_verified(algo)
        if log.isEnabledFor(logging.INFO) and (algo.collective, "caller", algo.name) not in self._logged:
            self._logged.add((algo.collective, "caller", algo.name))
            log.info("%s %s: %s (protocol %s), chosen by the caller (run_algorithm), whatever the plan says",
                     self._who(), algo.collective, algo.name, algo.protocol.value)
        s = array_ref(send, "send")
        r = s if recv is None else array_ref(recv, "recv")
        if s.dtype != r.dtype:
            raise InputError(f"holds {r.dtype}, the send buffer {s.dtype}", source="recv")
        count, mode = algorithm_call(algo, self.rank, s.count, DTYPES[s.dtype][1], s.address, r.address, count,
                                     recv_elements=r.count)
        self._execute(algo, mode, s, r, count, op, algo.effective_root)
        return recv if recv is not None else send

    def barrier(self) -> None:
        self._call(self._native.barrier, self.options.timeout)

    def close(self) -> None:
        """Release the segment (other ranks are unaffected; the communicator is then unusable)."""
        if not self._closed:
            self._closed = True
            self._native = None
            self._shared.close()  # the data plane goes with its last reference: the peers' arrays are unmapped
            self._last_calls = {}

    def abort(self, reason: str) -> None:
        """Make every rank's current and later calls fail with ``reason``."""
        self._native.abort(reason)

    def __enter__(self) -> "Communicator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- internals ---------------------------------------------------------------------

    def _mode(self, collective: str, s: ArrayRef, r: ArrayRef, count: int, root: int = 0) -> Mode:
        return call_mode(collective, self.world_size, self.rank, root, s.address, r.address,
                         count * DTYPES[s.dtype][1])

    def _repeated(self, collective: str, send, recv, extra) -> bool:
        """Run the call at once if it repeats the collective's last call on the same numpy
        arrays (a training loop's buckets): no argument checks, no plan look-up."""
        last = self._last_calls.get(collective)
        if last is None or last[0] is not send or last[1] is not recv or last[2] != extra \
                or last[3] != len(self.plan.entries) or self._closed:
            return False
        self._run_prepared(last[4], last[5], last[6])
        return True

    def _remember(self, collective: str, send, recv, extra, prepared, s: ArrayRef, r: ArrayRef) -> None:
        if prepared is not None and type(send) is np.ndarray and (recv is None or type(recv) is np.ndarray):
            # a numpy array keeps its memory while referenced (resizing it needs no other reference)
            self._last_calls[collective] = (send, recv, extra, len(self.plan.entries), prepared, s, r)

    def _learn_groups(self) -> None:
        """The ranks by socket and L3, for the plan (:func:`arborcc.runtime.plan.layout_choice`):
        every rank's CPU (-1 where it is not bound to one) all-gathered once, on a machine
        of more than one socket or L3 only (every rank reads the same layout, so all of
        them gather or none), since a launcher may have bound the ranks otherwise than
        :func:`pin_to_cpu` would."""
        from arborcc.topology.cpus import rank_groups

        layout = self._layout
        if self.world_size < 2 or layout is None or len(layout.domains) < 2:
            return
        cpus = os.sched_getaffinity(0)
        mine = np.array([min(cpus) if len(cpus) == 1 else -1], np.int64)
        every = np.empty(self.world_size, np.int64)
        self.allgather(mine, every)
        self._groups = rank_groups(layout, every.tolist())

    @property
    def rank_groups(self) -> RankGroups | None:
        """The ranks by socket and L3 the plan uses (None: one group, or not known)."""
        return self._groups

    def _same_size(self, a: ArrayRef, b: ArrayRef, count: int, what: str) -> None:
        if b.count != count:
            raise InputError(f"has {b.count} elements, expected {count}", source=what)
        if a.dtype != b.dtype:
            raise InputError(f"holds {b.dtype}, the send buffer {a.dtype}", source=what)

    def _call(self, fn, *args):
        if self._closed:
            raise CommunicationError(f"rank {self.rank}: the communicator is closed")
        try:
            return fn(*args)
        except native.NativeCommError as e:
            raise CommunicationError(str(e)) from None

    def _collective(self, collective: str, s: ArrayRef, r: ArrayRef, count: int, op: str, mode: Mode,
                    root: int = 0) -> list[tuple] | None:
        if collective in ROOTED and not 0 <= root < self.world_size:
            raise InputError(f"root {root} is not a rank (0-{self.world_size - 1})", source="root")
        window = self._window_call(collective, s, r, count, mode, root) if count else None
        if window is not None:
            self._run_prepared(window, s, r)
            return window
        key = (collective, mode, count, s.dtype, root, len(self.plan.entries))
        algo = self._selected.get(key)
        if algo is None:
            algo = self._selected[key] = self._choose(collective, mode, count, DTYPES[s.dtype][1], root)
        return self._execute(algo, mode, s, r, count, op, root)

    def _choose(self, collective: str, mode: Mode, count: int, itemsize: int, root: int) -> Algorithm:
        """The plan's algorithm for a call; logged once per (collective, size range) when
        the "arborcc.runtime" logger is at INFO."""
        choice = self.plan.choose(collective, self.world_size, mode, count, itemsize, root, self.options.staged_bytes,
                                  self._groups)
        if log.isEnabledFor(logging.INFO):
            bucket = (collective, choice.entry, choice.low, choice.high)
            if bucket not in self._logged:
                self._logged.add(bucket)
                log.info("%s %s: %s", self._who(), collective, self._explain(choice, collective, count, itemsize))
        return choice.algorithm

    def _who(self) -> str:
        return f"rank {self.rank}/{self.world_size}"

    def _explain(self, choice: Choice, collective: str, count: int, itemsize: int) -> str:
        """A plan decision in words: sizes, algorithm, protocol, why, route, slice."""
        o, algo = self.options, choice.algorithm
        sizes = f"{format_size(choice.low)}-{format_size(choice.high)}" if choice.high is not None \
            else f"{format_size(choice.low)} and up"
        size = call_bytes(collective, self.world_size, count, itemsize)
        kind = self.plan.staged_kind(algo, size, o.staged_bytes)
        if kind in ("oneshot", "allgather"):
            route = f"staged (the staging ring, one slot per call up to {format_size(o.staged_slice_bytes)})"
        elif kind is not None:
            route = f"staged (the staging ring, slice {format_size(o.staged_slice_bytes)})"
        else:
            cma = (f"cross-memory attach from {format_size(o.cma_threshold)} (copies) / "
                   f"{format_size(o.reduce_cma_threshold)} (reductions)" if self.cross_memory_attach
                   else "no cross-memory attach")
            threads = self._workers(collective, count, itemsize)
            route = (f"not staged: steps through the FIFOs ({o.slots} slots of {format_size(o.slot_bytes)}), {cma}, "
                     f"slice {'tuned online (MIAD)' if o.tune else format_size(o.slice_bytes)}, "
                     f"{'a thread per thread block' if threads == 0 else f'{threads} thread(s)'}")
        return (f"bytes {sizes}: {algo.name} (protocol {algo.protocol.value}); {choice.reason}; {route}")

    def log_start(self, segment: str | None) -> None:
        """Log (at INFO) who this rank is, its segment, cross-memory attach, the plan and
        every option in force."""
        if not log.isEnabledFor(logging.INFO):
            return
        o = self.options
        shown = []
        for f in fields(Options):
            value = getattr(o, f.name)
            if isinstance(value, bool):
                shown.append(f"{f.name}={int(value)}")
            elif f.name.endswith(("bytes", "threshold")) and value:
                shown.append(f"{f.name}={format_size(value)}")
            else:
                shown.append(f"{f.name}={value:g}" if isinstance(value, float) else f"{f.name}={value}")
        log.info("%s: communicator on /dev/shm%s (removed once every rank mapped it), cross-memory attach %s, "
                 "plan: %s; options: %s", self._who(), segment, "on" if self.cross_memory_attach else "off",
                 self.plan.describe(), " ".join(shown))

    def _program(self, algo: Algorithm, mode: Mode) -> tuple[int, LoweredRank]:
        key = (id(algo), mode)
        hit = self._programs.get(key)
        if hit is None or hit[0] is not algo:
            lowered = lower_rank(algo, self.rank, mode)
            # whether any rank's steps reduce: every rank must cut a call into the same slices
            reduces = any(step.op.reduces for program in algo.ranks for tb in program.threadblocks
                          for step in tb.steps)
            pid = self._call(self._native.register_program, lowered.threadblocks, lowered.steps, not reduces)
            hit = (algo, pid, lowered)
            self._programs[key] = hit
        return hit[1], hit[2]

    def _scratch_address(self, nbytes: int) -> int:
        if self._scratch.size < nbytes:
            self._scratch = np.empty(nbytes, np.uint8)
        return self._scratch.ctypes.data

    def _execute(self, algo: Algorithm, mode: Mode, s: ArrayRef, r: ArrayRef, count: int, op: str,
                 root: int) -> list[tuple] | None:
        """Run the call; returns its prepared data-plane calls when a repeat may reuse them
        (None: nothing ran, or the slice size is being tuned)."""
        if count == 0:
            return None
        slice_bytes, tuner, t0 = self._slice_for(algo.collective, s.dtype, count)
        key = (id(algo), mode, count, s.dtype, op, root, slice_bytes)
        hit = self._prepared.get(key)
        if hit is None or hit[0] is not algo:
            hit = self._prepared[key] = (algo, self._prepare(algo, mode, count, s.dtype, op, root, slice_bytes))
        self._run_prepared(hit[1], s, r)
        if tuner is not None:
            self._tuned(tuner, s.nbytes, time.perf_counter() - t0)
            return None
        return hit[1]

    def _run_prepared(self, prepared: list[tuple] | WindowCall, s: ArrayRef, r: ArrayRef) -> None:
        run = self._native.run_prepared
        try:
            if type(prepared) is WindowCall:
                self._native.window_collective(prepared.window, prepared.offset, prepared.nbytes, r.address,
                                               prepared.root, self.options.stream_bytes, prepared.threads,
                                               self.options.timeout, self.options.push, prepared.what,
                                               prepared.count)
                return
            for handle, uses_in, uses_out, scratch_bytes, divide in prepared:
                if divide is None:
                    run(handle, s.address if uses_in else 0, r.address if uses_out else 0,
                        self._scratch_address(scratch_bytes) if scratch_bytes else 0)
                else:  # the last step of avg: divide the result by the rank count
                    buf, offset, n = divide
                    native.divide((s if buf == 0 else r).address + offset, n, s.dtype_code, float(self.world_size))
        except native.NativeCommError as e:
            raise CommunicationError(str(e)) from None

    def _prepare(self, algo: Algorithm, mode: Mode, count: int, dtype: str, op: str, root: int,
                 slice_bytes: int) -> list[tuple]:
        """The data-plane calls of a call shape: the algorithm on the chunks, the tail, avg."""
        op_code = check_op(op, dtype)
        esize = DTYPES[dtype][1]
        kind = self.plan.staged_kind(algo, call_bytes(algo.collective, self.world_size, count, esize),
                                     self.options.staged_bytes)
        if kind is not None:
            scatter = kind == "reducescatter"
            handle = self._call(self._native.prepare_staged, count, DTYPES[dtype][0], op_code,
                                self.options.staged_slice_bytes, self.options.timeout, native.STAGED_KINDS[kind],
                                *call_descriptor(algo.collective, dtype, op, count, root, ""))
            if handle >= 0:  # -1: no room for a staging ring (or a one-shot call larger than its slot)
                in_input = scatter and mode is Mode.INPLACE  # the result: the rank's block of the input
                divide = (0, self.rank * count * esize, count) if in_input else (1, 0, count)
                return [(handle, True, not in_input, 0, None)] + ([(0, 0, 0, 0, divide)] if op == "avg" else [])
        pid, low = self._program(algo, mode)
        chunk = count // low.chunks_per_block
        tail = count - low.chunks_per_block * chunk
        if tail and algo.collective == "custom":
            raise InputError(f"{count} elements do not divide into the {low.chunks_per_block} chunks of a custom "
                             f"collective", source=algo.name)
        steps = []
        desc = call_descriptor(algo.collective, dtype, op, count, root, mode)
        parts = [(pid, low, chunk, 0)] if chunk else []
        if tail:
            fpid, flow = self._program(fallback_algorithm(algo.collective, self.world_size, mode, root), mode)
            parts.append((fpid, flow, tail, low.chunks_per_block * chunk))
        for p, lw, c, base in parts:
            per = lw.chunks_per_block
            handle = self._call(self._native.prepare, p, [per, per, 0], [base, base, 0], count, c, DTYPES[dtype][0],
                                op_code, max(1, slice_bytes // esize), self.options.timeout,
                                self.options.cma_threshold, self.options.reduce_cma_threshold,
                                self._workers(algo.collective, count, esize), *desc)
            steps.append((handle, bool(lw.input_chunks), bool(lw.output_chunks), lw.scratch_chunks * c * esize,
                          None))
        if op == "avg" and low.result_checked:  # divide the rank's result (where the layout puts it)
            buffer, first = low.result
            steps.append((0, 0, 0, 0, (buffer, chunk_start(first, low.chunks_per_block, count) * esize, count)))
        return steps

    def _workers(self, collective: str, count: int, itemsize: int) -> int:
        """Threads per rank for a call (``Options.workers``, -1 resolved by the call's size)."""
        if self.options.workers >= 0:
            return self.options.workers
        oversubscribed = self.world_size > self._cpus
        return 0 if oversubscribed and call_bytes(collective, self.world_size, count, itemsize) >= THREADS_BYTES else 1

    # -- online slice tuning (Blink's MIAD) --------------------------------------------

    def _slice_for(self, collective: str, dtype: str, count: int):
        if not self.options.tune:
            return self.options.slice_bytes, None, 0.0
        key = (collective, dtype, count)
        tuner = self._tuners.get(key)
        if tuner is None:
            tuner = self._tuners[key] = MIADTuner(initial=min(self.options.slice_bytes, 16 * 1024),
                                                  maximum=self.options.slot_bytes)
        self._tuned_calls += 1
        if self.rank == 0:
            self._call(self._native.publish, self._tuned_calls, tuner.value)
            value = tuner.value
        else:  # everyone must slice alike: rank 0 decides
            value = self._call(self._native.wait_published, self._tuned_calls, self.options.timeout)
        return value, tuner, time.perf_counter()

    def _tuned(self, tuner: MIADTuner, nbytes: int, seconds: float) -> None:
        if self.rank == 0 and not tuner.converged:
            tuner.observe(nbytes / max(seconds, 1e-9))

    def tuner(self, collective: str, dtype: str, count: int) -> MIADTuner | None:
        """The slice tuner of a call shape (rank 0's decides), if tuning is on."""
        return self._tuners.get((collective, dtype, count))
