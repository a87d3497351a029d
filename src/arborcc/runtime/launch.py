"""Launching local ranks: processes with the environment torchrun gives its workers.

:func:`run_script` starts ``python script.py`` once per rank (``arborcc run``);
:func:`run_ranks` runs a Python function on every rank (forked processes; for tests,
benchmarks and the demo). Both have a hard timeout after which every rank is killed,
and both end every rank they started, whatever happens.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import traceback
from typing import Any, Callable

from arborcc.errors import InputError
from arborcc.limits import limit
from arborcc.runtime.errors import CommunicationError


def check_timeout(seconds: float | None, source: str = "--timeout") -> None:
    """Refuse a timeout that is not a finite number of seconds above 0 (None: no timeout)."""
    if seconds is not None and not (math.isfinite(seconds) and seconds > 0):
        raise InputError(f"a timeout is a finite number of seconds above 0, got {seconds:g}", source=source)


def available_cpus() -> int:
    """The CPU cores this process (and the ranks it starts) may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity on this platform
        return os.cpu_count() or 1


def oversubscription(world_size: int) -> str | None:
    """A warning when ``world_size`` ranks outnumber the CPU cores available to the job:
    the ranks then take turns on the cores, and timings measure the scheduler."""
    cpus = available_cpus()
    if world_size <= cpus:
        return None
    return (f"{world_size} ranks on {cpus} CPU core{'s' if cpus > 1 else ''} available to this job: ranks take "
            f"turns on the cores, so timings measure the scheduler")


#: where the launcher looks for its ports: below the kernel's ephemeral range, so that no
#: other process's outgoing connection (or bind to port 0) can take a port between the
#: moment it is found free and the moment rank 0 listens on it
LAUNCH_PORTS = range(20000, 32767)


def ephemeral_ports() -> range:
    """The kernel's ephemeral port range (``ip_local_port_range``; Linux's default if unreadable)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split())
        return range(lo, hi + 1)
    except (OSError, ValueError):
        return range(32768, 61000)


def free_port_pair() -> int:
    """A loopback port ``p`` with ``p + 1`` free as well (MASTER_PORT and arborcc's), outside
    the ephemeral range where possible (:data:`LAUNCH_PORTS`)."""
    import random

    ephemeral = ephemeral_ports()
    candidates = [p for p in random.Random(os.getpid() ^ time.time_ns()).sample(LAUNCH_PORTS, 200)
                  if p not in ephemeral and p + 1 not in ephemeral]
    for port in candidates:
        if all(port_is_free(p) for p in (port, port + 1)):
            return port
    for _ in range(100):  # the ephemeral range covers ours: any free pair
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
        if port < 65535 and all(port_is_free(p) for p in (port, port + 1)):
            return port
    raise CommunicationError("no free pair of loopback ports")


def port_is_free(port: int) -> bool:
    """Whether a listening socket can be bound to ``port`` on loopback now."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def rank_env(rank: int, world_size: int, port: int, base: dict | None = None, secret: str | None = None) -> dict:
    """torchrun's variables for ``rank`` (on top of ``base``, default this environment),
    and the launch's job secret (``ARBORCC_JOB_SECRET``: :func:`job_secret`; None: none,
    not even one ``base`` has)."""
    env = dict(os.environ if base is None else base)
    env.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world_size),
               GROUP_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    env.pop("ARBORCC_MASTER_PORT", None)
    env.pop("ARBORCC_JOB_SECRET", None)
    if secret is not None:
        env["ARBORCC_JOB_SECRET"] = secret
    return env


def job_secret() -> str:
    """A new random secret for one launch: its ranks prove it in the rendezvous
    (:mod:`arborcc.runtime.rendezvous`), so no other job's rank joins them."""
    return secrets.token_hex(16)



def ranks_environment(world_size: int) -> dict:
    """The environment every rank of a local launch reads (rank 0's, this process's
    variables with the launcher's), for checking it once before any rank starts."""
    from arborcc.runtime.environment import DEFAULT_MASTER_PORT

    return rank_env(0, world_size, DEFAULT_MASTER_PORT)


#: the signals ``arborcc run`` passes on to its ranks (then it exits with 128 + the signal)
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

#: seconds ranks get to end after the launcher passed a signal on (or after a failure or
#: the timeout, SIGTERM) before they are killed (torchrun gives 30)
STOP_GRACE = 10.0


#: prctl's option that names the signal a child gets when its parent (thread) ends
PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGKILL) -> Callable[[], None]:
    """A function for a child process to call before it execs (``preexec_fn``) or first
    thing after a fork: the child gets ``sig`` when the thread that started it ends (Linux
    ``prctl(PR_SET_PDEATHSIG)``, so a launcher killed with SIGKILL leaves no orphans), and
    ends at once if that parent already died before the call (its pid is then no longer
    the parent's). Elsewhere than Linux it does nothing."""
    if not sys.platform.startswith("linux"):
        return lambda: None
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl  # loaded before the fork: nothing to load in the child
    parent = os.getpid()

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl: nobody will send sig
            os.kill(os.getpid(), sig)
            os._exit(128 + int(sig))

    return arm


def _stop(procs: list, sig: int, grace: float = STOP_GRACE, received: list | None = None) -> None:
    """Send ``sig`` to every rank still running, give them ``grace`` seconds, then kill
    the rest; a second signal to the launcher (``received`` grows) kills them at once."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(sig)
    seen = len(received) if received is not None else 0
    deadline = time.monotonic() + grace
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        if received is not None and len(received) > seen:
            break
        time.sleep(0.02)
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


class SignalsReceived:
    """While in use, the :data:`FORWARDED_SIGNALS` this process receives are recorded in
    ``received`` instead of ending it (main thread only: elsewhere nothing is caught)."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self._before: dict[int, Any] = {}

    def __enter__(self) -> "SignalsReceived":
        import threading

        if threading.current_thread() is threading.main_thread():
            for sig in FORWARDED_SIGNALS:
                self._before[sig] = signal.signal(sig, lambda signum, frame: self.received.append(signum))
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._before.items():
            signal.signal(sig, handler)


#: seconds the other ranks get to end by themselves after one failed (a rank waiting on
#: the failed one finds it gone within 0.1 s, then reports; a busy machine slows that)
FAILURE_GRACE = 10.0


def run_script(world_size: int, argv: list[str], timeout: float | None = None) -> int:
    """Run ``python argv...`` on ``world_size`` local ranks; the first failing rank's exit
    status (0 if all succeed). When a rank fails, the others are stopped as soon as they
    have all ended, or after :data:`FAILURE_GRACE` seconds (or the timeout) at most.
    SIGINT, SIGTERM and SIGHUP are passed on to the ranks, which get :data:`STOP_GRACE`
    seconds to end before they are killed; the status is then 128 + the signal (130 for
    SIGINT). Every rank gets SIGKILL when the launcher dies (:func:`die_with_parent`).
    The caller (``arborcc run``) has checked ``world_size`` and ``timeout``."""
    port, secret = free_port_pair(), job_secret()
    procs: list[subprocess.Popen] = []
    deadline = None if timeout is None else time.monotonic() + timeout
    status = 0
    with SignalsReceived() as signals:
        try:
            arm = die_with_parent()
            for r in range(world_size):
                if signals.received:
                    break
                env = rank_env(r, world_size, port, secret=secret)
                procs.append(subprocess.Popen([sys.executable, *argv], env=env, preexec_fn=arm))
            while not signals.received and any(p.poll() is None for p in procs):
                failed = [p for p in procs if p.poll() not in (None, 0)]
                if failed:
                    status = failed[0].returncode
                    # let the others find the failure and report their view of it
                    grace_end = time.monotonic() + FAILURE_GRACE
                    if deadline is not None:
                        grace_end = min(grace_end, deadline)
                    while (not signals.received and any(p.poll() is None for p in procs)
                           and time.monotonic() < grace_end):
                        time.sleep(0.02)
                    break
                if deadline is not None and time.monotonic() > deadline:
                    print(f"arborcc run: timed out after {timeout:g} s; stopping every rank", file=sys.stderr)
                    status = 124
                    break
                time.sleep(0.02)
        finally:  # a signal is passed on; a failure or the timeout stops the rest with SIGTERM
            if signals.received:
                name = signal.Signals(signals.received[0]).name
                print(f"arborcc run: {name}: passed on to every rank (killed after {STOP_GRACE:g} s)", file=sys.stderr)
            _stop(procs, signals.received[0] if signals.received else signal.SIGTERM, received=signals.received)
    if signals.received:
        return 128 + signals.received[0]
    if status == 0:
        status = next((p.returncode for p in procs if p.returncode), 0)
    return status if status >= 0 else 128 - status


def _child(fn, rank: int, world_size: int, port: int, secret: str, args: tuple, queue,
           arm: Callable[[], None]) -> None:
    arm()  # killed when the process that runs run_ranks dies
    os.environ.update(rank_env(rank, world_size, port, {}, secret))
    try:
        result = fn(*args)
        queue.put((rank, True, result))
    except BaseException as e:  # report every failure to the parent, then exit non-zero
        queue.put((rank, False, f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=-3)}"))
        queue.close()
        queue.join_thread()  # the message must leave before the process does
        os._exit(1)


def run_ranks(fn: Callable[..., Any], world_size: int, args: tuple = (), timeout: float = 60.0) -> list[Any]:
    """``fn(*args)`` on every rank (forked, torchrun's environment set); the results in rank
    order. CommunicationError if a rank fails or the hard timeout passes (ranks killed)."""
    limit("local-ranks").check(world_size, "-n", what="local ranks")
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    port, secret = free_port_pair(), job_secret()
    arm = die_with_parent()
    procs = [ctx.Process(target=_child, args=(fn, r, world_size, port, secret, args, queue, arm), daemon=True)
             for r in range(world_size)]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    errors: dict[int, str] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(results) + len(errors) < world_size:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                rank, ok, value = queue.get(timeout=min(left, 0.2))
            except Exception:  # queue.Empty: check for ranks that died without a word
                dead = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0) and r not in errors
                        and r not in results]
                if dead and queue.empty():
                    time.sleep(0.2)
                    if queue.empty():
                        for r in dead:
                            errors[r] = f"exited with status {procs[r].exitcode}"
                continue
            (results if ok else errors)[rank] = value
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
        for p in procs:
            p.join(5)
        queue.close()
    if errors:
        first = min(errors)
        raise CommunicationError(f"rank {first} failed: {errors[first]}")
    if len(results) < world_size:
        missing = sorted(set(range(world_size)) - set(results))
        raise CommunicationError(f"ranks {missing} did not finish within {timeout:g} s (killed)")
    return [results[r] for r in range(world_size)]



