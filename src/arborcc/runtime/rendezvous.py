"""How the ranks of one machine find each other: torchrun's environment and a one-shot
exchange over loopback TCP.

torchrun (and ``arborcc run``) set ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR`` and ``MASTER_PORT``. ``MASTER_PORT`` itself is left to
torch.distributed's store, so a script may use both; arborcc listens on
``ARBORCC_MASTER_PORT`` if set, else ``MASTER_PORT + 1``. Rank 0 accepts one connection
per other rank, each says its rank, and rank 0 answers with the name of the
communicator's shared-memory segment. The data plane is shared memory, so every rank
must be on this machine: ``MASTER_ADDR`` must be a loopback address. The variables are
read and checked by :mod:`arborcc.runtime.environment` (:meth:`Settings.local_launch`).
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass

from arborcc.runtime.errors import CommunicationError


@dataclass(frozen=True)
class LaunchEnv:
    """Where this rank meets the others (:meth:`arborcc.runtime.environment.Settings.local_launch`)."""

    rank: int
    world_size: int
    local_rank: int
    address: str
    port: int


class NameServer:
    """Rank 0's side: wait for every other rank (:meth:`accept`), then give them the
    segment's name (:meth:`send`). Creating the segment between the two keeps the time a
    named segment exists without every rank knowing its name as short as possible."""

    def __init__(self, where: LaunchEnv, timeout: float):
        self.where, self.timeout = where, timeout
        self.deadline = time.monotonic() + timeout
        self.conns: dict[int, socket.socket] = {}

    def accept(self) -> None:
        where = self.where
        if where.world_size == 1:
            return
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                server.bind((where.address, where.port))
            except OSError as e:
                raise CommunicationError(f"rank 0: cannot listen on {where.address}:{where.port}: "
                                         f"{e.strerror}") from None
            server.listen(where.world_size)
            while len(self.conns) < where.world_size - 1:
                left = self.deadline - time.monotonic()
                if left <= 0:
                    self.close()
                    missing = sorted(set(range(1, where.world_size)) - set(self.conns))
                    raise CommunicationError(f"rank 0: rank{'s' if len(missing) > 1 else ''} "
                                             f"{', '.join(map(str, missing))} never arrived within {self.timeout:g} s")
                server.settimeout(left)
                try:
                    conn, _ = server.accept()
                except TimeoutError:
                    continue
                conn.settimeout(max(0.1, self.deadline - time.monotonic()))
                try:
                    (peer,) = struct.unpack("!i", _recv_exact(conn, 4))
                except (OSError, ConnectionError):
                    conn.close()
                    continue
                self.conns[peer] = conn

    def send(self, name: str) -> None:
        payload = name.encode()
        try:
            for conn in self.conns.values():
                conn.sendall(struct.pack("!i", len(payload)) + payload)
        finally:
            self.close()

    def close(self) -> None:
        for conn in self.conns.values():
            conn.close()
        self.conns = {}


def fetch_name(where: LaunchEnv, timeout: float) -> str:
    """Ranks other than 0: the segment name from rank 0."""
    deadline = time.monotonic() + timeout
    last_error = "no answer"
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((where.address, where.port), timeout=max(0.1, deadline - time.monotonic())) as s:
                s.settimeout(max(0.1, deadline - time.monotonic()))
                s.sendall(struct.pack("!i", where.rank))
                (length,) = struct.unpack("!i", _recv_exact(s, 4))
                return _recv_exact(s, length).decode()
        except (OSError, ConnectionError) as e:
            last_error = getattr(e, "strerror", None) or str(e) or type(e).__name__
            time.sleep(0.02)
    raise CommunicationError(f"rank {where.rank}: rank 0 did not answer at {where.address}:{where.port} "
                             f"within {timeout:g} s ({last_error})")


def _recv_exact(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        part = s.recv(n - len(data))
        if not part:
            raise ConnectionError("connection closed")
        data += part
    return data
