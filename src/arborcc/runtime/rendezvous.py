"""How the ranks of one machine find each other: torchrun's environment and a short
exchange over loopback TCP in which every rank proves it belongs to this job.

torchrun (and ``arborcc run``) set ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR`` and ``MASTER_PORT``. ``MASTER_PORT`` itself is left to
torch.distributed's store, so a script may use both; arborcc listens on
``ARBORCC_MASTER_PORT`` if set, else ``MASTER_PORT + 1``. The data plane is shared
memory, so every rank must be on this machine: ``MASTER_ADDR`` must be a loopback
address. The variables are read and checked by :mod:`arborcc.runtime.environment`
(:meth:`Settings.local_launch`).

The exchange. Rank 0 listens and serves every connection at once (non-blocking sockets
and one selector, so no connection holds up another). It greets each with a magic, the
protocol version and a fresh random nonce; the connecting rank answers with the magic,
the version, its ``RANK`` and ``WORLD_SIZE`` and ``HMAC-SHA256(job identity, nonce |
rank | world size)``. Rank 0 admits the connection as that rank when the version is its
own, the proof is right, the world size is its own and the rank is one it has not yet
admitted; otherwise it answers with the reason (that rank then fails at once, naming
the port) and closes it. A connection that has not proved itself within
:data:`HANDSHAKE_SECONDS` (less when the job's timeout is shorter) is closed without an
answer - a rank whose proof was that slow connects again. Nothing rank 0 has not
admitted counts as a rank or hears the segment's name; when every rank is admitted,
rank 0 creates the segment and sends each its name (or, when it gives up, its error).

The job identity (:func:`job_identity`): ``ARBORCC_JOB_SECRET``, which ``arborcc run``
and :func:`arborcc.runtime.launch.run_ranks` set to a random secret per launch; else
torchrun's ``TORCHELASTIC_RUN_ID`` (unless ``none``) with
``TORCHELASTIC_RESTART_COUNT``, so a restarted job's ranks never join the dying one's;
else none (ranks started by hand): then the magic, the version, the world size and the
rank number are still checked, but two such jobs of one world size on one port are not
told apart.

Why a challenge and not the secret (or a hash of it) in the first message: with the
standard library's ``hmac`` and ``secrets`` it costs microseconds, the secret never
crosses the socket, and a proof another process on the machine sees cannot be replayed
(each connection has its own nonce), where a hash of the secret would be a password
anyone who saw it could send.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import selectors
import socket
import struct
import time
from collections import Counter
from dataclasses import dataclass, field

from arborcc.debuglog import LOGGER
from arborcc.runtime.errors import CommunicationError

log = logging.getLogger(f"{LOGGER}.runtime")

#: opens rank 0's greeting and every rank's hello
MAGIC = b"ARBORCC\x00"
#: the exchange's version; ranks of another version are refused by name
VERSION = 1
#: rank 0's greeting: magic, version, nonce
GREETING = struct.Struct("!8sH16s")
#: a rank's hello: magic, version, rank, world size, proof (HMAC-SHA256)
HELLO = struct.Struct("!8sHii32s")
#: rank 0's answer: what it is (:data:`NAME`, :data:`REFUSED`, :data:`GAVE_UP`), the length of the text after it
ANSWER = struct.Struct("!Bi")
NAME, REFUSED, GAVE_UP = 0, 1, 2
#: the longest answer text a rank reads
MAX_ANSWER_BYTES = 4096
#: a connection has this long (at most the job's timeout) to prove itself
HANDSHAKE_SECONDS = 2.0


@dataclass(frozen=True)
class LaunchEnv:
    """Where this rank meets the others (:meth:`arborcc.runtime.environment.Settings.local_launch`)
    and the job's identity (:func:`job_identity`; None: ranks started by hand)."""

    rank: int
    world_size: int
    local_rank: int
    address: str
    port: int
    identity: bytes | None = None


def job_identity(secret: str | None, run_id: str | None, restart_count: int | None) -> bytes | None:
    """The key every rank of the job proves it knows: ``ARBORCC_JOB_SECRET``, else
    torchrun's run id (``TORCHELASTIC_RUN_ID``, unless ``none``) and restart count, else
    None (no identity)."""
    if secret:
        return b"secret:" + secret.encode()
    if run_id and run_id != "none":
        return f"torchelastic:{run_id}:{restart_count or 0}".encode()
    return None


def proof(identity: bytes | None, nonce: bytes, rank: int, world_size: int) -> bytes:
    """HMAC-SHA256 of the nonce, the rank and the world size under the job's identity."""
    return hmac.new(identity or b"", nonce + struct.pack("!ii", rank, world_size), hashlib.sha256).digest()


#: why rank 0 refused a connection: how its error counts them
SILENT = "sent no proof in time"
CLOSED = "closed before proving itself"
NOT_ARBORCC = "not an arborcc rank"
OTHER_VERSION = "another rendezvous version"
OTHER_JOB = "another job's rank"
OTHER_WORLD = "another world size"
NOT_A_RANK = "not a rank of this job"
TAKEN = "a rank that had already joined"


@dataclass
class Pending:
    """A connection rank 0 has greeted that has not yet proved itself."""

    nonce: bytes
    deadline: float
    data: bytearray = field(default_factory=bytearray)


class NameServer:
    """Rank 0's side: admit every other rank (:meth:`accept`), then give them the
    segment's name (:meth:`send`) or rank 0's error (:meth:`give_up`). Creating the
    segment between the two keeps the time a named segment exists without every rank
    knowing its name as short as possible."""

    def __init__(self, where: LaunchEnv, timeout: float, handshake: float = HANDSHAKE_SECONDS):
        self.where, self.timeout = where, timeout
        self.deadline = time.monotonic() + timeout
        self.handshake = min(handshake, timeout)
        self.conns: dict[int, socket.socket] = {}  #: admitted rank -> its connection
        self.refused: Counter[str] = Counter()  #: connections refused, by reason

    def accept(self) -> None:
        """Wait until every other rank is admitted; CommunicationError naming the ranks
        that never proved themselves (and counting the connections refused) after the
        timeout, after which the admitted ranks have been told and every connection closed."""
        where = self.where
        if where.world_size == 1:
            return
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        selector = selectors.DefaultSelector()
        pending: dict[socket.socket, Pending] = {}
        try:
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                server.bind((where.address, where.port))
            except OSError as e:
                raise CommunicationError(f"rank 0: cannot listen on {where.address}:{where.port}: "
                                         f"{e.strerror} (another job's rank 0? give each job its own MASTER_PORT)"
                                         ) from None
            server.listen(socket.SOMAXCONN)
            server.setblocking(False)
            selector.register(server, selectors.EVENT_READ)
            while len(self.conns) < where.world_size - 1:
                now = time.monotonic()
                for conn in [c for c, p in pending.items() if p.deadline <= now]:  # all of them at the deadline
                    self._refuse(selector, pending, conn, SILENT)
                if now >= self.deadline:
                    error = self.missing()  # before anything is closed
                    self.give_up(error)
                    raise CommunicationError(f"rank 0: {error}")
                wake = min([self.deadline, *(p.deadline for p in pending.values())])
                for key, _ in selector.select(max(0.0, wake - now)):
                    conn = key.fileobj
                    if conn is server:
                        self._greet(server, selector, pending)
                    elif conn in pending:
                        self._read_hello(conn, selector, pending)
                    else:
                        self._admitted_spoke(conn, key.data, selector)
        except BaseException:
            self.close()
            raise
        finally:
            for conn in pending:
                conn.close()
            selector.close()
            server.close()
        for conn in self.conns.values():
            conn.setblocking(True)
            conn.settimeout(max(self.handshake, 1.0))
        if self.refused:
            log.info("rank 0: %s", self.refusals())

    def missing(self) -> str:
        """What went wrong when the timeout passed: the ranks not admitted, and the
        connections refused (``rank 2 never arrived within 5 s; 1 other connection ...``)."""
        missing = sorted(set(range(1, self.where.world_size)) - set(self.conns))
        which = f"rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))}"
        refused = f"; {self.refusals()}" if self.refused else ""
        return f"{which} never arrived within {self.timeout:g} s{refused}"

    def refusals(self) -> str:
        """``3 other connections were refused as not this job's ranks (2 sent no proof in time, 1 ...)``"""
        total = sum(self.refused.values())
        why = ", ".join(f"{n} {reason}" for reason, n in self.refused.most_common())
        return (f"{total} other connection{'s were' if total > 1 else ' was'} refused as not this job's "
                f"rank{'s' if total > 1 else ''} ({why}) on {self.where.address}:{self.where.port}")

    def send(self, name: str) -> None:
        """Tell every admitted rank the segment's name, then close the connections (a
        rank gone meanwhile is found by the start-up's wait for every rank to attach)."""
        self._answer_all(NAME, name)

    def give_up(self, error: str) -> None:
        """Tell every admitted rank why rank 0 gave up (they report ``rank N: rank 0 gave
        up: <error>``), then close the connections."""
        self._answer_all(GAVE_UP, error)

    def close(self) -> None:
        for conn in self.conns.values():
            conn.close()
        self.conns = {}

    # -- one connection ---------------------------------------------------------------

    def _answer_all(self, kind: int, text: str) -> None:
        try:
            for conn in self.conns.values():
                try:
                    conn.sendall(answer(kind, text))
                except OSError:
                    pass
        finally:
            self.close()

    def _greet(self, server: socket.socket, selector, pending: dict) -> None:
        """Accept every connection waiting and send each its greeting and nonce."""
        while True:
            try:
                conn, _ = server.accept()
            except OSError:  # none left (or none can be accepted now: the next select tries again)
                return
            conn.setblocking(False)
            nonce = secrets.token_bytes(GREETING.size - 10)
            greeting = GREETING.pack(MAGIC, VERSION, nonce)
            try:
                sent = conn.send(greeting)
            except OSError:
                sent = 0
            if sent != len(greeting):  # an empty socket buffer takes 26 bytes at once: the peer is gone
                conn.close()
                self.refused[CLOSED] += 1
                continue
            pending[conn] = Pending(nonce, min(time.monotonic() + self.handshake, self.deadline))
            selector.register(conn, selectors.EVENT_READ)

    def _read_hello(self, conn: socket.socket, selector, pending: dict) -> None:
        hello = pending[conn]
        try:
            part = conn.recv(HELLO.size - len(hello.data))
        except BlockingIOError:
            return
        except OSError:
            part = b""
        if not part:
            self._refuse(selector, pending, conn, CLOSED)
            return
        hello.data += part
        if not MAGIC.startswith(bytes(hello.data[:len(MAGIC)])):  # an HTTP request, a port scan: at once
            self._refuse(selector, pending, conn, NOT_ARBORCC)
            return
        if len(hello.data) < HELLO.size:
            return
        _, version, rank, world_size, given = HELLO.unpack(bytes(hello.data))
        size = self.where.world_size
        if version != VERSION:
            self._refuse(selector, pending, conn, OTHER_VERSION,
                         f"rank 0 speaks rendezvous version {VERSION}, this rank {version} (two arborcc versions?)")
        elif not hmac.compare_digest(given, proof(self.where.identity, hello.nonce, rank, world_size)):
            self._refuse(selector, pending, conn, OTHER_JOB,
                         "this port's rendezvous belongs to another job (its job identity, ARBORCC_JOB_SECRET or "
                         "torchrun's run id and restart count, differs): give each job its own MASTER_PORT")
        elif world_size != size:
            self._refuse(selector, pending, conn, OTHER_WORLD,
                         f"this rank says WORLD_SIZE={world_size}, the job listening here has {size} ranks "
                         "(another job on this port?)")
        elif not 0 < rank < size:
            self._refuse(selector, pending, conn, NOT_A_RANK,
                         f"RANK={rank} is not a rank that joins rank 0 (1 to {size - 1})")
        elif rank in self.conns:
            self._refuse(selector, pending, conn, TAKEN,
                         f"rank {rank} has already joined (two processes with RANK={rank}?)")
        else:
            del pending[conn]
            selector.modify(conn, selectors.EVENT_READ, rank)
            self.conns[rank] = conn

    def _admitted_spoke(self, conn: socket.socket, rank: int, selector) -> None:
        """An admitted rank sends nothing more: data or end of file means it left (it
        died, or gave up waiting); its rank is free again."""
        try:
            conn.recv(1)
        except BlockingIOError:  # woken for nothing
            return
        except OSError:
            pass
        selector.unregister(conn)
        conn.close()
        del self.conns[rank]
        log.info("rank 0: rank %d left the rendezvous before it was complete", rank)

    def _refuse(self, selector, pending: dict, conn: socket.socket, reason: str, text: str | None = None) -> None:
        """Close a connection that did not prove itself, telling it why when it is an
        arborcc rank (``text``), and count it."""
        del pending[conn]
        selector.unregister(conn)
        if text is not None:
            try:
                conn.send(answer(REFUSED, text))
            except OSError:
                pass
        conn.close()
        self.refused[reason] += 1


def answer(kind: int, text: str) -> bytes:
    payload = text.encode()[:MAX_ANSWER_BYTES]
    return ANSWER.pack(kind, len(payload)) + payload


def fetch_name(where: LaunchEnv, timeout: float) -> str:
    """Ranks other than 0: prove this rank to rank 0 and get the segment's name.
    Connections are tried again until the timeout while nothing listens or a connection
    ends without an answer; a refusal, or something other than an arborcc rank 0 on the
    port, is an error at once."""
    deadline = time.monotonic() + timeout
    last_error = "no answer"
    at = f"{where.address}:{where.port}"
    while time.monotonic() < deadline:
        try:
            left = max(0.1, deadline - time.monotonic())
            with socket.create_connection((where.address, where.port), timeout=min(left, HANDSHAKE_SECONDS)) as s:
                s.settimeout(min(left, HANDSHAKE_SECONDS))
                magic, version, nonce = GREETING.unpack(_recv_exact(s, GREETING.size))
                if magic != MAGIC:
                    raise CommunicationError(f"rank {where.rank}: {at} is not an arborcc rendezvous (another program "
                                             "listens there): give the job another MASTER_PORT")
                if version != VERSION:
                    raise CommunicationError(f"rank {where.rank}: rank 0 at {at} speaks rendezvous version {version}, "
                                             f"this rank {VERSION} (two arborcc versions?)")
                s.sendall(HELLO.pack(MAGIC, VERSION, where.rank, where.world_size,
                                     proof(where.identity, nonce, where.rank, where.world_size)))
                # admitted, it waits for rank 0's answer a little past its own timeout, so that
                # rank 0's verdict (which ranks never arrived) reaches it first
                s.settimeout(max(0.1, deadline - time.monotonic()) + HANDSHAKE_SECONDS)
                kind, length = ANSWER.unpack(_recv_exact(s, ANSWER.size))
                if kind not in (NAME, REFUSED, GAVE_UP) or not 0 < length <= MAX_ANSWER_BYTES:
                    raise CommunicationError(f"rank {where.rank}: rank 0 at {at} sent an answer this rank cannot "
                                             "read (two arborcc versions?)")
                text = _recv_exact(s, length).decode(errors="replace")
                if kind == NAME:
                    return text
                text = "".join(c if c.isprintable() else "?" for c in text)
                if kind == REFUSED:
                    raise CommunicationError(f"rank {where.rank}: refused by the rendezvous at {at}: {text}")
                raise CommunicationError(f"rank {where.rank}: rank 0 gave up: {text}")
        except (OSError, ConnectionError) as e:
            last_error = getattr(e, "strerror", None) or str(e) or type(e).__name__
            time.sleep(0.02)
    raise CommunicationError(f"rank {where.rank}: rank 0 did not answer at {at} within {timeout:g} s ({last_error})")


def _recv_exact(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        part = s.recv(n - len(data))
        if not part:
            raise ConnectionError("connection closed")
        data += part
    return data
